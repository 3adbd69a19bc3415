"""Figures checked by content: each figure's recorded series (``plots.Drawn.series``) against its data source -- the
saved records' results, the theory curves (and, for the bound, the floor, the far variance, the gap and the C4
Gaussian, the formulas typed here), the probe sweep's per-arm statistics, the theory agreement -- and the labels; the
record against the drawing itself (the lines on each axes and the legend texts); every series named by its kind in
the legend (``record.KINDS``); and figures 6 and 7 as small multiples: each arm in its group's row, in one colour
in every panel, legends and titles clear of the data and of each other."""

import math

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from accum.figures import data as fig_data
from accum.figures import plots, probeplots, record
from accum.figures.cli import extra_family
from accum.figures.overlays import THEORIES, Curve, _collect, gaussian_name
from accum.figures.specs import EXTRA_SERIES, coherence_spec, figure_specs

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


def line_of(ax, s: record.Series):
    """The line on ``ax`` that draws series ``s`` (same x and y)."""
    found = [line for line in ax.get_lines() if same(line.get_xdata(), s.x) and same(line.get_ydata(), s.y)]
    assert found, s
    return found[0]


def assert_record_is_the_drawing(drawn) -> None:
    """Every recorded line (Monte Carlo, theory, bound, floor, measured, predicted, ranks) is a line on its axes with
    the same data, and every recorded label is in that axes' legend."""
    axes = drawn.figure.axes
    for s in drawn.series:
        ax = axes[s.panel]
        if s.kind not in ("density", "reference", "points"):
            line_of(ax, s)
        legend = ax.get_legend()
        if s.label is not None and legend is not None:
            assert s.label in [t.get_text() for t in legend.get_texts()], s.label


def legends(fig) -> list:
    """Every legend of a figure: its axes' legends, then the figure's own."""
    return [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None] + list(fig.legends)


def legend_texts(legend) -> list[str]:
    return [t.get_text() for t in legend.get_texts()]


def assert_every_series_names_its_kind(drawn) -> None:
    """``record.KINDS``: a series with a legend entry is in a legend of the figure, and its entry or that legend's
    title holds its kind's word; a series without an entry of its own is named by an entry or the title of some
    legend of the figure (a style key such as "theory (dashed)")."""
    every = legends(drawn.figure)
    for s in drawn.series:
        word = record.KINDS[s.kind]
        if s.label is not None:
            holding = [lg for lg in every if s.label in legend_texts(lg)]
            assert holding, f"{s.name} ({s.kind}): its label {s.label!r} is in no legend"
            assert any(word in s.label or word in lg.get_title().get_text() for lg in holding), \
                f"{s.name}: neither its label {s.label!r} nor its legend's title names its kind ({word!r})"
        else:
            keys = [text for lg in every for text in (lg.get_title().get_text(), *legend_texts(lg))]
            assert any(word in text for text in keys), f"{s.name} ({s.kind}): no legend names {word!r}"


def assert_legends_and_titles_clear(fig) -> None:
    """Drawn (Agg): no legend overlaps an axes (so none covers data), and no two titles or legends overlap."""
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    boxes = [ax.get_window_extent(renderer) for ax in fig.axes]
    legend_boxes = [lg.get_window_extent(renderer) for lg in legends(fig)]
    titles = [ax.title.get_window_extent(renderer) for ax in fig.axes if ax.get_title()]
    for lg in legend_boxes:
        assert not any(lg.overlaps(box) for box in boxes), "a legend lies over an axes"
    others = titles + legend_boxes
    for i, a in enumerate(others):
        assert not any(a.overlaps(b) for b in others[i + 1:]), "two titles or legends overlap"


def test_the_kind_check_fails_a_series_its_legend_misnames():
    """The check can fail: a theory curve under "Monte Carlo", and an unlabelled bound with no legend saying so."""
    fig = Figure()
    ax = fig.subplots()
    rec = record.Recorder([ax])
    rec.plot(ax, "c", "theory", [0, 1], [0, 1], "SO(2) Gaussian")
    ax.legend(title="markers: Monte Carlo")
    with pytest.raises(AssertionError, match="names its kind"):
        assert_every_series_names_its_kind(rec.drawn(fig))
    rec = record.Recorder([ax])
    rec.plot(ax, "b", "bound", [0, 1], [1, 1])
    with pytest.raises(AssertionError, match="no legend names 'bound'"):
        assert_every_series_names_its_kind(rec.drawn(fig))


