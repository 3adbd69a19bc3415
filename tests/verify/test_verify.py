"""accum verify: correct inputs pass across seeds; every check fails on a deliberately broken input.

Negative controls (issue 4): angles not accumulated, a lattice angle law, beta = 0, value rotation dropped,
far-mass control removed, a wrong 1/d scaling; plus a length-tuned law (C3) and a non-isometric "rotation"
(C5 bound).  Each broken input runs through the same check function the report uses, at the report's
threshold for a single row (budget 1%), so "fails" means what it would mean in ``accum verify``.
"""

from dataclasses import dataclass

import numpy as np
import pytest

from accum import verify as v
from accum.simulations import estimators as est
from accum.simulations.families import Householder, SO2Accumulated, make_family
from accum.simulations.stats import z_threshold
from accum.simulations.steps import AngleSteps, DenseSteps

K = z_threshold(0.01)  # one row at the report's whole budget: the most lenient threshold a row ever gets


def verdicts(measurements):
    return [v.judge(m, z_threshold(0.01, np.size(m.measured))).passed for m in measurements]


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


def test_c1_passes_and_fails_when_angles_are_not_accumulated_or_beta_is_zero():
    good = v.check_incoherence(SO2Accumulated(**GAUSS), 64, 2000, 0.05, rng())
    assert all(verdicts(good))
    assert not all(verdicts(v.check_incoherence(NotAccumulated(**GAUSS), 64, 2000, 0.05, rng(), claimed=SO2Accumulated(**GAUSS))))
    assert all(verdicts(v.check_incoherence(Householder(dim=16, beta=1.0), 64, 2000, 0.05, rng())))
    frozen = verdicts(v.check_incoherence(Householder(dim=16, beta=0.0), 64, 2000, 0.05, rng()))
    assert frozen == [True, False]  # theory (1 - 0/d)^n = 1 is matched, but nothing decays


def test_c2_fails_when_angles_are_not_accumulated():
    assert all(verdicts(v.check_window(SO2Accumulated(**GAUSS), (64, 256, 1024), 400, rng())))
    assert not all(verdicts(v.check_window(NotAccumulated(**GAUSS), (64, 256, 1024), 400, rng(), claimed=SO2Accumulated(**GAUSS))))


def test_c3_fails_for_a_length_tuned_law():
    token = dict(dim=16, law="token", source="markov", stay=0.5)
    assert all(verdicts(v.check_transfer(SO2Accumulated(**token), 64, 1024, 400, rng())))
    assert not all(verdicts(v.check_transfer(LengthTuned(**GAUSS), 64, 1024, 400, rng(), claimed=SO2Accumulated(**GAUSS))))


@pytest.mark.parametrize("d", [8, 64])
def test_c4_fails_for_a_lattice_law_and_a_wrong_scaling(d):
    assert all(verdicts(v.check_score_gap(make_family("so2-accumulated", dim=d, law="uniform", a=np.pi), 1, 4000, rng())))
    lattice = make_family("so2-accumulated", dim=d, law="lattice", m=2)
    assert not any(verdicts(v.check_score_gap(lattice, 64, 4000, rng())))
    assert not any(verdicts(v.check_score_gap(ScaledHaar(dim=d), 1, 4000, rng())))


def test_c5_bound_fails_for_a_non_isometry_and_alibi_floor_fails_without_the_bias(monkeypatch):
    sizes = (100, 1000, 10_000)
    assert all(verdicts(v.check_far_mass(make_family("haar", dim=16), (10, 100, 1000), 4.0, 24, rng())))
    assert all(verdicts(v.check_far_mass(SO2Accumulated(**GAUSS), sizes, 4.0, 24, rng(), with_mass=False)))
    assert not any(verdicts(v.check_far_mass(FlipExpand(), (100, 1000, 4000), 4.0, 4, rng(), with_mass=False)))
    assert all(verdicts(v.check_alibi(SO2Accumulated(**GAUSS), sizes, 4.0, 0.5, 24, rng())))
    unbiased = est.near_weight
    monkeypatch.setattr(est, "near_weight", lambda *a, **kw: unbiased(*a, **{**kw, "alibi_slope": 0.0}))
    assert not any(verdicts(v.check_alibi(SO2Accumulated(**GAUSS), sizes, 4.0, 0.5, 24, rng())))


def test_c6_fails_when_value_rotation_is_dropped():
    sizes = (10, 100, 1000)
    assert all(verdicts(v.check_values(SO2Accumulated(**GAUSS), sizes, 200, rng())))
    assert not any(verdicts(v.check_values(SO2Accumulated(**GAUSS), sizes, 200, rng(), value_rotation=False)))


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
    report = v.run_report("quick", seed, 0.01, progress=False)
    failed = [r for r in report["rows"] if not r["passed"]]
    assert report["passed"], failed
    assert set(report["claims"]) == {"C1", "C2", "C3", "C4", "C5", "C6"}
