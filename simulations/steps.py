"""Batches of step transforms A_t and the accumulation engine on them.

A ``Steps`` object holds ``batch`` independent sequences of ``n_steps`` transforms of size d x d in a
structured form, and knows three accumulations (fast paths), each with a plain fp64 reference in
``simulations.reference``:

* ``transport(x)``:  x_t = A_t ... A_1 x for t = 0..n (x_0 = x), shape (batch, n+1, d).
* ``scores(q, k)``:  s_ij = q_i^T A_i ... A_{j+1} k_j for j <= i (fla / PaTH convention, token t carries
  step index t), shape (batch, T, T), NaN above the diagonal.
* ``dense()``:       the step matrices themselves, shape (batch, n, d, d) (the reference representation).

Forms: ``AngleSteps`` (block-diagonal SO(2), interleaved planes, see ``conventions``),
``HouseholderSteps`` (I - beta w w^T) and ``DenseSteps`` (anything else, e.g. a user family).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar

import numpy as np


def _as_batch_vectors(x: np.ndarray, batch: int, dim: int, name: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.shape == (dim,):
        x = np.broadcast_to(x, (batch, dim))
    if x.shape != (batch, dim):
        raise ValueError(f"{name} must have shape ({dim},) or ({batch}, {dim}), got {x.shape}")
    return x


def _as_batch_sequence(x: np.ndarray, batch: int, n: int, dim: int, name: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.shape == (n, dim):
        x = np.broadcast_to(x, (batch, n, dim))
    if x.shape != (batch, n, dim):
        raise ValueError(f"{name} must have shape ({n}, {dim}) or ({batch}, {n}, {dim}), got {x.shape}")
    return x


def _mask_upper(s: np.ndarray) -> np.ndarray:
    """Set entries with j > i to NaN: they are not defined under the causal score convention."""
    upper = np.triu(np.ones(s.shape[-2:], dtype=bool), 1)
    s[..., upper] = np.nan
    return s


def to_complex_planes(x: np.ndarray) -> np.ndarray:
    """(..., d) real -> (..., d/2) complex, z_b = x_{2b} + i x_{2b+1} (interleaved pairing)."""
    return x[..., 0::2] + 1j * x[..., 1::2]


def from_complex_planes(z: np.ndarray) -> np.ndarray:
    """Inverse of ``to_complex_planes``: (..., d/2) complex -> (..., d) real."""
    out = np.empty(z.shape[:-1] + (2 * z.shape[-1],), dtype=np.float64)
    out[..., 0::2] = z.real
    out[..., 1::2] = z.imag
    return out


class StepShape:
    """The shape of a step form: ``batch`` sequences of ``n_steps`` steps, each d x d with d = ``dim``, read from
    the form's first field, an array (batch, n_steps, d / DIMS_PER_ENTRY, ...)."""

    DIMS_PER_ENTRY: ClassVar[int] = 1

    def _leading(self) -> np.ndarray:
        return getattr(self, fields(self)[0].name)

    @property
    def batch(self) -> int:
        return self._leading().shape[0]

    @property
    def n_steps(self) -> int:
        return self._leading().shape[1]

    @property
    def dim(self) -> int:
        return self.DIMS_PER_ENTRY * self._leading().shape[2]


