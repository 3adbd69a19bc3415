"""Control variates (``montecarlo.CoMoments``, ``montecarlo.controlled_mean``; ``theory.controls``): the running
co-moments, the regression estimator against plain least squares, the controls' exact means against the closed forms
they sum, and -- the point of it all -- that a controlled estimate's reported standard error stays honest where it is
used: replicate dispersion through the streaming estimators (batches merged, chunks carried) and the verdict's
``stderr_ratio``, as ``accum verify``'s standard-error rows check the plain estimators.

Budget: each statistical test may fail correct code with probability <= 1e-5 (Bonferroni over its points), like
test_estimators.py.
"""

import numpy as np
import pytest
from scipy import stats as sps

from accum.simulations import estimators as est
from accum.simulations import montecarlo as mc
from accum.simulations.families import make_family
from accum.theory import controls, predict
from accum.theory import farmass
from accum.theory.forms import closed_forms
from accum.verdict import stderr_ratio

BUDGET = 1e-5


def two_sided_k(points: int = 1) -> float:
    return float(sps.norm.isf(BUDGET / (2 * points)))


def unit(x):
    return x / np.linalg.norm(x)


@pytest.mark.parametrize("splits", [[500], [1, 499], [3, 250, 7, 240], [125] * 4])
def test_comoments_merge_equals_numpy_covariance(splits):
    x = np.random.default_rng(3).normal(5.0, 1e-3, size=(500, 2, 3)) + np.array([0.0, 1.0, 2.0])  # offset: no cancellation
    co = mc.CoMoments()
    start = 0
    for size in splits:
        co.add(x[start:start + size])
        start += size
    want = np.stack([np.cov(x[:, j, :], rowvar=False) for j in range(2)])
    np.testing.assert_allclose(co.mean, x.mean(axis=0), rtol=1e-14)
    np.testing.assert_allclose(co.cov(), want, rtol=1e-8, atol=1e-18)


def test_controlled_mean_is_least_squares_read_at_the_known_means():
    """Against an explicit least-squares fit of Y on (1, X): the fitted value at X = mu, its standard error
    s sqrt(x0' (A'A)^-1 x0) (x0 = (1, mu)) and n - p - 1 dof."""
    rng = np.random.default_rng(1)
    n, mu = 200, np.array([0.5, -1.0])
    x = rng.normal(size=(n, 2)) + mu
    y = 2.0 + x @ [1.5, -0.7] + rng.standard_t(5, size=n)
    data = np.column_stack([y, x])
    value, se, dof = mc.controlled_mean(data.mean(axis=0), np.cov(data, rowvar=False), n, mu)
    a = np.column_stack([np.ones(n), x])
    coef, *_ = np.linalg.lstsq(a, y, rcond=None)
    s2 = np.sum((y - a @ coef) ** 2) / (n - 3)
    x0 = np.concatenate([[1.0], mu])
    assert value == pytest.approx(x0 @ coef, rel=1e-12)
    assert se == pytest.approx(np.sqrt(s2 * x0 @ np.linalg.solve(a.T @ a, x0)), rel=1e-10)
    assert dof == n - 3