def test_the_clearance_check_fails_a_legend_over_the_data():
    fig = Figure()
    ax = fig.subplots()
    ax.plot([0, 1], [0, 1], label="a curve")
    ax.legend(loc="upper left")
    with pytest.raises(AssertionError, match="a legend lies over an axes"):
        assert_legends_and_titles_clear(fig)


@pytest.mark.parametrize("name", ["fig1_coherence", "fig2_window", "fig3_score_gap", "fig4_near_weight",
                                  "fig5_far_residual"])
def test_every_series_of_figures_1_to_5_names_its_kind(figures, name):
    assert_every_series_names_its_kind(figures[name][2])


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
    angle = {"so2-gaussian", "so2-uniform", "so2-vonmises", "so2-cauchy", "so2-token", "rope"}  # typed here
    assert {s.name for s in drawn.series if s.kind == "Monte Carlo" and s.panel == 0} == angle
    assert {s.name for s in drawn.series if s.kind == "Monte Carlo" and s.panel == 1} == {
        "householder-1", "householder-2", "givens", "lie-walk", "haar"}
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
    assert EXTRA_SERIES not in theory.curves  # no extra family here: no extra family's curve
    for m in measured:
        counts, edges = (np.asarray(result(m)[k], dtype=float) for k in ("hist_counts", "hist_edges"))
        density = one(drawn, name=m.job.series, kind="density")
        assert density.panel == 0 and density.label == m.job.label and same(density.x, edges)
        assert same(density.y, np.where(counts > 0, counts / (counts.sum() * np.diff(edges)), np.nan))
        assert np.nansum(density.y * np.diff(edges)) == pytest.approx(1.0, rel=1e-12)
    for m in measured:  # C4's law N(0, |q|^2|k|^2/d) over each histogram's range, |q| = |k| = 1: typed here
        edges = result(m)["hist_edges"]
        gauss = one(drawn, name=gaussian_name(m.job.series), kind="theory")
        v = 1.0 / result(m)["dim"]
        assert gauss.panel == 0 and (gauss.x[0], gauss.x[-1]) == (edges[0], edges[-1]) and gauss.x.size == 241
        np.testing.assert_allclose(gauss.y, np.exp(-gauss.x**2 / (2 * v)) / math.sqrt(2 * math.pi * v), rtol=1e-12)
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
    assert same(th.x, dims) and "exact at" in th.label  # exact at the offset drawn, not its limit 1
    assert "limit of many steps" in one(drawn, name="gap", kind="theory").label  # sqrt(d) is C4's limit
    assert_record_is_the_drawing(drawn)


@pytest.mark.parametrize("name, kind", [("fig4_near_weight", "bound"), ("fig5_far_residual", "theory")])
def test_figures_4_and_5_draw_each_far_set_series_and_its_theory(figures, name, kind):
    """Figure 4's per-family curve 1/(1 + E far mass) is Jensen's lower bound of E w, recorded (and named) as a
    bound; figure 5's is the exact theory."""
    measured, theory, drawn = figures[name]
    for m in measured:
        sizes, mean, se = (np.asarray(result(m)[k], dtype=float) for k in ("far_sizes", "mean", "stderr"))
        mc = one(drawn, name=m.job.series, kind="Monte Carlo")
        assert mc.label == m.job.label and same(mc.x, sizes) and same(mc.y, mean)
        assert same(mc.band[0], mean - K * se) and same(mc.band[1], mean + K * se)
        th = one(drawn, name=m.job.series, kind=kind)
        assert same(th.x, sizes) and same(th.y, theory.curves[m.job.series].y) and th.label is None
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


def test_figure_4_bound_belongs_to_the_rotation_series_and_the_floor_to_the_alibi_ones(figures):
    """The norm bound is drawn for the rotation series (ALiBi slope 0) and the floor for the ALiBi ones: a panel of
    rotation series alone keeps its bound and has no floor; one of ALiBi series alone has a floor and no bound."""
    measured = figures["fig4_near_weight"][0]
    alibi = [m for m in measured if m.record["config"]["options"]["alibi_slope"] > 0]
    rotation = [m for m in measured if m not in alibi]
    assert rotation and alibi
    only_rotation, only_alibi = THEORIES["fig4_near_weight"](rotation), THEORIES["fig4_near_weight"](alibi)
    assert "bound" in only_rotation.curves and "alibi-floor" not in only_rotation.curves
    assert "alibi-floor" in only_alibi.curves and "bound" not in only_alibi.curves


