"""Grid sweeps: ``accum sweep GRID.toml`` runs every (family, parameters, options, replicate) job of a grid.

A grid file (TOML; the format is documented in ``simulations/SWEEP.md``) names one quantity, one or more
family tables whose list-valued entries are axes, estimator-option axes, a replicate count and a root seed.
The cartesian product of the axes, times the replicates, gives the jobs.

Guarantees:

* Every job is validated with ``measure.plan_measurement`` before any job runs (for a user family: its first
  sample and the memory of its step form too); a bad grid raises ``GridError`` naming the grid entry.
* Job j's result lives in ``OUTPUT/<hash_j>.json``, ``hash_j = sha256(canonical JSON of key_j)`` with
  ``key_j = {config, root_seed, replicate, seed, code}`` (``job_key``).  Files are written atomically by
  the process that drives the sweep, as each job finishes.
* A job is skipped when its file reads back as valid JSON (``read_record``) whose stored key hashes to the
  file name (``read_job_record``); anything else (missing, truncated, foreign) is recomputed.  Nothing is
  ever unpickled from disk.
* Seeds come from the root seed and the job's own config (``job_seed``), never from its position in a
  queue, so results do not depend on the executor or the number of workers.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import hashlib
import importlib
import itertools
import json
import math
import multiprocessing
import os
import re
import signal
import sys
import threading
import tomllib
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import scipy
from tqdm import tqdm

from .families import family_name, family_params
from .measure import QUANTITIES, measure, plan_measurement
from .params import ParamError
from .results import (ResultError, atomic_write_json, check_output_path, jsonable, make_output_dir, package_version,
                      prove_writable_dirs, read_record)

INDEX_SCHEMA = "accum.sweep-index/1"
GRID_KEYS = ("quantity", "family", "options", "seeds", "root_seed", "output")
REQUIRED_KEYS = ("quantity", "family", "seeds", "root_seed", "output")
MAX_REPLICATES = 100_000   # replicates per config (``seeds``)
MAX_JOBS = 1_000_000       # jobs per grid, counted before any job is planned
MAX_WORKERS = 1024         # local processes (``--workers``)
SCHEDULER_SCHEMES = ("tcp", "tls")
SCHEDULER_ADDRESS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)"
                               r":(?P<port>[0-9]+)")
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
                    "NUMEXPR_NUM_THREADS")


class GridError(ParamError):
    """A grid file is unreadable or names an invalid job; the message names the grid entry."""


@dataclass(frozen=True)
class FamilyAxes:
    """One ``[[family]]`` table: the family name and its parameter axes (name -> values, file order)."""

    name: str
    axes: dict[str, tuple]


@dataclass(frozen=True)
class Grid:
    """A parsed grid file.  ``replicates`` are replicate indices r (``seeds = 3`` gives (0, 1, 2))."""

    source: str
    quantity: str
    families: tuple[FamilyAxes, ...]
    options: dict[str, tuple]
    replicates: tuple[int, ...]
    root_seed: int
    output: Path


@dataclass(frozen=True)
class Job:
    """One measurement of a sweep.

    ``where`` names the grid entry in messages; ``params`` are the family parameters as written in the grid
    (what ``measure`` is called with), ``options`` the resolved estimator options; ``modules`` the
    modules whose sources are fingerprinted (``job_modules``); ``key`` is the hashed identity (``job_key``)
    and ``hash`` its sha256, also the result file's stem.
    """

    where: str
    quantity: str
    family: str
    params: dict[str, Any]
    options: dict[str, Any]
    replicate: int
    modules: tuple[str, ...]
    key: dict[str, Any]
    hash: str

    @property
    def seed(self) -> int:
        return self.key["seed"]


@dataclass(frozen=True)
class Summary:
    """What a sweep did: ``skipped`` jobs were already finished, ``computed`` ran now, ``failed`` lists
    (where, error) for jobs that raised (their files are not written; rerunning retries them)."""

    jobs: int
    skipped: int
    computed: int
    failed: tuple[tuple[str, str], ...]
    output: Path

    def to_dict(self) -> dict[str, Any]:
        return {"jobs": self.jobs, "skipped": self.skipped, "computed": self.computed,
                "failed": len(self.failed), "output": str(self.output)}


# ---------------------------------------------------------------------------------------------- grid files

def load_grid(path: str | os.PathLike) -> Grid:
    """Read and check a grid file; relative ``output`` paths are taken from the grid file's directory."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise GridError(f"{path}: no such grid file") from None
    except IsADirectoryError:
        raise GridError(f"{path}: is a directory; give a grid file") from None
    except OSError as err:
        raise GridError(f"{path}: cannot read the grid file ({err.strerror or err})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise GridError(f"{path}: not a valid TOML file ({err})") from None
    return parse_grid(data, str(path), path.parent)


def parse_grid(data: dict[str, Any], source: str, base: Path) -> Grid:
    """Check the top-level keys of a grid document and parse each; errors name ``source`` and the key."""
    unknown = [k for k in data if k not in GRID_KEYS]
    if unknown:
        raise GridError(f"{source}: unknown key {unknown[0]!r}; known: {', '.join(GRID_KEYS)}")
    missing = [k for k in REQUIRED_KEYS if k not in data]
    if missing:
        raise GridError(f"{source}: missing key {missing[0]!r}; required: {', '.join(REQUIRED_KEYS)}")
    quantity = data["quantity"]
    if not isinstance(quantity, str) or quantity not in QUANTITIES:
        raise GridError(f"{source}: quantity: expected one of {', '.join(QUANTITIES)}, got {quantity!r}")
    output = data["output"]
    if not isinstance(output, str) or not output.strip():
        raise GridError(f"{source}: output: expected a directory path, got {output!r}")
    families = parse_families(data["family"], source)
    options = parse_axes(data.get("options", {}), "options", source)
    replicates = parse_replicates(data["seeds"], source)
    jobs = job_count(families, options, replicates)
    if jobs > MAX_JOBS:
        raise GridError(f"{source}: the grid has {jobs} jobs; at most {MAX_JOBS} are allowed (split it into "
                        "several grids)")
    return Grid(source, quantity, families, options, replicates, parse_root_seed(data["root_seed"], source),
                base / output)


def job_count(families: tuple[FamilyAxes, ...], options: dict[str, tuple], replicates: tuple[int, ...]) -> int:
    """Number of jobs, without expanding them: (sum_f prod_a |axis_a of f|) * prod_o |option axis o| * |replicates|."""
    points = sum(math.prod(len(v) for v in fam.axes.values()) for fam in families)
    return points * math.prod(len(v) for v in options.values()) * len(replicates)


def parse_families(value: Any, source: str) -> tuple[FamilyAxes, ...]:
    """``family = "name"``, one ``[family]`` table or several ``[[family]]`` tables, each with a ``name``."""
    tables = [{"name": value}] if isinstance(value, str) else [value] if isinstance(value, dict) else value
    if not isinstance(tables, list) or not tables:
        raise GridError(f"{source}: family: expected a family name or [[family]] tables with a name")
    families = []
    for i, table in enumerate(tables):
        where = f"family[{i}]"
        if not isinstance(table, dict) or not isinstance(table.get("name"), str) or not table["name"]:
            raise GridError(f"{source}: {where}: expected a table with a family name, e.g. name = \"householder\"")
        axes = {k: v for k, v in table.items() if k != "name"}
        families.append(FamilyAxes(table["name"], parse_axes(axes, where, source)))
    return tuple(families)


def parse_axes(table: Any, where: str, source: str) -> dict[str, tuple]:
    """Table of parameters -> axes: a list is an axis, a scalar a one-point axis.

    Values must be numbers or strings (booleans are refused: use 0/1); an empty list or a repeated value is
    an error naming ``where.key``.
    """
    if not isinstance(table, dict):
        raise GridError(f"{source}: {where}: expected a table of parameters")
    axes = {}
    for name, value in table.items():
        entry = f"{where}.{name}"
        values = tuple(value) if isinstance(value, list) else (value,)
        if not values:
            raise GridError(f"{source}: {entry}: empty axis (give at least one value)")
        for v in values:
            if isinstance(v, bool) or not isinstance(v, (int, float, str)):
                raise GridError(f"{source}: {entry}: {v!r} is not a number or a string")
        if len(set(values)) < len(values):
            raise GridError(f"{source}: {entry}: repeated value in {list(values)!r}")
        axes[name] = values
    return axes


def parse_replicates(value: Any, source: str) -> tuple[int, ...]:
    """``seeds = n`` -> replicates 0..n-1; ``seeds = [r, ...]`` -> those replicate indices (distinct, >= 0).

    At most ``MAX_REPLICATES`` replicates either way.
    """
    expected = (f"{source}: seeds: expected a count in [1, {MAX_REPLICATES}] or a non-empty list of distinct "
                "integers >= 0")
    if isinstance(value, int) and not isinstance(value, bool):
        if not 1 <= value <= MAX_REPLICATES:
            raise GridError(f"{expected}, got {value}")
        return tuple(range(value))
    if isinstance(value, list) and len(value) > MAX_REPLICATES:
        raise GridError(f"{source}: seeds: expected at most {MAX_REPLICATES} replicate indices, "
                        f"got a list of {len(value)}")
    ok = isinstance(value, list) and value and all(isinstance(r, int) and not isinstance(r, bool) and r >= 0
                                                   for r in value)
    if not ok or len(set(value)) < len(value):
        raise GridError(f"{expected}, got {value!r}")
    return tuple(value)


def parse_root_seed(value: Any, source: str) -> int:
    """``root_seed``: an integer >= 0 (TOML integers are < 2^63)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise GridError(f"{source}: root_seed: expected an integer >= 0, got {value!r}")
    return value


# ------------------------------------------------------------------------------------------- job identity

def canonical_json(obj: Any) -> str:
    """Sorted keys, no whitespace, strict JSON (numpy values converted by ``jsonable``)."""
    return json.dumps(jsonable(obj), sort_keys=True, separators=(",", ":"), allow_nan=False)


def digest(obj: Any) -> str:
    """sha256 hex digest of ``canonical_json(obj)``."""
    return hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()


def config_words(config: dict[str, Any]) -> tuple[int, ...]:
    """The 256-bit ``digest(config)`` as 8 unsigned 32-bit words (big-endian), a SeedSequence spawn key."""
    raw = bytes.fromhex(digest(config))
    return tuple(int.from_bytes(raw[i:i + 4], "big") for i in range(0, len(raw), 4))


def job_seed(root_seed: int, config: dict[str, Any], replicate: int) -> int:
    """The integer seed passed to ``measure`` for replicate r of a config.

    ss = SeedSequence(root_seed, spawn_key=config_words(config) + (r,)), which is exactly the r-th child of
    ``SeedSequence(root_seed, spawn_key=config_words(config)).spawn(r + 1)``;  w = ss.generate_state(4,
    uint32);  seed = sum_i w_i 2^(32 i)  (128 bits).  It depends on nothing but the root seed, the config
    and r: not on the grid's other entries, the job order, the executor or the code version.
    """
    ss = np.random.SeedSequence(root_seed, spawn_key=config_words(config) + (replicate,))
    return sum(int(w) << (32 * i) for i, w in enumerate(ss.generate_state(4, np.uint32)))


def measure_modules() -> tuple[str, ...]:
    """``accum.simulations.measure`` and every module of this package it imports, transitively.

    Found by parsing relative imports (``ast``) from ``measure.py``: these are the sources a measurement's
    numbers can depend on; editing any other module (the CLI, this sweep driver) leaves results valid.
    """
    here = Path(__file__).resolve().parent
    seen: set[str] = set()
    todo = ["measure"]
    while todo:
        name = todo.pop()
        if name in seen or not (here / f"{name}.py").is_file():
            continue
        seen.add(name)
        for node in ast.walk(ast.parse((here / f"{name}.py").read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                todo += [node.module.split(".")[0]] if node.module else [a.name for a in node.names]
    return tuple(f"{__package__}.{name}" for name in sorted(seen))


def job_modules(package_modules: tuple[str, ...], family: str) -> tuple[str, ...]:
    """The modules a job depends on: the package's (``measure_modules()``), plus the module of a
    ``module:Class`` family (that file only, not what it imports)."""
    return package_modules + ((family.partition(":")[0],) if ":" in family else ())


def code_identity(modules: tuple[str, ...]) -> dict[str, str]:
    """The code version a result depends on, as seen by this process.

    {"accum": package version, "numpy": ..., "scipy": ..., "sources": digest of {module name: sha256 of
    its file}} over ``modules`` (imported here if need be, so a worker checks its own installation).
    """
    sources = {}
    for name in modules:
        path = getattr(importlib.import_module(name), "__file__", None)
        if not path:
            raise ParamError(f"module {name!r} has no source file to fingerprint")
        sources[name] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return {"accum": package_version(), "numpy": np.__version__, "scipy": scipy.__version__,
            "sources": digest(sources)}


def job_key(config: dict[str, Any], root_seed: int, replicate: int, code: dict[str, str]) -> dict[str, Any]:
    """Everything a result depends on; its ``digest`` names the result file."""
    return jsonable({"config": config, "root_seed": root_seed, "replicate": replicate,
                     "seed": job_seed(root_seed, config, replicate), "code": code})


def _points(axes: dict[str, tuple]) -> Iterator[dict[str, Any]]:
    """Cartesian product of the axes, the last axis varying fastest."""
    for combo in itertools.product(*axes.values()):
        yield dict(zip(axes, combo))


def _describe(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in values.items()) or "defaults"


def plan(grid: Grid) -> list[Job]:
    """Every job of the grid in canonical order (family tables, their params, options, replicates).

    Each (family, params, options) point is validated with ``plan_measurement`` first; the first invalid one
    raises ``GridError`` naming it, before anything runs.  Two points resolving to the same job are an error.
    """
    points = []
    for i, fam in enumerate(grid.families):
        for params in _points(fam.axes):
            for options in _points(grid.options):
                where = f"family[{i}] {fam.name} ({_describe(params)}), options ({_describe(options)})"
                try:
                    planned = plan_measurement(grid.quantity, fam.name, params, options)
                    family, opts = planned.family, planned.options
                except (ValueError, TypeError) as err:
                    raise GridError(f"{grid.source}: {where}: {err}") from None
                # Given values first: a user family without dataclass fields keeps its given parameters.
                config = {"quantity": grid.quantity, "family": family_name(family),
                          "params": {**params, **family_params(family)}, "options": opts}
                points.append((where, fam.name, params, opts, config))
    package = measure_modules()
    modules = {fam.name: job_modules(package, fam.name) for fam in grid.families}
    codes = {name: code_identity(mods) for name, mods in modules.items()}
    jobs: list[Job] = []
    seen: dict[str, str] = {}
    for where, name, params, opts, config in points:
        for r in grid.replicates:
            key = job_key(config, grid.root_seed, r, codes[name])
            job = Job(f"{where}, replicate {r}", grid.quantity, name, params, opts, r, modules[name], key,
                      digest(key))
            if job.hash in seen:
                raise GridError(f"{grid.source}: {job.where} and {seen[job.hash]} are the same job")
            seen[job.hash] = job.where
            jobs.append(job)
    return jobs


# ----------------------------------------------------------------------------------------------- results

def result_path(output: Path, job: Job) -> Path:
    return Path(output) / f"{job.hash}.json"


def read_job_record(path: str | os.PathLike, expected_hash: str) -> dict:
    """Load a job's result file; ``ResultError`` unless it is a complete accum record whose stored key hashes
    to ``expected_hash`` and whose seed is the key's seed.  JSON only: nothing is unpickled."""
    record = read_record(path)
    stamp = record.get("sweep")
    ok = (isinstance(stamp, dict) and stamp.get("hash") == expected_hash and isinstance(stamp.get("key"), dict)
          and digest(stamp["key"]) == expected_hash and record.get("seed") == stamp["key"].get("seed")
          and isinstance(record["result"], dict))
    if not ok:
        raise ResultError(f"{path}: not the result of sweep job {expected_hash}")
    return record


def is_finished(output: Path, job: Job) -> bool:
    try:
        read_job_record(result_path(output, job), job.hash)
    except ResultError:
        return False
    return True


def load_results(grid: Grid) -> dict[str, dict]:
    """Finished, valid results of a grid under the current code: {job hash: record}.  Missing, corrupt or
    stale files are left out (rerun the sweep to fill them in)."""
    results = {}
    for job in plan(grid):
        with contextlib.suppress(ResultError):
            results[job.hash] = read_job_record(result_path(grid.output, job), job.hash)
    return results


def index_document(grid: Grid, jobs: list[Job], status: dict[str, str]) -> dict[str, Any]:
    """``index.json``: one entry per job (hash, file, status, grid entry, config, replicate, seed)."""
    return {"schema": INDEX_SCHEMA, "grid": grid.source, "quantity": grid.quantity, "root_seed": grid.root_seed,
            "jobs": [{"hash": j.hash, "file": result_path(grid.output, j).name, "status": status[j.hash],
                      "where": j.where, "config": j.key["config"], "replicate": j.replicate, "seed": j.seed}
                     for j in jobs]}


# ---------------------------------------------------------------------------------------------- executors

def run_job(job: Job) -> dict:
    """Run one job (on whatever process or machine) and return its record, stamped with the job key.

    Refuses to run if this process's ``code_identity`` differs from the one the job was keyed with (a Dask
    worker with another accum installed, or sources edited mid-sweep).
    """
    here = code_identity(job.modules)
    if here != job.key["code"]:
        raise RuntimeError(f"code here {here} differs from the sweep's {job.key['code']}; "
                           "run every worker on the same accum, numpy and scipy")
    record = measure(job.quantity, job.family, job.params, job.options, seed=job.seed)
    record["sweep"] = {"hash": job.hash, "key": job.key}
    return record


@contextlib.contextmanager
def single_thread_env() -> Iterator[None]:
    """Set each variable of ``THREAD_VARIABLES`` not already set to "1" while the block runs, then remove it.

    Pool workers are started with ``spawn`` and copy this environment, so OpenBLAS/MKL/OpenMP read 1 thread
    when numpy loads in them (setting it in a worker initializer would be too late: numpy is imported while
    the worker unpickles its first task).  A value the user set is left alone.
    """
    added = [name for name in THREAD_VARIABLES if name not in os.environ]
    os.environ.update(dict.fromkeys(added, "1"))
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)


