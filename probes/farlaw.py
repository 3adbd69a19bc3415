"""Far attention mass of a trained head at any length, predicted from its family's step law and its 1x statistics.

No far attention of the model is read.  The inputs are (a) the head's realised step law (``probes.steplaw``: a
``Family`` whose ``sample`` draws paths backwards from a query), (b) its query/key statistics on validation windows
of 2L tokens (L = L_train): the queries q_i and the log near partition function log Z_i^near = log sum_{i-L < j <= i}
e^{s_ij} of queries i in [L, 2L) -- scores at lags below L only, the train-length range -- and the pool of keys k_j.

Derivation.  Query i of a window of length T attends keys j <= i with a_ij = e^{s_ij} / (Z_i^near + S_i^far), where
S_i^far = sum_{n >= L} e^{s_{i, i-n}} over its N = i - L + 1 far keys and s_{i,i-n} = q_i^T A_i ... A_{i-n+1} k_{i-n}
/ sqrt(d) - m n (m: an ALiBi slope, 0 otherwise).  Its far mass is F_i(N) = S/(Z^near + S), and the far mass that
``probes.evaluate`` measures at length T is the mean over queries i in [L, T), i.e. over N = 1..T-L:

    F(T) = (1 / (T - L)) sum_{N=1}^{T-L} E[ S_N / (Z^near + S_N) ],   S_N = sum_{n=L}^{L+N-1} e^{s_n}.

Assumptions: (P1) the query's own statistics (q_i, Z_i^near) are those of 2L windows (stationarity, C3); (P2) a far
key is a draw from the head's key pool independent of the query (its content does not know the query: only the
transport relates them); (P3) the path A_i ... A_{i-n+1} is drawn from the head's step law, independent of the keys.
Under them E[S_N] follows from the law alone: per SO(2) plane b with a_b = |q_b||k_b| / sqrt(d) and phase Delta_b(n),
E e^{a_b cos(Delta_b + alpha_b)} = I_0(a_b) + 2 sum_{m>=1} I_m(a_b) Re(psi_{m,b}(n) e^{i m alpha_b}) (Bessel;
``theory.so2.far_mass_terms``), whose incoherent limit prod_b I_0(a_b) is the exact form of C4's Gaussian far-score
law N(0, |q|^2 |k|^2 / d^2) at large d.  We do not plug E[S_N] into the concave map F (at score sd 2 the sum of
N lognormal-like terms fluctuates by a factor ~7 / sqrt(N), and the mean over N includes small N): S_N is simulated
instead, with the exact per-plane law, not the Gaussian, so heavy tails and coherent (slow) planes are kept:
``streams`` sampled queries each get one path of L + N_max - 1 steps drawn from the law (``family.sample``, in chunks
of ``CHUNK`` steps; ``transposed().transport(q)`` carries the query back along it, which every step form provides) and
one key from the pool per lag; S_N for every N is a cumulative sum along the path.

Premise of the incoherence theory (C1, C4).  The coherent fraction of the head at lag n,
C(n) = mean_q |E[P_n]^T q| / mean_q |q| with P_n = A_i ... A_{i-n+1} (E over the law, estimated from ``COHERENCE_PATHS``
paths: noise floor ~ 1/sqrt(paths)), is 1 for RoPE and NoPE (|psi| = 1: never incoherent) and tends to 0 for a mixing
law.  The theory applies to a head when C(L) <= ``PREMISE`` (its far keys are incoherent); where it does not, the
prediction above is still computed from the law (RoPE: the deterministic phases n omega against keys from the pool)
and shown as "what happens instead", not as a test of the theory.  The predicted mixing window is
W_pred = sum_{n<L} C(n)^2 (``theory.window.width_from_curve``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from accum.probes.steplaw import HeadLaw
from accum.simulations.params import check_int, field_error
from accum.theory import window

#: steps drawn per call of the law's sampler (bounds memory: streams x CHUNK x d floats per array)
CHUNK = 4096
#: paths that estimate the coherent fraction C(n) (noise floor about 1 / sqrt(COHERENCE_PATHS) = 0.06)
COHERENCE_PATHS = 256
#: far lags from STRIDE_FROM x L on are scored one per block of STRIDE lags (``scored_lags``)
STRIDE_FROM, STRIDE = 64, 4
#: the incoherence premise holds at a head when its coherent fraction at lag L is at most this
PREMISE = 0.5


@dataclass(frozen=True)
class HeadStats:
    """One head's statistics on 2L windows: queries (Q, d) of positions [L, 2L) with their log near partition
    function log_z_near (Q,), and the key pool keys (K, d), float64."""

    queries: np.ndarray
    log_z_near: np.ndarray
    keys: np.ndarray


def near_statistics(q: torch.Tensor, k: torch.Tensor, weights: torch.Tensor, seq_len: int) -> list[HeadStats]:
    """Per head the ``HeadStats`` of windows (B, H, T, d) with their attention weights (B, H, T, T), T = 2 seq_len.

    log Z_i^near = s_ii + log(sum_{i-L < j <= i} a_ij / a_ii): the lag-0 score s_ii = q_i . k_i / sqrt(d) is the same
    for every arm (no transport over an empty path, no bias at lag 0), and the ratio of near weights cancels the
    full partition function, so no far weight enters.  Queries whose a_ii underflowed to 0 are dropped."""
    b, h, t, d = q.shape
    if t != 2 * seq_len or tuple(weights.shape) != (b, h, t, t):
        raise field_error("weights", f"need windows of 2 x {seq_len} tokens with (B, H, T, T) weights, got q {tuple(q.shape)}, "
                                     f"weights {tuple(weights.shape)}")
    i = torch.arange(seq_len, t)
    w = weights.double()[:, :, seq_len:]  # (B, H, L, T): queries i in [L, 2L)
    cum = w.cumsum(-1)
    rows = torch.arange(seq_len)
    near = cum[..., rows, i] - cum[..., rows, i - seq_len]
    own = w[..., rows, i]
    qi, ki = q.double()[:, :, seq_len:], k.double()[:, :, seq_len:]
    s_own = (qi * ki).sum(-1) / math.sqrt(d)
    log_z = s_own + torch.log(near) - torch.log(own)
    out = []
    for head in range(h):
        ok = (own[:, head] > 0).reshape(-1)
        out.append(HeadStats(qi[:, head].reshape(-1, d)[ok].numpy(), log_z[:, head].reshape(-1)[ok].numpy(),
                             k[:, head].double().reshape(-1, d).numpy()))
    return out


@dataclass(frozen=True)
class FarPrediction:
    """per_query[s, N - 1] = F_s(N) = S_N / (Z^near_s + S_N) of sampled query s for N = 1..n_far, and the simulated
    far scores' sd."""

    per_query: np.ndarray
    far_score_sd: float

    def per_query_at(self, multipliers: list[int], seq_len: int) -> np.ndarray:
        """(streams, len(multipliers)): each query's mean of F_s(N) over N = 1..T - L, T = m L."""
        cum = np.cumsum(self.per_query, axis=1)
        return np.stack([cum[:, (m - 1) * seq_len - 1] / ((m - 1) * seq_len) for m in multipliers], axis=1)

    def at(self, multipliers: list[int], seq_len: int) -> list[float]:
        """F(T) at T = m L (module docstring): the mean over the sampled queries."""
        return self.per_query_at(multipliers, seq_len).mean(axis=0).tolist()

    def standard_error(self, multipliers: list[int], seq_len: int) -> list[float]:
        """Standard error of ``at`` (the sampled queries, each with its own path and keys, are independent)."""
        values = self.per_query_at(multipliers, seq_len)
        return (values.std(axis=0, ddof=1) / math.sqrt(values.shape[0])).tolist()


