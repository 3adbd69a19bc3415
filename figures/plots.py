"""One pure function per figure (figures 1-5 here, the probe figures 6 and 7 in ``figures.probeplots``): saved
records (+ theory curves) in, a matplotlib ``Figure`` and the series it draws out (``Drawn``).

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
from .overlays import Theory, by_series, gaussian_name
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
#: legend titles naming the Monte Carlo series listed under them (``record.KINDS``)
MC_BANDS = r"markers: Monte Carlo ($\pm 2\,$se band)"
MC_BARS = r"markers: Monte Carlo ($\pm 2\,$se bars)"


def draw_theory(rec: Recorder, ax: Axes, theory: Theory, name: str, c: str, label: str | None = None,
                kind: str = "theory", **style: Any) -> None:
    """The theory curve ``name`` if the theory has one (missing ones are noted in the caption), dashed, kept."""
    curve = theory.curves.get(name)
    if curve is not None:
        rec.plot(ax, name, kind, curve.x, curve.y, label, color=c, **{**THEORY, **style})


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
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, title=MC_BANDS)
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
    ax.legend(loc="upper left", title=MC_BARS)
    return rec.drawn(fig)


# ------------------------------------------------------------------------------------------- figure 3

@styled
def fig_score_gap(measured: Sequence[Measured], theory: Theory) -> Drawn:
    """Figure 3: (a) far-score densities per d against the near score, each with the Gaussian law the title
    claims, N(0, |q|^2|k|^2/d) (theory, dashed; the histogram's y range is kept, the Gaussian's far tails leave it),
    (b) the gap in far standard deviations, (c) the far-score second moment d E[s^2]; an extra family (series
    ``EXTRA_SERIES``) is one more density and one more point at its own dimension, in its own colour."""
    fig = Figure(figsize=(13, 4.2), layout="constrained")
    ax_hist, ax_gap, ax_var = fig.subplots(1, 3, gridspec_kw={"width_ratios": (1.5, 1, 1)})
    rec = Recorder([ax_hist, ax_gap, ax_var])
    builtin = [m for m in measured if m.job.series != EXTRA_SERIES]
    extra = [m for m in measured if m.job.series == EXTRA_SERIES]
    cmap = matplotlib.colormaps["viridis"]
    shades = [cmap(0.9 * i / max(len(builtin) - 1, 1)) for i in range(len(builtin))]
    labels = [m.job.label for m in builtin] + [m.job.label + ("" if "dim" in m.job.params else f" ($d={result(m)['dim']}$)")
                                               for m in extra]
    lowest, highest = np.inf, 0.0
    for m, c, label in zip(builtin + extra, shades + [COLORS[EXTRA_SERIES]] * len(extra), labels):
        counts, edges = arrays(m, "hist_counts", "hist_edges")
        density = np.where(counts > 0, counts / (counts.sum() * np.diff(edges)), np.nan)
        ax_hist.stairs(density, edges, color=c, linewidth=1.4, label=label)
        rec.keep(ax_hist, m.job.series, "density", label, edges, density)
        draw_theory(rec, ax_hist, theory, gaussian_name(m.job.series), c, linewidth=1.1)
        lowest, highest = min(lowest, np.nanmin(density)), max(highest, np.nanmax(density))
        gauss = theory.curves.get(gaussian_name(m.job.series))
        highest = highest if gauss is None else max(highest, float(np.max(gauss.y)))
    theory_legend_entry(ax_hist, r"theory $\mathcal{N}(0, |q|^2|k|^2/d)$ (dashed)")
    near = result(measured[0])["near"]
    near_label = rf"near score $q^{{\mathsf{{T}}}}k = {near:g}$ (reference)"
    ax_hist.axvline(near, color="#d62728", linewidth=1.6, label=near_label)
    rec.keep(ax_hist, "near", "reference", near_label, near, np.nan)
    offset = result(measured[0])["offset"]
    ax_hist.set(yscale="log", xlabel=r"score $s = q^{\mathsf{T}} A_\Delta \cdots A_1 k$  ($|q| = |k| = 1$)",
                ylabel="density of far scores", title=rf"(a) far scores at distance $\Delta = {offset}$",
                ylim=(0.5 * lowest, 3 * highest))
    ax_hist.legend(loc="upper left", title="Monte Carlo histograms")

    dims = np.array([result(m)["dim"] for m in builtin], dtype=float)
    all_dims = np.array([result(m)["dim"] for m in measured], dtype=float)
    gap = np.array([result(m)["gap_sd"] for m in builtin])
    rec.plot(ax_gap, "gap", "Monte Carlo", dims, gap, "Monte Carlo", "o", color="#1f77b4", zorder=4)
    for m in extra:
        rec.plot(ax_gap, m.job.series, "Monte Carlo", [result(m)["dim"]], [result(m)["gap_sd"]],
                 f"{m.job.label}, Monte Carlo", "D",
                 color=COLORS[EXTRA_SERIES], zorder=5)
    draw_theory(rec, ax_gap, theory, "gap", "0.2", label=r"theory $\sqrt{d}$ (limit of many steps)")
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
        rec.errorbar(ax_var, m.job.series, "Monte Carlo", [result(m)["dim"]], [v], [K_SE * e],
                     f"{m.job.label}, Monte Carlo", fmt="D",
                     color=COLORS[EXTRA_SERIES], zorder=5)
        top = max(top, v + K_SE * e)
    draw_theory(rec, ax_var, theory, "far-variance", "0.2", label=r"theory, exact at $\Delta$ ($\to |q|^2|k|^2 = 1$)")
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

def far_set_series(rec: Recorder, ax: Axes, measured: Sequence[Measured], theory: Theory, kind: str = "theory",
                   **theory_style: Any) -> None:
    """Each measured series against its far-set sizes N with +-2 se bars, and its theory curve (of ``kind``) in its
    colour."""
    for i, m in enumerate(measured):
        c = color(m.job.series, i)
        sizes, y, se = arrays(m, "far_sizes", "mean", "stderr")
        rec.errorbar(ax, m.job.series, "Monte Carlo", sizes, y, K_SE * se, m.job.label, color=c, marker=marker(i), **MC)
        draw_theory(rec, ax, theory, m.job.series, c, kind=kind, **theory_style)


@styled
def fig_near_weight(measured: Sequence[Measured], theory: Theory) -> Drawn:
    """Figure 4: near-target weight w(N) versus the far-set size N (log-log); each family's dotted curve is
    1/(1 + E far mass), by Jensen a lower bound of E w (equal to it where the far mass is deterministic: RoPE, NoPE,
    ALiBi), so it is drawn and named as a bound, not as the theory of E w."""
    fig = Figure(figsize=(10.5, 4.8), layout="constrained")
    ax = fig.subplots()
    rec = Recorder([ax])
    far_set_series(rec, ax, measured, theory, kind="bound", linestyle=":")
    draw_theory(rec, ax, theory, "bound", "black", label=r"upper bound $w \leq 1/(1 + N e^{-2 s_0})$ (any steps of norm $\leq 1$)",
               kind="bound", linestyle="--", linewidth=1.4)
    draw_theory(rec, ax, theory, "alibi-floor", "#d62728", label=r"ALiBi floor $1/(1 + \Sigma_{\Delta \leq N}\, e^{-m\Delta})$",
               kind="floor", linestyle="-.", linewidth=1.4)
    ax.plot([], [], color="0.3", linestyle=":", label="Jensen lower bound of $\\mathbb{E}\\,w$: $1/(1 + \\mathbb{E}\\,$far "
            "mass$)$\n(dotted; equal to it for deterministic steps)")
    s0 = result(measured[0])["s0"]
    ax.set(xscale="log", yscale="log", xlabel=r"far-set size $N$ (far keys)",
           ylabel=r"near-target weight $w(N) = e^{s_0} / (e^{s_0} + \Sigma_{\Delta=1}^{N}\, e^{s_\Delta})$",
           title=rf"C5: near weight $\to 0$ with $N$ unless far mass is controlled ($s_0 = {s0:g}$, $d = 16$)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=7, title=MC_BARS)
    return rec.drawn(fig)


# ------------------------------------------------------------------------------------------- figure 5

@styled
def fig_far_residual(measured: Sequence[Measured], theory: Theory) -> Drawn:
    """Figure 5: far residual E|r(N)|^2 / |m|^2 with and without value rotation (log-log)."""
    fig = Figure(figsize=(10, 4.6), layout="constrained")
    ax = fig.subplots()
    rec = Recorder([ax])
    far_set_series(rec, ax, measured, theory)
    theory_legend_entry(ax, "theory, exact in $N$ (dashed): $\\to (1+\\rho)/((1-\\rho)N)$ with rotation,\n"
                            r"$\mathbb{E}A = \rho I$ ($\rho = e^{-\sigma^2/2}$ for Gaussian angles); $1$ without")
    ax.set(xscale="log", yscale="log", xlabel=r"far-set size $N$ (far values)",
           ylabel=r"$\mathbb{E}\,|r(N)|^2 / |m|^2$, $\; r(N) = N^{-1}\Sigma_{\Delta=1}^{N}\, P_\Delta m$",
           title=r"C6: rotated values add incoherently: $|r| \propto 1/\sqrt{N}$ ($d = 16$)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), title=MC_BARS)
    return rec.drawn(fig)


BUILDERS: dict[str, Callable[[Sequence[Measured], Theory], Drawn]] = {
    "fig1_coherence": fig_coherence,
    "fig2_window": fig_window,
    "fig3_score_gap": fig_score_gap,
    "fig4_near_weight": fig_near_weight,
    "fig5_far_residual": fig_far_residual,
}