def test_every_theory_curve_says_where_it_comes_from(figures):
    """Each theory curve of figures 1-5 carries its prediction's source: a closed form or an estimate."""
    sources = {(name, series): curve.source for name, (_, theory, _) in figures.items()
               for series, curve in theory.curves.items()}
    assert len({name for name, _ in sources}) == 5
    for where, source in sources.items():
        assert isinstance(source, str) and source.startswith(("closed form", "estimated")), (where, source)


def test_only_estimated_theory_curves_are_named_estimated():
    """A caption's source names the estimated curves, not the closed forms -- those from exact moment operators
    included."""
    x = np.arange(3.0)
    theory = _collect([("a", lambda: Curve(x, x)), ("b", lambda: Curve(x, x, "closed form (exact moment operators)")),
                       ("c", lambda: Curve(x, x, "estimated from moment operators (64 samples)"))], "evaluators")
    assert theory.source == "evaluators; estimated theory: c estimated from moment operators (64 samples)"


def test_figures_4_and_5_say_what_their_dotted_and_dashed_curves_are(figures):
    """Figure 4's dotted curve is a Jensen lower bound, not E w's theory, in its legend and caption; figure 5's rho
    is defined in its legend and caption."""
    specs = {s.name: s for s in figure_specs(True)}
    assert "Dotted: 1/(1 + E far mass) per family, by Jensen a lower bound of the mean weight" in \
        specs["fig4_near_weight"].summary
    assert "E A = rho I" in specs["fig5_far_residual"].summary
    fig4 = legend_texts(figures["fig4_near_weight"][2].figure.axes[0].get_legend())
    assert any(t.startswith("Jensen lower bound of") for t in fig4)
    fig5 = " ".join(legend_texts(figures["fig5_far_residual"][2].figure.axes[0].get_legend()))
    assert "(1+\\rho)" in fig5 and "\\mathbb{E}A = \\rho I" in fig5


def assert_one_colour_per_arm(drawn, arms) -> None:
    """Every line recorded under an arm's name has that arm's colour (``probeplots.arm_style``), in every panel."""
    from matplotlib.colors import to_hex

    axes = drawn.figure.axes
    for s in drawn.series:
        if s.name in arms and s.kind not in ("points",):
            assert to_hex(line_of(axes[s.panel], s).get_color()) == probeplots.arm_style(s.name, arms)["color"], s.name


def test_probe_arms_have_distinct_colours_and_groups():
    """Sixteen arms, each in one group and its own colour (figure 7's order panel draws them together); an arm in
    no group takes the last row and a colour by its place."""
    assert set(probeplots.ARM_COLORS) == set(probeplots.KNOWN_ARMS) and len(probeplots.KNOWN_ARMS) == 16
    assert len(set(probeplots.ARM_COLORS.values())) == 16
    rows = probeplots.arm_rows(["twopoint", "rope", "learned", "nope", "vonmises"])
    assert rows == [("baselines and other methods", ["nope", "rope"]), ("learned token angles", ["learned"]),
                    (probeplots.OTHER_ARMS, ["twopoint", "vonmises"])]
    arms = ["twopoint", "rope", "vonmises"]
    assert probeplots.arm_style("rope", arms) == probeplots.arm_style("rope", ["rope"])
    assert probeplots.arm_style("twopoint", arms)["color"] != probeplots.arm_style("vonmises", arms)["color"]


