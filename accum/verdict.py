"""Turning one measured row into a verdict: the reference distribution, the threshold, the detectable effect.

A row holds points x_i (a curve, or one value) with standard errors se_i, predictions p_i and, where the
prediction is itself estimated (moment operators of a user family), prediction standard errors pse_i.

* kind: ``statistical`` (Monte Carlo against a prediction; evidence), ``adversarial`` (the best case a search
  found, held to a bound; evidence), ``exact`` (deterministic, se = 0) and ``bound`` (holds sample by sample
  when the assumptions hold).  Exact and bound rows are sanity checks: they fail the report when violated but
  are not evidence and take no share of the false-failure budget (they cannot fail by chance).
* scale: ``linear`` z = (x - p) / sqrt(se^2 + pse^2 + floor^2); ``log`` (skewed positive quantities such as a
  far mass, whose sample mean has a long right tail) z = (log x - log p) / sqrt((se/x)^2 + (pse/p)^2 + floor^2),
  the delta method on the log scale, where the sampling law is closer to symmetric.
* reference: ``normal``, or ``t`` with ``dof`` degrees of freedom where the standard error comes from few
  independent pieces (a delete-one-group jackknife over G groups has G - 1; a mean of n samples n - 1).
* skew: where a linear row's point is the mean of n skewed values (sample skewness gamma given), its z is taken
  through ``hall_transform``, which removes the n^{-1/2} skewness of a studentized mean's law (a split-sample g1
  of Givens steps, gamma about -7 over 2000 steps, put 9 in 20,000 draws above 3.94 where the normal puts 0.8).
* threshold: a row gets the share alpha_r = budget / R of the report's false-failure budget (R the number of
  evidence rows, Bonferroni), split over its m points: two-sided k = F^{-1}(1 - alpha_r / (2 m)), one-sided
  k = F^{-1}(1 - alpha_r / m), F the reference distribution.  A correct implementation then fails the whole
  report with probability at most ``budget`` (up to the accuracy of the reference distribution, which
  ``accum verify --calibrate`` measures).
* mde: the smallest relative error of the prediction the row would detect at its threshold,
  min_i k sqrt(se_i^2 + pse_i^2) / |p_i| over the points (the best-resolved point; log rows: k times the
  relative standard error).  A row with mde = 0.02 catches a closed form that is 2% off.  Points whose
  prediction is 0 (|p_i| <= floor) have no relative error; a row whose every prediction is 0 states instead
  mde_absolute = min_i k sqrt(se_i^2 + pse_i^2), the smallest departure from 0 it would detect.

Standard-error rows check a standard error itself: R independent replicate estimates x_r with reported se_r give
rho = sqrt(mean_r (x_r - xbar)^2 / mean_r se_r^2), 1 when the reported errors are right, with a delta-method
standard error from the replicates themselves (``stderr_ratio``); the row holds rho to 1 two-sided, so errors too
small and too large both fail (one-sided, rho <= 1, for a jackknife's error, conservative in expectation:
``accum.stderrs``), and its mde is the relative error of the reported standard error it detects.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
from scipy import stats as sps

KINDS = ("statistical", "adversarial", "exact", "bound")
EVIDENCE = ("statistical", "adversarial")
SCALES = ("linear", "log")
SIDES = ("two", "upper", "lower")


@dataclass(frozen=True)
class Measurement:
    """One row's numbers before its verdict (module docstring for the fields' meaning).

    side: ``two`` (|z| <= k), ``upper`` (z <= k: the measurement must not exceed the prediction) or ``lower``
    (z >= -k).  source: where the prediction comes from ("closed form", "estimated ...", "bound",
    "second engine", ...).  floor: an absolute (linear) or relative (log) tolerance for rounding.
    """

    claim: str
    family: str
    what: str
    kind: str
    measured: np.ndarray
    stderr: np.ndarray
    predicted: np.ndarray
    n: int
    pred_stderr: np.ndarray | float = 0.0
    side: str = "two"
    reference: str = "normal"
    dof: float | None = None
    scale: str = "linear"
    floor: float = 1e-12
    source: str = "closed form"
    effect_scale: float | None = None
    params: dict = field(default_factory=dict)
    skew: np.ndarray | float | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if self.reference not in ("normal", "t") or (self.reference == "t" and not (self.dof and self.dof >= 1)):
            raise ValueError(f"reference must be 'normal' or 't' with dof >= 1, got {self.reference!r}, {self.dof!r}")
        if self.scale not in SCALES or self.side not in SIDES:
            raise ValueError(f"scale must be one of {SCALES} and side one of {SIDES}, got {self.scale!r}, {self.side!r}")
        if self.skew is not None and self.scale != "linear":
            raise ValueError("skew (hall_transform of a studentized mean) goes with the linear scale only")

    @property
    def counts_as_evidence(self) -> bool:
        return self.kind in EVIDENCE

    @property
    def points(self) -> int:
        return int(np.size(self.measured))


@dataclass(frozen=True)
class Row:
    """A judged row: the worst point's numbers, the threshold and the verdict (the JSON contract)."""

    claim: str
    family: str
    what: str
    kind: str
    counts_as_evidence: bool
    predicted: float
    measured: float
    stderr: float
    pred_stderr: float
    z: float
    k: float
    reference: str
    dof: float | None
    scale: str
    side: str
    points: int
    n: int
    mde: float | None
    source: str
    passed: bool
    params: dict
    mde_absolute: float | None = None