def serial_outcomes(fn: Callable[[Any], Any], items: list) -> Iterator[tuple[Any, Any]]:
    """In-process: (item, fn(item) or the exception it raised), in order."""
    for item in items:
        try:
            outcome = fn(item)
        except Exception as err:  # a failing job is reported and retried on the next run, not fatal
            outcome = err
        yield item, outcome


def pool_worker_init() -> None:
    """Pool worker initializer: Ctrl-C (SIGINT, sent to the whole process group) is the parent's to handle, and
    tqdm bars in the worker lock with a thread lock, not tqdm's default cross-process semaphore (a worker
    terminated on Ctrl-C would leave that semaphore registered, and Python warns about it at exit)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    tqdm.set_lock(threading.RLock())


def pool_outcomes(fn: Callable[[Any], Any], items: list, workers: int) -> Iterator[tuple[Any, Any]]:
    """Local ``spawn`` process pool of ``workers`` single-threaded processes; outcomes as they finish.

    Workers ignore SIGINT; when the parent stops early (Ctrl-C, or its consumer stops reading) the jobs in
    flight are abandoned: the worker processes are terminated rather than waited for."""
    with single_thread_env():
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=pool_worker_init)
        try:
            futures = {pool.submit(fn, item): item for item in items}
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

    futures = {client.submit(fn, item, pure=False): item for item in items}
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


def outcomes(jobs: list[Job], workers: int, client) -> Iterator[tuple[Job, dict | Exception]]:
    """Measurement jobs through ``map_outcomes``: each outcome is the job's record or the exception it raised."""
    return map_outcomes(run_job, jobs, workers, client)


