"""The one job runner of ``accum sweep``, ``accum verify`` and ``accum figures``: ``map_outcomes`` runs a
module-level function over a list of items in this process, on a local ``spawn`` process pool of
single-threaded workers, or on a Dask cluster (``connect``), and yields each outcome (or the exception it
raised) as it finishes.  It also checks the ``--workers`` and ``--scheduler`` options of those commands.

A job sent to a worker (pool or Dask) travels as ``shipped``: the job pickled in this process, with this process's
``userpath.user_module_folders``; the worker puts those folders on its import path before it reads the job
(``run_shipped``), so a user's ``module:Class`` family from the current folder resolves there as it does here --
named in the job (a sweep) or pickled in it (a verify check), for every command on this runner.

Nothing here knows what a job is; results are the caller's to save (``simulations.sweep``, ``accum.report``).
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import pickle
import re
import signal
import threading
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, Callable, Iterator

from tqdm import tqdm

from accum.interrupts import holding_interrupts
from accum.runtime import thread_environment

from .params import ParamError
from .userpath import resolve_user_modules_from, user_module_folders

MAX_WORKERS = 1024         # local processes (``--workers``)
#: the one default of ``--workers`` (verify, sweep, figures, probe sweep): in this process, as ``--threads`` defaults
#: to 1 -- polite on a shared machine; results do not depend on it (bit-identical for any count)
DEFAULT_WORKERS = 1
WORKERS_HELP = (f"local processes (default {DEFAULT_WORKERS}: in this process, as for every command; on a machine of "
                "your own, up to its cores)")
SCHEDULER_SCHEMES = ("tcp", "tls")
SCHEDULER_ADDRESS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)"
                               r":(?P<port>[0-9]+)")
def single_thread_env() -> contextlib.AbstractContextManager[None]:
    """Each of ``runtime.THREAD_VARIABLES`` set to "1" while the block runs, then as before
    (``runtime.thread_environment``).

    Pool workers are started with ``spawn`` and copy this environment, so OpenBLAS/MKL/OpenMP read 1 thread
    when numpy loads in them (setting it in a worker initializer would be too late: numpy is imported while
    the worker unpickles its first task), whatever ``--threads`` the parent runs with.
    """
    return thread_environment(1)


def serial_outcomes(fn: Callable[[Any], Any], items: list) -> Iterator[tuple[Any, Any]]:
    """In-process: (item, fn(item) or the exception it raised), in order."""
    for item in items:
        try:
            outcome = fn(item)
        except Exception as err:  # a failing job is reported and retried on the next run, not fatal
            outcome = err
        yield item, outcome


@contextlib.contextmanager
def sigint_blocked() -> Iterator[None]:
    """SIGINT blocked in this thread while the block runs, then the previous mask back (a Ctrl-C that came meanwhile
    is delivered then).  Processes started in the block inherit the blocked mask through fork and exec, so a Ctrl-C
    sent to the process group while a pool worker's interpreter starts stays pending until ``pool_worker_init``
    has ignored it, instead of interrupting the worker's imports with a traceback."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def shipped(fn: Callable[[Any], Any], item: Any) -> tuple:
    """The arguments of ``run_shipped`` for ``fn(item)`` on a worker: this process's ``user_module_folders``,
    ``fn`` and ``item`` pickled here (an item that cannot be pickled raises here, as the job's outcome)."""
    return user_module_folders(), fn, pickle.dumps(item)


def run_shipped(folders: tuple[str, ...], fn: Callable[[Any], Any], job: bytes) -> Any:
    """Worker side: the parent's user-module ``folders`` on the import path (``resolve_user_modules_from``), then
    ``fn`` of the job read back."""
    resolve_user_modules_from(folders)
    return fn(pickle.loads(job))


def submitted(submit: Callable[..., Any], fn: Callable[[Any], Any], items: list) -> tuple[dict, list]:
    """``submit(run_shipped, *shipped(fn, item))`` for every item: ({future: item}, [(item, exception)] for the
    items that could not be shipped)."""
    futures, unshipped = {}, []
    for item in items:
        try:
            args = shipped(fn, item)
        except Exception as err:  # e.g. a user family whose pickling fails: that job's outcome, not the run's end
            unshipped.append((item, err))
            continue
        futures[submit(run_shipped, *args)] = item
    return futures, unshipped


