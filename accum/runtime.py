"""How every ``accum`` command runs: its thread count (``--threads``), what Ctrl-C prints and how a bad
command line is refused (``OneLineParser``: one line, exit status 2).

Threads: ``thread_limits(n)`` caps the BLAS / OpenMP pools numpy and scipy use (through threadpoolctl,
which also covers libraries loaded later in the block) and torch's intra-op pool when torch is loaded.
The default is every core this process may use (``usable_cores``), right for a lone run; on a shared
machine pass ``--threads 1`` so BLAS pools do not oversubscribe the cores and stall.

Interrupts: a command that keeps partial work (a sweep, the figures' measurements) raises ``Interrupted``
with the line to print ("interrupted; N of M jobs kept in DIR"); ``accum.cli`` prints it (or plain
"interrupted") and exits with ``EXIT_INTERRUPTED`` = 130 (128 + SIGINT), as shells do.  SIGTERM (``kill``,
a batch scheduler's time limit) is treated as Ctrl-C (``terminate_as_interrupt``), so the same cleanup runs
and no temporary file is left; so is a SIGINT sent to a command whose parent started it with SIGINT ignored
(a script's background job, which Python would otherwise leave deaf to ``timeout -s INT``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from typing import Any, Iterator

from threadpoolctl import threadpool_info, threadpool_limits

from accum.errors import ParamError

EXIT_INTERRUPTED = 130
MAX_THREADS = 1024


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, with the one line that says what was kept (``str(err)``)."""


def _raise_interrupt(signum: int, frame: Any) -> None:
    """Signal handler: raise ``KeyboardInterrupt`` where the program is, as Ctrl-C does."""
    raise KeyboardInterrupt


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Run the block with SIGTERM and SIGINT raising ``KeyboardInterrupt`` (SIGINT too where it was inherited
    ignored); the previous handlers are restored after it."""
    previous = {sig: signal.signal(sig, _raise_interrupt) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def usable_cores() -> int:
    """CPUs this process may run on (its affinity mask), at least 1."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def check_threads(value: Any, option: str = "--threads") -> int:
    """A thread count: an integer in [1, ``MAX_THREADS``]; ``ParamError`` names ``option``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_THREADS:
        raise ParamError(f"{option}: expected an integer in [1, {MAX_THREADS}], got {value!r}")
    return value


@contextlib.contextmanager
def thread_limits(threads: int) -> Iterator[dict]:
    """Run the block with BLAS / OpenMP pools (threadpoolctl) and torch (if imported) at ``threads``.

    Yields the settings in force, to record with a result: {"threads": n, "pools": [{"library", "api",
    "threads"} per loaded pool], "torch": n or None}.
    """
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


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, ``accum CMD: error: ...`` (exit status 2), no usage dump."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def _get_values(self, action: argparse.Action, arg_strings: list[str]) -> object:
        # argparse drops a lone "--" value (``--budget=--``) and returns [] unconverted; read it as the text "--"
        if action.option_strings and action.nargs is None and arg_strings == ["--"]:
            value = self._get_value(action, "--")
            self._check_value(action, value)
            return value
        return super()._get_values(action, arg_strings)
