"""The machinery every Monte Carlo estimator shares (``estimators``, ``farset``): result types (``Estimate``: value,
standard error, sample count), argument checks, batches sized by memory, and running moments with their standard
errors.

Samples are drawn in ``groups`` (G = min(16, n_samples) groups of near-equal size, fixed order), each group
from the same ``rng`` in turn, so a run is reproducible from its seed.  Linear statistics (means) carry the
plain standard error sd / sqrt(n); nonlinear ones (onset, window width, unbiased squared norms) carry a
delete-one-group jackknife standard error (Efron & Stein 1981).

Memory: samples are drawn in batches of at most ``BATCH_BUDGET`` float64 numbers of path (``batches``; a step
form says what one step stores, ``path_floats``, ``stream_floats``) and folded into running sums
(``grouped_sums``, ``Moments``) before the next batch is drawn.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from .families import Family
from .params import ParamSpec, check_int, field_error
from .steps import DenseSteps

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
    #: per N, the sample means (len, 3) and covariance (len, 3, 3; ddof 1) over the paths of (M(N), sum_Delta x_Delta,
    #: sum_Delta x_Delta^2), x_Delta = q^T A_i ... A_{i-Delta+1} k the unit far score (before s0 and the ALiBi bias):
    #: the far mass with two controls whose exact means are the coherence and far second moments (``controlled_mean``)
    controls_mean: np.ndarray | None = None
    controls_cov: np.ndarray | None = None


@dataclass(frozen=True, eq=False)
class FarResidualEstimate(Estimate):
    """|r(N)|^2, the squared norm of the mean far value residual, for N in ``far_sizes``, with or without
    ``value_rotation``."""

    far_sizes: np.ndarray
    value_rotation: bool
    #: per N, the sample means (len, 1 + d) and covariance (len, 1 + d, 1 + d; ddof 1) over the paths of
    #: (|r(N)|^2 / |m|^2, r(N)): the residual with the d controls r(N), whose exact mean is (1/N) sum_Delta E[P_Delta] m
    #: for i.i.d. steps (``controlled_mean``)
    controls_mean: np.ndarray | None = None
    controls_cov: np.ndarray | None = None


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


def check_budget(budget: Any) -> int | None:
    """A batch memory budget in float64 numbers (``batches``): None (``BATCH_BUDGET``) or an int in [1, BATCH_BUDGET]."""
    return None if budget is None else check_int("batch_floats", budget, 1, BATCH_BUDGET)


def check_steps(name: str, n_steps: Any) -> int:
    """A step count (n_steps, context, offset) as an int in [1, MAX_STEPS]."""
    return check_int(name, n_steps, 1, MAX_STEPS)


def group_sizes(n_samples: int, groups: int = 16, least: int = 2) -> list[int]:
    """Split n_samples (>= ``least``) into min(groups, n_samples) near-equal group sizes."""
    n_samples = check_samples(n_samples, least)
    g = min(groups, n_samples)
    base, extra = divmod(n_samples, g)
    return [base + (i < extra) for i in range(g)]


def batches(size: int, per_sample: int, budget: int | None = None) -> Iterator[int]:
    """Sub-batch sizes for ``size`` samples that each need ``per_sample`` floats of memory, at most ``budget``
    (default ``BATCH_BUDGET``) floats a batch.  A small budget makes many batches, whose running moments are
    merged (``Moments.add``): how ``accum verify`` holds that merge to its standard errors."""
    step = max(1, (BATCH_BUDGET if budget is None else budget) // max(per_sample, 1))
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


def dependent_span(family: Any, n_steps: int) -> int | None:
    """``n_steps`` for a family whose steps depend on each other (``iid_steps`` False: a Markov token source), whose
    path of that many steps the streaming estimators draw in one piece so that no chunk restarts its chain; None for
    i.i.d. steps (drawn chunk by chunk)."""
    return None if getattr(family, "iid_steps", True) else int(n_steps)


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
class RunningMoments:
    """Running count, mean and second-moment sum M2 of batches of samples (axis 0), in O(1) memory: the merge
    shared by ``Moments`` (M2 elementwise) and ``CoMoments`` (M2 a matrix per leading index), each saying only how
    its deviations multiply (``spread``).

    Batches merge by the pairwise update of Chan, Golub & LeVeque (1979): for A with (n_a, mean_a, M2_a)
    and B likewise, delta = mean_b - mean_a, n = n_a + n_b,
        mean = mean_a + delta n_b / n,    M2 = M2_a + M2_b + spread(delta) n_a n_b / n,
    which keeps the accuracy of the two-pass formula (no E[x^2] - E[x]^2 cancellation).
    """

    n: int = 0
    mean: Any = 0.0
    m2: Any = 0.0

    @staticmethod
    def spread(dev: np.ndarray) -> np.ndarray:
        """Sum over axis 0 of the deviations' products (a subclass's one piece of algebra)."""
        raise NotImplementedError

    def add(self, x: np.ndarray) -> None:
        b = x.shape[0]
        mean_b = x.mean(axis=0)
        m2_b = self.spread(x - mean_b)
        if self.n == 0:
            self.n, self.mean, self.m2 = b, mean_b, m2_b
            return
        n = self.n + b
        delta = mean_b - self.mean
        self.mean = self.mean + delta * (b / n)
        self.m2 = self.m2 + m2_b + self.spread(delta[None]) * (self.n * b / n)
        self.n = n


class Moments(RunningMoments):
    """Running moments of scalar (or elementwise) samples: spread = sum of squares.  With one batch it equals
    numpy's mean and std(ddof=1) exactly."""

    @staticmethod
    def spread(dev: np.ndarray) -> np.ndarray:
        return (dev**2).sum(axis=0)

    def sd(self) -> Any:
        """Sample standard deviation, ddof = 1."""
        return np.sqrt(self.m2 / (self.n - 1))

    def stderr(self) -> Any:
        """sd / sqrt(n), the standard error of the mean."""
        return self.sd() / np.sqrt(self.n)


