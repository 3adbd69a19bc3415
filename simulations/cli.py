"""``accum families`` and ``accum measure``."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

from accum.interrupts import holding_interrupts
from accum.runtime import Interrupted

from .families import FAMILIES
from .measure import QUANTITIES, config_from_record, plan_measurement, run_plan
from .params import ParamError, check_seed, integer_option, parse_assignments
from .results import ResultError, jsonable, read_record, reserve_output
from .runner import WORKERS_HELP
from .sweep import is_finished, load_grid, plan
from .sweep import run_command as run_sweep_command
from .userfamily import SampleReport


def add_families(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("families", help="list transform families and their parameters",
                       description="List the built-in transform families: each one's summary, then its parameters "
                                   "with default, allowed range and meaning (\"only with ...\": a parameter that "
                                   "applies only with another's value).  A family of your own is named "
                                   "package.module:ClassName (docs/families.md).")
    p.set_defaults(run=run_families)


def run_families(args: argparse.Namespace) -> int:
    for name, cls in FAMILIES.items():
        print(f"{name}: {cls.summary()}")
        for spec in cls.PARAMS:
            only = f" (only with {spec.only_with[0]} = {' or '.join(spec.only_with[1])})" if spec.only_with else ""
            print(f"    {spec.name:<12} default {spec.default!s:<10} {spec.allowed():<40} {spec.doc}{only}")
    print("user-defined: --family package.module:ClassName (see docs/families.md, 'Adding a family')")
    return 0


def add_measure(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("measure", help="one Monte Carlo measurement with its standard error",
                       description=measure_description(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("quantity", nargs="?", choices=sorted(QUANTITIES), help="what to measure (not with --from)")
    p.add_argument("--family", help="built-in name (accum families) or module:Class (the current folder is importable)")
    p.add_argument("--param", action="append", metavar="K=V", help="family parameter (repeatable)")
    p.add_argument("--opt", action="append", metavar="K=V",
                   help="estimator option (repeatable): " + "; ".join(
                       f"{q.name}: {', '.join(s.name for s in q.options)}" for q in QUANTITIES.values()))
    p.add_argument("--seed", type=integer_option, default=None, help="seed (default 0)")
    p.add_argument("--from", dest="from_record", metavar="RESULT.json",
                   help="re-run the saved measurement's exact config and seed (no other job options)")
    p.add_argument("--json", metavar="PATH", help="write the record here (atomically)")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress (a bar on a terminal, else a line every 10 s on stderr)")
    p.set_defaults(run=run_measure)


def measure_description() -> str:
    """Every quantity with its options: default, allowed range (the one checked before any work) and meaning."""
    lines = ["One Monte Carlo measurement with its standard error: one JSON line on stdout, the full record with",
             "--json.  Quantities and their --opt options (default, allowed range, meaning):", ""]
    for q in QUANTITIES.values():
        lines.append(f"{q.name}: {q.doc}")
        lines += [f"    {s.name:<15} default {s.default!s:<8} {s.allowed():<38} {s.doc}" for s in q.options]
    return "\n".join(lines)


def measure_job(args: argparse.Namespace) -> tuple[str, str, dict, dict, int]:
    """(quantity, family, params, options, seed) from the command line, or from the record of ``--from``."""
    if args.from_record is None:
        if args.quantity is None or args.family is None:
            raise ParamError("give QUANTITY and --family, or --from RESULT.json")
        seed = 0 if args.seed is None else check_seed(args.seed, "--seed")
        return (args.quantity, args.family, parse_assignments(args.param, "--param"),
                parse_assignments(args.opt, "--opt"), seed)
    given = [name for name, value in (("QUANTITY", args.quantity), ("--family", args.family), ("--param", args.param),
                                      ("--opt", args.opt), ("--seed", args.seed)) if value is not None]
    if given:
        raise ParamError(f"--from re-runs a saved config exactly; leave out {', '.join(given)}")
    return config_from_record(read_from_record(args.from_record), args.from_record)


def read_from_record(path: str) -> dict:
    """The saved record of ``--from PATH`` (``read_record``); every refusal names --from."""
    if not path.strip():
        raise ParamError("--from: empty path")
    try:
        return read_record(path)
    except ResultError as err:
        raise ResultError(f"--from {err}") from None


def run_measure(args: argparse.Namespace) -> int:
    """Validate everything (options, family and its first sample, memory), reserve the --json file, run, write."""
    job = plan_measurement(*measure_job(args))
    with reserve_output(args.json, "--json") if args.json is not None else contextlib.nullcontext() as out:
        record = run_plan(job, progress=not args.no_progress)
        record["platform"]["threads"] = getattr(args, "thread_settings", None)  # set by accum.cli (--threads)
        if out is not None:
            out.write_json(record)
    # what its first sample showed (orthogonal / contractive), for a built-in as for a user family
    print(f"accum measure: {SampleReport(**record['family_check']).line(record['config']['family'])}", file=sys.stderr)
    result = record["result"]
    summary = {k: result[k] for k in ("mean", "stderr", "n") if k in result} or result
    line = {"quantity": record["config"]["quantity"], "family": record["config"]["family"], **summary,
            "seconds": round(record["timings"]["seconds"], 3)}
    print(json.dumps(jsonable(line)))
    return 0


def add_sweep(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="run a grid of measurements from a TOML file; resumable",
                       description="Run every job of GRID.toml (format: simulations/SWEEP.md).  One JSON file "
                                   "per job, named by the hash of its config and code version; finished jobs "
                                   "are skipped, corrupt ones recomputed.")
    p.add_argument("grid", metavar="GRID.toml", help="the grid of jobs (family, quantity, parameter lists; SWEEP.md)")
    p.add_argument("--workers", type=integer_option, metavar="N", help=WORKERS_HELP)
    p.add_argument("--scheduler", metavar="tcp://HOST:PORT", help="run on this Dask distributed scheduler")
    p.add_argument("--out", metavar="DIR", help="output directory instead of the grid's `output`")
    p.add_argument("--dry-run", action="store_true", help="validate the grid, count done and pending jobs")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(run=run_sweep)


def run_sweep(args: argparse.Namespace) -> int:
    """``accum sweep`` (``sweep.run_command``); on Ctrl-C, ``Interrupted`` saying how many jobs are kept where."""
    try:
        with holding_interrupts():  # an interrupt reports what was kept (accum.interrupts)
            return run_sweep_command(args)
    except KeyboardInterrupt:
        raise Interrupted(kept_jobs(args.grid, args.out)) from None


def kept_jobs(grid_path: str, out: str | None) -> str:
    """"interrupted; N of M jobs kept in DIR": the grid's finished jobs on disk (what a rerun will skip)."""
    try:
        grid = load_grid(grid_path)
        output = Path(out) if out is not None else Path(grid.output)
        jobs = plan(grid)
    except ParamError:  # interrupted before the grid was read: nothing ran
        return "interrupted before any job ran"
    done = sum(is_finished(output, job) for job in jobs)
    return f"interrupted; {done} of {len(jobs)} jobs kept in {output}"


#: the commands this module defines (``accum.cli.COMMANDS`` registers them by name)
SUBCOMMANDS = (add_families, add_measure, add_sweep)
