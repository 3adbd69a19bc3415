"""Negative controls for C7 and the theory bridge: defects planted in the real probe statistics, bridge and
baseline code (tests/probes/planted_c7.toml) must flip a verdict printed from the committed sweeps or fail a
named test.

Each defect is a copy of one real function with one line changed (``conftest.plant``).  ``flips``: the verdict rows
of every committed sweep (``SweepConfig.verdicts`` of its sweep.json, as ``accum probe report`` prints them) are
recomputed under the defect and at least one verdict must differ from the rows without it.  ``tests``: the named
tests run in this process under the defect (``pytest.main``) and must fail; as a control, the same tests pass in
this suite without it.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from accum.probes.sweepconfig import SweepConfig
from conftest import plant

ROOT = Path(__file__).resolve().parents[2]
DEFECTS = tomllib.loads(Path(__file__).with_name("planted_c7.toml").read_text())["defect"]
SWEEPS = sorted((ROOT / "probes" / "results").glob("*/sweep.json"))


def verdict_rows() -> list[tuple[str, str, str, str]]:
    """(sweep, claim, metric, verdict) of every verdict row of every committed sweep, recomputed from its runs."""
    rows = []
    for path in SWEEPS:
        sweep = json.loads(path.read_text())
        rows += [(path.parent.name, r["claim"], r["metric"], r["verdict"])
                 for r in SweepConfig.from_dict(sweep["config"]).verdicts(sweep["runs"])]
    return rows


def test_the_table_names_a_catch_for_every_defect():
    assert SWEEPS and len({d["name"] for d in DEFECTS}) == len(DEFECTS) >= 15
    assert all(d.get("flips") or d.get("tests") for d in DEFECTS)


@pytest.mark.parametrize("defect", DEFECTS, ids=[d["name"] for d in DEFECTS])
def test_planted_defect_flips_a_verdict_or_fails_a_test(defect, monkeypatch):
    clean = verdict_rows() if defect.get("flips") else None
    plant(monkeypatch, defect["target"], defect["old"], defect["new"])
    if defect.get("flips"):
        assert verdict_rows() != clean, f"{defect['name']}: no verdict of the committed sweeps moved"
    if defect.get("tests"):
        nodes = [str(ROOT / node) for node in defect["tests"]]
        status = pytest.main([*nodes, "-q", "-p", "no:cacheprovider", "--no-header", "-x"])
        assert status == pytest.ExitCode.TESTS_FAILED, f"{defect['name']}: {defect['tests']} passed under the defect"
