"""Figures 6 and 7: the C7 attention probes, as small multiples.

Sixteen arms in one panel overplot, so each figure has one row of panels per group of arms (``ARM_GROUPS``: the
baselines and other methods, the random rotations, the learned token angles, the author's variants of them; arms
in no group, e.g. a family arm, in a last row), each arm named as ``probes/REPORT.md`` and ``accum probe report``
name it and drawn in its own colour and marker in every panel (``arm_style``).  Each row's legend sits right of
the row, off the data, and its title names the kind of every series in the row (``record.KINDS``).  Like
``figures.plots``, nothing here computes: figure 6 reads the sweep's per-arm statistics, figure 7 the result of
``probes.theory_stats.agreement``, and every series goes through a ``Recorder``.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import matplotlib.ticker
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from accum.probes.model import RANDOM_ARMS, TOKEN_ARMS
from accum.probes.presets import AUTHOR_VARIANTS

from .plots import FALLBACK, MARKERS, THEORY, plain_log_y, plain_ticks, styled
from .record import Drawn, Recorder

#: (row title, arms) of the probe figures, in the report's arm names (``probes.model``, ``probes.presets``)
ARM_GROUPS = (
    ("baselines and other methods", ("nope", "rope", "alibi", "path", "gain")),
    ("random rotations", RANDOM_ARMS),
    ("learned token angles", TOKEN_ARMS),
    ("learned: the author's variants", tuple(AUTHOR_VARIANTS)),
)
#: the row of arms in no group
OTHER_ARMS = "other arms"
#: drawn in every row of figure 6 that lacks it, for comparison (the C7 claims are stated against RoPE)
COMPARISON = "rope"
#: one colour per arm, distinct over all sixteen (figure 7's order panel draws them together)
ARM_COLORS = {
    "nope": "#000000", "rope": "#7f7f7f", "alibi": "#d62728", "path": "#2ca02c", "gain": "#bcbd22",
    "random": "#1f77b4", "random_drift": "#17becf", "random_qkv": "#9467bd", "random_drift_qkv": "#637939",
    "random_qkv_indep": "#e377c2", "learned": "#ff7f0e", "learned_qkv": "#8c564b", "learned_key": "#393b79",
    "learned_qkv_key": "#7b4173", "learned_author": "#8c6d31", "learned_qkv_author": "#843c39",
}
KNOWN_ARMS = tuple(arm for _, arms in ARM_GROUPS for arm in arms)


def arm_rows(arms: Iterable[str]) -> list[tuple[str, list[str]]]:
    """The rows of a probe figure: each group of ``ARM_GROUPS`` with the given arms it holds (in the group's
    order; a group holding none is left out), then ``OTHER_ARMS`` with the arms in no group (in the given order)."""
    arms = list(arms)
    rows = [(title, [a for a in group if a in arms]) for title, group in ARM_GROUPS]
    rows.append((OTHER_ARMS, [a for a in arms if a not in KNOWN_ARMS]))
    return [(title, members) for title, members in rows if members]


def arm_style(arm: str, arms: Sequence[str]) -> dict[str, Any]:
    """An arm's colour and marker, the same in every panel of both figures: ``ARM_COLORS`` and its place among the
    known arms; an arm in no group takes them by its place in ``arms`` (all arms of the figure)."""
    if arm in ARM_COLORS:
        i = KNOWN_ARMS.index(arm)
        return {"color": ARM_COLORS[arm], "marker": MARKERS[i % len(MARKERS)]}
    i = [a for a in arms if a not in ARM_COLORS].index(arm)
    return {"color": FALLBACK[i % len(FALLBACK)], "marker": MARKERS[(len(KNOWN_ARMS) + i) % len(MARKERS)]}


def row_legend(ax: Axes, arms: Sequence[str], labels: Sequence[str], all_arms: Sequence[str], title: str) -> None:
    """The legend of a row, right of ``ax`` (its last panel): one solid entry per arm (its colour and marker)."""
    handles = [Line2D([], [], linestyle="-", markersize=4, **arm_style(a, all_arms)) for a in arms]
    ax.legend(handles, labels, loc="center left", bbox_to_anchor=(1.03, 0.5), title=title, fontsize=7.5,
              title_fontsize=7.5, alignment="left")


def values(xs: Sequence[Any]) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in xs], dtype=float)


# ------------------------------------------------------------------------------------------- figure 6

#: (statistic of the sweep, panel title, y label) of figure 6's columns
PROBE_METRICS = (("ppl", "(a) perplexity, all positions of each window", "perplexity (per {unit})"),
                 ("ratio_last_segment", "(b) last train-length segment / the same tokens at 1x",
                  "ppl(last segment) / ppl(same tokens, 1x)"),
                 ("far_mass", r"(c) attention mass on keys $\geq L$ back", "far attention mass"))
PROBES_KEY = ("arm (seeds): measured, mean over\nseeds and 95% band (thin, no band:\nrope for comparison)\n"
              "dotted: 1x (reference)")


def _arm_curve(rec: Recorder, ax: Axes, arm: str, st: dict, key: str, mult: np.ndarray, label: str,
               style: dict, band: bool = True) -> None:
    """One arm's mean over seeds of statistic ``key`` with its 95% t band (none with one seed, or when ``band`` is
    False; on a log axis a lower edge below half the arm's smallest mean, e.g. <= 0, is drawn at that floor)."""
    mean, ci = values(st[key]["mean"]), st[key]["ci95"]
    if band and any(c is not None for c in ci):
        lo = values([None if c is None else c[0] for c in ci])
        hi = values([None if c is None else c[1] for c in ci])
        if key != "far_mass":
            lo = np.maximum(lo, np.nanmin(mean) * 0.5)  # a t interval can reach below 0 on a log axis
        rec.banded(ax, arm, "measured", mult, mean, lo, hi, label, alpha=0.13, **style)
    else:
        rec.plot(ax, arm, "measured", mult, mean, label, **style)


