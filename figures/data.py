"""Saved measurements for the figures: one JSON record per job, computed only when missing or invalid.

Job identity and execution are the sweep's (``simulations.sweep``), so a figure's data file is exactly the
file ``accum sweep`` would write for the same job:

* config = {quantity, family, params (given + the family's resolved fields), options (resolved)};
* seed = ``identity.job_seed(root_seed, config, 0)``: from the run's root seed and the job's own config, never
  from its position in a figure, so adding a curve leaves every other curve's numbers unchanged;
* file = ``RESULTS_DIR/<sha256 of {config, root_seed, replicate 0, seed, code version}>.json``, written
  atomically; a file is reused only if it reads back (``sweep.read_job_record``) as the record of that
  very job, so a truncated, corrupt, foreign or stale (other code version) file is recomputed.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple, Sequence

from accum.runtime import progress_bar
from accum.simulations import identity, sweep
from accum.simulations.families import drawn_classes, family_name, family_params
from accum.simulations.measure import resolve_job
from accum.simulations.results import ResultError, atomic_write_json

from .paths import DEFAULT_RESULTS
from .specs import CurveSpec


class Measured(NamedTuple):
    """A figure job and its saved record (``record["result"]`` holds the estimate)."""

    job: CurveSpec
    record: dict


class DataError(RuntimeError):
    """Some figure jobs failed; the others were saved and a rerun retries only the failed ones."""


def sweep_job(job: CurveSpec, root_seed: int, package: tuple[str, ...], codes: dict) -> sweep.Job:
    """The job as a ``simulations.sweep.Job`` (validated), keyed with the identity of its source units
    (``identity.job_modules`` of the ``package`` modules and its family), fingerprinted once per set in ``codes``."""
    _, family, options, _ = resolve_job(job.quantity, job.family, job.params, job.options)
    config = {"quantity": job.quantity, "family": family_name(family),
              "params": {**job.params, **family_params(family)}, "options": options}
    modules = identity.job_modules(package, job.family, drawn_classes(family))
    if modules not in codes:
        codes[modules] = identity.code_identity(modules)
    key = identity.job_key(config, root_seed, 0, codes[modules])
    return sweep.Job(f"{job.series} ({job.quantity}, {job.family})", job.quantity, job.family, job.params,
                     options, 0, modules, key, identity.digest(key))


def plan(jobs: Sequence[CurveSpec], root_seed: int) -> list[sweep.Job]:
    """Sweep jobs for ``jobs``, in order; the installed code's identity is fingerprinted once per set of source
    units (``identity.job_modules``: an angle law's class alone of its module, so editing one law recomputes only
    its curves)."""
    package, codes = identity.measure_modules(), {}
    return [sweep_job(job, root_seed, package, codes) for job in jobs]


def load(results_dir: Path, job: sweep.Job) -> dict | None:
    """The saved record of ``job`` under ``results_dir``, or None if missing or invalid."""
    try:
        return sweep.read_job_record(sweep.result_path(results_dir, job), job.hash)
    except ResultError:
        return None


def ensure(jobs: Sequence[CurveSpec], results_dir: str | Path = DEFAULT_RESULTS, root_seed: int = 0, *,
           workers: int = 1, progress: bool = True) -> list[Measured]:
    """Records of ``jobs`` in order, computing (with a tqdm bar on stderr) and saving only the missing ones.

    Each finished job is written as soon as it arrives, so an interrupted run keeps what it finished.
    Raises ``DataError`` naming the failed jobs after saving all the others.
    """
    results_dir = Path(results_dir)
    planned = plan(jobs, root_seed)
    records = {p.hash: load(results_dir, p) for p in planned}
    todo = list({p.hash: p for p in planned if records[p.hash] is None}.values())
    failed = []
    with progress_bar(len(todo), "accum figures: measurements", "job", progress and bool(todo)) as bar:
        for job, outcome in sweep.outcomes(todo, workers, None):
            if isinstance(outcome, Exception):
                failed.append(f"{job.where}: {type(outcome).__name__}: {outcome}")
            else:
                atomic_write_json(sweep.result_path(results_dir, job), outcome)
                records[job.hash] = outcome
            bar.update()
    if failed:
        shown = "; ".join(failed[:3]) + (f"; and {len(failed) - 3} more" if len(failed) > 3 else "")
        raise DataError(f"{len(failed)} of {len(todo)} figure jobs failed (rerun to retry them): {shown}")
    return [Measured(job, records[p.hash]) for job, p in zip(jobs, planned)]
