"""The ``accum`` command line (contract in DESIGN.md).

Each sub-command lives with its package and is added here by its ``add_*`` function; this module only
assembles the parser.  Errors in user input (``ParamError``, ``ResultError``) print one line naming the
problem and exit with status 2; an ``OSError`` while writing prints one line and exits with status 1.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

from accum.simulations import cli as sim_cli
from accum.simulations.params import ParamError
from accum.simulations.results import ResultError
from accum.theory.cli import add_subparser as add_check
from accum.verify import add_verify


# Sub-commands whose modules are heavy to import (torch, matplotlib) are registered lazily: the top-level
# parser only knows their name; their own parser is built when they run.
LAZY = {
    "probe": ("C7 probes: train | eval | sweep (PyTorch)", "accum.probes.cli", "add_subparser"),
    "figures": ("every paper figure as PNG + PDF + caption", "accum.figures.cli", "add_figures"),
}


def add_lazy(sub: argparse._SubParsersAction, name: str) -> None:
    sub.add_parser(name, help=LAZY[name][0], add_help=False)  # listed in --help; main() dispatches it


def run_lazy(name: str, rest: Sequence[str]) -> int:
    """Import the sub-command's module, parse ``name rest`` with its own parser, run it."""
    module = importlib.import_module(LAZY[name][1])
    parser = argparse.ArgumentParser(prog="accum")
    getattr(module, LAZY[name][2])(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args([name, *rest])
    return int(args.run(args) or 0)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="accum", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (*sim_cli.SUBCOMMANDS, add_check, add_verify):
        add(sub)
    for name in LAZY:
        add_lazy(sub, name)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv else None
    try:
        if command in LAZY:  # their own parser sees every argument, --help included
            return run_lazy(command, argv[1:])
        args = build_parser().parse_args(argv)
        return int(args.run(args) or 0)
    except (ParamError, ResultError) as err:
        print(f"accum {command}: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # the input was fine but the system refused (disk full, permissions changed)
        print(f"accum {command}: error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
