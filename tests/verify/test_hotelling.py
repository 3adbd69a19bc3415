"""``routechecks.hotelling`` (the sampler's E[A] held to the closed form by Hotelling's T^2): the statistic against
a plain computation, its null law (p-values uniform, also with constant and tied coordinates), its power against
the noncentral F, and the constant directions held exactly."""

import numpy as np
import pytest
from scipy import stats as sps

from accum.routechecks import hotelling


def sums(y: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """The sums ``hotelling`` takes, accumulated in three uneven batches (as the check does)."""
    total, outer = np.zeros(y.shape[1]), np.zeros((y.shape[1], y.shape[1]))
    for part in np.array_split(y, [7, 40]):
        total += part.sum(axis=0)
        outer += part.T @ part
    return total, outer, len(y)


def test_statistic_matches_the_plain_formula_on_full_rank_rows():
    rng = np.random.default_rng(1)
    n, p = 203, 5
    mix = rng.normal(size=(p, p))  # correlated, unequal variances, a nonzero mean
    y = rng.normal(size=(n, p)) @ mix + np.array([0.1, -0.2, 0.0, 0.05, 0.3])
    ybar, cov = y.mean(axis=0), np.cov(y, rowvar=False)
    t2 = n * ybar @ np.linalg.solve(cov, ybar)
    want = sps.f.sf((n - p) * t2 / (p * (n - 1)), p, n - p)
    p_value, rank, constant, _ = hotelling(*sums(y))
    assert rank == p and constant == 0.0
    assert p_value == pytest.approx(want, rel=1e-9)


def structured_rows(rng: np.random.Generator, n: int) -> np.ndarray:
    """(n, 7) rows with mean 0: 4 free coordinates (non-normal: centred exponentials and uniforms), one tied to
    another (the same number twice, as cos sits twice in an SO(2) block), one the difference of two, one always 0."""
    free = np.column_stack([rng.exponential(size=n) - 1, rng.uniform(-1, 1, n), rng.normal(size=n),
                            rng.exponential(size=n) - 1])
    return np.column_stack([free, free[:, 1], free[:, 0] - free[:, 3], np.zeros(n)])


def test_p_values_are_uniform_under_the_null_with_constant_and_tied_coordinates():
    """500 replicates of 400 non-normal rows in 7 coordinates of rank 4: KS against U(0, 1) at a 0.1% level (a
    fixed seed; a statistic with the wrong rank or scale is far outside)."""
    rng = np.random.default_rng(2)
    p_values, ranks, constants, _ = zip(*(hotelling(*sums(structured_rows(rng, 400))) for _ in range(500)))
    assert set(ranks) == {4}
    assert max(constants) < 1e-12
    assert sps.kstest(p_values, "uniform").pvalue > 1e-3


def test_power_follows_the_noncentral_f():
    """A mean shift delta on normal rows with covariance I: T^2 has noncentrality n |delta|^2; the rejection rate
    at 1% over 400 replicates is within its 99.9% binomial interval of the noncentral F's."""
    rng = np.random.default_rng(3)
    n, p, lam = 300, 6, 20.0
    delta = np.full(p, np.sqrt(lam / (n * p)))
    rejected = sum(hotelling(*sums(rng.normal(size=(n, p)) + delta))[0] < 0.01 for _ in range(400))
    crit = sps.f.isf(0.01, p, n - p)
    want = sps.ncf.sf(crit, p, n - p, lam)
    lo, hi = sps.binom.interval(0.999, 400, want)
    assert lo <= rejected <= hi, (rejected, 400 * want)


def test_an_error_along_a_constant_direction_is_returned_exactly():
    rng = np.random.default_rng(4)
    y = structured_rows(rng, 300)
    y[:, 6] += 2.5e-3  # the always-0 coordinate predicted wrongly
    _, rank, constant, _ = hotelling(*sums(y))
    assert rank == 4 and constant == pytest.approx(2.5e-3, rel=1e-9)


def test_too_few_rows_is_an_error():
    y = np.random.default_rng(5).normal(size=(4, 6))
    with pytest.raises(ValueError, match="more rows \\(4\\) than coordinates \\(6\\)"):
        hotelling(*sums(y))


def test_a_direction_varying_below_the_rank_tolerance_reports_its_standard_error():
    """A coordinate whose spread (1e-6) is under rank_tol (1e-10) times the largest variance is counted constant,
    but its mean still moves by its standard error: the returned se is sd / sqrt(n) of that coordinate (a truly
    constant one adds nothing), so an exact row can allow for it (``constant_floor``)."""
    rng = np.random.default_rng(6)
    n = 500
    y = structured_rows(rng, n)
    slow = 1e-6 * rng.normal(size=n)
    _, rank, constant, constant_se = hotelling(*sums(np.column_stack([y, slow])))
    assert rank == 4
    # the slow direction's eigenvalue is its variance left after regressing on the 4 free coordinates (R^2 ~ 4/n)
    assert constant_se == pytest.approx(slow.std(ddof=1) / np.sqrt(n), rel=0.05)
    assert 1e-10 < constant < 5 * constant_se
    # truly constant directions: only the eigenvalues' rounding, about sqrt(p eps max(lambda) / n)
    assert hotelling(*sums(y))[3] < np.sqrt(8 * np.finfo(float).eps * 2 / n)
