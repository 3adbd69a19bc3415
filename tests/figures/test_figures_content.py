"""Figures checked by content: each figure's recorded series (``plots.Drawn.series``) against its data source -- the
saved records' results, the theory curves (and, for the bound, the floor, the far variance and the gap, the formulas
typed here), the probe sweep's per-arm statistics, the theory agreement -- and the labels; and the record against
the drawing itself (the lines on each axes and the legend texts)."""

import math

import numpy as np
import pytest

from accum.figures import data as fig_data
from accum.figures import plots, record
from accum.figures.overlays import THEORIES
from accum.figures.specs import figure_specs

from test_figures_render import synthetic_sweep

SEED = 3
K = plots.K_SE


@pytest.fixture(scope="module")
def figures(tmp_path_factory):
    """{figure name: (measured records, theory, drawn)} for every measured quick figure."""
    data = tmp_path_factory.mktemp("data")
    out = {}
    for spec in figure_specs(True):
        if spec.jobs:
            measured = fig_data.ensure(spec.jobs, data, SEED, progress=False)
            theory = THEORIES[spec.name](measured)
            out[spec.name] = (measured, theory, plots.BUILDERS[spec.name](measured, theory))
    return out


def same(a, b) -> bool:
    return np.array_equal(np.asarray(a, dtype=float), np.asarray(b, dtype=float), equal_nan=True)


def one(drawn, **match) -> record.Series:
    found = [s for s in drawn.series if all(getattr(s, k) == v for k, v in match.items())]
    assert len(found) == 1, (match, [(s.panel, s.name, s.kind) for s in drawn.series])
    return found[0]


def result(m) -> dict:
    return m.record["result"]


def assert_record_is_the_drawing(drawn) -> None:
    """Every recorded line (Monte Carlo, theory, bound, floor, measured, predicted) is a line on its axes with the
    same data, and every recorded label is in that axes' legend."""
    axes = drawn.figure.axes
    for s in drawn.series:
        ax = axes[s.panel]
        if s.kind not in ("density", "reference", "points"):
            assert any(same(line.get_xdata(), s.x) and same(line.get_ydata(), s.y) for line in ax.get_lines()), s
        legend = ax.get_legend()
        if s.label is not None and legend is not None:
            assert s.label in [t.get_text() for t in legend.get_texts()], s.label


def test_figure_1_draws_each_coherence_curve_and_its_theory(figures):
    measured, theory, drawn = figures["fig1_coherence"]
    for m in measured:
        steps, mean, se = (np.asarray(result(m)[k], dtype=float) for k in ("steps", "mean", "stderr"))
        mag = np.abs(mean)
        resolved = np.logical_and.accumulate(mag > K * se)
        mc = one(drawn, name=m.job.series, kind="Monte Carlo")
        assert mc.panel == m.job.panel and mc.label == m.job.label and same(mc.x, steps)
        assert same(mc.y, np.where(resolved, mag, np.nan)) and resolved[0]
        assert same(mc.band[0], np.where(resolved, mag - K * se, np.nan))
        assert same(mc.band[1], np.where(resolved, mag + K * se, np.nan))
        curve = theory.curves[m.job.series]
        th = one(drawn, name=m.job.series, kind="theory")
        assert th.panel == m.job.panel and same(th.x, curve.x) and same(th.y, np.where(curve.y != 0, np.abs(curve.y), np.nan))
        assert same(th.x, np.arange(m.record["config"]["options"]["steps"] + 1))
    family = {m.job.series: m for m in measured}["householder-2"].record["config"]["params"]
    th = one(drawn, name="householder-2", kind="theory")
    assert same(th.y, (1 - family["beta"] / family["dim"]) ** th.x)       # E[A] = (1 - beta/d) I, typed here
    assert_record_is_the_drawing(drawn)


def test_figure_2_draws_each_window_series_and_its_theory(figures):
    measured, theory, drawn = figures["fig2_window"]
    for series in dict.fromkeys(m.job.series for m in measured):
        group = [m for m in measured if m.job.series == series]
        mc = one(drawn, name=series, kind="Monte Carlo")
        w = np.array([result(m)["mean"] for m in group])
        se = np.array([result(m)["stderr"] for m in group])
        assert mc.label == group[0].job.label
        assert same(mc.x, [result(m)["context"] for m in group]) and same(mc.y, w)
        assert same(mc.band[0], w - K * se) and same(mc.band[1], w + K * se)
        th = one(drawn, name=series, kind="theory")
        assert same(th.x, theory.curves[series].x) and same(th.y, theory.curves[series].y) and same(th.x, mc.x)
    assert_record_is_the_drawing(drawn)