@styled
def fig_probes(sweep: dict) -> Drawn:
    """Figure 6 from the probes' multi-seed ``sweep.json``: one row per group of arms (``arm_rows``; RoPE, thin and
    grey, in every row without it), per arm the mean over training seeds of (a) the perplexity over all positions,
    (b) over the last train-length segment of each window divided by the 1x perplexity of the same tokens
    (``ratio_last_segment``: the segment's own difficulty cancels), (c) the far attention mass (keys >= L_train
    back), versus evaluation length / train length; bands are the 95% Student t intervals over seeds.  A column
    shares its y axis, so rows compare."""
    drawn = [arm for arm, st in sweep["arms"].items() if st.get("n_seeds")]
    rows = arm_rows(drawn)
    fig = Figure(figsize=(15, 1.0 + 3.0 * len(rows)), layout="constrained")
    grid = fig.subplots(len(rows), len(PROBE_METRICS), sharex=True, sharey="col", squeeze=False)
    rec = Recorder(grid.ravel())
    mult = np.asarray(sweep["multipliers"], dtype=float)
    unit = "BPE token" if sweep["config"]["train"].get("tokenizer") == "bpe" else "character"
    for r, (group, arms) in enumerate(rows):
        shown = arms + ([COMPARISON] if COMPARISON in drawn and COMPARISON not in arms else [])
        labels = [f"{a} (n={sweep['arms'][a]['n_seeds']})" + ("" if a in arms else ", for comparison") for a in shown]
        for ax, (key, title, ylabel) in zip(grid[r], PROBE_METRICS):
            for arm, label in zip(shown, labels):
                style = {**arm_style(arm, drawn), "markersize": 3.5}
                if arm not in arms:  # the comparison arm: thin, no band
                    style.update(linewidth=0.9, markersize=2.5)
                _arm_curve(rec, ax, arm, sweep["arms"][arm], key, mult, label, style, band=arm in arms)
            ax.axvline(1.0, color="0.5", linewidth=1.0, linestyle=":")
            rec.keep(ax, "train length", "reference", None, 1.0, np.nan)
            if key == "ratio_last_segment":
                ax.axhline(1.0, color="0.5", linewidth=1.0, linestyle=":")
                rec.keep(ax, "same as 1x", "reference", None, np.nan, 1.0)
            ax.set_xscale("log", base=2)
            plain_ticks(ax, mult)
            if key != "far_mass":
                ax.set_yscale("log")
                plain_log_y(ax, subs=(1.0, 1.2, 1.5, 2.0, 3.0, 5.0, 7.0))
            ax.set_title(f"{group}\n{title}", fontsize=9)
            ax.set_ylabel(ylabel.format(unit=unit), fontsize=8)
            if r == len(rows) - 1:
                ax.set_xlabel(rf"evaluation length / train length ($L = {sweep['seq_len']}$ tokens)")
        row_legend(grid[r, -1], shown, labels, drawn, PROBES_KEY)
    n_runs = sum(st.get("n_seeds", 0) for st in sweep["arms"].values())
    missing = len(sweep.get("missing", []))
    state = (f"{n_runs} runs, complete under the sweep's stopping rule" if not missing else
             f"{n_runs} runs; {missing} more asked for by the stopping rule")
    fig.suptitle(f"C7: attention probes past their train length, mean and 95% interval over seeds ({state})", fontsize=10)
    return rec.drawn(fig)


