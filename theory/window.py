"""Incoherence onset and mixing-window width from a coherence rate (C1, C2).

For steps with E[A_n ... A_1] = rho^n E-invariant (E[A] = rho I, or one SO(2) rate shared by all planes) the
normalised coherence is c(n)/c(0) = rho^n, and

* onset        n_eps = min{n : |rho|^n <= eps} relaxed to the real solution log(eps) / log|rho|
               (the issue's "incoherence onset"; the estimator interpolates log|c| linearly between
               integer steps, which is exact for a geometric curve).
* window       W(T) = sum_{Delta=0}^{T-1} (c(Delta)/c(0))^2 = (1 - rho^{2T}) / (1 - rho^2)
               -> W_inf = 1 / (1 - rho^2): finite, and
* context      |W(T) - W_inf| = rho^{2T} / (1 - rho^2): the window stops depending on the context
               length T exponentially fast (C2).  Both are reconstructions of the paper's statements in
               this toolkit's normalisation (W counts effectively coherent offsets).
RoPE (|rho_b| = 1 per plane, rho_b = e^{i omega_b}) has no finite W_inf: W(T) keeps growing with T.

For general curves (several planes with different rates, Markov token chains) use ``crossing`` and
``width`` on the predicted curve.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from accum.simulations.params import field_error
from accum.simulations.stats import first_crossing


def _rate(rate: complex) -> float:
    r = abs(complex(rate))
    if not (0.0 <= r <= 1.0):
        raise field_error("rate", f"must have modulus in [0, 1], got {rate!r}")
    return r


def onset(rate: complex, eps: float) -> float:
    """n_eps = log(eps) / log|rate| (0 if rate = 0, inf if |rate| = 1), eps in (0, 1)."""
    if not (0.0 < eps < 1.0):
        raise field_error("eps", f"must lie in (0, 1), got {eps!r}")
    r = _rate(rate)
    if r == 0.0:
        return 0.0
    if r == 1.0:
        return math.inf
    return math.log(eps) / math.log(r)


def width(rate: complex, context: Any = None) -> Any:
    """W(T) = (1 - r^{2T}) / (1 - r^2), r = |rate|; T = None gives the limit 1/(1 - r^2). T may be an array."""
    r = _rate(rate)
    if context is None:
        return math.inf if r == 1.0 else 1.0 / (1.0 - r * r)
    t = np.asarray(context, dtype=float)
    if r == 1.0:
        return t
    return -np.expm1(2.0 * t * math.log(r)) / (1.0 - r * r) if r > 0 else np.where(t > 0, 1.0, 0.0)


def context_dependence(rate: complex, context: Any) -> Any:
    """W_inf - W(T) = r^{2T} / (1 - r^2): how much the window still depends on T (inf for |rate| = 1)."""
    r = _rate(rate)
    if r == 1.0:
        return math.inf
    return r ** (2.0 * np.asarray(context, dtype=float)) / (1.0 - r * r)


crossing = first_crossing  # one implementation, shared with the estimators (simulations.stats)


def width_from_curve(curve: np.ndarray) -> float:
    """W = sum_Delta (c(Delta)/c(0))^2 over the curve's offsets 0..T-1."""
    c = np.asarray(curve, dtype=float)
    return float(np.sum((c / c[0]) ** 2))


def derive_window():
    """Sympy: W(T) = sum_{Delta=0}^{T-1} rho^{2 Delta}, its T -> infinity limit for 0 < rho < 1, and n_eps.

    Returns a dict of expressions in symbols rho, T, eps.
    """
    import sympy as sy

    rho = sy.Symbol("rho", positive=True)
    t = sy.Symbol("T", positive=True, integer=True)
    n = sy.Symbol("n", nonnegative=True, integer=True)
    eps = sy.Symbol("eps", positive=True)
    w = sy.simplify(sy.summation(rho ** (2 * n), (n, 0, t - 1)))
    u = sy.Symbol("u", positive=True)  # rho = 1/(1+u) spans 0 < rho < 1
    w_inf = sy.simplify(sy.limit(w.subs(rho, 1 / (1 + u)), t, sy.oo).subs(u, 1 / rho - 1))
    x = sy.Symbol("x", positive=True)
    onset_expr = sy.solve(sy.Eq(rho**x, eps), x)[0]
    return {"rho": rho, "T": t, "eps": eps, "width": w, "width_limit": w_inf, "onset": onset_expr}