def test_figure_3_draws_the_densities_the_gap_and_the_far_variance(figures):
    measured, theory, drawn = figures["fig3_score_gap"]
    for m in measured:
        counts, edges = (np.asarray(result(m)[k], dtype=float) for k in ("hist_counts", "hist_edges"))
        density = one(drawn, name=m.job.series, kind="density")
        assert density.panel == 0 and density.label == m.job.label and same(density.x, edges)
        assert same(density.y, np.where(counts > 0, counts / (counts.sum() * np.diff(edges)), np.nan))
        assert np.nansum(density.y * np.diff(edges)) == pytest.approx(1.0, rel=1e-12)
    near = result(measured[0])["near"]
    assert same(one(drawn, name="near", kind="reference").x, [near])
    dims = np.array([result(m)["dim"] for m in measured], dtype=float)
    gap = one(drawn, name="gap", kind="Monte Carlo")
    assert gap.panel == 1 and same(gap.x, dims) and same(gap.y, [result(m)["gap_sd"] for m in measured])
    assert same(one(drawn, name="gap", kind="theory").y, near * np.sqrt(dims))       # near / sqrt(1/d), typed
    var = one(drawn, name="far-variance", kind="Monte Carlo")
    mean, se = (np.array([result(m)[k] for m in measured]) for k in ("mean", "stderr"))
    assert var.panel == 2 and same(var.x, dims) and same(var.y, mean) and same(var.band[1], mean + K * se)
    # q = k = 1/sqrt(d), Gaussian angles: s = (2/d) sum_b cos(Theta_b), Theta_b ~ N(0, n sigma^2) over the d/2 planes,
    # so d E[s^2] = 1 + e^{-2 n sigma^2} + (d - 2) e^{-n sigma^2} (derived by hand; -> |q|^2 |k|^2 = 1 as n grows)
    n, sigma = measured[0].record["config"]["options"]["offset"], measured[0].record["config"]["params"]["sigma"]
    th = one(drawn, name="far-variance", kind="theory")
    a = n * sigma**2
    np.testing.assert_allclose(th.y, 1 + math.exp(-2 * a) + (dims - 2) * math.exp(-a), rtol=1e-12)
    assert same(th.x, dims)
    assert_record_is_the_drawing(drawn)


@pytest.mark.parametrize("name", ["fig4_near_weight", "fig5_far_residual"])
def test_figures_4_and_5_draw_each_far_set_series_and_its_theory(figures, name):
    measured, theory, drawn = figures[name]
    for m in measured:
        sizes, mean, se = (np.asarray(result(m)[k], dtype=float) for k in ("far_sizes", "mean", "stderr"))
        mc = one(drawn, name=m.job.series, kind="Monte Carlo")
        assert mc.label == m.job.label and same(mc.x, sizes) and same(mc.y, mean)
        assert same(mc.band[0], mean - K * se) and same(mc.band[1], mean + K * se)
        th = one(drawn, name=m.job.series, kind="theory")
        assert same(th.x, sizes) and same(th.y, theory.curves[m.job.series].y)
    assert_record_is_the_drawing(drawn)


def test_figure_4_bound_and_alibi_floor_are_the_formulas(figures):
    """The bound 1/(1 + N e^{-2 s0}) (unit q, k) and the ALiBi floor 1/(1 + sum_{Delta<=N} e^{-m Delta}), typed
    here, at the far-set sizes of the jobs they belong to."""
    measured, _, drawn = figures["fig4_near_weight"]
    options = [m.record["config"]["options"] for m in measured]
    rotation = next(m for m, o in zip(measured, options) if o["alibi_slope"] == 0)
    alibi = next(m for m, o in zip(measured, options) if o["alibi_slope"] > 0)
    bound = one(drawn, name="bound", kind="bound")
    s0 = rotation.record["config"]["options"]["s0"]
    assert same(bound.x, result(rotation)["far_sizes"])
    np.testing.assert_allclose(bound.y, [1 / (1 + n * math.exp(-2 * s0)) for n in bound.x], rtol=1e-12)
    floor = one(drawn, name="alibi-floor", kind="floor")
    slope = alibi.record["config"]["options"]["alibi_slope"]
    np.testing.assert_allclose(floor.y, [1 / (1 + sum(math.exp(-slope * j) for j in range(1, int(n) + 1)))
                                         for n in floor.x], rtol=1e-10)
    assert "bound" in bound.label and "ALiBi floor" in floor.label


