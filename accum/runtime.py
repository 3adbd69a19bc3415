"""How every ``accum`` command runs: its thread count (``--threads``), what Ctrl-C prints and how a bad
command line is refused (``OneLineParser``: one line, exit status 2).

Threads: a BLAS or OpenMP library reads its thread count once, when it loads, and loads happen all through a
command (scipy's own OpenBLAS with scipy.linalg, torch's libgomp when an estimator first needs torch), so
``accum.cli.main`` sets ``THREAD_VARIABLES`` to the command's count (``threads_requested``) before anything is
imported (``thread_environment``); ``thread_limits(n)`` also caps the pools already loaded (threadpoolctl) and
torch's intra-op pool, and records what is in force.  Every command's default is ``DEFAULT_THREADS`` = 1: right on
a shared machine, and the same numbers on any machine; on a machine of your own pass ``--threads N``.  Pool workers always run one thread each
(``accum.simulations.runner``).

Interrupts: ``accum.cli.main`` installs the signal policy (``accum.interrupts``) before it imports any command,
so a signal during start-up is handled like one during the work; SIGTERM (``kill``, a batch scheduler's time
limit) is treated as Ctrl-C, so the same cleanup runs and no temporary file is left.  A command that keeps partial
work (a sweep, the figures' measurements) raises ``Interrupted`` with the line to print ("interrupted; N of M jobs
kept in DIR"); ``accum.cli`` prints it (or plain "interrupted") and exits with 128 + the signal (130, 143).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from typing import Any, Iterator, Sequence

from accum.errors import ParamError

MAX_THREADS = 1024
#: the one default of ``--threads`` for every command (module docstring)
DEFAULT_THREADS = 1
#: the environment variables BLAS / OpenMP libraries read when they load (OpenBLAS of numpy and of scipy, torch's
#: libgomp, MKL, Accelerate, numexpr)
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
                    "NUMEXPR_NUM_THREADS")


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, with the one line that says what was kept (``str(err)``)."""


