"""theory.so2 against independent computations: quadrature of the angle densities, brute-force enumeration
of token chains, sympy, and Monte Carlo from the engine's samplers within k standard errors.

False-failure budget: 1e-4 per test, split (Bonferroni) over the points a test checks.
"""

import itertools
import math

import numpy as np
import pytest
from scipy import integrate, stats

from accum.simulations.families import make_family
from accum.theory import so2
from accum.theory._common import NoClosedForm, planes
from accum.theory.forms import plane_angles

from conftest import assert_within

BUDGET = 1e-4


def quad_cf(pdf, lo, hi, k):
    re = integrate.quad(lambda x: math.cos(k * x) * pdf(x), lo, hi, limit=400, epsabs=1e-13)[0]
    im = integrate.quad(lambda x: math.sin(k * x) * pdf(x), lo, hi, limit=400, epsabs=1e-13)[0]
    return re + 1j * im


LAW_CASES = [
    ("gaussian", dict(mu=0.3, sigma=0.7), lambda p: (stats.norm(p["mu"], p["sigma"]).pdf, -12, 12)),
    ("uniform", dict(a=1.3), lambda p: (lambda x: 1 / (2 * p["a"]), -p["a"], p["a"])),
    ("vonmises", dict(mu=-0.4, kappa=2.5), lambda p: (stats.vonmises(p["kappa"], loc=p["mu"]).pdf, -math.pi + p["mu"], math.pi + p["mu"])),
    ("wrapped-cauchy", dict(mu=0.5, gamma=0.3), lambda p: (
        lambda x: (1 - math.exp(-2 * p["gamma"])) / (2 * math.pi * (1 + math.exp(-2 * p["gamma"]) - 2 * math.exp(-p["gamma"]) * math.cos(x - p["mu"]))),
        0.0, 2 * math.pi)),
]


@pytest.mark.parametrize("slope", [0.0, 0.003, 0.7])
def test_far_mass_with_slope_beyond_the_exact_terms_is_the_plain_sum(slope):
    """E M(N) = sum_{Delta<=N} e^{-slope Delta} f(Delta): ``far_mass`` sums the exact terms f(1..D) and a closed-form
    geometric tail f(inf) sum_{D<Delta<=N} e^{-slope Delta}; here the tail is summed term by term."""
    fam = make_family("so2-accumulated", dim=4, law="gaussian", mu=0.3, sigma=1.0)
    terms, limit = so2.far_mass_terms(plane_angles(fam), 50_000, 2.0)
    cut = terms.size
    for n in (cut, cut + 1, cut + 37, 3 * cut + 5):
        f = np.r_[terms, np.full(max(0, n - cut), limit)][:n]
        want = float(np.sum(f * np.exp(-slope * np.arange(1, n + 1))))
        assert so2.far_mass(plane_angles(fam), [n], 2.0, slope=slope)[0] == pytest.approx(want, rel=1e-12), n


@pytest.mark.parametrize("law,params,density", LAW_CASES, ids=[c[0] for c in LAW_CASES])
def test_characteristic_matches_quadrature(law, params, density):
    fam = make_family("so2-accumulated", dim=6, law=law, **params)
    pdf, lo, hi = density(params)
    for k in (1, 2, 3, -2):
        want = quad_cf(pdf, lo, hi, k)
        got = so2.plane_characteristic(plane_angles(fam), k)
        assert got.shape == (3,)
        np.testing.assert_allclose(got, want, atol=1e-9)


def test_lattice_rope_uniform_and_token_characteristics_by_enumeration():
    fam = make_family("so2-accumulated", dim=4, law="lattice", m=3, offset=0.2)
    for k in range(1, 8):
        want = np.mean([np.exp(1j * k * (0.2 + 2 * math.pi * j / 3)) for j in range(3)])
        np.testing.assert_allclose(so2.plane_characteristic(plane_angles(fam), k), want, atol=1e-12)
    fam = make_family("so2-accumulated", dim=8, law="rope-uniform", base=100.0)
    omega = 100.0 ** (-2 * np.arange(4) / 8)
    want = [quad_cf(lambda x, w=w: 1 / (2 * w), -w, w, 1) for w in omega]
    np.testing.assert_allclose(so2.plane_characteristic(plane_angles(fam), 1), want, atol=1e-12)
    fam = make_family("so2-accumulated", dim=6, law="token", vocab=5, table_sigma=0.8, table_seed=3)
    table = np.random.default_rng(3).normal(0, 0.8, size=(5, 3))
    want = [np.mean([np.exp(2j * table[x, b]) for x in range(5)]) for b in range(3)]
    np.testing.assert_allclose(so2.plane_characteristic(plane_angles(fam), 2), want, atol=1e-12)


