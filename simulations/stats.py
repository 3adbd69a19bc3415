"""Thresholds from a false-failure budget.

A check passes when |z| = |measured - predicted| / se <= k.  With a budget alpha for a whole report of m
independent two-sided checks (Bonferroni), each uses k = Phi^{-1}(1 - alpha / (2 m)), so a correct
implementation fails the report with probability at most alpha.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import ndtr, ndtri

from .params import ParamError


def z_threshold(budget: float, n_checks: int = 1) -> float:
    """k such that P(|Z| > k) = budget / n_checks for standard normal Z."""
    if not (0.0 < budget < 1.0):
        raise ParamError(f"budget must lie in (0, 1), got {budget!r}")
    if n_checks < 1:
        raise ParamError(f"n_checks must be >= 1, got {n_checks!r}")
    return float(-ndtri(budget / (2.0 * n_checks)))


def z_scores(measured: np.ndarray, predicted: np.ndarray, stderr: np.ndarray, floor: float = 0.0) -> np.ndarray:
    """(measured - predicted) / sqrt(se^2 + floor^2); ``floor`` absorbs known numerical error (e.g. 1e-12)."""
    return (np.asarray(measured) - np.asarray(predicted)) / np.sqrt(np.asarray(stderr) ** 2 + floor**2)


def within_budget(measured, stderr, predicted, budget: float, floor: float = 0.0) -> tuple[bool, np.ndarray]:
    """Do all points agree with the prediction at a false-failure ``budget`` shared over the points?

    z = (measured - predicted) / sqrt(se^2 + floor^2); passes when max |z| <= z_threshold(budget, #points).
    Returns (passed, z).  The statistical tests use this one rule.
    """
    measured, stderr, predicted = np.broadcast_arrays(*(np.asarray(x, float) for x in (measured, stderr, predicted)))
    z = z_scores(measured, predicted, stderr, floor)
    return bool(np.all(np.abs(z) <= z_threshold(budget, z.size))), z


def first_crossing(curve: np.ndarray, eps: float) -> float:
    """First n with |curve[n] / curve[0]| <= eps, interpolated linearly in log|c| between integer steps.

    curve: (n+1,) coherence c(0..n), c(0) != 0.  Returns inf if the curve never reaches eps on its range;
    for curve = rho^n it returns log(eps) / log(rho) exactly.  Used for the measured onset (estimators) and
    the predicted one (theory.window) alike.
    """
    c = np.abs(np.asarray(curve, dtype=float))
    if c.size == 0 or c[0] == 0:
        raise ValueError("curve must start with a non-zero c(0)")
    mag = np.maximum(c / c[0], 1e-300)
    below = np.flatnonzero(mag <= eps)
    if below.size == 0:
        return math.inf
    n = int(below[0])
    if n == 0:
        return 0.0
    lo, hi = math.log(mag[n - 1]), math.log(mag[n])
    return n - 1 + (lo - math.log(eps)) / (lo - hi)


def weighted_chisq_tails(x: float, weights: np.ndarray) -> tuple[float, float]:
    """(P(Q <= x), P(Q > x)) for Q = sum_k w_k Z_k^2, Z_k i.i.d. standard normal, w_k >= 0 (zeros dropped), by the
    Lugannani-Rice saddlepoint formula (Lugannani & Rice 1980; Butler, "Saddlepoint Approximations with
    Applications", 2007, ch. 1):

        K(s) = -(1/2) sum_k log(1 - 2 w_k s)  (s < 1 / (2 max w)),  K'(s_hat) = x,
        r = sign(s_hat) sqrt(2 (s_hat x - K(s_hat))),  v = s_hat sqrt(K''(s_hat)),
        P(Q > x) = 1 - Phi(r) + phi(r) (1/v - 1/r),  P(Q <= x) = Phi(r) - phi(r) (1/v - 1/r).

    Its relative error in a tail probability down to 1e-9 was at most 16% (lower tail) and 7% (upper) for one
    chi-square with one degree of freedom, 1.4% for eight equal weights and 0.002% for 256 (it shrinks as the
    weights spread; tests/simulations/test_stats.py holds it against ``scipy.stats.chi2``), so a tail probability
    of 1e-8 gives a normal deviate within about 0.03.  At the mean (|r| < 1e-4) the limit
    1/2 -+ k3 / (6 sqrt(2 pi) k2^(3/2)) is used (k_j the cumulants)."""
    from scipy.optimize import brentq  # here, not at the top: ``accum families`` loads this module and starts in < 1 s

    w = np.asarray(weights, dtype=float).ravel()
    if w.size == 0 or np.any(w < 0) or not np.any(w > 0):
        raise ValueError("weights must be >= 0 with at least one positive")
    top = float(np.max(w))
    w, x = w[w > 0] / top, float(x) / top  # Q / max w: the same tails, weights in (0, 1]
    if x <= 0:
        return 0.0, 1.0

    def slope(s: float) -> float:
        return float(np.sum(w / (1.0 - 2.0 * w * s))) - x

    hi = 0.5 * (1.0 - 1e-15)
    s_hat = brentq(slope, -w.size / (2.0 * x), hi, xtol=1e-18, rtol=1e-15, maxiter=500) if slope(hi) > 0 else hi
    k2, k3 = 2.0 * float(np.sum(w**2)), 8.0 * float(np.sum(w**3))
    cgf = -0.5 * float(np.sum(np.log1p(-2.0 * w * s_hat)))
    r = math.copysign(math.sqrt(max(2.0 * (s_hat * x - cgf), 0.0)), s_hat)
    if abs(r) < 1e-4:
        shift = k3 / (6.0 * math.sqrt(2.0 * math.pi) * k2**1.5)
        return 0.5 + shift, 0.5 - shift
    v = s_hat * math.sqrt(2.0 * float(np.sum(w**2 / (1.0 - 2.0 * w * s_hat) ** 2)))
    correction = math.exp(-0.5 * r * r) / math.sqrt(2.0 * math.pi) * (1.0 / v - 1.0 / r)
    return float(ndtr(r) - correction), float(ndtr(-r) + correction)
