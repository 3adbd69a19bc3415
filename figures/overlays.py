"""Theory curves for the figures, evaluated by ``accum.theory`` at exactly the measured points.

Nothing is measured here: each curve is ``theory.prediction`` (or a named theory evaluator) called with the
family and options stored in the measurement's record.  A family without a closed form (a user family; the Lie
walk's far mass) gets the theory estimated from its moment operators, with an rng seeded from the record's own
seed, and the figure's theory source says which curves are estimated.  Where there is no theory at all
(``NoClosedForm``, e.g. the far mass of a user family) the curve is left out and a note says so; the note goes
into the figure's caption.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import groupby
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from accum.simulations.families import make_family
from accum.simulations.params import ParamError
from accum.theory import NoClosedForm, prediction
from accum.theory.scores import far_score_density, gap_in_sd

from .data import Measured
from .specs import EXTRA_SERIES


class Curve(NamedTuple):
    """A theory curve; ``source`` is the prediction's ("closed form" or "estimated from moment operators ...")."""

    x: np.ndarray
    y: np.ndarray
    source: str = "closed form"


@dataclass(frozen=True)
class Theory:
    """curves: by series name (the theory of that measured series) or by a figure-wide name ("bound",
    "alibi-floor", "gap"); source: the evaluators called; notes: why a curve is missing (for the caption)."""

    curves: dict[str, Curve]
    source: str = ""
    notes: tuple[str, ...] = ()


def family_of(m: Measured) -> Any:
    """The family object the record was measured with."""
    config = m.record["config"]
    return make_family(config["family"], **config["params"])


def options_of(m: Measured) -> dict:
    return m.record["config"]["options"]


def far_sizes_of(m: Measured) -> np.ndarray:
    return np.asarray(m.record["result"]["far_sizes"], dtype=np.int64)


def predicted(quantity: str, m: Measured, **options: Any) -> tuple[np.ndarray, str]:
    """``theory.prediction(quantity, family of m, **options)``: its value and source.  An estimated prediction
    draws its steps from ``default_rng(record seed)``, so a figure's theory is reproducible from its data."""
    p = prediction(quantity, family_of(m), rng=np.random.default_rng(m.record["seed"]), **options)
    return np.asarray(p.value, dtype=float), p.source


def _collect(items: Sequence[tuple[str, Callable[[], Curve]]], source: str) -> Theory:
    """Evaluate each (name, thunk); a ``NoClosedForm`` (or a family too large for the estimated theory) becomes
    a note instead of a curve; estimated curves are named in the source."""
    curves, notes = {}, []
    for name, thunk in items:
        try:
            curves[name] = thunk()
        except (NoClosedForm, ParamError) as err:
            notes.append(f"no theory curve for {name}: {err}")
    estimated = [f"{name} {c.source}" for name, c in curves.items() if not c.source.startswith("closed form")]
    return Theory(curves, source + (f"; estimated theory: {', '.join(estimated)}" if estimated else ""), tuple(notes))


def by_series(measured: Sequence[Measured]) -> dict[str, list[Measured]]:
    """Measurements grouped by series, in figure order (series are contiguous in the specs)."""
    return {key: list(group) for key, group in groupby(measured, key=lambda m: m.job.series)}


def coherence_theory(measured: Sequence[Measured]) -> Theory:
    """c(n), n = 0..steps, from ``prediction("coherence")`` for each family."""
    def curve(m: Measured) -> Curve:
        steps = options_of(m)["steps"]
        return Curve(np.arange(steps + 1), *predicted("coherence", m, steps=steps))

    return _collect([(m.job.series, lambda m=m: curve(m)) for m in measured], 'theory.prediction("coherence")')


def window_theory(measured: Sequence[Measured]) -> Theory:
    """W(T) at each measured context length, from ``prediction("window")``."""
    def curve(group: list[Measured]) -> Curve:
        contexts = np.array([options_of(m)["context"] for m in group])
        points = [predicted("window", m, context=int(t)) for m, t in zip(group, contexts)]
        return Curve(contexts, np.array([value for value, _ in points]), points[0][1])

    return _collect([(key, lambda g=g: curve(g)) for key, g in by_series(measured).items()],
                    'theory.prediction("window")')


def gaussian_name(series: str) -> str:
    """The name of C4's Gaussian far-score density drawn over the histogram of ``series``."""
    return f"gaussian:{series}"