@pytest.mark.parametrize("law", ["gaussian", "uniform", "wrapped-cauchy", "vonmises", "lattice"])
def test_sympy_derivation_agrees_with_the_evaluator(law):
    import sympy as sy

    expr, sym = so2.derive_characteristic(law)
    values = {"mu": 0.4, "sigma": 0.6, "a": 0.9, "gamma": 0.25, "kappa": 1.7, "offset": 0.3, "m": 4}
    fam = make_family("so2-accumulated", dim=2, law=law, **{n: v for n, v in values.items() if n in sym})
    for k in (1, 2, 4, 5):
        subs = {sym[n]: v for n, v in values.items() if n in sym}
        subs[sym["k"]] = k
        got = complex(sy.N(expr.subs(subs).doit()))
        np.testing.assert_allclose(got, so2.plane_characteristic(plane_angles(fam), k)[0], atol=1e-12)


@pytest.mark.parametrize("source", ["iid", "markov"])
def test_token_chain_characteristic_by_brute_force_enumeration(source):
    chain = {"source": "markov", "stay": 0.6} if source == "markov" else {}
    fam = make_family("so2-accumulated", dim=4, law="token", vocab=3, table_seed=7, **chain)
    table = np.random.default_rng(7).normal(0, 1.0, size=(3, 2))
    p = np.full((3, 3), 1 / 3) if source == "iid" else 0.6 * np.eye(3) + 0.4 / 3
    got = so2.path_characteristic(plane_angles(fam), 5, k=1)
    for n in range(1, 6):
        want = np.zeros(2, complex)
        for seq in itertools.product(range(3), repeat=n):
            prob = 1 / 3 * np.prod([p[a, b] for a, b in zip(seq, seq[1:])])
            want += prob * np.exp(1j * table[list(seq)].sum(axis=0))
        np.testing.assert_allclose(got[n], want, atol=1e-12)
    # pair characteristics of two planes sharing the tokens, same enumeration
    plus, minus = so2.pair_characteristics(plane_angles(fam), 4)
    want_p, want_m = 0j, 0j
    for seq in itertools.product(range(3), repeat=4):
        prob = 1 / 3 * np.prod([p[a, b] for a, b in zip(seq, seq[1:])])
        th = table[list(seq)].sum(axis=0)
        want_p += prob * np.exp(1j * (th[0] + th[1]))
        want_m += prob * np.exp(1j * (th[0] - th[1]))
    np.testing.assert_allclose([plus[0, 1], minus[0, 1]], [want_p, want_m], atol=1e-12)


FAMILIES = [
    dict(law="gaussian", mu=0.2, sigma=0.5),
    dict(law="uniform", a=1.0),
    dict(law="vonmises", kappa=3.0, mu=0.1),
    dict(law="wrapped-cauchy", gamma=0.2, mu=-0.3),
    dict(law="lattice", m=3, offset=0.1),
    dict(law="rope-uniform"),
    dict(law="token", source="iid", vocab=6),
    dict(law="token", source="markov", vocab=6, stay=0.7),
]


@pytest.mark.parametrize("params", FAMILIES, ids=[f"{p['law']}-{p.get('source', '')}" for p in FAMILIES])
def test_coherence_matches_monte_carlo(params):
    fam = make_family("so2-accumulated", dim=6, **params)
    rng = np.random.default_rng(11)
    q = rng.normal(size=6)
    k = rng.normal(size=6)
    n, samples = 12, 20000
    vals = fam.sample(rng, n, samples).bilinear(q, k)  # (samples, n+1)
    assert_within(vals.mean(0)[1:], vals.std(0, ddof=1)[1:] / math.sqrt(samples), so2.coherence(plane_angles(fam), n, q, k)[1:], BUDGET)
    assert so2.coherence(plane_angles(fam), n, q, k)[0] == pytest.approx(q @ k)


def test_mean_product_matrix_matches_dense_monte_carlo():
    fam = make_family("so2-accumulated", dim=4, law="token", source="markov", vocab=4, stay=0.5)
    rng = np.random.default_rng(5)
    mats = fam.sample(rng, 3, 20000).dense()
    prod = mats[:, 2] @ mats[:, 1] @ mats[:, 0]
    assert_within(prod.mean(0), prod.std(0, ddof=1) / math.sqrt(20000), so2.mean_product(plane_angles(fam), 3), BUDGET)