def pool_worker_init() -> None:
    """Pool worker initializer: Ctrl-C (SIGINT, sent to the whole process group) is the parent's to handle -- ignored
    here, then unblocked (the worker started with it blocked: ``sigint_blocked``) -- and tqdm bars in the worker lock
    with a thread lock, not tqdm's default cross-process semaphore (a worker terminated on Ctrl-C would leave that
    semaphore registered, and Python warns about it at exit)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    tqdm.set_lock(threading.RLock())


def pool_outcomes(fn: Callable[[Any], Any], items: list, workers: int) -> Iterator[tuple[Any, Any]]:
    """Local ``spawn`` process pool of ``workers`` single-threaded processes; outcomes as they finish.

    Workers ignore SIGINT; when the parent stops early (Ctrl-C, or its consumer stops reading) the jobs in
    flight are abandoned: the worker processes are terminated rather than waited for."""
    with single_thread_env(), holding_interrupts():  # the workers are stopped on an interrupt (accum.interrupts)
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=pool_worker_init)
        try:
            with sigint_blocked():  # the workers are started by these submits
                futures, unshipped = submitted(pool.submit, fn, items)
            yield from unshipped
            for future in as_completed(futures):
                yield futures[future], future.exception() or future.result()
        except BaseException:
            processes = list((pool._processes or {}).values())  # the executor has no public terminate
            for process in processes:
                process.terminate()
            for process in processes:
                process.join()
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


def check_workers(value: Any, option: str) -> int:
    """A local process count: an integer in [1, ``MAX_WORKERS``]; ``ParamError`` names ``option``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WORKERS:
        raise ParamError(f"{option}: expected an integer in [1, {MAX_WORKERS}], got {value!r}")
    return value


def check_scheduler(address: Any, option: str) -> str:
    """A Dask scheduler address ``SCHEME://HOST:PORT`` (scheme tcp or tls, IPv6 hosts in brackets, port in
    [1, 65535]); checked before anything connects.  ``ParamError`` names ``option``."""
    match = SCHEDULER_ADDRESS.fullmatch(address) if isinstance(address, str) else None
    if match is None:
        raise ParamError(f"{option} {address!r}: expected SCHEME://HOST:PORT, e.g. tcp://127.0.0.1:8786")
    if match["scheme"] not in SCHEDULER_SCHEMES:
        raise ParamError(f"{option} {address!r}: unknown scheme {match['scheme']!r}; "
                         f"known: {', '.join(SCHEDULER_SCHEMES)}")
    if not 1 <= int(match["port"]) <= 65535:
        raise ParamError(f"{option} {address!r}: port {match['port']} is out of range; allowed: [1, 65535]")
    return address


def connect(address: str):
    """A ``distributed.Client`` of the scheduler at ``address``; ``ParamError`` if it cannot be reached
    (within Dask's ``distributed.comm.timeouts.connect``)."""
    from distributed import Client

    try:
        return Client(address, set_as_default=False)
    except OSError as err:  # refused, unreachable or timed out (TimeoutError is an OSError)
        raise ParamError(f"--scheduler {address}: cannot connect ({err})") from None


def dask_outcomes(fn: Callable[[Any], Any], items: list, client) -> Iterator[tuple[Any, Any]]:
    """``fn`` over ``items`` on a connected Dask distributed ``client``; outcomes as they finish.

    Nanny-started Dask workers already run with OMP/MKL/OpenBLAS threads = 1
    (``distributed.nanny.pre-spawn-environ``).  Records travel back over Dask's own (pickle) protocol, i.e.
    from workers of a cluster you control; files on disk are JSON only.
    """
    from distributed import as_completed as dask_as_completed

    futures, unshipped = submitted(functools.partial(client.submit, pure=False), fn, items)
    yield from unshipped
    for future in dask_as_completed(futures, loop=client.loop):
        yield futures[future], future.result() if future.status == "finished" else future.exception()
        future.release()


def map_outcomes(fn: Callable[[Any], Any], items: list, workers: int, client) -> Iterator[tuple[Any, Any]]:
    """The one job runner: (item, fn(item) or its exception) for every item, as they finish -- on Dask if
    ``client``, on a process pool if workers > 1 and there is more than one item, else in this process.
    ``fn`` must be a module-level function (it is pickled for the pool and Dask)."""
    if client is not None:
        return dask_outcomes(fn, items, client)
    if workers > 1 and len(items) > 1:
        return pool_outcomes(fn, items, min(workers, len(items)))
    return serial_outcomes(fn, items)


