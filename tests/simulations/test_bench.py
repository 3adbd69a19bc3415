"""accum bench's machinery (not its timings): the baselines draw exactly what the estimators draw, threads
are pinned and recorded, fast and baseline are timed alternately, bad --threads is refused up front."""

import os

import numpy as np
import pytest
import torch
from threadpoolctl import threadpool_limits

from accum.cli import main
from accum.simulations import bench
from accum.simulations import estimators as est
from accum.simulations import montecarlo as mc
from accum.simulations.families import make_family


class Recorder:
    """Wraps a family and records every sample(n_steps, batch) call."""

    def __init__(self, fam):
        self.fam, self.dim, self.calls = fam, fam.dim, []

    def sample(self, rng, n_steps, batch):
        self.calls.append((n_steps, batch))
        return self.fam.sample(rng, n_steps, batch)


@pytest.mark.parametrize("name,params", [("so2-accumulated", {"dim": 6}), ("householder", {"dim": 5}), ("haar", {"dim": 4})])
def test_baselines_replay_the_estimators_sample_calls(name, params, monkeypatch):
    monkeypatch.setattr(mc, "BATCH_BUDGET", 2000)   # several batches per group and per stream
    fam = make_family(name, **params)
    cases = [
        (lambda f: est.coherence(f, 9, 300, np.random.default_rng(0)), lambda f: bench.coherence_draws(f, 9, 300, 0)),
        (lambda f: est.mean_product_sq(f, 9, 60, np.random.default_rng(0)),
         lambda f: bench.coherence_draws(f, 9, 60, 0, product=True)),
        (lambda f: est.near_weight(f, [5, 130], 1.0, 40, np.random.default_rng(0), chunk=16),
         lambda f: bench.stream_draws(f, [5, 130], 40, 0, chunk=16)),
        (lambda f: est.far_residual(f, [5, 130], 40, np.random.default_rng(0), chunk=16),
         lambda f: bench.stream_draws(f, [5, 130], 40, 0, chunk=16)),
    ]
    for run, draws in cases:
        a, b = Recorder(fam), Recorder(fam)
        run(a)
        draws(b)
        assert len(a.calls) > 2 and a.calls == b.calls


def test_thread_settings_record_the_limits():
    before = torch.get_num_threads()
    with threadpool_limits(limits=1):
        torch.set_num_threads(1)
        try:
            settings = bench.thread_settings()
        finally:
            torch.set_num_threads(before)
    assert settings["torch_threads"] == 1
    assert settings["threadpools"] and all(p["num_threads"] == 1 for p in settings["threadpools"])


def test_paired_times_alternate():
    order = []
    fast, base = bench.paired_times(lambda: order.append("f"), lambda: order.append("b"), 3)
    assert order == ["f", "b"] * 4 and fast >= 0 and base >= 0


@pytest.mark.parametrize("threads", ["0", str((os.cpu_count() or 1) + 1)])
def test_bad_threads_refused_before_any_work(threads, capsys, monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("benchmarks ran before --threads was checked")

    monkeypatch.setattr(bench, "run_benchmarks", forbidden)
    assert main(["bench", "--threads", threads]) == 2
    err = capsys.readouterr().err
    assert "--threads" in err and str(threads) in err and len(err.strip().splitlines()) == 1