@pytest.mark.parametrize("params", [dict(law="gaussian", mu=0.4, sigma=0.4), dict(law="uniform", a=math.pi),
                                    dict(law="token", source="iid", vocab=5), dict(law="token", source="markov", stay=0.8, vocab=5),
                                    dict(law="lattice", m=2)],
                         ids=["gaussian", "uniform-pi", "token-iid", "token-markov", "lattice"])
def test_far_second_moment_matches_monte_carlo(params):
    fam = make_family("so2-accumulated", dim=8, **params)
    rng = np.random.default_rng(21)
    q, k = rng.normal(size=8), rng.normal(size=8)
    s = fam.sample(rng, 6, 40000).bilinear(q, k)[:, -1] ** 2
    assert_within(s.mean(), s.std(ddof=1) / math.sqrt(s.size), so2.far_second_moment(plane_angles(fam), 6, q, k), BUDGET)


def test_rope_is_deterministic_and_uniform_angles_reach_the_block_limit():
    fam = make_family("rope", dim=8, base=50.0)
    rng = np.random.default_rng(2)
    q, k = rng.normal(size=8), rng.normal(size=8)
    s = fam.sample(rng, 9, 1).bilinear(q, k)[0]
    np.testing.assert_allclose(so2.coherence(plane_angles(fam), 9, q, k), s, atol=1e-12)
    assert so2.far_second_moment(plane_angles(fam), 9, q, k) == pytest.approx(s[-1] ** 2, abs=1e-12)
    uni = make_family("so2-accumulated", dim=8, law="uniform", a=math.pi)
    want = np.sum(np.abs(planes(q)) ** 2 * np.abs(planes(k)) ** 2) / 2
    assert so2.far_second_moment(plane_angles(uni), 3, q, k) == pytest.approx(want, rel=1e-12)
    assert so2.far_second_moment_limit(q, k) == pytest.approx(want, rel=1e-12)


def test_lattice_two_point_law_keeps_coherent_magnitude():
    fam = make_family("so2-accumulated", dim=4, law="lattice", m=2)
    np.testing.assert_allclose(so2.coherence(plane_angles(fam), 5)[1:], 0.0, atol=1e-15)  # the mean vanishes ...
    np.testing.assert_allclose(so2.transfer_rate(plane_angles(fam), 2), 1.0)  # ... but e^{2 i Theta} never decays
    q = np.array([1.0, 0, 0, 0])
    assert so2.far_second_moment(plane_angles(fam), 50, q, q) == pytest.approx(1.0)  # |q^T P q| = 1 forever


def test_markov_transfer_rate_is_the_decay_of_the_path_characteristic():
    fam = make_family("so2-accumulated", dim=4, law="token", source="markov", stay=0.9, vocab=4)
    n = np.arange(2000, 3001)
    psi = np.abs(so2.path_characteristic(plane_angles(fam), 3000))[n]
    # |psi(n)|^(1/n) -> spectral radius of P D (max over a window: two eigenvalues of similar modulus beat)
    np.testing.assert_allclose(np.max(psi ** (1.0 / n[:, None]), axis=0), so2.transfer_rate(plane_angles(fam)), rtol=2e-3)
    iid = make_family("so2-accumulated", dim=4, law="token", source="iid", vocab=4)
    np.testing.assert_allclose(so2.transfer_rate(plane_angles(iid)), np.abs(so2.plane_characteristic(plane_angles(iid))), rtol=1e-10)


@pytest.mark.parametrize("params", [dict(law="gaussian", sigma=0.6, mu=0.3), dict(law="vonmises", kappa=2.0)],
                         ids=["gaussian", "vonmises"])
def test_far_mass_terms_match_monte_carlo(params):
    fam = make_family("so2-accumulated", dim=8, **params)
    rng = np.random.default_rng(8)
    q, k = rng.normal(size=8), rng.normal(size=8)
    q *= 1.2 / np.linalg.norm(q)  # non-unit q != k: the plane coefficients c_b have phases alpha_b != 0
    k *= 0.8 / np.linalg.norm(k)
    s0 = 3.0
    terms, limit = so2.far_mass_terms(plane_angles(fam), 40, s0, q, k)
    x = np.exp(s0 * fam.sample(rng, 40, 40000).bilinear(q, k)[:, 1:] - s0)
    idx = np.array([0, 1, 4, 39])
    assert_within(x.mean(0)[idx], x.std(0, ddof=1)[idx] / math.sqrt(x.shape[0]), np.pad(terms, (0, 40 - terms.size), constant_values=limit)[idx], BUDGET)


