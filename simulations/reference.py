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
    cur = np.array(x, dtype=np.float64)
    out[:, 0] = cur
    for t in range(n):  # one explicit matrix-vector product per sequence and step (all sequences at once)
        cur = np.einsum("bij,bj->bi", mats[:, t], cur)
        out[:, t + 1] = cur
    return out


def scores(mats: np.ndarray, q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """s_ij = q_i^T A_i ... A_{j+1} k_j for j <= i, NaN above the diagonal.

    mats: (batch, T, d, d); q, k: (batch, T, d).  For each query i the vector u = q_i is pulled back one
    token at a time, u <- A_j^T u, so that u = (A_i ... A_{j+1})^T q_i when it meets k_j.  Explicit loops
    over (b, i, j), one dense d x d mat-vec per pair: O(T^2 d^2) and slow on purpose (the baseline of
    ``accum bench``).
    """
    batch, t_len = mats.shape[:2]
    out = np.full((batch, t_len, t_len), np.nan)
    for b in range(batch):
        for i in range(t_len):
            u = np.array(q[b, i], dtype=np.float64)
            for j in range(i, -1, -1):
                out[b, i, j] = u @ k[b, j]
                u = mats[b, j].T @ u
    return out


def scores_dense_scan(mats: np.ndarray, q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """The same scores by a dense forward scan: V_t = A_t V_{t-1} with k_t appended, s_t. = q_t^T V_t.

    O(T^2 d^2) in dense fp64 matmuls with one Python step per token: the vectorised dense baseline, which
    ``accum bench`` reports beside the plain reference for context.
    """
    batch, t_len, d = q.shape
    out = np.full((batch, t_len, t_len), np.nan)
    for b in range(batch):
        v = np.zeros((d, 0))
        for t in range(t_len):
            v = np.concatenate([mats[b, t] @ v, k[b, t][:, None]], axis=1) if t else k[b, :1].T.copy()
            out[b, t, : t + 1] = q[b, t] @ v
    return out
