"""``theory.forms``: the closed forms picked by the family's class, and what they hand the formula modules."""

from __future__ import annotations

import math

import numpy as np
import pytest

from accum.simulations.conventions import rope_frequencies
from accum.simulations.examples import SignedPermutation
from accum.simulations.families import make_family
from accum.theory import groups, so2
from accum.theory._common import NoClosedForm
from accum.theory.forms import ClosedForms, closed_forms, plane_angles


@pytest.mark.parametrize("name, params, rho, tau", [
    ("haar", {"dim": 6}, 0.0, 1.0),
    ("haar", {"dim": 1, "group": "SO"}, 1.0, 1.0),
    ("givens", {"dim": 6, "sigma": 0.4}, groups.givens_rate(6, 0.4), 1.0),
    ("lie-walk", {"dim": 5, "sigma": 0.3}, groups.lie_walk_rate(5, 0.3), 1.0),
    ("nope", {"dim": 8}, 1.0, 1.0),
    ("householder", {"dim": 8, "beta": 0.5}, 1.0 - 0.5 / 8, 1.0 - 0.5 * 1.5 / 8),
])
def test_scalar_rates(name, params, rho, tau):
    forms = closed_forms(make_family(name, **params))
    assert forms.rate() == rho
    assert forms.norm_rate() == tau
    np.testing.assert_array_equal(forms.step_mean(), rho * np.eye(params["dim"]))


@pytest.mark.parametrize("name, params", [("rope", {"dim": 8}), ("so2-accumulated", {"dim": 8}),
                                          ("householder", {"dim": 8, "w": "token"})])
def test_no_scalar_mean(name, params):
    with pytest.raises(NoClosedForm, match="no scalar mean E\\[A\\] = rho I known"):
        closed_forms(make_family(name, **params)).rate()


def test_norm_rate_of_token_directions_is_not_scalar():
    with pytest.raises(NoClosedForm, match="no scalar E\\[A\\^T A\\] known"):
        closed_forms(make_family("householder", dim=8, w="token")).norm_rate()


def test_plane_angles_say_what_differs():
    rope, nope = make_family("rope", dim=8, base=100.0), make_family("nope", dim=8)
    np.testing.assert_array_equal(plane_angles(rope).omega, rope_frequencies(8, 100.0))
    np.testing.assert_array_equal(plane_angles(nope).omega, np.zeros(4))
    acc = plane_angles(make_family("so2-accumulated", dim=8, law="uniform"))
    assert acc.omega is None and acc.law.name == "uniform" and acc.dim == 8
    # a deterministic rotation has a far-mass limit only when no plane turns
    assert math.isnan(so2.far_mass_terms(plane_angles(rope), 10, 2.0)[1])
    assert so2.far_mass_terms(plane_angles(nope), 10, 2.0)[1] == pytest.approx(1.0)


@pytest.mark.parametrize("family", [make_family("householder", dim=8), SignedPermutation(dim=4)])
def test_plane_angles_of_other_families(family):
    with pytest.raises(NoClosedForm, match="not an SO\\(2\\)-block family"):
        plane_angles(family)


def test_user_families_get_the_empty_base():
    forms = closed_forms(SignedPermutation(dim=4))
    assert type(forms) is ClosedForms and forms.product_rate() is None
    with pytest.raises(NoClosedForm):
        forms.step_mean()


def test_product_rate_only_for_dependent_angles():
    assert closed_forms(make_family("so2-accumulated", dim=8, law="token")).product_rate() is None
    markov = make_family("so2-accumulated", dim=8, law="token", source="markov", stay=0.7)
    assert closed_forms(markov).product_rate() == float(np.max(so2.transfer_rate(plane_angles(markov))))


PAIR_FAMILIES = [("so2-accumulated", {"dim": 4, "mu": 0.3, "sigma": 0.7}),
                 ("so2-accumulated", {"dim": 4, "law": "token", "source": "markov", "stay": 0.7}),
                 ("householder", {"dim": 4, "beta": 1.3}), ("householder", {"dim": 4, "beta": 2.0, "w": "token", "vocab": 8}),
                 ("haar", {"dim": 4}), ("givens", {"dim": 4, "sigma": 1.0}), ("rope", {"dim": 4})]
#: the Lie walk's E[A (x) A] and far second moment share their coefficients: held to the sampler and to the
#: eigenvalue density below
LIE_WALKS = [("lie-walk", {"dim": 4, "sigma": 0.8}), ("lie-walk", {"dim": 5, "sigma": 0.6})]


@pytest.mark.parametrize("name, params", PAIR_FAMILIES + LIE_WALKS)
def test_pair_operator_against_the_sampler(name, params):
    """E[A (x) A] (kron layout: entry ((i, k), (j, l)) = E[A_ij A_kl]) against the mean of kron(A, A) over 40000 sampled
    steps, every one of the d^4 entries within its standard error (Bonferroni at 1e-6 over the entries)."""
    fam = make_family(name, **params)
    d = fam.dim
    mats = fam.sample(np.random.default_rng(3), 1, 40_000).dense()[:, 0]
    prods = np.einsum("nij,nkl->nikjl", mats, mats).reshape(len(mats), -1)
    se = prods.std(axis=0, ddof=1) / math.sqrt(len(mats))
    z = (prods.mean(axis=0) - closed_forms(fam).pair_operator().ravel()) / np.maximum(se, 1e-12)
    assert np.max(np.abs(z)) < 6.0, np.max(np.abs(z))
    assert d * d == closed_forms(fam).pair_operator().shape[0]


