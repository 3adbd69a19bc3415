"""accum: numerical checks of the claims of "Why Do Accumulated Transformations Extrapolate?" (README.md).

Each sub-command lives with its package and is added here by its ``add_*`` function; this module only
assembles the parser, gives every compute command ``--threads N`` (``accum.runtime.thread_limits``) and
turns failures into one line on stderr:

* bad input (``ParamError``, ``ResultError``, an unparsable command line): exit status 2;
* an ``OSError`` while writing (disk full, permissions changed): exit status 1;
* Ctrl-C or SIGTERM: "interrupted" (with what was kept, for sweeps and figures), exit status 130.

No traceback reaches the user for any of these, and no result file is ever left half-written.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

from accum.runtime import (EXIT_INTERRUPTED, Interrupted, OneLineParser, check_threads, terminate_as_interrupt,
                           thread_limits, usable_cores)
from accum.simulations import cli as sim_cli
from accum.simulations.params import ParamError, integer_option
from accum.simulations.results import ResultError
from accum.theory.cli import add_subparser as add_check
from accum.verify import add_verify

#: commands that compute (numpy / BLAS / torch work) and so take --threads
COMPUTE = ("measure", "check", "verify", "sweep", "bench", "figures")


def add_threads(parser: argparse.ArgumentParser) -> None:
    """Give a compute command ``--threads N`` (unless its own parser already has it)."""
    if "--threads" not in parser._option_string_actions:
        parser.add_argument("--threads", type=integer_option, metavar="N",
                            help="BLAS / OpenMP / torch threads (default: every usable core; on a shared machine 1)")


def run_command(args: argparse.Namespace) -> int:
    """``args.run(args)`` under its thread limit (``--threads``, default every usable core) where it has one."""
    if args.command not in COMPUTE:
        return int(args.run(args) or 0)
    threads = usable_cores() if args.threads is None else check_threads(args.threads)
    with thread_limits(threads) as settings:
        args.thread_settings = settings
        return int(args.run(args) or 0)


# Sub-commands whose modules are heavy to import (torch, matplotlib) are registered lazily: the top-level
# parser only knows their name; their own parser is built when they run.
LAZY = {
    "probe": ("C7 probes: train | eval | sweep | report (PyTorch)", "accum.probes.cli", "add_subparser"),
    "figures": ("every paper figure as PNG + PDF + caption", "accum.figures.cli", "add_figures"),
}


def add_lazy(sub: argparse._SubParsersAction, name: str) -> None:
    sub.add_parser(name, help=LAZY[name][0], add_help=False)  # listed in --help; main() dispatches it


def run_lazy(name: str, rest: Sequence[str]) -> int:
    """Import the sub-command's module, parse ``name rest`` with its own parser, run it."""
    module = importlib.import_module(LAZY[name][1])
    parser = OneLineParser(prog="accum")
    sub = parser.add_subparsers(dest="command", required=True)
    getattr(module, LAZY[name][2])(sub)
    if name in COMPUTE:
        add_threads(sub.choices[name])
    return run_command(parser.parse_args([name, *rest]))


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="accum", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (*sim_cli.SUBCOMMANDS, add_check, add_verify):
        add(sub)
    for name in COMPUTE:
        if name in sub.choices:
            add_threads(sub.choices[name])
    for name in LAZY:
        add_lazy(sub, name)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv else None
    try:
        with terminate_as_interrupt():  # SIGTERM cleans up as Ctrl-C does
            if command in LAZY:  # their own parser sees every argument, --help included
                return run_lazy(command, argv[1:])
            return run_command(build_parser().parse_args(argv))
    except Interrupted as err:  # the command says what it kept
        print(f"accum {command}: {err}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        print(f"accum {command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (ParamError, ResultError) as err:
        print(f"accum {command}: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # the input was fine but the system refused (disk full, permissions changed)
        print(f"accum {command}: error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
