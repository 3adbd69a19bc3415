"""Attention of a block of queries over a long key cache without materialising the weights.

The evaluation at 512 x L_train (65,536 tokens) cannot afford the (queries x keys) weight matrix of every
chunk: it computes each chunk's output and log-sum-exp with a fused kernel, and the far attention mass from
a log-sum-exp over the near keys only.  For queries i = a .. a+c-1 (a = keys already cached) over keys
0 .. a+c-1 with scores s_ij (causal: j <= i):

    blocks   P = keys 0 .. a-1 (every query sees all of them), C = keys a .. a+c-1 (causal, square),
             (o_P, l_P) and (o_C, l_C) the softmax outputs and log-sum-exps of each block;
    merge    l = log(e^{l_P} + e^{l_C}),  o = e^{l_P - l} o_P + e^{l_C - l} o_C        (exact: softmax over P u C);
    far mass F_i = sum_{j <= i - L} a_ij = 1 - sum_{i - L < j <= i} a_ij = -expm1(l_i^near - l_i),
             l_i^near = log sum_{i - L < j <= i} e^{s_ij}   (L keys at most: ``near_logsumexp``, 2L scores a query).

ALiBi (score bias -m_h (i - j)) enters the fused kernel as one more coordinate: with r = a the chunk's first
query, q' = [q, 1] and k' = [k, m_h (j - r) / scale] give scale q'.k' = scale q.k + m_h (j - r), the true score
plus the per-query constant m_h (i - r).  A per-query constant changes no softmax output and cancels in the
merge and in l^near - l (the band adds the same m_h (j - r)), so every quantity returned is exact; values are
padded with a zero coordinate to the kernel's common head size and the padding dropped.

PaTH (``path_attention``) splits the same way: the chunk's own keys through the scores of ``transforms.path_chunk``
(explicit, causal), the cached keys k~_j (transported to token a - 1) through the fused kernel with the chunk's
transported queries q_hat_i (s_ij = q_hat_i . k~_j), and the near band from both.

``fused`` is PyTorch's CPU flash-attention kernel (it returns the log-sum-exp); on other devices the plain
softmax (``explicit``), which is also the reference the kernel is tested against.  No autograd: evaluation only.
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F

FLASH_CPU = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu


def mask_future(scores: torch.Tensor) -> torch.Tensor:
    """Square scores (..., c, c) with -inf above the diagonal: query r sees keys 0..r."""
    return scores.masked_fill(torch.ones(scores.shape[-2:], dtype=torch.bool, device=scores.device).triu(1),
                              float("-inf"))


def softmax_attention(scores: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(scores) v and the row log-sum-exps from one exp pass: with top_i = max_j s_ij (finite: every row
    has a key), e = exp(s - top), out = (e v) / sum_j e, l = top + log sum_j e.  scores (..., c, n), v (..., n, d).
    Returns ((..., c, d), (..., c))."""
    top = scores.amax(dim=-1, keepdim=True)
    e = torch.exp(scores - top)
    total = e.sum(dim=-1, keepdim=True)
    return (e @ v) / total, (top + torch.log(total))[..., 0]


