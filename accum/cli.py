"""The ``accum`` command line (contract in DESIGN.md).

Each sub-command lives with its package; this module only assembles the parser.  Errors in user input
(``ParamError``, ``ResultError``) print one line naming the problem and exit with status 2.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from accum.simulations.params import ParamError
from accum.simulations.results import ResultError
from accum.simulations import cli as sim_cli


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="accum", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in sim_cli.SUBCOMMANDS:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except (ParamError, ResultError) as err:
        print(f"accum {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
