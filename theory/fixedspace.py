"""Explicit fixed space of the second moment for small d (the coherent-direction test of ``theory.checks``).

A vector fixed by X -> E[A X A^T] stays fixed for ever; kappa = max_{|q| = 1} ||Pi_F vec(q q^T)||^2 is the limit of
E[(q^T P_n q)^2] for the worst aligned unit probe.  A step form that knows its fixed space at any d answers from its
pair operator (``simulations.pairs``: SO(2) planes, Householder spans); otherwise E_hat[A (x) A] (d^4 numbers) is
formed and its null space of (pair - I) taken, for d <= pair_dim.
"""

from __future__ import annotations

import numpy as np

from accum.simulations.pairs import FIXED_TOL
from accum.simulations.steps import common_form


def coherent_kappa(chunks: list, pair_dim: int, rng: np.random.Generator) -> tuple[float | None, str]:
    """kappa of the sampled single steps and where it was read: from the form's pair operator when it knows its
    fixed space, else from the explicit fixed space for d <= pair_dim; (None, "") when neither applies."""
    pair = common_form(chunks).pair_operator(chunks)
    kappa = pair.coherent_direction(rng)
    if kappa is not None:
        return kappa, pair.where
    d = chunks[0].dim
    if d > pair_dim:
        return None, ""
    return coherent_direction(fixed_space(pair_mean(dense_steps(chunks)))[0], d, rng), "explicit fixed space"


def dense_steps(chunks: list) -> np.ndarray:
    """Every sampled step as a dense matrix, (M, d, d) (small d only)."""
    return np.concatenate([np.asarray(c.dense(), dtype=np.float64)[:, 0] for c in chunks])


def pair_mean(mats: np.ndarray) -> np.ndarray:
    """E_hat[A (x) A], (d^2, d^2): entry ((i,k), (j,l)) = mean A_ij A_kl, so it maps vec(M) to vec(E[A M A^T])."""
    m, d, _ = mats.shape
    x = mats.reshape(m, d * d)
    g = x.T @ x / m  # g[(i,j),(k,l)] = E A_ij A_kl
    return g.reshape(d, d, d, d).transpose(0, 2, 1, 3).reshape(d * d, d * d)


def fixed_space(pair: np.ndarray, tol: float = FIXED_TOL) -> tuple[np.ndarray, np.ndarray]:
    """Orthonormal bases (F, F_perp) of the fixed vectors of ``pair`` (null space of pair - I to ``tol``) and of
    their orthogonal complement, as columns, from the SVD of pair - I."""
    n = pair.shape[0]
    _, s, vh = np.linalg.svd(pair - np.eye(n))
    null = s <= tol * max(1.0, float(np.abs(pair).max()))
    return vh[null].T, vh[~null].T


def coherent_direction(basis: np.ndarray, d: int, rng: np.random.Generator, starts: int = 24, iters: int = 300) -> float:
    """kappa = max_{|q|=1} sum_j (q^T S_j q)^2 with S_j the symmetric parts of the fixed-space basis matrices.

    Shifted symmetric power iteration q <- normalise(sum_j (q^T S_j q) S_j q + c q) (Kolda & Mayo 2011,
    SS-HOPM; the shift c makes each step an ascent step) from the coordinate axes and ``starts`` random points.
    Returns a lower bound on the maximum (0 if the fixed space is empty).
    """
    if basis.shape[1] == 0:
        return 0.0
    mats = basis.T.reshape(-1, d, d)
    sym = (mats + np.swapaxes(mats, 1, 2)) / 2
    f = sym.shape[0]
    # the order-4 tensor sum_j S_j (x) S_j unfolds to sum_j vec(S_j) vec(S_j)^T, of norm <= 1 for an orthonormal
    # basis; a shift of 3 times that norm makes every step an ascent step (SS-HOPM condition for order 4)
    shift = 3.0 * float(np.linalg.norm(sym.reshape(sym.shape[0], -1), ord=2) ** 2)
    q = np.concatenate([np.eye(d), rng.normal(size=(starts, d))])
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    flat = sym.reshape(f * d, d)
    best = 0.0
    for _ in range(iters):
        sq = (flat @ q.T).reshape(f, d, -1)  # (S_j q)_i per start
        val = np.einsum("si,fis->fs", q, sq)  # q^T S_j q
        value = np.sum(val**2, axis=0)
        if value.max() <= best + 1e-12 or value.max() >= 1.0 - 1e-12:
            best = max(best, float(value.max()))
            break
        best = float(value.max())
        q = np.einsum("fs,fis->si", val, sq) + shift * q
        q /= np.linalg.norm(q, axis=1, keepdims=True)
    return best
