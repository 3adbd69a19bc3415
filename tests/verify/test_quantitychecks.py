"""``accum.quantitychecks``: the eps of the onset rows, the rounding bound of the drift rows, and that both hold on the
engine (the rows themselves run in the report; their planted defects are in planted_defects.toml)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from accum.quantitychecks import (NEAR_ZERO_SHARE, ROUNDOFF, check_drift, check_product_norm, drift_bound, halfway_eps,
                                 orthogonal_steps)
from accum.simulations import estimators as est
from accum.simulations.families import make_family
from accum.simulations.stats import first_crossing


def test_halfway_eps_puts_the_crossing_halfway_between_two_steps():
    rho = 0.8
    curve = 2.0 * rho ** np.arange(30)  # c(0) = 2: the level is relative to c(0)
    eps = halfway_eps(curve, 0.2)
    n = math.ceil(math.log(0.2) / math.log(rho))
    assert eps == pytest.approx(rho ** (n - 0.5))
    assert first_crossing(curve, eps) == pytest.approx(n - 0.5)


def test_halfway_eps_on_an_oscillating_curve_uses_the_first_crossing():
    curve = 0.9 ** np.arange(40) * np.cos(0.3 * np.arange(40))
    mag = np.abs(curve)
    eps = halfway_eps(curve, 0.2)
    n = int(np.flatnonzero(mag <= 0.2)[0])  # n = 5, |c| = 0.04: near a zero of the cosine, so one step back
    assert mag[n] < NEAR_ZERO_SHARE * 0.2 and mag[n - 1] < eps < mag[n - 2] and n < 10
    assert first_crossing(curve, eps) == pytest.approx(n - 1.5)


def test_halfway_eps_refuses_a_curve_that_never_crosses():
    with pytest.raises(ValueError, match="does not cross"):
        halfway_eps(np.ones(10), 0.2)


def test_a_curve_that_stays_above_the_level_is_crossed_at_the_lowest_value_it_reaches():
    """|c(n)/c(0)| = 1, 0.9, 0.8, 0.85, 0.7, 0.75 never reaches 0.3: the onset is taken at 0.7, the first step at or
    below it is n = 4, and eps lies halfway (in log) between 0.7 and the lowest value before it, 0.8 (halfway to
    0.85 could pass above an earlier value and move the crossing onto it); a curve that does reach 0.3 keeps it."""
    curve = -2.0 * np.array([1.0, 0.9, 0.8, 0.85, 0.7, 0.75])
    assert halfway_eps(curve, 0.3) == pytest.approx(math.sqrt(0.8 * 0.7))
    assert 3.0 < first_crossing(curve, halfway_eps(curve, 0.3)) < 4.0
    assert halfway_eps(np.array([1.0, 0.5, 0.2, 0.4]), 0.3) == pytest.approx(math.sqrt(0.5 * 0.2))
    with pytest.raises(ValueError, match="does not cross"):
        halfway_eps(np.ones(10), 0.3)
    with pytest.raises(ValueError, match="does not cross"):
        halfway_eps(np.ones(1), 0.3)


def test_drift_bound_is_the_formula():
    u, d, n = ROUNDOFF["fp64"], 16, 1000
    e = 2 * n * (d * u / (1 - d * u) * d + 3 * d * u)
    assert drift_bound(n, d, u) == pytest.approx(2 * e + e * e)


@pytest.mark.parametrize("name, params", [("haar", {"dim": 8}), ("so2-accumulated", {"dim": 8, "mu": 0.3}),
                                          ("householder", {"dim": 8, "beta": 2.0})])
def test_drift_rows_hold_and_a_product_in_a_lower_precision_breaks_the_fp64_bound(name, params):
    fam = make_family(name, **params)
    rows = check_drift(fam, np.random.default_rng(0), steps=300)
    assert all(float(r.measured) <= float(r.predicted) for r in rows)
    fp32 = est.drift(fam, 300, np.random.default_rng(0))["fp32"]
    assert fp32 > drift_bound(300, fam.dim, ROUNDOFF["fp64"])  # an fp64 product made in fp32 fails the fp64 row


def test_orthogonal_steps():
    assert orthogonal_steps(make_family("haar", dim=4))
    assert orthogonal_steps(make_family("householder", dim=4, beta=2.0))
    assert not orthogonal_steps(make_family("householder", dim=4, beta=1.3))


def test_halfway_eps_steps_back_from_a_crossing_next_to_a_zero_of_the_curve():
    """vonmises at q != k (calibration seed 13157): |c(n)/c(0)| = 1, 0.59, 0.23, 3e-6, ... crosses 0.2 by passing
    near a zero (here 2e-5), where eps = sqrt(0.23 * 2e-5) = 0.002 is a value the estimated curve, noisy at 0.01,
    need never reach.  eps steps back to the bracket before it (sqrt(0.59 * 0.23)), where both values are far from zero; a
    crossing whose lower value is not near zero keeps its bracket, and the bracket is read from the running minimum."""
    near_zero = np.array([1.0, 0.59, 0.23, 2e-5, 0.11, 0.14])
    assert halfway_eps(near_zero, 0.2) == pytest.approx(math.sqrt(0.59 * 0.23))
    assert first_crossing(near_zero, halfway_eps(near_zero, 0.2)) == pytest.approx(1.5)
    assert halfway_eps(np.array([1.0, 0.59, 0.23, 0.06, 0.11]), 0.2) == pytest.approx(math.sqrt(0.23 * 0.06))
    rebound = np.array([1.0, 0.5, 0.6, 0.22, 0.001])  # the record before n = 4 is j = 3, bracketed by min(1, .5, .6)
    assert halfway_eps(rebound, 0.2) == pytest.approx(math.sqrt(0.5 * 0.22))
    assert 2.0 < first_crossing(rebound, halfway_eps(rebound, 0.2)) < 3.0
    with pytest.raises(ValueError, match="does not cross"):
        halfway_eps(np.array([1.0, 1.2, 1.1]), 0.2)


def test_a_zero_mean_product_norm_is_judged_by_its_chi_square_law_and_holds_its_null():
    """On Haar and the m = 2 lattice (E[P_n] = 0) the row holds normal deviates of the degenerate U-statistic's
    weighted chi-square law (the jackknife's t15 put the lattice at z = -8 once in 300 reports); over 100 seeds of
    both, at small sizes, the deviates have mean 0 and sd 1 (limits at about five standard errors of 600 deviates: a
    false failure well under 1e-4).  A family with E[P_n] != 0 keeps the jackknife row."""
    fams = [make_family("haar", dim=4), make_family("so2-accumulated", dim=6, law="lattice", m=2, offset=0.4)]
    z = []
    for seed in range(100):
        for fam in fams:
            row = check_product_norm(fam, np.random.default_rng(seed), steps=3, samples=400, theory_samples=10)[0]
            assert "weighted chi-square" in row.what and row.reference == "normal" and np.all(row.stderr == 1.0)
            z.append(row.measured)
    z = np.concatenate(z)
    assert z.size == 600 and abs(z.mean()) < 0.2 and abs(z.std() - 1.0) < 0.15
    row = check_product_norm(make_family("so2-accumulated", dim=6, mu=0.3), np.random.default_rng(0), steps=3,
                             samples=400, theory_samples=10)[0]
    assert "chi-square" not in row.what and row.reference == "t" and row.dof == 15
