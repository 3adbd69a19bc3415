"""One pure function per figure: saved records (+ theory curves) in, a matplotlib ``Figure`` and the series it
draws out (``Drawn``).

Nothing here measures or evaluates theory; it only reads ``record["result"]`` (and the ``Theory`` curves of
``figures.overlays``) and draws.  Every curve, point set, band and line goes through a ``figures.record.Recorder``,
which draws it and keeps it as a ``Series`` (panel, name, kind, label, x, y, band): the arrays a figure shows, for
tests to hold against their data source (tests/figures/test_figures_content.py).  Figures are built as ``matplotlib.figure.Figure`` objects (no pyplot, no
figure registry, no backend chosen at import: ``savefig`` uses matplotlib's canvas for each format, Agg for PNG),
with mathtext labels, inside ``matplotlib.rc_context(STYLE)`` so the
shared style never leaks into the caller's rcParams.  Error bands and bars are +-2 standard errors.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import matplotlib
import matplotlib.ticker
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .data import Measured
from .overlays import Theory, by_series
from .record import Drawn, Recorder
from .specs import EXTRA_SERIES

#: the one style of every figure
STYLE: dict[str, Any] = {
    "figure.dpi": 100,
    "savefig.dpi": 150,
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "legend.fontsize": 7.5,
    "legend.frameon": False,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "axes.grid": True,
    "grid.alpha": 0.25,
    "grid.linewidth": 0.6,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "lines.linewidth": 1.4,
    "lines.markersize": 3.5,
    "errorbar.capsize": 2,
    "mathtext.fontset": "dejavusans",
    "text.usetex": False,
    "pdf.fonttype": 42,
}

#: one colour per series, the same in every figure
COLORS = {
    "so2-gaussian": "#1f77b4", "so2-token": "#ff7f0e", "householder-2": "#2ca02c", "givens": "#9467bd",
    "rope": "#666666", "so2-uniform": "#17becf", "so2-vonmises": "#8c564b", "so2-cauchy": "#e377c2",
    "householder-1": "#bcbd22", "lie-walk": "#d62728", "haar": "#000000", "nope": "#000000", "alibi": "#d62728",
    "qkv-0.5": "#1f77b4", "qkv-1": "#17becf", "qk-0.5": "#666666",
    "random": "#1f77b4", "learned": "#ff7f0e", "learned_qkv": "#9467bd", "path": "#2ca02c",
    "extra": "#e6007e",  # a family drawn beside the built-ins (accum figures --family; figures.specs.EXTRA_SERIES)
}
FALLBACK = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
THEORY = {"linestyle": "--", "linewidth": 1.3, "alpha": 0.95, "zorder": 3}
#: Monte Carlo curves: markers (one shape per series) joined by a thin line, drawn under the theory
MC = {"linewidth": 0.9, "zorder": 2}
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h")
#: standard errors either side of an estimate in bands and error bars
K_SE = 2.0

PROBE_LABELS = {
    "nope": "NoPE", "rope": "RoPE", "alibi": "ALiBi", "random": r"random SO(2), $U(\pm\omega)$ (QK)",
    "random_drift": r"random SO(2), $U(0, 2\omega)$ (QK)", "random_qkv": r"random SO(2), $U(\pm\omega)$ (QKV)",
    "random_qkv_indep": r"random SO(2), $U(\pm\omega)$ (QKV, values' own walk)",
    "random_drift_qkv": r"random SO(2), $U(0, 2\omega)$ (QKV)",
    "learned": "learned token angles (QK)", "learned_qkv": "learned token angles (QKV)",
    "learned_key": "learned token angles (QK, key-side token)",
    "learned_qkv_key": "learned token angles (QKV, key-side token)",
    "learned_author": "learned token angles (QK, one AdamW group)",
    "learned_qkv_author": "learned token angles (QKV, one AdamW group)",
    "gain": r"hidden-state gain $\omega(1 + Wh)$ (QK)", "path": "PaTH (Householder)",
}
#: colours of the probe arms that ``COLORS`` does not name; variants of an arm take a lighter shade of its colour
#: (arms that rotate the values, ``_qkv`` in the name, are drawn dashed)
PROBE_COLORS = {"random_drift": "#17becf", "random_qkv": "#1f77b4", "random_qkv_indep": "#6baed6",
                "random_drift_qkv": "#17becf", "learned_key": "#fdae6b", "learned_qkv_key": "#bcbddc",
                "learned_author": "#8c564b", "learned_qkv_author": "#c49c94", "gain": "#bcbd22"}


def draw_theory(rec: Recorder, ax: Axes, theory: Theory, name: str, c: str, label: str | None = None,
                kind: str = "theory", **style: Any) -> None:
    """The theory curve ``name`` if the theory has one (missing ones are noted in the caption), dashed, kept."""
    curve = theory.curves.get(name)
    if curve is not None:
        rec.plot(ax, name, kind, curve.x, curve.y, label, color=c, **{**THEORY, **style})


def rotates_values(arm: str) -> bool:
    """Whether a probe arm rotates the values too (its name carries ``_qkv``): drawn dashed."""
    return "_qkv" in arm


def color(series: str, index: int = 0) -> str:
    return COLORS.get(series, FALLBACK[index % len(FALLBACK)])


def marker(index: int) -> str:
    return MARKERS[index % len(MARKERS)]


def plain_ticks(ax: Axes, values: Sequence[float]) -> None:
    """Log-scaled x axis labelled at ``values`` in plain numbers (16, 64, ... rather than 2^4, 2^6)."""
    ax.set_xticks(list(values), [f"{v:g}" for v in values])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())


def plain_log_y(ax: Axes, subs: tuple[float, ...] = (1.0, 2.0, 5.0)) -> None:
    """Log-scaled y axis labelled at subs x 10^k (default 1, 2, 5, 10, 20, ...) in plain numbers."""
    ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=subs))
    ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())


def styled(build: Callable[..., Drawn]) -> Callable[..., Drawn]:
    """Run a figure builder inside ``rc_context(STYLE)``."""
    @functools.wraps(build)
    def wrapper(*args: Any, **kwargs: Any) -> Drawn:
        with matplotlib.rc_context(STYLE):
            return build(*args, **kwargs)
    return wrapper


def result(m: Measured) -> dict:
    return m.record["result"]


def arrays(m: Measured, *keys: str) -> list[np.ndarray]:
    return [np.asarray(result(m)[k], dtype=float) for k in keys]


def theory_legend_entry(ax: Axes, text: str = "theory (dashed)") -> None:
    """A neutral legend entry explaining the dashed lines."""
    ax.plot([], [], color="0.3", label=text, **THEORY)


# ------------------------------------------------------------------------------------------- figure 1

def _coherence_panel(rec: Recorder, ax: Axes, measured: Sequence[Measured], theory: Theory) -> float:
    """|c(n)| and its +-2 se band up to the first n where |c| <= 2 se (from there on the estimate is
    indistinguishable from 0 and is not drawn), theory |c(n)| dashed.  Returns the smallest |c| drawn, for
    the y range."""
    lowest = np.inf
    for i, m in enumerate(measured):
        c = color(m.job.series, i)
        steps, mean, se = arrays(m, "steps", "mean", "stderr")
        mag = np.abs(mean)
        resolved = np.logical_and.accumulate(mag > K_SE * se)
        rec.banded(ax, m.job.series, "Monte Carlo", steps, np.where(resolved, mag, np.nan), mag - K_SE * se,
                   mag + K_SE * se, m.job.label, where=resolved, color=c, marker=".", **MC)
        lowest = min(lowest, float(np.min(mag[resolved], initial=np.inf)))
        curve = theory.curves.get(m.job.series)
        if curve is not None:
            rec.plot(ax, m.job.series, "theory", curve.x, np.where(np.abs(curve.y) > 0, np.abs(curve.y), np.nan),
                     color=c, **THEORY)
    ax.set_yscale("log")
    ax.set_xlabel(r"accumulated steps $n$")
    ax.set_ylabel(r"coherence $|c(n)| = |\mathbb{E}\,[q^{\mathsf{T}} A_n \cdots A_1 k]|$")
    return lowest


@styled
def fig_coherence(measured: Sequence[Measured], theory: Theory) -> Drawn:
    """Figure 1: coherence versus steps, SO(2) angle laws (and RoPE) left, matrix families right."""
    fig = Figure(figsize=(11, 5.2), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    rec = Recorder(axes)
    titles = ("(a) SO(2) planes: accumulated angles, RoPE for contrast", "(b) matrix families")
    lows = []
    for panel, (ax, title) in enumerate(zip(axes, titles)):
        lows.append(_coherence_panel(rec, ax, [m for m in measured if m.job.panel == panel], theory))
        ax.set_title(title)
        theory_legend_entry(ax)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2)
    axes[1].set_ylabel("")
    axes[1].yaxis.set_tick_params(labelleft=True)
    bottom = min(lows)
    axes[0].set_ylim(0.3 * bottom if np.isfinite(bottom) else 1e-4, 1.6)
    fig.suptitle(r"C1: products of accumulated transforms become incoherent ($q = k = 1/\sqrt{d}$; "
                 r"markers: Monte Carlo until $|c|$ first falls to $2\,$se)", fontsize=10)
    return rec.drawn(fig)


# ------------------------------------------------------------------------------------------- figure 2

@styled
def fig_window(measured: Sequence[Measured], theory: Theory) -> Drawn:
    """Figure 2: window width W(T) versus context length T (log-log)."""
    fig = Figure(figsize=(6.6, 4.6), layout="constrained")
    ax = fig.subplots()
    rec = Recorder([ax])
    for i, (key, group) in enumerate(by_series(measured).items()):
        c = color(key, i)
        t = np.array([result(m)["context"] for m in group], dtype=float)
        w = np.array([result(m)["mean"] for m in group])
        se = np.array([result(m)["stderr"] for m in group])
        rec.errorbar(ax, key, "Monte Carlo", t, w, K_SE * se, group[0].job.label, color=c, marker=marker(i), **MC)
        draw_theory(rec, ax, theory, key, c)
    theory_legend_entry(ax)
    ax.set_xscale("log", base=2)
    ax.set(yscale="log", xlabel=r"context length $T$ (tokens)",
           ylabel=r"window width $W(T) = \Sigma_{\Delta<T}\, c_T(\Delta)^2$ (offsets)",
           title=r"C2: finite mixing window, independent of $T$ ($d = 16$)")
    plain_ticks(ax, sorted({result(m)["context"] for m in measured}))
    plain_log_y(ax)
    ax.legend(loc="upper left")
    return rec.drawn(fig)


# ------------------------------------------------------------------------------------------- figure 3

@styled
def fig_score_gap(measured: Sequence[Measured], theory: Theory) -> Drawn:
    """Figure 3: (a) far-score densities per d against the near score, (b) the gap in far standard
    deviations, (c) the far-score second moment d E[s^2]; an extra family (series ``EXTRA_SERIES``) is one more
    density and one more point at its own dimension, in its own colour."""
    fig = Figure(figsize=(13, 4.2), layout="constrained")
    ax_hist, ax_gap, ax_var = fig.subplots(1, 3, gridspec_kw={"width_ratios": (1.5, 1, 1)})
    rec = Recorder([ax_hist, ax_gap, ax_var])
    builtin = [m for m in measured if m.job.series != EXTRA_SERIES]
    extra = [m for m in measured if m.job.series == EXTRA_SERIES]
    cmap = matplotlib.colormaps["viridis"]
    shades = [cmap(0.9 * i / max(len(builtin) - 1, 1)) for i in range(len(builtin))]
    labels = [m.job.label for m in builtin] + [m.job.label + ("" if "dim" in m.job.params else f" ($d={result(m)['dim']}$)")
                                               for m in extra]
    for m, c, label in zip(builtin + extra, shades + [COLORS[EXTRA_SERIES]] * len(extra), labels):
        counts, edges = arrays(m, "hist_counts", "hist_edges")
        density = np.where(counts > 0, counts / (counts.sum() * np.diff(edges)), np.nan)
        ax_hist.stairs(density, edges, color=c, linewidth=1.4, label=label)
        rec.keep(ax_hist, m.job.series, "density", label, edges, density)
    near = result(measured[0])["near"]
    near_label = rf"near score $q^{{\mathsf{{T}}}}k = {near:g}$"
    ax_hist.axvline(near, color="#d62728", linewidth=1.6, label=near_label)
    rec.keep(ax_hist, "near", "reference", near_label, near, np.nan)
    offset = result(measured[0])["offset"]
    ax_hist.set(yscale="log", xlabel=r"score $s = q^{\mathsf{T}} A_\Delta \cdots A_1 k$  ($|q| = |k| = 1$)",
                ylabel="density of far scores", title=rf"(a) far scores at distance $\Delta = {offset}$")
    ax_hist.legend(loc="upper left")

    dims = np.array([result(m)["dim"] for m in builtin], dtype=float)
    all_dims = np.array([result(m)["dim"] for m in measured], dtype=float)
    gap = np.array([result(m)["gap_sd"] for m in builtin])
    rec.plot(ax_gap, "gap", "Monte Carlo", dims, gap, "Monte Carlo", "o", color="#1f77b4", zorder=4)
    for m in extra:
        rec.plot(ax_gap, m.job.series, "Monte Carlo", [result(m)["dim"]], [result(m)["gap_sd"]], m.job.label, "D",
                 color=COLORS[EXTRA_SERIES], zorder=5)
    draw_theory(rec, ax_gap, theory, "gap", "0.2", label=r"theory $\sqrt{d}$")
    ax_gap.set_xscale("log", base=2)
    ax_gap.set_yscale("log", base=2)
    plain_ticks(ax_gap, all_dims)
    ax_gap.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax_gap.set(xlabel=r"head dimension $d$", ylabel=r"gap $(q^{\mathsf{T}}k - \mathbb{E}\,s) / \mathrm{sd}(s)$ (far sd)",
               title=r"(b) the gap opens as $\sqrt{d}$")
    ax_gap.legend(loc="upper left")

    var = np.array([result(m)["mean"] for m in builtin])
    se = np.array([result(m)["stderr"] for m in builtin])
    rec.errorbar(ax_var, "far-variance", "Monte Carlo", dims, var, K_SE * se, r"Monte Carlo $\pm 2\,$se", fmt="o",
                 color="#1f77b4", zorder=4)
    top = float(np.max(var + K_SE * se))
    for m in extra:
        v, e = result(m)["mean"], result(m)["stderr"]
        rec.errorbar(ax_var, m.job.series, "Monte Carlo", [result(m)["dim"]], [v], [K_SE * e], m.job.label, fmt="D",
                     color=COLORS[EXTRA_SERIES], zorder=5)
        top = max(top, v + K_SE * e)
    draw_theory(rec, ax_var, theory, "far-variance", "0.2", label=r"theory $|q|^2|k|^2 = 1$")
    point = theory.curves.get(EXTRA_SERIES)
    if point is not None:
        rec.plot(ax_var, EXTRA_SERIES, "theory", point.x, point.y, "its theory", "_", color=COLORS[EXTRA_SERIES],
                 markersize=14, markeredgewidth=2, zorder=6)
    ax_var.set_xscale("log", base=2)
    plain_ticks(ax_var, all_dims)
    ax_var.set(ylim=(0, max(1.5, top * 1.1)), xlabel=r"head dimension $d$",
               ylabel=r"$d\,\mathbb{E}\,[s^2]$ (far variance $\times\, d$)", title=r"(c) far variance is $1/d$")
    ax_var.legend(loc="lower right")
    fig.suptitle(r"C4: far scores concentrate as $\mathcal{N}(0, |q|^2|k|^2/d)$ (SO(2) Gaussian angles, "
                 r"$\sigma = 1$)", fontsize=10)
    return rec.drawn(fig)


# ------------------------------------------------------------------------------------------- figure 4

def far_set_series(rec: Recorder, ax: Axes, measured: Sequence[Measured], theory: Theory, **theory_style: Any) -> None:
    """Each measured series against its far-set sizes N with +-2 se bars, and its theory curve in its colour."""
    for i, m in enumerate(measured):
        c = color(m.job.series, i)
        sizes, y, se = arrays(m, "far_sizes", "mean", "stderr")
        rec.errorbar(ax, m.job.series, "Monte Carlo", sizes, y, K_SE * se, m.job.label, color=c, marker=marker(i), **MC)
        draw_theory(rec, ax, theory, m.job.series, c, **theory_style)


@styled
def fig_near_weight(measured: Sequence[Measured], theory: Theory) -> Drawn:
    """Figure 4: near-target weight w(N) versus the far-set size N (log-log)."""
    fig = Figure(figsize=(7.2, 4.8), layout="constrained")
    ax = fig.subplots()
    rec = Recorder([ax])
    far_set_series(rec, ax, measured, theory, linestyle=":")
    draw_theory(rec, ax, theory, "bound", "black", label=r"bound $w \leq 1/(1 + N e^{-2 s_0})$ (any steps of norm $\leq 1$)",
               kind="bound", linestyle="--", linewidth=1.4)
    draw_theory(rec, ax, theory, "alibi-floor", "#d62728", label=r"ALiBi floor $1/(1 + \Sigma_{\Delta \leq N}\, e^{-m\Delta})$",
               kind="floor", linestyle="-.", linewidth=1.4)
    ax.plot([], [], color="0.3", linestyle=":", label=r"theory $1/(1 + \mathbb{E}\,$far mass$)$ (dotted)")
    s0 = result(measured[0])["s0"]
    ax.set(xscale="log", yscale="log", xlabel=r"far-set size $N$ (far keys)",
           ylabel=r"near-target weight $w(N) = e^{s_0} / (e^{s_0} + \Sigma_{\Delta=1}^{N}\, e^{s_\Delta})$",
           title=rf"C5: near weight $\to 0$ with $N$ unless far mass is controlled ($s_0 = {s0:g}$, $d = 16$)")
    ax.legend(loc="lower left", fontsize=7)
    return rec.drawn(fig)


# ------------------------------------------------------------------------------------------- figure 5

@styled
def fig_far_residual(measured: Sequence[Measured], theory: Theory) -> Drawn:
    """Figure 5: far residual E|r(N)|^2 / |m|^2 with and without value rotation (log-log)."""
    fig = Figure(figsize=(6.8, 4.6), layout="constrained")
    ax = fig.subplots()
    rec = Recorder([ax])
    far_set_series(rec, ax, measured, theory)
    theory_legend_entry(ax, r"theory, exact in $N$ (dashed): $\to (1+\rho)/((1-\rho)N)$ with rotation, $1$ without")
    ax.set(xscale="log", yscale="log", xlabel=r"far-set size $N$ (far values)",
           ylabel=r"$\mathbb{E}\,|r(N)|^2 / |m|^2$, $\; r(N) = N^{-1}\Sigma_{\Delta=1}^{N}\, P_\Delta m$",
           title=r"C6: rotated values add incoherently: $|r| \propto 1/\sqrt{N}$ ($d = 16$)")
    ax.legend(loc="lower left")
    return rec.drawn(fig)


# ------------------------------------------------------------------------------------------- figure 6

@styled
def fig_probes(sweep: dict) -> Drawn:
    """Figure 6 from the probes' multi-seed ``sweep.json``: per arm the mean over training seeds of (a) the
    perplexity over all positions, (b) over the last train-length segment of each window divided by the 1x
    perplexity of the same tokens (``ratio_last_segment``: the segment's own difficulty cancels), (c) the far
    attention mass (keys >= L_train back), versus evaluation length / train length; bands are the 95%
    Student t intervals over seeds (arms with one finished seed are drawn without a band; on the log axes a
    lower edge below half the arm's smallest mean, e.g. <= 0, is drawn at that floor)."""
    fig = Figure(figsize=(15, 4.6), layout="constrained")
    axes = fig.subplots(1, 3)
    rec = Recorder(axes)
    mult = np.asarray(sweep["multipliers"], dtype=float)
    unit = "BPE token" if sweep["config"]["train"].get("tokenizer") == "bpe" else "character"
    panels = (("ppl", "(a) perplexity, all positions of each window", f"perplexity (per {unit})"),
              ("ratio_last_segment", "(b) last train-length segment, against the same tokens at 1x",
               "ppl(last segment) / ppl(same tokens, 1x)"),
              ("far_mass", r"(c) attention mass on keys $\geq L$ back", "far attention mass"))
    drawn = {arm: st for arm, st in sweep["arms"].items() if st.get("n_seeds")}
    for ax, (key, title, ylabel) in zip(axes, panels):
        for i, (arm, st) in enumerate(drawn.items()):
            mean = np.array([np.nan if v is None else v for v in st[key]["mean"]], dtype=float)
            style = {"color": PROBE_COLORS.get(arm, color(arm, i)), "marker": marker(i), "markersize": 4,
                     "linestyle": "--" if rotates_values(arm) else "-"}
            label = f"{PROBE_LABELS.get(arm, arm)} (n={st['n_seeds']})"
            ci = st[key]["ci95"]
            if any(c is not None for c in ci):
                lo = np.array([np.nan if c is None else c[0] for c in ci], dtype=float)
                hi = np.array([np.nan if c is None else c[1] for c in ci], dtype=float)
                if key != "far_mass":
                    lo = np.maximum(lo, np.nanmin(mean) * 0.5)  # a t interval can reach below 0 on a log axis
                rec.banded(ax, arm, "measured", mult, mean, lo, hi, label, alpha=0.15, **style)
            else:
                rec.plot(ax, arm, "measured", mult, mean, label, **style)
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
        ax.set_xlabel(rf"evaluation length / train length ($L = {sweep['seq_len']}$ tokens)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
    axes[0].legend(loc="upper left", fontsize=7)
    n_runs = sum(st.get("n_seeds", 0) for st in sweep["arms"].values())
    missing = len(sweep.get("missing", []))
    state = (f"{n_runs} runs, complete under the sweep's stopping rule" if not missing else
             f"{n_runs} runs; {missing} more asked for by the stopping rule")
    fig.suptitle(f"C7: attention probes past their train length, mean and 95% interval over seeds ({state})", fontsize=10)
    return rec.drawn(fig)


# ------------------------------------------------------------------------------------------- figure 7

def _far_panel(rec: Recorder, ax: Axes, result: dict, kind: str, title: str) -> None:
    """Per arm the measured far mass (solid, 95% band over seeds) and the ``kind`` prediction (dashed) vs length."""
    for i, arm in enumerate(result["runs"]):
        rows = [r for r in result["far"] if r["arm"] == arm and r["kind"] == kind]
        if not rows:
            continue
        c = PROBE_COLORS.get(arm, color(arm, i))
        mult = np.array([r["multiplier"] for r in rows], dtype=float)
        label = f"{PROBE_LABELS.get(arm, arm)} (n={rows[0]['seeds']})"
        measured = [r["measured"]["mean"] for r in rows]
        if all(r["measured"]["ci"] is not None for r in rows):
            rec.banded(ax, arm, "measured", mult, measured, [r["measured"]["ci"][0] for r in rows],
                       [r["measured"]["ci"][1] for r in rows], label, alpha=0.15, color=c, marker=marker(i))
        else:
            rec.plot(ax, arm, "measured", mult, measured, label, color=c, marker=marker(i))
        rec.plot(ax, arm, "predicted", mult, [r["pred"]["mean"] for r in rows], None, color=c, **THEORY)
    ax.set_xscale("log", base=2)
    plain_ticks(ax, sorted({r["multiplier"] for r in result["far"]}))
    ax.set_xlabel(rf"evaluation length / train length ($L = {result['seq_len']}$ tokens)")
    ax.set_ylabel(r"far attention mass (keys $\geq L$ back), mean over heads")
    ax.set_title(title, fontsize=9)


@styled
def fig_theory(result: dict) -> Drawn:
    """Figure 7 from ``probes.theory_stats.agreement``: (a) per arm the far mass versus evaluation length / train
    length, measured (solid, 95% band over seeds) and predicted from the family's law and the 1x statistics (dashed);
    (b) the same with the C3 transfer row (extrapolated from the head's own 2x attention); (c) predicted window against
    measured window, one point per head and seed; (d) the law-based degradation D against the measured log ppl ratio,
    one point per arm."""
    fig = Figure(figsize=(12, 9), layout="constrained")
    (ax_law, ax_c3), (ax_win, ax_ord) = fig.subplots(2, 2)
    rec = Recorder([ax_law, ax_c3, ax_win, ax_ord])
    _far_panel(rec, ax_law, result, "law", "(a) far mass: measured (solid) vs predicted from the step law (dashed)")
    _far_panel(rec, ax_c3, result, "c3", "(b) far mass: measured (solid) vs C3 transfer from 2x (dashed)")
    arms = list(result["runs"])
    for i, arm in enumerate(arms):
        pts = [p for p in result["window_points"] if p["arm"] == arm]
        x, y = [p["window_measured"] for p in pts], [p["window_pred"] for p in pts]
        ax_win.scatter(x, y, s=12, alpha=0.7, color=PROBE_COLORS.get(arm, color(arm, i)), marker=marker(i),
                       label=PROBE_LABELS.get(arm, arm))
        rec.keep(ax_win, arm, "points", PROBE_LABELS.get(arm, arm), x, y)
    ax_win.set_xscale("log")
    ax_win.set_yscale("log")
    for axis in (ax_win.xaxis, ax_win.yaxis):  # labels at 1, 2, 5 x 10^k: a window axis spans less than a decade
        axis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        axis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax_win.set_xlabel("measured window (lags holding 90% of attention, at L)")
    ax_win.set_ylabel(r"predicted window $W = \sum_{n<L} C(n)^2$")
    ax_win.set_title("(c) mixing window per head", fontsize=9)
    order = result["order"]
    for arm in order["arms"]:  # one arm keeps its colour and marker in every panel (the shared legend below)
        i = arms.index(arm)
        ax_ord.scatter(order["pred"][arm], order["measured"][arm], color=PROBE_COLORS.get(arm, color(arm, i)),
                       marker=marker(i), s=30)
        rec.keep(ax_ord, arm, "points", None, order["pred"][arm], order["measured"][arm])
    rho = "n/a" if order["rho"] is None else f"{order['rho']:.2f}"
    ax_ord.set_xlabel(r"law-based degradation $D = -\log(1 - F_{law}(M))$, mean over heads and seeds")
    ax_ord.set_ylabel(r"measured $\log$ ppl$(M)$ / ppl$(1x)$")
    ax_ord.set_title(f"(d) degradation order: Spearman {rho}, {order['verdict']}", fontsize=9)
    fig.legend(*ax_law.get_legend_handles_labels(), loc="outside lower center", ncol=4, fontsize=7)
    fig.suptitle("Theory vs trained probes: accum's theory from each head's realised step law", fontsize=10)
    return rec.drawn(fig)


BUILDERS: dict[str, Callable[[Sequence[Measured], Theory], Drawn]] = {
    "fig1_coherence": fig_coherence,
    "fig2_window": fig_window,
    "fig3_score_gap": fig_score_gap,
    "fig4_near_weight": fig_near_weight,
    "fig5_far_residual": fig_far_residual,
}

