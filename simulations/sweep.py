"""Grid sweeps: ``accum sweep GRID.toml`` runs every (family, parameters, options, replicate) job of a grid.

The grid file is read by ``simulations.grid`` (format in ``simulations/SWEEP.md``); the cartesian product of
its axes, times the replicates, gives the jobs (``plan``).  They run on ``simulations.runner.map_outcomes``,
and each job's identity and seed are ``simulations.identity``'s.

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
import contextlib
import itertools
import json
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator

from accum.runtime import progress_bar

from .families import drawn_classes, family_name, family_params
from .grid import Grid, GridError, load_grid
from .identity import code_identity, digest, job_key, job_modules, measure_modules
from .measure import measure, plan_measurement
from .params import ParamError
from .results import ResultError, atomic_write_json, check_output_path, make_output_dir, prove_writable_dirs, read_record
from .runner import DEFAULT_WORKERS, check_scheduler, check_workers, connect, map_outcomes

INDEX_SCHEMA = "accum.sweep-index/1"


@dataclass(frozen=True)
class Job:
    """One measurement of a sweep.

    ``where`` names the grid entry in messages; ``params`` are the family parameters as written in the grid
    (what ``measure`` is called with), ``options`` the resolved estimator options; ``modules`` the
    source units that are fingerprinted (``job_modules``: modules, and an angle law's class alone); ``key`` is the hashed identity (``job_key``)
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
                points.append((where, fam.name, params, opts, config, drawn_classes(family)))
    package = measure_modules()
    codes: dict[tuple[str, ...], dict] = {}
    jobs: list[Job] = []
    seen: dict[str, str] = {}
    for where, name, params, opts, config, classes in points:
        modules = job_modules(package, name, classes)
        if modules not in codes:  # fingerprinted once per set of source units
            codes[modules] = code_identity(modules)
        for r in grid.replicates:
            key = job_key(config, grid.root_seed, r, codes[modules])
            job = Job(f"{where}, replicate {r}", grid.quantity, name, params, opts, r, modules, key,
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


def check_result_slots(output: Path, jobs: list[Job], option: str) -> None:
    """Before any job runs: ``ParamError`` naming ``option`` when something other than a regular file (a folder, a
    device, a dangling link) stands where index.json or a job's result file will be written -- the write, an
    ``os.replace`` after the job has computed, would fail."""
    for path in (Path(output) / "index.json", *(result_path(output, job) for job in jobs)):
        if os.path.lexists(path) and not path.is_file():
            what = "a folder" if path.is_dir() else "not a regular file"
            raise ParamError(f"{option} {output}: {path.name} is {what}, where the sweep writes "
                             f"{'its index' if path.name == 'index.json' else 'a job result'}; move it away")


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


# ---------------------------------------------------------------------------------------------- running

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


def outcomes(jobs: list[Job], workers: int, client) -> Iterator[tuple[Job, dict | Exception]]:
    """Measurement jobs through ``map_outcomes``: each outcome is the job's record or the exception it raised."""
    return map_outcomes(run_job, jobs, workers, client)


def run_sweep(grid: Grid, *, workers: int = 1, scheduler: str | None = None, progress: bool = False,
              output_option: str | None = None) -> Summary:
    """Run the grid's unfinished jobs, writing each result atomically as it arrives.

    Checked in this order before any job runs: ``workers``, the ``scheduler`` address, every job of the grid
    (``plan``), the connection to the scheduler, the output directory (created here; errors name it as
    ``output_option``, by default the grid's ``output`` key) and the files it will write (``check_result_slots``).  Interrupting (Ctrl-C,
    a crash, SIGKILL) loses only jobs in flight; ``index.json`` is rewritten at the end of every run that
    gets to clean up.  The progress bar (tqdm, stderr) counts finished jobs.
    """
    check_workers(workers, "workers")
    if scheduler is not None:
        check_scheduler(scheduler, "scheduler")
    jobs = plan(grid)
    with connect(scheduler) if scheduler is not None else contextlib.nullcontext() as client:
        option = output_option or f"output (in {grid.source})"
        make_output_dir(grid.output, option)
        check_result_slots(grid.output, jobs, option)
        status = {job.hash: "done" if is_finished(grid.output, job) else "pending" for job in jobs}
        todo = [job for job in jobs if status[job.hash] == "pending"]
        failed = []
        try:
            with progress_bar(len(jobs), "accum sweep", "job", progress, initial=len(jobs) - len(todo)) as bar:
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
        check_result_slots(grid.output, jobs, option)
        done = sum(is_finished(grid.output, job) for job in jobs)
        print(json.dumps({"jobs": len(jobs), "done": done, "pending": len(jobs) - done, "output": str(grid.output)}))
        return 0
    workers = DEFAULT_WORKERS if args.workers is None else args.workers
    summary = run_sweep(grid, workers=workers, scheduler=args.scheduler, progress=not args.no_progress,
                        output_option=option)
    for where, error in summary.failed:
        print(f"accum sweep: job failed: {where}: {error}", file=sys.stderr)
    print(json.dumps(summary.to_dict()))
    return 1 if summary.failed else 0