@dataclass(frozen=True)
class AngleSteps(StepShape):
    """Block-diagonal SO(2) steps: plane b of step t rotates by theta[:, t, b].

    theta: float64 (batch, n_steps, d/2).  A_t = diag_b R(theta_tb); products are rotations by
    cumulative angles, so every accumulation costs O(n d) like plain RoPE.
    """

    theta: np.ndarray

    DIMS_PER_ENTRY: ClassVar[int] = 2  # theta[..., b] rotates the plane (2b, 2b+1)

    def dense(self) -> np.ndarray:
        c, s = np.cos(self.theta), np.sin(self.theta)
        out = np.zeros(self.theta.shape[:2] + (self.dim, self.dim))
        ev, od = np.arange(0, self.dim, 2), np.arange(1, self.dim, 2)
        out[..., ev, ev], out[..., ev, od] = c, -s
        out[..., od, ev], out[..., od, od] = s, c
        return out

    def transposed(self) -> "AngleSteps":
        return AngleSteps(-self.theta)

    def transport(self, x: np.ndarray) -> np.ndarray:
        """x_t = R(Theta_t) x with Theta_t = theta_1 + ... + theta_t (planewise)."""
        x = _as_batch_vectors(x, self.batch, self.dim, "x")
        cum = np.concatenate([np.zeros((self.batch, 1, self.dim // 2)), np.cumsum(self.theta, axis=1)], axis=1)
        return from_complex_planes(np.exp(1j * cum) * to_complex_planes(x)[:, None, :])

    def bilinear(self, q: np.ndarray, k: np.ndarray) -> np.ndarray:
        """q^T A_t ... A_1 k for t = 0..n, shape (batch, n+1), one cosine per plane and step.

        With c_b = conj(z_qb) z_kb (the planes of q and k as complex numbers) and Theta_t = theta_1 + .. + theta_t,
            q^T A_t ... A_1 k = sum_b Re(c_b e^{i Theta_tb}) = sum_b |c_b| cos(Theta_tb + arg c_b).
        The cumulative sum and the cosine run in torch's float64 kernels (``backend_torch.plane_cos_sum``:
        ~1 ns per cosine with full-range argument reduction, against ~11 ns for numpy's libm cosine), so the
        coherence estimator costs little more than drawing its angles.  This is its integrand.
        """
        from .backend_torch import as_tensor, cumulative_angles, phase_offset, plane_cos_sum, probe_coefficients  # torch on first use

        qb = _as_batch_vectors(q, self.batch, self.dim, "q")
        kb = _as_batch_vectors(k, self.batch, self.dim, "k")
        shared = np.ndim(q) == 1 and np.ndim(k) == 1
        coef_abs, coef_arg = probe_coefficients(qb[0], kb[0]) if shared else probe_coefficients(qb, kb)
        body = plane_cos_sum(cumulative_angles(as_tensor(self.theta), phase_offset(coef_arg)), coef_abs).numpy()
        first = np.sum(qb * kb, axis=1)
        return np.concatenate([first[:, None], body], axis=1)

    def scores(self, q: np.ndarray, k: np.ndarray) -> np.ndarray:
        """s_ij = (R(-Theta_i) q_i) . (R(-Theta_j) k_j): R(Theta_i - Theta_j) = R(Theta_i) R(Theta_j)^T."""
        q = _as_batch_sequence(q, self.batch, self.n_steps, self.dim, "q")
        k = _as_batch_sequence(k, self.batch, self.n_steps, self.dim, "k")
        back = np.exp(-1j * np.cumsum(self.theta, axis=1))
        qr = from_complex_planes(back * to_complex_planes(q))
        kr = from_complex_planes(back * to_complex_planes(k))
        return _mask_upper(qr @ kr.transpose(0, 2, 1))


@dataclass(frozen=True)
class HouseholderSteps(StepShape):
    """PaTH steps A_t = I - beta_t w_t w_t^T with unit w_t.

    w: float64 (batch, n_steps, d) unit rows; beta: float64 (batch, n_steps) in [0, 2].
    Orthogonal only for beta in {0, 2}; for beta in (0, 2) A_t contracts along w_t by |1 - beta|.
    """

    w: np.ndarray
    beta: np.ndarray

    def dense(self) -> np.ndarray:
        eye = np.eye(self.dim)
        return eye - self.beta[..., None, None] * self.w[..., :, None] * self.w[..., None, :]

    def transposed(self) -> "HouseholderSteps":
        return self

    def apply(self, t: int, m: np.ndarray) -> np.ndarray:
        """A_t m for m of shape (batch, d, r): m - beta w (w^T m), O(d r) per sequence."""
        w = self.w[:, t, :]
        return m - (self.beta[:, t, None, None] * w[:, :, None]) * np.einsum("bd,bdr->br", w, m)[:, None, :]

    def step_major(self) -> tuple[np.ndarray, np.ndarray]:
        """Contiguous step-major copies (w (n_steps, batch, d), beta (n_steps, batch)), so a recursion over steps
        reads contiguous rows at each step."""
        return np.ascontiguousarray(self.w.transpose(1, 0, 2)), np.ascontiguousarray(self.beta.T)

    def transport(self, x: np.ndarray) -> np.ndarray:
        x = _as_batch_vectors(x, self.batch, self.dim, "x")
        out = np.empty((self.batch, self.n_steps + 1, self.dim))
        out[:, 0] = x
        cur = x.copy()
        for t in range(self.n_steps):
            w = self.w[:, t]
            cur = cur - (self.beta[:, t] * np.einsum("bd,bd->b", w, cur))[:, None] * w
            out[:, t + 1] = cur
        return out

    def bilinear(self, q: np.ndarray, k: np.ndarray) -> np.ndarray:
        """q^T A_t ... A_1 k for t = 0..n, shape (batch, n+1), by the rank-one recursion
            x_0 = k,   x_t = x_{t-1} - beta_t w_t (w_t^T x_{t-1}),   y_t = q^T x_t,
        O(n d) per sequence, keeping only x (batch, d): no (batch, n+1, d) path is written.  The steps are
        read step-major (``step_major``), so each step touches contiguous memory."""
        qb = _as_batch_vectors(q, self.batch, self.dim, "q")
        cur = _as_batch_vectors(k, self.batch, self.dim, "k").copy()
        w, beta = self.step_major()
        shared = np.ndim(q) == 1
        y = np.empty((self.n_steps + 1, self.batch))
        y[0] = np.einsum("bd,bd->b", qb, cur)
        for t in range(self.n_steps):
            cur -= (beta[t] * np.einsum("bd,bd->b", w[t], cur))[:, None] * w[t]
            if shared:
                np.matmul(cur, qb[0], out=y[t + 1])
            else:
                y[t + 1] = np.einsum("bd,bd->b", qb, cur)
        return y.T

    def scores(self, q: np.ndarray, k: np.ndarray, chunk: int | None = None) -> np.ndarray:
        return householder_scores(self, q, k, chunk)


@dataclass(frozen=True)
class DenseSteps(StepShape):
    """Arbitrary d x d steps given as matrices: a (batch, n_steps, d, d) float64."""

    a: np.ndarray

    def dense(self) -> np.ndarray:
        return self.a

    def transposed(self) -> "DenseSteps":
        return DenseSteps(np.swapaxes(self.a, -1, -2))

    def apply(self, t: int, m: np.ndarray) -> np.ndarray:
        """A_t m for m of shape (batch, d, r)."""
        return self.a[:, t] @ m

    def transport(self, x: np.ndarray) -> np.ndarray:
        x = _as_batch_vectors(x, self.batch, self.dim, "x")
        out = np.empty((self.batch, self.n_steps + 1, self.dim))
        out[:, 0] = x
        cur = x[:, :, None]
        for t in range(self.n_steps):
            cur = self.a[:, t] @ cur
            out[:, t + 1] = cur[:, :, 0]
        return out

    def bilinear(self, q: np.ndarray, k: np.ndarray) -> np.ndarray:
        """q^T A_t ... A_1 k for t = 0..n, shape (batch, n+1), through ``transport(k)``."""
        q = _as_batch_vectors(q, self.batch, self.dim, "q")
        return np.einsum("btd,bd->bt", self.transport(k), q)

    def scores(self, q: np.ndarray, k: np.ndarray, chunk: int | None = None) -> np.ndarray:
        return chunked_scores(self, q, k, chunk)


def chunked_scores(steps: HouseholderSteps | DenseSteps, q: np.ndarray, k: np.ndarray, chunk: int | None = None) -> np.ndarray:
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
    q = _as_batch_sequence(q, batch, t_len, d, "q")
    k = _as_batch_sequence(k, batch, t_len, d, "k")
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


def householder_scores(steps: HouseholderSteps, q: np.ndarray, k: np.ndarray, chunk: int | None = None) -> np.ndarray:
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
    q = _as_batch_sequence(q, batch, t_len, d, "q")
    k = _as_batch_sequence(k, batch, t_len, d, "k")
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
        out[:, a:b, a:b] = _mask_upper(bq @ np.swapaxes(bk, 1, 2) - qw_t @ wk)
        if a > 0:
            out[:, a:b, :a] = (bq - qw_t @ w) @ v
            v = v - wt @ (tri @ (w @ v))
        v = np.concatenate([v, np.swapaxes(bk, 1, 2) - wt @ (tri @ wk)], axis=2)
    return out