def far_exp_ratios(law: HeadLaw, stats: HeadStats, seq_len: int, n_far: int, streams: int, rng: np.random.Generator):
    """Yield (first, ratios, scores) chunk by chunk: for ``streams`` queries drawn from the head's 2L statistics, each
    with one path from the law and one pool key per lag, the far exp-ratios e^{s_n - m n} / Z^near (streams, c) and
    the scores s_n (streams, c) at far lags n = L + first .. L + first + c - 1 (module docstring)."""
    check_int("n_far", n_far, 1)
    check_int("streams", streams, 1)
    if stats.log_z_near.size == 0:
        raise field_error("stats", "no query with a usable near partition function")
    d = law.family.dim
    pick = rng.integers(stats.log_z_near.size, size=streams)
    x, log_z = stats.queries[pick], stats.log_z_near[pick]
    pool = stats.keys.astype(np.float32)  # scores need float32 precision only; halves the gather
    total, done = seq_len + n_far - 1, 0  # lags 1..total, far lags L..total
    while done < total:
        n = min(CHUNK, total - done)
        lags = np.arange(done + 1, done + n + 1)
        rows, owner = scored_lags(lags, seq_len, rng)
        keys = pool[rng.integers(pool.shape[0], size=(streams, rows.size))]  # (streams, scored lags, d)
        s, x = path_scores(law.family.sample(rng, n, streams), x, keys, rows)
        if rows.size:
            s = s / math.sqrt(d)
            ratio = np.exp(s - law.slope * lags[rows] - log_z[:, None])[:, owner]
            yield int(lags[lags >= seq_len][0]) - seq_len, ratio, s
        done += n


