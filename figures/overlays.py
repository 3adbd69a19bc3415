"""Theory curves for the figures, evaluated by ``accum.theory`` at exactly the measured points.

Nothing is computed here: each curve is ``theory.predict`` (or a named theory evaluator) called with the
family and options stored in the measurement's record.  Where the theory has no closed form
(``NoClosedForm``) the curve is left out and a note says so; the note goes into the figure's caption.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import groupby
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from accum.simulations.families import make_family
from accum.theory import NoClosedForm, predict
from accum.theory.scores import gap_in_sd

from .data import Measured


class Curve(NamedTuple):
    x: np.ndarray
    y: np.ndarray


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


def _collect(items: Sequence[tuple[str, Callable[[], Curve]]], source: str) -> Theory:
    """Evaluate each (name, thunk); a ``NoClosedForm`` becomes a note instead of a curve."""
    curves, notes = {}, []
    for name, thunk in items:
        try:
            curves[name] = thunk()
        except NoClosedForm as err:
            notes.append(f"no theory curve for {name}: {err}")
    return Theory(curves, source, tuple(notes))


def by_series(measured: Sequence[Measured]) -> dict[str, list[Measured]]:
    """Measurements grouped by series, in figure order (series are contiguous in the specs)."""
    return {key: list(group) for key, group in groupby(measured, key=lambda m: m.job.series)}


def coherence_theory(measured: Sequence[Measured]) -> Theory:
    """c(n), n = 0..steps, from ``predict("coherence")`` for each family."""
    def curve(m: Measured) -> Curve:
        steps = options_of(m)["steps"]
        return Curve(np.arange(steps + 1), np.asarray(predict("coherence", family_of(m), steps=steps), float))

    return _collect([(m.job.series, lambda m=m: curve(m)) for m in measured], 'theory.predict("coherence")')


def window_theory(measured: Sequence[Measured]) -> Theory:
    """W(T) at each measured context length, from ``predict("window")``."""
    def curve(group: list[Measured]) -> Curve:
        contexts = np.array([options_of(m)["context"] for m in group])
        return Curve(contexts, np.array([predict("window", family_of(m), context=int(t))
                                         for m, t in zip(group, contexts)]))

    return _collect([(key, lambda g=g: curve(g)) for key, g in by_series(measured).items()], 'theory.predict("window")')


def score_gap_theory(measured: Sequence[Measured]) -> Theory:
    """Across d: the far-score second moment d E[s^2] (``predict("far-variance")``) and the near score in
    far standard deviations (``theory.scores.gap_in_sd``)."""
    dims = np.array([m.record["result"]["dim"] for m in measured])

    def variance() -> Curve:
        return Curve(dims, np.array([predict("far-variance", family_of(m), offset=options_of(m)["offset"])
                                     for m in measured]))

    def gap() -> Curve:
        return Curve(dims, np.array([gap_in_sd(int(d), near=m.record["result"]["near"])
                                     for d, m in zip(dims, measured)]))

    return _collect([("far-variance", variance), ("gap", gap)],
                    'theory.predict("far-variance"), theory.scores.gap_in_sd')


def near_weight_theory(measured: Sequence[Measured]) -> Theory:
    """Per family ``predict("near-weight")`` (1 / (1 + far mass)); the norm bound
    ``predict("near-weight-bound")``; for ALiBi jobs (slope > 0) ``predict("alibi-floor")``."""
    def weight(m: Measured) -> Curve:
        o = options_of(m)
        sizes = far_sizes_of(m)
        return Curve(sizes, np.asarray(predict("near-weight", family_of(m), far_sizes=sizes, s0=o["s0"],
                                               slope=o["alibi_slope"]), float))

    def bound(m: Measured) -> Curve:
        sizes = far_sizes_of(m)
        return Curve(sizes, np.asarray(predict("near-weight-bound", family_of(m), far_sizes=sizes,
                                               s0=options_of(m)["s0"]), float))

    def floor(m: Measured) -> Curve:
        o = options_of(m)
        sizes = far_sizes_of(m)
        return Curve(sizes, np.asarray(predict("alibi-floor", family_of(m), far_sizes=sizes, s0=o["s0"],
                                               slope=o["alibi_slope"]), float))

    items = [(m.job.series, lambda m=m: weight(m)) for m in measured]
    rotation = [m for m in measured if options_of(m)["alibi_slope"] == 0]
    alibi = [m for m in measured if options_of(m)["alibi_slope"] > 0]
    items += [("bound", lambda: bound(rotation[0]))] if rotation else []
    items += [("alibi-floor", lambda: floor(alibi[0]))] if alibi else []
    return _collect(items, 'theory.predict("near-weight"), ("near-weight-bound"), ("alibi-floor")')


def far_residual_theory(measured: Sequence[Measured]) -> Theory:
    """E|r(N)|^2 / |m|^2 from ``predict("far-residual")`` with the job's value_rotation."""
    def curve(m: Measured) -> Curve:
        sizes = far_sizes_of(m)
        return Curve(sizes, np.asarray(predict("far-residual", family_of(m), far_sizes=sizes,
                                               value_rotation=bool(options_of(m)["value_rotation"])), float))

    return _collect([(m.job.series, lambda m=m: curve(m)) for m in measured], 'theory.predict("far-residual")')


#: the theory builder of each measured figure, by file stem
THEORIES: dict[str, Callable[[Sequence[Measured]], Theory]] = {
    "fig1_coherence": coherence_theory,
    "fig2_window": window_theory,
    "fig3_score_gap": score_gap_theory,
    "fig4_near_weight": near_weight_theory,
    "fig5_far_residual": far_residual_theory,
}