@pytest.mark.parametrize("sigma, mu", [(0.5, 0.0), (0.2, 0.3)])
def test_far_mass_tail_shortcut_equals_direct_summation(sigma, mu):
    """The exact terms stop at the lag D where every plane's j-th term 2 I_j/I_0 |phi_j|^D is under 1e-17: with
    |phi_j| = exp(-j^2 sigma^2 / 2) the slowest is j = 1, D = log(1e-17 / w_1) / log|phi_1| (1953 lags at sigma 0.2;
    a cut set by the fast high orders instead stops near 37, where f(D) is still far from f(inf))."""
    fam = make_family("so2-accumulated", dim=8, law="gaussian", sigma=sigma, mu=mu)
    terms, limit = so2.far_mass_terms(plane_angles(fam), 10**6, 4.0)
    assert terms.size < 2000 and terms[-1] == pytest.approx(limit, rel=1e-14)
    end = 3 * terms.size
    sizes = [1, 10, terms.size, end]
    direct = [np.sum(np.pad(terms, (0, end))[:n]) + max(0, n - terms.size) * limit for n in sizes]
    np.testing.assert_allclose(so2.far_mass(plane_angles(fam), sizes, 4.0), direct, rtol=1e-12)
    np.testing.assert_allclose(so2.far_mass(plane_angles(fam), [3], 4.0, slope=0.5),
                               np.sum(terms[:3] * np.exp(-0.5 * np.arange(1, 4))), rtol=1e-12)
    with pytest.raises(NoClosedForm):
        so2.far_mass(plane_angles(make_family("so2-accumulated", law="token")), [10], 4.0)


@pytest.mark.parametrize("params", [dict(law="gaussian", mu=0.3, sigma=0.5), dict(law="vonmises", mu=-0.4, kappa=2.5),
                                    dict(law="wrapped-cauchy", mu=0.5, gamma=0.3), dict(law="uniform", a=1.3),
                                    dict(law="token", source="markov", vocab=4, stay=0.6), dict(law="lattice", m=3),
                                    dict(name="rope", base=50.0)],
                         ids=["gaussian", "vonmises", "wrapped-cauchy", "uniform", "token-markov", "lattice", "rope"])
def test_far_second_moment_curve_is_the_pointwise_second_moment(params):
    """The one-pass curve (diagonals replaced in the squared sums) against ``far_second_moment`` at every lag, the
    plain double sum over plane pairs of ``pair_characteristics``; 3 planes, nonzero mean angles, non-unit q != k
    whose plane coefficients c_b are complex with |c_b| != 1 (so c_b, c_b^2 and |c_b|^2 all differ)."""
    params = dict(params)
    fam = make_family(params.pop("name", "so2-accumulated"), dim=6, **params)
    rng = np.random.default_rng(31)
    q, k = 1.7 * rng.normal(size=6), 0.6 * rng.normal(size=6)
    curve = so2.far_second_moment_curve(plane_angles(fam), 7, q, k)
    want = [so2.far_second_moment(plane_angles(fam), t, q, k) for t in range(8)]
    np.testing.assert_allclose(curve, want, rtol=1e-12, atol=1e-14)
    assert curve[0] == pytest.approx(float(q @ k) ** 2, rel=1e-12)


def test_token_second_moment_refuses_a_transfer_computation_past_its_budget(monkeypatch):
    """The token law's second moment needs one V x V transfer matrix per plane pair, (d/2)^2 V^2 numbers: past
    MAX_TRANSFER_ENTRIES it is missing (NoClosedForm), while the coherence's d/2 matrices still fit (here 3 planes,
    V = 4: 144 numbers against a budget of 100; 48 for the coherence)."""
    fam = make_family("so2-accumulated", dim=6, law="token", source="markov", vocab=4, stay=0.5)
    monkeypatch.setattr(so2, "MAX_TRANSFER_ENTRIES", 100)
    assert so2.coherence(plane_angles(fam), 3).shape == (4,)
    with pytest.raises(NoClosedForm, match="needs 9 x 4 x 4 entries"):
        so2.far_second_moment_curve(plane_angles(fam), 3)
