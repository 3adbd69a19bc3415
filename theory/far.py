"""Far mass and near weight (C5): the dilution of one near target among N far tokens, and ALiBi's control.

Setting (the estimator ``near_weight``): logits s0 for the near target and s_Delta = s0 q^T P_Delta k - slope
Delta for far tokens Delta = 1..N (unit q = k, P_Delta the transport over Delta steps).  The near weight is
    w(N) = 1 / (1 + M(N)),   M(N) = sum_{Delta=1}^N exp(s_Delta - s0)  (the far mass).

* Gaussian approximation (issue / paper):  w ~ 1 / (1 + N exp(sigma^2/2 - s0)) when the far logits are
  approximately N(0, sigma^2) (sigma^2 = s0^2 |q|^2 |k|^2 / d for Haar, C4) and weakly dependent, and N is
  large enough for M to concentrate around its mean N E e^{s - s0} = N exp(sigma^2/2 - s0): the relative
  spread of M is sqrt((e^{sigma^2} - 1) / N) for independent logits, so "holds" means N >> e^{sigma^2} - 1
  and s0 not so large that the Gaussian approximation of the logit tail matters (the exact Haar mean is
  E e^{s0 u_1} = 0F1(; d/2; s0^2/4) instead of e^{s0^2/(2d)}).
* Exact bracket (reconstruction): Jensen gives E w >= 1/(1 + E M), and
  1/(1+M) = 1/(1+mu) - (M - mu)/(1+mu)^2 + (M - mu)^2 / ((1+mu)^2 (1+M)) with M >= 0 gives
  E w <= 1/(1 + mu) + Var(M) / (1 + mu)^2.
* Norm-preservation bound (paper, C5): if every step has operator norm <= 1 (orthogonal, or PaTH's
  contractions) then |q^T P k| <= |q||k|.  With S = s0 |q||k| the near logit s0 q.k is at most S and every
  unbiased far logit is at least -S; w = e^{near} / (e^{near} + sum_Delta e^{s_Delta}) increases with the
  near logit and decreases with each far one, so
      w <= e^S / (e^S + N e^{-S}) = 1 / (1 + N exp(-2S)) -> 0 as N grows, whatever the rotations,
  with equality when the near logit is S and every far logit sits at -S.
* ALiBi (the issue: "ALiBi's summable far mass"; the explicit floor is a reconstruction): with the bias
  -slope Delta and norm-bounded steps the far logits are <= S - slope Delta, so
  M <= sum_Delta e^{-slope Delta} <= 1/(e^slope - 1): summable, and w >= 1 / (1 + sum_{Delta=1}^N e^{-slope Delta})
  for every N -- the floor stays length-stable.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import scipy.special as sp

from accum.simulations.params import field_error


def far_mass_gaussian(n_far: Any, s0: float, sigma2: float) -> np.ndarray:
    """N exp(sigma^2/2 - s0): E M(N) for Gaussian N(0, sigma^2) far logits (E e^X = e^{sigma^2/2})."""
    return np.asarray(n_far, dtype=float) * math.exp(sigma2 / 2.0 - s0)


def near_weight(n_far: Any, s0: float, sigma2: float) -> np.ndarray:
    """w ~ 1 / (1 + N exp(sigma^2/2 - s0)) (Gaussian far logits, concentrated far mass; see module docstring)."""
    return 1.0 / (1.0 + far_mass_gaussian(n_far, s0, sigma2))


def near_weight_from_mass(mean_mass: Any) -> np.ndarray:
    """1 / (1 + E M): the Jensen lower bound of E w, and its limit when M concentrates."""
    return 1.0 / (1.0 + np.asarray(mean_mass, dtype=float))


def near_weight_bracket(mean_mass: Any, var_mass: Any) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) with lo <= E[1/(1+M)] <= hi for M >= 0: lo = 1/(1+mu), hi = lo + Var(M)/(1+mu)^2."""
    mu = np.asarray(mean_mass, dtype=float)
    lo = 1.0 / (1.0 + mu)
    return lo, lo + np.asarray(var_mass, dtype=float) * lo * lo


def lower_bound(n_far: Any, s_max: float) -> np.ndarray:
    """Near weight <= 1 / (1 + N exp(-2 S)) for steps of operator norm <= 1, S = s0 |q| |k| (no bias).

    Named for the lower bound it puts on the dilution 1 - w; no choice of rotations beats it.
    """
    return 1.0 / (1.0 + np.asarray(n_far, dtype=float) * math.exp(-2.0 * s_max))


