"""Null laws of the U-statistics whose kernel is degenerate: where the steps are i.i.d. with E[A] = 0 (Haar, the
m = 2 lattice), every E[P_n] = E[A]^n = 0 and an unbiased estimate of a squared mean has no first-order (Hajek) term.

With M samples X_i of a mean-zero vector, M (M - 1) U = ||sum X_i||^2 - sum ||X_i||^2, so

    (M - 1) U  ->  Q - sum_k w_k,   Q = sum_k w_k Z_k^2,   Z_k i.i.d. N(0, 1),

w the eigenvalues of Cov(X) (Serfling, "Approximation Theorems of Mathematical Statistics", 1980, sec. 5.5.2): a
weighted chi-square, skewed and bounded below, where neither U's normal limit nor the jackknife's error holds (the
jackknife's error scales with the realized |mean X|, so a realized mean near 0 gives a tiny error and a huge z).
The V-statistic M |mean X|^2 = (M - 1) U + sum ||X_i||^2 / M tends to Q itself, and is >= 0 as Q is: at a few
weights the U-statistic's own finite-sample values can fall below the limit's bound -sum w (a probability of 0, a
deviate of -inf), the V-statistic's cannot.  The window rows use it (``window_statistic``); the product norm's rows
use (M - 1) U + sum w, their estimator keeping no sum of squares (with d^2 weights, or one per plane at the m = 2
lattice, that bound lies far in the tail: their null was measured in ``tests/verify/test_quantitychecks.py`` and
docs/verify.md).  ``deviates`` maps each point's probability P(Q <= value) under that law
to a standard normal deviate, judged as N(0, 1).

The covariances come from the closed-form one-step second moment S = E[A (x) A] (``ClosedForms.pair_operator``,
numpy's ``kron`` layout): E[P_n (x) P_n] = S^n for i.i.d. steps, since (AB) (x) (AB) = (A (x) A)(B (x) B).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.special import ndtri

from accum.simulations import estimators as est
from accum.simulations.families import Family
from accum.simulations.stats import weighted_chisq_tails
from accum.theory import NoClosedForm
from accum.theory.forms import closed_forms

#: E[A] counts as zero below this entry size (rounding of a closed form such as cos(pi / 2))
ZERO_MEAN_TOL = 1e-12


def pair_powers(family: Family, steps: int) -> list[np.ndarray] | None:
    """[S, S^2, ..., S^steps] (each (d^2, d^2)), S = E[A (x) A], where the steps are i.i.d. with a closed-form E[A]
    that is zero (to ``ZERO_MEAN_TOL``) and a closed-form S; None otherwise (the row keeps its jackknife)."""
    if not getattr(family, "iid_steps", True):
        return None
    forms = closed_forms(family)
    try:
        if np.max(np.abs(forms.step_mean())) > ZERO_MEAN_TOL:
            return None
        pair = forms.pair_operator()
    except NoClosedForm:
        return None
    power, out = np.eye(family.dim**2), []
    for _ in range(steps):
        power = pair @ power
        out.append(power)
    return out


def product_weights(family: Family, steps: int) -> np.ndarray | None:
    """The eigenvalues (steps, d^2) of Cov(vec P_n) = E[P_n (x) P_n] = S^n, n = 1..steps, read as E[P_ij P_kl] at
    row (i, j), column (k, l): the weights of ||E P_n||_F^2's U-statistic (X = vec P_n).  None as ``pair_powers``."""
    powers = pair_powers(family, steps)
    if powers is None:
        return None
    d, out = family.dim, []
    for power in powers:
        cov = power.reshape(d, d, d, d).transpose(0, 2, 1, 3).reshape(d * d, d * d)
        out.append(np.clip(np.linalg.eigvalsh(0.5 * (cov + cov.T)), 0.0, None))
    return np.array(out)


