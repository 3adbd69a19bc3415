"""Monte Carlo estimators: every one returns an ``Estimate`` (value, standard error, sample count).

Samples are drawn in ``groups`` (G = min(16, n_samples) groups of near-equal size, fixed order), each group
from the same ``rng`` in turn, so a run is reproducible from its seed.  Linear statistics (means) carry the
plain standard error sd / sqrt(n); nonlinear ones (onset, window width, unbiased squared norms) carry a
delete-one-group jackknife standard error (Efron & Stein 1981).

Default probe vectors: q = k = m = 1/sqrt(d) (unit norm, equal weight on every SO(2) plane).

Memory: every estimator streams.  Samples are drawn in batches of at most ``BATCH_BUDGET`` float64 numbers
of path (``batches``) and folded into running sums (``grouped_sums``, ``Moments``) before the next batch is
drawn, and the long-range estimators (near_weight, far_residual, drift) also stream over steps in chunks, so
neither the sample count nor the far-set size changes peak memory beyond one batch.  What remains is the
result itself: arrays over the requested steps (times 16 groups for the jackknife).  Each numpy call works on
one batch (~16 MB), well under a second, so Ctrl-C is honoured promptly.

Speed: block-SO(2) steps (``AngleSteps``) take closed-form fast paths whose cumulative sums and cosines run in
torch's float64 kernels (``backend_torch``); ``device="cpu"|"cuda"`` on coherence, near_weight and
far_residual also draws the angles with torch on that device (a different random stream, same law).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from .families import Family
from .params import ParamError, ParamSpec, check_bool, check_int, field_error
from .stats import first_crossing
from .steps import AngleSteps, DenseSteps, accumulate_angle_values

#: memory budget for one batch of path samples, in float64 numbers
BATCH_BUDGET = 2_000_000

# Upper limits of the estimators' arguments (``accum measure`` declares its options with the same ones,
# ``simulations.measure``).  Results are arrays over the steps (times 16 groups), so 1e7 steps is about 2.6 GB;
# 1e9 samples or far-set sizes is days of work already.
#: the most steps n_steps (also context, offset and a streaming chunk)
MAX_STEPS = 10**7
#: the most Monte Carlo samples n_samples
MAX_SAMPLES = 10**9
#: the largest far-set size N
MAX_FAR_SIZE = 10**9
#: the most histogram bins of ``score_gap``
MAX_BINS = 10**6
#: the near logit s0 (and the ALiBi slope, likewise): the log far mass is about -s0 and its square is taken for the
#: standard error, which overflows float64 past ~1e154; at 1e6 the near weight is 1 to double precision already
#: wherever far scores stay 1e-3 below the near score
S0 = ParamSpec("s0", "float", 4.0, "near logit |q||k|", lo=0.0, hi=1e6, lo_open=True)
ALIBI_SLOPE = ParamSpec("alibi_slope", "float", 0.0, "ALiBi slope (0 = none)", lo=0.0, hi=1e6)


def _plain(x: Any) -> Any:
    """A JSON-ready value: numpy arrays and scalars as Python lists and numbers."""
    return np.asarray(x).tolist() if isinstance(x, (np.ndarray, np.generic)) else x


@dataclass(frozen=True, eq=False)
class Estimate:
    """A Monte Carlo estimate: ``mean`` and ``stderr`` (scalars or arrays of one shape), ``n`` samples.

    Estimators return the subclass that names what else they measured (the axis of a curve, the far mass
    beside a near weight); ``to_dict`` writes every field under its own name.
    """

    mean: Any
    stderr: Any
    n: int

    def to_dict(self) -> dict:
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}


@dataclass(frozen=True, eq=False)
class CurveEstimate(Estimate):
    """A curve over steps n = ``steps`` (coherence c(n), mean squared product norm)."""

    steps: np.ndarray


@dataclass(frozen=True, eq=False)
class OnsetEstimate(Estimate):
    """The first step n <= ``n_steps`` at which |c(n)| <= ``eps``."""

    eps: float
    n_steps: int


@dataclass(frozen=True, eq=False)
class ContextEstimate(Estimate):
    """A statistic of the last row of a context of length ``context`` (offset profile, window width)."""

    context: int


@dataclass(frozen=True, eq=False)
class ScoreGapEstimate(Estimate):
    """d E[s^2] of far scores s at distance ``offset`` in dimension ``dim``, with the far mean, the near score
    q.k, the standardised gap (q.k - E s) / sd(s), the tail P(|s| >= 1/2) and a histogram of s."""

    far_mean: float
    far_mean_stderr: float
    near: float
    gap_sd: float
    tail_half: float
    hist_counts: np.ndarray
    hist_edges: np.ndarray
    dim: int
    offset: int


@dataclass(frozen=True, eq=False)
class NearWeightEstimate(Estimate):
    """Near weight w(N) for N in ``far_sizes`` with the far mass M(N) and log M(N), each with its standard
    error, at near score ``s0`` and ALiBi slope ``alibi_slope``."""

    far_sizes: np.ndarray
    far_mass: np.ndarray
    far_mass_stderr: np.ndarray
    log_far_mass: np.ndarray
    log_far_mass_stderr: np.ndarray
    s0: float
    alibi_slope: float


@dataclass(frozen=True, eq=False)
class FarResidualEstimate(Estimate):
    """|r(N)|^2, the squared norm of the mean far value residual, for N in ``far_sizes``, with or without
    ``value_rotation``."""

    far_sizes: np.ndarray
    value_rotation: bool


def unit_probe(dim: int) -> np.ndarray:
    """The default probe vector 1/sqrt(d) (d,)."""
    return np.full(dim, 1.0 / np.sqrt(dim))


def check_family(family: Any) -> Family:
    """``family`` if it implements ``Family`` (``dim`` an integer >= 1 and ``sample``), else ``ParamError``
    naming family."""
    if not isinstance(family, Family):
        raise field_error("family", f"must be a Family object (dim, sample(rng, n_steps, batch)), e.g. "
                                    f"make_family('rope'); got {family!r}")
    check_int("family.dim", family.dim, 1)
    return family


def check_rng(rng: Any) -> np.random.Generator:
    """``rng`` if it is a ``numpy.random.Generator``, else ``ParamError`` naming rng."""
    if not isinstance(rng, np.random.Generator):
        raise field_error("rng", f"must be a numpy Generator, e.g. np.random.default_rng(seed); got {rng!r}")
    return rng


def probe(name: str, x: Any, dim: int) -> np.ndarray:
    """Probe vector ``x`` as float64 (d,), or ``unit_probe`` for None; ``ParamError`` naming it unless it is real,
    of shape (d,) and finite."""
    if x is None:
        return unit_probe(dim)
    try:
        arr = np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        raise field_error(name, f"must be a real vector of shape ({dim},), got {x!r}") from None
    if arr.shape != (dim,) or not np.all(np.isfinite(arr)):
        raise field_error(name, f"must be a finite real vector of shape ({dim},), got {x!r}")
    return arr


def check_samples(n_samples: Any, least: int = 2) -> int:
    """``n_samples`` as an int in [least, MAX_SAMPLES] (two or more wherever a standard error is computed)."""
    return check_int("n_samples", n_samples, least, MAX_SAMPLES)


def check_steps(name: str, n_steps: Any) -> int:
    """A step count (n_steps, context, offset) as an int in [1, MAX_STEPS]."""
    return check_int(name, n_steps, 1, MAX_STEPS)


def group_sizes(n_samples: int, groups: int = 16, least: int = 2) -> list[int]:
    """Split n_samples (>= ``least``) into min(groups, n_samples) near-equal group sizes."""
    n_samples = check_samples(n_samples, least)
    g = min(groups, n_samples)
    base, extra = divmod(n_samples, g)
    return [base + (i < extra) for i in range(g)]


def batches(size: int, per_sample: int) -> Iterator[int]:
    """Sub-batch sizes for ``size`` samples that each need ``per_sample`` floats of memory."""
    step = max(1, BATCH_BUDGET // max(per_sample, 1))
    for start in range(0, size, step):
        yield min(step, size - start)


def step_form(family: Family) -> type:
    """The step form class ``family.sample`` returns, as its class declares it (``FORM``: ``AngleSteps`` for rope,
    so2-accumulated and nope, ``HouseholderSteps`` for Householder, ``DenseSteps`` for the other built-ins) and,
    conservatively, ``DenseSteps`` for a user family (whose real form ``measure.resolve_job`` reads from its
    first sample).  Sizes are asked of it (``floats_per_step``, ``product_floats``)."""
    return getattr(type(family), "FORM", DenseSteps)


def path_floats(form: type, d: int, n_steps: int) -> int:
    """Memory of one sample of a length-n path of a step form, in float64 numbers: its vectors (n+1) d or its
    steps n ``form.floats_per_step``, the larger (so a dense family's draws stay within the budget too)."""
    return max((n_steps + 1) * d, n_steps * form.floats_per_step(d))


def path_chunk(form: type, d: int) -> int:
    """Steps of a path drawn at once by ``bilinear_path`` (one sample): BATCH_BUDGET / max(d, floats_per_step)."""
    return max(1, BATCH_BUDGET // max(d, form.floats_per_step(d)))


def grouped_sums(draw: Callable[[int], np.ndarray], n_samples: int, per_sample: int,
                 least: int = 2) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Run ``draw(b) -> (b, ...)`` over all samples; per-group sums, per-group sums of squares, sizes.

    Each batch is folded into its group's running sums before the next is drawn: memory is one batch plus
    the G group sums, whatever n_samples.
    """
    sizes = group_sizes(n_samples, least=least)
    sums, squares = [], []
    for size in sizes:
        total, total_sq = 0.0, 0.0
        for b in batches(size, per_sample):
            part = draw(b)
            total = total + part.sum(axis=0)
            total_sq = total_sq + (part * part).sum(axis=0)
        sums.append(total)
        squares.append(total_sq)
    return np.array(sums), np.array(squares), np.array(sizes)


@dataclass
class Moments:
    """Running count, mean and sum of squared deviations M2 of batches of samples (axis 0), in O(1) memory.

    Batches merge by the pairwise update of Chan, Golub & LeVeque (1979): for A with (n_a, mean_a, M2_a)
    and B likewise, delta = mean_b - mean_a, n = n_a + n_b,
        mean = mean_a + delta n_b / n,    M2 = M2_a + M2_b + delta^2 n_a n_b / n,
    which keeps the accuracy of the two-pass formula (no E[x^2] - E[x]^2 cancellation).  With one batch it
    equals numpy's mean and std(ddof=1) exactly.
    """

    n: int = 0
    mean: Any = 0.0
    m2: Any = 0.0

    def add(self, x: np.ndarray) -> None:
        b = x.shape[0]
        mean_b = x.mean(axis=0)
        m2_b = ((x - mean_b) ** 2).sum(axis=0)
        if self.n == 0:
            self.n, self.mean, self.m2 = b, mean_b, m2_b
            return
        n = self.n + b
        delta = mean_b - self.mean
        self.mean = self.mean + delta * (b / n)
        self.m2 = self.m2 + m2_b + delta**2 * (self.n * b / n)
        self.n = n

    def sd(self) -> Any:
        """Sample standard deviation, ddof = 1."""
        return np.sqrt(self.m2 / (self.n - 1))

    def stderr(self) -> Any:
        """sd / sqrt(n), the standard error of the mean."""
        return self.sd() / np.sqrt(self.n)


def pooled_mean(sums: np.ndarray, squares: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Pooled mean, its standard error sd / sqrt(n) and n from group sums and sums of squares (axis 0: group)."""
    n = int(sizes.sum())
    mean = sums.sum(axis=0) / n
    var = np.maximum(squares.sum(axis=0) / n - mean**2, 0.0) * n / (n - 1)
    return mean, np.sqrt(var / n), n


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


def bilinear_path(family: Family, rng: np.random.Generator, n_steps: int, batch: int, q: np.ndarray, k: np.ndarray,
                  transposed: bool = False, last_only: bool = False) -> np.ndarray:
    """q^T A_t ... A_1 k for t = 0..n_steps, (batch, n_steps + 1), for ``batch`` fresh sequences of steps.

    Equal to ``family.sample(rng, n_steps, batch).bilinear(q, k)`` (``transposed``: the steps' transposes,
    k^T A_1 ... A_t q).  A path longer than ``path_chunk`` steps (then batch is 1) is drawn and accumulated in
    chunks of that many steps, carrying the transported k (for SO(2) steps, the cumulative angle), so memory stays one chunk plus the returned row ((batch, 2): t = 0
    and t = n, with ``last_only``).  A family that changes form mid-path continues from the rotated k.
    q, k: (d,).
    """
    per_chunk = path_chunk(step_form(family), family.dim)
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


def onset(family: Family, eps: float, n_steps: int, n_samples: int, rng: np.random.Generator) -> OnsetEstimate:
    """Incoherence onset n_eps = min{n : |c(n)| <= eps}, from the Monte Carlo coherence curve.

    Interpolated between integer steps (``stats.first_crossing``) so the jackknife standard error is meaningful.
    Theory (i.i.d. steps with E[A] = rho I): n_eps = log(eps) / log(rho).
    """
    check_family(family)
    check_rng(rng)
    _check_eps(eps)
    check_steps("n_steps", n_steps)
    q = k = unit_probe(family.dim)
    sums, squares, sizes = grouped_sums(lambda b: bilinear_path(family, rng, n_steps, b, q, k),
                                        n_samples, path_floats(step_form(family), family.dim, n_steps))
    value, se = jackknife(lambda total, n: first_crossing(total / n, eps), [sums], sizes)
    return OnsetEstimate(float(value), float(se), int(sizes.sum()), eps=eps, n_steps=n_steps)


def _last_row_sums(family: Family, context: int, n_samples: int, rng: np.random.Generator, least: int = 2):
    """Group sums of the last query's score row s_{T-1, T-1-Delta}, Delta = 0..T-1, unit q = k.

    One fresh sequence of length T per sample; the row is the transposed transport of q read against k.
    """
    check_family(family)
    check_rng(rng)
    check_steps("context", context)
    q = k = unit_probe(family.dim)

    def draw(b: int) -> np.ndarray:
        return bilinear_path(family, rng, context, b, k, q, transposed=True)[:, :context]

    return grouped_sums(draw, n_samples, path_floats(step_form(family), family.dim, context), least=least)


def offset_profile(family: Family, context: int, n_samples: int, rng: np.random.Generator) -> ContextEstimate:
    """c_T(Delta) = E[q^T A_{T-1} ... A_{T-Delta} k], Delta = 0..T-1, for the last query of a length-T context.

    For stationary step laws c_T(Delta) = c(Delta) whatever T: per-token suppression measured at one length
    holds at every length (claim C3).  Shape (T,), plain standard errors.
    """
    sums, squares, sizes = _last_row_sums(family, context, n_samples, rng)
    return ContextEstimate(*pooled_mean(sums, squares, sizes), context=context)


def window(family: Family, context: int, n_samples: int, rng: np.random.Generator) -> ContextEstimate:
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
    return ContextEstimate(float(value), float(se), int(sizes.sum()), context=context)


def score_gap(family: Family, offset: int, n_samples: int, rng: np.random.Generator, bins: int = 60) -> ScoreGapEstimate:
    """Far-score statistics at distance ``offset``: s = q^T A_offset ... A_1 k with |q| = |k| = 1.

    mean is the far variance scaled by d, d E[s^2] (theory: 1 for Haar, |q|^2 |k|^2 = 1); it also holds the far
    mean with its standard error, the near score q.k = 1, the standardised gap (q.k - E s) / sd(s), the
    empirical tail P(|s| >= 1/2) and a histogram of s.  Standard error of d E[s^2] from the fourth moment.
    Streamed: each batch is folded into running moments, histogram counts and the tail count.
    """
    check_family(family)
    check_rng(rng)
    check_steps("offset", offset)
    check_samples(n_samples)  # a standard error needs two
    check_int("bins", bins, 1, MAX_BINS)
    d = family.dim
    q = k = unit_probe(d)
    far_m, sq_m = Moments(), Moments()
    counts, tail = np.zeros(bins, dtype=np.int64), 0
    for b in batches(n_samples, path_floats(step_form(family), d, offset)):
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


def stream_floats(form: type, d: int, chunk: int, largest: int) -> int:
    """Memory of one sample of a streaming estimator, in float64 numbers: one chunk of min(chunk, largest far
    size) steps, each holding the larger of the step's storage and ~4 d working numbers (transported query,
    logits, carried state).  The batch of samples streamed together is ``batches(n, stream_floats(...))``."""
    return min(chunk, largest) * max(4 * d, form.floats_per_step(d))


def _check_sizes(name: str, sizes: Sequence[int]) -> np.ndarray:
    """``sizes`` as a 1-d integer array, increasing, in [1, MAX_FAR_SIZE]; else ``ParamError`` naming ``name``."""
    arr = np.asarray(sizes)
    if (arr.ndim != 1 or arr.size == 0 or not np.issubdtype(arr.dtype, np.integer) or np.any(arr < 1)
            or np.any(arr > MAX_FAR_SIZE) or np.any(np.diff(arr) <= 0)):
        raise field_error(name, f"must be a non-empty increasing list of integers in [1, {MAX_FAR_SIZE}], "
                                f"got {sizes!r}")
    return arr


def _check_streaming(family: Any, far_sizes: Any, n_samples: Any, rng: Any, chunk: Any) -> np.ndarray:
    """The arguments shared by ``near_weight`` and ``far_residual``; returns the far sizes as an array."""
    check_family(family)
    check_rng(rng)
    check_samples(n_samples)
    check_int("chunk", chunk, 1, MAX_STEPS)
    return _check_sizes("far_sizes", far_sizes)


def near_weight(family: Family, far_sizes: Sequence[int], s0: float, n_samples: int, rng: np.random.Generator,
                alibi_slope: float = 0.0, chunk: int = 4096, device: str | None = None) -> NearWeightEstimate:
    """Attention weight on one near target among N far copies of its key, for each N in ``far_sizes``.

    Scores (logits): near s_0 (Delta = 0, no transport); far s_Delta = s0 q^T A_i ... A_{i-Delta+1} k - slope Delta
    for Delta = 1..N with unit q = k, so |s_Delta + slope Delta| <= s0 for any orthogonal steps.  Near weight
        w(N) = e^{s0} / (e^{s0} + sum_{Delta=1}^N e^{s_Delta}).
    The far sum is streamed over Delta in chunks with a running log-sum-exp (memory O(chunk), any N), and
    samples in batches folded into running moments (memory O(batch), any n_samples).  The estimate also holds the far
    mass M(N) = sum_Delta e^{s_Delta - s0} (an unbiased mean, E M = N E e^{s - s0} for stationary steps) and
    its log.  Far scores come from ``_far_score_stream`` (one cos per plane and step for SO(2) steps).
    device: None draws with ``rng``; "cpu" / "cuda" draws the angles with torch there (see ``coherence``).
    """
    import torch

    sizes = _check_streaming(family, far_sizes, n_samples, rng, chunk)
    s0, alibi_slope = S0.validate(s0), ALIBI_SLOPE.validate(alibi_slope)
    d = family.dim
    q = k = unit_probe(d)
    # dependent steps (a Markov token source) are drawn in one piece per batch, so no chunk restarts the chain
    span = int(sizes[-1]) if not getattr(family, "iid_steps", True) else None
    next_scores = _score_source(family, rng, q, k, device, span)
    weight, mass, log_mass = Moments(), Moments(), Moments()
    for b in batches(n_samples, stream_floats(step_form(family), d, span or chunk, int(sizes[-1]))):
        scores = next_scores(b)
        lse, done, rows = None, 0, []
        for target in sizes:
            while done < target:
                n = min(chunk, target - done)
                logits = s0 * scores(n)
                if alibi_slope:
                    logits -= alibi_slope * torch.arange(done + 1, done + n + 1, dtype=torch.float64, device=logits.device)
                part = torch.logsumexp(logits, dim=1)
                lse = part if lse is None else torch.logaddexp(lse, part)
                done += n
            rows.append(lse.cpu().numpy())
        lm = np.array(rows).T - s0
        weight.add(1.0 / (1.0 + np.exp(lm)))
        mass.add(np.exp(lm))
        log_mass.add(lm)
    return NearWeightEstimate(
        weight.mean, weight.stderr(), weight.n, far_sizes=sizes, far_mass=mass.mean, far_mass_stderr=mass.stderr(),
        log_far_mass=log_mass.mean, log_far_mass_stderr=log_mass.stderr(), s0=s0, alibi_slope=alibi_slope)


def _score_source(family: Family, rng: np.random.Generator, q: np.ndarray, k: np.ndarray, device: str | None,
                  span: int | None = None):
    """For a batch size b, a stream ``scores(n) -> (b, n)`` float64 tensor of q^T A_i ... A_{i-Delta+1} k for the
    next n offsets Delta, each call continuing where the last one stopped.  ``span``: steps are drawn at least
    that many at a time and served in slices (one path of dependent steps, not restarted at each call).

    Generic steps: the query is pulled back, x_Delta = A^T ... A^T q (``transposed().transport``), carried
    across calls, scores k . x_Delta.  Block-SO(2) steps (``AngleSteps``, or angles drawn on ``device``): the
    carried state is the cumulative angle Theta (wrapped to [-pi, pi]) and the scores are
    sum_b |c_b| cos(Theta_Delta,b + arg c_b) with c_b = conj(z_qb) z_kb (``backend_torch.far_logits``).
    """
    import torch

    from . import backend_torch as bt

    dev = bt.check_device(device)
    draw = None if dev is None else bt.angle_sampler(family, dev, bt.torch_generator(rng, dev))
    coef_abs, coef_arg = bt.probe_coefficients(q, k, dev) if family.dim % 2 == 0 else (None, None)  # SO(2): d even

    def for_batch(b: int):
        state = {"x": None, "theta": torch.zeros((b, family.dim // 2), dtype=torch.float64, device=dev),
                 "left": None}

        def scores(n: int) -> torch.Tensor:
            if span is None:
                return drawn(n)
            if state["left"] is None or state["left"].shape[1] < n:
                state["left"] = drawn(max(n, span))
            out, state["left"] = state["left"][:, :n], state["left"][:, n:]
            return out

        def drawn(n: int) -> torch.Tensor:
            if draw is not None:
                theta = draw(n, b)
            else:
                steps = family.sample(rng, n, b)
                theta = steps.angles()
                if theta is None or state["x"] is not None:
                    if state["x"] is None:
                        state["x"] = np.broadcast_to(q, (b, family.dim))
                    path = steps.transposed().transport(state["x"])
                    state["x"] = path[:, -1]
                    return torch.from_numpy(np.ascontiguousarray(path[:, 1:] @ k))
                theta = bt.as_tensor(theta)
            y, state["theta"] = bt.far_logits(theta, state["theta"], coef_abs, coef_arg)
            return y

        return scores

    return for_batch


def far_residual(family: Family, far_sizes: Sequence[int], n_samples: int, rng: np.random.Generator,
                 value_rotation: bool = True, chunk: int = 4096, device: str | None = None) -> FarResidualEstimate:
    """Squared norm of the uniformly weighted far value residual, |r(N)|^2 / |m|^2, for each N.

    r(N) = (1/N) sum_{Delta=1}^N P_Delta m with P_Delta = A_i ... A_{i-Delta+1} (values transported like keys,
    the QKV arm) or P_Delta = I (value_rotation=False, QK-only: r = m).  Computed by the recurrence
    U_t = A_t (U_{t-1} + m), U_N = N r(N), streamed in chunks of steps and batches of samples (running
    moments).  Theory for SO(2) with real plane coherence rho: E|r|^2 / |m|^2 -> (1 + rho) / ((1 - rho) N).
    device: None draws with ``rng``; "cpu" / "cuda" draws the angles with torch there (see ``coherence``).
    """
    from . import backend_torch as bt

    sizes = _check_streaming(family, far_sizes, n_samples, rng, chunk)
    check_bool("value_rotation", value_rotation)
    d = family.dim
    m = unit_probe(d)
    dev = bt.check_device(device)
    draw = None if dev is None else bt.angle_sampler(family, dev, bt.torch_generator(rng, dev))
    moments = Moments()
    for b in batches(n_samples, stream_floats(step_form(family), d, chunk, int(sizes[-1]))):
        u = np.zeros((b, d))
        done = 0
        out = []
        for target in sizes:
            while done < target:
                n = min(chunk, target - done)
                if not value_rotation:
                    u = u + n * m
                elif draw is not None:
                    u = accumulate_angle_values(draw(n, b), u, m)
                else:
                    u = family.sample(rng, n, b).accumulate_values(u, m)
                done += n
            out.append(np.sum((u / target) ** 2, axis=1))
        moments.add(np.array(out).T)
    return FarResidualEstimate(moments.mean, moments.stderr(), moments.n, far_sizes=sizes, value_rotation=value_rotation)


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
    per_chunk = max(1, BATCH_BUDGET // (d * d))
    products = {"fp64": np.eye(d), "fp32": np.eye(d, dtype=np.float32)}
    for start in range(0, n_steps, per_chunk):
        mats = family.sample(rng, min(per_chunk, n_steps - start), 1).dense()[0]
        for name, p in products.items():
            for a in mats.astype(p.dtype):
                p = a @ p
            products[name] = p
    return {name: float(np.max(np.abs(p.T.astype(np.float64) @ p - np.eye(d)))) for name, p in products.items()}