def run_sweep(grid: Grid, *, workers: int = 1, scheduler: str | None = None, progress: bool = False,
              output_option: str | None = None) -> Summary:
    """Run the grid's unfinished jobs, writing each result atomically as it arrives.

    Checked in this order before any job runs: ``workers``, the ``scheduler`` address, every job of the grid
    (``plan``), the connection to the scheduler, the output directory (created here; errors name it as
    ``output_option``, by default the grid's ``output`` key).  Interrupting (Ctrl-C,
    a crash, SIGKILL) loses only jobs in flight; ``index.json`` is rewritten at the end of every run that
    gets to clean up.  The progress bar (tqdm, stderr) counts finished jobs.
    """
    check_workers(workers, "workers")
    if scheduler is not None:
        check_scheduler(scheduler, "scheduler")
    jobs = plan(grid)
    with connect(scheduler) if scheduler is not None else contextlib.nullcontext() as client:
        make_output_dir(grid.output, output_option or f"output (in {grid.source})")
        status = {job.hash: "done" if is_finished(grid.output, job) else "pending" for job in jobs}
        todo = [job for job in jobs if status[job.hash] == "pending"]
        failed = []
        try:
            with tqdm(total=len(jobs), initial=len(jobs) - len(todo), unit="job", disable=None if progress else True) as bar:
                for job, outcome in outcomes(todo, workers, client):
                    if isinstance(outcome, Exception):
                        status[job.hash] = f"failed: {type(outcome).__name__}: {outcome}"
                        failed.append((job.where, f"{type(outcome).__name__}: {outcome}"))
                    else:
                        atomic_write_json(result_path(grid.output, job), outcome)
                        status[job.hash] = "done"
                    bar.update()
        finally:
            atomic_write_json(Path(grid.output) / "index.json", index_document(grid, jobs, status))
    computed = sum(1 for job in todo if status[job.hash] == "done")
    return Summary(len(jobs), len(jobs) - len(todo), computed, tuple(failed), Path(grid.output))


