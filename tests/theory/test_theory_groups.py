"""theory.groups (Haar, Givens, Lie walk) against Monte Carlo, eigenvalue-density quadrature and sympy.

False-failure budget: 1e-4 per test, split (Bonferroni) over the points a test checks.
"""

import math

import numpy as np
import pytest
from scipy import integrate

from accum.simulations.families import make_family
from accum.theory import groups

from conftest import assert_within

BUDGET = 1e-4


@pytest.mark.parametrize("group,d", [("O", 3), ("SO", 3), ("SO", 2), ("O", 6)])
def test_haar_mean_is_zero_after_one_step_and_far_variance_is_one_over_d(group, d):
    fam = make_family("haar", dim=d, group=group)
    rng = np.random.default_rng(d)
    a = fam.sample(rng, 1, 40000).dense()[:, 0]
    q, k = rng.normal(size=d), rng.normal(size=d)
    s2 = (np.einsum("i,bij,j->b", q, a, k)) ** 2
    assert_within(np.r_[a.mean(0).ravel(), s2.mean()], np.r_[a.std(0, ddof=1).ravel(), s2.std(ddof=1)] / math.sqrt(a.shape[0]),
                  np.r_[np.zeros(d * d) + groups.haar_mean(d, 1, group), groups.haar_far_second_moment(q @ q, k @ k, d)], BUDGET)
    assert groups.haar_mean(d, 0, group) == 1.0
    assert groups.haar_mean(1, 3, "SO") == 1.0


@pytest.mark.parametrize("d,sigma", [(3, 0.4), (5, 1.3)])
def test_givens_pair_operator_equals_quadrature_over_the_angle(d, sigma):
    """E[A (x) A] exactly: for each plane (i, j) the rotation by theta ~ N(0, sigma^2) written out entry by entry
    (as ``Givens.sample`` does) and averaged by 80-point Gauss-Hermite quadrature in theta (exact to rounding for
    these smooth integrands), then averaged over the d(d-1)/2 planes.  A Monte Carlo test cannot see an error of a
    few percent in one entry; this one sees 1e-12."""
    nodes, weights = np.polynomial.hermite.hermgauss(80)
    total = np.zeros((d * d, d * d))
    planes = [(i, j) for i in range(d) for j in range(i + 1, d)]
    for i, j in planes:
        for x, w in zip(nodes, weights):
            theta = math.sqrt(2.0) * sigma * x
            a = np.eye(d)
            a[i, i] = a[j, j] = math.cos(theta)
            a[i, j], a[j, i] = -math.sin(theta), math.sin(theta)
            total += w / math.sqrt(math.pi) * np.kron(a, a)
    np.testing.assert_allclose(groups.givens_pair_operator(d, sigma), total / len(planes), rtol=0, atol=1e-12)


def test_givens_rate_and_pair_operator_by_monte_carlo():
    d, sigma = 5, 0.9
    a = make_family("givens", dim=d, sigma=sigma).sample(np.random.default_rng(0), 1, 40000).dense()[:, 0]
    kron = np.einsum("bij,bkl->bikjl", a, a).reshape(a.shape[0], -1)
    assert_within(np.r_[a.mean(0).ravel(), kron.mean(0)], np.r_[a.std(0, ddof=1).ravel(), kron.std(0, ddof=1)] / math.sqrt(a.shape[0]),
                  np.r_[(groups.givens_rate(d, sigma) * np.eye(d)).ravel(), groups.givens_pair_operator(d, sigma).ravel()], BUDGET)


@pytest.mark.parametrize("d,sigma", [(3, 0.7), (6, 0.5)])
def test_lie_walk_rate_by_monte_carlo(d, sigma):
    a = make_family("lie-walk", dim=d, sigma=sigma).sample(np.random.default_rng(d), 1, 3000).dense()[:, 0]
    tr = np.trace(a, axis1=1, axis2=2) / d
    assert_within(tr.mean(), tr.std(ddof=1) / math.sqrt(tr.size), groups.lie_walk_rate(d, sigma), BUDGET)


@pytest.mark.parametrize("d", [4, 5])
def test_lie_walk_rate_by_quadrature_of_the_eigenvalue_density(d):
    """Independent of the Hermite/Laguerre reduction: integrate (2 cos x1 + 2 cos x2 + d mod 2)/d against
    prod (x1^2 - x2^2)^2 prod x^{2(d mod 2)} e^{-x^2/(2 s^2)} on x1, x2 > 0, normalised numerically."""
    s, odd = 0.8, d % 2
    w = lambda x1, x2: (x1**2 - x2**2) ** 2 * (x1 * x2) ** (2 * odd) * math.exp(-(x1**2 + x2**2) / (2 * s**2))
    lim = 12 * s
    z = integrate.dblquad(lambda y, x: w(x, y), 0, lim, 0, lim, epsabs=1e-13)[0]
    num = integrate.dblquad(lambda y, x: w(x, y) * (2 * math.cos(x) + 2 * math.cos(y) + odd) / d, 0, lim, 0, lim, epsabs=1e-13)[0]
    assert num / z == pytest.approx(groups.lie_walk_rate(d, s), abs=1e-9)


def test_lie_walk_rate_small_dimensions_in_closed_form():
    for sigma in (0.3, 1.0, 2.0):  # d = 2: E cos g; d = 3: rotation angle sigma chi_3, E cos = (1 - s^2) e^{-s^2/2}
        assert groups.lie_walk_rate(2, sigma) == pytest.approx(math.exp(-sigma**2 / 2), abs=1e-15)
        assert groups.lie_walk_rate(3, sigma) == pytest.approx((1 + 2 * (1 - sigma**2) * math.exp(-sigma**2 / 2)) / 3, abs=1e-15)
        assert groups.lie_walk_rate(1, sigma) == 1.0


@pytest.mark.parametrize("d", [2, 3, 6, 9])
def test_lie_walk_heat_kernel_is_the_first_order_term(d):
    import sympy as sy

    expr, coeff = groups.derive_lie_walk_small_sigma(d)
    assert coeff == sy.Rational(-(d - 1), 2)
    s = sy.Symbol("s", positive=True)
    assert float(expr.subs(s, 0.49)) == pytest.approx(groups.lie_walk_rate(d, 0.7), abs=1e-13)
    for sigma in (1e-2, 1e-3):  # exact and heat kernel differ at O(sigma^4)
        assert abs(groups.lie_walk_rate(d, sigma) - groups.lie_walk_heat_kernel(d, sigma)) < d * d * sigma**4
