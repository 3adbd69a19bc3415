"""Checks of the ``accum measure`` quantities that no claim's own row computes: the product norm ||E[A_n...A_1]||_F^2 / d
(C1 as stated), the incoherence onset n_eps (C1) and the orthogonality drift of one long product (the engine's
arithmetic).  Each runs the estimator ``accum measure`` runs (``simulations.estimators``) on a family and holds it to
the theory; registered in ``claims.CHECKS`` like every check.

* ``product-norm``: ``estimators.mean_product_sq`` (the unbiased U-statistic, jackknife standard error over 16 groups:
  Student t with 15 degrees of freedom) against ``prediction("mean-product-sq")`` at n = 1..steps.  With complex plane
  rates (nonzero mean angles) ||E P_n||^2 = (2/d) sum_b |psi_b(n)|^2 differs from the real parts' sum, so a form that
  keeps Re psi where |psi| belongs fails.  No probes: the quantity is a matrix norm.  Where the closed forms give
  E[P_n] = 0 (Haar, the m = 2 lattice) the U-statistic is degenerate and is judged by its weighted chi-square law
  (``degenerate``), not the jackknife.
* ``onset``: ``estimators.onset`` (jackknife, t15) against ``prediction("onset")`` at two probe pairs: the default
  q = k = 1/sqrt(d) that ``accum measure onset`` uses (where the theory takes its shortcuts, e.g. log(eps)/log(rho)
  for one real rate) and the non-unit, non-parallel pair of ``claims.probe_pair``.  With a complex rate the curve
  c(n)/c(0) = |phi|^n cos(n mu + a)/cos(a) crosses eps long before |phi|^n does, so a shortcut that reads |phi| or
  Re phi fails.  The level (0.2; 0.3 for the slow RoPE-like families) is crossed on the curve's first descent for
  every family here (no local minimum of |c(n)| near it before: checked on 100 probe pairs each), and eps is placed
  where the predicted curve crosses it halfway between two steps (``halfway_eps``; a step back where the curve
  crosses by passing near one of its zeros), so the onset is a smooth function of the estimated curve and the
  jackknife applies; deterministic families (RoPE) give an exact row.
* ``drift``: ``estimators.drift`` (max |P^T P - I| of one product of orthogonal steps, multiplied in fp64 and in fp32)
  under the rounding-error bound of that product (``drift_bound``): sanity rows (kind ``bound``), not evidence.
"""

from __future__ import annotations

import math

import numpy as np

from accum.simulations import estimators as est
from accum.simulations.families import Family
from accum.theory import prediction

from . import degenerate
from .claims import (JACKKNIFE_GROUPS, deterministic, measurement, ops, probe_pair, reference_for, register,
                     streams_by_angles, theory_route)
from .verdict import Measurement


def _kind(family: Family, **_) -> tuple[str, ...]:
    return ("exact",) if deterministic(family) else ("statistical",)


def _product_routes(family: Family, **_) -> set[str]:
    """Block-SO(2) steps give the product norm from their angles' cos/sin sums; the others transport the d axes."""
    return (set() if streams_by_angles(family) else ops(family, "transport")) | theory_route(family)


