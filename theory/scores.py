"""Far scores from high-dimensional concentration (C4): second moments, tails, and the score gap.

Haar (paper, C4: far scores ~ N(0, |q|^2 |k|^2 / d)).  For P Haar on O(d) or SO(d), d >= 2,
s = q^T P k has the law of |q||k| u_1 with u uniform on S^{d-1}, so
    E s = 0,   E s^2 = |q|^2 |k|^2 / d,   u_1^2 ~ Beta(1/2, (d-1)/2),
    P(|s| >= t |q||k|) = I_{1-t^2}((d-1)/2, 1/2)        (exact; regularised incomplete beta),
    P(|s| >= t |q||k|) <= 2 exp(-d t^2 / 2)             (cap bound, K. Ball, "An elementary introduction
                                                         to modern convex geometry", Lemma 2.2).
SO(2) blocks with independent planes: s - E s = sum_b (|c_b| cos(Theta_b + alpha_b) - mean), each term in
an interval of length 2|c_b|, so Hoeffding gives P(|s - E s| >= t) <= 2 exp(-t^2 / (2 sum_b |c_b|^2))
(reconstruction; for q = k = 1/sqrt(d), sum_b |c_b|^2 = 2/d and the bound is 2 exp(-d t^2 / 4)).

Score gap.  With unit q = k the near score is q.k = 1 while each far score is at scale 1/sqrt(d): the gap
is sqrt(d) far standard deviations.  A union bound over N far scores (no independence needed, only the
marginal law) gives: with probability >= 1 - delta every far score satisfies
    |s| <= t_N = sqrt(2 log(2 N / delta) / d)  (Haar cap bound),
so the near-far gap is at least 1 - t_N (reconstruction of the paper's "score gap as a function of d").
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import scipy.special as sp
from scipy.optimize import brentq

from accum.simulations.params import ParamError, field_error


def far_variance(q_norm: float, k_norm: float, d: int) -> float:
    """E s^2 = |q|^2 |k|^2 / d for a Haar far transport (and E s = 0)."""
    if d < 1:
        raise field_error("d", f"must be >= 1, got {d}")
    return (q_norm * k_norm) ** 2 / d


def far_score_density(s: Any, q_norm: float, k_norm: float, d: int) -> np.ndarray:
    """C4's far-score law N(0, v), v = |q|^2 |k|^2 / d (``far_variance``), as a density at s:
    exp(-s^2 / (2 v)) / sqrt(2 pi v).  The law far scores concentrate to (paper, C4); exact in the limit of many
    steps for Haar-like mixing, not at a finite offset."""
    v = far_variance(q_norm, k_norm, d)
    s = np.asarray(s, dtype=float)
    return np.exp(-s * s / (2.0 * v)) / math.sqrt(2.0 * math.pi * v)


def block_far_variance(c: np.ndarray, psi1: np.ndarray, psi2: np.ndarray) -> float:
    """E s^2 for s = sum_b Re(c_b e^{i Theta_b}) with independent planes, psi1_b = E e^{i Theta_b}, psi2_b = E e^{2i Theta_b}.

    E s^2 = (sum_b Re(c_b psi1_b))^2 - sum_b Re(c_b psi1_b)^2 + sum_b (|c_b|^2 + Re(c_b^2 psi2_b)) / 2
    (cross terms factorise; Re(x)^2 = (|x|^2 + Re(x^2)) / 2 within a plane).  Reconstruction.
    """
    c, psi1, psi2 = (np.asarray(x, dtype=complex) for x in (c, psi1, psi2))
    mean_b = (c * psi1).real
    return float(mean_b.sum() ** 2 - np.sum(mean_b**2) + np.sum(np.abs(c) ** 2 + (c**2 * psi2).real) / 2.0)


def haar_tail(t: Any, d: int) -> np.ndarray:
    """Exact P(|u_1| >= t), u uniform on S^{d-1} (d >= 2): I_{1-t^2}((d-1)/2, 1/2) for 0 <= t <= 1."""
    t = np.clip(np.asarray(t, dtype=float), 0.0, 1.0)
    if d < 2:
        raise field_error("d", f"must be >= 2, got {d}")
    return sp.betainc((d - 1) / 2.0, 0.5, 1.0 - t * t)


def haar_tail_bound(t: Any, d: int) -> np.ndarray:
    """Cap bound P(|u_1| >= t) <= min(1, 2 exp(-d t^2 / 2))."""
    t = np.asarray(t, dtype=float)
    return np.minimum(1.0, 2.0 * np.exp(-d * t * t / 2.0))


def hoeffding_tail_bound(t: Any, c: np.ndarray) -> np.ndarray:
    """P(|s - E s| >= t) <= min(1, 2 exp(-t^2 / (2 sum_b |c_b|^2))) for independent SO(2) planes."""
    t = np.asarray(t, dtype=float)
    return np.minimum(1.0, 2.0 * np.exp(-t * t / (2.0 * float(np.sum(np.abs(np.asarray(c)) ** 2)))))


def far_threshold_bound(d: int, n_far: int, delta: float) -> float:
    """t_N = sqrt(2 log(2 N / delta) / d): P(max_j |u_1^{(j)}| > t_N) <= delta by the cap bound and a union bound."""
    if not (0.0 < delta < 1.0) or n_far < 1:
        raise ParamError("need {n_far} >= 1 and 0 < {delta} < 1", ("n_far", "delta"))
    return math.sqrt(2.0 * math.log(2.0 * n_far / delta) / d)


def far_threshold_exact(d: int, n_far: int, delta: float) -> float:
    """Smallest t with N P(|u_1| >= t) <= delta (union bound with the exact beta tail); 1 if none below 1."""
    if n_far * haar_tail(1.0 - 1e-15, d) > delta:
        return 1.0
    return float(brentq(lambda t: n_far * haar_tail(t, d) - delta, 0.0, 1.0 - 1e-15, xtol=1e-14))


def score_gap(d: int, n_far: int, delta: float, near: float = 1.0, exact: bool = True) -> float:
    """Lower bound on near - max_j |far_j| holding with probability >= 1 - delta (unit q, k; Haar far laws).

    ``exact`` uses the beta tail in the union bound, otherwise the cap bound (closed form
    1 - sqrt(2 log(2N/delta)/d)).  Positive once d exceeds about 2 log(2N/delta) / near^2.
    """
    t = far_threshold_exact(d, n_far, delta) if exact else far_threshold_bound(d, n_far, delta)
    return near - t


def gap_in_sd(d: int, near: float = 1.0) -> float:
    """Near score in far standard deviations, near / sqrt(1/d) = near sqrt(d) (unit q, k)."""
    return near * math.sqrt(d)
