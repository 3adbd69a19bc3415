"""Route coverage as a contract (``accum.coverage``): every route of the engine and the theory has an evidence row in
``accum verify --quick``; removing a route's rows uncovers it; a new law is a new, uncovered route; and each check
takes the step-form operations it declares (run once per check and step form at tiny sizes, operations recorded).
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from accum import coverage, report_plan as rp
from accum.claims import CHECKS, family_routes, label
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


# --- the plan's rows as a committed table ---------------------------------------------------------------------------

TABLE_PATH = Path(__file__).with_name("coverage_table.json")
TABLE = json.loads(TABLE_PATH.read_text())
REGENERATE = ("OMP_NUM_THREADS=1 .venv/bin/python -c \"import json; from accum import coverage, report_plan as rp; "
              "print(json.dumps(coverage.table(rp.plan(rp.PRESETS['quick'])), indent=1))\" > tests/verify/coverage_table.json")


@pytest.mark.parametrize("preset", ["quick", "full"])
def test_the_plan_has_exactly_the_committed_rows(preset):
    """Both presets' plans give the committed table (claim x family x check, row kinds, quantities): a change of rows
    is a change of this file, made on purpose (regenerate it with REGENERATE) and seen in review."""
    assert coverage.table(rp.plan(rp.PRESETS[preset])) == TABLE, f"the plan's rows changed; if on purpose: {REGENERATE}"


def test_a_plan_that_drops_a_family_from_a_check_loses_rows():
    """A family silently dropped from one check (the step-pair rows of Householder) is named as lost rows, and the
    table no longer matches."""
    dropped = [j for j in QUICK if not (j.check == "step-pair" and label(j.family) == "householder(d=16, beta=1.3)")]
    assert len(dropped) == len(QUICK) - 1
    assert coverage.table(dropped) != TABLE
    fewer = [{"claim": e["claim"], "family": e["family"], "kind": kind}
             for e in coverage.row_table(dropped) for kind, n in e["kinds"].items() for _ in range(n)]
    assert sorted(coverage.lost_rows(TABLE["rows"], fewer)) == ["C4 householder(d=16, beta=1.3): 1 exact row(s) missing",
                                                                 "C4 householder(d=16, beta=1.3): 1 statistical row(s) missing"]


def test_a_full_set_of_rows_loses_none():
    rows = [{"claim": e["claim"], "family": e["family"], "kind": kind}
            for e in TABLE["rows"] for kind, n in e["kinds"].items() for _ in range(n)]
    assert coverage.lost_rows(TABLE["rows"], rows) == []
    assert len(rows) - sum(r["kind"] in ("exact", "bound") for r in rows) == TABLE["evidence_rows"]


def test_the_saved_quick_report_has_every_row_of_the_table():
    """measurements/verify-quick.json (the quick report the docs quote) holds every row of the table."""
    saved = json.loads((Path(__file__).resolve().parents[2] / "measurements" / "verify-quick.json").read_text())
    assert coverage.lost_rows(TABLE["rows"], saved["result"]["rows"]) == []
    assert saved["result"]["evidence_rows"] == TABLE["evidence_rows"]


def test_every_measure_quantity_is_held_to_theory():
    """Each quantity `accum measure` offers has checks (``report_plan.QUANTITY_CHECKS``) with rows on some family."""
    from accum.simulations.measure import QUANTITIES

    assert set(rp.QUANTITY_CHECKS) == set(QUANTITIES)
    assert all(TABLE["quantities"][q] for q in QUANTITIES)


def test_the_docs_quote_the_tables_evidence_count():
    """The evidence count README.md and docs/verify.md give for the current plan is the table's."""
    root = Path(__file__).resolve().parents[2]
    n = TABLE["evidence_rows"]
    assert f"false-failure budget 0.01 over {n} evidence rows)" in (root / "README.md").read_text()
    doc = (root / "docs" / "verify.md").read_text()
    assert f"The plan has **{n} evidence rows**" in doc
    assert f"false-failure budget 0.01 over {n} evidence rows)" in doc


def test_the_coherence_curve_and_the_near_weight_are_held_on_every_default_family():
    """Every default family has a coherence-curve row and, but the Lie walk (``NEAR_WEIGHT_LEFT_OUT``), a near-weight
    row; the four families that do not claim C1's decay get the curve alone (one row, exact for the deterministic
    RoPE and NoPE), which passes on RoPE."""
    families = {label(f) for f in rp.default_families().values()}
    left_out = {label(rp.default_families()[key]) for key in rp.NEAR_WEIGHT_LEFT_OUT}
    assert set(TABLE["quantities"]["coherence"]) == families
    assert set(TABLE["quantities"]["near-weight"]) == families - left_out
    curve_only = {label(j.family): j for j in QUICK if j.check == "coherence" and j.kwargs.get("decayed") is False}
    fam = rp.default_families()
    assert set(curve_only) == {label(fam[k]) for k in ("lattice", "rope-uniform", "rope", "nope")}
    rope = curve_only[label(fam["rope"])]
    assert rope.kinds() == ("exact",) and curve_only[label(fam["lattice"])].kinds() == ("statistical",)
    rows = rope.run(0)
    assert [m.kind for m in rows] == ["exact"] and "decayed" not in rows[0].what
    assert np.max(np.abs(rows[0].measured - rows[0].predicted)) < 1e-12