def check_threads(value: Any, option: str = "--threads") -> int:
    """A thread count: an integer in [1, ``MAX_THREADS``]; ``ParamError`` names ``option``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_THREADS:
        raise ParamError(f"{option}: expected an integer in [1, {MAX_THREADS}], got {value!r}")
    return value


def threads_requested(argv: Sequence[str]) -> int:
    """The thread count of command line ``argv`` (its last ``--threads N`` or ``--threads=N`` before a bare
    ``--``), read before the command's parser exists -- the libraries read their count when they load, and the
    parser's module loads them; ``DEFAULT_THREADS`` when there is none or it is not an integer in [1,
    ``MAX_THREADS``] (the command's parser then refuses it, before any work)."""
    value = None
    for token, following in zip(argv, [*argv[1:], None]):
        if token == "--":
            break
        if token == "--threads":
            value = following
        elif token.startswith("--threads="):
            value = token.partition("=")[2]
    valid = (value is not None and value.isascii() and value.isdigit()
             and len(value.lstrip("0")) <= len(str(MAX_THREADS))  # before int(), which refuses over 4300 digits
             and 1 <= int(value) <= MAX_THREADS)
    return int(value) if valid else DEFAULT_THREADS


@contextlib.contextmanager
def thread_environment(threads: int) -> Iterator[None]:
    """Each of ``THREAD_VARIABLES`` set to ``threads`` while the block runs, then as it was (set or not): every
    BLAS / OpenMP library loaded in the block, in this process or a process it starts, uses ``threads``."""
    previous = {name: os.environ.get(name) for name in THREAD_VARIABLES}
    os.environ.update(dict.fromkeys(THREAD_VARIABLES, str(threads)))
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def thread_limits(threads: int) -> Iterator[dict]:
    """Run the block with BLAS / OpenMP pools (threadpoolctl) and torch (if imported) at ``threads``.

    Yields the settings in force, to record with a result: {"threads": n, "pools": [{"library", "api",
    "threads"} per loaded pool], "torch": n or None}.
    """
    from threadpoolctl import threadpool_info, threadpool_limits  # loaded by the commands that compute only

    torch = sys.modules.get("torch")
    previous = torch.get_num_threads() if torch is not None else None
    with threadpool_limits(limits=threads):
        if torch is not None:
            torch.set_num_threads(threads)
        try:
            yield {"threads": threads, "torch": threads if torch is not None else None,
                   "pools": [{"library": p["prefix"], "api": p["internal_api"], "threads": p["num_threads"]}
                             for p in threadpool_info()]}
        finally:
            if torch is not None:
                torch.set_num_threads(previous)


def progress_bar(total: int, desc: str, unit: str, enabled: bool = True, initial: int = 0, every: float = 0.0) -> Any:
    """Progress on stderr, as a context manager with ``update(n=1)``: a tqdm bar on a terminal; elsewhere (CI logs,
    nohup, notebooks) plain lines "DESC: K of TOTAL UNITs done (S s)", one per update or at most one per ``every``
    seconds, the last unit's excepted (``PlainProgress``); nothing when not ``enabled``."""
    if enabled and sys.stderr.isatty():
        from tqdm import tqdm

        return tqdm(total=total, initial=initial, desc=desc, unit=unit, leave=False, unit_scale=every > 0)
    return PlainProgress(total, desc, unit, initial, every, enabled)


class PlainProgress:
    """Progress as plain lines on stderr, for a stderr that is not a terminal (``progress_bar``).  No line for the
    last unit: what follows it is the command's own result, or its one-line error (a check that finished and then
    proved the user's family gives no finite result is refused in one line, as ``accum measure`` refuses it)."""

    def __init__(self, total: int, desc: str, unit: str, initial: int = 0, every: float = 0.0,
                 enabled: bool = True) -> None:
        self.total, self.desc, self.unit, self.done, self.every, self.enabled = total, desc, unit, initial, every, enabled
        self.start = self.last = time.monotonic()

    def __enter__(self) -> "PlainProgress":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def update(self, n: int = 1) -> None:
        """Count ``n`` more done; print the line unless one was printed less than ``every`` seconds ago."""
        self.done += n
        now = time.monotonic()
        if self.enabled and self.done < self.total and now - self.last >= self.every:  # ``every``: none in a shorter run
            self.last = now
            print(f"{self.desc}: {self.done} of {self.total} {self.unit}s done ({now - self.start:.0f} s)",
                  file=sys.stderr, flush=True)


class Heartbeat:
    """Progress of long work with no count to show: ``beat(what)`` prints "DESC: WHAT (S s)" on stderr, at most once
    every ``every`` seconds and never in the first ``every`` seconds (a quick run prints nothing)."""

    def __init__(self, desc: str, every: float = 10.0) -> None:
        self.desc, self.every = desc, every
        self.start = self.last = time.monotonic()

    def __call__(self, what: str) -> None:
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            print(f"{self.desc}: {what} ({now - self.start:.0f} s)", file=sys.stderr, flush=True)


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, ``accum CMD: error: ...`` (exit status 2), no usage dump.

    Options are never abbreviated (``--jso`` is not ``--json``), and an option that takes one value (or one
    list) may be given once: a second ``--json`` is refused rather than silently winning."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        args = list(sys.argv[1:] if args is None else args)
        repeated = repeated_option(args, single_valued_options(self))
        if repeated is not None:
            self.error(f"argument {repeated}: given more than once; give it once")
        return super().parse_known_args(args, namespace)

    def _get_values(self, action: argparse.Action, arg_strings: list[str]) -> object:
        # argparse drops a lone "--" value (``--budget=--``) and returns [] unconverted; read it as the text "--"
        if action.option_strings and action.nargs is None and arg_strings == ["--"]:
            value = self._get_value(action, "--")
            self._check_value(action, value)
            return value
        return super()._get_values(action, arg_strings)


def single_valued_options(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Option string -> the option's name, for the options of ``parser`` whose last value would silently win when
    repeated (store and store-const actions: one value, one list, a flag); repeatable ones (append) are left out."""
    kinds = (argparse._StoreAction, argparse._StoreConstAction)
    return {s: "/".join(a.option_strings) for a in parser._actions if isinstance(a, kinds) for s in a.option_strings}


def repeated_option(args: Sequence[str], options: dict[str, str]) -> str | None:
    """The first option of ``options`` that ``args`` give twice (``--json a --json=b`` included), or None; nothing
    after a bare ``--`` is an option."""
    seen: set[str] = set()
    for token in args:
        if token == "--":
            return None
        name = options.get(token.partition("=")[0] if token.startswith("--") else token)
        if name is not None:
            if name in seen:
                return name
            seen.add(name)
    return None
