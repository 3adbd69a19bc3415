"""Issue 32's fuzz classes, kept: signals at random moments, special files, deep and huge inputs, ranges that lie,
misbehaving user families, and the command-line conventions.  Every case is drawn from fixed seeds (the same cases
on every run) and the whole module stays well under a minute on two cores.

What each case asserts is the issue's promise: no traceback, one line naming the option and the file, exit status
2 for bad input and 128 + the signal (130, 143) for a signal, nothing half-written left behind, and a signal acted on promptly.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from accum.cli import COMMANDS, command_parser, main
from accum.simulations import inputs
from accum.simulations.measure import QUANTITIES
from conftest import exit_after_signal

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
#: the issue's bound is one second; the test allows for two busy cores shared with other work
SIGNAL_LATENCY_S = 3.0


def run_main(argv: list[str], cwd: Path) -> tuple[int, str, str]:
    """``accum argv`` in-process from folder ``cwd``: (exit status, stdout, stderr)."""
    out, err, here = io.StringIO(), io.StringIO(), os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(argv)
    finally:
        os.chdir(here)
    return rc, out.getvalue(), err.getvalue()


def assert_one_line(rc: int, err: str, *names: str, status: int = 2) -> None:
    lines = err.strip().splitlines()
    assert rc == status and len(lines) == 1 and "Traceback" not in err, (rc, err)
    assert all(name in lines[0] for name in names), (names, lines)


def leftovers(folder: Path) -> list[str]:
    """Temporary or hidden files anywhere below ``folder`` (a half-written result would be one)."""
    return [str(p) for p in folder.rglob("*") if p.name.startswith(".") or p.suffix == ".tmp"]


# ------------------------------------------------------------------------------------------- signals at random moments

GRID = ('quantity = "coherence"\nroot_seed = 1\nseeds = 2\noutput = "res"\n[options]\nsteps = 64\n'
        'samples = [20, 200000000]\n[[family]]\nname = "householder"\ndim = 8\n')
LONG = {  # every command, doing long work (or finishing early: the signal may then come too late, which is fine)
    "families": ["families"],
    "measure": ["measure", "coherence", "--family", "householder", "--opt", "steps=64", "--opt", "samples=200000000",
                "--json", "out/r.json"],
    "measure-haar": ["measure", "coherence", "--family", "haar", "--param", "dim=1024", "--json", "out/h.json"],
    "check": ["check", "householder", "--param", "dim=4096", "--samples", "14", "--json", "out/c.json"],
    "verify": ["verify", "--quick", "--workers", "1", "--json", "out/v.json"],
    "sweep": ["sweep", "grid.toml", "--workers", "1"],
    "figures": ["figures", "--quick", "--out", "out/figs", "--results", "out/data", "--workers", "1"],
    "bench": ["bench", "--json", "out/b.json"],
    "probe": ["probe", "report"],
}
rng = random.Random(32)
SIGNAL_CASES = [(name, rng.choice([signal.SIGINT, signal.SIGTERM]), round(rng.uniform(0.3, 2.5), 2))
                for name in sorted(LONG)]


@pytest.mark.serial
@pytest.mark.parametrize("name, sig, delay", SIGNAL_CASES, ids=[f"{n}-{s.name}-{d}s" for n, s, d in SIGNAL_CASES])
def test_a_signal_at_a_random_moment_ends_any_command_in_one_line(name, sig, delay, tmp_path):
    """The signal lands somewhere in start-up (imports: up to seconds for torch) or the work.  (Before 0.3 s the
    interpreter itself may still be starting, before any accum code runs: that window is Python's own.)"""
    (tmp_path / "grid.toml").write_text(GRID)
    (tmp_path / "out").mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "accum.cli", *LONG[name]], cwd=tmp_path, env=ENV,
                            start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        proc.wait(timeout=delay)
        finished = True
    except subprocess.TimeoutExpired:  # still running, so not reaped: its group id is still its own
        finished = False
        os.killpg(proc.pid, sig)
    err, latency = exit_after_signal(proc, 60.0, f"{name}: {sig.name}")
    assert "Traceback" not in err, err
    if not finished and proc.returncode == 128 + sig:
        assert err.strip().splitlines()[-1].startswith(f"accum {LONG[name][0]}: interrupted"), err
        assert latency < SIGNAL_LATENCY_S, (name, latency)
    else:  # it had finished (or finished as the signal came): a normal exit
        assert proc.returncode in (0, 1), (proc.returncode, err)
    assert leftovers(tmp_path) == []


# --------------------------------------------------------------------------------- special files, deep and huge inputs