def test_projected_controls_are_the_combinations_of_the_controls():
    rng = np.random.default_rng(9)
    data = rng.normal(size=(60, 4)) @ rng.normal(size=(4, 4))
    w, mu = rng.normal(size=(3, 2)), rng.normal(size=3)
    mean, cov, known = mc.project_controls(data.mean(axis=0), np.cov(data, rowvar=False), mu, w)
    combined = np.column_stack([data[:, 0], data[:, 1:] @ w])
    np.testing.assert_allclose(mean, combined.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(cov, np.cov(combined, rowvar=False), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(known, mu @ w, rtol=1e-12)


def test_a_fixed_coefficient_is_the_plain_mean_of_the_adjusted_values():
    rng = np.random.default_rng(6)
    x = rng.normal(size=(80, 2))
    y = rng.exponential(size=80) + x @ [0.4, -0.2]
    data, b, mu = np.column_stack([y, x]), np.array([0.3, -0.1]), np.array([0.05, 0.0])
    adjusted = y - (x - mu) @ b
    value, se, dof = mc.controlled_mean(data.mean(axis=0), np.cov(data, rowvar=False), 80, mu, b)
    assert value == pytest.approx(adjusted.mean()) and se == pytest.approx(adjusted.std(ddof=1) / np.sqrt(80))
    assert dof == 79


def test_a_control_without_spread_leaves_the_plain_mean():
    """A deterministic control (value rotation off: r = m) is dropped: the plain mean, sd / sqrt(n), n - 1 dof."""
    y = np.random.default_rng(2).exponential(size=50)
    data = np.column_stack([y, np.full(50, 0.3)])
    value, se, dof = mc.controlled_mean(data.mean(axis=0), np.cov(data, rowvar=False), 50, np.array([0.1]))
    assert value == pytest.approx(y.mean()) and se == pytest.approx(y.std(ddof=1) / np.sqrt(50)) and dof == 49


FAMILIES = [("so2-accumulated", {"mu": 0.3, "sigma": 0.5}), ("so2-accumulated", {"law": "token", "source": "markov",
                                                                                    "stay": 0.7}),
            ("so2-accumulated", {"law": "lattice", "m": 2, "offset": 0.4}), ("rope", {}), ("nope", {}),
            ("householder", {"beta": 1.3}), ("householder", {"beta": 2.0, "w": "token", "vocab": 16}),
            ("haar", {}), ("givens", {"sigma": 1.0})]


@pytest.mark.parametrize("name,params", FAMILIES, ids=[f"{n}-{'-'.join(map(str, p.values()))}" for n, p in FAMILIES])
def test_far_score_sums_are_the_closed_forms_summed(name, params):
    """``far_variance_curve`` is ``far_variance`` at every lag; ``far_score_sums`` their sums with the coherence's."""
    fam = make_family(name, dim=8, **params)
    rng = np.random.default_rng(4)
    q, k = unit(rng.normal(size=8)), unit(rng.normal(size=8))
    forms = closed_forms(fam)
    curve = forms.far_variance_curve(12, q, k)
    np.testing.assert_allclose(curve, [forms.far_variance(t, q, k) for t in range(13)], rtol=1e-12, atol=1e-15)
    sums = controls.far_score_sums(fam, [3, 12], q, k)
    c = predict("coherence", fam, steps=12, q=q, k=k)
    np.testing.assert_allclose(sums[:, 0], [c[1:4].sum(), c[1:13].sum()], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(sums[:, 1], [curve[1:4].sum() / 8, curve[1:13].sum() / 8], rtol=1e-12, atol=1e-15)


def test_mean_residual_is_the_sum_of_powers_of_the_step_mean():
    fam = make_family("givens", dim=6, sigma=0.7)
    m = unit(np.arange(1.0, 7.0))
    mean = closed_forms(fam).step_mean()
    want = [sum(np.linalg.matrix_power(mean, j) @ m for j in range(1, n + 1)) / n for n in (1, 5)]
    np.testing.assert_allclose(controls.mean_residual(fam, [1, 5], m), want, rtol=1e-12)
    with pytest.raises(NotImplementedError):
        controls.mean_residual(make_family("so2-accumulated", dim=8, law="token", source="markov"), [3])


def replicates(run, reps: int):
    """(values, reported standard errors) of ``reps`` independent runs, each (J,)."""
    got = [run() for _ in range(reps)]
    return np.array([g[0] for g in got]), np.array([g[1] for g in got])


def assert_honest(values, stderrs, truth):
    """rho = replicate spread / reported error is 1 within k of its own standard error, and the replicates' mean is
    the truth within k of its standard error (the controlled estimate is unbiased at these sizes)."""
    rho, rho_se = stderr_ratio(values, stderrs)
    assert abs(rho - 1.0) <= two_sided_k() * rho_se, (rho, rho_se)
    k = two_sided_k(values.shape[1])
    z = (values.mean(axis=0) - truth) / (values.std(axis=0, ddof=1) / np.sqrt(len(values)))
    assert np.all(np.abs(z) <= k), z
    return rho_se


def test_controlled_far_mass_reports_honest_standard_errors():
    """so2 (d = 16, mu = 0.3, random q != k): 500 replicates of 64 paths in batches of 16 and chunks of 7 steps,
    N = 10 and 40.  The controlled standard error is honest (rho = 1 within 4.4 of its se, about 0.04) and at least
    3x below the plain one, and the mean of the controlled estimates is the closed form."""
    fam = make_family("so2-accumulated", dim=16, mu=0.3, sigma=0.5)
    rng = np.random.default_rng(7)
    q, k = unit(rng.normal(size=16)), unit(unit(rng.normal(size=16)) + 0.5 * unit(rng.normal(size=16)))
    sizes = [10, 40]
    known = controls.far_score_sums(fam, sizes, q, k)
    budget = 16 * mc.stream_floats(mc.step_form(fam), 16, 7, sizes[-1])
    plain_se = []

    def run():
        e = est.near_weight(fam, sizes, 4.0, 64, rng, chunk=7, q=q, k=k, batch_floats=budget)
        value, se, dof = mc.controlled_mean(e.controls_mean, e.controls_cov, e.n, known)
        assert dof == 61
        plain_se.append(e.far_mass_stderr)
        return value, se

    values, stderrs = replicates(run, 500)
    assert_honest(values, stderrs, predict("far-mass", fam, far_sizes=sizes, s0=4.0, q=q, k=k))
    assert np.all(np.mean(plain_se, axis=0) > 3 * stderrs.mean(axis=0))


def test_controlled_residual_reports_honest_standard_errors():
    """givens (d = 8: the dense value recurrence), random unit m, the one control E r . r (as ``check_values`` uses
    it): 500 replicates of 96 paths in batches of 16 and chunks of 7 steps, N = 5 and 20."""
    fam = make_family("givens", dim=8, sigma=1.0)
    rng = np.random.default_rng(8)
    m = unit(rng.normal(size=8))
    sizes = [5, 20]
    known = controls.mean_residual(fam, sizes, m)
    budget = 16 * mc.stream_floats(mc.step_form(fam), 8, 7, sizes[-1])

    def run():
        e = est.far_residual(fam, sizes, 96, rng, chunk=7, m=m, batch_floats=budget)
        mean, cov, along = mc.project_controls(e.controls_mean, e.controls_cov, known, known[..., None])
        value, se, dof = mc.controlled_mean(mean, cov, e.n, along)
        assert dof == 94
        return value, se

    values, stderrs = replicates(run, 500)
    assert_honest(values, stderrs, predict("far-residual", fam, far_sizes=sizes, m=m))


def test_controlled_transient_agrees_with_the_closed_form_and_shrinks_its_error():
    """Householder reflections on the sphere (closed far mass, coherence and second moment): the estimated far mass
    with controls is the closed form within k se, with a standard error at least 3x below the plain one."""
    f = make_family("householder", dim=16, beta=2.0)
    rng = np.random.default_rng(3)
    q, k = unit(rng.normal(size=16)), unit(rng.normal(size=16) + 2.0)
    forms = closed_forms(f)
    lags = farmass.transient_lags(forms.mixing_rate())
    known = (forms.coherence(lags, q, k)[1:], forms.far_variance_curve(lags, q, k)[1:] / 16)
    plain = farmass.mixing_far_mass(f, forms.mixing_rate(), [10, 1000], 4.0, np.random.default_rng(5), 1000, q, k)
    value, se, n, dof = farmass.mixing_far_mass(f, forms.mixing_rate(), [10, 1000], 4.0, np.random.default_rng(5), 1000,
                                                q, k, controls=known)
    exact = farmass.householder_far_mass(f, [10, 1000], 4.0, q, k)
    assert n == 1000 and dof == 997 and np.all(np.abs(value - exact) <= two_sided_k(2) * se)
    assert np.all(plain[1] > 3 * se)
