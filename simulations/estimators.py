"""Monte Carlo estimators: every one returns an ``Estimate`` (value, standard error, sample count;
``montecarlo``), reproducible from its ``rng``.  This module is the public API of all of them: the path estimators
are defined here (coherence, mean_product_sq, onset, offset_profile, window, score_gap, drift), the far-set ones in
``farset`` (near_weight, far_residual).

Default probe vectors: q = k = m = 1/sqrt(d) (unit norm, equal weight on every SO(2) plane).

Memory: every estimator streams.  Samples are drawn in batches (``montecarlo.batches``) and folded into running
sums before the next batch is drawn, and the long-range estimators (near_weight, far_residual, drift) also stream
over steps in chunks, so neither the sample count nor the far-set size changes peak memory beyond one batch.
What remains is the result itself: arrays over the requested steps (times 16 groups for the jackknife).  Each
numpy call works on one batch (~16 MB), well under a second, so Ctrl-C is honoured promptly.

Speed: block-SO(2) steps (``AngleSteps``) take closed-form fast paths whose cumulative sums and cosines run in
torch's float64 kernels (``backend_torch``); ``device="cpu"|"cuda"`` on coherence, near_weight and
far_residual also draws the angles with torch on that device (a different random stream, same law).
"""

from __future__ import annotations

import math

import numpy as np

from .families import Family
from .params import ParamError, check_int
from .stats import first_crossing
from .steps import AngleSteps
from . import montecarlo as mc
from .farset import far_residual, near_weight
from .montecarlo import (MAX_BINS, ContextEstimate, CurveEstimate, Estimate, Moments, OnsetEstimate,
                         ScoreGapEstimate, batches, check_budget, check_family, check_rng, check_samples, check_steps, group_sizes,
                         grouped_sums, jackknife, path_chunk, path_floats, pooled_mean, probe, step_form)

__all__ = ["Estimate", "bilinear_path", "coherence", "drift", "far_residual", "last_row_sums", "mean_product_sq",
           "near_weight", "offset_profile", "onset", "score_gap", "window", "window_width"]


