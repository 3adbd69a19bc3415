"""``simulations.stats.weighted_chisq_tails``: the saddlepoint tails of a weighted sum of chi-squares, held to
``scipy.stats.chi2`` (equal weights: an outside value) and to a Monte Carlo of unequal weights."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats as sps

from accum.simulations.stats import weighted_chisq_tails

#: worst relative error of a tail probability allowed per number of equal weights (measured: 16%, 8%, 1.4%, 0.002%
#: at p = 1e-9; Lugannani-Rice is exact in the limit of many weights)
TAIL_TOLERANCE = {1: 0.2, 2: 0.1, 8: 0.02, 256: 1e-4}


@pytest.mark.parametrize("k", sorted(TAIL_TOLERANCE))
@pytest.mark.parametrize("p", [0.3, 1e-2, 1e-5, 1e-9])
def test_equal_weights_give_chi2_in_both_tails(k, p):
    w = np.full(k, 0.3)
    upper = weighted_chisq_tails(0.3 * sps.chi2.isf(p, k), w)
    lower = weighted_chisq_tails(0.3 * sps.chi2.ppf(p, k), w)
    assert upper[1] == pytest.approx(p, rel=TAIL_TOLERANCE[k])
    assert lower[0] == pytest.approx(p, rel=TAIL_TOLERANCE[k])
    assert sum(upper) == pytest.approx(1.0) and sum(lower) == pytest.approx(1.0)


def test_unequal_weights_match_a_monte_carlo_of_the_sum():
    """Q = sum w_k Z_k^2 with weights 1, 0.5, 0.1, 0.1, 0.05: the tails at the 0.1% points of 4 million draws agree
    within four binomial standard errors plus the formula's few per cent; zero weights change nothing and the
    scale of the weights cancels."""
    w = np.array([1.0, 0.5, 0.1, 0.1, 0.05])
    rng = np.random.default_rng(7)
    q = np.concatenate([(rng.standard_normal((1_000_000, w.size)) ** 2) @ w for _ in range(4)])
    for x, side in ((np.quantile(q, 0.999), 1), (np.quantile(q, 0.001), 0)):
        seen = float(np.mean(q > x) if side else np.mean(q <= x))
        got = weighted_chisq_tails(x, w)[side]
        assert abs(got - seen) <= 4 * np.sqrt(seen / q.size) + 0.05 * seen
    x = float(np.quantile(q, 0.99))
    assert weighted_chisq_tails(x, np.append(w, [0.0, 0.0])) == weighted_chisq_tails(x, w)
    assert weighted_chisq_tails(5 * x, 5 * w) == pytest.approx(weighted_chisq_tails(x, w), rel=1e-12)


def test_the_tails_at_the_mean_and_below_zero():
    """At the mean (sum w) the limit 1/2 -+ skew term of the formula is used; Q <= 0 has probability 0."""
    w = np.full(8, 2.0)
    lower, upper = weighted_chisq_tails(16.0, w)
    assert lower == pytest.approx(sps.chi2.cdf(8.0, 8), abs=2e-3) and lower + upper == pytest.approx(1.0)
    assert weighted_chisq_tails(0.0, w) == (0.0, 1.0) and weighted_chisq_tails(-1.0, w) == (0.0, 1.0)


@pytest.mark.parametrize("bad", [[], [0.0, 0.0], [1.0, -0.5]])
def test_weights_must_be_nonnegative_with_one_positive(bad):
    with pytest.raises(ValueError, match="weights"):
        weighted_chisq_tails(1.0, np.array(bad))


def test_z_threshold_is_the_normal_quantile_of_the_budget_over_the_points():
    """k with P(|Z| > k) = budget / n: 1.959964 at 5% for one point (the normal table), 2.241403 for two."""
    from accum.simulations.stats import z_threshold

    assert z_threshold(0.05) == pytest.approx(1.959963984540054, abs=1e-12)
    assert z_threshold(0.05, 2) == pytest.approx(2.241402727604947, abs=1e-12)


def test_a_one_point_curve_has_no_crossing():
    """c(0) alone never falls to eps: inf (only an empty curve or c(0) = 0 is refused)."""
    from accum.simulations.stats import first_crossing

    assert first_crossing(np.array([2.0]), 0.5) == np.inf
    with pytest.raises(ValueError):
        first_crossing(np.array([]), 0.5)