def score_weights(family: Family, lags: Sequence[int], q: np.ndarray, k: np.ndarray) -> np.ndarray | None:
    """E[s_Delta^2] = (q (x) q)^T S^Delta (k (x) k) for each Delta in ``lags`` (all >= 1), s_Delta = q^T P_Delta k.

    The weights of sum_Delta c(Delta)^2's U-statistic over the offsets of one path (the window's): the scores of one
    path at different lags are uncorrelated when E[A] = 0 (E[s_j | P_i] = q^T E[A]^{j-i} P_i k = 0 for j > i), so
    their sample means are asymptotically independent normals, one weight each.  None as ``pair_powers``."""
    lags = [int(x) for x in lags]
    powers = pair_powers(family, max(lags, default=0))
    if powers is None:
        return None
    qq, kk = np.kron(q, q), np.kron(k, k)
    return np.array([float(qq @ powers[lag - 1] @ kk) for lag in lags])


def window_statistic(total: np.ndarray, total_sq: np.ndarray, n: int, near: float, start: int) -> float:
    """M sum_{Delta >= start} mean(s_Delta)^2 from the paths' sums S and sums of squares SS at each lag (T,), read
    through the window's own unbiased width ``estimators.window_width`` W_start (the U-statistic):
    (M - 1) near^2 W_start + sum_{Delta >= start} SS_Delta / M = sum S_Delta^2 / M; its null law where E[A] = 0 is
    sum w_Delta Z_Delta^2 (``score_weights`` over the same lags)."""
    width = est.window_width(total, total_sq, n, near, start)
    return float((n - 1) * near**2 * width + np.sum(np.asarray(total_sq, float)[start:]) / n)


def deviates(values: Sequence[float], weights: Sequence[np.ndarray]) -> np.ndarray:
    """Normal deviates Phi^{-1}(P(Q <= value)) of each point's statistic, Q = sum_k w_k Z_k^2 with that point's
    ``weights`` w (module docstring; tails by ``stats.weighted_chisq_tails``), the smaller tail read so that both
    ends keep their precision."""
    out = []
    for value, w in zip(np.atleast_1d(np.asarray(values, float)), weights):
        lower, upper = weighted_chisq_tails(float(value), np.asarray(w, float))
        out.append(float(ndtri(lower)) if lower < 0.5 else -float(ndtri(upper)))
    return np.array(out)


def window_deviates(family: Family, rng: np.random.Generator, contexts: Sequence[int], counts: Sequence[int],
                    q: np.ndarray, k: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, list[int], list[float]]:
    """The window rows' deviates where E[A] = 0: W(T) at each T of ``contexts`` (counts[i] fresh paths of T steps,
    statistic over lags 1..T-1) and the paired growth W(T_max) - W(T_min) (counts[-1] paths of T_max steps, lags
    T_min..T_max-1), each ``window_statistic`` judged by ``deviates`` with the ``weights`` (E[s_Delta^2], Delta =
    1..T_max - 1, ``score_weights``) of its lags.  Returns the deviates (len(contexts) + 1,), the paths drawn and
    each point's ``deviate_slope``."""
    near, t_min, t_max = float(q @ k), contexts[0], contexts[-1]
    values, lags, paths = [], [], []
    for t, start, count in [*((t, 1, c) for t, c in zip(contexts, counts)), (t_max, t_min, counts[-1])]:
        sums, squares, sizes = est.last_row_sums(family, t, count, rng, q, k, least=4)
        values.append(window_statistic(sums.sum(0), squares.sum(0), int(sizes.sum()), near, start))
        lags.append(weights[start - 1:t - 1])
        paths.append(int(sizes.sum()))
    return deviates(values, lags), paths, [deviate_slope(w, m * near**2) for w, m in zip(lags, paths)]


def deviate_slope(weights: np.ndarray, gain: float) -> float:
    """How far the deviate moves per unit of the quantity, by Q's normal approximation: a departure e shifts the
    statistic by ``gain`` e (the window: M (q.k)^2 per unit of W), Q's sd is sqrt(2 sum w^2).  A row's detectable
    error is then its threshold over this (``verdict``'s ``effect_scale``, the deviates' standard error being 1)."""
    return float(gain / math.sqrt(2.0 * np.sum(np.square(weights))))
