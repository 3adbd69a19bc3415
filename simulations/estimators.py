"""Monte Carlo estimators: every one returns an ``Estimate`` (value, standard error, sample count).

Samples are drawn in ``groups`` (G = min(16, n_samples) groups of near-equal size, fixed order), each group
from the same ``rng`` in turn, so a run is reproducible from its seed.  Linear statistics (means) carry the
plain standard error sd / sqrt(n); nonlinear ones (onset, window width, unbiased squared norms) carry a
delete-one-group jackknife standard error (Efron & Stein 1981).

Default probe vectors: q = k = m = 1/sqrt(d) (unit norm, equal weight on every SO(2) plane).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np
from scipy.special import logsumexp

from .families import Family
from .params import ParamError, check_positive_int
from .stats import first_crossing
from .steps import AngleSteps, from_complex_planes, to_complex_planes

#: memory budget for one batch of path samples, in float64 numbers
BATCH_BUDGET = 2_000_000


@dataclass
class Estimate:
    """A Monte Carlo estimate: ``mean`` and ``stderr`` (scalars or arrays of one shape), ``n`` samples."""

    mean: Any
    stderr: Any
    n: int
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        def plain(x: Any) -> Any:
            return np.asarray(x).tolist() if isinstance(x, (np.ndarray, np.generic)) else x

        return {"mean": plain(self.mean), "stderr": plain(self.stderr), "n": self.n,
                **{k: plain(v) for k, v in self.extra.items()}}


def unit_probe(dim: int) -> np.ndarray:
    """The default probe vector 1/sqrt(d) (d,)."""
    return np.full(dim, 1.0 / np.sqrt(dim))


def group_sizes(n_samples: int, groups: int = 16, least: int = 2) -> list[int]:
    """Split n_samples (>= ``least``) into min(groups, n_samples) near-equal group sizes."""
    if isinstance(n_samples, bool) or not isinstance(n_samples, (int, np.integer)) or n_samples < least:
        raise ParamError(f"n_samples must be an integer >= {least} (for a standard error), got {n_samples!r}")
    g = min(groups, n_samples)
    base, extra = divmod(n_samples, g)
    return [base + (i < extra) for i in range(g)]


def batches(size: int, per_sample: int) -> Iterator[int]:
    """Sub-batch sizes for ``size`` samples that each need ``per_sample`` floats of memory."""
    step = max(1, BATCH_BUDGET // max(per_sample, 1))
    for start in range(0, size, step):
        yield min(step, size - start)


def grouped_sums(draw: Callable[[int], np.ndarray], n_samples: int, per_sample: int,
                 least: int = 2) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Run ``draw(b) -> (b, ...)`` over all samples; per-group sums, per-group sums of squares, sizes."""
    sizes = group_sizes(n_samples, least=least)
    sums, squares = [], []
    for size in sizes:
        parts = [draw(b) for b in batches(size, per_sample)]
        sums.append(sum(p.sum(axis=0) for p in parts))
        squares.append(sum((p * p).sum(axis=0) for p in parts))
    return np.array(sums), np.array(squares), np.array(sizes)


def mean_estimate(sums: np.ndarray, squares: np.ndarray, sizes: np.ndarray, **extra: Any) -> Estimate:
    """Pooled mean and sd/sqrt(n) from group sums."""
    n = int(sizes.sum())
    mean = sums.sum(axis=0) / n
    var = np.maximum(squares.sum(axis=0) / n - mean**2, 0.0) * n / (n - 1)
    return Estimate(mean, np.sqrt(var / n), n, dict(extra))


