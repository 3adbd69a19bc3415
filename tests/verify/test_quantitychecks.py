"""``accum.quantitychecks``: the eps of the onset rows, the rounding bound of the drift rows, and that both hold on the
engine (the rows themselves run in the report; their planted defects are in planted_defects.toml)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from accum.quantitychecks import ROUNDOFF, check_drift, drift_bound, halfway_eps, orthogonal_steps
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
    n = int(np.flatnonzero(mag <= 0.2)[0])
    assert mag[n] < eps < mag[n - 1] and n < 10


def test_halfway_eps_refuses_a_curve_that_never_crosses():
    with pytest.raises(ValueError, match="does not cross"):
        halfway_eps(np.ones(10), 0.2)


def test_a_curve_that_stays_above_the_level_is_crossed_at_the_lowest_value_it_reaches():
    """|c(n)/c(0)| = 1, 0.9, 0.8, 0.85, 0.7, 0.75 never reaches 0.3: the onset is taken at 0.7, the first step at or
    below it is n = 4, and eps lies halfway (in log) between 0.85 and 0.7; a curve that does reach 0.3 keeps it."""
    curve = -2.0 * np.array([1.0, 0.9, 0.8, 0.85, 0.7, 0.75])
    assert halfway_eps(curve, 0.3) == pytest.approx(math.sqrt(0.85 * 0.7))
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
