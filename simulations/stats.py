"""Thresholds from a false-failure budget.

A check passes when |z| = |measured - predicted| / se <= k.  With a budget alpha for a whole report of m
independent two-sided checks (Bonferroni), each uses k = Phi^{-1}(1 - alpha / (2 m)), so a correct
implementation fails the report with probability at most alpha.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import ndtri

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
