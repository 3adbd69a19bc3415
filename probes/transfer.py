"""C3 transfer check: the far mass at length T extrapolated from a head's own attention at 2L, without the bias of a
per-query plug-in.

Setting.  Query i of a 2L window (L = L_train) has n_i = i - L + 1 far keys j <= i - L; its far ratios
x_ij = a_ij / (near mass of i) = e^{s_ij} / Z_i^near do not depend on the partition function.  Under (A1) the far
ratios of a query are i.i.d. draws whose law does not depend on the lag, and (A2) the law of the query's statistics
does not depend on its position or the context length (C3: the suppression learned at L transfers unchanged), the
far mass at length T is

    F(T) = mean_{N=1}^{T-L} mean_i E[ g(S_{i,N}) ],   g(S) = S / (1 + S),   S_{i,N} = sum of N far ratios of query i.

The earlier estimator plugged S_{i,N} ~ N xbar_i into g with xbar_i the mean of query i's n_i far ratios.  At score
sd sigma those ratios are lognormal-like with CV^2 = e^{sigma^2} - 1 (53 at sigma = 2), so xbar_i is very noisy and
g concave: E g(N xbar_i) - g(N mu_i) ~ -F^2 (1 - F) CV^2 / n_i, e.g. -0.09 in F at sigma = 2 and 8x.

Estimator here.  Write log x_ij = u_i + e_ij with a location u_i per query and a residual law shared by the queries
(exact when the far score law of every query is one shape shifted by its own level, as for i.i.d. scores):

* u_i is estimated by the mean of log x_ij (noise variance v / n_i, v = var e, far smaller than the relative noise of
  xbar_i in heavy tails: 4/64 against 53/64 at sigma = 2);
* the residual law is the pool of e_ij = (log x_ij - uhat_i) sqrt(n_i / (n_i - 1)) (so its variance is v);
* ``queries`` of the usable queries are drawn (with replacement when there are fewer), one stream each;
* only queries with n_i >= ``MIN_FAR`` x L far keys are used (positions i in [1.5 L, 2L); by A2 any position will do);
* E g(e^{u_i} C_N), C_N a sum of N draws of e^{e} from the pool, is evaluated at u = uhat_i and uhat_i +- h_i,
  h_i^2 = v / n_i, and the second-order term of the location noise is removed:
  G(uhat) - (G(uhat + h) - 2 G(uhat) + G(uhat - h)) / 2 (E G(u + zeta) = G(u) + G''(u) h^2 / 2 + O(h^4)).

The tests (tests/probes/test_probes_transfer.py) simulate i.i.d. far scores of sd 0.5 to 2 and show the bias under
1% of F at 8x and 64x; the old plug-in's bias is shown there too.  Paths: ``queries`` sampled queries per head, one
stream of pooled residuals each, S_N for every N by a cumulative sum.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from accum.simulations.params import check_int, field_error

#: far keys a query must have to be used, as a fraction of L (queries of positions [L + MIN_FAR L - 1, 2L))
MIN_FAR = 0.5
#: smallest weight kept (float32 attention underflows to 0 below ~1e-45; such keys carry no mass)
TINY = 1e-45


def far_logs(weights: torch.Tensor, seq_len: int) -> list[list[np.ndarray]]:
    """Per head, per usable query (i with n_i >= MIN_FAR L, all windows), log x_ij over its n_i far keys:
    weights (B, H, 2L, 2L) -> [head][query] arrays."""
    b, h, t, _ = weights.shape
    if t != 2 * seq_len:
        raise field_error("weights", f"need windows of 2 x {seq_len} tokens, got {t}")
    w = weights.double().clamp_min(TINY)
    first = seq_len + max(1, math.ceil(MIN_FAR * seq_len)) - 1
    out: list[list[np.ndarray]] = [[] for _ in range(h)]
    for i in range(first, t):
        far = w[:, :, i, : i - seq_len + 1]
        near = w[:, :, i, i - seq_len + 1: i + 1].sum(-1, keepdim=True)
        logs = torch.log(far / near).numpy()  # (B, H, n_i)
        for head in range(h):
            out[head].extend(logs[:, head])
    return out


def location_and_residuals(logs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """uhat_i (Q,), n_i (Q,) and the pooled rescaled residuals (module docstring) of one head's far logs."""
    u = np.array([x.mean() for x in logs])
    n = np.array([x.size for x in logs], dtype=float)
    pool = np.concatenate([(x - x.mean()) * math.sqrt(x.size / (x.size - 1)) for x in logs])
    return u, n, pool


def extrapolate_head(logs: list[np.ndarray], seq_len: int, multipliers: list[int], queries: int,
                     rng: np.random.Generator) -> list[float]:
    """F(T) at T = m L for each multiplier of one head (module docstring)."""
    if not logs or min(x.size for x in logs) < 2:
        raise field_error("weights", "need queries with at least 2 far keys")
    u, n, pool = location_and_residuals(logs)
    v = float(np.mean(pool**2))
    n_far = (max(multipliers) - 1) * seq_len
    pick = rng.choice(u.size, size=queries, replace=queries > u.size)  # more queries than usable: several streams each
    total = np.zeros(n_far)
    for i in pick:
        c = np.cumsum(np.exp(pool[rng.integers(pool.size, size=n_far)]))
        h = math.sqrt(v / n[i])
        g0, gp, gm = (1.0 - 1.0 / (1.0 + math.exp(u[i] + s) * c) for s in (0.0, h, -h))
        total += g0 - 0.5 * (gp - 2.0 * g0 + gm)
    cum = np.cumsum(total / pick.size)
    return [float(cum[(m - 1) * seq_len - 1] / ((m - 1) * seq_len)) for m in multipliers]


def extrapolate(weights: torch.Tensor, seq_len: int, multipliers: list[int], queries: int,
                rng: np.random.Generator) -> np.ndarray:
    """(H, len(multipliers)) far mass extrapolated from 2L attention weights (B, H, 2L, 2L), per head."""
    check_int("queries", queries, 1)
    if not multipliers or min(multipliers) < 2:
        raise field_error("multipliers", f"must be integers >= 2, got {multipliers!r}")
    return np.array([extrapolate_head(logs, seq_len, multipliers, queries, rng) for logs in far_logs(weights, seq_len)])