def reference_isf(p: float, reference: str, dof: float | None) -> float:
    """Upper-tail quantile: P(X > k) = p for X standard normal or Student t with ``dof``."""
    return float(sps.norm.isf(p) if reference == "normal" else sps.t.isf(p, dof))


def threshold(m: Measurement, alpha: float) -> float:
    """k for the row's share ``alpha`` of the budget, split over its points, on its side and reference."""
    per_point = alpha / max(m.points, 1)
    return reference_isf(per_point / 2.0 if m.side == "two" else per_point, m.reference, m.dof)


def hall_transform(t: np.ndarray, skew: np.ndarray | float, n: int) -> np.ndarray:
    """Hall's monotone transform of a studentized mean t = (xbar - mu) / (s / sqrt(n)) of n values whose skewness is
    gamma: with a = gamma / (3 sqrt(n)),

        t + a t^2 + a^2 t^3 / 3 + gamma / (6 sqrt(n)),

    normal to O(1/n) where t itself is off by O(1/sqrt(n)) (Johnson's 1978 modified t plus a cubic term that makes it
    monotone: its derivative is (1 + a t)^2 >= 0, so a larger error never gives a smaller z).  Source: P. Hall, "On
    the removal of skewness by transformation", J. R. Statist. Soc. B 54 (1992) 221-228.  Shapes broadcast."""
    a = np.asarray(skew, dtype=float) / (3.0 * math.sqrt(n))
    return t + a * t**2 + a**2 * t**3 / 3.0 + a / 2.0


def z_scores(m: Measurement) -> np.ndarray:
    """Standardised differences on the row's scale (module docstring), through ``hall_transform`` where the row gives
    its values' skewness."""
    x, se, p, pse = np.broadcast_arrays(*(np.atleast_1d(np.asarray(a, dtype=float))
                                          for a in (m.measured, m.stderr, m.predicted, m.pred_stderr)))
    with np.errstate(divide="ignore", invalid="ignore"):
        if m.scale == "log":
            return (np.log(x) - np.log(p)) / np.sqrt((se / x) ** 2 + (pse / p) ** 2 + m.floor**2)
        z = (x - p) / np.sqrt(se**2 + pse**2 + m.floor**2)
        return z if m.skew is None else hall_transform(z, m.skew, m.n)


def min_detectable_effect(m: Measurement, k: float) -> float | None:
    """min over points of k sqrt(se^2 + pse^2) / |p| (relative; |p| replaced by ``effect_scale`` where given;
    log rows: k sqrt((se/x)^2 + (pse/p)^2)); points with a prediction of 0 (|p| <= floor) left out; None for
    rows that are not statistical or have no scale."""
    if m.kind != "statistical":
        return None
    x, se, p, pse = np.broadcast_arrays(*(np.atleast_1d(np.asarray(a, dtype=float))
                                          for a in (m.measured, m.stderr, m.predicted, m.pred_stderr)))
    scale = np.where(np.abs(p) > m.floor, np.abs(p), np.nan) if m.effect_scale is None \
        else np.full_like(p, abs(m.effect_scale))
    with np.errstate(divide="ignore", invalid="ignore"):
        if m.scale == "log":
            rel = k * np.sqrt((se / x) ** 2 + (pse / p) ** 2)
        else:
            rel = k * np.sqrt(se**2 + pse**2) / scale
    rel = rel[np.isfinite(rel)]
    return float(rel.min()) if rel.size else None


def absolute_detectable_effect(m: Measurement, k: float) -> float | None:
    """For a statistical linear row whose every prediction is 0 (|p| <= floor, no ``effect_scale``): the smallest
    absolute departure from 0 it would detect, min over points of k sqrt(se^2 + pse^2); None otherwise."""
    if m.kind != "statistical" or m.scale != "linear" or m.effect_scale is not None:
        return None
    se, p, pse = np.broadcast_arrays(*(np.atleast_1d(np.asarray(a, dtype=float))
                                       for a in (m.stderr, m.predicted, m.pred_stderr)))
    if np.any(np.abs(p) > m.floor):
        return None
    return float(k * np.min(np.sqrt(se**2 + pse**2)))


