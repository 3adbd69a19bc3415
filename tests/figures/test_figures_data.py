"""``figures.data``: a figure's data file is the sweep's file for the same job, so its cache key is the sweep's
(tests/simulations/test_sweep.py holds that key to every family parameter and quantity option); the fields of a
``CurveSpec`` that only draw (series, label, panel) do not enter it, the others do."""

import dataclasses
import functools
import pathlib

import pytest

from accum.figures import data as fig_data
from accum.figures.specs import CurveSpec, figure_specs
from accum.simulations import grid as grids
from accum.simulations import identity, sweep

SEED = 3


def test_every_figure_job_is_keyed_as_the_sweep_keys_it(monkeypatch):
    """Every quick figure job's file name, replicate (the seed it draws) and options are the ones ``accum sweep`` gives
    the same job (code fingerprinted once)."""
    monkeypatch.setattr(sweep, "measure_modules", functools.lru_cache(identity.measure_modules))
    monkeypatch.setattr(sweep, "code_identity", functools.lru_cache(identity.code_identity))
    jobs = [job for spec in figure_specs(True) for job in spec.jobs]
    for job, planned in zip(jobs, fig_data.plan(jobs, SEED)):
        grid = grids.Grid("figure", job.quantity, (grids.FamilyAxes(job.family, {k: (v,) for k, v in job.params.items()}),),
                          {k: (v,) for k, v in job.options.items()}, (0,), SEED, pathlib.Path("out"))
        expected = sweep.plan(grid)[0]
        assert (planned.hash, planned.replicate, planned.options) == (expected.hash, expected.replicate,
                                                                       expected.options), job


def test_only_the_measured_fields_of_a_curve_enter_its_key():
    job = CurveSpec("coherence", "householder", {"dim": 6}, {"steps": 4, "samples": 8}, "householder-2", "label", 0)
    other = {"quantity": "product-norm", "family": "haar", "params": {"dim": 5}, "options": {"steps": 5, "samples": 8},
             "series": "haar", "label": "another label", "panel": 1}
    base = fig_data.plan([job], SEED)[0].hash
    assert [f.name for f in dataclasses.fields(CurveSpec)] == list(other)
    for name, value in other.items():
        changed = fig_data.plan([dataclasses.replace(job, **{name: value})], SEED)[0].hash != base
        assert changed == (name in ("quantity", "family", "params", "options")), name
    assert fig_data.plan([job], SEED + 1)[0].hash != base


def test_failed_jobs_are_named_three_at_a_time_after_the_others_are_saved(tmp_path, monkeypatch):
    """Five jobs of which four fail: the one that finished is saved, and the error names the first three failures and
    how many more there are; with the default seed 0 the saved file is the one ``plan(jobs, 0)`` names."""
    jobs = [CurveSpec("coherence", "householder", {"dim": 6}, {"steps": 4, "samples": s}, "h", "label", 0)
            for s in (8, 9, 10, 11, 12)]
    planned = fig_data.plan(jobs, 0)

    def outcomes(todo, workers, client):
        assert workers == 1  # the library default
        for job in todo:
            yield job, ({"ok": True} if job.hash == planned[0].hash else ValueError(f"bad {job.hash[:6]}"))

    monkeypatch.setattr(sweep, "outcomes", outcomes)
    with pytest.raises(fig_data.DataError, match=r"4 of 5 figure jobs failed .*; and 1 more$") as failed:
        fig_data.ensure(jobs, tmp_path, progress=False)
    assert str(failed.value).count("ValueError: bad") == 3
    assert sweep.result_path(tmp_path, planned[0]).exists()
    assert not any(sweep.result_path(tmp_path, p).exists() for p in planned[1:])
    with pytest.raises(fig_data.DataError, match=r"3 of 3 figure jobs failed .*: ValueError: bad \w+$"):
        fig_data.ensure(jobs[1:4], tmp_path, progress=False)  # three failures: all named, no "more"
    with pytest.raises(fig_data.DataError, match=r"1 of 1 figure jobs failed \(rerun to retry them\): h [^;]*bad \w+$"):
        fig_data.ensure(jobs[4:], results_dir=tmp_path, root_seed=0, progress=False)  # one: named, no "more"


def test_progress_lines_only_when_asked_and_by_default(tmp_path, monkeypatch, capsys):
    """``ensure`` reports its jobs on stderr by default (the library call a user makes), and not at all with
    progress=False or when nothing is left to compute.  Stderr is not a terminal here, so the lines are the plain
    ones: "DESC: K of N jobs done", none for the last job."""
    jobs = [CurveSpec("coherence", "householder", {"dim": 6}, {"steps": 4, "samples": s}, "h", "label", 0)
            for s in (8, 9, 10)]
    monkeypatch.setattr(sweep, "outcomes", lambda todo, workers, client: ((job, {"ok": True}) for job in todo))
    fig_data.ensure(jobs[:2], tmp_path / "quiet", progress=False)
    assert capsys.readouterr().err == ""
    fig_data.ensure(jobs, tmp_path / "shown")
    err = capsys.readouterr().err
    assert "accum figures: measurements: 2 of 3 job" in err and "3 of 3" not in err, err
    monkeypatch.setattr(fig_data, "load", lambda results_dir, job: {"ok": True})  # every record saved
    fig_data.ensure(jobs, tmp_path / "shown", progress=True)
    assert capsys.readouterr().err == ""