@pytest.mark.parametrize("name, params", PAIR_FAMILIES + LIE_WALKS)
def test_pair_operator_agrees_with_the_far_second_moment_and_the_norm_rate(name, params):
    """Two other routes of the theory: d q'S(kk')q is the far second moment at lag 1 (q != k, non-unit), and S(I) =
    E[A A'] is tau I (tau = 1 for rotations; Householder on the sphere: 1 - beta (2 - beta)/d)."""
    fam = make_family(name, **params)
    forms, d = closed_forms(fam), fam.dim
    rng = np.random.default_rng(0)
    q, k = 1.3 * rng.normal(size=d), 0.7 * rng.normal(size=d)
    s = forms.pair_operator()
    assert d * q @ (s @ np.outer(k, k).ravel()).reshape(d, d) @ q == pytest.approx(forms.far_variance(1, q, k), rel=1e-10)
    tau = forms.norm_rate() if name != "householder" or params.get("w") != "token" else None
    if tau is not None:
        np.testing.assert_allclose((s @ np.eye(d).ravel()).reshape(d, d), tau * np.eye(d), atol=1e-12)


@pytest.mark.parametrize("d, sigma", [(4, 0.8), (5, 0.6), (4, 0.3), (5, 1.2)])
def test_lie_walk_trace_moments_against_the_eigenvalue_density_integrated(d, sigma):
    """Q = E[(tr A)^2] by the determinantal closed form against a direct 2-d integral of
    (p + 2 cos x + 2 cos y)^2 over the joint density (x^2 - y^2)^2 (xy)^(2p) e^{-(x^2 + y^2)/(2 sigma^2)} of the two
    positive eigenvalue moduli of X (d = 4, 5); S = E[tr A^2] is d times the rate at 2 sigma."""
    from scipy import integrate

    p, edge = d % 2, 12 * sigma
    density = lambda y, x: (x * x - y * y) ** 2 * (x * y) ** (2 * p) * np.exp(-(x * x + y * y) / (2 * sigma**2))
    trace_sq = lambda y, x: density(y, x) * (p + 2 * np.cos(x) + 2 * np.cos(y)) ** 2
    norm = integrate.dblquad(density, 0, edge, 0, edge, epsabs=1e-13)[0]
    want = integrate.dblquad(trace_sq, 0, edge, 0, edge, epsabs=1e-13)[0] / norm
    q, s = groups.lie_walk_trace_moments(d, sigma)
    assert q == pytest.approx(want, rel=1e-9)
    assert s == pytest.approx(d * groups.lie_walk_rate(d, 2 * sigma), rel=1e-12)


@pytest.mark.parametrize("d", [2, 3, 4, 7])
def test_lie_walk_pair_operator_at_its_limits(d):
    """sigma = 0: A = I, so E[A (x) A] = I (x) I; every sigma: E[A A^T] = I (orthogonal steps) and E[A (x) A] is
    invariant under conjugation by a random orthogonal G; sigma large: the eigenangles wrap to independent uniform
    angles, so Q -> d and S -> d mod 2."""
    np.testing.assert_allclose(groups.lie_walk_pair_operator(d, 0.0), np.eye(d * d), atol=1e-12)
    op = groups.lie_walk_pair_operator(d, 0.7)
    np.testing.assert_allclose((op @ np.eye(d).ravel()).reshape(d, d), np.eye(d), atol=1e-12)
    g = np.linalg.qr(np.random.default_rng(d).normal(size=(d, d)))[0]
    np.testing.assert_allclose(np.kron(g, g) @ op @ np.kron(g, g).T, op, atol=1e-12)
    np.testing.assert_allclose(groups.lie_walk_trace_moments(d, 30.0), (d, d % 2), atol=1e-9)


def test_lie_walk_far_variance_iterates_the_pair_operator():
    """d q'S^n(kk')q by the two-scalar recursion against n applications of the d^2 x d^2 operator (q != k, non-unit)."""
    d, sigma = 5, 0.6
    forms, op = closed_forms(make_family("lie-walk", dim=d, sigma=sigma)), groups.lie_walk_pair_operator(d, sigma)
    rng = np.random.default_rng(1)
    q, k = 1.3 * rng.normal(size=d), 0.7 * rng.normal(size=d)
    vec = np.outer(k, k).ravel()
    for n in range(6):
        assert forms.far_variance(n, q, k) == pytest.approx(d * q @ vec.reshape(d, d) @ q, rel=1e-10)
        vec = op @ vec


def test_pair_operator_where_there_is_none():
    with pytest.raises(NoClosedForm):
        closed_forms(make_family("haar", dim=2, group="SO")).pair_operator()
