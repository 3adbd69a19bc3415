"""theory.scores: far-score moments and tails against quadrature and Monte Carlo; bounds against exact tails.

False-failure budget: 1e-4 per test, split (Bonferroni) over the points a test checks.
"""

import math

import numpy as np
import pytest
from scipy import integrate

from accum.simulations.families import make_family
from accum.simulations.params import ParamError
from accum.simulations.stats import z_threshold
from accum.theory import scores, so2
from accum.theory._common import plane_coefficients
from accum.theory.forms import plane_angles

from conftest import assert_within

BUDGET = 1e-4


@pytest.mark.parametrize("d", [2, 3, 5, 12])
def test_haar_tail_matches_density_quadrature(d):
    dens = lambda u: (1 - u * u) ** ((d - 3) / 2)
    z = integrate.quad(dens, -1, 1)[0]
    for t in (0.05, 0.3, 0.7, 0.95):
        want = 2 * integrate.quad(dens, t, 1)[0] / z
        assert scores.haar_tail(t, d) == pytest.approx(want, abs=1e-9)


def test_haar_tail_and_variance_by_monte_carlo():
    d = 7
    a = make_family("haar", dim=d).sample(np.random.default_rng(1), 2, 40000).dense()
    q = np.ones(d) / math.sqrt(d)
    s = np.einsum("i,bij,bjk,k->b", q, a[:, 1], a[:, 0], q)
    ts = np.array([0.2, 0.5, 0.8])
    ind = (np.abs(s)[:, None] >= ts).astype(float)
    assert_within(np.r_[ind.mean(0), (s**2).mean()], np.r_[ind.std(0, ddof=1), (s**2).std(ddof=1)] / math.sqrt(s.size),
                  np.r_[scores.haar_tail(ts, d), scores.far_variance(1.0, 1.0, d)], BUDGET)


def test_cap_bound_dominates_the_exact_tail():
    t = np.linspace(0, 1, 201)
    for d in range(2, 300, 7):
        assert np.all(scores.haar_tail(t, d) <= scores.haar_tail_bound(t, d) + 1e-15)
    # by hand: 2 exp(-d t^2 / 2) at d = 10, t = 0.8 is 2 e^{-3.2}; capped at 1 for t = 0.1
    np.testing.assert_allclose(scores.haar_tail_bound([0.8, 0.1], 10), [2 * math.exp(-3.2), 1.0], rtol=1e-14)


def test_hoeffding_bound_dominates_the_exact_and_monte_carlo_tails():
    # one plane, uniform angle: P(|cos U| >= t) = (2/pi) arccos t
    t = np.linspace(0, 1, 101)
    assert np.all(2 / math.pi * np.arccos(t) <= scores.hoeffding_tail_bound(t, np.array([1.0])) + 1e-15)
    fam = make_family("so2-accumulated", dim=8, law="uniform", a=math.pi)
    rng = np.random.default_rng(4)
    q = np.ones(8) / math.sqrt(8)
    s = fam.sample(rng, 1, 40000).bilinear(q, q)[:, 1]
    ts = np.array([0.2, 0.4, 0.6])
    p_hat = (np.abs(s)[:, None] >= ts).mean(0)
    k = z_threshold(BUDGET, ts.size)
    assert np.all(p_hat - k * np.sqrt(p_hat * (1 - p_hat) / s.size) <= scores.hoeffding_tail_bound(ts, plane_coefficients(q, q)))
    # by hand, planes of unequal weight (|c|^2 = 0.25 + 2.25): 2 exp(-t^2 / (2 * 2.5)) at t = 3, capped at 1 at t = 1
    np.testing.assert_allclose(scores.hoeffding_tail_bound([3.0, 1.0], np.array([0.5, 1.5j])), [2 * math.exp(-1.8), 1.0],
                               rtol=1e-14)