# ------------------------------------------------------------------------------------------- figure 7

THEORY_KEY = ("arm (seeds)\nsolid: measured far mass, mean\nand 95% band over seeds\ndashed: predicted\n"
              "dotted: judged lengths (reference)\n(c): one point per head and seed")
#: (prediction kind of ``agreement``'s far rows, panel title) of figure 7's far-mass columns
FAR_COLUMNS = (("law", "(a) far mass vs the step-law prediction"), ("c3", "(b) far mass vs the C3 transfer from 2x"))


def _far_panel(rec: Recorder, ax: Axes, result: dict, arms: Sequence[str], kind: str, all_arms: Sequence[str]) -> None:
    """Per arm the measured far mass (solid, 95% band over seeds) and the ``kind`` prediction (dashed) versus
    length; a dotted vertical line at each length where ``kind``'s rows are judged (probes/theory_stats.py)."""
    for arm in arms:
        rows = [r for r in result["far"] if r["arm"] == arm and r["kind"] == kind]
        if not rows:
            continue
        style = arm_style(arm, all_arms)
        mult = np.array([r["multiplier"] for r in rows], dtype=float)
        label = f"{arm} (n={rows[0]['seeds']})"
        measured = [r["measured"]["mean"] for r in rows]
        if all(r["measured"]["ci"] is not None for r in rows):
            rec.banded(ax, arm, "measured", mult, measured, [r["measured"]["ci"][0] for r in rows],
                       [r["measured"]["ci"][1] for r in rows], label, alpha=0.13, markersize=3.5, **style)
        else:
            rec.plot(ax, arm, "measured", mult, measured, label, markersize=3.5, **style)
        rec.plot(ax, arm, "predicted", mult, [r["pred"]["mean"] for r in rows], None, color=style["color"], **THEORY)
    for m in sorted({r["multiplier"] for r in result["far"] if r["kind"] == kind and r["judged"]}):
        ax.axvline(m, color="0.6", linewidth=0.9, linestyle=":", zorder=1)
        rec.keep(ax, "judged length", "reference", None, m, np.nan)
    ax.set_xscale("log", base=2)
    plain_ticks(ax, sorted({r["multiplier"] for r in result["far"]}))
    ax.set_ylabel(r"far attention mass (keys $\geq L$ back)", fontsize=8)


def _window_panel(rec: Recorder, ax: Axes, result: dict, arms: Sequence[str], all_arms: Sequence[str]) -> None:
    """Predicted window against measured window, one point per head and seed (descriptive: not judged)."""
    for arm in arms:
        pts = [p for p in result["window_points"] if p["arm"] == arm]
        x, y = [p["window_measured"] for p in pts], [p["window_pred"] for p in pts]
        style = arm_style(arm, all_arms)
        ax.scatter(x, y, s=10, alpha=0.7, color=style["color"], marker=style["marker"])
        rec.keep(ax, arm, "points", None, x, y)
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):  # labels at 1, 2, 5 x 10^k: a window axis spans less than a decade
        axis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        axis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_ylabel(r"predicted window $W = \sum_{n<L} C(n)^2$", fontsize=8)


def order_title(orders: Sequence[dict]) -> str:
    """Both degradation orders of ``agreement`` (every arm; without ALiBi) in a title: rho and verdict each."""
    parts = []
    for o in orders:
        what = "every arm" if not o["without"] else f"without {', '.join(o['without'])}"
        rho = "n/a" if o["rho"] is None else f"{o['rho']:.2f}"
        parts.append(f"{what}: Spearman {rho}, {o['verdict']}")
    return "(d) degradation order over arms\n" + "; ".join(parts)


