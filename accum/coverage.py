"""Route coverage as a contract: every route of the engine and the theory has a row in the report that can fail.

The routes are read from the engine itself, so a new law, family or step form is a new route at once:

* ``family:NAME`` for every built-in family (``simulations.families.FAMILIES``);
* ``law:NAME`` for every angle law (``simulations.laws.LAWS``);
* ``form:NAME`` for every step form (the subclasses of ``simulations.steps.StepShape``) and ``op:FORM.OPERATION``
  for each of its operations in ``OPERATIONS`` (transport, transposed, bilinear, all-pairs scores, the sample
  second-moment operator, the value recurrence);
* ``theory:closed`` and ``theory:moments``: the closed forms and the moment-operator estimate (``theory.estimated``);
* ``se:ESTIMATOR``: the reported standard errors of each estimator, through its streaming paths.

A check declares the routes it runs (``claims.CheckSpec.routes`` and ``claims.family_routes``; tests run each
check once with the step forms' operations recorded, so a declaration cannot claim a route the check does not
take).  A route is covered by a check with at least one evidence row; a deterministic family (rope, nope), which
has no statistics, by an exact row.
"""

from __future__ import annotations

from typing import Sequence

from accum.simulations.families import FAMILIES
from accum.simulations.laws import LAWS
from accum.simulations.steps import StepShape

from .claims import CHECKS, deterministic, family_routes
from .report_plan import Check
from .stderrs import RUNS
from .verdict import EVIDENCE

#: the operations of a step form that a route names (``op:FORM.OPERATION``)
OPERATIONS = ("transport", "transposed", "bilinear", "scores", "pair-operator", "values")


def step_forms() -> list[type]:
    """Every concrete step form: the subclasses of ``StepShape``, recursively."""
    found, todo = [], list(StepShape.__subclasses__())
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return found


def engine_routes() -> set[str]:
    """Every route of the engine and the theory (module docstring)."""
    forms = {cls.form_name for cls in step_forms()}
    return ({f"family:{name}" for name in FAMILIES} | {f"law:{name}" for name in LAWS} | {f"form:{f}" for f in forms}
            | {f"op:{f}.{op}" for f in forms for op in OPERATIONS} | {"theory:closed", "theory:moments"}
            | {f"se:{name}" for name in RUNS})


def job_routes(job: Check) -> set[str]:
    """The routes one job of a plan runs: its family's and its check's."""
    return family_routes(job.family) | CHECKS[job.check].routes(job.family, **job.kwargs)


def covered_by(job: Check) -> set[str]:
    """The routes the job's rows stand for: all its routes when it has an evidence row; a deterministic family's
    ``family:`` route when it has an exact row (rope, nope: no statistics to hold); none otherwise (sanity rows)."""
    kinds = job.kinds()
    if any(k in EVIDENCE for k in kinds):
        return job_routes(job)
    if deterministic(job.family) and "exact" in kinds:
        return {r for r in family_routes(job.family) if r.startswith("family:")}
    return set()


def coverage(jobs: Sequence[Check]) -> dict[str, list[str]]:
    """Route -> the labels of the jobs that cover it (``covered_by``), for every route of the engine."""
    out: dict[str, list[str]] = {route: [] for route in engine_routes()}
    for job in jobs:
        for route in covered_by(job) & out.keys():
            out[route].append(job.label)
    return out


def uncovered(jobs: Sequence[Check]) -> list[str]:
    """The engine's routes that no job of ``jobs`` covers, sorted."""
    return sorted(route for route, labels in coverage(jobs).items() if not labels)
