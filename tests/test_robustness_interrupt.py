"""Issue 14, interrupts: Ctrl-C (SIGINT) or SIGTERM prints one line, exits 130, no traceback, no half-written file."""

import signal

import pytest
from conftest import ignore_sigint, interrupt_when

from accum.cli import main

@pytest.mark.parametrize("sig, preexec", [(signal.SIGINT, None), (signal.SIGTERM, None), (signal.SIGINT, ignore_sigint)],
                         ids=["SIGINT", "SIGTERM", "SIGINT-inherited-ignored"])
def test_interrupted_measure_leaves_nothing(sig, preexec, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    argv = ["measure", "coherence", "--family", "householder", "--opt", "steps=64", "--opt", "samples=200000000",
            "--json", str(out / "r.json"), "--threads", "1"]
    rc, err, seconds = interrupt_when(argv, lambda: any(p.suffix == ".tmp" for p in out.iterdir()), tmp_path, sig=sig,
                                      preexec=preexec)
    assert rc == 130 and err.strip().splitlines() == ["accum measure: interrupted"], err
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
