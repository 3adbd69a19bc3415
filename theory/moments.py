"""Generic theory of any family with i.i.d. steps, from its one-step moment operators.

For i.i.d. steps A_1, A_2, ... (d x d) everything that ``accum verify`` compares with a prediction, except the
far mass (which needs the whole law of q^T P k), is a function of two moments of ONE step:

    M = E[A]                                          (d, d)
    K[i, j, k, l] = E[A_ij A_kl]                      (d, d, d, d)
    S(X) = E[A X A^T],  S(X)_ik = sum_jl K[i,j,k,l] X_jl       (the second-moment operator)
    T(X) = E[A^T X A],  T(X)_jl = sum_ik K[i,j,k,l] X_ik       (its adjoint in the Frobenius product)

With P_n = A_n ... A_1 (independence of the factors; reconstructions derived here):

    coherence        c(n) = q^T M^n k
    mean-product-sq  ||E P_n||_F^2 / d = ||M^n||_F^2 / d
    norm-sq          E|P_n x|^2 / |x|^2 = x^T T^n(I) x / |x|^2        (x = 1/sqrt(d))
    far-variance     d E[(q^T P_n k)^2] = d q^T S^n(k k^T) q
    onset, window    from the coherence curve (``window.crossing``, ``window.width_from_curve``)
    far-residual     r(N) = (1/N) sum_{j=1}^N P_j m with P_j = A_N ... A_{N-j+1} (the estimator's order), and
                     for j > l, P_j = P_l C with C a product of j - l steps independent of P_l, so
                     E|r|^2 = (1/N^2) [ sum_l m^T G_l m + 2 sum_{l<j} m^T (M^{j-l})^T G_l m ],  G_l = T^l(I),
                     reported as E|r|^2 / |m|^2.

Exact moments (a family method ``moments() -> (M, K)``) give a closed form; otherwise M and K are estimated
from ``samples`` single steps drawn with an explicit ``rng`` in ``GROUPS`` groups, and the standard error of
any prediction is the delete-one-group jackknife over those groups (Efron & Stein 1981; G - 1 degrees of
freedom), and the value is the jackknife bias-corrected plug-in (``jackknife_prediction``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from accum.simulations.families import family_name
from accum.simulations.params import ParamError, check_int
from accum.simulations.userfamily import check_moments

from ._common import NoClosedForm, as_sizes, probes
from .window import crossing, width_from_curve

#: groups of the jackknife (its degrees of freedom are GROUPS - 1)
GROUPS = 16
#: largest d for which the generic theory is estimated: K has d^4 numbers, GROUPS + 2 copies are held
MAX_DIM = 32
#: allowed range of the number of sampled steps
SAMPLES_RANGE = (2 * GROUPS, 10**7)
DEFAULT_SAMPLES = 20_000
BATCH = 2000


@dataclass(frozen=True)
class StepMoments:
    """M = E[A] (d, d) and K = E[A (x) A] as K[i, j, k, l] = E[A_ij A_kl] (d, d, d, d)."""

    mean: np.ndarray
    pair: np.ndarray

    @property
    def dim(self) -> int:
        return self.mean.shape[0]

    @functools.cached_property
    def operator(self) -> np.ndarray:
        """S as a (d^2, d^2) matrix on row-major vec: S[(i,k), (j,l)] = K[i,j,k,l]; T is its transpose."""
        d = self.dim
        return self.pair.transpose(0, 2, 1, 3).reshape(d * d, d * d)

    def left(self, x: np.ndarray) -> np.ndarray:
        """S(X) = E[A X A^T] (d, d)."""
        return (self.operator @ x.reshape(-1)).reshape(x.shape)

    def right(self, x: np.ndarray) -> np.ndarray:
        """T(X) = E[A^T X A] (d, d)."""
        return (x.reshape(-1) @ self.operator).reshape(x.shape)


# --- the quantities, each a pure function of the moments ---------------------------------------------------


def coherence(mom: StepMoments, steps: int, q: Any = None, k: Any = None) -> np.ndarray:
    """c(n) = q^T M^n k for n = 0..steps, (steps + 1,)."""
    q, k = probes(mom.dim, q, k)
    out, x = np.empty(steps + 1), k
    for n in range(steps + 1):
        out[n] = q @ x
        x = mom.mean @ x
    return out


def mean_product_sq(mom: StepMoments, steps: int) -> np.ndarray:
    """||M^n||_F^2 / d for n = 0..steps."""
    out, p = np.empty(steps + 1), np.eye(mom.dim)
    for n in range(steps + 1):
        out[n] = np.sum(p * p) / mom.dim
        p = mom.mean @ p
    return out


def norm_sq(mom: StepMoments, steps: int) -> np.ndarray:
    """x^T T^n(I) x / |x|^2 for n = 0..steps, x = 1/sqrt(d)."""
    x, _ = probes(mom.dim)
    out, g = np.empty(steps + 1), np.eye(mom.dim)
    for n in range(steps + 1):
        out[n] = x @ g @ x / (x @ x)
        g = mom.right(g)
    return out


def onset(mom: StepMoments, eps: float, max_steps: int = 100_000, q: Any = None, k: Any = None) -> float:
    """First crossing of |c(n)/c(0)| <= eps within max_steps (inf if none), computed in growing blocks."""
    if not 0.0 < eps < 1.0:
        raise ParamError(f"eps must lie in (0, 1), got {eps!r}")
    q, k = probes(mom.dim, q, k)
    length = 64
    while True:
        steps = min(length, max_steps)
        curve = coherence(mom, steps, q, k)
        found = crossing(curve, eps)
        if math.isfinite(found) or steps == max_steps:
            return found
        length *= 4


def window(mom: StepMoments, context: int, q: Any = None, k: Any = None) -> float:
    """W(T) = sum_{Delta < T} (c(Delta)/c(0))^2."""
    return width_from_curve(coherence(mom, context - 1, q, k))


def far_variance(mom: StepMoments, offset: int, q: Any = None, k: Any = None) -> float:
    """d q^T S^offset(k k^T) q."""
    q, k = probes(mom.dim, q, k)
    x = np.outer(k, k)
    for _ in range(offset):
        x = mom.left(x)
    return float(mom.dim * (q @ x @ q))


def far_residual(mom: StepMoments, far_sizes: Any, value_rotation: bool = True, m: Any = None) -> np.ndarray:
    """E|r(N)|^2 / |m|^2 per N (module docstring); 1 for every N without value rotation."""
    sizes = as_sizes(far_sizes)
    if not value_rotation:
        return np.ones(sizes.size)
    m, _ = probes(mom.dim, m)
    n_max = int(sizes.max())
    g_m, g = [], np.eye(mom.dim)  # g_m[l - 1] = G_l m, G_l = T^l(I)
    for _ in range(n_max):
        g = mom.right(g)
        g_m.append(g @ m)
    g_m = np.array(g_m)  # (n_max, d)
    powers, x = [], m  # powers[r] = sum_{k=1}^r M^k m, r = 0..n_max-1
    total = np.zeros(mom.dim)
    for _ in range(n_max):
        powers.append(total.copy())
        x = mom.mean @ x
        total = total + x
    powers = np.array(powers)
    out = np.empty(sizes.size)
    for i, n in enumerate(sizes):
        diag = np.sum(g_m[:n] @ m)
        # sum_l (sum_{j=l+1}^N M^{j-l} m)^T G_l m = sum_l powers[N - l] . G_l m
        cross = np.sum(np.einsum("ld,ld->l", powers[n - np.arange(1, n + 1)], g_m[:n]))
        out[i] = (diag + 2.0 * cross) / (n * n) / float(m @ m)
    return out


GENERIC: dict[str, Callable[..., Any]] = {
    "coherence": coherence,
    "mean-product-sq": mean_product_sq,
    "norm-sq": norm_sq,
    "onset": onset,
    "window": window,
    "far-variance": far_variance,
    "far-residual": far_residual,
}


# --- exact and estimated moments ------------------------------------------------------------------------


def exact_moments(family: Any) -> StepMoments | None:
    """The family's own exact moments, if it defines ``moments() -> (E[A], E[A_ij A_kl])``; else None."""
    method = getattr(family, "moments", None)
    if method is None:
        return None
    return StepMoments(*check_moments(family_name(family), method(), int(family.dim)))