def scored_lags(lags: np.ndarray, seq_len: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Which lags of a chunk are scored: (rows, owner), rows the chunk indices scored and owner, for every far lag of
    the chunk in order, the index in rows of the scored lag that stands for it.  Every far lag below STRIDE_FROM x L
    is scored; beyond, one lag drawn uniformly from each block of STRIDE consecutive lags stands for its block (so the
    expected far sum is unchanged: the law's score distribution moves little over STRIDE lags that far out, and the
    extra fluctuation, relative CV / sqrt(N / STRIDE) on a sum of N >= 64 L terms, costs the concave map
    F^2 (1 - F) CV^2 STRIDE / N: under 0.1% of F at score sd 1.5)."""
    far = np.flatnonzero(lags >= seq_len)
    dense = far[lags[far] < STRIDE_FROM * seq_len]
    sparse = far[lags[far] >= STRIDE_FROM * seq_len]
    blocks = np.arange(sparse.size) // STRIDE
    sizes = np.bincount(blocks) if sparse.size else np.zeros(0, dtype=int)
    starts = np.cumsum(sizes) - sizes
    picked = sparse[starts + (rng.random(sizes.size) * sizes).astype(int)]
    return np.concatenate([dense, picked]), np.concatenate([np.arange(dense.size), dense.size + blocks])


def far_curve(law: HeadLaw, stats: HeadStats, seq_len: int, n_far: int, streams: int,
              rng: np.random.Generator) -> FarPrediction:
    """Simulated F_s(N) = S_N / (Z^near + S_N) for N = 1..n_far and ``streams`` sampled queries (``far_exp_ratios``;
    S_N is the cumulative sum of a query's exp-ratios along its path)."""
    out = np.empty((streams, n_far))
    running = np.zeros(streams)
    moments = np.zeros(3)  # count, sum, sum of squares of the far scores
    for first, ratio, s in far_exp_ratios(law, stats, seq_len, n_far, streams, rng):
        moments += (s.size, s.sum(), np.square(s).sum())
        cum = running[:, None] + np.cumsum(ratio, axis=1)
        out[:, first:first + cum.shape[1]] = cum
        running = cum[:, -1]
    mean = moments[1] / moments[0]
    return FarPrediction(out / (1.0 + out), math.sqrt(max(moments[2] / moments[0] - mean * mean, 0.0)))


def path_scores(steps, x: np.ndarray, keys: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Scores x^T P_t k (unscaled) at the steps t = rows + 1 along paths of steps with P_t = S_1 ... S_t, keys
    (batch, len(rows), d), and the carried query P_n^T x (batch, d): ``transposed().transport(x)``
    (x_t = T_t ... T_1 x), which every step form provides.  Block-SO(2) forms (``Steps.angles()`` not None) go through
    the closed form instead, sum_b Re(conj(z_x,b) z_k,b e^{i Theta_tb}), Theta_t = theta_1 + ... + theta_t, with
    float64 angles reduced mod 2 pi and float32 cosines (the transport's complex exponentials and (batch, n, d) path
    dominate the cost otherwise; tested against the transport to float32 rounding)."""
    theta = steps.angles()
    if theta is None:
        path = steps.transposed().transport(x)
        return np.einsum("snd,snd->sn", path[:, 1:][:, rows], keys), path[:, -1]
    cum = torch.from_numpy(np.ascontiguousarray(theta, dtype=np.float64)).cumsum(1)
    qr, qi = (torch.from_numpy(np.ascontiguousarray(x[:, None, p::2])).float() for p in (0, 1))
    k = torch.from_numpy(np.ascontiguousarray(keys)).float()
    kr, ki = k[..., 0::2], k[..., 1::2]
    phase = torch.remainder(cum[:, torch.from_numpy(rows)], 2 * math.pi).float()
    # conj(z_x) z_k = (qr kr + qi ki) + i (qr ki - qi kr)
    s = ((qr * kr + qi * ki) * torch.cos(phase) - (qr * ki - qi * kr) * torch.sin(phase)).sum(-1)
    last = torch.exp(-1j * cum[:, -1]) * torch.from_numpy(x[:, 0::2] + 1j * x[:, 1::2])
    carried = np.empty_like(x)
    carried[:, 0::2], carried[:, 1::2] = last.real.numpy(), last.imag.numpy()
    return s.double().numpy(), carried


def coherent_fraction(law: HeadLaw, queries: np.ndarray, n: int, paths: int, rng: np.random.Generator) -> np.ndarray:
    """C(t) = mean_q |E[P_t]^T q| / mean_q |q| for t = 0..n (module docstring), E over ``paths`` paths of the law:
    E[P_t]^T = mean over paths of T_t ... T_1 with T = the transposed steps, by ``Steps.apply``."""
    check_int("n", n, 0)
    d = law.family.dim
    steps = law.family.sample(rng, max(n, 1), paths).transposed()
    m = np.broadcast_to(np.eye(d), (paths, d, d)).copy()
    norm = np.linalg.norm(queries, axis=1).mean()
    out = [1.0]
    for t in range(n):
        m = steps.apply(t, m)
        out.append(float(np.linalg.norm(queries @ m.mean(axis=0).T, axis=1).mean() / norm))
    return np.array(out)


def c4_sd(stats: HeadStats) -> float:
    """C4's far-score sd for the head's statistics: sqrt(E|q|^2 E|k|^2 / d) / sqrt(d) (scores carry 1/sqrt(d))."""
    d = stats.queries.shape[1]
    return math.sqrt(np.mean(np.sum(stats.queries**2, 1)) * np.mean(np.sum(stats.keys**2, 1)) / d) / math.sqrt(d)


def predict_head(law: HeadLaw, stats: HeadStats, seq_len: int, multipliers: list[int], streams: int,
                 rng: np.random.Generator) -> dict:
    """The head's law-based prediction: far mass per multiplier, coherent fraction at L and the premise, the window
    W_pred, and the far-score sd simulated against C4's (module docstring)."""
    if not multipliers or min(multipliers) < 2:
        raise field_error("multipliers", f"must be integers >= 2, got {multipliers!r}")
    curve = coherent_fraction(law, stats.queries, seq_len, COHERENCE_PATHS, rng)
    far = far_curve(law, stats, seq_len, (max(multipliers) - 1) * seq_len, streams, rng)
    return {"far_mass": far.at(multipliers, seq_len), "far_mass_se": far.standard_error(multipliers, seq_len),
            "coherent_at_L": float(curve[seq_len]),
            "applies": bool(curve[seq_len] <= PREMISE), "window": window.width_from_curve(curve[:seq_len]),
            "far_score_sd": far.far_score_sd, "c4_sd": c4_sd(stats), "source": law.source}