def jackknife(stat: Callable[..., np.ndarray], group_sums: Sequence[np.ndarray], sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Delete-one-group jackknife of ``stat(*totals, n)``, totals being the sums over groups of each array.

    Returns (stat on all groups, standard error sqrt((G-1)/G sum_g (stat_(-g) - mean)^2)).
    """
    totals = [a.sum(axis=0) for a in group_sums]
    n = int(sizes.sum())
    full = np.asarray(stat(*totals, n))
    leave = np.array([stat(*[t - a[g] for t, a in zip(totals, group_sums)], n - int(sizes[g])) for g in range(len(sizes))])
    g = len(sizes)
    return full, np.sqrt((g - 1) / g * np.sum((leave - leave.mean(axis=0)) ** 2, axis=0))


def coherence(family: Family, n_steps: int, n_samples: int, rng: np.random.Generator,
              q: np.ndarray | None = None, k: np.ndarray | None = None) -> Estimate:
    """c(n) = E[q^T A_n ... A_1 k] for n = 0..n_steps.

    Returns arrays of shape (n_steps + 1,).  Theory: c(n) = sum_b Re(conj(z_qb) z_kb phi_b^n) for i.i.d. SO(2)
    angles (phi_b the plane's characteristic function at 1); (1 - beta/d)^n q.k for Householder on the sphere.
    """
    check_positive_int("n_steps", n_steps)
    q = unit_probe(family.dim) if q is None else np.asarray(q, float)
    k = unit_probe(family.dim) if k is None else np.asarray(k, float)
    sums, squares, sizes = grouped_sums(lambda b: family.sample(rng, n_steps, b).bilinear(q, k),
                                        n_samples, (n_steps + 1) * family.dim)
    return mean_estimate(sums, squares, sizes, steps=np.arange(n_steps + 1))


def mean_product_sq(family: Family, n_steps: int, n_samples: int, rng: np.random.Generator) -> Estimate:
    """||E[A_n ... A_1]||_F^2 / d for n = 0..n_steps, unbiased (a U-statistic over pairs of samples).

    With P_1..P_M i.i.d. products, (||sum_m P_m||_F^2 - sum_m ||P_m||_F^2) / (M (M-1)) is unbiased for
    ||E P||_F^2 (no noise floor, unlike the norm of the sample mean).  Equals |c|^2 when E P = c I.
    Jackknife standard error over groups (n_samples >= 4, so each left-out set still has two samples).
    """
    check_positive_int("n_steps", n_steps)
    d = family.dim
    eye = np.eye(d)
    sizes = group_sizes(n_samples, least=4)
    sums, norms = [], []
    for size in sizes:
        s, nrm = 0.0, 0.0
        for b in batches(size, (n_steps + 1) * d * d):
            steps = family.sample(rng, n_steps, b)
            paths = np.stack([steps.transport(np.broadcast_to(eye[c], (b, d))) for c in range(d)], axis=-1)
            s = s + paths.sum(axis=0)
            nrm = nrm + np.sum(paths**2, axis=(0, 2, 3))
        sums.append(s)
        norms.append(nrm)
    sums_arr, norms_arr = np.array(sums), np.array(norms)

    def stat(total: np.ndarray, norm: np.ndarray, m: int) -> np.ndarray:
        return (np.sum(total**2, axis=(1, 2)) - norm) / (m * (m - 1)) / d

    full, se = jackknife(stat, [np.array(sums), np.array(norms)], np.array(sizes))
    return Estimate(full, se, int(np.sum(sizes)), {"steps": np.arange(n_steps + 1)})


def _check_eps(eps: float) -> None:
    if not (np.isfinite(eps) and 0.0 < eps < 1.0):
        raise ParamError(f"eps must lie in (0, 1), got {eps!r}")


def onset(family: Family, eps: float, n_steps: int, n_samples: int, rng: np.random.Generator) -> Estimate:
    """Incoherence onset n_eps = min{n : |c(n)| <= eps}, from the Monte Carlo coherence curve.

    Interpolated between integer steps (``stats.first_crossing``) so the jackknife standard error is meaningful.
    Theory (i.i.d. steps with E[A] = rho I): n_eps = log(eps) / log(rho).
    """
    _check_eps(eps)
    check_positive_int("n_steps", n_steps)
    q = k = unit_probe(family.dim)
    sums, squares, sizes = grouped_sums(lambda b: family.sample(rng, n_steps, b).bilinear(q, k),
                                        n_samples, (n_steps + 1) * family.dim)
    value, se = jackknife(lambda total, n: first_crossing(total / n, eps), [sums], sizes)
    return Estimate(float(value), float(se), int(sizes.sum()), {"eps": eps, "n_steps": n_steps})


def _last_row_sums(family: Family, context: int, n_samples: int, rng: np.random.Generator, least: int = 2):
    """Group sums of the last query's score row s_{T-1, T-1-Delta}, Delta = 0..T-1, unit q = k.

    One fresh sequence of length T per sample; the row is the transposed transport of q read against k.
    """
    check_positive_int("context", context)
    q = k = unit_probe(family.dim)

    def draw(b: int) -> np.ndarray:
        return family.sample(rng, context, b).transposed().bilinear(k, q)[:, :context]

    return grouped_sums(draw, n_samples, (context + 1) * family.dim, least=least)


def offset_profile(family: Family, context: int, n_samples: int, rng: np.random.Generator) -> Estimate:
    """c_T(Delta) = E[q^T A_{T-1} ... A_{T-Delta} k], Delta = 0..T-1, for the last query of a length-T context.

    For stationary step laws c_T(Delta) = c(Delta) whatever T: per-token suppression measured at one length
    holds at every length (claim C3).  Shape (T,), plain standard errors.
    """
    sums, squares, sizes = _last_row_sums(family, context, n_samples, rng)
    return mean_estimate(sums, squares, sizes, context=context)


def window(family: Family, context: int, n_samples: int, rng: np.random.Generator) -> Estimate:
    """Mixing-window width at context length T: W(T) = sum_{Delta=0}^{T-1} c_T(Delta)^2 / (q.k)^2.

    c_T is the last-row profile of ``offset_profile``.  W counts the effectively coherent offsets: for
    c(Delta) = rho^Delta it is (1 - rho^{2T}) / (1 - rho^2) -> 1 / (1 - rho^2), finite for every T (claim C2);
    for RoPE it grows with T.  Each c^2 is estimated without bias, (S^2 - sum x^2) / (n (n - 1)), so noise
    adds no spurious width; jackknife standard error over groups (n_samples >= 4).
    """
    sums, squares, sizes = _last_row_sums(family, context, n_samples, rng, least=4)

    def width(total: np.ndarray, total_sq: np.ndarray, n: int) -> float:
        return float(np.sum((total**2 - total_sq) / (n * (n - 1))))

    value, se = jackknife(width, [sums, squares], sizes)
    return Estimate(float(value), float(se), int(sizes.sum()), {"context": context})


def score_gap(family: Family, offset: int, n_samples: int, rng: np.random.Generator, bins: int = 60) -> Estimate:
    """Far-score statistics at distance ``offset``: s = q^T A_offset ... A_1 k with |q| = |k| = 1.

    mean is the far variance scaled by d, d E[s^2] (theory: 1 for Haar, |q|^2 |k|^2 = 1); extra holds the far
    mean with its standard error, the near score q.k = 1, the standardised gap (q.k - E s) / sd(s), the
    empirical tail P(|s| >= 1/2) and a histogram of s.  Standard error of d E[s^2] from the fourth moment.
    """
    check_positive_int("offset", offset)
    d = family.dim
    q = k = unit_probe(d)
    far = np.concatenate([family.sample(rng, offset, b).bilinear(q, k)[:, -1]
                          for b in batches(n_samples, (offset + 1) * d)])
    n = far.size
    sq = d * far**2
    sd = far.std(ddof=1)
    counts, edges = np.histogram(far, bins=bins, range=(-1.0, 1.0))
    return Estimate(float(sq.mean()), float(sq.std(ddof=1) / np.sqrt(n)), n, {
        "far_mean": float(far.mean()), "far_mean_stderr": float(sd / np.sqrt(n)), "near": float(q @ k),
        "gap_sd": float((q @ k - far.mean()) / sd), "tail_half": float(np.mean(np.abs(far) >= 0.5)),
        "hist_counts": counts, "hist_edges": edges, "dim": d, "offset": offset})


def _check_sizes(name: str, sizes: Sequence[int]) -> np.ndarray:
    arr = np.asarray(sizes)
    if arr.ndim != 1 or arr.size == 0 or not np.issubdtype(arr.dtype, np.integer) or np.any(arr < 1) or np.any(np.diff(arr) <= 0):
        raise ParamError(f"{name} must be a non-empty increasing list of integers >= 1, got {list(sizes)!r}")
    return arr


def near_weight(family: Family, far_sizes: Sequence[int], s0: float, n_samples: int, rng: np.random.Generator,
                alibi_slope: float = 0.0, chunk: int = 4096) -> Estimate:
    """Attention weight on one near target among N far copies of its key, for each N in ``far_sizes``.

    Scores (logits): near s_0 (Delta = 0, no transport); far s_Delta = s0 q^T A_i ... A_{i-Delta+1} k - slope Delta
    for Delta = 1..N with unit q = k, so |s_Delta + slope Delta| <= s0 for any orthogonal steps.  Near weight
        w(N) = e^{s0} / (e^{s0} + sum_{Delta=1}^N e^{s_Delta}).
    The far sum is streamed over Delta in chunks with a running log-sum-exp (memory O(chunk), any N):
    the transported query x_Delta = A^T ... A^T q is carried across chunks.  extra holds the far mass
    M(N) = sum_Delta e^{s_Delta - s0} (an unbiased mean, E M = N E e^{s - s0} for stationary steps) and its log.
    """
    sizes = _check_sizes("far_sizes", far_sizes)
    if not np.isfinite(s0) or s0 <= 0:
        raise ParamError(f"s0 must be a finite number > 0, got {s0!r}")
    if not np.isfinite(alibi_slope) or alibi_slope < 0:
        raise ParamError(f"alibi_slope must be a finite number >= 0, got {alibi_slope!r}")
    check_positive_int("chunk", chunk)
    d = family.dim
    q = k = unit_probe(d)
    weights, log_mass = [], []
    for b in batches(n_samples, chunk * d * 4):
        x = np.broadcast_to(q, (b, d)).copy()
        lse = np.full(b, -np.inf)
        done = 0
        rows_w, rows_m = [], []
        for target in sizes:
            while done < target:
                n = min(chunk, target - done)
                path = family.sample(rng, n, b).transposed().transport(x)
                x = path[:, -1]
                logits = s0 * path[:, 1:] @ k - alibi_slope * np.arange(done + 1, done + n + 1)
                lse = np.logaddexp(lse, logsumexp(logits, axis=-1))
                done += n
            rows_m.append(lse.copy())
            rows_w.append(1.0 / (1.0 + np.exp(lse - s0)))
        weights.append(np.array(rows_w).T)
        log_mass.append(np.array(rows_m).T)
    w, lm = np.concatenate(weights), np.concatenate(log_mass) - s0
    n, mass = w.shape[0], np.exp(lm)
    return Estimate(w.mean(axis=0), w.std(axis=0, ddof=1) / np.sqrt(n), n, {
        "far_sizes": sizes, "far_mass": mass.mean(axis=0), "far_mass_stderr": mass.std(axis=0, ddof=1) / np.sqrt(n),
        "log_far_mass": lm.mean(axis=0), "log_far_mass_stderr": lm.std(axis=0, ddof=1) / np.sqrt(n),
        "s0": s0, "alibi_slope": alibi_slope})


def far_residual(family: Family, far_sizes: Sequence[int], n_samples: int, rng: np.random.Generator,
                 value_rotation: bool = True, chunk: int = 4096) -> Estimate:
    """Squared norm of the uniformly weighted far value residual, |r(N)|^2 / |m|^2, for each N.

    r(N) = (1/N) sum_{Delta=1}^N P_Delta m with P_Delta = A_i ... A_{i-Delta+1} (values transported like keys,
    the QKV arm) or P_Delta = I (value_rotation=False, QK-only: r = m).  Computed by the recurrence
    U_t = A_t (U_{t-1} + m), U_N = N r(N), streamed in chunks.  Theory for SO(2) with real plane coherence rho:
    E|r|^2 / |m|^2 -> (1 + rho) / ((1 - rho) N).
    """
    sizes = _check_sizes("far_sizes", far_sizes)
    check_positive_int("chunk", chunk)
    d = family.dim
    m = unit_probe(d)
    rows = []
    for b in batches(n_samples, chunk * d * 4):
        u = np.zeros((b, d))
        done = 0
        out = []
        for target in sizes:
            while done < target:
                n = min(chunk, target - done)
                steps = family.sample(rng, n, b)
                u = _accumulate_values(steps, u, m) if value_rotation else u + n * m
                done += n
            out.append(np.sum((u / target) ** 2, axis=1))
        rows.append(np.array(out).T)
    r = np.concatenate(rows)
    n = r.shape[0]
    return Estimate(r.mean(axis=0), r.std(axis=0, ddof=1) / np.sqrt(n), n,
                    {"far_sizes": sizes, "value_rotation": value_rotation})


def _accumulate_values(steps, u: np.ndarray, m: np.ndarray) -> np.ndarray:
    """U_t = A_t (U_{t-1} + m) over the chunk's steps, from U_0 = u; returns the last U, (batch, d).

    SO(2) fast path: U_n = e^{i Theta_n} (u + sum_{t<n} e^{-i Theta_t} m) planewise, Theta_t = theta_1..theta_t.
    """
    if isinstance(steps, AngleSteps):
        cum = np.cumsum(steps.theta, axis=1)
        before = np.concatenate([np.zeros_like(cum[:, :1]), cum[:, :-1]], axis=1)
        zm = to_complex_planes(m)
        total = to_complex_planes(u) + zm * np.sum(np.exp(-1j * before), axis=1)
        return from_complex_planes(np.exp(1j * cum[:, -1]) * total)
    mats = steps.dense()
    for t in range(steps.n_steps):
        u = np.einsum("bij,bj->bi", mats[:, t], u + m)
    return u


def drift(family: Family, n_steps: int, rng: np.random.Generator) -> dict:
    """Orthogonality drift of one product P = A_n ... A_1 multiplied step by step in fp64 and in fp32.

    Returns max |P^T P - I| for both precisions (meaningful for orthogonal families only).
    """
    check_positive_int("n_steps", n_steps)
    mats = family.sample(rng, n_steps, 1).dense()[0]
    out = {}
    for name, dtype in (("fp64", np.float64), ("fp32", np.float32)):
        p = np.eye(family.dim, dtype=dtype)
        for a in mats.astype(dtype):
            p = a @ p
        out[name] = float(np.max(np.abs(p.T.astype(np.float64) @ p - np.eye(family.dim))))
    return out
