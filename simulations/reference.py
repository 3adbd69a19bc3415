"""Plain fp64 references: dense matrices and explicit loops, no tricks.

Every fast path in ``simulations.steps`` is tested against these on odd sizes.
"""

from __future__ import annotations

import numpy as np


def transport(mats: np.ndarray, x: np.ndarray) -> np.ndarray:
    """x_t = A_t ... A_1 x by explicit matrix-vector products.

    mats: (batch, n, d, d); x: (batch, d).  Returns (batch, n+1, d).
    """
    batch, n, d, _ = mats.shape
    out = np.zeros((batch, n + 1, d))
    for b in range(batch):
        cur = np.array(x[b], dtype=np.float64)
        out[b, 0] = cur
        for t in range(n):
            cur = mats[b, t] @ cur
            out[b, t + 1] = cur
    return out


def path_product(mats: np.ndarray, i: int, j: int) -> np.ndarray:
    """A_i A_{i-1} ... A_{j+1} for one sequence mats (n, d, d); the identity when i == j."""
    d = mats.shape[-1]
    prod = np.eye(d)
    for t in range(j + 1, i + 1):
        prod = mats[t] @ prod
    return prod


def scores(mats: np.ndarray, q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """s_ij = q_i^T A_i ... A_{j+1} k_j for j <= i, NaN above the diagonal.

    mats: (batch, T, d, d); q, k: (batch, T, d).  O(T^3 d^3): for tests on small sizes only.
    """
    batch, t_len = mats.shape[:2]
    out = np.full((batch, t_len, t_len), np.nan)
    for b in range(batch):
        for i in range(t_len):
            for j in range(i + 1):
                out[b, i, j] = q[b, i] @ path_product(mats[b], i, j) @ k[b, j]
    return out


def scores_dense_scan(mats: np.ndarray, q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """The same scores by a dense forward scan: V_t = A_t V_{t-1} with k_t appended, s_t. = q_t^T V_t.

    O(T^2 d^2) with dense fp64 matmuls and one Python step per token; the baseline of ``accum bench``.
    """
    batch, t_len, d = q.shape
    out = np.full((batch, t_len, t_len), np.nan)
    for b in range(batch):
        v = np.zeros((d, 0))
        for t in range(t_len):
            v = np.concatenate([mats[b, t] @ v, k[b, t][:, None]], axis=1) if t else k[b, :1].T.copy()
            out[b, t, : t + 1] = q[b, t] @ v
    return out