def explicit(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float,
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(scale q k^T [+ causal mask]) v and the row log-sum-exps: q (..., c, d), k, v (..., n, d)
    (causal needs c = n: query r sees keys 0..r).  Returns ((..., c, d), (..., c))."""
    scores = scale * (q @ k.transpose(-1, -2))
    return softmax_attention(mask_future(scores) if causal else scores, v)


def fused(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float,
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """``explicit``'s result from the fused CPU kernel (memory linear in n); ``explicit`` off the CPU."""
    if q.device.type != "cpu":
        return explicit(q, k, v, causal, scale)
    out, lse = FLASH_CPU(q, k, v, 0.0, causal, scale=scale)
    return out, lse


def merge(parts: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax over the union of disjoint key blocks from each block's (output, log-sum-exp): l = logsumexp_b l_b,
    o = sum_b e^{l_b - l} o_b.  parts: [((..., c, d), (..., c))]."""
    if len(parts) == 1:
        return parts[0]
    lse = torch.logsumexp(torch.stack([l for _, l in parts]), dim=0)
    out = sum(torch.exp(l - lse)[..., None] * o for o, l in parts)
    return out, lse


def alibi_columns(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slopes: torch.Tensor, key_start: int,
                  ref: int, scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q', k', v') = ([q, 1], [k, m_h (j - ref) / scale], [v, 0]) for keys j = key_start .. key_start + n - 1, so
    that scale q'.k' = scale q.k + m_h (j - ref).  q: (B, H, c, d); k, v: (B, H, n, d); slopes: (H,)."""
    n = k.shape[-2]
    j = torch.arange(key_start - ref, key_start - ref + n, device=k.device, dtype=torch.float64)
    col = (slopes.to(k.device)[:, None] * j / scale).to(k.dtype)  # (H, n)
    ones = q.new_ones(q.shape[:-1] + (1,))
    return (torch.cat((q, ones), -1), torch.cat((k, col.expand(k.shape[:-1])[..., None]), -1),
            torch.cat((v, v.new_zeros(v.shape[:-1] + (1,))), -1))


def block_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, n_prior: int,
                    slopes: torch.Tensor | None, kernel=fused) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal attention of queries n_prior .. n_prior + c - 1 over keys 0 .. n_prior + c - 1 (module docstring):
    q (B, H, c, d), keys and values (B, H, n_prior + c, d), ALiBi slopes (H,) or None.  Returns the output
    (B, H, c, d) and the log-sum-exp (B, H, c) up to a per-query constant (ALiBi), from ``kernel``."""
    d = q.shape[-1]
    scale = 1.0 / math.sqrt(d)
    blocks = [(keys[:, :, n_prior:], values[:, :, n_prior:], n_prior, True)]
    if n_prior:
        blocks.append((keys[:, :, :n_prior], values[:, :, :n_prior], 0, False))
    parts = []
    for k, v, start, causal in blocks:
        qq, kk, vv = (q, k, v) if slopes is None else alibi_columns(q, k, v, slopes, start, n_prior, scale)
        out, lse = kernel(qq, kk, vv, causal, scale)
        parts.append((out[..., :d], lse))
    return merge(parts)


def near_logsumexp(q: torch.Tensor, keys: torch.Tensor, n_prior: int, window: int, slopes: torch.Tensor | None,
                   ) -> torch.Tensor:
    """l_i^near = log sum_{i - window < j <= i} e^{s_ij} for queries i = n_prior .. n_prior + c - 1, with the same
    per-query constant as ``block_attention`` (ALiBi scores m_h (j - n_prior) + scale q.k).  q (B, H, c, d),
    keys (B, H, n_prior + c, d).  Returns (B, H, c).

    The queries are taken in blocks of W = window: the near keys of block s (queries a + sW + r, r < W, a =
    n_prior) lie among the 2W keys j = a + (s - 1) W + u, u < 2W, and query r's are u in [r + 1, r + W] with
    j >= 0, so each block costs W x 2W scores (the keys before position 0 are zero padding, masked)."""
    b, h, c, d = q.shape
    w = window
    blocks = -(-c // w)
    start = n_prior - w  # position of u = 0 in block 0
    band = keys[:, :, max(0, start):n_prior + c]
    band = F.pad(band, (0, 0, max(0, -start), (blocks + 1) * w - max(0, -start) - band.shape[2]))
    kb = band.unfold(2, 2 * w, w)  # (B, H, blocks, d, 2W)
    qb = F.pad(q, (0, 0, 0, blocks * w - c)).view(b, h, blocks, w, d)
    scores = (qb @ kb) / math.sqrt(d)  # (B, H, blocks, W, 2W)
    r = torch.arange(w, device=q.device)[:, None]
    u = torch.arange(2 * w, device=q.device)[None, :]
    j = start + w * torch.arange(blocks, device=q.device)[:, None, None] + u  # (blocks, 1, 2W)
    if slopes is not None:
        scores = scores + (slopes.to(q.device)[:, None, None, None] * (j - n_prior)).to(scores.dtype)
    outside = (u <= r) | (u > r + w) | (j < 0)  # (blocks, W, 2W)
    lse = torch.logsumexp(scores.masked_fill(outside, float("-inf")), dim=-1)
    return lse.reshape(b, h, blocks * w)[..., :c]


def far_mass_from_lse(lse_near: torch.Tensor, lse: torch.Tensor, n_prior: int, window: int) -> torch.Tensor:
    """F_i = -expm1(l^near_i - l_i) = sum_{j <= i - window} a_ij, float64 (B, H, c); 0 for queries i < window
    (no far key)."""
    i = torch.arange(n_prior, n_prior + lse.shape[-1], device=lse.device)
    far = -torch.expm1((lse_near - lse).double())
    return torch.where(i >= window, far, torch.zeros_like(far))


def path_attention(scores: torch.Tensor, q_hat: torch.Tensor | None, prior: torch.Tensor, values: torch.Tensor,
                   need_weights: bool, far: int | None,
                   ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """PaTH attention of queries i = a .. a+c-1 (a = prior keys) from ``transforms.path_chunk``'s results.

    scores (B, H, c, c): s_ir to the chunk's keys (r <= i; the rest masked here); q_hat (B, H, c, d) or None when
    a = 0; prior (B, H, a, d): earlier keys transported to token a - 1; values (B, H, a + c, d).  With scale
    1/sqrt(d), softmax over [q_hat prior^T, scores] (module docstring: blocks P and C, merged).  Returns y
    (B, H, c, d); the weights (B, H, c, a + c) when ``need_weights`` (explicit softmax, the reference); the far
    mass F_i = sum_{j <= i - far} a_ij (float64 (B, H, c)) when ``far`` is given, from ``path_near_logsumexp``.
    """
    n_prior, d = prior.shape[-2], values.shape[-1]
    scale = 1.0 / math.sqrt(d)
    own = mask_future(scale * scores)
    if need_weights:
        full = own if not n_prior else torch.cat((scale * (q_hat @ prior.transpose(-1, -2)), own), dim=-1)
        probs = torch.softmax(full, dim=-1)
        return probs @ values, probs, None
    parts = [softmax_attention(own, values[..., n_prior:, :])]
    if n_prior:
        parts.append(fused(q_hat, prior, values[..., :n_prior, :], False, scale))
    y, lse = merge(parts)
    if far is None:
        return y, None, None
    lse_near = path_near_logsumexp(own, q_hat, prior, far, scale)
    return y, None, far_mass_from_lse(lse_near, lse, n_prior, far)


def path_near_logsumexp(own: torch.Tensor, q_hat: torch.Tensor | None, prior: torch.Tensor, window: int,
                        scale: float) -> torch.Tensor:
    """l_i^near = log sum_{i - window < j <= i} e^{s_ij} for PaTH queries i = a + r (a = prior keys): from the
    chunk's scaled, causally masked scores ``own`` (B, H, c, c) the band u = r - window + 1 .. r (left-padded with
    -inf, gathered: c x window), and from the last b = min(a, window - 1) cached keys j = a - b + v, v > r + b -
    window, the scores scale q_hat_i . k~_j.  Returns (B, H, c); the same constant as ``path_attention``'s
    log-sum-exp, so F = -expm1(l^near - l)."""
    c = own.shape[-1]
    r = torch.arange(c, device=own.device)[:, None]
    padded = F.pad(own, (window - 1, 0), value=float("-inf"))
    near = padded.gather(-1, (r + torch.arange(window, device=own.device)[None, :]).expand(*own.shape[:-1], window))
    n_band = min(prior.shape[-2], window - 1)
    if n_band:
        band = scale * (q_hat @ prior[..., prior.shape[-2] - n_band:, :].transpose(-1, -2))
        v = torch.arange(n_band, device=own.device)[None, :]
        near = torch.cat((band.masked_fill(v <= r + n_band - window, float("-inf")), near), dim=-1)
    return torch.logsumexp(near, dim=-1)