def test_figure_6_draws_each_arms_seed_statistics():
    sweep = synthetic_sweep(missing=[("alibi", 1), ("alibi", 2)])
    drawn = plots.fig_probes(sweep)
    mult = np.asarray(sweep["multipliers"], dtype=float)
    for panel, key in enumerate(("ppl", "ratio_last_segment", "far_mass")):
        for arm, st in sweep["arms"].items():
            s = one(drawn, panel=panel, name=arm, kind="measured")
            mean = np.array([np.nan if v is None else v for v in st[key]["mean"]], dtype=float)
            assert same(s.x, mult) and same(s.y, mean)
            assert s.label == f"{plots.PROBE_LABELS.get(arm, arm)} (n={st['n_seeds']})"
            ci = st[key]["ci95"]
            if st["n_seeds"] == 1:
                assert s.band is None
                continue
            hi = np.array([np.nan if c is None else c[1] for c in ci], dtype=float)
            lo = np.array([np.nan if c is None else c[0] for c in ci], dtype=float)
            assert same(s.band[1], hi)
            assert same(s.band[0], lo if key == "far_mass" else np.maximum(lo, 0.5 * np.nanmin(mean)))
        assert same(one(drawn, panel=panel, name="train length", kind="reference").x, [1.0])
    assert one(drawn, name="alibi", panel=0).label.endswith("(n=1)")
    assert_record_is_the_drawing(drawn)


def agreement_result() -> dict:
    """A small ``probes.theory_stats.agreement`` result: two arms, law and C3 rows at 2x and 4x."""
    far = [{"arm": arm, "kind": kind, "multiplier": m, "seeds": 3,
            "measured": {"mean": 0.1 * i + 0.01 * m, "ci": [0.1 * i + 0.01 * m - 0.02, 0.1 * i + 0.01 * m + 0.02]},
            "pred": {"mean": 0.1 * i + 0.012 * m + (0.005 if kind == "c3" else 0.0)}}
           for i, arm in enumerate(("rope", "random")) for kind in ("law", "c3") for m in (2, 4)]
    points = [{"arm": arm, "window_measured": 3.0 + i + j, "window_pred": 2.5 + i + 2 * j}
              for i, arm in enumerate(("rope", "random")) for j in range(3)]
    return {"runs": {"rope": [0, 1, 2], "random": [0, 1, 2]}, "far": far, "seq_len": 32, "window_points": points,
            "order": {"arms": ["rope", "random"], "pred": {"rope": 0.2, "random": 0.5},
                      "measured": {"rope": 0.1, "random": 0.3}, "rho": 1.0, "verdict": "same order"}}


def test_figure_7_draws_the_measured_and_predicted_far_mass_and_the_points():
    result_ = agreement_result()
    drawn = plots.fig_theory(result_)
    for panel, kind in enumerate(("law", "c3")):
        for arm in result_["runs"]:
            rows = [r for r in result_["far"] if r["arm"] == arm and r["kind"] == kind]
            measured = one(drawn, panel=panel, name=arm, kind="measured")
            predicted = one(drawn, panel=panel, name=arm, kind="predicted")
            assert same(measured.x, [r["multiplier"] for r in rows]) and same(predicted.x, measured.x)
            assert same(measured.y, [r["measured"]["mean"] for r in rows])
            assert same(measured.band[0], [r["measured"]["ci"][0] for r in rows])
            assert same(predicted.y, [r["pred"]["mean"] for r in rows])
    for arm in result_["runs"]:
        pts = [p for p in result_["window_points"] if p["arm"] == arm]
        window = one(drawn, panel=2, name=arm, kind="points")
        assert same(window.x, [p["window_measured"] for p in pts]) and same(window.y, [p["window_pred"] for p in pts])
        order = one(drawn, panel=3, name=arm, kind="points")
        assert same(order.x, [result_["order"]["pred"][arm]]) and same(order.y, [result_["order"]["measured"][arm]])
    assert_record_is_the_drawing(drawn)