near_weight_bound = lower_bound


def haar_mgf(s0: float, d: int, qk: float = 1.0) -> float:
    """E exp(s0 q^T P k) for P Haar on O(d) (or SO(d), d >= 2), |q||k| = qk: 0F1(; d/2; (s0 qk)^2 / 4).

    u_1 has density proportional to (1 - u^2)^{(d-3)/2} on [-1, 1]; its moment generating function is
    Gamma(d/2) (2/x)^{d/2-1} I_{d/2-1}(x) = 0F1(; d/2; x^2/4) (d = 1: cosh x).  (Reconstruction.)
    """
    x = s0 * qk
    return float(sp.hyp0f1(d / 2.0, x * x / 4.0))


def haar_far_mass(n_far: Any, s0: float, d: int, qk: float = 1.0, slope: float = 0.0) -> np.ndarray:
    """E M(N) = e^{-s0} 0F1(; d/2; s0^2 qk^2 / 4) sum_{Delta=1}^N e^{-slope Delta} (Haar steps: every P_Delta is Haar)."""
    return math.exp(-s0) * haar_mgf(s0, d, qk) * alibi_far_mass(n_far, slope)


def haar_far_mass_variance(n_far: Any, s0: float, d: int, qk: float = 1.0) -> np.ndarray:
    """Var M(N) for Haar steps: the N far logits are independent (P_{Delta+1} = P_Delta A with A Haar independent
    of P_Delta, so q^T P_{Delta+1} k is independent of the past), Var M = N e^{-2 s0} (mgf(2 s0) - mgf(s0)^2)."""
    m1, m2 = haar_mgf(s0, d, qk), haar_mgf(2.0 * s0, d, qk)
    return np.asarray(n_far, dtype=float) * math.exp(-2.0 * s0) * (m2 - m1 * m1)


def alibi_far_mass(n_far: Any, slope: float) -> np.ndarray:
    """sum_{Delta=1}^N e^{-slope Delta} = e^{-slope} (1 - e^{-slope N}) / (1 - e^{-slope}) (N when slope = 0)."""
    n = np.asarray(n_far, dtype=float)
    if slope < 0:
        raise field_error("slope", f"must be >= 0, got {slope}")
    if slope == 0:
        return n
    return math.exp(-slope) * -np.expm1(-slope * n) / -math.expm1(-slope)


def alibi_far_mass_limit(slope: float) -> float:
    """sum_{Delta>=1} e^{-slope Delta} = 1 / (e^slope - 1): finite for every slope > 0 (summable far mass)."""
    return math.inf if slope == 0 else 1.0 / math.expm1(slope)


def alibi_floor(n_far: Any, slope: float) -> np.ndarray:
    """Near weight >= 1 / (1 + sum_{Delta=1}^N e^{-slope Delta}) >= 1 / (1 + 1/(e^slope - 1)) = 1 - e^{-slope}."""
    return 1.0 / (1.0 + alibi_far_mass(n_far, slope))


def derive_gaussian_far_mass():
    """Sympy: E e^X = e^{sigma^2/2} for X ~ N(0, sigma^2) (integral), so E M(N) = N e^{sigma^2/2 - s0}."""
    import sympy as sy

    x = sy.Symbol("x", real=True)
    s = sy.Symbol("sigma", positive=True)
    mgf = sy.simplify(sy.integrate(sy.exp(x) * sy.exp(-x**2 / (2 * s**2)) / sy.sqrt(2 * sy.pi * s**2), (x, -sy.oo, sy.oo)))
    n, s0 = sy.symbols("N s0", positive=True)
    return {"sigma": s, "N": n, "s0": s0, "mgf": mgf, "far_mass": n * mgf * sy.exp(-s0),
            "near_weight": 1 / (1 + n * mgf * sy.exp(-s0))}


def derive_alibi_far_mass():
    """Sympy: sum_{Delta=1}^N e^{-slope Delta} in closed form and its N -> infinity limit."""
    import sympy as sy

    lam = sy.Symbol("slope", positive=True)
    n = sy.Symbol("N", positive=True, integer=True)
    j = sy.Symbol("j", positive=True, integer=True)
    finite = sy.simplify(sy.summation(sy.exp(-lam * j), (j, 1, n)))
    limit = sy.simplify(sy.summation(sy.exp(-lam * j), (j, 1, sy.oo)))
    return {"slope": lam, "N": n, "finite": finite, "limit": limit}