class CoMoments(RunningMoments):
    """Running moments of vector samples x (b, ..., p): spread = sum of outer products, so M2 is the co-moment
    matrix C = sum (x - mean)(x - mean)^T per leading index, in O(p^2) memory.  With one batch ``cov()`` equals
    numpy's covariance with ddof = 1 exactly."""

    @staticmethod
    def spread(dev: np.ndarray) -> np.ndarray:
        return np.einsum("b...i,b...j->...ij", dev, dev)

    def cov(self) -> Any:
        """Sample covariance matrices, ddof = 1, (..., p, p)."""
        return self.m2 / (self.n - 1)


def controlled_mean(mean: np.ndarray, cov: np.ndarray, n: int, known: np.ndarray,
                    coef: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """E[Y] by control variates: (value, standard error, degrees of freedom), over leading axes.

    mean (..., 1 + p) and cov (..., 1 + p, 1 + p): sample means and covariance (ddof 1) over n paths of (Y, X), X p
    controls whose exact means ``known`` (..., p) are known.

    With ``coef`` b (..., p) given (a coefficient known in advance): Yhat = Ybar - b^T (Xbar - mu), exactly unbiased,
    se^2 = Var(Y - b^T X) / n = (S_YY - 2 b^T S_XY + b^T S_XX b) / n, n - 1 dof.

    Without: the regression estimator (least squares of Y on X, read at X = mu),
        beta = S_XX^+ S_XY,    Yhat = Ybar - beta^T (Xbar - mu),
        se^2 = s^2 (1/n + (Xbar - mu)^T ((n - 1) S_XX)^+ (Xbar - mu)),    s^2 = (S_YY - S_YX beta) (n - 1) / (n - r - 1),
    S the sample covariances, r the rank of S_XX (eigenvalues above 1e-12 of its largest or of the largest squared
    mean: a control without spread is left out), dof = n - r - 1.  Var(Yhat) = (1 - R^2) Var(Ybar) for large n, R the
    multiple correlation of Y with X; the formula is exact under a normal linear model (t with n - r - 1 dof) and
    valid for large n otherwise (Glynn & Szechtman 2002), with a bias of order r / n from estimating beta on the same
    paths (small for a few controls and hundreds of paths; ``coef`` avoids it).  With every control deterministic
    this is the plain mean, sd / sqrt(n)."""
    mean, cov, known = np.asarray(mean, float), np.asarray(cov, float), np.asarray(known, float)
    if known.shape != mean[..., 1:].shape:
        raise ValueError(f"known means of shape {known.shape} for controls of shape {mean[..., 1:].shape}")
    sxx, sxy, syy = cov[..., 1:, 1:], cov[..., 1:, 0], cov[..., 0, 0]
    gap = mean[..., 1:] - known
    if coef is not None:
        b = np.broadcast_to(np.asarray(coef, float), gap.shape)
        var = syy - 2 * np.einsum("...i,...i->...", b, sxy) + np.einsum("...i,...ij,...j->...", b, sxx, b)
        return mean[..., 0] - np.einsum("...i,...i->...", b, gap), np.sqrt(np.maximum(var, 0.0) / n), n - 1
    w, v = np.linalg.eigh(sxx)
    scale = np.maximum(np.max(np.abs(w), axis=-1), np.max(mean[..., 1:] ** 2, axis=-1))[..., None]
    keep = w > 1e-12 * scale
    inv_w = np.where(keep, 1.0 / np.where(keep, w, 1.0), 0.0)
    pinv = np.einsum("...ik,...k,...jk->...ij", v, inv_w, v)
    rank = int(np.max(np.sum(keep, axis=-1))) if keep.size else 0
    beta = np.einsum("...ij,...j->...i", pinv, sxy)
    value = mean[..., 0] - np.einsum("...i,...i->...", beta, gap)
    resid = np.maximum(syy - np.einsum("...i,...i->...", sxy, beta), 0.0) * (n - 1) / (n - rank - 1)
    lever = np.einsum("...i,...ij,...j->...", gap, pinv, gap) / (n - 1)
    return value, np.sqrt(resid * (1.0 / n + lever)), n - rank - 1


def project_controls(mean: np.ndarray, cov: np.ndarray, known: np.ndarray,
                     directions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, cov, known) of (Y, X W) from those of (Y, X), W = ``directions`` (..., p, q): fewer controls, each a
    combination of the old ones (its exact mean mu W), for ``controlled_mean`` -- a regression on q << p controls has a
    bias of order q / n instead of p / n.  (Y, X) -> (Y, X W) is linear: mean -> (Ybar, Xbar W),
    cov -> [[S_YY, S_YX W], [W^T S_XY, W^T S_XX W]]."""
    mean, cov, w = np.asarray(mean, float), np.asarray(cov, float), np.asarray(directions, float)
    q = w.shape[-1]
    lead = mean.shape[:-1]
    full = np.zeros(lead + (1 + q, 1 + q))
    full[..., 0, 0] = cov[..., 0, 0]
    cross = np.einsum("...i,...iq->...q", cov[..., 0, 1:], w)
    full[..., 0, 1:], full[..., 1:, 0] = cross, cross
    full[..., 1:, 1:] = np.einsum("...ip,...ij,...jq->...pq", w, cov[..., 1:, 1:], w)
    new_mean = np.concatenate([mean[..., :1], np.einsum("...i,...iq->...q", mean[..., 1:], w)], axis=-1)
    return new_mean, full, np.einsum("...i,...iq->...q", np.asarray(known, float), w)


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


def stream_floats(form: type, d: int, chunk: int, largest: int) -> int:
    """Memory of one sample of a streaming estimator, in float64 numbers: one chunk of min(chunk, largest far
    size) steps, each holding the larger of the step's storage and ~4 d working numbers (transported query,
    logits, carried state).  The batch of samples streamed together is ``batches(n, stream_floats(...))``."""
    return min(chunk, largest) * max(4 * d, form.floats_per_step(d))
