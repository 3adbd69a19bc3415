"""The command-line contract: accum families / measure / bench, and bad input refused up front by every command."""

import json
import math
from dataclasses import replace

import pytest

from accum.cli import main
from accum.simulations.measure import QUANTITIES
from accum.simulations.results import read_record


def test_families_lists_every_family_with_ranges(capsys):
    assert main(["families"]) == 0
    out = capsys.readouterr().out
    for name in ("rope", "so2-accumulated", "householder", "haar", "givens", "lie-walk"):
        assert f"{name}:" in out
    assert "[0, 2]" in out and "module:ClassName" in out


def test_measure_writes_a_complete_record(tmp_path, capsys):
    path = tmp_path / "out.json"
    rc = main(["measure", "coherence", "--family", "householder", "--param", "dim=16", "--param", "beta=1",
               "--opt", "steps=8", "--opt", "samples=50", "--seed", "3", "--json", str(path)])
    assert rc == 0
    rec = read_record(path)
    assert rec["seed"] == 3 and rec["config"]["params"]["beta"] == 1.0 and rec["config"]["options"]["steps"] == 8
    assert len(rec["result"]["mean"]) == 9 and rec["result"]["n"] == 50
    assert math.isfinite(rec["timings"]["seconds"]) and rec["timings"]["seconds"] >= 0
    assert json.loads(capsys.readouterr().out)["quantity"] == "coherence"


