"""accum verify: correct inputs pass across seeds; every check fails on a deliberately broken input.

Negative controls (issue 4): angles not accumulated, a lattice angle law, beta = 0, value rotation dropped,
far-mass control removed, a wrong 1/d scaling; plus a length-tuned law (C3), a non-isometric "rotation"
(C5 bound) and a lattice law held to the Gaussian's far mass (C5 far mass, Jensen).  Each broken input runs
through the same check function the report uses, at the threshold the quick report gives each row
(budget 1% over its R planned rows), so "fails" means what it would mean in ``accum verify``.  Each control
is compared row by row with an explicit list of verdicts, so a check that returns no rows cannot pass it.
The report as a whole is shown to fail with one broken job added, and with a claim left without rows.
"""

import json
from dataclasses import dataclass

import numpy as np
import pytest

from accum import cli
from accum import verify as v
from accum.simulations import estimators as est
from accum.simulations.families import Householder, SO2Accumulated, make_family
from accum.simulations.stats import z_threshold
from accum.simulations.steps import AngleSteps, DenseSteps

BUDGET = 0.01
QUICK_ROWS = v.planned_rows(v.plan(v.PRESETS["quick"]))  # R of the quick report


def verdicts(measurements, n):
    """Per-row pass/fail at the quick report's threshold k = z_threshold(BUDGET / R, points); asserts there
    are exactly n rows."""
    assert len(measurements) == n
    return [v.judge(m, z_threshold(BUDGET / QUICK_ROWS, np.size(m.measured))).passed for m in measurements]


def rng(seed=0):
    return np.random.default_rng(seed)


@dataclass(frozen=True)
class NotAccumulated(SO2Accumulated):
    """Broken: the angle at position t is a fresh draw, not the sum of the steps (Theta_t = xi_t - xi_0)."""

    def sample(self, rng, n_steps, batch):
        xi = super().sample(rng, n_steps + 1, batch).theta
        return AngleSteps(np.diff(xi, axis=1))


@dataclass(frozen=True)
class LengthTuned(SO2Accumulated):
    """Broken for C3: the angle spread is tuned to the sequence length (sigma * sqrt(64 / T))."""

    def sample(self, rng, n_steps, batch):
        return AngleSteps(super().sample(rng, n_steps, batch).theta * np.sqrt(64 / n_steps))


@dataclass(frozen=True)
class ScaledHaar:
    """Broken for C4: A = d^(1/4) U with U Haar, so far scores have variance d^(-1/2), not 1/d."""

    dim: int = 16

    def sample(self, rng, n_steps, batch):
        return DenseSteps(self.dim**0.25 * make_family("haar", dim=self.dim).sample(rng, n_steps, batch).a)


@dataclass(frozen=True)
class FlipExpand:
    """Broken for C5: the first step of each sequence is -2 I (no rotation: it doubles norms), the rest I,
    so every far score is -2 s0, outside the [-s0, s0] that norm preservation guarantees."""

    dim: int = 16

    def sample(self, rng, n_steps, batch):
        a = np.broadcast_to(np.eye(self.dim), (batch, n_steps, self.dim, self.dim)).copy()
        a[:, 0] *= -2.0
        return DenseSteps(a)


GAUSS = dict(dim=16, law="gaussian", sigma=0.5)
C1_NOT_ACCUMULATED = [False, False]  # fresh angles held to the Gaussian: c(n) stays near 1, far from theory
C2_NOT_ACCUMULATED = [False, False]  # W(T) grows with T


def test_c1_passes_and_fails_when_angles_are_not_accumulated_or_beta_is_zero():
    good = v.check_incoherence(SO2Accumulated(**GAUSS), 64, 2000, 0.05, rng())
    assert verdicts(good, 2) == [True, True]
    broken = v.check_incoherence(NotAccumulated(**GAUSS), 64, 2000, 0.05, rng(), claimed=SO2Accumulated(**GAUSS))
    assert verdicts(broken, 2) == C1_NOT_ACCUMULATED
    assert verdicts(v.check_incoherence(Householder(dim=16, beta=1.0), 64, 2000, 0.05, rng()), 2) == [True, True]
    frozen = verdicts(v.check_incoherence(Householder(dim=16, beta=0.0), 64, 2000, 0.05, rng()), 2)
    assert frozen == [True, False]  # theory (1 - 0/d)^n = 1 is matched, but nothing decays