def score_gap_theory(measured: Sequence[Measured]) -> Theory:
    """Across the built-in dimensions: the far-score second moment d E[s^2] (``prediction("far-variance")``)
    and the near score in far standard deviations (``theory.scores.gap_in_sd``); for an extra family (series
    ``EXTRA_SERIES``) its own d E[s^2] at its dimension, under the name ``EXTRA_SERIES``; for every histogram
    (``gaussian_name(series)``) C4's law N(0, |q|^2 |k|^2 / d) (``theory.scores.far_score_density``) on 241 points
    across its bins -- the probes are q = k, so |q| |k| = q.k, the near score."""
    builtin = [m for m in measured if m.job.series != EXTRA_SERIES]
    dims = np.array([m.record["result"]["dim"] for m in builtin])

    def variance(group: Sequence[Measured]) -> Curve:
        points = [predicted("far-variance", m, offset=options_of(m)["offset"]) for m in group]
        return Curve(np.array([m.record["result"]["dim"] for m in group]),
                     np.array([value for value, _ in points]), points[0][1])

    def gap() -> Curve:
        return Curve(dims, np.array([gap_in_sd(int(d), near=m.record["result"]["near"])
                                     for d, m in zip(dims, builtin)]))

    def gaussian(m: Measured) -> Curve:
        r = m.record["result"]
        s = np.linspace(r["hist_edges"][0], r["hist_edges"][-1], 241)
        unit = float(np.sqrt(r["near"]))  # q = k: |q| = |k| = sqrt(q.k)
        return Curve(s, far_score_density(s, unit, unit, int(r["dim"])))

    extra = [(EXTRA_SERIES, lambda m=m: variance([m])) for m in measured if m.job.series == EXTRA_SERIES]
    densities = [(gaussian_name(m.job.series), lambda m=m: gaussian(m)) for m in measured]
    return _collect([("far-variance", lambda: variance(builtin)), ("gap", gap), *extra, *densities],
                    'theory.prediction("far-variance"), theory.scores.gap_in_sd, theory.scores.far_score_density')


def near_weight_theory(measured: Sequence[Measured]) -> Theory:
    """Per family ``prediction("near-weight")`` (1 / (1 + far mass)); the norm bound
    ``prediction("near-weight-bound")``; for ALiBi jobs (slope > 0) ``prediction("alibi-floor")``."""
    def weight(m: Measured) -> Curve:
        o = options_of(m)
        return Curve(far_sizes_of(m), *predicted("near-weight", m, far_sizes=far_sizes_of(m), s0=o["s0"],
                                                 slope=o["alibi_slope"]))

    def bound(m: Measured) -> Curve:
        return Curve(far_sizes_of(m), *predicted("near-weight-bound", m, far_sizes=far_sizes_of(m),
                                                 s0=options_of(m)["s0"]))

    def floor(m: Measured) -> Curve:
        o = options_of(m)
        return Curve(far_sizes_of(m), *predicted("alibi-floor", m, far_sizes=far_sizes_of(m), s0=o["s0"],
                                                 slope=o["alibi_slope"]))

    items = [(m.job.series, lambda m=m: weight(m)) for m in measured]
    rotation = [m for m in measured if options_of(m)["alibi_slope"] == 0]
    alibi = [m for m in measured if options_of(m)["alibi_slope"] > 0]
    items += [("bound", lambda: bound(rotation[0]))] if rotation else []
    items += [("alibi-floor", lambda: floor(alibi[0]))] if alibi else []
    return _collect(items, 'theory.prediction("near-weight"), ("near-weight-bound"), ("alibi-floor")')


def far_residual_theory(measured: Sequence[Measured]) -> Theory:
    """E|r(N)|^2 / |m|^2 from ``prediction("far-residual")`` with the job's value_rotation."""
    def curve(m: Measured) -> Curve:
        return Curve(far_sizes_of(m), *predicted("far-residual", m, far_sizes=far_sizes_of(m),
                                                 value_rotation=bool(options_of(m)["value_rotation"])))

    return _collect([(m.job.series, lambda m=m: curve(m)) for m in measured], 'theory.prediction("far-residual")')


#: the theory builder of each measured figure, by file stem
THEORIES: dict[str, Callable[[Sequence[Measured]], Theory]] = {
    "fig1_coherence": coherence_theory,
    "fig2_window": window_theory,
    "fig3_score_gap": score_gap_theory,
    "fig4_near_weight": near_weight_theory,
    "fig5_far_residual": far_residual_theory,
}
