"""``accum.degenerate``: the weights of the degenerate U-statistics where E[A] = 0, by hand and against the engine's
own draws, and the window rows judged by their law: the null holds, and a family with E[A] != 0 keeps the jackknife."""

from __future__ import annotations

import numpy as np
from scipy.stats import chi2, norm

from accum.claims import check_window, probe_pair
from accum.degenerate import deviates, pair_powers, product_weights, score_weights
from accum.simulations import estimators as est
from accum.simulations.families import make_family

HAAR = make_family("haar", dim=4)
LATTICE = make_family("so2-accumulated", dim=6, law="lattice", m=2, offset=0.4)


def test_the_zero_mean_law_of_haar_and_the_lattice_by_hand():
    """Haar: E[A_ij A_kl] = delta_ik delta_jl / d, so Cov(vec P_n) = I / d (d^2 weights 1/d at every n).  The m = 2
    lattice: each plane's block is s_b R(n offset) with an independent sign s_b, so vec P_n = sum_b s_b vec(R_b) and
    Cov(vec P_n) has one weight ||R_b||_F^2 = 2 per plane, the rest 0."""
    haar = product_weights(HAAR, 3)
    assert haar.shape == (3, 16) and np.allclose(haar, 0.25)
    lattice = product_weights(LATTICE, 2)
    assert np.allclose(np.sort(lattice, axis=1), [[0.0] * 33 + [2.0] * 3] * 2)


def test_only_iid_zero_mean_steps_with_a_closed_form_get_the_law():
    assert pair_powers(make_family("so2-accumulated", dim=6, mu=0.3), 2) is None  # E[A] != 0
    assert pair_powers(make_family("householder", dim=4, beta=1.0), 2) is None  # E[A] = (1 - 1/d) I
    assert score_weights(make_family("rope", dim=4), [1], np.ones(4), np.ones(4)) is None


def test_the_score_weights_are_haars_by_hand_and_the_lattices_second_moments():
    """E[s_Delta^2], s_Delta = q^T P_Delta k: Haar's P_Delta is Haar, so |q|^2 |k|^2 / d at every lag; the lattice's
    against the mean of s^2 over 40000 of the engine's own paths (the scores at lags 1..3 of ``last_row_sums``), within
    five standard errors of that mean."""
    rng = np.random.default_rng(3)
    q, k = probe_pair(4, rng)
    assert np.allclose(score_weights(HAAR, [1, 2, 5], q, k), (q @ q) * (k @ k) / 4)
    q, k = probe_pair(6, rng)
    w = score_weights(LATTICE, [1, 2, 3], q, k)
    sums, squares, sizes = est.last_row_sums(LATTICE, 4, 40000, rng, q, k)
    n = sizes.sum()
    second = squares.sum(0)[1:] / n
    assert w.shape == (3,) and np.all(w > 0) and np.ptp(w) > 0.05 * w.max()  # lags differ: no constant passes
    # sd of the mean of s^2 from the paths' own fourth moments is not kept; s^2 <= |q|^2 |k|^2 bounds it
    bound = (q @ q) * (k @ k) / np.sqrt(n)
    assert np.all(np.abs(second - w) < 5 * bound)


def test_deviates_are_the_normal_quantiles_of_the_chi_square_law():
    """Equal weights w (k of them): Q = w chi2_k, so each deviate is Phi^{-1} of chi2_k's cdf (scipy's, an outside
    value) at Q / w, in both tails; within 0.06 for one weight (the saddlepoint is least exact for
    chi2_1: 0.05 at its 5% point), 0.02 for more."""
    for k_weights, w in ((1, 3.0), (3, 0.2), (15, 1.0)):
        points = chi2.ppf([1e-4, 0.05, 0.5, 0.95, 1 - 1e-4], k_weights)
        got = deviates(w * points, [np.full(k_weights, w)] * len(points))
        assert np.allclose(got, norm.ppf([1e-4, 0.05, 0.5, 0.95, 1 - 1e-4]), atol=0.06 if k_weights == 1 else 0.02), (k_weights, got)


def test_the_window_rows_on_haar_are_judged_by_their_law_and_hold_its_null():
    """On Haar (E[A] = 0, every c(Delta >= 1) = 0) the window and growth rows hold normal deviates of the degenerate
    U-statistics' law (the jackknife's t15 put W(4) at z -6.4 once in 300 calibration reports); over 150 seeds at
    small sizes the 600 deviates have mean 0 and sd 1 (limits at about five standard errors: a false failure well
    under 1e-4).  A family with E[A] != 0 keeps the jackknife rows."""
    z = []
    for seed in range(150):
        rows = check_window(HAAR, np.random.default_rng(seed), contexts=(2, 4, 8), samples=160, theory_samples=10)
        assert all("weighted chi-square" in r.what and r.reference == "normal" for r in rows)
        z.append(np.concatenate([np.atleast_1d(r.measured) for r in rows]))
    z = np.concatenate(z)
    assert z.size == 600 and abs(z.mean()) < 0.2 and abs(z.std() - 1.0) < 0.15
    rows = check_window(make_family("so2-accumulated", dim=6, mu=0.3), np.random.default_rng(0), contexts=(2, 4, 8),
                        samples=160, theory_samples=10)
    assert all("chi-square" not in r.what and r.reference == "t" and r.dof == 15 for r in rows)
