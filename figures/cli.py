"""``accum figures [--out DIR] [--results DIR] [--quick] [--seed S] [--family F --param k=v]``: every paper figure.

Ctrl-C stops with one line, "interrupted; N of M jobs kept in DIR" (the measurements saved so far, which a
rerun reuses), exit status 130; figure files are written atomically, so none is left half-written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from typing import TYPE_CHECKING

from accum.interrupts import holding_interrupts
from accum.runtime import Interrupted
from accum.simulations.params import ParamError, check_seed, integer_option, parse_assignments
from accum.simulations.results import ResultError, check_output_path, prove_writable_dirs
from accum.simulations.runner import WORKERS_HELP

from .paths import DEFAULT_OUT, DEFAULT_PROBES, DEFAULT_RESULTS

if TYPE_CHECKING:
    from .specs import ExtraFamily

# the measurements, the drawing (matplotlib) and the probe statistics are imported by ``run_figures``, so
# `accum figures --help` and a refused option answer at once


def add_figures(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("figures", help="every paper figure as PNG + PDF + caption",
                       description="Figures 1-7 from saved results; measurements missing from --results are "
                                   "computed first (progress bar on stderr) and saved, so a rerun computes nothing.")
    p.add_argument("--out", default=str(DEFAULT_OUT), metavar="DIR", help=f"figure directory (default {DEFAULT_OUT})")
    p.add_argument("--results", default=str(DEFAULT_RESULTS), metavar="DIR",
                   help=f"saved measurements, one JSON per job (default {DEFAULT_RESULTS})")
    p.add_argument("--quick", action="store_true", help="tiny sizes (seconds; for smoke tests, not for reading)")
    p.add_argument("--seed", type=integer_option, default=0, help="root seed of every measurement (default 0)")
    p.add_argument("--probes", metavar="PATH",
                   help=f"probe sweep results for figure 6 (default {DEFAULT_PROBES}, figure 6 skipped if absent)")
    p.add_argument("--family", metavar="F", help="draw this family (built-in or module:Class) beside the built-ins "
                                                 "in figures 1-5")
    p.add_argument("--param", action="append", metavar="K=V", help="parameter of --family (repeatable)")
    p.add_argument("--workers", type=integer_option, metavar="N",
                   help=f"processes for missing measurements: {WORKERS_HELP}")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(run=run_figures)


def run_figures(args: argparse.Namespace) -> int:
    """One line per figure on stdout (its files, or why it was skipped); exit 1 if a measurement failed."""
    from accum.simulations.runner import DEFAULT_WORKERS, check_workers

    from .data import DataError
    from .make import ProbeResultsError, make_figures

    workers = DEFAULT_WORKERS if args.workers is None else check_workers(args.workers, "--workers")
    seed = check_seed(args.seed, "--seed")
    check_output_path(args.out, "--out", directory=True)
    check_output_path(args.results, "--results", directory=True)
    if args.probes is not None and not Path(args.probes).is_file():
        what = "not a regular file" if Path(args.probes).exists() else "no such file"
        raise ParamError(f"--probes {args.probes}: {what} (a sweep.json from `accum probe sweep`)")
    extra = extra_family(args.family, args.param)
    prove_writable_dirs({"--out": args.out, "--results": args.results})  # a test file in each, nothing left
    try:
        with holding_interrupts():  # an interrupt reports what was kept (accum.interrupts)
            outcomes = make_figures(args.out, args.results, quick=args.quick, seed=seed,
                                    probes=args.probes or DEFAULT_PROBES, workers=workers,
                                    progress=not args.no_progress, extra=extra)
    except DataError as err:
        print(f"accum figures: {err}", file=sys.stderr)
        return 1
    except ProbeResultsError as err:  # read before any measurement: named by its option
        raise ResultError(f"--probes {err}") from None
    except KeyboardInterrupt:
        raise Interrupted(kept_jobs(args.quick, seed, Path(args.results), extra)) from None
    for outcome in outcomes:
        files = ", ".join(str(f) for f in outcome.files)
        print(f"{outcome.name}: {outcome.message}" + (f": {files}" if files else ""))
    return 0


def extra_family(name: str | None, params: list[str] | None) -> "ExtraFamily | None":
    """``--family F --param k=v ...`` as an ``ExtraFamily``, validated before any work (a user family's first
    sample too); ``ParamError`` naming the option otherwise."""
    if name is None:
        if params:
            raise ParamError("--param needs --family")
        return None
    from accum.simulations.families import make_family
    from accum.simulations.userfamily import check_sample

    from .specs import ExtraFamily

    given = parse_assignments(params, "--param")
    family = make_family(name, **given)
    report = check_sample(family, name)  # its first sample, built-in or not: a step form, asked shapes, finite
    return ExtraFamily(name, given, form=report.form)


def kept_jobs(quick: bool, seed: int, results: Path, extra: "ExtraFamily | None" = None) -> str:
    """"interrupted; N of M jobs kept in DIR": the figures' measurements saved under ``results``."""
    from .data import load, plan
    from .specs import figure_specs

    jobs = list({job.hash: job for job in plan([j for spec in figure_specs(quick, extra) for j in spec.jobs],
                                               seed)}.values())
    done = sum(load(results, job) is not None for job in jobs)
    return f"interrupted; {done} of {len(jobs)} jobs kept in {results}"