@register("product-norm", "C1", _kind, _product_routes)
def check_product_norm(family: Family, rng: np.random.Generator, *, steps: int, samples: int,
                       theory_samples: int) -> list[Measurement]:
    """||E[A_n ... A_1]||_F^2 / d at n = 1..steps by ``estimators.mean_product_sq`` against the theory (module
    docstring); exact for a deterministic family (every P_n is the same rotation: 1).  Where the closed forms give
    E[P_n] = 0 at every n (Haar, the m = 2 lattice) the U-statistic's kernel is degenerate and it is judged by its
    weighted chi-square law instead of the jackknife (``degenerate``: X = vec P_n, (M - 1) U = d (M - 1) times the
    estimate, Q - sum w its limit)."""
    e = est.mean_product_sq(family, steps, samples, rng)
    p = prediction("mean-product-sq", family, rng=rng, samples=theory_samples, steps=steps)
    what = f"||E[A_n..A_1]||_F^2 / d, n=1..{steps} (unbiased U-statistic)"
    value, spread, exact = np.asarray(p.value)[1:], np.asarray(p.stderr)[1:], deterministic(family)
    weights = None if exact else degenerate.product_weights(family, steps)
    if weights is not None:
        limit = family.dim * (e.n - 1) * e.mean[1:] + weights.sum(axis=1)  # (M - 1) U + sum w -> Q
        return [measurement("C1", family, f"{what}: E[P_n] = 0, normal deviates of its weighted chi-square law",
                            "statistical", degenerate.deviates(limit, weights), 1.0, 0.0, e.n,
                            source=f"{p.source}; null law of the degenerate U-statistic from E[A (x) A]")]
    ref = {} if exact else reference_for(p, JACKKNIFE_GROUPS - 1)
    return [measurement("C1", family, what, _kind(family)[0], e.mean[1:], e.stderr[1:], value, e.n,
                        pred_stderr=spread, source=p.source, floor=1e-9, **ref)]


#: a crossing bracket whose lower value is under this share of the level is near a zero of the curve (below)
NEAR_ZERO_SHARE = 0.25


def halfway_eps(curve: np.ndarray, level: float) -> float:
    """The eps at which a coherence curve c(0..n) crosses halfway (in log) between two integer steps, near ``level``.

    m = |c / c(0)|; n = the first step >= 1 with m_n <= level; eps = sqrt(b_{j-1} m_j) for the bracket j <= n, where
    b_{j-1} = min(m_0..m_{j-1}) and j is a record low (m_j < b_{j-1}), so the first step at or below eps is j.  No
    integer value of the curve is then near eps, and the onset (log-linear between integers,
    ``stats.first_crossing``) is a smooth function of the estimated curve at the steps that bracket it: its jackknife
    error holds (at eps = level a value within noise of eps puts the crossing on a kink, where the jackknife's tails
    are heavier than t15's).  j = n unless m_n < ``NEAR_ZERO_SHARE`` * level: an oscillating curve (a complex rate)
    can cross the level by passing near one of its zeros, where log m_n -- and so the crossing -- is dominated by the
    estimate's noise (vonmises at q != k: m = 1, 0.59, 0.23, 3e-6 put eps at 0.0008, which the estimated curve
    never reached); j is then the last record low before n (0.37 there), and n itself only if there is none.  A curve
    that stays above ``level`` for all its steps is crossed at the lowest value it reaches instead: a deterministic
    family's probe pair can hold a slow plane's coherence above any fixed level (RoPE at d = 16 kept 0.3 out of
    reach for 2048 steps).  Refused only for a curve that never falls below its start."""
    mag = np.abs(np.asarray(curve, dtype=float) / curve[0])
    target = max(level, np.min(mag[1:], initial=np.inf))
    below = np.flatnonzero(mag <= target)
    if below[0] == 0:
        raise ValueError(f"the curve does not cross {level} after step 0 within {mag.size - 1} steps")
    n = int(below[0])
    before = np.minimum.accumulate(mag[:n])  # b_{j-1} for j = 1..n
    records = [j for j in range(1, n) if mag[j] < before[j - 1]]
    j = records[-1] if mag[n] < NEAR_ZERO_SHARE * target and records else n
    return float(math.sqrt(before[j - 1] * mag[j]))