def test_figure_6_draws_each_arms_seed_statistics_in_its_groups_row():
    sweep = synthetic_sweep(missing=[("alibi", 1), ("alibi", 2)])
    drawn = probeplots.fig_probes(sweep)
    mult = np.asarray(sweep["multipliers"], dtype=float)
    rows = [["nope", "rope", "alibi", "path"], ["random"], ["learned", "learned_qkv"]]  # the groups, typed here
    assert [members for _, members in probeplots.arm_rows(sweep["arms"])] == rows
    assert len(drawn.figure.axes) == 3 * len(rows)
    for r, members in enumerate(rows):
        shown = members + ([] if "rope" in members else ["rope"])  # rope in every row, for comparison
        for col, key in enumerate(("ppl", "ratio_last_segment", "far_mass")):
            panel = 3 * r + col
            assert {s.name for s in drawn.series if s.panel == panel and s.kind == "measured"} == set(shown)
            for arm in shown:
                st = sweep["arms"][arm]
                s = one(drawn, panel=panel, name=arm, kind="measured")
                mean = np.array([np.nan if v is None else v for v in st[key]["mean"]], dtype=float)
                assert same(s.x, mult) and same(s.y, mean)
                assert s.label == f"{arm} (n={st['n_seeds']})" + ("" if arm in members else ", for comparison")
                if st["n_seeds"] == 1 or arm not in members:
                    assert s.band is None
                    continue
                ci = st[key]["ci95"]
                hi = np.array([np.nan if c is None else c[1] for c in ci], dtype=float)
                lo = np.array([np.nan if c is None else c[0] for c in ci], dtype=float)
                assert same(s.band[1], hi)
                assert same(s.band[0], lo if key == "far_mass" else np.maximum(lo, 0.5 * np.nanmin(mean)))
            assert same(one(drawn, panel=panel, name="train length", kind="reference").x, [1.0])
    assert one(drawn, name="alibi", panel=0).label.endswith("(n=1)")
    assert_record_is_the_drawing(drawn)
    assert_every_series_names_its_kind(drawn)
    assert_one_colour_per_arm(drawn, list(sweep["arms"]))
    assert_legends_and_titles_clear(drawn.figure)


def agreement_result() -> dict:
    """A small ``probes.theory_stats.agreement`` result: four arms (one in no group), law and C3 rows at 2x, 4x and
    8x (judged at 4x and 8x), window points, and both degradation orders."""
    arms = ("rope", "random", "learned_key", "twopoint")
    far = [{"arm": arm, "kind": kind, "multiplier": m, "seeds": 3, "judged": m in (4, 8),
            "verdict": "NOT RESOLVED" if m in (4, 8) else "not judged", "evidence": "",
            "measured": {"mean": 0.1 * i + 0.01 * m, "ci": [0.1 * i + 0.01 * m - 0.02, 0.1 * i + 0.01 * m + 0.02]},
            "pred": {"mean": 0.1 * i + 0.012 * m + (0.005 if kind == "c3" else 0.0)}}
           for i, arm in enumerate(arms) for kind in ("law", "c3") for m in (2, 4, 8)]
    points = [{"arm": arm, "seed": j, "window_measured": 3.0 + i + j, "window_pred": 2.5 + i + 2 * j}
              for i, arm in enumerate(arms) for j in range(3)]
    pred = {"rope": 0.2, "random": 0.5, "learned_key": 0.1, "twopoint": 0.4}
    measured = {"rope": 0.1, "random": 0.3, "learned_key": 0.2, "twopoint": 0.05}
    orders = [{"arms": list(arms), "without": [], "pred": pred, "measured": measured, "rho": 0.4,
               "verdict": "NOT RESOLVED", "note": "ranked over 4 arms"},
              {"arms": list(arms), "without": ["alibi"], "pred": pred, "measured": measured, "rho": 0.4,
               "verdict": "NOT RESOLVED", "note": "ranked over 4 arms"}]
    return {"runs": {arm: [0, 1, 2] for arm in arms}, "far": far, "seq_len": 32, "window_points": points,
            "order": orders[0], "orders": orders}


