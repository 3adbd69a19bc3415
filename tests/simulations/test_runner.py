"""The job runner (``simulations.runner.map_outcomes``) ships the parent's user-module folders with every job: a
user family from the current folder, pickled into a job, is read back and drawn in a local pool worker and in a Dask
worker whose own folder is elsewhere, exactly as in the parent."""

from __future__ import annotations

import operator
import sys
import textwrap

import distributed
import numpy as np
import pytest

from accum.simulations.families import make_family
from accum.simulations.runner import map_outcomes

MODULE = """
import numpy as np
from accum.simulations.steps import AngleSteps

class Fam:
    dim = 6

    def sample(self, rng, n_steps, batch):
        return AngleSteps(rng.normal(size=(batch, n_steps, 3)))
"""


@pytest.fixture()
def user_family(tmp_path, monkeypatch):
    """``runnerfam:Fam``, a module in a folder that is the current folder and on no import path."""
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "runnerfam.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.chdir(folder)
    yield make_family("runnerfam:Fam")
    sys.modules.pop("runnerfam", None)


def draws(outcomes) -> list[np.ndarray]:
    got = list(outcomes)
    assert all(not isinstance(outcome, BaseException) for _, outcome in got), got
    return [outcome.theta for _, outcome in got]


def test_a_pickled_user_family_is_drawn_in_pool_workers(user_family):
    draw = operator.methodcaller("sample", np.random.default_rng(5), 4, 3)
    expected = user_family.sample(np.random.default_rng(5), 4, 3).theta
    for theta in draws(map_outcomes(draw, [user_family, user_family], 2, None)):
        np.testing.assert_array_equal(theta, expected)


def test_a_pickled_user_family_is_drawn_on_a_dask_worker_started_elsewhere(user_family, tmp_path, monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    draw = operator.methodcaller("sample", np.random.default_rng(5), 4, 3)
    expected = user_family.sample(np.random.default_rng(5), 4, 3).theta
    here = str(tmp_path / "mine")
    monkeypatch.chdir(elsewhere)  # the worker process starts here, where there is no runnerfam.py
    with distributed.LocalCluster(n_workers=1, processes=True, threads_per_worker=1, dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        monkeypatch.chdir(here)
        assert client.run(lambda: __import__("os").getcwd()) != {}  # the worker is up, in its own folder
        for theta in draws(map_outcomes(draw, [user_family, user_family], 1, client)):
            np.testing.assert_array_equal(theta, expected)
