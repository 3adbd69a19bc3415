"""Small helpers shared by the theory modules: probe vectors, SO(2) planes, far sizes, power sums.

Pairing convention (``simulations.conventions``): plane b holds coordinates (2b, 2b+1) and a rotation by
theta multiplies z_b = x_{2b} + i x_{2b+1} by exp(i theta).  For real vectors x, y,
x . y = sum_b Re(conj(z_xb) z_yb), and x . R y = sum_b Re(conj(z_xb) e^{i theta_b} z_yb).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from accum.simulations.montecarlo import unit_probe  # the one default probe, shared with the Monte Carlo
from accum.simulations.params import ParamError, field_error


class NoClosedForm(NotImplementedError):
    """The theory has no closed form (or no exact evaluator) for this quantity and family.

    Raised by ``theory.predict`` and the family-level evaluators, e.g. for user-defined families or for
    quantities whose exact value needs a law the family does not have (far mass of token-dependent planes).
    """


def probes(dim: int, q: Any = None, k: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """(q, k) as float64 arrays of shape (d,), defaulting to ``unit_probe``."""
    q = unit_probe(dim) if q is None else np.asarray(q, dtype=float)
    k = unit_probe(dim) if k is None else np.asarray(k, dtype=float)
    if q.shape != (dim,) or k.shape != (dim,):
        raise ParamError(f"q and k must have shape ({dim},), got {q.shape} and {k.shape}")
    if not (np.all(np.isfinite(q)) and np.all(np.isfinite(k))):
        raise ParamError("q and k must be finite")
    return q, k


def planes(x: np.ndarray) -> np.ndarray:
    """(..., d) real -> (..., d/2) complex, z_b = x_{2b} + i x_{2b+1} (interleaved pairing)."""
    x = np.asarray(x, dtype=float)
    if x.shape[-1] % 2:
        raise field_error("dim", f"must be even for SO(2) planes, got {x.shape[-1]}")
    return x[..., 0::2] + 1j * x[..., 1::2]


def plane_coefficients(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """c_b = conj(z_qb) z_kb, shape (d/2,): q^T diag_b R(theta_b) k = sum_b Re(c_b e^{i theta_b})."""
    return np.conj(planes(q)) * planes(k)


def as_sizes(far_sizes: Any) -> np.ndarray:
    """Far-set sizes as a 1-d int64 array of values >= 1 (scalars allowed)."""
    arr = np.atleast_1d(np.asarray(far_sizes))
    if arr.ndim != 1 or arr.size == 0 or not np.issubdtype(arr.dtype, np.integer) or np.any(arr < 1):
        raise field_error("far_sizes", f"must be integers >= 1, got {far_sizes!r}")
    return arr.astype(np.int64)


def weighted_power_sums(m: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """For a square (or batched square) matrix M and n >= 1, return
        G1 = sum_{j=0}^{n-1} M^j   and   G2 = sum_{j=0}^{n-2} (n - 1 - j) M^j,
    exactly, by one power of the block matrix T = [[M, I, 0], [0, I, I], [0, 0, I]]:
    T^n = [[M^n, G1, G2], [0, I, n I], [0, 0, I]].  No inverse of I - M is formed, so M may have
    eigenvalue 1 (lattice laws, sigma = 0).  Cost O(log n) products of 3V x 3V matrices.

    Derivation: from T^{n+1} = T^n T the (1,2) block obeys Y_{n+1} = M^n + Y_n and the (1,3) block
    X_{n+1} = X_n + Y_n, so Y_n = sum_{j<n} M^j and X_n = sum_{i<n} Y_i = sum_p (n - 1 - p) M^p.
    """
    m = np.asarray(m, dtype=complex)
    v = m.shape[-1]
    eye = np.broadcast_to(np.eye(v), m.shape)
    zero = np.zeros_like(m)
    top = np.concatenate([m, eye, zero], axis=-1)
    mid = np.concatenate([zero, eye, eye], axis=-1)
    bot = np.concatenate([zero, zero, eye], axis=-1)
    t = np.concatenate([top, mid, bot], axis=-2)
    tn = np.linalg.matrix_power(t, int(n))
    return tn[..., :v, v : 2 * v], tn[..., :v, 2 * v :]
