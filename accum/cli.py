"""accum: numerical checks of the claims of "Why Do Accumulated Transformations Extrapolate?" (README.md).

Every sub-command lives with its package and is registered here by name only (``COMMANDS``): its module is
imported when it runs, after the interrupt handlers are in place, so ``accum families`` never loads torch and a
Ctrl-C during start-up is handled like one during the work.  This module assembles the parser, gives every
compute command ``--threads N`` (``accum.runtime.thread_limits``, default ``DEFAULT_THREADS``) and turns
failures into one line on stderr:

* bad input (``ParamError``, ``ResultError``, an unparsable command line): exit status 2;
* an ``OSError`` while writing (disk full, permissions changed), or no memory left: exit status 1;
* Ctrl-C or SIGTERM: "interrupted" (with what was kept, for sweeps and figures), exit status 130 for SIGINT and
  143 for SIGTERM (128 + the signal, as a shell reports a process the signal ended; ``accum.interrupts``);
* ``--help`` and ``--version``: exit status 0 (``main`` returns the status argparse would exit with);
* stdout closed by its reader (``accum families | head -1``): nothing more is printed, exit status 141.

No traceback reaches the user for any of these, and no result file is ever left half-written.
"""

from __future__ import annotations

# Only what the interpreter has already loaded is imported here: ``main`` installs the interrupt handlers before it
# imports anything that takes time (argparse, accum.runtime, a command's module, numpy, torch), and sets the thread
# count of BLAS / OpenMP libraries before any of them loads (``accum.runtime.thread_environment``).
import importlib
import os
import sys

from accum.interrupts import SignalPolicy, settle_interrupts

#: 128 + SIGPIPE, as a shell reports a command whose reader went away
EXIT_BROKEN_PIPE = 141


class Command:
    """A sub-command: its one-line summary (``accum --help``), the module that defines it, the function of that
    module which adds its parser to an ``add_subparsers()`` object, and whether it computes (takes ``--threads``)."""

    __slots__ = ("summary", "module", "adder", "computes")

    def __init__(self, summary: str, module: str, adder: str, computes: bool = False) -> None:
        self.summary, self.module, self.adder, self.computes = summary, module, adder, computes


COMMANDS = {
    "families": Command("list the built-in families, their parameters and allowed ranges", "accum.simulations.cli",
                        "add_families"),
    "measure": Command("one Monte Carlo measurement with its standard error", "accum.simulations.cli", "add_measure",
                       True),
    "check": Command("assumption checks for a family (spectral gap, non-lattice, orthogonality): which claims apply",
                     "accum.theory.cli", "add_subparser", True),
    "verify": Command("check every claim C1-C6 against its prediction; exit 1 if any fails", "accum.verify",
                      "add_verify", True),
    "figures": Command("every paper figure as PNG + PDF + caption", "accum.figures.cli", "add_figures", True),
    "sweep": Command("run a grid of measurements from a TOML file; resumable", "accum.simulations.cli", "add_sweep",
                     True),
    "bench": Command("time each fast path against its baseline; exit 1 if a row misses its target",
                     "accum.simulations.bench", "add_bench", True),
    "probe": Command("C7 probes (PyTorch): train | eval | sweep | report | theory | tables", "accum.probes.cli",
                     "add_subparser"),
}

def add_threads(parser: argparse.ArgumentParser) -> None:
    """Give a compute command ``--threads N`` (unless its own parser already has it)."""
    from accum.runtime import DEFAULT_THREADS
    from accum.simulations.params import integer_option

    if "--threads" not in parser._option_string_actions:
        parser.add_argument("--threads", type=integer_option, metavar="N",
                            help=f"BLAS / OpenMP / torch threads of this process (default {DEFAULT_THREADS}, for every "
                                 "command; on a machine of your own, up to its cores)")