def special_inputs(tmp: Path) -> dict[str, str]:
    """Inputs no command may read as data: a device, a FIFO, a folder, a dangling link, deep and huge documents."""
    os.mkfifo(tmp / "fifo")
    (tmp / "folder").mkdir()
    (tmp / "dangling").symlink_to(tmp / "nowhere")
    (tmp / "deep.json").write_text("[" * 5000)
    (tmp / "deep-ok.json").write_text("[" * 100 + "]" * 100)
    (tmp / "bigint.json").write_text('{"schema": ' + "7" * 5000 + "}")
    (tmp / "latin1.json").write_bytes(b'{"a": "\xe9"}')
    (tmp / "deep.toml").write_text("a = " + "[" * 3000 + "]" * 3000)
    (tmp / "deep-table.toml").write_text("a = " + "{b=" * 100 + "1" + "}" * 100)
    (tmp / "bigint.toml").write_text("quantity = " + "9" * 5000)
    (tmp / "dotted.toml").write_text("a" + ".a" * 100_000 + " = 1\n")  # quadratic in tomllib (issue 40: 3.86 GB)
    (tmp / "items.json").write_text("[" + "[]," * (inputs.MAX_JSON_ITEMS // 2) + "[]]")  # 0.6 GB of lists at most
    return {"device": "/dev/zero", "fifo": "fifo", "folder": "folder", "dangling": "dangling", "deep": "deep.json",
            "deep-ok": "deep-ok.json", "bigint": "bigint.json", "latin1": "latin1.json", "deep-toml": "deep.toml",
            "deep-table": "deep-table.toml", "bigint-toml": "bigint.toml", "dotted-toml": "dotted.toml",
            "items": "items.json"}


INPUT_OPTIONS = {  # what the message names -> argv with {} for the input path
    "--from": ["measure", "--from", "{}"],
    "": ["sweep", "{}", "--dry-run"],  # the grid file, named by its path
    "--sweep": ["probe", "report", "--sweep", "{}"],
}


@pytest.mark.parametrize("option", sorted(INPUT_OPTIONS))
def test_special_deep_and_huge_inputs_are_refused_in_one_line(option, tmp_path):
    names = special_inputs(tmp_path)
    for kind, name in names.items():
        argv = [a.replace("{}", name) for a in INPUT_OPTIONS[option]]
        rc, out, err = run_main(argv, tmp_path)
        assert_one_line(rc, err, f"{option} {name}".strip())
        assert out == "", (kind, out)
    assert leftovers(tmp_path) == []


def test_an_input_over_the_size_cap_is_read_no_further(tmp_path, monkeypatch):
    monkeypatch.setattr(inputs, "MAX_INPUT_BYTES", 1000)
    monkeypatch.setattr(inputs.read_text, "__defaults__", (1000,))
    (tmp_path / "big.json").write_text(json.dumps({"x": "y" * 5000}))
    rc, _, err = run_main(["measure", "--from", "big.json"], tmp_path)
    assert_one_line(rc, err, "--from big.json", "larger than")


def test_a_sweep_over_corrupted_results_recomputes_them(tmp_path):
    (tmp_path / "grid.toml").write_text(GRID.replace("[20, 200000000]", "20"))
    assert run_main(["sweep", "grid.toml", "--workers", "1", "--no-progress"], tmp_path)[0] == 0
    results = sorted(p for p in (tmp_path / "res").glob("*.json") if p.name != "index.json")
    for path, text in zip(results, ["[" * 5000, '{"a": ' + "9" * 6000 + "}"]):
        path.write_text(text)
    rc, out, err = run_main(["sweep", "grid.toml", "--workers", "1", "--no-progress"], tmp_path)
    assert rc == 0 and json.loads(out)["computed"] == 2 and "Traceback" not in err, err


# ---------------------------------------------------------------------------------------------------- ranges that lie

SMALL = {"steps": 3, "samples": 4, "context": 3, "offset": 3, "n_max": 12, "points": 2, "chunk": 8}


@pytest.mark.parametrize("quantity", sorted(QUANTITIES))
def test_every_option_range_holds_at_its_low_end(quantity, tmp_path, monkeypatch):
    """The low end of each integer option's advertised range runs (the estimators accept it), and one below is
    refused before any work, naming the option as the user typed it."""
    q = QUANTITIES[quantity]
    for spec in (s for s in q.options if s.kind == "int"):
        opts = {s.name: SMALL[s.name] for s in q.options if s.name in SMALL}
        opts[spec.name] = int(spec.lo)
        if "points" in opts:
            opts["points"] = min(opts["points"], 1 if opts["n_max"] < 2 else 2)
        argv = ["measure", quantity, "--family", "householder", "--param", "dim=4", "--no-progress",
                *[f"--opt={k}={v}" for k, v in opts.items()]]
        rc, _, err = run_main(argv, tmp_path)
        assert rc == 0 or (quantity == "onset" and "the onset lies beyond" in err), (argv, err)
        below = [a if not a.startswith(f"--opt={spec.name}=") else f"--opt={spec.name}={int(spec.lo) - 1}" for a in argv]
        rc, _, err = run_main(below, tmp_path)
        assert_one_line(rc, err, f"'{spec.name}'", str(int(spec.lo)))


# ------------------------------------------------------------------------------------------- misbehaving user families

FAMILIES = '''
import numpy as np
from accum.simulations.steps import AngleSteps, DenseSteps

class Chatty:
    dim = 4
    def sample(self, rng, n_steps, batch):
        print("a line from the family")
        return DenseSteps(np.broadcast_to(np.eye(4), (batch, n_steps, 4, 4)).copy())

class Expanding:
    dim = 4
    def sample(self, rng, n_steps, batch):
        return DenseSteps(np.broadcast_to(1e100 * np.eye(4), (batch, n_steps, 4, 4)).copy())

class Scaled:
    dim = 4
    def sample(self, rng, n_steps, batch):
        return DenseSteps(np.broadcast_to(1e10 * np.eye(4), (batch, n_steps, 4, 4)).copy())

class HugeAngles:
    dim = 4
    def sample(self, rng, n_steps, batch):
        return AngleSteps(np.full((batch, n_steps, 2), 1e300))

class WideDense:
    dim = 1100
    def sample(self, rng, n_steps, batch):
        return DenseSteps(np.zeros((batch, n_steps, 1100, 1100)))
'''


@pytest.fixture()
def user_families(tmp_path, monkeypatch):
    (tmp_path / "fuzzfams.py").write_text(FAMILIES)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("fuzzfams", None)


def test_a_user_familys_prints_go_to_stderr(user_families):
    rc, out, err = run_main(["measure", "coherence", "--family", "fuzzfams:Chatty", "--opt", "steps=2", "--opt",
                             "samples=4"], user_families)
    assert rc == 0 and json.loads(out)["n"] == 4 and "a line from the family" in err


def test_an_overflowing_family_is_one_line_in_measure_and_verify(user_families):
    """measure runs it until its numbers overflow; verify refuses it first: expanding steps meet no claim's conditions."""
    rc, _, err = run_main(["measure", "coherence", "--family", "fuzzfams:Expanding", "--opt", "steps=8", "--opt",
                           "samples=4"], user_families)
    assert_one_line(rc, err, "fuzzfams:Expanding", "not finite")
    rc, _, err = run_main(["verify", "--family", "fuzzfams:Expanding", "--workers", "1"], user_families)
    assert_one_line(rc, err, "--family fuzzfams:Expanding (dim=4)", "no claim", "||A|| <= 1")


def test_angles_and_dense_steps_get_a_size_rule_and_identical_steps_are_not_dependent(user_families):
    rc, _, err = run_main(["measure", "coherence", "--family", "fuzzfams:HugeAngles"], user_families)
    assert_one_line(rc, err, "fuzzfams:HugeAngles", "angles up to 1e+300", "1e+06")
    rc, _, err = run_main(["measure", "coherence", "--family", "fuzzfams:WideDense"], user_families)
    assert_one_line(rc, err, "fuzzfams:WideDense", "dim = 1100", "d <= 1024")
    rc, out, _ = run_main(["check", "fuzzfams:Scaled", "--samples", "100"], user_families)
    assert rc == 1 and "FAIL  norm-bounded" in out
    assert "PASS  independent-steps" in out  # rounding at 1e20 is not dependence


# ------------------------------------------------------------------------------------------------------- conventions

@pytest.mark.parametrize("argv, names", [
    (["measure", "coherence", "--family", "householder", "--jso", "r.json"], ["unrecognized", "--jso"]),
    (["measure", "coherence", "--family", "householder", "--json", "a.json", "--json=b.json"], ["--json", "once"]),
    (["verify", "--quick", "--quick"], ["--quick", "once"]),
    (["measure", "coherence", "--family", "householder", "--json", "-"], ["--json -", "stdout"]),
    (["measure", "coherence", "--family", "householder", "--param", "dim=８"], ["'dim'", "'８'"]),
    (["measure", "coherence", "--family", "householder", "--param", "dim=1_0"], ["'dim'", "'1_0'"]),
    (["check", "householder", "--budget", "٠.١"], ["--budget", "expected a number"]),
    (["sweep", "grid.toml", "--out", "dangling"], ["--out dangling", "symbolic link"]),
])
def test_command_line_conventions(argv, names, tmp_path):
    (tmp_path / "grid.toml").write_text(GRID)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    rc, out, err = run_main(argv, tmp_path)
    assert_one_line(rc, err, *names)
    assert out == "" and sorted(p.name for p in tmp_path.iterdir()) == ["dangling", "grid.toml"]


def test_version_help_and_a_closed_pipe(tmp_path):
    rc, out, _ = run_main(["--version"], tmp_path)
    assert rc == 0 and out.startswith("accum ")
    rc, out, _ = run_main(["--help"], tmp_path)
    assert rc == 0 and all(name in out for name in COMMANDS)
    read, write = os.pipe()  # a reader that went away before the first write (`| head` that exits at once)
    os.close(read)
    try:
        done = subprocess.run([sys.executable, "-m", "accum.cli", "families"], cwd=tmp_path, env=ENV, stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write)
    assert done.returncode == 141 and done.stderr == "", done


def test_every_command_and_option_has_a_description():
    """Every parser (command and sub-command) has a description and every option a help text; options with a fixed
    set of values list it; no developer notes (``double backquotes``) in any help."""
    import argparse

    def walk(parser, name):
        assert parser.description and "``" not in parser.description, name
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, child in action.choices.items():
                    walk(child, f"{name} {sub}")
            elif action.help != argparse.SUPPRESS:
                assert action.help and "``" not in action.help, (name, action.option_strings)

    for name in COMMANDS:
        parser = command_parser(name)
        walk(parser._subparsers._group_actions[0].choices[name], f"accum {name}")


def test_families_starts_without_torch_and_quickly(tmp_path):
    """`accum families` loads neither torch nor scipy.stats and costs well under a second of CPU (wall time on two
    shared cores says more about the neighbours than about accum, so the child's CPU time is what is held)."""
    import resource

    code = "import sys; from accum.cli import main; main(['families']); print('torch' in sys.modules, 'scipy.stats' in sys.modules, file=sys.stderr)"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=ENV, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert done.returncode == 0 and done.stderr.split() == ["False", "False"], done.stderr
    assert cpu < 1.0 and done.stdout.startswith("rope:"), cpu


def test_progress_on_a_non_terminal_is_plain_lines(tmp_path):
    (tmp_path / "grid.toml").write_text(GRID.replace("[20, 200000000]", "[20, 30]"))
    rc, out, err = run_main(["sweep", "grid.toml", "--workers", "1"], tmp_path)
    assert rc == 0 and [line.split(" (")[0] for line in err.splitlines()] == [f"accum sweep: {k} of 4 jobs done"
                                                                              for k in range(1, 4)], err  # not the last


def test_default_probe_paths_work_from_any_folder(tmp_path):
    from accum.figures.paths import DEFAULT_PROBES
    from accum.probes.cliargs import DEFAULT_SWEEP

    assert DEFAULT_PROBES.is_file() and DEFAULT_SWEEP.is_file() and DEFAULT_SWEEP == DEFAULT_PROBES
    rc, out, err = run_main(["probe", "report"], tmp_path)
    assert rc == 0 and out.startswith("C7 probe sweep:"), err


def test_bench_exits_1_on_a_missed_target(tmp_path, monkeypatch):
    row = {"name": "a row", "kind": "slowdown", "ratio": 2.0, "target": 1.5, "meets": False}
    monkeypatch.setattr("accum.simulations.bench.run_benchmarks", lambda *a, **k: ([row], {"torch_threads": 1}))
    rc, out, err = run_main(["bench"], tmp_path)
    assert rc == 1 and "MISS" in out and err.strip() == "accum bench: 1 of 1 rows missed their target: a row"
    assert run_main(["bench", "--allow-miss"], tmp_path)[0] == 0


def test_user_numbers_drawn_at_random_never_escape_as_a_traceback(tmp_path):
    """Random junk for every numeric --param and --opt of a few families (fixed seed): exit 0 or one line, exit 2."""
    draw = np.random.default_rng(32)
    junk = ["٣", "1_0", " 7", "1e400", "-0", "0x1f", "1" * 60, "nan", "+5", "5.", ".5e-3", "1e-400", "∞"]
    for _ in range(12):
        quantity = str(draw.choice(sorted(QUANTITIES)))
        option = str(draw.choice([s.name for s in QUANTITIES[quantity].options]))
        value = str(draw.choice(junk))
        argv = ["measure", quantity, "--family", "householder", "--param", "dim=4", "--no-progress",
                *[f"--opt={k}={v}" for k, v in SMALL.items() if k in {s.name for s in QUANTITIES[quantity].options}
                  and k != option], f"--opt={option}={value}"]
        rc, _, err = run_main(argv, tmp_path)
        assert "Traceback" not in err and (rc == 0 or (rc == 2 and len(err.strip().splitlines()) == 1)), (argv, err)
