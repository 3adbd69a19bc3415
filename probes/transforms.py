"""Torch versions of the accumulated step transforms used by the probes.

Conventions are those of ``accum.simulations.conventions``: SO(2) planes are interleaved (plane b holds
coordinates 2b, 2b+1) and token t carries a step A_t with

    s_ij = q_i^T A_i A_{i-1} ... A_{j+1} k_j,   j <= i.

SO(2) steps A_t = diag_b R(theta_tb) accumulate to Theta_t = sum_{s<=t} theta_s, so
A_i ... A_{j+1} = R(Theta_i - Theta_j) and s_ij = (R(-Theta_i) q_i) . (R(-Theta_j) k_j).

PaTH steps A_t = I - beta_t w_t w_t^T (unit w_t, beta_t in (0, 2); orthogonal only at beta in {0, 2},
a contraction along w_t otherwise) are handled through the compact WY / UT form: for a block of tokens
a..b with rows w_a..w_b,

    A_i ... A_{j+1} = I - sum_{j < r <= s <= i} w_s M_sr w_r^T,   M = G^{-1},
    G = diag(1 / beta) + strict_lower(W W^T),

and M restricted to (j, i] is the same block of the block's M because G is lower triangular
(Yang et al. 2025, "PaTH Attention", sec. 3).  Induction: if A_{i-1}...A_{j+1} = I - Y' M' Y'^T then
A_i (I - Y' M' Y'^T) = I - Y M Y^T with Y = [Y', w_i] and M = [[M', 0], [-beta_i w_i^T Y' M', beta_i]],
whose inverse is [[M'^{-1}, 0], [w_i^T Y', 1/beta_i]], i.e. G.  G is invertible (diagonal 1/beta > 0)
even when beta_t = 1 makes A_t singular.

The numpy engines in ``accum.simulations.steps`` are the fp64 references these are tested against.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from accum.simulations.conventions import rope_frequencies


def rope_omega(head_dim: int, base: float, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """omega_b = base^(-2b/d), shape (d/2,), from ``accum.simulations.conventions.rope_frequencies``."""
    return torch.from_numpy(rope_frequencies(head_dim, base)).to(dtype)


def rotate_planes(x: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """Rotate every interleaved plane of x by its angle: R(angle) x.

    x: (..., d); angle: broadcastable to (..., d/2).  Plane b: (x_2b + i x_2b+1) * exp(i angle_b).
    """
    x0, x1 = x[..., 0::2], x[..., 1::2]
    c, s = torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype)
    return torch.stack((c * x0 - s * x1, s * x0 + c * x1), dim=-1).flatten(-2)


def accumulate_angles(theta: torch.Tensor, start: torch.Tensor | None = None) -> torch.Tensor:
    """Theta_t = start + sum_{s<=t} theta_s along the token axis (second to last), in float64.

    theta: (B, H, T, P) step angles; start: (B, H, P) accumulated angle before the first token (zeros
    when None).  Returns float64 (B, H, T, P).  float64 keeps Theta exact to ~1e-12 rad at 1e4 tokens.
    """
    cum = torch.cumsum(theta.to(torch.float64), dim=-2)
    return cum if start is None else cum + start.to(torch.float64)[..., None, :]


def uniform_step_angles(uniforms: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    """theta_tb = low_b + u_tb (high_b - low_b), i.e. uniform on (low_b, high_b) for u ~ U[0, 1).

    uniforms: (..., P) in [0, 1); low, high: (P,).  The ``random`` arm uses (-omega_b, omega_b), with
    E[exp(i theta_b)] = sin(omega_b) / omega_b; ``random_drift`` uses (0, 2 omega_b), whose mean step is
    RoPE's omega_b (same |E exp(i theta_b)|, plus RoPE's drift).
    """
    return low.to(uniforms.dtype) + uniforms * (high - low).to(uniforms.dtype)


def token_step_angles(table_rows: torch.Tensor, omega: torch.Tensor) -> torch.Tensor:
    """theta_tb = omega_b - pi tanh(e_tb), e = E[x_t] the token's row of a learned table (zero at init).

    table_rows: (..., P); omega: (P,).  The paper writes theta = pi tanh(E[x_t]) - omega in the common
    libraries' sign convention (RoPE step -omega there); accum's RoPE steps by +omega (README, Conventions:
    score convention), so accum's angle is minus the paper's: at E = 0 the arm is accum's RoPE exactly, and
    theta ranges over (omega_b - pi, omega_b + pi), every angle mod 2 pi but one.
    """
    return omega.to(table_rows.dtype) - torch.pi * torch.tanh(table_rows)


def gain_step_angles(gain: torch.Tensor, omega: torch.Tensor) -> torch.Tensor:
    """theta_tb = omega_b (1 + g_tb) with g = W h_t from the hidden state (W zero at init: RoPE).

    gain: (..., P); omega: (P,).  Angles proportional to omega_b (the ``gain`` arm, not the paper's
    token table): low-frequency planes stay nearly coherent whatever W learns.
    """
    return omega.to(gain.dtype) * (1.0 + gain)


def path_gram(w: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """G = diag(1/beta) + strict_lower(W W^T) for one block.

    w: (..., C, d) unit rows; beta: (..., C) in (0, 2).  Returns (..., C, C), lower triangular.
    """
    return torch.tril(w @ w.transpose(-1, -2), -1) + torch.diag_embed(1.0 / beta)


def path_block(q: torch.Tensor, k: torch.Tensor, w: torch.Tensor, beta: torch.Tensor, k_prior: torch.Tensor,
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """One PaTH block: scores of its queries against all keys so far, and every key carried to its end.

    q, k, w: (..., C, d) for block tokens a..b; beta: (..., C); k_prior: (..., N, d) earlier keys already
    transported to token a-1, k~_j = A_{a-1} ... A_{j+1} k_j.  With keys = [k_prior; k] and
    X = G^{-1} [W k_prior^T | strict_lower(W k^T)]  (one triangular solve, (..., C, N + C)):

        scores = keys-scores  q keys^T - tril(Q W^T) X,   s_ij = q_i^T A_i ... A_{j+1} k_j for j <= i
                 (block columns with j > i are meaningless: the caller masks them),
        carried = keys - X^T W,   rows A_b ... A_{j+1} k_j (prior rows: A_b ... A_a k~_j).

    Returns (scores (..., C, N + C), carried (..., N + C, d)).
    """
    gram = path_gram(w, beta)
    rhs = torch.cat((w @ k_prior.transpose(-1, -2), torch.tril(w @ k.transpose(-1, -2), -1)), dim=-1)
    x = torch.linalg.solve_triangular(gram, rhs, upper=False)
    keys = torch.cat((k_prior, k), dim=-2)
    scores = q @ keys.transpose(-1, -2) - torch.tril(q @ w.transpose(-1, -2)) @ x
    return scores, keys - x.transpose(-1, -2) @ w


def path_chunk(q: torch.Tensor, k: torch.Tensor, w: torch.Tensor, beta: torch.Tensor, block: int,
               transport_prior: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """PaTH over one chunk of T tokens a..a+T-1, by ``path_block`` over its blocks of ``block`` tokens.

    q, k, w: (..., T, d); beta: (..., T).  Returns

        scores  (..., T, T)  s_ir = q_i^T A_i ... A_{r+1} k_r for chunk keys r <= i (entries r > i: the caller masks),
        carried (..., T, d)  rows (A_{a+T-1} ... A_{r+1} k_r)^T: the chunk's keys transported to its last token,
        q_hat   (..., T, d)  rows (A_a ... A_i q_i)^T, so that s_ij = q_hat_i . k~_j for every earlier key j < a
                             already transported to token a - 1 (k~_j = A_{a-1} ... A_{j+1} k_j),
        carry   (..., d, d)  V = (A_{a+T-1} ... A_a)^T: earlier keys reach the chunk's end as the rows k~_j^T V.

    q_hat and carry (None unless ``transport_prior``) come from d virtual earlier keys e_1 .. e_d put through
    ``path_block`` in place of the real ones: their scores are q_i^T A_i ... A_a e_m = q_hat_im and their carried
    rows (A_{a+T-1} ... A_a e_m)^T are the rows of V.  So the N earlier keys are read once per chunk (one
    (N, d) x (d, d) product) instead of being rewritten at every block: O(T (T + d) d + N d^2) a chunk.
    """
    t, d = q.shape[-2:]
    n_virtual = d if transport_prior else 0
    keys = torch.eye(d, dtype=q.dtype, device=q.device)[:n_virtual].expand(*q.shape[:-2], n_virtual, d)
    rows = []
    for a in range(0, t, block):
        sl = slice(a, min(a + block, t))
        scores, keys = path_block(q[..., sl, :], k[..., sl, :], w[..., sl, :], beta[..., sl], keys)
        rows.append(F.pad(scores, (0, t - sl.stop)))
    scores = torch.cat(rows, dim=-2)
    if not transport_prior:
        return scores, keys, None, None
    return scores[..., n_virtual:], keys[..., n_virtual:, :], scores[..., :n_virtual], keys[..., :n_virtual, :]


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """ALiBi head slopes, float64 (H,) (Press et al. 2022, sec. 3, and the rule of their released code for other H).

    H a power of two: the geometric sequence m_h = 2^(-8 (h+1) / H), h = 0..H-1.  Otherwise, with P the largest
    power of two below H: the P slopes of P heads, then every other slope of 2P heads (m_1, m_3, ...), the
    first H - P of them -- e.g. H = 6: 2^-2, 2^-4, 2^-6, 2^-8, 2^-1, 2^-3.
    """
    def geometric(h: int) -> torch.Tensor:
        return 2.0 ** (-8.0 * torch.arange(1, h + 1, dtype=torch.float64) / h)

    power = 1 << (n_heads.bit_length() - 1)
    if power == n_heads:
        return geometric(n_heads)
    return torch.cat((geometric(power), geometric(2 * power)[0::2][: n_heads - power]))
