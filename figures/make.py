"""Make every figure: ensure the data, draw, and save PNG + PDF + caption atomically.

Each output file is written to a temporary name in the output directory and moved over the target with
``os.replace``, so a reader (or an interrupted run) never leaves half a figure behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import matplotlib
from matplotlib.figure import Figure

from accum.interrupts import scratch_paths
from accum.simulations.inputs import InputError, loads_json, read_text
from accum.simulations.results import ResultError

from accum.probes.theory_stats import agreement

from .captions import caption, probes_caption, theory_caption
from .data import Measured, ensure
from .paths import DEFAULT_OUT, DEFAULT_PROBES, DEFAULT_RESULTS
from .overlays import THEORIES
from .plots import BUILDERS, STYLE
from .probeplots import fig_probes, fig_theory
from .specs import ExtraFamily, FigureSpec, figure_specs

FORMATS = ("png", "pdf")
PROBE_KEYS = ("config", "seq_len", "multipliers", "arms", "runs", "missing")


@dataclass(frozen=True)
class Outcome:
    """What happened to one figure: the files written (none if skipped) and a one-line message."""

    name: str
    files: tuple[Path, ...]
    message: str


@contextlib.contextmanager
def atomic_output(path: Path) -> Iterator[Path]:
    """Yield a fresh temporary path beside ``path``; on success fsync it and move it over ``path``
    (``os.replace``), on failure remove it.  The file is created normally, so it gets the usual
    permissions (umask), unlike ``tempfile.mkstemp``'s private 0600."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        with scratch_paths(tmp):  # removed if a signal ends the process at once (accum.interrupts)
            yield tmp
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def save_figure(fig: Figure, out_dir: Path, name: str, text: str) -> tuple[Path, ...]:
    """``out_dir/name.png``, ``.pdf`` and the caption ``.txt``, each written atomically."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{name}.{fmt}" for fmt in (*FORMATS, "txt")]
    for path in paths[:-1]:
        with atomic_output(path) as tmp, matplotlib.rc_context(STYLE):
            fig.savefig(tmp, format=path.suffix[1:])
    with atomic_output(paths[-1]) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return tuple(paths)


class ProbeResultsError(ResultError):
    """The probe sweep figures 6 and 7 read is unreadable or not one; the message starts with its path (the command
    line names the option that gave it, --probes)."""


def read_probe_sweep(path: Path) -> dict | None:
    """The probes' sweep.json (format: ``probes.sweep``), None if there is none; ``ProbeResultsError`` if it is
    unreadable or lacks the keys figure 6 reads."""
    try:
        data = loads_json(read_text(path), path)
    except FileNotFoundError:
        return None
    except json.JSONDecodeError as err:
        raise ProbeResultsError(f"{path}: corrupt probe results ({err})") from None
    except InputError as err:  # a device, over 64 MiB, nested too deep, a number too long, not UTF-8
        raise ProbeResultsError(f"{err} (probe results)") from None
    except OSError as err:
        raise ProbeResultsError(f"{path}: cannot read probe results ({err.strerror})") from None
    if not isinstance(data, dict) or any(k not in data for k in PROBE_KEYS) or not data["arms"]:
        raise ProbeResultsError(f"{path}: not a multi-seed probe sweep (needs keys {', '.join(PROBE_KEYS)} and at "
                                "least one arm)")
    if not any(st.get("n_seeds") for st in data["arms"].values()):
        raise ProbeResultsError(f"{path}: no finished (arm, seed) run yet")
    return data


def measured_figure(spec: FigureSpec, measured: Sequence[Measured], out_dir: Path, root_seed: int, size: str,
                    results_dir: Path) -> Outcome:
    """Theory curves, the drawing and its files for one of figures 1-5."""
    theory = THEORIES[spec.name](measured)
    fig = BUILDERS[spec.name](measured, theory).figure
    files = save_figure(fig, out_dir, spec.name, caption(spec, measured, theory, root_seed, size, results_dir))
    missing = f" ({len(theory.notes)} theory curve(s) missing, see caption)" if theory.notes else ""
    return Outcome(spec.name, files, f"{len(measured)} curves/points{missing}")


def probes_figure(spec: FigureSpec, sweep: dict | None, probes: Path, out_dir: Path) -> Outcome:
    """Figure 6 from the probes' sweep (read from ``probes``), or a skip message when there is none."""
    if sweep is None:
        return Outcome(spec.name, (), f"skipped: no probe results at {probes} (run `accum probe sweep` first)")
    files = save_figure(fig_probes(sweep).figure, out_dir, spec.name, probes_caption(spec, sweep, probes))
    done = sum(st.get("n_seeds", 0) for st in sweep["arms"].values())
    planned = len(sweep["config"]["arms"]) * len(sweep["config"]["seeds"])
    return Outcome(spec.name, files, f"{done} of {planned} probe runs (arm x seed)")


def theory_figure(spec: FigureSpec, sweep: dict | None, probes: Path, out_dir: Path) -> Outcome:
    """Figure 7 from the theory.json files of the runs beside ``probes`` (``probes.theory_stats.agreement``), or a
    skip message when there are none."""
    result = agreement(probes.parent)
    if result is None:
        return Outcome(spec.name, (), f"skipped: no theory.json under {probes.parent} (written after each probe run)")
    files = save_figure(fig_theory(result).figure, out_dir, spec.name, theory_caption(spec, result, probes.parent))
    return Outcome(spec.name, files, f"{sum(len(s) for s in result['runs'].values())} probe runs with a theory.json")


#: the figures drawn from the probe results (no measurement jobs), by name
PROBE_FIGURES = {"fig6_probes": probes_figure, "fig7_theory": theory_figure}


def make_figures(out_dir: str | Path = DEFAULT_OUT, results_dir: str | Path = DEFAULT_RESULTS, *, quick: bool = False,
                 seed: int = 0, probes: str | Path = DEFAULT_PROBES, workers: int = 1,
                 progress: bool = True, extra: ExtraFamily | None = None) -> list[Outcome]:
    """Figures 1-7 under ``out_dir``, with ``extra`` (a family drawn beside the built-ins) in figures 1-5;
    measurements missing from ``results_dir`` are computed first (one progress bar for all of them).
    The probe sweep is read before anything is computed, so a corrupt one fails at once."""
    out_dir, results_dir, probes = Path(out_dir), Path(results_dir), Path(probes)
    sweep = read_probe_sweep(probes)
    specs = figure_specs(quick, extra)
    jobs = [job for spec in specs for job in spec.jobs]
    records = iter(ensure(jobs, results_dir, seed, workers=workers, progress=progress))
    size = "quick" if quick else "default"
    outcomes = []
    for spec in specs:
        if spec.jobs:
            measured = [next(records) for _ in spec.jobs]
            outcomes.append(measured_figure(spec, measured, out_dir, seed, size, results_dir))
        else:
            outcomes.append(PROBE_FIGURES[spec.name](spec, sweep, probes, out_dir))
    return outcomes