# ---------------------------------------------------------------------------------------------- command

def default_workers() -> int:
    """CPUs this process may use, at most ``MAX_WORKERS``."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return min(cpus, MAX_WORKERS)


def run_command(args: argparse.Namespace) -> int:
    """``accum sweep``: one JSON summary line on stdout, failures on stderr; exit 1 if any job failed.

    The options are checked before the grid is read, the output directory right after it; ``run_sweep``
    creates the directory once every job is validated (a bad grid leaves nothing behind).
    """
    if args.workers is not None:
        check_workers(args.workers, "--workers")
    if args.scheduler is not None:
        check_scheduler(args.scheduler, "--scheduler")
        if args.workers is not None:
            raise ParamError("give --workers (local processes) or --scheduler (Dask), not both")
    grid = load_grid(args.grid)
    output, option = (args.out, "--out") if args.out is not None else (grid.output, f"output (in {grid.source})")
    grid = replace(grid, output=check_output_path(output, option, directory=True))
    if args.dry_run:
        prove_writable_dirs({option: grid.output})  # what the run's make_output_dir would refuse; nothing is left
        jobs = plan(grid)
        done = sum(is_finished(grid.output, job) for job in jobs)
        print(json.dumps({"jobs": len(jobs), "done": done, "pending": len(jobs) - done, "output": str(grid.output)}))
        return 0
    workers = default_workers() if args.workers is None else args.workers
    summary = run_sweep(grid, workers=workers, scheduler=args.scheduler, progress=not args.no_progress,
                        output_option=option)
    for where, error in summary.failed:
        print(f"accum sweep: job failed: {where}: {error}", file=sys.stderr)
    print(json.dumps(summary.to_dict()))
    return 1 if summary.failed else 0
