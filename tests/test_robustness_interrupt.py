"""Issue 14, interrupts: Ctrl-C (SIGINT) or SIGTERM prints one line, exits 130 (143 for SIGTERM), no traceback, no
half-written file."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ENV, ignore_sigint, interrupt_when

from accum.cli import main

@pytest.mark.parametrize("sig, preexec", [(signal.SIGINT, None), (signal.SIGTERM, None), (signal.SIGTERM, ignore_sigint)],
                         ids=["SIGINT", "SIGTERM", "SIGTERM-SIGINT-inherited-ignored"])
def test_interrupted_measure_leaves_nothing(sig, preexec, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    argv = ["measure", "coherence", "--family", "householder", "--opt", "steps=64", "--opt", "samples=200000000",
            "--json", str(out / "r.json"), "--threads", "1"]
    rc, err, seconds = interrupt_when(argv, lambda: any(p.suffix == ".tmp" for p in out.iterdir()), tmp_path, sig=sig,
                                      preexec=preexec)
    assert rc == 128 + sig and err.strip().splitlines() == ["accum measure: interrupted"], err
    assert list(out.iterdir()) == []          # the reserved temporary file is gone, no result written
    assert seconds < 20.0                     # honoured within one estimator batch, not after the hours of 2e8 samples


@pytest.mark.parametrize("workers", ["1", "2"])
def test_interrupted_sweep_says_what_it_kept(workers, tmp_path):
    grid = tmp_path / "grid.toml"
    grid.write_text('quantity = "coherence"\nroot_seed = 1\nseeds = 1\noutput = "res"\n'
                    '[options]\nsteps = 64\nsamples = [20, 200000000]\n[[family]]\nname = "householder"\ndim = 8\n')
    res = tmp_path / "res"
    done = lambda: res.is_dir() and any(p.suffix == ".json" and p.name != "index.json" for p in res.iterdir())  # noqa: E731
    rc, err, seconds = interrupt_when(["sweep", str(grid), "--workers", workers, "--no-progress", "--threads", "1"],
                                      done, tmp_path)
    assert seconds < 20.0                     # the in-flight job (hours of 2e8 samples) is abandoned, not waited for
    assert rc == 130 and err.strip().splitlines() == [f"accum sweep: interrupted; 1 of 2 jobs kept in {res}"], err
    assert not [p for p in res.iterdir() if p.suffix == ".tmp" or p.name.startswith(".")]


@pytest.mark.parametrize("command, target, argv", [
    ("bench", "accum.simulations.bench.run_benchmarks", ["bench"]),
    ("check", "accum.theory.checks.check", ["check", "householder", "--samples", "100"]),
    ("verify", "accum.report.run_report", ["verify", "--quick"]),
])
def test_every_command_turns_ctrl_c_into_one_line(command, target, argv, monkeypatch, capsys, tmp_path):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(target, interrupted)
    monkeypatch.chdir(tmp_path)
    handlers = [signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)]
    assert main([*argv, "--json", "r.json"]) == 130
    assert capsys.readouterr().err.strip().splitlines() == [f"accum {command}: interrupted"]
    assert list(tmp_path.iterdir()) == []
    assert [signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)] == handlers  # main's handlers are not left behind


def test_interrupted_figures_count_the_kept_measurements(monkeypatch, capsys, tmp_path):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("accum.figures.make.make_figures", interrupted)
    results = tmp_path / "data"
    rc = main(["figures", "--quick", "--out", str(tmp_path / "figs"), "--results", str(results), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 130 and len(err) == 1
    assert err[0].startswith("accum figures: interrupted; 0 of ") and err[0].endswith(f"jobs kept in {results}")


def children(pid: int) -> list[int]:
    """The child processes of ``pid`` (Linux /proc)."""
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def test_ctrl_c_while_pool_workers_start_is_one_line(tmp_path):
    """A Ctrl-C reaches the whole process group, pool workers included, also while a worker's interpreter is still
    importing (before its initializer can ignore SIGINT): the signal is sent at moments of the first worker's start-up,
    and no worker may print a traceback (``runner.sigint_blocked``)."""
    (tmp_path / "grid.toml").write_text('quantity = "coherence"\nroot_seed = 1\nseeds = 1\noutput = "res"\n[options]\n'
                                        'steps = 64\nsamples = [200000000, 200000001]\n[[family]]\nname = "householder"\n'
                                        'dim = 8\n')
    for wait in (0.05, 0.1, 0.2, 0.3, 0.5):
        proc = subprocess.Popen([sys.executable, "-m", "accum.cli", "sweep", "grid.toml", "--workers", "2", "--threads",
                                 "1", "--no-progress"], cwd=tmp_path, env=ENV, start_new_session=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not children(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(wait)  # into the worker's start-up: its interpreter, then the imports that unpickle the job
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130 and "Traceback" not in err and err.strip().splitlines() == [
            "accum sweep: interrupted; 0 of 2 jobs kept in res"], err
