"""theory.values: the far residual with value rotation against brute-force double sums, enumeration of token
chains, sympy, and Monte Carlo of r = (1/N) sum_j P_j m.

False-failure budget: 1e-4 per test, split (Bonferroni) over the points a test checks.
"""

import itertools
import math

import numpy as np
import pytest

from accum.simulations.families import make_family
from accum.theory import predict, so2, values
from accum.theory.forms import plane_angles

from conftest import assert_within

BUDGET = 1e-4


@pytest.mark.parametrize("phi", [0.0, 0.5, 0.95, -0.4, 0.7 * np.exp(1.1j), 1.0])
def test_exact_residual_equals_the_double_sum(phi):
    sizes = [1, 2, 5, 40]
    direct = [sum((phi ** abs(j - l)).real if j >= l else np.conj(phi ** abs(j - l)).real
                  for j in range(n) for l in range(n)) / n**2 for n in sizes]
    np.testing.assert_allclose(values.residual_sq(phi, sizes), direct, atol=1e-13)
    if phi != 1.0:
        np.testing.assert_allclose(values.residual_sq_closed(phi, np.array(sizes)), direct, atol=1e-12)
    assert values.residual_sq(1.0, [7])[0] == pytest.approx(1.0)


def test_large_n_limit_and_sympy_derivation():
    r = values.derive_residual_sq()
    for rho in (0.2, 0.8):
        for n in (3, 50):
            assert float(r["exact"].subs({r["rho"]: rho, r["N"]: n})) == pytest.approx(values.residual_sq(rho, [n])[0], rel=1e-12)
        assert float(r["limit_N_times"].subs(r["rho"], rho)) == pytest.approx((1 + rho) / (1 - rho), rel=1e-12)
        n = 10**6
        assert values.residual_sq(rho, [n])[0] == pytest.approx(values.residual_sq_limit(rho, [n])[0], rel=1e-4)
    np.testing.assert_allclose(values.residual_sq_without_rotation([1, 10, 1000]), 1.0)


def test_chain_residual_by_enumeration():
    pi = np.full(3, 1 / 3)
    p = 0.5 * np.eye(3) + 0.5 / 3
    g = np.array([[0.3, -1.2, 2.0]])
    n = 5
    want = 0.0
    for seq in itertools.product(range(3), repeat=n):
        prob = pi[seq[0]] * np.prod([p[a, b] for a, b in zip(seq, seq[1:])])
        theta = np.cumsum(g[0, list(seq)])
        want += prob * abs(np.sum(np.exp(1j * theta))) ** 2 / n**2
    assert values.residual_sq_chain(pi, p, g, [n])[0, 0] == pytest.approx(want, rel=1e-12)


def residual_mc(family, n, samples, rng):
    """|r|^2/|m|^2 with r = (1/N) sum_{j=1}^N A_N ... A_{N-j+1} m, dense products, m = 1/sqrt(d)."""
    d = family.dim
    m = np.ones(d) / math.sqrt(d)
    mats = family.sample(rng, n, samples).dense()
    u = np.zeros((samples, d))
    for t in range(n):  # U_t = A_t (U_{t-1} + m)
        u = np.einsum("bij,bj->bi", mats[:, t], u + m)
    return np.sum((u / n) ** 2, axis=1)


@pytest.mark.parametrize("name,params", [("so2-accumulated", dict(law="gaussian", sigma=0.7, mu=0.2)),
                                         ("so2-accumulated", dict(law="token", source="markov", stay=0.7, vocab=4)),
                                         ("haar", {}), ("householder", dict(beta=1.0)), ("givens", dict(sigma=1.0))],
                         ids=["gaussian", "token-markov", "haar", "householder", "givens"])
def test_residual_prediction_by_monte_carlo(name, params):
    fam = make_family(name, dim=4, **params)
    r = residual_mc(fam, 12, 20000, np.random.default_rng(len(name)))
    assert_within(r.mean(), r.std(ddof=1) / math.sqrt(r.size), predict("far-residual", fam, far_sizes=[12])[0], BUDGET)
    assert predict("far-residual", fam, far_sizes=[12], value_rotation=False)[0] == 1.0


def test_haar_residual_is_exactly_one_over_n_and_isotropic_reduces_to_the_plane_form():
    np.testing.assert_allclose(values.residual_sq_isotropic(0.0, 1.0, [1, 10, 1000]), [1, 0.1, 0.001], rtol=1e-12)
    np.testing.assert_allclose(values.residual_sq_isotropic(0.6, 1.0, [3, 77]), values.residual_sq(0.6, [3, 77]), rtol=1e-12)
    fam = make_family("so2-accumulated", dim=16, law="gaussian", sigma=0.5)
    rho = math.exp(-0.125)
    big = predict("far-residual", fam, far_sizes=[10**5])[0]
    assert big == pytest.approx((1 + rho) / ((1 - rho) * 10**5), rel=1e-3)
    assert np.abs(so2.plane_characteristic(plane_angles(fam)) - rho).max() < 1e-15