def bilinear_path(family: Family, rng: np.random.Generator, n_steps: int, batch: int, q: np.ndarray, k: np.ndarray,
                  transposed: bool = False, last_only: bool = False) -> np.ndarray:
    """q^T A_t ... A_1 k for t = 0..n_steps, (batch, n_steps + 1), for ``batch`` fresh sequences of steps.

    Equal to ``family.sample(rng, n_steps, batch).bilinear(q, k)`` (``transposed``: the steps' transposes,
    k^T A_1 ... A_t q).  A path longer than ``path_chunk`` steps (then batch is 1) is drawn and accumulated in
    chunks of that many steps, carrying the transported k (for SO(2) steps, the cumulative angle), so memory stays one chunk plus the returned row ((batch, 2): t = 0
    and t = n, with ``last_only``).  A family that changes form mid-path continues from the rotated k.  Dependent
    steps (``family.iid_steps`` False: a Markov token source) are drawn in one piece, so no chunk restarts the chain.
    q, k: (d,).
    """
    per_chunk = mc.dependent_span(family, n_steps) or path_chunk(step_form(family), family.dim)
    if n_steps <= per_chunk:
        steps = family.sample(rng, n_steps, batch)
        return (steps.transposed() if transposed else steps).bilinear(q, k)
    import torch

    from . import backend_torch as bt

    out = np.empty((batch, 2 if last_only else n_steps + 1))
    out[:, 0] = q @ k
    x, theta = np.broadcast_to(k, (batch, family.dim)), None
    coef = bt.probe_coefficients(q, k) if family.dim % 2 == 0 else None
    for start in range(0, n_steps, per_chunk):
        m = min(per_chunk, n_steps - start)
        steps = family.sample(rng, m, batch)
        steps = steps.transposed() if transposed else steps
        angles = steps.angles()
        if angles is not None and start == 0:
            theta = torch.zeros((batch, family.dim // 2), dtype=torch.float64)
        if angles is not None and theta is not None:
            y, theta = bt.far_logits(bt.as_tensor(angles), theta, *coef)
            y = y.numpy()
        else:
            if theta is not None:  # a family that changed form mid-path: continue from the rotated k
                x, theta = AngleSteps(theta.numpy()[:, None, :]).transport(x)[:, -1], None
            path = steps.transport(x)
            x = path[:, -1]
            y = path[:, 1:] @ q
        if last_only:
            out[:, 1] = y[:, -1]
        else:
            out[:, start + 1:start + m + 1] = y
    return out


def coherence(family: Family, n_steps: int, n_samples: int, rng: np.random.Generator,
              q: np.ndarray | None = None, k: np.ndarray | None = None, device: str | None = None) -> CurveEstimate:
    """c(n) = E[q^T A_n ... A_1 k] for n = 0..n_steps.

    Returns arrays of shape (n_steps + 1,).  Theory: c(n) = sum_b Re(conj(z_qb) z_kb phi_b^n) for i.i.d. SO(2)
    angles (phi_b the plane's characteristic function at 1); (1 - beta/d)^n q.k for Householder on the sphere.
    device: None draws with ``rng`` (numpy); "cpu" / "cuda" draws the angles with torch on that device
    (``backend_torch.angle_sampler``: rope and so2-accumulated families) and sums there; that path does not
    chunk over steps (one sample's n_steps d/2 angles must fit the device).
    """
    check_family(family)
    check_rng(rng)
    check_steps("n_steps", n_steps)
    q, k = probe("q", q, family.dim), probe("k", k, family.dim)
    per_sample = path_floats(step_form(family), family.dim, n_steps)
    if device is None:
        sums, squares, sizes = grouped_sums(lambda b: bilinear_path(family, rng, n_steps, b, q, k), n_samples, per_sample)
    else:
        sums, squares, sizes = _torch_grouped_coherence(family, n_steps, n_samples, rng, q, k, device, per_sample)
    return CurveEstimate(*pooled_mean(sums, squares, sizes), steps=np.arange(n_steps + 1))


def _torch_grouped_coherence(family: Family, n_steps: int, n_samples: int, rng: np.random.Generator,
                             q: np.ndarray, k: np.ndarray, device: str, per_sample: int):
    """``grouped_sums`` of q^T A_t ... A_1 k with angles drawn and summed by torch on ``device``."""
    import torch

    from . import backend_torch as bt

    dev = bt.check_device(device)
    draw = bt.angle_sampler(family, dev, bt.torch_generator(rng, dev))
    coef_abs, coef_arg = bt.probe_coefficients(q, k, dev)
    sizes = group_sizes(n_samples)
    sums, squares = np.zeros((len(sizes), n_steps + 1)), np.zeros((len(sizes), n_steps + 1))
    for g, size in enumerate(sizes):
        total = torch.zeros(n_steps + 1, dtype=torch.float64, device=dev)
        total_sq = torch.zeros(n_steps + 1, dtype=torch.float64, device=dev)
        for b in batches(size, per_sample):
            body = bt.plane_cos_sum(bt.cumulative_angles(draw(n_steps, b), bt.phase_offset(coef_arg)), coef_abs)
            total[0] += b * float(q @ k)
            total_sq[0] += b * float(q @ k) ** 2
            total[1:] += body.sum(dim=0)
            total_sq[1:] += (body * body).sum(dim=0)
        sums[g], squares[g] = total.cpu().numpy(), total_sq.cpu().numpy()
    return sums, squares, np.array(sizes)


def mean_product_sq(family: Family, n_steps: int, n_samples: int, rng: np.random.Generator) -> CurveEstimate:
    """||E[A_n ... A_1]||_F^2 / d for n = 0..n_steps, unbiased (a U-statistic over pairs of samples).

    With P_1..P_M i.i.d. products, (||sum_m P_m||_F^2 - sum_m ||P_m||_F^2) / (M (M-1)) is unbiased for
    ||E P||_F^2 (no noise floor, unlike the norm of the sample mean).  Equals |c|^2 when E P = c I.
    Jackknife standard error over groups (n_samples >= 4, so each left-out set still has two samples).
    Block-SO(2) steps keep only per-plane cos/sin sums (``_angle_cos_sin_sums``, ``_rotation_block_sums``).
    """
    check_family(family)
    check_rng(rng)
    check_steps("n_steps", n_steps)
    d = family.dim
    eye = np.eye(d)
    sizes = group_sizes(n_samples, least=4)
    sums, norms, planes, rotations = [], [], [], []
    work: list = []  # scratch tensors reused across the SO(2) batches (``_angle_cos_sin_sums``)
    for size in sizes:
        s, nrm, pl, rot = 0.0, 0.0, 0.0, 0
        for b in batches(size, step_form(family).product_floats(d, n_steps)):
            steps = family.sample(rng, n_steps, b)
            angles = steps.angles()
            if angles is not None:
                pl = pl + _angle_cos_sin_sums(angles, work)
                rot += b
            else:
                paths = np.stack([steps.transport(np.broadcast_to(eye[c], (b, d))) for c in range(d)], axis=-1)
                s = s + paths.sum(axis=0)
                nrm = nrm + np.sum(paths**2, axis=(0, 2, 3))
        sums.append(s)
        norms.append(np.broadcast_to(nrm + float(rot * d), (n_steps + 1,)))
        planes.append(pl)
        rotations.append(rot)
    if all(r == size for r, size in zip(rotations, sizes)):  # every step block-SO(2): stay with plane sums
        full, se = jackknife(lambda total, m: _rotation_sq_norm(total, m, d), [np.array(planes)], np.array(sizes))
        return CurveEstimate(full, se, int(np.sum(sizes)), steps=np.arange(n_steps + 1))
    sums = [s + _rotation_block_sums(pl, r) if r else s for s, pl, r in zip(sums, planes, rotations)]

    def stat(total: np.ndarray, norm: np.ndarray, m: int) -> np.ndarray:
        return (np.sum(total**2, axis=(1, 2)) - norm) / (m * (m - 1)) / d

    full, se = jackknife(stat, [np.array(sums), np.array(norms)], np.array(sizes))
    return CurveEstimate(full, se, int(np.sum(sizes)), steps=np.arange(n_steps + 1))


def _rotation_sq_norm(planes: np.ndarray, m: int, d: int) -> np.ndarray:
    """The U-statistic (||sum P||_F^2 - m d) / (m (m - 1) d) for m block-SO(2) samples, t = 0..n.

    ||sum_m P_t||_F^2 = sum_b 2 (C_tb^2 + S_tb^2) from the plane sums (C, S) = planes (2, n, p)
    (``_rotation_block_sums``); at t = 0 every P = I and the statistic is exactly 1.
    """
    body = (2 * np.sum(planes[0] ** 2 + planes[1] ** 2, axis=1) - m * d) / (m * (m - 1)) / d
    return np.concatenate([[1.0], body])


def _angle_cos_sin_sums(theta: np.ndarray, work: list) -> np.ndarray:
    """(sum_m cos Theta_tb, sum_m sin Theta_tb) over the batch, shape (2, n, p), from theta (batch, n, p).

    ``work`` holds the two (batch, n, p) float64 scratch tensors of the caller's previous batch; a batch of
    the same shape writes into them instead of allocating (fresh pages cost as much as the sine itself)."""
    import torch

    from .backend_torch import as_tensor

    th = as_tensor(theta)
    if not work or work[0].shape != th.shape:
        work[:] = [torch.empty_like(th), torch.empty_like(th)]
    cum, scratch = work
    torch.cumsum(th, dim=1, out=cum)
    s_sum = torch.sin(cum, out=scratch).sum(dim=0)
    return torch.stack([torch.cos(cum, out=cum).sum(dim=0), s_sum]).numpy()


def _rotation_block_sums(planes: np.ndarray, count: int) -> np.ndarray:
    """Sum of P_t = A_t ... A_1 over ``count`` block-SO(2) samples, t = 0..n, shape (n+1, d, d).

    P_t is block-diagonal with plane b = [[cos, -sin], [sin, cos]](Theta_tb), so the sum has blocks
    [[C, -S], [S, C]] with (C, S) = planes (2, n, p); P_0 = I.  Every P_t is a rotation, ||P_t||_F^2 = d.
    """
    c_sum, s_sum = planes
    n, p = c_sum.shape
    total = np.zeros((n + 1, 2 * p, 2 * p))
    total[0] = count * np.eye(2 * p)
    ev, od = np.arange(0, 2 * p, 2), np.arange(1, 2 * p, 2)
    total[1:, ev, ev], total[1:, ev, od] = c_sum, -s_sum
    total[1:, od, ev], total[1:, od, od] = s_sum, c_sum
    return total


def _check_eps(eps: float) -> None:
    if not (np.isfinite(eps) and 0.0 < eps < 1.0):
        raise ParamError(f"eps must lie in (0, 1), got {eps!r}")


def onset(family: Family, eps: float, n_steps: int, n_samples: int, rng: np.random.Generator,
          q: np.ndarray | None = None, k: np.ndarray | None = None) -> OnsetEstimate:
    """Incoherence onset n_eps = min{n : |c(n) / c(0)| <= eps}, from the Monte Carlo coherence curve
    c(n) = E q^T A_n ... A_1 k (probes default 1/sqrt(d), so c(0) = 1).

    Interpolated between integer steps (``stats.first_crossing``) so the jackknife standard error is meaningful.
    Theory (i.i.d. steps with E[A] = rho I): n_eps = log(eps) / log(rho); with complex plane rates the curve
    oscillates and crosses eps earlier (``theory.forms.ClosedForms.onset``).
    """
    check_family(family)
    check_rng(rng)
    _check_eps(eps)
    check_steps("n_steps", n_steps)
    q, k = probe("q", q, family.dim), probe("k", k, family.dim)
    sums, squares, sizes = grouped_sums(lambda b: bilinear_path(family, rng, n_steps, b, q, k),
                                        n_samples, path_floats(step_form(family), family.dim, n_steps))
    value, se = jackknife(lambda total, n: first_crossing(total / n, eps), [sums], sizes)
    return OnsetEstimate(float(value), float(se), int(sizes.sum()), eps=eps, n_steps=n_steps)


def last_row_sums(family: Family, context: int, n_samples: int, rng: np.random.Generator, q: np.ndarray | None = None,
                  k: np.ndarray | None = None, least: int = 2) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Group sums, sums of squares and sizes (``montecarlo.grouped_sums``) of the last query's score row
    s_{T-1, T-1-Delta} = q^T A_{T-1} ... A_{T-Delta} k, Delta = 0..T-1 (probes default 1/sqrt(d)).

    One fresh sequence of length T per sample; the row is the transposed transport of q read against k
    (k^T A_1^T ... A_Delta^T q), so q != k tells the transpose from the forward product.
    """
    check_family(family)
    check_rng(rng)
    check_steps("context", context)
    q, k = probe("q", q, family.dim), probe("k", k, family.dim)

    def draw(b: int) -> np.ndarray:
        return bilinear_path(family, rng, context, b, k, q, transposed=True)[:, :context]

    return grouped_sums(draw, n_samples, path_floats(step_form(family), family.dim, context), least=least)


def offset_profile(family: Family, context: int, n_samples: int, rng: np.random.Generator, q: np.ndarray | None = None,
                   k: np.ndarray | None = None) -> ContextEstimate:
    """c_T(Delta) = E[q^T A_{T-1} ... A_{T-Delta} k], Delta = 0..T-1, for the last query of a length-T context.

    For stationary step laws c_T(Delta) = c(Delta) whatever T: per-token suppression measured at one length
    holds at every length (claim C3).  Shape (T,), plain standard errors.
    """
    sums, squares, sizes = last_row_sums(family, context, n_samples, rng, q, k)
    return ContextEstimate(*pooled_mean(sums, squares, sizes), context=context)


def window_width(total: np.ndarray, total_sq: np.ndarray, n: int, near: float = 1.0, start: int = 0) -> float:
    """sum_{Delta >= start} c^2(Delta) / near^2 with each c^2 estimated without bias from n samples' sum S and sum
    of squares Q: (S^2 - Q) / (n (n - 1)) (the U-statistic of E[x] E[x'] over pairs of distinct samples)."""
    return float(np.sum(((total**2 - total_sq) / (n * (n - 1)))[start:]) / near**2)


def window(family: Family, context: int, n_samples: int, rng: np.random.Generator, q: np.ndarray | None = None,
           k: np.ndarray | None = None) -> ContextEstimate:
    """Mixing-window width at context length T: W(T) = sum_{Delta=0}^{T-1} c_T(Delta)^2 / (q.k)^2.

    c_T is the last-row profile of ``offset_profile``.  W counts the effectively coherent offsets: for
    c(Delta) = rho^Delta it is (1 - rho^{2T}) / (1 - rho^2) -> 1 / (1 - rho^2), finite for every T (claim C2);
    for RoPE it grows with T.  Each c^2 is estimated without bias (``window_width``), so noise
    adds no spurious width; jackknife standard error over groups (n_samples >= 4).
    """
    q, k = probe("q", q, family.dim), probe("k", k, family.dim)
    sums, squares, sizes = last_row_sums(family, context, n_samples, rng, q, k, least=4)
    near = float(q @ k)
    value, se = jackknife(lambda total, total_sq, n: window_width(total, total_sq, n, near), [sums, squares], sizes)
    return ContextEstimate(float(value), float(se), int(sizes.sum()), context=context)


def score_gap(family: Family, offset: int, n_samples: int, rng: np.random.Generator, bins: int = 60,
              batch_floats: int | None = None, q: np.ndarray | None = None,
              k: np.ndarray | None = None) -> ScoreGapEstimate:
    """Far-score statistics at distance ``offset``: s = q^T A_offset ... A_1 k, probes default q = k = 1/sqrt(d).

    mean is the far variance scaled by d, d E[s^2] (theory: |q|^2 |k|^2 for Haar, 1 at the default probes); it also
    holds the far mean with its standard error, the near score q.k (1 at the default probes), the standardised gap (q.k - E s) / sd(s), the
    empirical tail P(|s| >= 1/2) and a histogram of s.  Standard error of d E[s^2] from the fourth moment.
    Streamed: each batch (at most ``batch_floats`` numbers, default ``montecarlo.BATCH_BUDGET``) is folded into
    running moments, histogram counts and the tail count.
    """
    check_family(family)
    check_rng(rng)
    check_steps("offset", offset)
    check_samples(n_samples)  # a standard error needs two
    check_int("bins", bins, 1, MAX_BINS)
    d = family.dim
    q, k = probe("q", q, d), probe("k", k, d)
    far_m, sq_m = Moments(), Moments()
    counts, tail = np.zeros(bins, dtype=np.int64), 0
    for b in batches(n_samples, path_floats(step_form(family), d, offset), check_budget(batch_floats)):
        far = bilinear_path(family, rng, offset, b, q, k, last_only=True)[:, -1]
        far_m.add(far)
        sq_m.add(d * far**2)
        batch_counts, edges = np.histogram(far, bins=bins, range=(-1.0, 1.0))
        counts += batch_counts
        tail += int(np.count_nonzero(np.abs(far) >= 0.5))
    n = far_m.n
    sd = far_m.sd()
    spread = sd > 1e-12 * max(1.0, abs(float(far_m.mean)))  # a deterministic far score's sd is rounding only
    return ScoreGapEstimate(
        float(sq_m.mean), float(sq_m.stderr()), n, far_mean=float(far_m.mean), far_mean_stderr=float(sd / np.sqrt(n)),
        near=float(q @ k), gap_sd=float((q @ k - far_m.mean) / sd) if spread else math.inf, tail_half=tail / n,
        hist_counts=counts, hist_edges=edges, dim=d, offset=offset)


def drift(family: Family, n_steps: int, rng: np.random.Generator) -> dict:
    """Orthogonality drift of one product P = A_n ... A_1 multiplied step by step in fp64 and in fp32.

    Returns max |P^T P - I| for both precisions (meaningful for orthogonal families only).  The steps are
    drawn and multiplied in chunks of at most max(1, BATCH_BUDGET / d^2) dense matrices, so memory does not
    grow with n_steps; a family whose draws are sequential (e.g. Gaussian-based) sees the same numbers as one
    draw of all n_steps.
    """
    check_family(family)
    check_rng(rng)
    check_steps("n_steps", n_steps)
    d = family.dim
    per_chunk = max(1, mc.BATCH_BUDGET // (d * d))
    products = {"fp64": np.eye(d), "fp32": np.eye(d, dtype=np.float32)}
    for start in range(0, n_steps, per_chunk):
        mats = family.sample(rng, min(per_chunk, n_steps - start), 1).dense()[0]
        for name, p in products.items():
            for a in mats.astype(p.dtype):
                p = a @ p
            products[name] = p
    return {name: float(np.max(np.abs(p.T.astype(np.float64) @ p - np.eye(d)))) for name, p in products.items()}
