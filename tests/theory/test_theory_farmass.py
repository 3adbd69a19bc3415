"""theory.farmass: the new far-mass predictions against exact one-lag values and an independent route."""

import numpy as np
import pytest
import scipy.special as sp

from accum.simulations.families import make_family
from accum.theory import farmass, so2
from accum.theory.forms import plane_angles
from accum.theory.forms import closed_forms


@pytest.mark.parametrize("beta", [2.0, 1.0, 0.5])
def test_householder_one_lag_is_the_exact_integral(beta):
    """Delta = 1, q = k: s = s0 (1 - beta c^2) with c^2 ~ Beta(1/2, (d-1)/2), so E e^{s - s0} = 1F1(1/2; d/2; -beta s0)."""
    f = make_family("householder", dim=16, beta=beta)
    assert farmass.householder_far_mass(f, [1], 4.0)[0] == pytest.approx(sp.hyp1f1(0.5, 8.0, -beta * 4.0), rel=1e-10)


def test_householder_two_lags_by_quadrature():
    """Delta = 2 by direct two-step quadrature over (c_1, c_2, the angle between the steps' planes) vs the series."""
    d, beta, s0 = 5, 1.3, 3.0
    f = make_family("householder", dim=d, beta=beta)
    rng = np.random.default_rng(0)
    g = rng.normal(size=(400_000, 2, d))
    w = g / np.linalg.norm(g, axis=2, keepdims=True)
    k = np.full(d, 1 / np.sqrt(d))
    x = k - beta * (w[:, 0] @ k)[:, None] * w[:, 0]
    x = x - beta * np.einsum("bd,bd->b", w[:, 1], x)[:, None] * w[:, 1]
    vals = np.exp(s0 * x @ k - s0)
    exact = np.diff(farmass.householder_far_mass(f, [1, 2], s0))[0]
    assert abs(vals.mean() - exact) < 4 * vals.std() / np.sqrt(vals.size)


def test_reflections_tend_to_the_haar_value():
    f = make_family("householder", dim=16, beta=2.0)
    m = farmass.householder_far_mass(f, [2000, 3000], 4.0)
    assert m[1] - m[0] == pytest.approx(1000 * np.exp(-4.0) * sp.hyp0f1(8.0, 4.0), rel=1e-9)


def test_contractions_tend_to_uniform_weight():
    f = make_family("householder", dim=16, beta=1.0)
    m = farmass.householder_far_mass(f, [3000, 4000], 4.0)
    assert m[1] - m[0] == pytest.approx(1000 * np.exp(-4.0), rel=1e-9)


def test_token_law_matches_path_enumeration():
    """Delta = 1, 2, 3 by summing over every token path with its chain probability."""
    f = make_family("so2-accumulated", dim=16, law="token", source="markov", stay=0.7)
    tokens = so2.token_law(plane_angles(f))
    pi, p = tokens.chain()
    table = tokens.table(16)
    c = np.full(8, 1 / 8)

    def mass(theta):
        return np.exp(4.0 * (np.cos(theta) @ c) - 4.0)

    v = len(pi)
    f1 = sum(pi[a] * mass(table[a]) for a in range(v))
    f2 = sum(pi[a] * p[a, b] * mass(table[a] + table[b]) for a in range(v) for b in range(v))
    f3 = sum(pi[a] * p[a, b] * p[b, e] * mass(table[a] + table[b] + table[e])
             for a in range(v) for b in range(v) for e in range(v))
    got = farmass.token_far_mass(plane_angles(f), [1, 2, 3], 4.0, least=1e-6)
    # each lag's truncation error is at most the neglected Bessel weight times e^{-s0} prod_b I_0(x_b) (module
    # docstring); the sum over N lags at most N times that
    x = 4.0 * np.abs(c)
    _, _, neglected = farmass.token_modes(x, 1e-6)
    per_lag = neglected * np.exp(np.sum(np.log(sp.i0(x))) - 4.0)
    exact = np.cumsum([f1, f2, f3])
    assert np.all(np.abs(got - exact) <= per_lag * np.array([1, 2, 3]))
    np.testing.assert_allclose(got, exact, rtol=3e-4)  # in practice far inside the bound (MODE_WEIGHT's comment)
    # the default truncation, MODE_WEIGHT = 1e-5: 3.5e-4 relative here (its comment: 3e-4 against 1e-8 at N = 1)
    np.testing.assert_allclose(farmass.token_far_mass(plane_angles(f), [1, 2, 3], 4.0), exact, rtol=5e-4)


