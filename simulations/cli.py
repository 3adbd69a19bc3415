"""``accum families`` and ``accum measure``."""

from __future__ import annotations

import argparse
import json

from .bench import add_bench
from .families import FAMILIES
from .measure import QUANTITIES, measure
from .params import parse_assignments
from .results import atomic_write_json, check_output_path, jsonable
from .sweep import run_command as run_sweep_command


def add_families(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("families", help="list transform families and their parameters")
    p.set_defaults(run=run_families)


def run_families(args: argparse.Namespace) -> int:
    for name, cls in FAMILIES.items():
        print(f"{name}: {cls.summary}")
        for spec in cls.PARAMS:
            only = f" (only with {spec.only_with[0]} = {' or '.join(spec.only_with[1])})" if spec.only_with else ""
            print(f"    {spec.name:<12} default {spec.default!s:<10} {spec.allowed():<40} {spec.doc}{only}")
    print("user-defined: --family package.module:ClassName (see README, 'Adding a family')")
    return 0


def add_measure(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("measure", help="one Monte Carlo measurement with its standard error",
                       description="Quantities: " + "; ".join(f"{q.name}: {q.doc}" for q in QUANTITIES.values()))
    p.add_argument("quantity", choices=sorted(QUANTITIES))
    p.add_argument("--family", required=True, help="built-in name (accum families) or module:Class")
    p.add_argument("--param", action="append", metavar="K=V", help="family parameter (repeatable)")
    p.add_argument("--opt", action="append", metavar="K=V",
                   help="estimator option (repeatable): " + "; ".join(
                       f"{q.name}: {', '.join(s.name for s in q.options)}" for q in QUANTITIES.values()))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="PATH", help="write the record here (atomically)")
    p.set_defaults(run=run_measure)


def run_measure(args: argparse.Namespace) -> int:
    if args.json is not None:
        check_output_path(args.json, "--json")
    record = measure(args.quantity, args.family, parse_assignments(args.param, "--param"),
                     parse_assignments(args.opt, "--opt"), seed=args.seed)
    if args.json is not None:
        atomic_write_json(args.json, record)
    result = record["result"]
    summary = {k: result[k] for k in ("mean", "stderr", "n") if k in result} or result
    line = {"quantity": args.quantity, "family": record["config"]["family"], **summary,
            "seconds": round(record["timings"]["seconds"], 3)}
    print(json.dumps(jsonable(line)))
    return 0


def add_sweep(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="run a grid of measurements from a TOML file; resumable",
                       description="Run every job of GRID.toml (format: simulations/SWEEP.md).  One JSON file "
                                   "per job, named by the hash of its config and code version; finished jobs "
                                   "are skipped, corrupt ones recomputed.")
    p.add_argument("grid", metavar="GRID.toml")
    p.add_argument("--workers", type=int, metavar="N",
                   help="local processes (default: usable CPUs; 1 = in this process)")
    p.add_argument("--scheduler", metavar="tcp://HOST:PORT", help="run on this Dask distributed scheduler")
    p.add_argument("--out", metavar="DIR", help="output directory instead of the grid's `output`")
    p.add_argument("--dry-run", action="store_true", help="validate the grid, count done and pending jobs")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(run=run_sweep_command)


SUBCOMMANDS = (add_families, add_measure, add_bench, add_sweep)