def test_c2_fails_when_angles_are_not_accumulated():
    assert verdicts(v.check_window(SO2Accumulated(**GAUSS), (64, 256, 1024), 400, rng()), 2) == [True, True]
    broken = v.check_window(NotAccumulated(**GAUSS), (64, 256, 1024), 400, rng(), claimed=SO2Accumulated(**GAUSS))
    assert verdicts(broken, 2) == C2_NOT_ACCUMULATED


def test_c3_fails_when_angles_are_not_accumulated_or_the_law_is_length_tuned():
    token = dict(dim=16, law="token", source="markov", stay=0.5)
    assert verdicts(v.check_transfer(SO2Accumulated(**token), 64, 1024, 400, rng()), 2) == [True, True]
    # fresh angles: the profile at T = train is far from theory, but it is the same at every length
    fresh = v.check_transfer(NotAccumulated(**GAUSS), 64, 1024, 400, rng(), claimed=SO2Accumulated(**GAUSS))
    assert verdicts(fresh, 2) == [False, True]
    # angles scaled by sqrt(64 / T): exact at T = train = 64, different at T = 1024
    tuned = v.check_transfer(LengthTuned(**GAUSS), 64, 1024, 400, rng(), claimed=SO2Accumulated(**GAUSS))
    assert verdicts(tuned, 2) == [True, False]


@pytest.mark.parametrize("d", [8, 64])
def test_c4_fails_for_a_lattice_law_and_a_wrong_scaling(d):
    uniform = make_family("so2-accumulated", dim=d, law="uniform", a=np.pi)
    assert verdicts(v.check_score_gap(uniform, 1, 4000, rng()), 1) == [True]
    lattice = make_family("so2-accumulated", dim=d, law="lattice", m=2)
    assert verdicts(v.check_score_gap(lattice, 64, 4000, rng()), 1) == [False]
    assert verdicts(v.check_score_gap(ScaledHaar(dim=d), 1, 4000, rng()), 1) == [False]


def test_c5_bound_fails_for_a_non_isometry_and_alibi_floor_fails_without_the_bias(monkeypatch):
    sizes = (100, 1000, 10_000)
    assert verdicts(v.check_far_mass(make_family("haar", dim=16), (10, 100, 1000), 4.0, 24, rng()), 3) == [True] * 3
    assert verdicts(v.check_far_mass(SO2Accumulated(**GAUSS), sizes, 4.0, 24, rng(), with_mass=False), 1) == [True]
    assert verdicts(v.check_far_mass(FlipExpand(), (100, 1000, 4000), 4.0, 4, rng(), with_mass=False), 1) == [False]
    assert verdicts(v.check_alibi(SO2Accumulated(**GAUSS), sizes, 4.0, 0.5, 24, rng()), 1) == [True]
    unbiased = est.near_weight
    monkeypatch.setattr(est, "near_weight", lambda *a, **kw: unbiased(*a, **{**kw, "alibi_slope": 0.0}))
    assert verdicts(v.check_alibi(SO2Accumulated(**GAUSS), sizes, 4.0, 0.5, 24, rng()), 1) == [False]


def test_c5_far_mass_and_jensen_fail_for_a_lattice_law_held_to_the_gaussian():
    """Rows: norm bound, far mass, Jensen.  Lattice angles (0 or pi per plane, m = 2) still give a rotation, so
    the bound holds, but far scores do not mix like the Gaussian's: the far mass is larger than the Gaussian's
    (seed 0: z = +122) and the near weight falls below its Jensen value (z = -193)."""
    sizes = (100, 1000, 10_000)
    assert verdicts(v.check_far_mass(SO2Accumulated(**GAUSS), sizes, 4.0, 24, rng()), 3) == [True] * 3
    lattice = make_family("so2-accumulated", dim=16, law="lattice", m=2)
    broken = v.check_far_mass(lattice, sizes, 4.0, 24, rng(), claimed=SO2Accumulated(**GAUSS))
    assert verdicts(broken, 3) == [True, False, False]


