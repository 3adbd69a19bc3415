"""theory.householder against sympy, exact quadrature over the sphere, enumeration and Monte Carlo.

False-failure budget: 1e-4 per test, split (Bonferroni) over the points a test checks.
"""

import math

import numpy as np
import pytest
from scipy import integrate

from accum.simulations.families import make_family
from accum.simulations.params import ParamError
from accum.theory import householder as hh

from conftest import assert_within

BUDGET = 1e-4


def test_sympy_rates_equal_the_evaluators():
    import sympy as sy

    r = hh.derive_rates()
    for d in (1, 2, 5, 16):
        for beta in (0.0, 0.3, 1.0, 2.0):
            sub = {r["d"]: d, r["beta"]: beta}
            assert float(r["rho"].subs(sub)) == pytest.approx(hh.mean_rate(beta, d), abs=1e-15)
            assert float(r["tau"].subs(sub)) == pytest.approx(hh.norm_rate(beta, d), abs=1e-15)
            a, b = hh.pair_coefficients(beta, d)
            assert float(r["a"].subs(sub)) == pytest.approx(a, abs=1e-15)
            assert float(r["b"].subs(sub)) == pytest.approx(b, abs=1e-15)
    mom = hh.derive_sphere_moments()
    assert sy.simplify(mom["w4"] - 3 / (mom["d"] * (mom["d"] + 2))) == 0


def sphere_average(f, d):
    """Exact average over S^{d-1} for d = 2, 3 by quadrature in angular coordinates."""
    if d == 2:
        return integrate.quad(lambda p: f(np.array([math.cos(p), math.sin(p)])), 0, 2 * math.pi, epsabs=1e-13)[0] / (2 * math.pi)
    val = integrate.dblquad(lambda p, t: f(np.array([math.sin(t) * math.cos(p), math.sin(t) * math.sin(p), math.cos(t)])) * math.sin(t),
                            0, math.pi, 0, 2 * math.pi, epsabs=1e-12)[0]
    return val / (4 * math.pi)


@pytest.mark.parametrize("d", [2, 3])
def test_pair_operator_and_mean_against_sphere_quadrature(d):
    beta = 0.7
    op = hh.pair_operator(beta, d)
    rng = np.random.default_rng(d)
    m = rng.normal(size=(d, d))  # not symmetric: checks the M^T term too
    want = np.array([[sphere_average(lambda w, i=i, j=j: ((np.eye(d) - beta * np.outer(w, w)) @ m @ (np.eye(d) - beta * np.outer(w, w)).T)[i, j], d)
                      for j in range(d)] for i in range(d)])
    np.testing.assert_allclose((op @ m.reshape(-1)).reshape(d, d), want, atol=1e-10)
    mean = sphere_average(lambda w: (np.eye(d) - beta * np.outer(w, w))[0, 0], d)
    assert mean == pytest.approx(hh.mean_rate(beta, d), abs=1e-10)
    shrink = sphere_average(lambda w: np.sum(((np.eye(d) - beta * np.outer(w, w)) @ np.eye(d)[0]) ** 2), d)
    assert shrink == pytest.approx(hh.norm_rate(beta, d), abs=1e-10)


@pytest.mark.parametrize("beta", [0.5, 1.0, 2.0])
def test_mean_product_norm_shrinkage_and_second_moment_by_monte_carlo(beta):
    d, n, samples = 6, 8, 20000
    fam = make_family("householder", dim=d, beta=beta)
    rng = np.random.default_rng(int(beta * 10))
    q, k = rng.normal(size=d), rng.normal(size=d)
    steps = fam.sample(rng, n, samples)
    path = steps.transport(k)  # (samples, n+1, d): A_t ... A_1 k
    s = path @ q
    norms = np.sum(path**2, axis=2) / (k @ k)
    t = np.arange(n + 1)
    assert_within(np.r_[s.mean(0), norms.mean(0), (s**2).mean(0)],
                  np.r_[s.std(0, ddof=1), norms.std(0, ddof=1), (s**2).std(0, ddof=1)] / math.sqrt(samples),
                  np.r_[hh.mean_product(beta, d, t) * (q @ k), hh.norm_shrinkage(beta, d, t),
                        hh.far_second_moment(beta, d, t, q, k)], BUDGET)


