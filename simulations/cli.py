"""``accum families`` and ``accum measure``."""

from __future__ import annotations

import argparse
import json

from .bench import add_bench
from .families import FAMILIES
from .measure import QUANTITIES, measure
from .params import parse_assignments
from .results import atomic_write_json, jsonable


def add_families(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("families", help="list transform families and their parameters")
    p.set_defaults(run=run_families)


def run_families(args: argparse.Namespace) -> int:
    for name, cls in FAMILIES.items():
        print(f"{name}: {cls.summary}")
        for spec in cls.PARAMS:
            print(f"    {spec.name:<12} default {spec.default!s:<10} {spec.allowed():<40} {spec.doc}")
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
    record = measure(args.quantity, args.family, parse_assignments(args.param, "--param"),
                     parse_assignments(args.opt, "--opt"), seed=args.seed)
    if args.json:
        atomic_write_json(args.json, record)
    result = record["result"]
    summary = {k: result[k] for k in ("mean", "stderr", "n") if k in result} or result
    line = {"quantity": args.quantity, "family": record["config"]["family"], **summary,
            "seconds": round(record["timings"]["seconds"], 3)}
    print(json.dumps(jsonable(line)))
    return 0


SUBCOMMANDS = (add_families, add_measure, add_bench)
