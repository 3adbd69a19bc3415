"""Route coverage as a contract (``accum.coverage``): every route of the engine and the theory has an evidence row in
``accum verify --quick``; removing a route's rows uncovers it; a new law is a new, uncovered route; and each check
takes the step-form operations it declares (run once per check and step form at tiny sizes, operations recorded).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

import numpy as np
import pytest

from accum import coverage, report_plan as rp
from accum.claims import CHECKS, family_routes
from accum.simulations import laws
from accum.simulations.steps import StepShape

QUICK = rp.plan(rp.PRESETS["quick"])


def test_every_route_of_the_engine_has_a_row_in_quick():
    assert coverage.uncovered(QUICK) == []


def test_the_routes_are_the_engines_own():
    routes = coverage.engine_routes()
    assert {"family:lie-walk", "law:lattice", "law:rope-uniform", "form:dense", "op:angle.transposed",
            "op:householder.pair-operator", "op:dense.values", "theory:moments", "theory:closed",
            "se:near-weight"} <= routes
    assert {r.split(":")[1] for r in routes if r.startswith("law:")} == set(laws.LAWS)


@pytest.mark.parametrize("route", sorted(coverage.engine_routes()))
def test_removing_a_routes_rows_uncovers_it(route):
    kept = [job for job in QUICK if route not in coverage.covered_by(job)]
    assert len(kept) < len(QUICK)
    assert route in coverage.uncovered(kept)


def test_a_new_law_is_a_new_route_that_no_row_covers(monkeypatch):
    @dataclasses.dataclass(frozen=True)
    class TwoPoint(laws.AngleLaw):
        name = "two-point"
        PARAMS = ()

    monkeypatch.setitem(laws.LAWS, "two-point", TwoPoint)
    assert coverage.uncovered(QUICK) == ["law:two-point"]


def test_sanity_rows_do_not_cover_a_route():
    """The fast paths' exact rows are not evidence: a plan of them alone covers only the deterministic families
    (whose rows are exact by nature), none of their operations and no random family."""
    fast = [job for job in QUICK if job.check == "fast-paths"]
    covered = {r for r, labels in coverage.coverage(fast).items() if labels}
    assert covered == {"family:rope"}  # nope has no fast-path job: its exact row is the ALiBi contrast


#: tiny sizes for running every check once (the declared operations do not depend on sizes)
TINY = {"samples": 40, "sequences": 4, "replicates": 3, "theory_samples": 64, "iterations": 1,
        "transport_samples": 40}

OPERATION_METHODS = {"transport": "transport", "transposed": "transposed", "bilinear": "bilinear", "scores": "scores",
                     "pair-operator": "pair_operator", "values": "accumulate_values"}


def recording(monkeypatch) -> set[str]:
    """Wrap every step form's operations (and the base class's dense routes, which a form that does not override
    them runs) so each call is recorded as ``op:FORM.OPERATION``, FORM the form of the object or class called."""
    seen: set[str] = set()
    for cls in [StepShape, *coverage.step_forms()]:
        for op, method in OPERATION_METHODS.items():
            raw = cls.__dict__.get(method)
            if raw is None:
                continue
            if isinstance(raw, classmethod):
                fn = raw.__func__
                monkeypatch.setattr(cls, method, classmethod(
                    lambda c, *a, _f=fn, _o=op, **k: seen.add(f"op:{c.form_name}.{_o}") or _f(c, *a, **k)))
            else:
                monkeypatch.setattr(cls, method,
                                    lambda self, *a, _f=raw, _o=op, **k: seen.add(f"op:{self.form_name}.{_o}") or _f(self, *a, **k))
    return seen


def one_job_per_check_and_form() -> list:
    picked = {}
    for job in QUICK:
        declared = CHECKS[job.check].routes(job.family, **job.kwargs)
        if any(r.startswith("op:") for r in declared):
            form = next(r for r in family_routes(job.family) if r.startswith("form:"))
            picked.setdefault((job.check, form, job.kwargs.get("estimator")), job)
    return list(picked.values())


@pytest.mark.parametrize("job", one_job_per_check_and_form(), ids=lambda j: j.label)
def test_a_check_takes_the_operations_it_declares(job, monkeypatch):
    seen = recording(monkeypatch)
    kwargs = {key: (TINY[key] if key in TINY else value) for key, value in job.kwargs.items()}
    with np.errstate(all="ignore"):
        CHECKS[job.check].run(job.family, np.random.default_rng(0), **kwargs)
    declared = {r for r in CHECKS[job.check].routes(job.family, **job.kwargs) if r.startswith("op:")}
    assert declared <= seen, (declared - seen, seen)