def package_version() -> str:
    """The installed accum's version (``importlib.metadata``), or "0+unknown" for a source tree."""
    from importlib import metadata

    try:
        return metadata.version("accum")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser: ``--help`` lists every command by its summary, ``--version``; no command is imported."""
    from accum.runtime import OneLineParser

    parser = OneLineParser(prog="accum", description=__doc__.splitlines()[0],
                           epilog="`accum COMMAND --help` describes a command and its options.  Guide: README.md "
                                  "and docs/ in the source tree.")
    parser.add_argument("--version", action="version", version=f"accum {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, command in COMMANDS.items():
        sub.add_parser(name, help=command.summary, add_help=False)
    return parser


def command_parser(name: str) -> argparse.ArgumentParser:
    """A parser that knows the one command ``name``, built by its module (imported here)."""
    from accum.runtime import OneLineParser

    command = COMMANDS[name]
    module = importlib.import_module(command.module)
    parser = OneLineParser(prog="accum")
    sub = parser.add_subparsers(dest="command", required=True)
    getattr(module, command.adder)(sub)
    if command.computes:
        add_threads(sub.choices[name])
    return parser


def run_command(args: argparse.Namespace) -> int:
    """``args.run(args)`` under its thread limit (``--threads``, default ``DEFAULT_THREADS``) where it has one."""
    if not COMMANDS[args.command].computes:
        return int(args.run(args) or 0)
    from accum.runtime import DEFAULT_THREADS, check_threads, thread_limits

    threads = DEFAULT_THREADS if args.threads is None else check_threads(args.threads)
    with thread_limits(threads) as settings:
        args.thread_settings = settings
        return int(args.run(args) or 0)


def dispatch(argv: list[str]) -> int:
    """Parse ``argv`` and run its command (only that command's module is imported)."""
    name = argv[0] if argv else None
    if name not in COMMANDS:  # --help, --version, no command or an unknown one: the top-level parser answers
        build_parser().parse_args(argv)
        return 2
    parser = command_parser(name)
    args, extra = parser.parse_known_args(argv)
    if extra:  # refused by the command's own parser, so the line names the command and its --help
        parser._subparsers._group_actions[0].choices[name].error(f"unrecognized arguments: {' '.join(extra)}")
    return run_command(args)


def quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush to a closed pipe prints nothing."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def main(argv: list[str] | None = None) -> int:
    """Run ``accum ARGV`` (default ``sys.argv[1:]``) and return its exit status.  Called without ``argv`` it is the
    process's entry point: a signal after the command has finished, while the process exits, is then ignored."""
    process = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv and not argv[0].startswith("-") else None
    prefix = "accum" if command is None else f"accum {command}"
    # first of all (accum.interrupts): start-up is interrupted as the work is; the process may end at once
    policy = SignalPolicy(exit_line=f"{prefix}: interrupted" if process else None).install()
    interrupted = False
    try:
        status = run_reporting_errors(argv, prefix)
        interrupted = status is None
    except KeyboardInterrupt:  # re-delivered just after the first one was reported
        interrupted = True
    finally:
        policy.uninstall(ignore=process)  # restored (a test calling main), or ignored while the process exits
    if interrupted:
        status = policy.status
        if process:
            exit_now(status)
    return status


def exit_now(status: int) -> None:
    """Flush the output and end the process with ``status`` at once.  For an interrupted command: its cleanup has
    run (temporary files removed, workers stopped), and CPython, when a Ctrl-C interrupted an extension module's
    start-up code, would otherwise end the process by SIGINT at exit, whatever status the command returned."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


def run_reporting_errors(argv: list[str], prefix: str) -> int | None:
    """``dispatch(argv)``, every failure turned into one line on stderr starting with ``prefix`` and its exit
    status (module docstring); None for an interrupt (its status is the signal's: ``accum.interrupts``)."""
    try:
        from accum.runtime import thread_environment, threads_requested

        with thread_environment(threads_requested(argv)):  # before numpy, scipy or torch loads (accum.runtime)
            from accum.errors import ParamError
            from accum.simulations.results import ResultError

            try:
                return dispatch(argv)
            except SystemExit as exit_:  # argparse: --help, --version, or a refused command line (already printed)
                return exit_.code if isinstance(exit_.code, int) else 0 if exit_.code is None else 2
            except (ParamError, ResultError) as err:
                print(f"{prefix}: error: {err}", file=sys.stderr)
                return 2
    except KeyboardInterrupt as err:  # an ``Interrupted`` says what the command kept
        settle_interrupts()  # reported: a re-delivery must not end the process with a second line
        print(f"{prefix}: {str(err) or 'interrupted'}", file=sys.stderr)
        return None
    except BrokenPipeError:  # the reader of stdout went away (`| head`): end quietly
        quiet_stdout()
        return EXIT_BROKEN_PIPE
    except MemoryError:
        print(f"{prefix}: error: out of memory", file=sys.stderr)
        return 1
    except OSError as err:  # the input was fine but the system refused (disk full, permissions changed)
        print(f"{prefix}: error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