@register("onset", "C1", _kind, lambda family, **_: ops(family, "bilinear") | theory_route(family))
def check_onset(family: Family, rng: np.random.Generator, *, level: float, steps: int, samples: int,
                theory_samples: int) -> list[Measurement]:
    """n_eps = min{n: |c(n)/c(0)| <= eps} by ``estimators.onset`` at the default probes and at ``probe_pair``'s,
    against the theory's onset at each (module docstring); each point's eps is where its predicted curve crosses
    ``level``, or the lowest value it reaches if it stays above (``halfway_eps``)."""
    q, k = probe_pair(family.dim, rng)
    probes = [{}, {"q": q, "k": k}]
    runs, preds, levels = [], [], []
    for pair in probes:
        curve = prediction("coherence", family, rng=rng, samples=theory_samples, steps=steps, **pair)
        eps = halfway_eps(np.asarray(curve.value), level)
        runs.append(est.onset(family, eps, steps, samples, rng, **pair))
        preds.append(prediction("onset", family, rng=rng, samples=theory_samples, eps=eps, max_steps=steps, **pair))
        levels.append(round(eps, 4))
    exact = deterministic(family)
    ref = {} if exact else reference_for(preds[0], JACKKNIFE_GROUPS - 1)
    return [measurement("C1", family, f"onset n_eps at eps={levels} (crossing {level} halfway between steps): default "
                        f"probes and q != k (|q|, |k| != 1), {steps} steps", _kind(family)[0], [r.mean for r in runs],
                        [r.stderr for r in runs], [p.value for p in preds], runs[0].n,
                        pred_stderr=[p.stderr for p in preds], source=preds[0].source, floor=1e-6, **ref)]


#: unit roundoff of each precision of ``estimators.drift``
ROUNDOFF = {"fp64": 2.0**-53, "fp32": 2.0**-24}


def drift_bound(steps: int, dim: int, roundoff: float) -> float:
    """Upper bound on max |P^T P - I| for P = fl(A_n fl(... fl(A_2 A_1))) with orthogonal A_t rounded to the precision
    of unit roundoff u (Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed., sec. 3.5 for a product).

    Each step adds E_t with |E_t| <= gamma_d |A_t| |P_{t-1}| (gamma_d = d u / (1 - d u)), so ||E_t||_F <= gamma_d d
    (1 + delta) for ||P_{t-1}||_F <= sqrt(d) (1 + delta); rounding A_t itself (fp32) and the sampler's own departure
    from orthogonality (a QR or expm in fp64, a few d u) add at most 3 d u per step.  Orthogonal factors keep
    Frobenius norms, so D = P_n - Q_n (Q_n the exact product) has ||D||_2 <= e = n (gamma_d d + 3 d u)(1 + delta), and
    max |P^T P - I| <= ||Q^T D + D^T Q + D^T D||_2 <= 2 e + e^2.  delta <= e is taken as 1 (e is far below 1 here)."""
    gamma = dim * roundoff / (1.0 - dim * roundoff)
    e = 2.0 * steps * (gamma * dim + 3.0 * dim * roundoff)
    return 2.0 * e + e * e


def orthogonal_steps(family: Family) -> bool:
    """Whether every step of the family is orthogonal (the drift is meaningful): all but Householder with beta != 2."""
    return getattr(family, "beta", 2.0) == 2.0


@register("drift", "engine", lambda family, **_: ("bound", "bound"), lambda family, **_: set())
def check_drift(family: Family, rng: np.random.Generator, *, steps: int) -> list[Measurement]:
    """``estimators.drift`` of one product of ``steps`` orthogonal steps: each precision's max |P^T P - I| under
    ``drift_bound`` (sanity rows: a product accumulated at a lower precision than it says, or one that loses the
    orthogonality of its factors, fails)."""
    got = est.drift(family, steps, rng)
    return [measurement("engine", family, f"drift max|P'P - I| of one {steps}-step product in {name} <= rounding "
                        f"bound 2e + e^2, e = 2 n d u (d + 3)", "bound", got[name], 0.0,
                        drift_bound(steps, family.dim, ROUNDOFF[name]), 1, side="upper",
                        floor=math.ulp(1.0), source="bound (Higham sec. 3.5)") for name in ("fp64", "fp32")]