def group_moment_sums(family: Any, samples: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-group sums of A (G, d, d) and of A_ij A_kl (G, d, d, d, d), and the group sizes (G,).

    Steps come from ``family.sample(rng, 1, b).dense()[:, 0]``, group after group, so a seed fixes the result.
    """
    d = int(family.dim)
    sizes = np.full(GROUPS, samples // GROUPS)
    sizes[: samples % GROUPS] += 1
    first = np.zeros((GROUPS, d, d))
    second = np.zeros((GROUPS, d * d, d * d))
    for g, size in enumerate(sizes):
        left = int(size)
        while left > 0:
            b = min(BATCH, left)
            mats = np.asarray(family.sample(rng, 1, b).dense(), dtype=np.float64)
            if mats.shape != (b, 1, d, d):
                raise ParamError(f"family.sample(rng, 1, {b}).dense() has shape {mats.shape}, expected {(b, 1, d, d)}")
            x = mats[:, 0].reshape(b, d * d)
            first[g] += x.sum(axis=0).reshape(d, d)
            second[g] += x.T @ x
            left -= b
    return first, second.reshape(GROUPS, d, d, d, d), sizes


def jackknife_prediction(fn: Callable[[StepMoments], Any], first: np.ndarray, second: np.ndarray,
                         sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """fn of the moments, bias-corrected, and its delete-one-group jackknife standard error.

    theta_jack = G theta_hat - (G - 1) mean_g theta_{-g} removes the O(1/M) bias of the plug-in theta_hat
    (Quenouille; exact for quadratics such as ||E[A]||_F^2 -- the plug-in of a zero norm sits about 3 se high);
    se^2 = (G - 1)/G sum_g (theta_{-g} - mean_g theta_{-g})^2 (Efron & Stein 1981).  An O(1/M^2) bias remains for
    predictions of higher degree in the moments whose value is near 0 (||E[A]^n||_F^2 for n >= 2 when E[A] = 0).
    Non-finite values (an onset that never crosses) are returned as the plug-in with se = inf.
    """
    n = float(sizes.sum())
    total1, total2 = first.sum(axis=0), second.sum(axis=0)
    value = np.asarray(fn(StepMoments(total1 / n, total2 / n)), dtype=float)
    leave = np.array([np.asarray(fn(StepMoments((total1 - first[g]) / (n - sizes[g]), (total2 - second[g]) / (n - sizes[g]))),
                                 dtype=float) for g in range(sizes.size)])
    g = sizes.size
    finite = np.isfinite(value) & np.all(np.isfinite(leave), axis=0)
    with np.errstate(invalid="ignore"):  # inf - inf for an onset that never crosses
        spread = leave - leave.mean(axis=0)
        se = np.sqrt((g - 1) / g * np.sum(spread**2, axis=0))
        corrected = g * value - (g - 1) * leave.mean(axis=0)
    return np.where(finite, corrected, value), np.where(finite, se, np.inf)


def check_samples(samples: Any, dim: int) -> int:
    """``samples`` as an int in SAMPLES_RANGE, and d <= MAX_DIM; ParamError otherwise."""
    samples = check_int("samples", samples, *SAMPLES_RANGE)
    if dim > MAX_DIM:
        raise ParamError(f"dim = {dim}: the estimated moment theory holds E[A (x) A] (d^4 numbers) and needs "
                         f"d <= {MAX_DIM}")
    return samples


def no_generic_form(quantity: str) -> NoClosedForm:
    return NoClosedForm(f"{quantity!r} has no form in the moment operators E[A], E[A X A^T] (it needs the whole law "
                        f"of the scores); known: {', '.join(GENERIC)}")