def test_figure_7_draws_each_arms_far_mass_window_and_rank_in_its_groups_row():
    result_ = agreement_result()
    drawn = probeplots.fig_theory(result_)
    rows = [["rope"], ["random"], ["learned_key"], ["twopoint"]]  # baselines, random, author's variants, other
    assert [members for _, members in probeplots.arm_rows(result_["runs"])] == rows
    assert len(drawn.figure.axes) == 3 * len(rows) + 1
    for r, (arm,) in enumerate(rows):
        for col, kind in enumerate(("law", "c3")):
            panel = 3 * r + col
            far = [row for row in result_["far"] if row["arm"] == arm and row["kind"] == kind]
            measured = one(drawn, panel=panel, name=arm, kind="measured")
            predicted = one(drawn, panel=panel, name=arm, kind="predicted")
            assert measured.label == f"{arm} (n=3)" and predicted.label is None
            assert same(measured.x, [row["multiplier"] for row in far]) and same(predicted.x, measured.x)
            assert same(measured.y, [row["measured"]["mean"] for row in far])
            assert same(measured.band[0], [row["measured"]["ci"][0] for row in far])
            assert same(predicted.y, [row["pred"]["mean"] for row in far])
            judged = sorted(s.x[0] for s in drawn.series if s.panel == panel and s.name == "judged length")
            assert judged == [4.0, 8.0]
        pts = [p for p in result_["window_points"] if p["arm"] == arm]
        window = one(drawn, panel=3 * r + 2, name=arm, kind="points")
        assert same(window.x, [p["window_measured"] for p in pts]) and same(window.y, [p["window_pred"] for p in pts])
    # (d): rank 1 = the least; by D: learned_key 0.1, rope 0.2, twopoint 0.4, random 0.5; by the measured ratio:
    # twopoint 0.05, rope 0.1, learned_key 0.2, random 0.3 (typed here)
    ranks = {"learned_key": (1, 3), "rope": (2, 2), "twopoint": (3, 1), "random": (4, 4)}
    for arm, (by_d, by_measured) in ranks.items():
        s = one(drawn, panel=3 * len(rows), name=arm, kind="ranks")
        assert same(s.x, [0, 1]) and same(s.y, [by_d, by_measured])
    title = drawn.figure.axes[-1].get_title()
    assert "every arm: Spearman 0.40, NOT RESOLVED" in title and "without alibi: Spearman 0.40" in title
    assert_record_is_the_drawing(drawn)
    assert_every_series_names_its_kind(drawn)
    assert_one_colour_per_arm(drawn, list(result_["runs"]))
    assert_legends_and_titles_clear(drawn.figure)


@pytest.mark.parametrize("family, panel", [("accum.simulations.examples:TwoPointAngles", 0),
                                           ("accum.simulations.examples:SignedPermutation", 1)])
def test_figure_1_draws_a_user_family_in_the_panel_of_its_step_form(figures, tmp_path, family, panel):
    """`accum figures --family`: a user SO(2) family (angle steps) is drawn in (a) beside the SO(2) laws, a user
    matrix family (dense steps) in (b), as the step form of its first sample says (``cli.extra_family``)."""
    extra = extra_family(family, ["dim=8"])
    job = next(j for j in coherence_spec(True, extra).jobs if j.series == EXTRA_SERIES)
    measured = figures["fig1_coherence"][0] + fig_data.ensure([job], tmp_path, SEED, progress=False)
    drawn = plots.fig_coherence(measured, THEORIES["fig1_coherence"](measured))
    assert one(drawn, name=EXTRA_SERIES, kind="Monte Carlo").panel == panel
    assert one(drawn, name=EXTRA_SERIES, kind="theory").panel == panel
    assert drawn.figure.axes[panel].get_title().startswith(("(a) SO(2) planes", "(b) matrix families")[panel])
    assert_record_is_the_drawing(drawn)


@pytest.mark.parametrize("name", ["fig1_coherence", "fig3_score_gap"])
def test_an_extra_familys_series_name_their_kind_too(tmp_path, name):
    """A family drawn beside the built-ins (accum figures --family): its Monte Carlo points and its theory are named
    as such, its histogram gets its C4 Gaussian, and figure 3's dimension curves stay the built-ins'."""
    extra = extra_family("accum.simulations.examples:SignedPermutation", ["dim=8"])
    spec = next(s for s in figure_specs(True, extra) if s.name == name)
    measured = fig_data.ensure(spec.jobs, tmp_path, SEED, progress=False)
    theory = THEORIES[name](measured)
    drawn = plots.BUILDERS[name](measured, theory)
    assert_every_series_names_its_kind(drawn)
    assert any(s.name == EXTRA_SERIES and s.kind == "Monte Carlo" for s in drawn.series)
    if name == "fig3_score_gap":
        assert one(drawn, name=gaussian_name(EXTRA_SERIES), kind="theory").panel == 0
        builtin = sorted(m.record["result"]["dim"] for m in measured if m.job.series != EXTRA_SERIES)
        assert sorted(theory.curves["far-variance"].x) == builtin == sorted(theory.curves["gap"].x)
