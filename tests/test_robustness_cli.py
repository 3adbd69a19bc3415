"""Issue 14 on the command line: non-finite results, output paths, re-running a saved result, --threads."""

import os
import stat

import pytest
from threadpoolctl import threadpool_info

from accum.cli import main
from accum.simulations.results import read_record


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


@pytest.mark.parametrize("family, param", [
    ("so2-accumulated", "sigma=1e308"), ("so2-accumulated", "mu=1e308"), ("lie-walk", "sigma=1e300"),
])
def test_overflowing_parameters_never_write_a_result(family, param, tmp_path, capsys):
    out = tmp_path / "r.json"
    rc = main(["measure", "coherence", "--family", family, "--param", param, "--opt", "steps=4",
               "--opt", "samples=20", "--json", str(out)])
    line = one_error_line(capsys)
    name = param.split("=")[0]
    assert rc == 2 and f"parameter {name!r}" in line and "allowed" in line  # refused up front, with its range
    assert list(tmp_path.iterdir()) == []


def test_check_with_an_overflowing_parameter_is_one_line(tmp_path, capsys):
    rc = main(["check", "so2-accumulated", "--param", "sigma=1e300", "--samples", "200", "--json", str(tmp_path / "c.json")])
    line = one_error_line(capsys)
    assert rc == 2 and "parameter 'sigma'" in line and "allowed" in line  # refused up front, with its range
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("path, message", [
    ("{tmp}/newdir/", "ends in a path separator"),
    ("{tmp}", "is a directory"),
    ("/proc/accum-result.json", "cannot write there"),
    ("/proc/self/accum/r.json", "/proc/self is not writable"),
])
@pytest.mark.parametrize("command", [
    ["measure", "coherence", "--family", "householder", "--opt", "steps=3", "--opt", "samples=10"],
    ["check", "householder", "--samples", "100"],
    ["bench"],
])
def test_unwritable_output_is_refused_before_any_work(command, path, message, tmp_path, capsys, monkeypatch):
    for work in ("accum.simulations.cli.run_plan", "accum.theory.checks.check", "accum.simulations.bench.run_benchmarks"):
        monkeypatch.setattr(work, lambda *a, **k: pytest.fail("work ran"))
    assert main([*command, "--json", path.format(tmp=tmp_path)]) == 2
    assert message in one_error_line(capsys)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", [
    ["measure", "coherence", "--family", "householder", "--opt", "steps=3", "--opt", "samples=10"],
    ["check", "householder", "--samples", "100"],
    ["verify", "--quick"],
    ["bench"],
])
def test_an_existing_output_that_is_not_a_regular_file_is_left_alone(command, tmp_path, capsys, monkeypatch):
    for work in ("accum.simulations.cli.run_plan", "accum.theory.checks.check", "accum.report.run_report",
                 "accum.simulations.bench.run_benchmarks"):
        monkeypatch.setattr(work, lambda *a, **k: pytest.fail("work ran"))
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)                           # stands for /dev/null: os.replace would put a regular file there
    assert main([*command, "--json", str(fifo)]) == 2
    assert f"--json {fifo}: exists and is not a regular file" in one_error_line(capsys)
    assert os.listdir(tmp_path) == ["pipe"] and stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_file_name_too_long_is_refused_naming_the_option(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("accum.simulations.cli.run_plan", lambda *a, **k: pytest.fail("work ran"))
    assert main(["measure", "coherence", "--family", "householder", "--json", str(tmp_path / ("a" * 300))]) == 2
    line = one_error_line(capsys)
    assert line.startswith("accum measure: error: --json ") and "File name too long" in line
    assert list(tmp_path.iterdir()) == []


def test_json_into_a_new_folder_writes_the_file_inside_it(tmp_path, capsys):
    out = tmp_path / "newdir" / "r.json"
    assert main(["measure", "coherence", "--family", "householder", "--opt", "steps=3", "--opt", "samples=10",
                 "--json", str(out)]) == 0
    record = read_record(out)
    assert record["result"]["n"] == 10 and os.listdir(out.parent) == ["r.json"]
    assert record["platform"]["threads"]["threads"] >= 1          # the thread settings are recorded


def test_measure_from_a_saved_result_reruns_it_exactly(tmp_path, capsys):
    first, again = tmp_path / "a.json", tmp_path / "b.json"
    assert main(["measure", "near-weight", "--family", "so2-accumulated", "--param", "dim=6", "--param", "law=uniform",
                 "--param", "a=0.7", "--opt", "n_max=40", "--opt", "points=3", "--opt", "samples=9", "--opt", "chunk=7",
                 "--seed", "11", "--json", str(first)]) == 0
    assert main(["measure", "--from", str(first), "--json", str(again)]) == 0
    a, b = read_record(first), read_record(again)
    assert a["config"] == b["config"] and a["seed"] == b["seed"] == 11
    assert a["result"] == b["result"]                                   # the same numbers, bit for bit
    capsys.readouterr()
    assert main(["measure", "--from", str(first), "--seed", "3"]) == 2
    assert "leave out --seed" in one_error_line(capsys)
    assert main(["measure", "--from", str(tmp_path / "missing.json")]) == 2
    assert f"--from {tmp_path / 'missing.json'}: no such result file" in one_error_line(capsys)
    assert main(["measure", "--from", ""]) == 2
    assert "--from: empty path" in one_error_line(capsys)
    first.write_text(first.read_text().replace('"n": 9', '"n": 1e999'))
    assert main(["measure", "--from", str(first)]) == 2
    assert f"--from {first}: result.n is not a finite number" in one_error_line(capsys)
    assert main(["measure", "--family", "haar"]) == 2
    assert "give QUANTITY and --family, or --from" in one_error_line(capsys)


NOT_A_NUMBER = [  # an integer option given "abc" -> the one error line names the option and its allowed range
    (["measure", "coherence", "--family", "householder", "--seed"], "--seed must be an integer >= 0, got 'abc'"),
    (["measure", "coherence", "--family", "householder", "--threads"], "--threads: expected an integer in [1, 1024]"),
    (["check", "householder", "--samples"], "--samples must be an integer in [10, 10000000], got 'abc'"),
    (["check", "householder", "--k-max"], "--k-max must be an integer in [1, 1024], got 'abc'"),
    (["verify", "--quick", "--calibrate"], "--calibrate must be an integer in [1, 100000], got 'abc'"),
    (["sweep", "grid.toml", "--workers"], "--workers: expected an integer in [1, 1024], got 'abc'"),
    (["bench", "--repeats"], "--repeats must be an integer in [1, 100], got 'abc'"),
    (["figures", "--quick", "--seed"], "--seed must be an integer >= 0, got 'abc'"),
    (["probe", "train", "--out", "run", "--seq-len"], "--seq-len must be an integer in [2, 65536], got 'abc'"),
    (["probe", "eval", "--run", "run", "--multipliers", "1"], "--multipliers must be a non-empty list of distinct integers"),
    (["probe", "sweep", "--out", "run", "--seeds", "0", "1"], "--seeds must be at least 3 distinct integers in [0, 2^63)"),
]


@pytest.mark.parametrize("argv, message", NOT_A_NUMBER, ids=[" ".join(a[:1] + a[-1:]) for a, _ in NOT_A_NUMBER])
def test_an_integer_option_that_is_not_a_number_names_its_range(argv, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main([*argv, "abc"]) == 2
    line = one_error_line(capsys)
    assert message in line and "invalid int value" not in line, line
    assert list(tmp_path.iterdir()) == []


def test_threads_option_sets_blas_threads_for_the_run(monkeypatch, capsys):
    seen = []
    real = __import__("accum.simulations.measure", fromlist=["run_plan"]).run_plan

    def spy(plan, **kwargs):
        seen.append({p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"})
        return real(plan, **kwargs)

    monkeypatch.setattr("accum.simulations.cli.run_plan", spy)
    for threads in (1, 2):
        assert main(["measure", "coherence", "--family", "householder", "--opt", "steps=3", "--opt", "samples=10",
                     "--threads", str(threads)]) == 0
    assert seen == [{1}, {2}]
    capsys.readouterr()  # the runs' first-sample lines ("family householder: HouseholderSteps, ...")
    for bad in ("0", "-1", "100000"):
        assert main(["measure", "coherence", "--family", "householder", "--threads", bad]) == 2
        assert "--threads: expected an integer in [1, 1024]" in one_error_line(capsys)


@pytest.mark.parametrize("command", ["measure", "check", "verify", "sweep", "bench", "figures"])
def test_every_compute_command_takes_threads(command, capsys):
    assert main([command, "--help"]) == 0
    assert "--threads N" in capsys.readouterr().out


@pytest.mark.parametrize("option", ["--out", "--results"])
def test_figures_refuse_an_unwritable_folder_before_any_work(option, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("accum.figures.make.make_figures", lambda *a, **k: pytest.fail("work ran"))
    paths = {"--out": str(tmp_path / "figs"), "--results": str(tmp_path / "data"), option: "/proc/accum-figures"}
    assert main(["figures", "--quick", "--out", paths["--out"], "--results", paths["--results"]]) == 2
    assert f"{option} /proc/accum-figures: cannot write there" in one_error_line(capsys)
    assert list(tmp_path.iterdir()) == []


def test_legitimately_unbounded_values_are_explained_not_saved_as_strings(tmp_path, capsys):
    assert main(["measure", "onset", "--family", "householder", "--param", "beta=0", "--opt", "steps=10",
                 "--opt", "samples=8", "--json", str(tmp_path / "o.json")]) == 2     # c(n) = 1: no onset
    line = one_error_line(capsys)
    assert "stays above eps = 0.05 up to steps = 10" in line and "use more steps" in line
    assert list(tmp_path.iterdir()) == []
    assert main(["measure", "score-gap", "--family", "rope", "--opt", "offset=5", "--opt", "samples=20",
                 "--json", str(tmp_path / "s.json")]) == 0                           # far scores without spread
    result = read_record(tmp_path / "s.json")["result"]
    assert result["gap_sd"] is None and "zero spread" in result["gap_sd_note"] and result["mean"] > 0


CASES_DRAWN = [("coherence", "householder", {"steps": 7, "samples": 33}), ("onset", "so2-accumulated", {"steps": 40, "samples": 21}),
               ("product-norm", "haar", {"steps": 5, "samples": 19}), ("window", "householder", {"context": 11, "samples": 17}),
               ("score-gap", "householder", {"offset": 13, "samples": 29}),
               ("near-weight", "haar", {"n_max": 50, "points": 3, "samples": 5, "chunk": 7}),
               ("far-residual", "householder", {"n_max": 50, "points": 3, "samples": 5, "chunk": 7}), ("drift", "haar", {"steps": 23})]


@pytest.mark.parametrize("quantity, family, options", CASES_DRAWN, ids=[c[0] for c in CASES_DRAWN])
def test_progress_total_is_exactly_the_steps_drawn(quantity, family, options):
    import numpy as np

    from accum.simulations.measure import STEPS_DRAWN, ProgressFamily, plan_measurement

    class Counter:
        drawn = 0

        def update(self, k):
            self.drawn += k

    plan = plan_measurement(quantity, family, {"dim": 4}, options)
    bar = Counter()
    with np.errstate(all="ignore"):
        plan.quantity.run(ProgressFamily(plan.family, bar), plan.options, np.random.default_rng(0))
    assert bar.drawn == STEPS_DRAWN[quantity](plan.options)          # the bar ends at 100%, not before or after
