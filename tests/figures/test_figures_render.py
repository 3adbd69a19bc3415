"""Figures 1-6 render on tiny configs into real, non-trivial PNG/PDF files with captions; figure 6 follows
the probe results; saved data is reused, never recomputed."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib
import matplotlib.image
import numpy as np
import pytest
from matplotlib.figure import Figure

from accum.figures import data as fig_data
from accum.figures import probeplots
from accum.figures.cli import add_figures
from accum.figures.make import make_figures, probes_figure, read_probe_sweep, save_figure
from accum.figures.specs import figure_specs, probes_spec
from accum.simulations import sweep
from accum.simulations.results import ResultError

SEED = 3
MEASURED = ("fig1_coherence", "fig2_window", "fig3_score_gap", "fig4_near_weight", "fig5_far_residual")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """One quick run of every figure (no probe results), shared by the tests of this module."""
    root = tmp_path_factory.mktemp("figures")
    out, results = root / "out", root / "data"
    outcomes = make_figures(out, results, quick=True, seed=SEED, probes=root / "no-such-sweep.json",
                            workers=1, progress=False)
    return out, results, {o.name: o for o in outcomes}


def assert_real_image(png: Path, pdf: Path) -> None:
    """PNG decodes, is a few hundred pixels each way, has varied pixels and coloured (data) pixels; the PDF
    is a PDF of non-trivial size."""
    assert png.stat().st_size > 20_000 and pdf.stat().st_size > 10_000
    img = matplotlib.image.imread(png)
    assert img.ndim == 3 and img.shape[0] > 300 and img.shape[1] > 500
    rgb = img[..., :3]
    assert float(rgb.std()) > 0.08
    coloured = (rgb.max(axis=-1) - rgb.min(axis=-1)) > 0.25
    assert int(coloured.sum()) > 2000, "no coloured (data) pixels: the curves are missing"
    assert pdf.read_bytes()[:5] == b"%PDF-"


@pytest.mark.parametrize("name", MEASURED)
def test_measured_figure_files(quick_run, name):
    out, results, outcomes = quick_run
    assert outcomes[name].files == (out / f"{name}.png", out / f"{name}.pdf", out / f"{name}.txt")
    assert_real_image(out / f"{name}.png", out / f"{name}.pdf")
    text = (out / f"{name}.txt").read_text()
    assert f"root seed {SEED}" in text and "seed " in text.splitlines()[3]
    spec = next(s for s in figure_specs(True) if s.name == name)
    assert len([line for line in text.splitlines() if line.startswith("- ")]) == len(spec.jobs)
    assert not list(out.glob(".*.tmp")), "temporary files left behind"


def test_probes_figure_skipped_without_results(quick_run):
    out, _, outcomes = quick_run
    assert outcomes["fig6_probes"].files == ()
    assert "no probe results" in outcomes["fig6_probes"].message
    assert not list(out.glob("fig6_probes.*"))


def synthetic_sweep(arms=("nope", "rope", "alibi", "random", "learned", "learned_qkv", "path"), seeds=(0, 1, 2),
                    missing=()) -> dict:
    """A small multi-seed sweep.json in the probes' format (``probes.sweep.summarise``); ``missing`` lists
    (arm, seed) runs left out."""
    from accum.probes import stats
    mult = [1, 2, 4, 8]
    rng = np.random.default_rng(0)
    runs = {arm: {str(s): {"ppl": list(5 + i + rng.uniform(0, 3, len(mult)).cumsum()),
                           "ppl_last_segment": list(5 + i + rng.uniform(0, 6, len(mult)).cumsum()),
                           "ppl_last_segment_1x": list(5 + i + rng.uniform(0, 1, len(mult))),
                           "far_mass": [None, *rng.uniform(0, 1, len(mult) - 1)], "tokens_per_second": 1000.0,
                           "angle_spread": None}
                  for s in seeds if (arm, s) not in missing}
            for i, arm in enumerate(arms)}
    return {"config": {"train": {"seed": 0, "seq_len": 32, "d_model": 32, "n_heads": 2, "n_layers": 1, "steps": 5,
                                 "batch_size": 4, "lr": 0.002},
                       "eval": {"multipliers": mult, "n_tokens": 512, "chunk": 32, "tokens_per_batch": 256, "seed": 12},
                       "arms": list(arms), "seeds": list(seeds), "analysis_multiplier": 4},
            "seq_len": 32, "multipliers": mult, "lengths": [32 * m for m in mult], "runs": runs,
            "arms": {arm: stats.arm_statistics(r) for arm, r in runs.items()},
            "verdicts": stats.verdicts(runs, stats.plain_specs(list(arms)), list(seeds), [len(seeds)]),
            "missing": [list(m) for m in missing],
            "complete": not missing, "table_markdown": "", "timings": {}}


def test_probes_figure_drawn_from_sweep_file(tmp_path):
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(synthetic_sweep()))
    outcome = probes_figure(probes_spec(), read_probe_sweep(path), path, tmp_path / "out")
    png, pdf, txt = outcome.files
    assert_real_image(png, pdf)
    text = txt.read_text()
    assert "learned_qkv [0, 1, 2]" in text and "evaluation seed 12" in text and "95% Student t" in text
    assert "Partial" not in text and outcome.message == "21 of 21 probe runs (arm x seed)"


def test_partial_probe_sweep_says_which_runs_are_missing(tmp_path):
    missing = [("alibi", 1), ("alibi", 2), ("path", 0), ("path", 1), ("path", 2)]
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(synthetic_sweep(missing=missing)))
    outcome = probes_figure(probes_spec(), read_probe_sweep(path), path, tmp_path / "out")
    assert outcome.message == "16 of 21 probe runs (arm x seed)"
    text = outcome.files[2].read_text()
    assert "5 (arm, seed) runs not finished: alibi/seed1, alibi/seed2, path/seed0, path/seed1, path/seed2" in text
    assert "alibi [0]" in text and "path []" in text
    assert_real_image(*outcome.files[:2])


def test_corrupt_or_foreign_probe_file_is_an_error(tmp_path):
    bad = tmp_path / "sweep.json"
    bad.write_text('{"arms": {')
    with pytest.raises(ResultError):
        read_probe_sweep(bad)
    bad.write_text(json.dumps({"arms": {}}))
    with pytest.raises(ResultError):
        read_probe_sweep(bad)
    nothing = synthetic_sweep(arms=("rope",), missing=[("rope", 0), ("rope", 1), ("rope", 2)])
    bad.write_text(json.dumps(nothing))
    with pytest.raises(ResultError, match="no finished"):
        read_probe_sweep(bad)
    assert read_probe_sweep(tmp_path / "missing.json") is None
    with pytest.raises(ResultError, match="cannot read probe results"):
        read_probe_sweep(tmp_path)


def quick_jobs():
    return [job for spec in figure_specs(True) for job in spec.jobs]


def test_second_run_recomputes_nothing(quick_run, monkeypatch):
    _, results, _ = quick_run
    files = sorted(results.glob("*.json"))
    assert len(files) == len({job.hash for job in fig_data.plan(quick_jobs(), SEED)})
    before = {f: f.stat().st_mtime_ns for f in files}

    def refuse(job):
        raise AssertionError(f"recomputed {job.where}")

    monkeypatch.setattr(sweep, "run_job", refuse)
    measured = fig_data.ensure(quick_jobs(), results, SEED, progress=False)
    assert [m.job for m in measured] == quick_jobs()
    assert {f: f.stat().st_mtime_ns for f in sorted(results.glob("*.json"))} == before


def test_corrupt_record_is_recomputed_alone(tmp_path):
    jobs = quick_jobs()[:3]
    first = fig_data.ensure(jobs, tmp_path, SEED, progress=False)
    planned = fig_data.plan(jobs, SEED)
    victim = sweep.result_path(tmp_path, planned[1])
    others = [sweep.result_path(tmp_path, planned[i]) for i in (0, 2)]
    stamps = [f.stat().st_mtime_ns for f in others]
    victim.write_text(victim.read_text()[:100])
    again = fig_data.ensure(jobs, tmp_path, SEED, progress=False)
    assert again[1].record["result"] == first[1].record["result"]  # same seed, same numbers
    assert [f.stat().st_mtime_ns for f in others] == stamps
    assert json.loads(victim.read_text())["sweep"]["hash"] == victim.stem


def test_job_seed_follows_root_seed_and_config():
    jobs = quick_jobs()[:2]
    zero, one, again = fig_data.plan(jobs, 0), fig_data.plan(jobs, 1), fig_data.plan(jobs[::-1], 0)
    assert zero[0].seed != one[0].seed and zero[0].seed != zero[1].seed
    assert [j.seed for j in zero] == [j.seed for j in again[::-1]]  # not from a job's position


def test_style_does_not_leak(quick_run):
    before = dict(matplotlib.rcParams)
    synthetic = synthetic_sweep(("rope",))
    probeplots.fig_probes(synthetic)
    assert dict(matplotlib.rcParams) == before
    assert matplotlib.get_backend().lower() == "agg"


def test_cli_options():
    parser = argparse.ArgumentParser()
    add_figures(parser.add_subparsers())
    args = parser.parse_args(["figures", "--out", "o", "--results", "r", "--quick", "--seed", "5"])
    assert (args.out, args.results, args.quick, args.seed) == ("o", "r", True, 5)
    assert callable(args.run)
    defaults = parser.parse_args(["figures"])
    assert (defaults.out, defaults.results, defaults.quick, defaults.seed) == (
        "results/figures", "results/figures-data", False, 0)


def test_failed_save_keeps_the_old_file_and_leaves_no_temporaries(tmp_path):
    old = tmp_path / "x.png"
    old.write_bytes(b"old")
    fig = Figure()

    def broken(*args, **kwargs):
        raise OSError("disk full")

    fig.savefig = broken
    with pytest.raises(OSError):
        save_figure(fig, tmp_path, "x", "caption")
    assert old.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.png"]


def test_extra_family_is_drawn_beside_the_builtins_with_estimated_theory(tmp_path):
    """A user family (the shipped example) in figures 1-5: one extra series each, measured with the figure's
    options; its theory curves come from the moment operators (named as estimated in the caption's source), and a
    quantity with no generic theory (near weight) is a caption note, not a failure."""
    from accum.figures.make import measured_figure
    from accum.figures.cli import extra_family
    from accum.figures.specs import EXTRA_SERIES

    extra = extra_family("accum.simulations.examples:SignedPermutation", ["dim=8"])
    specs = figure_specs(True, extra)
    plain = {s.name: len(s.jobs) for s in figure_specs(True)}
    added = {s.name: len(s.jobs) - plain[s.name] for s in specs}
    assert added == {"fig1_coherence": 1, "fig2_window": 2, "fig3_score_gap": 1, "fig4_near_weight": 1,
                     "fig5_far_residual": 1, "fig6_probes": 0, "fig7_theory": 0}
    for spec in specs:
        if spec.name not in ("fig1_coherence", "fig3_score_gap", "fig4_near_weight"):
            continue
        measured = fig_data.ensure(spec.jobs, tmp_path / "data", SEED, workers=1, progress=False)
        outcome = measured_figure(spec, measured, tmp_path / "out", SEED, "quick", tmp_path / "data")
        text = (tmp_path / "out" / f"{spec.name}.txt").read_text()
        assert f"- {EXTRA_SERIES}: " in text and "SignedPermutation" in text
        assert_real_image(*outcome.files[:2])
        if spec.name in ("fig1_coherence", "fig3_score_gap"):
            assert f"estimated theory: {EXTRA_SERIES} estimated from moment operators" in text
        else:
            assert f"no theory curve for {EXTRA_SERIES}" in text and "whole law" in text


def test_importing_the_figures_selects_no_backend():
    """No ``matplotlib.use`` at import: the figures are Figure objects, so importing them leaves the caller's
    backend choice alone (checked in a fresh interpreter without MPLBACKEND)."""
    import os
    import subprocess
    import sys

    code = ("import matplotlib; import accum.figures.make, accum.figures.plots, accum.figures.cli; "
            "print(matplotlib.rcParams._get_backend_or_none())")
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.strip() == "None"