def test_reflection_second_moment_tends_to_the_haar_value():
    """E[(q^T P_n k)^2] -> |q|^2 |k|^2 / d for reflections (the Haar value, by hand: E[U k k^T U^T] = |k|^2 I / d), on
    non-unit, non-parallel probes of different norms (|q|^2 = 5, |k|^2 = 10.25: a swapped or dropped norm shows)."""
    d = 5
    q, k = np.array([2.0, 0.0, 1.0, 0.0, 0.0]), np.array([0.5, 3.0, 0.0, 0.0, -1.0])
    op = hh.pair_operator(2.0, d)
    vec = np.linalg.matrix_power(op, 400) @ np.outer(k, k).reshape(-1)
    assert q @ vec.reshape(d, d) @ q == pytest.approx(5.0 * 10.25 / d, rel=1e-12)
    assert float(hh.far_second_moment(2.0, d, 400, q, k)) == pytest.approx(5.0 * 10.25 / d, rel=1e-12)
    assert hh.far_second_moment_limit(2.0, d, q, k) == pytest.approx(5.0 * 10.25 / d, rel=1e-15)
    assert hh.far_second_moment_limit(0.0, d, q, k) == pytest.approx(float(q @ k) ** 2, rel=1e-15)
    assert hh.far_second_moment_limit(1.0, d, q, k) == 0.0
    assert hh.norm_rate(2.0, d) == 1.0 and hh.norm_rate(0.0, d) == 1.0


def test_token_directions_by_enumeration_and_monte_carlo():
    fam = make_family("householder", dim=6, beta=1.5, w="token", vocab=4, table_seed=2)
    table = hh.direction_table(4, 6, 2)
    np.testing.assert_allclose(table, fam.direction_table())
    mats = [np.eye(6) - 1.5 * np.outer(w, w) for w in table]
    np.testing.assert_allclose(hh.token_step_mean(1.5, table), np.mean(mats, axis=0), atol=1e-14)
    # three steps, all 4^3 token sequences enumerated
    want = np.mean([c @ b @ a for a in mats for b in mats for c in mats], axis=0)
    rng = np.random.default_rng(9)
    q, k = rng.normal(size=6), rng.normal(size=6)
    assert hh.coherence(fam, 3, q, k)[3] == pytest.approx(q @ want @ k, abs=1e-12)
    want2 = np.mean([(q @ c @ b @ a @ k) ** 2 for a in mats for b in mats for c in mats])
    assert hh.family_far_second_moment(fam, 3, q, k) == pytest.approx(want2, abs=1e-12)
    curve = hh.family_far_second_moment_curve(fam, 3, q, k)  # the pair operator applied once per lag
    np.testing.assert_allclose(curve, [hh.family_far_second_moment(fam, t, q, k) for t in range(4)], rtol=1e-12)
    assert curve[0] == pytest.approx(float(q @ k) ** 2, rel=1e-12) and curve[3] == pytest.approx(want2, abs=1e-12)
    s = fam.sample(rng, 3, 40000).bilinear(q, k)[:, 3]
    assert_within(s.mean(), s.std(ddof=1) / math.sqrt(s.size), q @ want @ k, BUDGET)


def test_householder_theory_takes_beta_in_0_to_2():
    """beta in [0, 2] (steps of norm <= 1): both ends are evaluated, just past either end is refused naming beta."""
    assert hh.mean_rate(0.0, 4) == 1.0 and hh.mean_rate(2.0, 4) == pytest.approx(0.5)
    for bad in (-1e-9, 2.0 + 1e-9):
        with pytest.raises(ParamError, match=r"beta must lie in \[0, 2\]"):
            hh.mean_rate(bad, 4)
