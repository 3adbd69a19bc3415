"""Route coverage as a contract: every route of the engine and the theory has a row in the report that can fail.

The routes are read from the engine itself, so a new law, family or step form is a new route at once:

* ``family:NAME`` for every built-in family (``simulations.families.FAMILIES``);
* ``law:NAME`` for every angle law (``simulations.laws.LAWS``);
* ``form:NAME`` for every step form (the subclasses of ``simulations.steps.StepShape``) and ``op:FORM.OPERATION``
  for each of its operations in ``OPERATIONS`` (transport, transposed, bilinear, all-pairs scores, the sample
  second-moment operator, the value recurrence);
* ``theory:closed`` and ``theory:moments``: the closed forms and the moment-operator estimate (``theory.estimated``);
* ``se:ESTIMATOR``: the reported standard errors of each estimator, through its streaming paths.

The plan's rows are a contract too: ``row_table`` lists them (claim x family x check, with the count of rows of each
kind), ``quantity_table`` which families each ``accum measure`` quantity is held to theory on;
tests/verify/coverage_table.json is their committed copy (``table``), and tests/verify/test_coverage.py fails when the
plan or a saved report loses a row, and holds the evidence count the docs quote to it.

A check declares the routes it runs (``claims.CheckSpec.routes`` and ``claims.family_routes``; tests run each
check once with the step forms' operations recorded, so a declaration cannot claim a route the check does not
take).  A route is covered by a check with at least one evidence row; a deterministic family (rope, nope), which
has no statistics, by an exact row.
"""

from __future__ import annotations

from typing import Any, Sequence

from collections import Counter

from accum.simulations.families import FAMILIES
from accum.simulations.laws import LAWS
from accum.simulations.steps import StepShape

from .claims import CHECKS, deterministic, family_routes, label
from .report_plan import QUANTITY_CHECKS, Check, evidence_rows
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


def row_table(jobs: Sequence[Check]) -> list[dict]:
    """The plan's rows, one entry per (claim, family label, check) with the number of rows of each kind (jobs that
    share the three are summed), sorted: what a report of ``jobs`` prints, known before anything runs."""
    counts: dict[tuple[str, str, str], Counter] = {}
    for job in jobs:
        counts.setdefault((job.claim, label(job.family), job.check), Counter()).update(job.kinds())
    return [{"claim": c, "family": f, "check": k, "kinds": dict(sorted(n.items()))} for (c, f, k), n in sorted(counts.items())]


def quantity_table(jobs: Sequence[Check]) -> dict[str, list[str]]:
    """``accum measure`` quantity -> the family labels on which some evidence or exact row of its checks
    (``QUANTITY_CHECKS``) holds it to theory, sorted."""
    return {q: sorted({label(j.family) for j in jobs if j.check in checks and set(j.kinds()) & {*EVIDENCE, "exact", "bound"}})
            for q, checks in QUANTITY_CHECKS.items()}


def table(jobs: Sequence[Check]) -> dict:
    """The coverage table of a plan (tests/verify/coverage_table.json): its evidence rows R, its rows
    (``row_table``) and its quantities (``quantity_table``)."""
    return {"evidence_rows": evidence_rows(jobs), "rows": row_table(jobs), "quantities": quantity_table(jobs)}


def lost_rows(expected: Sequence[dict], rows: Sequence[Any]) -> list[str]:
    """The (claim, family, kind) row counts of the table ``expected`` (``row_table`` entries) that the report rows
    ``rows`` (``verdict.Row`` or their dicts: claim, family, kind) fall short of, one line each ("" none)."""
    want: Counter = Counter()
    for entry in expected:
        for kind, n in entry["kinds"].items():
            want[(entry["claim"], entry["family"], kind)] += n
    got = Counter((_field(r, "claim"), _field(r, "family"), _field(r, "kind")) for r in rows)
    return [f"{c} {f}: {n - got[(c, f, k)]} {k} row(s) missing" for (c, f, k), n in sorted(want.items()) if got[(c, f, k)] < n]


def _field(row: Any, name: str) -> Any:
    return row[name] if isinstance(row, dict) else getattr(row, name)