def test_block_far_variance_equals_the_family_form():
    fam = make_family("so2-accumulated", dim=8, law="gaussian", mu=0.3, sigma=0.6)
    rng = np.random.default_rng(6)
    q, k = rng.normal(size=8), rng.normal(size=8)
    angles = plane_angles(fam)
    psi1, psi2 = so2.path_characteristic(angles, 5, 1)[-1], so2.path_characteristic(angles, 5, 2)[-1]
    assert scores.block_far_variance(plane_coefficients(q, k), psi1, psi2) == pytest.approx(so2.far_second_moment(angles, 5, q, k), rel=1e-12)
    s2 = fam.sample(rng, 5, 40000).bilinear(q, k)[:, -1] ** 2
    assert_within(s2.mean(), s2.std(ddof=1) / math.sqrt(s2.size), scores.block_far_variance(plane_coefficients(q, k), psi1, psi2), BUDGET)


def test_score_gap_thresholds():
    for d, n, delta in ((64, 100, 0.01), (512, 10**4, 1e-3)):
        exact, bound = scores.far_threshold_exact(d, n, delta), scores.far_threshold_bound(d, n, delta)
        assert n * scores.haar_tail(exact, d) == pytest.approx(delta, rel=1e-8)
        assert exact <= bound
        assert scores.score_gap(d, n, delta) >= scores.score_gap(d, n, delta, exact=False)
    assert scores.score_gap(4, 10**6, 0.01, exact=False) < 0 < scores.score_gap(4096, 10**6, 0.01, exact=False)
    assert scores.score_gap(4, 10**6, 0.01) < 1e-4 < 0.5 < scores.score_gap(4096, 10**6, 0.01)
    assert scores.gap_in_sd(16) == 4.0


def test_union_bound_holds_by_monte_carlo():
    d, n, delta = 32, 50, 0.1
    g = np.random.default_rng(3).normal(size=(4000, n, d))
    u1 = g[..., 0] / np.linalg.norm(g, axis=2)  # N independent Haar far scores per trial (unit q, k)
    exceed = (np.abs(u1).max(axis=1) > scores.far_threshold_exact(d, n, delta)).astype(float)
    k = z_threshold(BUDGET, 1)
    assert exceed.mean() - k * exceed.std(ddof=1) / math.sqrt(exceed.size) <= delta


@pytest.mark.parametrize("q_norm, k_norm, d", [(1.0, 1.0, 4), (0.7, 2.0, 16), (1.3, 0.4, 257)])
def test_far_score_density_is_the_c4_gaussian(q_norm, k_norm, d):
    """N(0, |q|^2 |k|^2 / d): scipy's normal density, total mass 1 and second moment far_variance by quadrature, and
    for Haar at large d close to the exact law of |q||k| u_1 (density prop. to (1 - u^2)^((d-3)/2))."""
    from scipy.stats import norm

    v = scores.far_variance(q_norm, k_norm, d)
    s = np.linspace(-3, 3, 61) * math.sqrt(v)
    np.testing.assert_allclose(scores.far_score_density(s, q_norm, k_norm, d), norm.pdf(s, scale=math.sqrt(v)),
                               rtol=1e-12)
    dens = lambda x: float(scores.far_score_density(x, q_norm, k_norm, d))
    assert integrate.quad(dens, -np.inf, np.inf)[0] == pytest.approx(1.0, abs=1e-10)
    assert integrate.quad(lambda x: x * x * dens(x), -np.inf, np.inf)[0] == pytest.approx(v, rel=1e-9)
    if d > 100:  # the exact Haar law, scaled by r = |q||k|: total variation to the Gaussian is O(1/d)
        r = q_norm * k_norm
        z = integrate.quad(lambda u: (1 - u * u) ** ((d - 3) / 2), -1, 1)[0]
        exact = lambda x: (1 - (x / r) ** 2) ** ((d - 3) / 2) / (z * r)
        tv = 0.5 * integrate.quad(lambda x: abs(exact(x) - dens(x)), -r, r, points=[0.0], limit=200)[0]
        assert tv < 2.0 / d


def test_far_variance_by_hand_and_its_dimension_range():
    """|q|^2 |k|^2 / d with non-unit norms (2 and 0.5 at d = 3: 1/3); d = 1 is the smallest dimension, 0 is refused."""
    assert scores.far_variance(2.0, 0.5, 3) == pytest.approx(1 / 3, rel=1e-15)
    assert scores.far_variance(2.0, 0.5, 1) == pytest.approx(1.0, rel=1e-15)
    with pytest.raises(ParamError, match="d must be >= 1, got 0"):
        scores.far_variance(1.0, 1.0, 0)