def judge(m: Measurement, alpha: float) -> Row:
    """The verdict of one row at its budget share ``alpha`` (ignored for exact and bound rows, k = 1 on z
    measured in units of ``floor``); the worst point on the row's side is reported."""
    z = z_scores(m)
    k = threshold(m, alpha) if m.counts_as_evidence else 1.0
    if m.side == "two":
        worst, ok = int(np.nanargmax(np.abs(z))) if np.any(np.isfinite(z)) else 0, bool(np.all(np.abs(z) <= k))
    elif m.side == "upper":
        worst, ok = int(np.nanargmax(z)) if np.any(np.isfinite(z)) else 0, bool(np.all(z <= k))
    else:
        worst, ok = int(np.nanargmin(z)) if np.any(np.isfinite(z)) else 0, bool(np.all(z >= -k))
    ok = ok and bool(np.all(np.isfinite(z)))
    x, se, p, pse = (np.broadcast_to(np.atleast_1d(np.asarray(a, dtype=float)), z.shape)
                     for a in (m.measured, m.stderr, m.predicted, m.pred_stderr))
    return Row(m.claim, m.family, m.what, m.kind, m.counts_as_evidence, float(p[worst]), float(x[worst]),
               float(se[worst]), float(pse[worst]), float(z[worst]), k, m.reference if m.counts_as_evidence else "exact",
               m.dof, m.scale, m.side, m.points, m.n, min_detectable_effect(m, k), m.source, ok, m.params,
               absolute_detectable_effect(m, k))


def judge_all(measurements: Sequence[Measurement], budget: float, n_evidence: int) -> list[Row]:
    """Each row judged at its share budget / R of the false-failure budget (R = ``n_evidence``, at least 1)."""
    return [judge(m, budget / max(n_evidence, 1)) for m in measurements]


def claim_verdicts(rows: Sequence[Row], claims: Sequence[str]) -> dict[str, bool]:
    """A claim passes when it has at least one evidence row and every row attributed to it passed."""
    return {c: any(r.claim == c and r.counts_as_evidence for r in rows) and all(r.passed for r in rows if r.claim == c)
            for c in claims}


def report_verdict(rows: Sequence[Row], claims: Sequence[str]) -> tuple[dict[str, bool], bool, bool]:
    """(verdict per claim, sanity verdict, report verdict): the sanity rows are those of no claim in ``claims`` (the
    engine's exact rows); the report passes when every claim and every sanity row passes."""
    verdicts = claim_verdicts(rows, claims)
    sanity = all(r.passed for r in rows if r.claim not in claims)
    return verdicts, sanity, all(verdicts.values()) and sanity


def stderr_ratio(values: np.ndarray, stderrs: np.ndarray) -> tuple[float, float]:
    """(rho, se): how far the spread of R independent replicate estimates exceeds their reported standard errors.

    values, stderrs: (R, J), J outputs of one estimator per replicate (points pooled: a scale error of the reported
    errors moves all of them).  With xbar_j the mean over replicates,
        U_r = mean_j (x_rj - xbar_j)^2 R/(R-1) / vbar_j,   V_r = mean_j se_rj^2 / vbar_j,   vbar_j = mean_r se_rj^2,
    rho = sqrt(mean U / mean V) is 1 when the errors are honest (E U = E V) and 1 + e when every reported error is a
    factor 1 / (1 + e) too small.  Its standard error is the delta method on log(mean U / mean V) with the replicates'
    own variances and covariance of U and V (any kurtosis of the estimates is in var U, so no normal-theory F law
    is assumed): se(rho) = rho / 2 sqrt(var U / (R Ubar^2) + var V / (R Vbar^2) - 2 cov(U, V) / (R Ubar Vbar)).
    Identical replicates with se = 0 give nan (a failure)."""
    x, se = np.atleast_2d(np.asarray(values, dtype=float)), np.atleast_2d(np.asarray(stderrs, dtype=float))
    if x.shape[0] == 1 and x.shape[1] > 1:
        x, se = x.T, se.T  # (R,) given as one row
    r = x.shape[0]
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.mean(se**2, axis=0)
        u = np.mean((x - x.mean(axis=0)) ** 2 * (r / (r - 1)) / scale, axis=1)
        v = np.mean(se**2 / scale, axis=1)
        ub, vb = u.mean(), v.mean()
        cov = np.cov(u, v)
        var_log = (cov[0, 0] / ub**2 + cov[1, 1] / vb**2 - 2 * cov[0, 1] / (ub * vb)) / r
        rho = float(np.sqrt(ub / vb))
    return rho, float(rho / 2 * np.sqrt(var_log))


def binomial_interval(failures: int, runs: int, level: float = 0.95) -> tuple[float, float]:
    """Clopper-Pearson interval for a failure probability from ``failures`` of ``runs``."""
    a = (1.0 - level) / 2.0
    lo = 0.0 if failures == 0 else float(sps.beta.ppf(a, failures, runs - failures + 1))
    hi = 1.0 if failures == runs else float(sps.beta.ppf(1.0 - a, failures + 1, runs - failures))
    return lo, hi


def binomial_tail(failures: int, runs: int, rate: float) -> float:
    """P(X >= failures) for X ~ Binomial(runs, rate): how surprising ``failures`` is if the true failure
    probability were ``rate`` (the one-sided exact test of "at most rate")."""
    return float(sps.binom.sf(failures - 1, runs, rate))
