"""What a figure draws, kept: ``Recorder`` draws each series on its axes and keeps it as a ``Series`` (panel, name,
kind, label, x, y, band); a figure function returns ``Drawn`` (the figure and its series), so a test can hold the
arrays a figure shows against their data source (tests/figures/test_figures_content.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

#: what a drawn series is (``Series.kind``), and the word its figure's legend names it by: its own entry, or the
#: title of the legend holding that entry (e.g. "Monte Carlo (markers, +-2 se band)" over the families' names); a
#: series drawn without an entry of its own (``label`` None) is named by an entry or title of its panel's legend or
#: of a figure legend that gives its style (e.g. "theory (dashed)").  tests/figures/test_figures_content.py holds
#: every figure to it.
KINDS = {"Monte Carlo": "Monte Carlo", "theory": "theory", "bound": "bound", "floor": "floor", "density": "histogram",
         "reference": "reference", "measured": "measured", "predicted": "predicted", "points": "point",
         "ranks": "rank"}


@dataclass(frozen=True)
class Series:
    """One series as drawn.  panel: index of its axes (left to right, top to bottom); name: what it shows (a
    measured series' name, a theory curve's name in ``overlays.Theory.curves``, a probe arm, or a figure-wide name such as
    "bound" or "near"); kind: one of ``KINDS``; label: its legend text (None without an entry of its own); x, y: the
    points drawn (NaN where nothing is drawn; a density's x holds its bin edges, one more than y); band: the
    (lower, upper) edges of the band or error bars drawn around it, or None."""

    panel: int
    name: str
    kind: str
    label: str | None
    x: np.ndarray
    y: np.ndarray
    band: tuple[np.ndarray, np.ndarray] | None = None


class Drawn(NamedTuple):
    """A figure and the series drawn in it, in drawing order."""

    figure: Figure
    series: tuple[Series, ...]


class Recorder:
    """Draws series on a figure's axes and keeps each as a ``Series`` (the figure's data path)."""

    def __init__(self, axes: Sequence[Axes]) -> None:
        self.axes, self.series = list(axes), []

    def keep(self, ax: Axes, name: str, kind: str, label: str | None, x: Any, y: Any,
             band: tuple[Any, Any] | None = None) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {tuple(KINDS)}, got {kind!r}")
        arr = lambda v: np.atleast_1d(np.asarray(v, dtype=float))  # noqa: E731
        self.series.append(Series(self.axes.index(ax), name, kind, label, arr(x), arr(y),
                                  None if band is None else (arr(band[0]), arr(band[1]))))

    def plot(self, ax: Axes, name: str, kind: str, x: Any, y: Any, label: str | None = None, *args: Any,
             **style: Any) -> None:
        """``ax.plot(x, y, *args, label=label, **style)``, kept."""
        ax.plot(x, y, *args, label=label, **style)
        self.keep(ax, name, kind, label, x, y)

    def errorbar(self, ax: Axes, name: str, kind: str, x: Any, y: Any, half: Any, label: str | None = None,
                 **style: Any) -> None:
        """``ax.errorbar`` with bars y +- half, kept with the bars as its band."""
        ax.errorbar(x, y, yerr=half, label=label, **style)
        y, half = np.asarray(y, dtype=float), np.asarray(half, dtype=float)
        self.keep(ax, name, kind, label, x, y, (y - half, y + half))

    def banded(self, ax: Axes, name: str, kind: str, x: Any, y: Any, lower: Any, upper: Any, label: str | None = None,
               where: Any = None, alpha: float = 0.18, **style: Any) -> None:
        """A line with a shaded band (lower, upper) (drawn only ``where`` given, NaN in the record elsewhere), kept."""
        ax.plot(x, y, label=label, **style)
        ax.fill_between(x, lower, upper, where=where, color=style.get("color"), alpha=alpha, linewidth=0)
        lower, upper = np.asarray(lower, dtype=float), np.asarray(upper, dtype=float)
        if where is not None:
            lower, upper = np.where(where, lower, np.nan), np.where(where, upper, np.nan)
        self.keep(ax, name, kind, label, x, y, (lower, upper))

    def drawn(self, fig: Figure) -> Drawn:
        return Drawn(fig, tuple(self.series))