def test_token_modes_split_the_whole_bessel_weight():
    """Kept plus neglected weight is prod_b e^{x_b} / I_0(x_b) (sum over all j of prod_b I_{|j_b|}/I_0, by the
    generating function e^{x cos t} = sum_j I_j(x) e^{ijt} at t = 0); keeping weight >= 1 leaves only j = 0."""
    x = np.array([0.5, 1.0, 0.25])
    total = float(np.prod(np.exp(x) / sp.i0(x)))
    modes, weights, neglected = farmass.token_modes(x, 1e-4)
    assert weights.sum() + neglected == pytest.approx(total, rel=1e-12) and 0 < neglected < 1e-2
    modes, weights, neglected = farmass.token_modes(x, 1.0)
    assert modes.tolist() == [[0, 0, 0]] and weights.tolist() == [1.0]
    assert neglected == pytest.approx(total - 1.0, rel=1e-12)


def test_mixing_estimate_agrees_with_the_closed_form_on_reflections():
    f = make_family("householder", dim=16, beta=2.0)
    value, se, n, _ = farmass.mixing_far_mass(f, closed_forms(f).mixing_rate(), [10, 1000], 4.0, np.random.default_rng(3), 3000)
    exact = farmass.householder_far_mass(f, [10, 1000], 4.0)
    assert n == 3000 and np.all(np.abs(value - exact) < 4.5 * se)


@pytest.mark.parametrize("stay", [0.6, 0.0], ids=["markov", "iid-rank-one"])
@pytest.mark.parametrize("slope", [0.0, 0.03])
def test_chain_sums_match_the_forward_recursion(stay, slope):
    """Against ``so2.chain_characteristic`` (forward recursion), on a Markov chain and on the rank-one P = 1 pi^T of
    an i.i.d. source (a defective P D: an eigendecomposition fails there), with a D = I row (I - P singular)."""
    rng = np.random.default_rng(1)
    pi = rng.dirichlet(np.ones(5))
    p = stay * np.eye(5) + (1 - stay) * np.tile(pi, (5, 1))
    phases = np.concatenate([rng.normal(size=(4, 5)), np.zeros((1, 5))])
    sizes = np.array([1, 4, 9, 13])
    got = farmass.chain_sums(pi, p, phases, sizes, slope)
    decay = np.exp(-slope * np.arange(1, 14))
    want = np.cumsum(so2.chain_characteristic(pi, p, phases, 13)[:, 1:] * decay, axis=1)[:, sizes - 1]
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_a_family_whose_steps_never_mix_has_no_mixing_estimate():
    """haar(d=1, SO) is the identity: coherence rate 1, so no transient ends (NoClosedForm, not a division by 0)."""
    from accum.theory.forms import mixing_estimable

    assert not mixing_estimable(make_family("haar", dim=1, group="SO"))
    assert mixing_estimable(make_family("givens", dim=8, sigma=1.0))
    with pytest.raises(farmass.NoClosedForm, match="never ends"):
        farmass.transient_lags(1.0)
    # steps whose mean vanishes (rate 0) need one lag; at rate 1/2 the first D with 2^-D <= 1e-8 is 27 (2^-26 = 1.5e-8)
    assert farmass.transient_lags(0.0) == 1 and farmass.TRANSIENT_DECAY == 1e-8
    assert farmass.transient_lags(0.5) == 27


def test_householder_far_mass_with_opposed_probes_by_monte_carlo():
    """q . k < 0 (cosine -0.6), non-unit probes (|q| = 1.2, |k| = 0.9), one and two lags: the Gegenbauer series
    against 200000 sampled paths of the engine-free recursion x <- x - beta (w . x) w, within 4.5 se each."""
    d, beta, s0 = 5, 1.3, 3.0
    f = make_family("householder", dim=d, beta=beta)
    q = 1.2 * np.eye(d)[0]
    k = 0.9 * (-0.6 * np.eye(d)[0] + 0.8 * np.eye(d)[1])
    g = np.random.default_rng(16).normal(size=(200_000, 2, d))
    w = g / np.linalg.norm(g, axis=2, keepdims=True)
    x1 = k - beta * (w[:, 0] @ k)[:, None] * w[:, 0]
    x2 = x1 - beta * np.einsum("bd,bd->b", w[:, 1], x1)[:, None] * w[:, 1]
    vals = np.cumsum(np.exp(s0 * np.stack([x1 @ q, x2 @ q], axis=1) - s0), axis=1)
    got = farmass.householder_far_mass(f, [1, 2], s0, q, k)
    assert np.all(np.abs(vals.mean(0) - got) < 4.5 * vals.std(0) / np.sqrt(len(vals))), (vals.mean(0), got)