def test_c6_fails_when_value_rotation_is_dropped():
    sizes = (10, 100, 1000)
    assert verdicts(v.check_values(SO2Accumulated(**GAUSS), sizes, 200, rng()), 1) == [True]
    assert verdicts(v.check_values(SO2Accumulated(**GAUSS), sizes, 200, rng(), value_rotation=False), 1) == [False]


def test_judge_sides_and_nonfinite():
    m = v.Measurement("C1", "f", "x", np.array([0.0, 3.0]), np.array([1.0, 1.0]), np.array(0.0), 10)
    assert v.judge(m, 2.0).passed is False and v.judge(m, 3.5).passed is True
    upper = v.Measurement("C1", "f", "x", np.array(-10.0), np.array(1.0), np.array(0.0), 10, side="upper")
    lower = v.Measurement("C1", "f", "x", np.array(-10.0), np.array(1.0), np.array(0.0), 10, side="lower")
    assert v.judge(upper, 2.0).passed and not v.judge(lower, 2.0).passed
    nan = v.Measurement("C1", "f", "x", np.array(np.nan), np.array(1.0), np.array(0.0), 10)
    assert not v.judge(nan, 2.0).passed


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_quick_report_passes_across_seeds(seed):
    report = v.run_report("quick", seed, BUDGET, progress=False)
    failed = [r for r in report["rows"] if not r["passed"]]
    assert report["passed"], failed
    assert report["claims"] == {c: True for c in v.CLAIMS}
    assert {r["claim"] for r in report["rows"]} == set(v.CLAIMS)
    assert QUICK_ROWS == 40 and len(report["rows"]) == QUICK_ROWS


def broken_c1_job():
    """A job whose angles are not accumulated, held to the Gaussian law's theory: both C1 rows are measured."""
    return v.Job("C1 broken", 2, lambda r: v.check_incoherence(NotAccumulated(**GAUSS), 64, 2000, v.EPS, r,
                                                                claimed=SO2Accumulated(**GAUSS)))


def test_accum_verify_fails_with_one_broken_job(monkeypatch, tmp_path, capsys):
    planned = v.plan
    monkeypatch.setattr(v, "plan", lambda preset: [*planned(preset), broken_c1_job()])
    path = tmp_path / "verify.json"
    assert cli.main(["verify", "--seed", "1", "--json", str(path)]) == 1
    out = capsys.readouterr().out
    assert "C1 FAIL" in out and "report FAIL" in out
    report = json.loads(path.read_text())["result"]
    assert report["passed"] is False
    assert report["claims"] == {"C1": False, "C2": True, "C3": True, "C4": True, "C5": True, "C6": True}
    assert len(report["rows"]) == QUICK_ROWS + 2
    assert [r["passed"] for r in report["rows"][-2:]] == C1_NOT_ACCUMULATED


def test_a_claim_without_rows_fails_the_report(monkeypatch):
    planned = v.plan
    monkeypatch.setattr(v, "plan", lambda preset: [j for j in planned(preset) if not j.label.startswith("C3")])
    report = v.run_report("quick", 1, BUDGET, progress=False)
    assert not any(r["claim"] == "C3" for r in report["rows"])
    assert all(r["passed"] for r in report["rows"])
    assert report["claims"] == {"C1": True, "C2": True, "C3": False, "C4": True, "C5": True, "C6": True}
    assert report["passed"] is False


def test_claim_verdicts_of_no_rows_are_all_false():
    assert v.claim_verdicts([]) == {c: False for c in v.CLAIMS}


def test_a_job_that_returns_fewer_rows_than_it_declares_is_an_error(monkeypatch):
    short = v.Job("C1 short", 2, lambda r: broken_c1_job().run(r)[:1])
    monkeypatch.setattr(v, "plan", lambda preset: [short])
    with pytest.raises(RuntimeError, match="returned 1 rows, declared 2"):
        v.run_report("quick", 0, BUDGET, progress=False)