def test_measure_user_family_by_import_path(capsys):
    assert main(["measure", "coherence", "--family", "accum.simulations.examples:SignedPermutation",
                 "--param", "dim=5", "--opt", "steps=3", "--opt", "samples=20"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["family"] == "accum.simulations.examples:SignedPermutation" and out["n"] == 20
    assert len(out["mean"]) == 4 and out["mean"][0] == pytest.approx(1.0)     # c(0) = E[q^T k] = 1 for unit q = k


def test_measure_bad_input_exits_2_naming_the_parameter(tmp_path, capsys):
    path = tmp_path / "never.json"
    rc = main(["measure", "coherence", "--family", "householder", "--param", "beta=2.5", "--json", str(path)])
    assert rc == 2 and not path.exists()
    assert "'beta' = 2.5 is out of range; allowed: a finite number in [0, 2]" in capsys.readouterr().err
    assert main(["measure", "window", "--family", "haar", "--opt", "context=0"]) == 2
    assert "'context'" in capsys.readouterr().err
    assert main(["measure", "coherence", "--family", "haar", "--param", "beta"]) == 2
    assert "key=value" in capsys.readouterr().err


def test_measure_on_the_torch_backend_records_its_device(tmp_path):
    """``--opt device=cpu`` draws and sums with torch (another random stream of the same law): the record says
    so, re-runs from its config, and agrees with the numpy draws within standard errors (normal, budget 1e-5)."""
    from conftest import assert_within

    path = tmp_path / "t.json"
    args = ["coherence", "--family", "so2-accumulated", "--param", "mu=0.3", "--opt", "steps=6", "--opt", "samples=4000"]
    assert main(["measure", *args, "--opt", "device=cpu", "--json", str(path)]) == 0
    torch_rec = read_record(path)
    assert torch_rec["config"]["options"]["device"] == "cpu"
    assert main(["measure", *args, "--json", str(tmp_path / "n.json")]) == 0
    numpy_rec = read_record(tmp_path / "n.json")
    assert numpy_rec["config"]["options"]["device"] == "numpy"
    a, b = torch_rec["result"], numpy_rec["result"]
    diff = [x - y for x, y in zip(a["mean"][1:], b["mean"][1:])]
    se = [math.hypot(x, y) for x, y in zip(a["stderr"][1:], b["stderr"][1:])]
    assert_within(diff, se, 0.0, 1e-5)
    assert main(["measure", "--from", str(path), "--json", str(tmp_path / "again.json")]) == 0
    assert read_record(tmp_path / "again.json")["result"]["mean"] == a["mean"]


def test_measure_from_takes_the_seed_of_the_record(tmp_path, capsys):
    """``measure_job`` (this module's reading of --from) hands on the record's seed: a record at --seed 7 re-runs at
    seed 7 with the same numbers, and its seed is not the default 0 (which gives other numbers)."""
    args = ["score-gap", "--family", "householder", "--param", "dim=5", "--opt", "offset=3", "--opt", "samples=40"]
    first, again, zero = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "z.json"
    assert main(["measure", *args, "--seed", "7", "--json", str(first)]) == 0
    assert main(["measure", "--from", str(first), "--json", str(again)]) == 0
    assert main(["measure", *args, "--json", str(zero)]) == 0
    a, b, z = (read_record(p) for p in (first, again, zero))
    assert a["seed"] == b["seed"] == 7 and z["seed"] == 0
    assert a["result"] == b["result"] != z["result"]
    bad = json.loads(first.read_text())
    bad["seed"] = -4
    first.write_text(json.dumps(bad))
    capsys.readouterr()
    assert main(["measure", "--from", str(first)]) == 2
    assert f"--from {first}: seed must be an integer >= 0, got -4" in capsys.readouterr().err


def test_check_is_wired_and_its_exit_status_follows_the_condition(capsys):
    assert main(["check", "householder", "--param", "dim=6", "--param", "beta=1", "--samples", "600"]) == 0
    assert main(["check", "householder", "--param", "dim=6", "--param", "beta=0", "--samples", "600"]) == 1
    assert main(["check", "so2-accumulated", "--param", "dim=4", "--param", "law=lattice", "--param", "m=2",
                 "--samples", "600"]) == 1
    assert "spectral-gap condition: FAILS" in capsys.readouterr().out


def test_lazy_commands_parse_their_own_help(capsys):
    assert main(["figures", "--help"]) == 0 and "--out" in capsys.readouterr().out


def test_bench_ratio_verdicts_and_bad_repeats(capsys):
    from accum.simulations.bench import _ratio

    assert _ratio("x", 1.0, 2.0, 3.0, "slowdown")["meets"] is True
    assert _ratio("x", 7.0, 2.0, 3.0, "slowdown")["meets"] is False
    speedup = _ratio("x", 1.0, 40.0, 50.0, "speedup")
    assert speedup["ratio"] == 40.0 and speedup["meets"] is False
    assert _ratio("x", 1.0, 40.0, None, "speedup")["meets"] is None
    assert main(["bench", "--repeats", "0"]) == 2
    assert "--repeats must be an integer in [1, 100], got 0" in capsys.readouterr().err


@pytest.mark.parametrize("argv,named", [
    (["verify", "--seed", "-1"], "seed"),
    (["verify", "--budget", "2"], "--budget"),
    (["verify", "--markdown", "{file}/m.md"], "--markdown"),
    (["check", "rope", "--seed", "-1"], "seed"),
    (["check", "rope", "--json", "{file}/x.json"], "--json"),
    (["measure", "window", "--family", "rope", "--json", "{file}/x.json"], "--json"),
    (["measure", "window", "--family", "rope", "--json", "{dir}"], "--json"),
    (["bench", "--json", "{file}/x.json"], "--json"),
    (["figures", "--out", "{file}"], "--out"),
    (["figures", "--results", "{file}/r"], "--results"),
    (["figures", "--out", "{dir}/o", "--results", "{dir}/r", "--probes", "{dir}/none.json"], "--probes"),
    (["figures", "--out", "{dir}/o", "--results", "{dir}/r", "--probes", "{file}"], "--probes "),
    (["figures", "--out", "{dir}/o", "--results", "{dir}/r", "--probes", "{file}"], "corrupt probe results"),
    (["figures", "--out", "{dir}/o", "--results", "{dir}/r", "--probes", "/dev/null"], "--probes /dev/null"),
    (["verify", "--budget", "5e-324"], "--budget"),
    (["verify", "--json", "{dir}/a", "--markdown", "{dir}/a"], "--markdown"),
    (["check", "rope", "--k-max", "0"], "--k-max"),
    (["check", "haar", "--param", "dim=1024", "--samples", "1000"], "--samples"),
    (["measure", "coherence", "--family", "rope", "--json", ""], "--json"),
    (["measure", "near-weight", "--family", "rope", "--opt", "n_max=20", "--opt", "points=50"], "points"),
    (["bench", "--repeats", "1000"], "--repeats"),
    (["measure", "coherence", "--family", "householder", "--opt", "device=cpu"], "device=cpu"),
    (["measure", "near-weight", "--family", "so2-accumulated", "--param", "law=vonmises", "--opt", "device=cpu"],
     "device=cpu"),
    (["measure", "coherence", "--family", "rope", "--opt", "device=gpu"], "'device'"),
    (["measure", "window", "--family", "rope", "--opt", "device=cpu"], "unknown parameter(s) device"),
])
def test_bad_command_lines_exit_2_before_any_work(argv, named, tmp_path, capsys, monkeypatch):
    """Each refusal happens before the (seconds-long) computation and names the option."""
    def forbidden(*args, **kwargs):
        raise AssertionError("the computation ran before the command line was refused")
    for target in ("accum.report.run_report", "accum.theory.checks.check", "accum.simulations.bench.run_benchmarks",
                   "accum.figures.make.ensure"):
        monkeypatch.setattr(target, forbidden)
    for name, quantity in QUANTITIES.items():                         # measure validates, then runs the quantity
        monkeypatch.setitem(QUANTITIES, name, replace(quantity, run=forbidden))
    (tmp_path / "afile").write_text("")
    argv = [a.format(file=tmp_path / "afile", dir=tmp_path) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and named in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]