def _order_panel(rec: Recorder, ax: Axes, result: dict, all_arms: Sequence[str]) -> None:
    """A slope chart of the degradation order: per arm its rank by the law-based degradation D (left) joined to its
    rank by the measured log ppl ratio (right), rank 1 the least; each end labelled with the arm and its value.
    Crossing lines are arms the law orders differently from the models."""
    order = result["orders"][0]  # every arm; the order without ALiBi is the same points less one
    arms = order["arms"]
    pred = np.array([order["pred"][a] for a in arms])
    meas = np.array([order["measured"][a] for a in arms])
    left, right = np.argsort(np.argsort(pred)) + 1, np.argsort(np.argsort(meas)) + 1
    for arm, a, b, p, m in zip(arms, left, right, pred, meas):
        style = arm_style(arm, all_arms)
        rec.plot(ax, arm, "ranks", [0.0, 1.0], [a, b], None, linewidth=1.2, markersize=4, **style)
        ax.text(-0.03, a, f"{arm}  {p:.2f}", ha="right", va="center", fontsize=7, color=style["color"])
        ax.text(1.03, b, f"{m:.3f}  {arm}", ha="left", va="center", fontsize=7, color=style["color"])
    ax.set_xlim(-0.75, 1.75)
    ax.set_ylim(0.3, len(arms) + 0.7)
    ax.set_xticks([0.0, 1.0], [r"rank by law-based degradation $D = -\log(1 - F_{law}(M))$",
                               r"rank by measured $\log$ ppl$(M)$ / ppl$(1x)$"], fontsize=8)
    ax.set_yticks([])
    ax.grid(False)
    ax.set_title(order_title(result["orders"]), fontsize=9)
    ax.legend([Line2D([], [], color="0.3", marker="o", markersize=4)],
              ["one line per arm: its rank by D (left) and by the measured ratio (right); rank 1 the least degradation"],
              loc="upper center", bbox_to_anchor=(0.5, -0.09), fontsize=7.5)


@styled
def fig_theory(result: dict) -> Drawn:
    """Figure 7 from ``probes.theory_stats.agreement``: one row per group of arms (``arm_rows``) with, per arm, (a)
    the far mass versus evaluation length / train length, measured (solid, 95% band over seeds) and predicted from
    the family's law and the 1x statistics (dashed), (b) the same with the C3 transfer row (extrapolated from the
    head's own 2x attention), (c) predicted against measured window, one point per head and seed (descriptive, not
    judged); then (d) the degradation order over all arms (``_order_panel``), both orders' verdicts in its title."""
    arms = list(result["runs"])
    rows = arm_rows(arms)
    fig = Figure(figsize=(15, 4.6 + 2.9 * len(rows)), layout="constrained")
    grid = fig.add_gridspec(len(rows) + 1, 3, height_ratios=[2.9] * len(rows) + [4.2])
    panels = [[fig.add_subplot(grid[r, c]) for c in range(3)] for r in range(len(rows))]
    ax_order = fig.add_subplot(grid[len(rows), :2])
    rec = Recorder([ax for row in panels for ax in row] + [ax_order])
    for r, (group, members) in enumerate(rows):
        for ax, (kind, title) in zip(panels[r], FAR_COLUMNS):
            _far_panel(rec, ax, result, members, kind, arms)
            ax.set_title(f"{group}\n{title}", fontsize=9)
        _window_panel(rec, panels[r][2], result, members, arms)
        panels[r][2].set_title(f"{group}\n(c) mixing window per head (not judged)", fontsize=9)
        labels = [f"{a} (n={len(result['runs'][a])})" for a in members]
        row_legend(panels[r][2], members, labels, arms, THEORY_KEY)
    for ax in panels[-1][:2]:
        ax.set_xlabel(rf"evaluation length / train length ($L = {result['seq_len']}$ tokens)")
    panels[-1][2].set_xlabel("measured window (lags holding 90% of attention, at L)")
    _order_panel(rec, ax_order, result, arms)
    fig.suptitle("Theory vs trained probes: accum's theory from each head's realised step law", fontsize=10)
    return rec.drawn(fig)
