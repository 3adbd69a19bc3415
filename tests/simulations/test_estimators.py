"""Estimators against closed forms computed independently here, within k standard errors.

Budget: each test may fail a correct estimator with probability <= 1e-5, split (Bonferroni) over the
points it checks; the whole suite's false-failure probability stays below 1e-3.
"""

import numpy as np
import pytest

from accum.simulations import estimators as est
from accum.simulations.families import make_family
from accum.simulations.params import ParamError
from accum.simulations.stats import within_budget

BUDGET = 1e-5


def estimate_of(mean, stderr):
    return est.Estimate(np.asarray(mean), np.asarray(stderr), 0)


def within(e, predicted, floor=1e-12):
    return within_budget(e.mean, e.stderr, predicted, BUDGET, floor)


def test_householder_coherence_and_product_norm():
    fam = make_family("householder", dim=8, beta=1.0)
    n = np.arange(21)
    ok, z = within(est.coherence(fam, 20, 3000, np.random.default_rng(0)), (1 - 1 / 8) ** n)
    assert ok, z
    ok, z = within(est.mean_product_sq(fam, 8, 600, np.random.default_rng(1)), (1 - 1 / 8) ** (2 * np.arange(9)))
    assert ok, z


def test_gaussian_so2_coherence_onset_and_window():
    sigma = 0.6
    fam = make_family("so2-accumulated", dim=8, sigma=sigma)
    rho = np.exp(-sigma**2 / 2)
    ok, z = within(est.coherence(fam, 30, 3000, np.random.default_rng(2)), rho ** np.arange(31))
    assert ok, z
    ok, z = within(est.onset(fam, 0.1, 60, 3000, np.random.default_rng(3)), np.log(0.1) / np.log(rho))
    assert ok, z
    for t_len in (16, 200):
        ok, z = within(est.window(fam, t_len, 600, np.random.default_rng(t_len)), (1 - rho ** (2 * t_len)) / (1 - rho**2))
        assert ok, (t_len, z)


def test_rope_window_grows_with_context():
    fam = make_family("rope", dim=16)
    widths = [est.window(fam, t, 4, np.random.default_rng(0)).mean for t in (32, 256, 2048)]
    assert widths[0] < widths[1] < widths[2] and widths[2] > 5 * widths[0]


def test_haar_far_variance_is_one_over_d():
    for d in (4, 9):
        e = est.score_gap(make_family("haar", dim=d), 1, 20000, np.random.default_rng(d))
        ok, z = within(e, 1.0)
        assert ok, (d, z)
        assert e.extra["near"] == pytest.approx(1.0)


def test_near_weight_alibi_exact_and_streaming_invariant():
    # nope + ALiBi is deterministic: w(N) = 1 / (1 + sum_{Delta=1}^N e^{-slope Delta}), any chunk size.
    sizes, slope = [3, 50, 400], 0.3
    for chunk in (1, 7, 1000):
        e = est.near_weight(make_family("nope", dim=4), sizes, 2.0, 2, np.random.default_rng(0), alibi_slope=slope, chunk=chunk)
        want = [1 / (1 + np.sum(np.exp(-slope * np.arange(1, n + 1)))) for n in sizes]
        np.testing.assert_allclose(e.mean, want, rtol=1e-12)


def test_near_weight_haar_far_mass_and_bound():
    # Haar steps: q^T P k with P Haar is the first coordinate of a uniform unit vector, (x + 1)/2 ~ Beta((d-1)/2, (d-1)/2);
    # E far mass = N E e^{s0 (x - 1)} by quadrature; the weight obeys the norm bound 1/(1 + N e^{-2 s0}).
    from scipy import integrate, stats
    d, s0, sizes = 6, 3.0, [200, 2000]
    e = est.near_weight(make_family("haar", dim=d), sizes, s0, 200, np.random.default_rng(5), chunk=500)
    beta = stats.beta((d - 1) / 2, (d - 1) / 2)
    mgf = integrate.quad(lambda u: np.exp(s0 * (2 * u - 1)) * beta.pdf(u), 0, 1)[0]
    mass = estimate_of(e.extra["far_mass"], e.extra["far_mass_stderr"])
    ok, z = within(mass, np.array(sizes) * mgf * np.exp(-s0))
    assert ok, z
    assert np.all(e.mean <= 1 / (1 + np.array(sizes) * np.exp(-2 * s0)))


def test_far_residual_exact_finite_n():
    sigma = 0.5
    rho = np.exp(-sigma**2 / 2)
    sizes = np.array([10, 100, 1000])
    want = [(n + 2 * np.sum((n - np.arange(1, n)) * rho ** np.arange(1, n))) / n**2 for n in sizes]
    fam = make_family("so2-accumulated", dim=8, sigma=sigma)
    ok, z = within(est.far_residual(fam, sizes, 1500, np.random.default_rng(6), chunk=64), want)
    assert ok, z
    flat = est.far_residual(fam, sizes, 3, np.random.default_rng(6), value_rotation=False)
    np.testing.assert_allclose(flat.mean, 1.0, rtol=1e-12)


def test_far_residual_generic_path_matches_angle_fast_path():
    # the same angle steps through the dense loop and the complex cumulative-sum form
    from accum.simulations.estimators import _accumulate_values
    from accum.simulations.steps import DenseSteps
    rng = np.random.default_rng(8)
    steps = make_family("so2-accumulated", dim=6).sample(rng, 9, 4)
    u, m = rng.normal(size=(4, 6)), rng.normal(size=6)
    np.testing.assert_allclose(_accumulate_values(steps, u, m), _accumulate_values(DenseSteps(steps.dense()), u, m), atol=1e-12)


def test_drift_fp32_exceeds_fp64():
    out = est.drift(make_family("haar", dim=8), 3000, np.random.default_rng(0))
    assert out["fp64"] < 1e-11 < 1e-7 < out["fp32"]


@pytest.mark.parametrize("call,needle", [
    (lambda f, r: est.coherence(f, 0, 10, r), "n_steps must be an integer >= 1"),
    (lambda f, r: est.coherence(f, 5, 1, r), "n_samples must be an integer >= 2"),
    (lambda f, r: est.onset(f, 1.5, 5, 10, r), "eps must lie in (0, 1)"),
    (lambda f, r: est.near_weight(f, [10, 5], 1.0, 4, r), "far_sizes must be a non-empty increasing list"),
    (lambda f, r: est.near_weight(f, [5], -1.0, 4, r), "s0 must be a finite number > 0"),
    (lambda f, r: est.near_weight(f, [5], 1.0, 4, r, alibi_slope=float("nan")), "alibi_slope"),
    (lambda f, r: est.far_residual(f, [], 4, r), "far_sizes"),
    (lambda f, r: est.window(f, 0, 8, r), "context must be an integer >= 1"),
    (lambda f, r: est.score_gap(f, 0, 8, r), "offset must be an integer >= 1"),
    (lambda f, r: est.near_weight(f, [5], 1.0, 4, r, chunk=0), "chunk must be an integer >= 1"),
])
def test_bad_estimator_arguments(call, needle):
    with pytest.raises(ParamError) as err:
        call(make_family("haar", dim=3), np.random.default_rng(0))
    assert needle in str(err.value)


def test_estimates_are_reproducible_from_the_seed():
    fam = make_family("householder", dim=5)
    a = est.coherence(fam, 6, 40, np.random.default_rng(9))
    b = est.coherence(fam, 6, 40, np.random.default_rng(9))
    assert np.array_equal(a.mean, b.mean) and np.array_equal(a.stderr, b.stderr)
