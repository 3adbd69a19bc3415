"""Causal scores of a batch of step sequences by chunked scans: every s_ij = q_i^T A_i ... A_{j+1} k_j (j <= i) at
once, O(T^2 d) work in matmuls (``HouseholderSteps.scores``, ``DenseSteps.scores``; fp64 reference in
``simulations.reference``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .steps import DenseSteps, HouseholderSteps


def as_batch_sequence(x: np.ndarray, batch: int, n: int, dim: int, name: str) -> np.ndarray:
    """x as (batch, n, dim) float64 (a shared (n, dim) sequence broadcast); ValueError naming ``name`` otherwise."""
    x = np.asarray(x, dtype=np.float64)
    if x.shape == (n, dim):
        x = np.broadcast_to(x, (batch, n, dim))
    if x.shape != (batch, n, dim):
        raise ValueError(f"{name} must have shape ({n}, {dim}) or ({batch}, {n}, {dim}), got {x.shape}")
    return x


def mask_upper(s: np.ndarray) -> np.ndarray:
    """Set entries with j > i to NaN: they are not defined under the causal score convention."""
    upper = np.triu(np.ones(s.shape[-2:], dtype=bool), 1)
    s[..., upper] = np.nan
    return s


def chunked_scores(steps: "HouseholderSteps | DenseSteps", q: np.ndarray, k: np.ndarray, chunk: int | None = None) -> np.ndarray:
    """All causal scores s_ij = q_i^T A_i ... A_{j+1} k_j by a chunked scan, O(T^2 d + T d^2) work.

    Tokens are cut into chunks [a, b) of size C (default C = d).  Carried state V (d x a) holds the earlier
    keys transported to token a-1: V[:, j] = A_{a-1} ... A_{j+1} k_j.  Inside the chunk one matrix
    M = [L | K] is moved by each step: L_t = A_t ... A_a (prefix product) and K the chunk's own keys
    transported to t.  Then for i in the chunk
        s_ij = (L_i^T q_i)^T V[:, j]          (j < a, one matmul per chunk)
        s_ij = q_i^T K_i[:, j - a]            (a <= j <= i)
    and V <- [L_{b-1} V, K_{b-1}].  Each step A_t is applied through ``steps.apply`` (rank-1 for
    Householder, a matmul otherwise), so no inverse of A is ever formed (contractive steps are fine).
    """
    batch, t_len, d = steps.batch, steps.n_steps, steps.dim
    q = as_batch_sequence(q, batch, t_len, d, "q")
    k = as_batch_sequence(k, batch, t_len, d, "k")
    c = chunk or max(d, 16)
    out = np.full((batch, t_len, t_len), np.nan)
    v = np.zeros((batch, d, 0))
    eye = np.broadcast_to(np.eye(d), (batch, d, d))
    for a in range(0, t_len, c):
        b = min(a + c, t_len)
        m = np.concatenate([eye, np.zeros((batch, d, b - a))], axis=2)
        back_q = np.empty((batch, b - a, d))
        for t in range(a, b):
            m = steps.apply(t, m) if t > 0 else m
            m[:, :, d + t - a] = k[:, t]
            back_q[:, t - a] = np.einsum("bdr,bd->br", m[:, :, :d], q[:, t])
            out[:, t, a : t + 1] = np.einsum("bd,bdr->br", q[:, t], m[:, :, d : d + t - a + 1])
        if a > 0:
            out[:, a:b, :a] = back_q @ v
        v = np.concatenate([m[:, :, :d] @ v, m[:, :, d:]], axis=2)
    return out


def householder_scores(steps: "HouseholderSteps", q: np.ndarray, k: np.ndarray, chunk: int | None = None) -> np.ndarray:
    """All causal PaTH scores by the compact-WY (UT) form of each chunk's product, O(T^2 d) in matmuls.

    For a chunk [a, b) with rows W = (w_a .. w_{b-1}) and strengths beta (beta of token 0 is unused):
        T = (I + diag(beta) tril(W W^T, -1))^{-1} diag(beta)          (C x C, lower triangular)
    and the transport of any x by H_t ... H_a is x - sum_{s<=t} w_s (T W x)_s.  Because T is triangular, a
    transport started inside the chunk uses T's trailing block, which gives, for i, j in the chunk,
        S_in = tril(Q K^T) - tril(Q W^T) T tril(W K^T, -1),
    for the earlier keys V (transported to a-1)
        S_out = (Q - tril(Q W^T) T W) V,
    and the carried state V <- [(I - W^T T W) V,  K^T - W^T T tril(W K^T, -1)].
    The UT transform is the one behind DeltaNet / PaTH chunking (Yang et al. 2024; derivation here).
    """
    batch, t_len, d = steps.batch, steps.n_steps, steps.dim
    q = as_batch_sequence(q, batch, t_len, d, "q")
    k = as_batch_sequence(k, batch, t_len, d, "k")
    c = chunk or max(2 * d, 32)
    beta = steps.beta.copy()
    beta[:, 0] = 0.0
    out = np.empty((batch, t_len, t_len))
    v = np.zeros((batch, d, 0))
    for a in range(0, t_len, c):
        b = min(a + c, t_len)
        out[:, a:b, b:] = np.nan
        w, bq, bk, be = steps.w[:, a:b], q[:, a:b], k[:, a:b], beta[:, a:b]
        eye = np.eye(b - a)
        wt = np.swapaxes(w, 1, 2)
        m = eye + be[:, :, None] * np.tril(w @ wt, -1)
        tri = np.linalg.solve(m, eye * be[:, None, :])
        qw_t = np.tril(bq @ wt) @ tri
        wk = np.tril(w @ np.swapaxes(bk, 1, 2), -1)
        out[:, a:b, a:b] = mask_upper(bq @ np.swapaxes(bk, 1, 2) - qw_t @ wk)
        if a > 0:
            out[:, a:b, :a] = (bq - qw_t @ w) @ v
            v = v - wt @ (tri @ (w @ v))
        v = np.concatenate([v, np.swapaxes(bk, 1, 2) - wt @ (tri @ wk)], axis=2)
    return out
