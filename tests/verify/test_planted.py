"""Negative controls: defects planted in the real engine, theory and estimator code must make the quick report
fail on the claim they concern.

Each defect is a copy of one real function with one line changed (``plant``: the function's source, one
exact textual replacement, compiled in its own module's namespace, monkeypatched in), so the control tests
the code that ships, not a stand-in.  Checks are seeded from their identity, so running only the checks of
the claim (and family) concerned gives exactly the rows the whole report would: each test runs that subset at
the whole quick report's thresholds (budget / R, R its evidence rows) and asserts that some row of the claim
fails -- and, as a control, that the same subset passes without the defect.

``ACCUM_PLANTED_PRESET=full`` runs the same table at the full report's sizes and thresholds (docs/verify.md gives
both catch rates).  A defect of the verdict code (``check = "unit"``) cannot make correct numbers fail; it is run
against the verdict's unit tests (tests/verify/test_verdict.py), which must fail.  An entry with
``missed = ["quick", ...]`` is a defect that preset does not catch: the test then requires it to pass unnoticed
(a strict xfail), so the table states every miss and notices when one starts being caught.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import numpy as np
import pytest

from accum import report as rep, report_plan as rp
from accum.claims import label
from accum.simulations.families import family_name
from accum.verdict import judge_all
from conftest import plant

BUDGET = 0.01
PRESET = os.environ.get("ACCUM_PLANTED_PRESET", "quick")
PLAN = rp.plan(rp.PRESETS[PRESET])
R = rp.evidence_rows(PLAN)
VERDICT_TESTS = Path(__file__).with_name("test_verdict.py")


def failed_rows(claim: str, family: str | None = None, check: str | None = None, seed: int = 0) -> list:
    """Rows of the report's checks (``PRESET``) for ``claim`` (optionally one family / one check) that fail."""
    jobs = [j for j in PLAN if j.claim == claim and (family is None or family_name(j.family) == family
                                                     or label(j.family) == family)
            and (check is None or j.check == check)]
    assert jobs, (claim, family, check)
    measurements, _ = rep.run_plan(jobs, seed, progress=False)
    return [r for r in judge_all(measurements, BUDGET, R) if not r.passed]


DEFECTS = tomllib.loads(Path(__file__).with_name("planted_defects.toml").read_text())["defect"]


def case(defect: dict):
    """The defect as a test case: a strict xfail where the table says ``PRESET`` misses it."""
    marks = [pytest.mark.xfail(strict=True, reason=f"{PRESET} misses it")] if PRESET in defect.get("missed", []) else []
    return pytest.param(defect, id=defect["name"], marks=marks)


@pytest.mark.parametrize("defect", [case(d) for d in DEFECTS])
def test_planted_defect_fails_its_claim(defect, monkeypatch):
    """The same checks pass without the defect: ``test_verify.test_quick_report_passes`` runs them at this seed."""
    plant(monkeypatch, defect["target"], defect["old"], defect["new"])
    if defect.get("check") == "unit":  # the verdict code: its unit tests must fail under the defect
        assert pytest.main([str(VERDICT_TESTS), "-x", "-q", "-p", "no:cacheprovider", "--no-header"]) != 0, defect["name"]
        return
    with np.errstate(over="ignore", invalid="ignore"):  # a flipped ALiBi bias overflows the far mass: it must fail
        failed = failed_rows(defect["claim"], defect.get("family"), defect.get("check"))
    assert failed and all(r.claim == defect["claim"] for r in failed), defect["name"]


@pytest.mark.parametrize("preset", ["quick", "full"])
def test_catch_rate_is_stated_for_the_whole_table(preset):
    """docs/verify.md states each preset's catch rate ("Caught at quick: **C of N**") over the planted defects run at that
    preset (N: those not marked ``pending`` there), C the entries not marked missed at that preset, each one a
    parametrised case above (``ACCUM_PLANTED_PRESET`` runs them at that preset), and how many are pending."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "verify.md").read_text()
    run = [d for d in DEFECTS if preset not in d.get("pending", [])]
    caught = sum(preset not in d.get("missed", []) for d in run)
    assert len(DEFECTS) == len({d["name"] for d in DEFECTS})
    assert f"Caught at {preset}: **{caught} of {len(run)}**" in doc
    pending = len(DEFECTS) - len(run)
    assert not pending or f"**{pending} pending at {preset}**" in doc


def test_plant_refuses_a_line_that_is_not_there(monkeypatch):
    with pytest.raises(AssertionError, match="not \\(once\\)"):
        plant(monkeypatch, "accum.simulations.estimators:score_gap", "this line is not there", "")


def test_a_planted_defect_fails_the_whole_command(monkeypatch, capsys):
    """The whole `accum verify --quick` (exit 1, report FAIL) under one defect (value rotation dropped)."""
    from accum import cli

    defect = next(d for d in DEFECTS if d["name"] == "value rotation dropped")
    plant(monkeypatch, defect["target"], defect["old"], defect["new"])
    part = [j for j in PLAN if j.claim in ("C6", "engine")]
    for module in (rp, rep):  # report imports both by name: patched only in report_plan, the whole plan ran
        monkeypatch.setattr(module, "plan", lambda preset: part)
        monkeypatch.setattr(module, "evidence_rows", lambda jobs: R)
    assert cli.main(["verify", "--quick", "--workers", "1"]) == 1  # in this process, where the defect is planted
    out = capsys.readouterr().out
    assert "C6 FAIL" in out and "report FAIL" in out
