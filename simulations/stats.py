"""Thresholds from a false-failure budget.

A check passes when |z| = |measured - predicted| / se <= k.  With a budget alpha for a whole report of m
independent two-sided checks (Bonferroni), each uses k = Phi^{-1}(1 - alpha / (2 m)), so a correct
implementation fails the report with probability at most alpha.
"""

from __future__ import annotations

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
