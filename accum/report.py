"""Running and judging a report of ``accum verify``: ``run_plan`` runs a plan's checks on the job runner
(``simulations.runner.map_outcomes``: this process, a pool or Dask), each on its own stream, optionally
cached; ``report`` judges every row at its share of the false-failure budget (``accum.verdict``) and gives
the verdicts per claim (``verdict.report_verdict``): the report as a dict, the ``result`` of ``accum verify --json``.
"""

from __future__ import annotations

import pkgutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from accum.runtime import progress_bar
from accum.simulations.identity import code_identity, digest, import_closure
from accum.simulations.params import ParamError
from accum.simulations.results import ResultError, atomic_write_json, jsonable, make_record, read_record
from accum.simulations.runner import map_outcomes

from .report_plan import CLAIMS, PRESETS, Check, evidence_rows, plan
from .verdict import Measurement, judge_all, report_verdict


def run_job(item: tuple[int, Check, int]) -> tuple[list[Measurement], float]:
    """Check ``item = (position, job, seed)`` at the report's seed: its measurements and its seconds
    (module-level, so a pool can pickle it)."""
    _, job, seed = item
    start = time.perf_counter()
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # a non-finite row is refused as one line
        got = job.run(seed)                                              # (``accum.verify``), not 22 warnings
    return got, time.perf_counter() - start


def verify_modules() -> tuple[str, ...]:
    """The modules a check's numbers depend on: the plan's ``Check`` (``accum.report_plan``: its stream) and every
    module of this package it imports, transitively (``identity.import_closure``: the checks, ``accum.verdict``'s
    ``stderr_ratio`` among them), and every module of the engine and the theory (their sources fingerprint a cached
    check, ``simulations.identity.code_identity``)."""
    import accum.simulations
    import accum.theory

    names = [f"{pkg.__name__}.{m.name}" for pkg in (accum.simulations, accum.theory)
             for m in pkgutil.iter_modules(pkg.__path__)]
    return (*import_closure("accum", "report_plan"), *sorted(names))


def load_keyed(cache: Path, key: dict) -> dict | None:
    """The ``result`` of the record saved under ``key`` in ``cache`` (``save_keyed``); None when missing,
    corrupt or of another key."""
    try:
        record = read_record(cache / f"{digest(key)}.json")
    except ResultError:
        return None
    return record["result"] if record["config"] == jsonable(key) else None


def save_keyed(cache: Path, kind: str, key: dict, result: dict, seed: int, timings: dict) -> None:
    """``result`` saved atomically in ``cache`` as ``<sha256 of key>.json``, a record whose config is ``key``."""
    atomic_write_json(cache / f"{digest(key)}.json", make_record(kind, key, result, seed, timings))


ARRAY_FIELDS = ("measured", "stderr", "predicted", "pred_stderr")


def cache_key(job: Check, seed: int, code: dict) -> dict:
    return {"identity": job.identity, "seed": seed, "code": code}


def load_cached(cache: Path, key: dict) -> list[Measurement] | None:
    """A finished check's measurements from ``cache`` (None when missing, corrupt or of another key)."""
    result = load_keyed(cache, key)
    if result is None:
        return None
    return [Measurement(**{**m, **{f: np.asarray(m[f], float) for f in ARRAY_FIELDS}}) for m in result["measurements"]]


def run_plan(jobs: Sequence[Check], seed: int, progress: bool, workers: int = 1, client: Any = None,
             cache: Path | None = None) -> tuple[list[Measurement], dict]:
    """Every job's measurements in plan order (each on its own hashed stream, so the executor -- this process,
    a local pool of ``workers`` or a Dask ``client`` -- does not change them) and seconds per job.

    With ``cache`` (a directory) each finished check is saved as ``<sha256 of its key>.json``, the key being its
    identity, the seed and the code version (``verify_modules``), and a re-run reuses it.  Raises RuntimeError
    when a job fails or returns other row kinds than it declares: the thresholds were set for the declared rows.
    """
    code = code_identity(verify_modules()) if cache is not None else {}
    results: dict[int, list[Measurement]] = {}
    timings = {}
    if cache is not None:
        for i, job in enumerate(jobs):
            found = load_cached(cache, cache_key(job, seed, code))
            if found is not None and tuple(m.kind for m in found) == job.kinds():
                results[i], timings[job.label] = found, 0.0
    items = [(i, job, seed) for i, job in enumerate(jobs) if i not in results]
    with progress_bar(len(jobs), "accum verify", "check", progress, initial=len(results)) as bar:
        for item, outcome in map_outcomes(run_job, items, workers, client):
            position, job, _ = item
            if isinstance(outcome, ParamError):  # bad input found by the check (a user family's failure): one line
                raise outcome
            if isinstance(outcome, Exception):
                raise RuntimeError(f"accum verify: check {job.label!r} failed: {type(outcome).__name__}: {outcome}") from outcome
            got, seconds = outcome
            if tuple(m.kind for m in got) != job.kinds():
                raise RuntimeError(f"accum verify: check {job.label!r} returned rows {[m.kind for m in got]}, "
                                   f"declared {list(job.kinds())}")
            results[position] = got
            timings[job.label] = seconds
            if cache is not None:
                save_keyed(cache, "verify-check", cache_key(job, seed, code),
                           {"measurements": [asdict(m) for m in got]}, seed, {"seconds": seconds})
            bar.update()
    return [m for i in range(len(jobs)) for m in results[i]], timings


def report(jobs: Sequence[Check], claims: Sequence[str], preset: str, seed: int, budget: float,
           progress: bool = True, workers: int = 1, client: Any = None, cache: Path | None = None,
           n_evidence: int | None = None) -> dict:
    """Run ``jobs`` (``run_plan``) and judge them; the whole report as a dict (the JSON contract's ``result``).

    Each evidence row gets budget / R, R = ``n_evidence`` (default: the evidence rows of ``jobs``; a part of a plan
    passes the whole plan's R, so its rows are judged exactly as in the whole report)."""
    n_evidence = evidence_rows(jobs) if n_evidence is None else n_evidence
    measurements, timings = run_plan(jobs, seed, progress, workers, client, cache)
    rows = judge_all(measurements, budget, n_evidence)
    verdicts, sanity_ok, passed = report_verdict(rows, claims)
    return {"preset": preset, "seed": seed, "budget": budget, "evidence_rows": n_evidence,
            "rows": [asdict(r) for r in rows], "claims": verdicts, "sanity_passed": sanity_ok,
            "passed": passed, "timings": timings}


def run_report(preset_name: str, seed: int, budget: float, progress: bool = True, workers: int = 1,
               client: Any = None, cache: Path | None = None) -> dict:
    """The default report at ``seed``."""
    return {**report(plan(PRESETS[preset_name]), list(CLAIMS), preset_name, seed, budget, progress, workers, client,
                     cache),
            "config": asdict(PRESETS[preset_name])}
