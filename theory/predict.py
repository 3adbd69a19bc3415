"""``predict(quantity, family, **options)``: the theory's value of a measured quantity, for built-in families.

Each quantity matches one estimator of ``simulations.estimators`` (same probes, same normalisation), so
``accum verify`` can hold a measurement against it.  Probes default to q = k = m = 1/sqrt(d).

    quantity            options (defaults)                  value
    coherence           steps, q, k                         c(n) = E q^T A_n..A_1 k, n = 0..steps     (steps+1,)
    mean-product-sq     steps                               ||E A_n..A_1||_F^2 / d, n = 0..steps      (steps+1,)
    norm-sq             steps                               E|A_n..A_1 x|^2 / |x|^2, n = 0..steps     (steps+1,)
    onset               eps, max_steps (100000)             n_eps: first crossing of |c(n)/c(0)| <= eps
    window              context                             W(T) = sum_{Delta<T} (c(Delta)/c(0))^2
    far-variance        offset, q, k                        d E[s^2], s = q^T A_offset..A_1 k (1 for Haar)
    far-mass            far_sizes, s0, slope (0), q, k      E sum_{Delta<=N} exp(s_Delta - s0)        (len,)
    near-weight         far_sizes, s0, slope (0)            1 / (1 + far mass): Jensen lower bound of E w,
                                                            and its value once the far mass concentrates
    near-weight-bound   far_sizes, s0                       1 / (1 + N exp(-2 s0)) (steps of norm <= 1)
    alibi-floor         far_sizes, s0, slope                1 / (1 + sum_{Delta<=N} e^{-slope Delta})
    far-residual        far_sizes, value_rotation (True)    E|r(N)|^2 / |m|^2                         (len,)

Families without a closed form for a quantity (user-defined families, far mass of token angles, the
Lie walk's second moment, ...) raise ``NoClosedForm``, a ``NotImplementedError``.  Unknown options raise
``ValueError``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from . import far, groups, householder, so2, values, window
from ._common import NoClosedForm, as_sizes, family_kind, probes

_SO2 = ("so2-accumulated", "rope", "nope")
_ISOTROPIC = ("haar", "givens", "lie-walk")


def _kind(family: Any) -> str:
    kind = family_kind(family)
    if kind is None:
        raise NoClosedForm(f"{type(family).__module__}.{type(family).__qualname__} is a user-defined family: the theory "
                           "has closed forms for built-in families only (run `accum check` for its assumptions)")
    return kind


def coherence(family: Any, steps: int, q: Any = None, k: Any = None) -> np.ndarray:
    kind = _kind(family)
    if kind in _SO2:
        return so2.coherence(family, steps, q, k)
    if kind == "householder":
        return householder.coherence(family, steps, q, k)
    q, k = probes(family.dim, q, k)
    rho = groups.family_rate(family)
    return rho ** np.arange(steps + 1, dtype=float) * float(q @ k)  # 0.0 ** 0 = 1: c(0) = q.k for Haar too


def mean_product_sq(family: Any, steps: int) -> np.ndarray:
    kind = _kind(family)
    if kind in _SO2:
        return so2.mean_product_sq(family, steps)
    if kind == "householder":
        return householder.mean_product_sq(family, steps)
    rho = groups.family_rate(family)
    return np.array([1.0] + [rho ** (2 * n) for n in range(1, steps + 1)])


def norm_sq(family: Any, steps: int) -> np.ndarray:
    kind = _kind(family)
    n = np.arange(steps + 1, dtype=float)
    if kind == "householder" and family.w == "token":
        parts = householder.family_parts(family)
        x = np.full(family.dim, 1.0 / math.sqrt(family.dim))
        op = householder.token_pair_operator(parts["beta"], parts["table"])
        vec, out = np.outer(x, x).reshape(-1), []
        for _ in range(steps + 1):
            out.append(np.trace(vec.reshape(family.dim, family.dim)))
            vec = op @ vec
        return np.array(out)
    return groups.family_norm_rate(family) ** n


def onset(family: Any, eps: float, max_steps: int = 100_000) -> float:
    kind = _kind(family)
    if kind in ("haar", "givens", "lie-walk") or (kind == "householder" and family.w == "sphere"):
        return window.onset(groups.family_rate(family), eps)
    if kind == "so2-accumulated" and family.law != "token":
        phi = so2.plane_characteristic(family)
        if np.allclose(phi, phi[0], rtol=0, atol=0) and np.isreal(phi[0]):
            return window.onset(phi[0].real, eps)
    return window.crossing(coherence(family, max_steps), eps)


def window_width(family: Any, context: int) -> float:
    if context < 1:
        raise ValueError(f"context must be >= 1, got {context}")
    return window.width_from_curve(coherence(family, context - 1))


def far_variance(family: Any, offset: int, q: Any = None, k: Any = None) -> float:
    """d E[s^2] for s = q^T A_offset ... A_1 k."""
    kind = _kind(family)
    d = family.dim
    q, k = probes(d, q, k)
    if kind in _SO2:
        return d * so2.far_second_moment(family, offset, q, k)
    if kind == "householder":
        return d * householder.family_far_second_moment(family, offset, q, k)
    if kind == "haar":
        if offset == 0 or (d == 1 and family.group == "SO"):
            return d * float(q @ k) ** 2
        return float(q @ q) * float(k @ k)
    if kind == "givens":
        op = groups.givens_pair_operator(d, family.sigma)
        vec = np.outer(k, k).reshape(-1)
        for _ in range(offset):
            vec = op @ vec
        return d * float(q @ vec.reshape(d, d) @ q)
    raise NoClosedForm(f"{kind}: no closed form for the far-score second moment")


def far_mass(family: Any, far_sizes: Any, s0: float, slope: float = 0.0, q: Any = None, k: Any = None) -> np.ndarray:
    kind = _kind(family)
    sizes = as_sizes(far_sizes)
    if kind in _SO2:
        return so2.far_mass(family, sizes, s0, q, k, slope)
    if kind == "haar":
        q, k = probes(family.dim, q, k)
        if family.dim == 1 and family.group == "SO":
            return np.exp(s0 * float(q @ k) - s0) * far.alibi_far_mass(sizes, slope)
        return far.haar_far_mass(sizes, s0, family.dim, float(np.linalg.norm(q) * np.linalg.norm(k)), slope)
    raise NoClosedForm(f"{kind}: no closed form for the far mass E exp(s0 q^T P k)")


def near_weight(family: Any, far_sizes: Any, s0: float, slope: float = 0.0) -> np.ndarray:
    return far.near_weight_from_mass(far_mass(family, far_sizes, s0, slope))


def near_weight_bound(family: Any, far_sizes: Any, s0: float) -> np.ndarray:
    _kind(family)  # every built-in step has operator norm <= 1
    return far.lower_bound(as_sizes(far_sizes), s0)


def alibi_floor(family: Any, far_sizes: Any, s0: float, slope: float) -> np.ndarray:
    _kind(family)
    return far.alibi_floor(as_sizes(far_sizes), slope)


def far_residual(family: Any, far_sizes: Any, value_rotation: bool = True) -> np.ndarray:
    _kind(family)
    return values.family_residual_sq(family, far_sizes, value_rotation=value_rotation)


QUANTITIES: dict[str, Callable[..., Any]] = {
    "coherence": coherence,
    "mean-product-sq": mean_product_sq,
    "norm-sq": norm_sq,
    "onset": onset,
    "window": lambda family, context: window_width(family, context),
    "far-variance": far_variance,
    "far-mass": far_mass,
    "near-weight": near_weight,
    "near-weight-bound": near_weight_bound,
    "alibi-floor": alibi_floor,
    "far-residual": far_residual,
}


def predict(quantity: str, family: Any, **options: Any) -> Any:
    """The theory's prediction of ``quantity`` for ``family`` (a family object or a built-in name).

    See the module docstring for quantities and options.  Raises ``NoClosedForm`` where the theory has no
    closed form for this family, ``ValueError`` for an unknown quantity or option.
    """
    if quantity not in QUANTITIES:
        raise ValueError(f"unknown quantity {quantity!r}; known: {', '.join(QUANTITIES)}")
    if isinstance(family, str):
        from accum.simulations.families import make_family

        family = make_family(family)
    fn = QUANTITIES[quantity]
    try:
        import inspect

        inspect.signature(fn).bind(family, **options)
    except TypeError as err:
        raise ValueError(f"predict({quantity!r}): bad options {sorted(options)} ({err})") from None
    return fn(family, **options)


@dataclass(frozen=True)
class Prediction:
    """A prediction with its own standard error (0 for a closed form) and where it comes from."""

    value: Any
    stderr: Any
    source: str
    samples: int = 0


def prediction(quantity: str, family: Any, *, rng: Any = None, samples: int | None = None, **options: Any) -> Prediction:
    """``predict`` as a ``Prediction`` (closed forms only; stderr 0)."""
    value = predict(quantity, family, **options)
    return Prediction(value, np.zeros_like(np.asarray(value, dtype=float)), "closed form", 0)
