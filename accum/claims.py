"""The checks behind ``accum verify``: each measures one claim's quantity by Monte Carlo and returns rows.

Every check is a function ``check(family, rng, **sizes) -> list[Measurement]`` registered with the kinds of
the rows it returns (``CHECKS[name].kinds(family, **sizes)``), so the report knows how many evidence rows it
has -- and each row's share of the false-failure budget -- before anything runs.

Probes are asymmetric on purpose (q != k, drawn from the check's own stream; families with nonzero mean
angles; a Markov token source with stay != 1/2), so that a reversed product, a flipped rotation direction or
a source that ignores its transitions changes the measured value.  Each family also goes once through the
all-pairs ``scores`` fast path (C4, and C5's second engine), and once through an exact comparison of its
fast paths with the plain fp64 reference (a sanity row).

Predictions come from ``accum.theory.prediction``: closed forms for the built-in laws, estimated from moment
operators (with their own standard errors) otherwise; each row says which.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from accum.simulations import estimators as est
from accum.simulations import montecarlo as mc
from accum.simulations import reference
from accum.simulations.families import FAMILIES, Family, family_name, family_params, user_object
from accum.simulations.laws import AngleLaw
from accum.simulations.params import ParamError
from accum.simulations.steps import StepShape
from accum.theory import Prediction, controls, prediction
from accum.theory.forms import has_closed_forms
from accum.theory.predict import NoClosedForm

from . import degenerate
from .verdict import Measurement

#: jackknife groups used by the nonlinear estimators (``mc.group_sizes``): G - 1 degrees of freedom
JACKKNIFE_GROUPS = 16


@dataclass(frozen=True)
class CheckSpec:
    """A registered check: the claim its rows concern (``claim(**sizes)``), the function, the kinds of the rows it
    returns (``kinds(family, **sizes)``) and the engine and theory routes it runs beyond the family's own
    (``routes(family, **sizes)``, ``accum.coverage``: names such as ``op:angle.bilinear`` or ``theory:moments``)."""

    claim: Callable[..., str]
    run: Callable[..., list[Measurement]]
    kinds: Callable[..., tuple[str, ...]]
    routes: Callable[..., set[str]]


CHECKS: dict[str, CheckSpec] = {}


def register(name: str, claim: str | Callable[..., str], kinds: Callable[..., tuple[str, ...]],
             routes: Callable[..., set[str]] = lambda family, **_: set()):
    """Add the decorated check to ``CHECKS`` under ``name``; ``claim`` is a claim name or a function of the
    check's keyword arguments; ``routes`` the routes it runs (``CheckSpec``)."""
    def wrap(fn):
        CHECKS[name] = CheckSpec(claim if callable(claim) else (lambda **_: claim), fn, kinds, routes)
        return fn
    return wrap


# --- routes: what of the engine and the theory a check runs (``accum.coverage`` holds the plan to all of them) ----


def family_routes(family: Family) -> set[str]:
    """The family's own routes: ``family:NAME`` (built-ins), ``law:NAME`` (its angle law) and ``form:NAME`` (the step
    form its samples come in)."""
    obj = user_object(family)
    out = {f"form:{mc.step_form(obj).form_name}"}
    if family_name(family) in FAMILIES:
        out.add(f"family:{family_name(family)}")
    angle_law = getattr(family, "angle_law", None)  # a user family's through its CheckedFamily (one line if it fails)
    law = angle_law() if angle_law is not None else None
    if law is not None and not isinstance(law, AngleLaw):
        raise ParamError(f"family {family_name(family)}: angle_law() must return an AngleLaw "
                         f"(accum.simulations.laws) or None, got a {type(law).__name__}")
    if law is not None:
        out.add(f"law:{law.name}")
    return out


def ops(family: Family, *names: str) -> set[str]:
    """``op:FORM.NAME`` for each step-form operation ``names`` (bilinear, transposed, transport, scores,
    pair-operator, values) on the family's step form."""
    form = mc.step_form(user_object(family)).form_name
    return {f"op:{form}.{name}" for name in names}


def theory_route(family: Family) -> set[str]:
    """The theory a prediction for ``family`` comes from: its closed forms (built-ins), else the moment operators."""
    return {"theory:closed" if has_closed_forms(family) else "theory:moments"}


def streams_by_angles(family: Family) -> bool:
    """Whether the family's step form hands the streaming estimators its angles (block SO(2)), so far scores never
    go through its transport."""
    return mc.step_form(user_object(family)).angles is not StepShape.angles


def far_score_ops(family: Family) -> set[str]:
    """The operations the streaming far-score estimator runs on the family: transposed transport, or none (angles)."""
    return set() if streams_by_angles(family) else ops(family, "transposed", "transport")


def label(family: Family) -> str:
    """Short name with the parameters that differ from the family's defaults, e.g. ``householder(d=16, beta=2)``
    (a user family by its class name; the JSON rows keep its full ``module:Class`` in ``params``)."""
    params = family_params(family)
    defaults = {}
    cls = type(user_object(family))
    if hasattr(cls, "PARAMS"):
        defaults = {s.name: s.default for s in cls.PARAMS}
    inner = [f"{k}={v}" for k, v in params.items() if k != "dim" and defaults.get(k, object()) != v]
    return f"{family_name(family).rpartition(':')[2]}(d={family.dim}{', ' if inner else ''}{', '.join(inner)})"


def measurement(claim: str, family: Family, what: str, kind: str, measured: Any, stderr: Any, predicted: Any,
                n: int, **kw: Any) -> Measurement:
    return Measurement(claim, label(family), what, kind, np.asarray(measured, float), np.asarray(stderr, float),
                       np.asarray(predicted, float), int(n), params={"family": family_name(family), **family_params(family)},
                       **kw)


def judged_as(kind: str, reference: dict) -> dict:
    """The keyword arguments that judge a row of ``kind``: to rounding (floor 1e-9) for an exact row (a deterministic
    family's: no spread), else against ``reference`` (``reference_for``, or reference and dof given)."""
    return {"floor": 1e-9} if kind == "exact" else reference


def reference_for(p: Prediction, dof: float | None = None) -> dict:
    """The reference distribution of a row whose own standard error has ``dof`` degrees of freedom (None: many)
    and whose prediction ``p`` may be estimated with ``p.dof`` of its own: Student t with the smaller of the
    two (a conservative Welch-type choice), normal when both are large."""
    dofs = [x for x in (dof, p.dof if p.samples else None) if x]
    return {"reference": "t", "dof": min(dofs)} if dofs else {}


#: |q| and |k| of every probe pair (``probe_pair``): neither is 1 and they differ, so an estimator or closed form that
#: drops or misplaces |q|^2 |k|^2 (or divides by |q||k|) moves its row.  Rows linear or homogeneous in q and k (the
#: coherence, transport, transfer and far second moment rows, the window's ratios) scale with their standard errors:
#: their z is the one unit probes gave (tests/verify/test_verify.py holds that).
PROBE_NORMS = (1.3, 0.7)


def probe_pair(dim: int, rng: np.random.Generator, overlap: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """q = |q| u and k = |k| normalise(u + overlap v), u and v independent uniform unit vectors and (|q|, |k|) =
    ``PROBE_NORMS``: q and k not parallel (their cosine is about 0.9), neither of norm 1."""
    q = rng.normal(size=dim)
    q /= np.linalg.norm(q)
    u = rng.normal(size=dim)
    k = q + overlap * u / np.linalg.norm(u)
    return PROBE_NORMS[0] * q, PROBE_NORMS[1] * k / np.linalg.norm(k)


def unit(x: np.ndarray) -> np.ndarray:
    """x / |x|."""
    return x / np.linalg.norm(x)


def balanced_probe_pair(dim: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """q and k of norms ``PROBE_NORMS`` that put the same mass on each of the d/2 planes (coordinates 2b, 2b + 1) at
    independent uniform angles: q_b = |q| (cos a_b, sin a_b) / sqrt(d/2), k_b likewise with angles b_b.  Not parallel,
    not unit, and for SO(2) steps whose angles have spread the far second moment is then exactly the claim's scale:
    d E[s^2] = d sum_b |q_b|^2 |k_b|^2 / 2 = |q|^2 |k|^2 (``theory.so2.far_second_moment``); d even."""
    half = dim // 2
    a, b = rng.uniform(-math.pi, math.pi, size=(2, half))
    plane = np.stack([np.stack([np.cos(t), np.sin(t)], axis=1).ravel() for t in (a, b)]) / math.sqrt(half)
    return PROBE_NORMS[0] * plane[0], PROBE_NORMS[1] * plane[1]


# --- control variates: exact means from the theory, the regression estimate, the controls' own row -------


@dataclass(frozen=True)
class PathMoments:
    """Sample means (..., 1 + p), covariance (..., 1 + p, 1 + p; ddof 1) and count n of (Y, X) over paths: what the
    streaming estimators keep (``controls_mean``, ``controls_cov``) for per-path values held in memory."""

    controls_mean: np.ndarray
    controls_cov: np.ndarray
    n: int

    @classmethod
    def of(cls, values: np.ndarray) -> "PathMoments":
        """From per-path values (n, ..., 1 + p)."""
        dev = values - values.mean(axis=0)
        return cls(values.mean(axis=0), np.einsum("n...i,n...j->...ij", dev, dev) / (len(values) - 1), len(values))


def known_controls(fn: Callable[..., np.ndarray], family: Family, *args: Any) -> np.ndarray | None:
    """The exact means ``fn(family, *args)`` of a controlled estimator's controls (``theory.controls``), or None
    where the theory has none (the estimate then runs without controls)."""
    try:
        return fn(family, *args)
    except NoClosedForm:
        return None


def controlled(e: Any, known: np.ndarray | None, directions: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """(value, standard error, dof) of a streaming estimate ``e`` (``controls_mean``, ``controls_cov``, ``n``) with its
    controls at their exact means ``known`` (``montecarlo.controlled_mean``, the regression estimate; ``directions``:
    on the combinations X W of the controls, ``montecarlo.project_controls``), or its plain mean without them."""
    if known is None:
        return e.controls_mean[..., 0], np.sqrt(e.controls_cov[..., 0, 0] / e.n), e.n - 1
    mean, cov = e.controls_mean, e.controls_cov
    if directions is not None:
        mean, cov, known = mc.project_controls(mean, cov, known, directions)
    return mc.controlled_mean(mean, cov, e.n, known)


def control_row(claim: str, family: Family, what: str, ests: Sequence[Any], known: Sequence[np.ndarray],
                source: str, kind: str = "statistical") -> Measurement:
    """The controls' sample means of the estimates ``ests`` held to their exact means ``known`` (one array each),
    every coordinate a point (t, n - 1 dof, n the smallest run): the controlled estimate no longer sees a defect that
    moves a control at first order, this row does.  ``kind`` "exact" for a deterministic family (to rounding)."""
    se = [np.sqrt(np.diagonal(e.controls_cov, axis1=-2, axis2=-1)[..., 1:] / e.n).ravel() for e in ests]
    n = min(e.n for e in ests)
    return measurement(claim, family, what, kind, np.concatenate([e.controls_mean[..., 1:].ravel() for e in ests]),
                       np.concatenate(se), np.concatenate([np.ravel(x) for x in known]), n, source=source,
                       **judged_as(kind, {"reference": "t", "dof": n - 1}))


# --- C1: incoherence -------------------------------------------------------------------------------------


def short_paths(steps: int) -> int:
    """Steps of the short run behind a curve of ``steps`` steps (0: none): steps // 8 from 16 steps on.  Its 8x the
    paths give the curve's first points, where |c(n)| is largest and the row detects most: a path of n steps costs n,
    so the short run costs what the long one does and resolves those points 2.8x better (as ``window_samples``)."""
    return steps // 8 if steps >= 16 else 0


def _coherence_kinds(family: Family, decayed: bool = True, **_) -> tuple[str, ...]:
    curve = "exact" if deterministic(family) else "statistical"
    return (curve, "statistical") if decayed else (curve,)


@register("coherence", "C1", _coherence_kinds, lambda family, **_: ops(family, "bilinear") | theory_route(family))
def check_coherence(family: Family, rng: np.random.Generator, *, steps: int, samples: int, eps: float,
                    theory_samples: int, decayed: bool = True) -> list[Measurement]:
    """c(n) = E q^T A_n ... A_1 k for n = 1..steps (random q != k) against theory, and, with ``decayed``,
    |c(steps)| <= eps |q||k| (since |c(n)| <= ||E[A_n..A_1]|| |q||k|: C1's decay, which a family that never mixes --
    RoPE, NoPE, the lattice law -- does not claim; its curve is still held to theory, exactly for the deterministic
    ones).  Points n <= ``short_paths(steps)`` come from a run of that many steps with 8x the paths."""
    q, k = probe_pair(family.dim, rng)
    e = est.coherence(family, steps, samples, rng, q=q, k=k)
    mean, se = e.mean[1:], e.stderr[1:]
    short = short_paths(steps)
    if short:
        first = est.coherence(family, short, 8 * samples, rng, q=q, k=k)
        mean, se = np.concatenate([first.mean[1:], mean[short:]]), np.concatenate([first.stderr[1:], se[short:]])
    p = prediction("coherence", family, rng=rng, samples=theory_samples, steps=steps, q=q, k=k)
    curve = measurement("C1", family, f"c(n) = E q'A_n..A_1 k, n=1..{steps} (q != k"
                        f"{f'; n <= {short} from 8x the paths' if short else ''})", _coherence_kinds(family)[0], mean,
                        se, np.asarray(p.value)[1:], e.n, pred_stderr=np.asarray(p.stderr)[1:], source=p.source,
                        **reference_for(p))
    if not decayed:
        return [curve]
    return [curve, measurement("C1", family, f"|c({steps})| <= {eps} |q||k| (decayed)", "statistical", abs(e.mean[-1]),
                               e.stderr[-1], eps * float(np.linalg.norm(q) * np.linalg.norm(k)), e.n, side="upper",
                               source="claim")]


# --- C2: finite window -----------------------------------------------------------------------------------


def deterministic(family: Family) -> bool:
    return family_name(family) in ("rope", "nope")


def _window_kinds(family: Family, **_) -> tuple[str, ...]:
    return ("exact", "exact") if deterministic(family) else ("statistical", "statistical")


def _last_row_routes(family: Family, **_) -> set[str]:
    return ops(family, "transposed", "bilinear") | theory_route(family)


def window_samples(samples: int, context: int, longest: int) -> int:
    """Paths for W(context) in a window row whose longest context is ``longest``: ``samples``, times up to 8 for the
    short contexts (a path of T steps costs T: at T = T_max / 16 eight times the paths cost half of one T_max set and
    resolve W(T) 2.8x better)."""
    return samples * max(1, min(8, longest // (2 * context)))


@register("window", "C2", _window_kinds, _last_row_routes)
def check_window(family: Family, rng: np.random.Generator, *, contexts: Sequence[int], samples: int,
                 theory_samples: int) -> list[Measurement]:
    """W(T) at each T (the estimator, ``window_samples`` paths) against theory, and the growth W(T_max) - W(T_min) by a
    paired design, both with the non-unit probes q != k of ``probe_pair`` (read through the transposed transport).

    Growth: one set of length-T_max paths gives both W(T_max) (all offsets) and W(T_min) (the first T_min
    offsets of the same paths), so their difference is the tail sum_{T_min <= Delta < T_max} c(Delta)^2 / (q.k)^2
    with the common part cancelled (jackknife over groups); theory: W(T_max) - W(T_min).  RoPE is deterministic:
    its rows are exact (the contrast: its window grows with T as its theory says).  Where E[A] = 0 (Haar) every
    c(Delta >= 1) is 0, each c^2's U-statistic is degenerate and the jackknife's error fails (it scales with the
    realized c: W(4) at z -6.4 against t15's 6.3 in one of 300 calibration reports): both rows are then judged by
    their weighted chi-square laws (``degenerate.window_deviates``).
    """
    t_min, t_max = contexts[0], contexts[-1]
    q, k = probe_pair(family.dim, rng)
    exact = deterministic(family)
    weights = None if exact else degenerate.score_weights(family, range(1, t_max), q, k)
    if weights is not None:  # E[A] = 0: each row as normal deviates of its statistic's weighted chi-square law
        law, source = "E[A] = 0, normal deviates of its weighted chi-square law", "closed form E[A (x) A]"
        counts = [window_samples(samples, t, t_max) for t in contexts] + [samples]
        z, paths, slopes = degenerate.window_deviates(family, rng, contexts, counts, q, k, weights)
        return [measurement("C2", family, f"window W(T), T={list(contexts)}, q != k: {law}", "statistical", z[:-1],
                            1.0, 0.0, paths[0], source=source, effect_scale=max(slopes[:-1])),
                measurement("C2", family, f"growth W({t_max}) - W({t_min}), paired, q != k: {law}", "statistical",
                            z[-1], 1.0, 0.0, paths[-1], source=source, effect_scale=slopes[-1])]
    ests = [est.window(family, t, window_samples(samples, t, t_max), rng, q=q, k=k) for t in contexts]
    preds = [prediction("window", family, rng=rng, samples=theory_samples, context=t, q=q, k=k) for t in contexts]
    w, se = np.array([e.mean for e in ests]), np.array([e.stderr for e in ests])
    pw, pse = np.array([float(p.value) for p in preds]), np.array([float(np.asarray(p.stderr)) for p in preds])
    sums, squares, sizes = est.last_row_sums(family, t_max, samples, rng, q, k, least=4)
    near = float(q @ k)
    growth, growth_se = mc.jackknife(lambda total, total_sq, n: est.window_width(total, total_sq, n, near, t_min),
                                     [sums, squares], sizes)
    grown, grown_se = pw[-1] - pw[0], math.hypot(pse[0], pse[-1])
    kind = "exact" if exact else "statistical"
    ref = {} if exact else reference_for(preds[0], JACKKNIFE_GROUPS - 1)
    contrast = " (contrast: grows)" if family_name(family) == "rope" else ""
    return [measurement("C2", family, f"window W(T), T={list(contexts)}, q != k", kind, w, se, pw, ests[0].n,
                        pred_stderr=pse, source=preds[0].source, floor=1e-9, **ref),
            measurement("C2", family, f"growth W({t_max}) - W({t_min}), paired, q != k{contrast}", kind, float(growth),
                        float(growth_se), grown, int(sizes.sum()), pred_stderr=grown_se, source=preds[0].source,
                        floor=1e-9, effect_scale=pw[0], **ref)]


@register("window-bias", "C2", lambda family, **_: ("statistical",), _last_row_routes)
def check_window_bias(family: Family, rng: np.random.Generator, *, context: int, samples: int,
                      theory_samples: int) -> list[Measurement]:
    """W(T) at a long context with few samples: without the unbiased c^2 the estimate would be high by about
    T Var(s) / n (noise counted as width), far beyond its standard error here.  Non-unit probes q != k."""
    q, k = probe_pair(family.dim, rng)
    e = est.window(family, context, samples, rng, q=q, k=k)
    p = prediction("window", family, rng=rng, samples=theory_samples, context=context, q=q, k=k)
    return [measurement("C2", family, f"W({context}) from {samples} paths (noise must not add width)", "statistical",
                        e.mean, e.stderr, p.value, e.n, pred_stderr=p.stderr, source=p.source,
                        **reference_for(p, JACKKNIFE_GROUPS - 1))]


# --- C3: transfer ----------------------------------------------------------------------------------------


@register("transfer", "C3", lambda family, **_: ("statistical", "statistical"), _last_row_routes)
def check_transfer(family: Family, rng: np.random.Generator, *, train: int, evaluate: int, samples: int,
                   theory_samples: int) -> list[Measurement]:
    """c_T(Delta), Delta < train, at T = train against theory, and the same profile at T = evaluate minus it (random
    q != k: the row is read through the transposed transport).  The short profile from ``window_samples`` paths (8x
    at T = evaluate / 16: a path of T steps costs T, so they cost half the long set and resolve c_T 2.8x better)."""
    q, k = probe_pair(family.dim, rng)
    short = est.offset_profile(family, train, window_samples(samples, train, evaluate), rng, q=q, k=k)
    long = est.offset_profile(family, evaluate, samples, rng, q=q, k=k)
    p = prediction("coherence", family, rng=rng, samples=theory_samples, steps=train - 1, q=q, k=k)
    diff_se = np.hypot(short.stderr, long.stderr[:train])
    keep = slice(1, None)  # Delta = 0 is q.k exactly
    return [measurement("C3", family, f"profile c_T(Delta) at T={train} vs theory", "statistical", short.mean[keep],
                        short.stderr[keep], np.asarray(p.value)[keep], short.n, pred_stderr=np.asarray(p.stderr)[keep],
                        source=p.source, **reference_for(p)),
            measurement("C3", family, f"profile at T={evaluate} minus at T={train}, Delta<{train}", "statistical",
                        (long.mean[:train] - short.mean)[keep], diff_se[keep], 0.0, long.n, source="claim",
                        effect_scale=float(np.max(np.abs(np.asarray(p.value)[keep]))))]


# --- C4: score gap ---------------------------------------------------------------------------------------


def _score_gap_kinds(family: Family, theory_samples: int | None = None, **_) -> tuple[str, ...]:
    if theory_samples is None:
        return ("statistical",)
    return ("exact", "exact") if deterministic(family) else ("statistical", "statistical")


def _score_gap_routes(family: Family, theory_samples: int | None = None, **_) -> set[str]:
    return ops(family, "bilinear") | (set() if theory_samples is None else theory_route(family))


@register("score-gap", "C4", _score_gap_kinds, _score_gap_routes)
def check_score_gap(family: Family, rng: np.random.Generator, *, offset: int, samples: int,
                    theory_samples: int | None = None) -> list[Measurement]:
    """The score-gap estimator (``estimators.score_gap``, what ``accum measure score-gap`` reports) at lag Delta.

    Without ``theory_samples`` (the claim): d E[s^2] = |q|^2 |k|^2, the claim's concentration scale (a law that does
    not mix, such as a lattice, matches its own moments but not this, and fails), with non-unit probes q != k of
    equal mass on every plane (``balanced_probe_pair``: for SO(2) steps that have mixed the claim's scale is then
    exact).  With it (the quantity held to theory on any family, mixed or not): d E[s^2] against the family's far
    second moment d q'E[P (x) P](k k')q at Delta and the far mean E[s] against the coherence c(Delta), both for the
    probes q != k of ``probe_pair`` (closed forms, or estimated from ``theory_samples`` steps; exact rows for the
    deterministic families, whose far score is one number)."""
    if theory_samples is None:
        q, k = balanced_probe_pair(family.dim, rng)
        e = est.score_gap(family, offset, samples, rng, q=q, k=k)
        scale = float(q @ q) * float(k @ k)
        return [measurement("C4", family, f"d E[s^2] at Delta={offset} vs |q|^2|k|^2 (|q|={PROBE_NORMS[0]}, "
                            f"|k|={PROBE_NORMS[1]}, q != k; gap sqrt(d) far sd)", "statistical", e.mean, e.stderr,
                            scale, e.n, source="claim (Haar value)")]
    q, k = probe_pair(family.dim, rng)
    e = est.score_gap(family, offset, samples, rng, q=q, k=k)
    second = prediction("far-variance", family, rng=rng, samples=theory_samples, offset=offset, q=q, k=k)
    first = prediction("coherence", family, rng=rng, samples=theory_samples, steps=offset, q=q, k=k)
    kind = _score_gap_kinds(family, theory_samples)[0]
    return [measurement("C4", family, f"score gap's d E[s^2] at Delta={offset}, q != k", kind, e.mean, e.stderr,
                        second.value, e.n, pred_stderr=second.stderr, source=second.source,
                        **judged_as(kind, reference_for(second))),
            measurement("C4", family, f"score gap's far mean E[s] at Delta={offset} vs c(Delta), q != k", kind,
                        e.far_mean, e.far_mean_stderr, np.asarray(first.value)[offset], e.n,
                        pred_stderr=np.asarray(first.stderr)[offset], source=first.source,
                        **judged_as(kind, reference_for(first)))]


def lag_means(scores: np.ndarray, offsets: Sequence[int]) -> np.ndarray:
    """Per sequence and lag, the means of s_{i, i-Delta}^2 and of s_{i, i-Delta} over the queries i >= Delta:
    (batch, len(offsets), 2) from all-pairs scores (batch, T, T)."""
    t = scores.shape[1]
    lags = [scores[:, np.arange(o, t), np.arange(0, t - o)] for o in offsets]
    return np.stack([np.stack([np.mean(s * s, axis=1), np.mean(s, axis=1)], axis=-1) for s in lags], axis=1)


def _scores_kinds(family: Family, **_) -> tuple[str, ...]:
    return ("statistical",) + (("statistical",) if known_controls(controls.coherence_at, family, [1]) is not None else ())


@register("scores-far-variance", "C4", _scores_kinds, lambda family, **_: ops(family, "scores") | theory_route(family))
def check_scores_far_variance(family: Family, rng: np.random.Generator, *, length: int, offsets: Sequence[int],
                              sequences: int, theory_samples: int) -> list[Measurement]:
    """Through the all-pairs ``scores`` fast path: d E[s_{i, i-Delta}^2] at each lag Delta in ``offsets`` with q != k
    at every token, averaged over the queries i >= Delta of each long sequence; standard errors from the spread of
    the per-sequence means.  Prediction: the family's far second moment for (q, k) at each lag (short lags see an
    error of the one-step law before it decays).

    Control variate: the per-sequence mean of s_{i, i-Delta} itself, whose exact mean is the coherence c(Delta)
    (``theory.controls.coherence_at``): at a short lag s is concentrated near c(Delta), s^2 ~ c^2 + 2 c (s - c), and
    the regression estimate (``montecarlo.controlled_mean``, t with sequences - 2 dof) removes that linear part
    (R^2 ~ 0.97-0.99 at Delta = 1 for q.k ~ 0.9; none for Haar).  A second row holds the mean scores to c(Delta)."""
    q, k = probe_pair(family.dim, rng)
    qs, ks = np.broadcast_to(q, (length, family.dim)), np.broadcast_to(k, (length, family.dim))
    per_seq = np.concatenate([lag_means(family.sample(rng, length, b).scores(qs, ks), offsets)
                              for b in mc.batches(sequences, 4 * length * length)]) * [family.dim, 1.0]
    paths = PathMoments.of(per_seq)
    known = known_controls(controls.coherence_at, family, offsets, q, k)
    value, se, dof = controlled(paths, None if known is None else known[:, None])
    preds = [prediction("far-variance", family, rng=rng, samples=theory_samples, offset=o, q=q, k=k) for o in offsets]
    rows = [measurement("C4", family, f"d E[s^2] at Delta={list(offsets)} from scores(), T={length}, q != k"
                        f"{'' if known is None else ' (control: mean s)'}", "statistical", value, se,
                        [p.value for p in preds], sequences, pred_stderr=[p.stderr for p in preds],
                        source=preds[0].source, **reference_for(preds[0], dof))]
    if known is not None:
        rows.append(control_row("C4", family, f"mean far score at Delta={list(offsets)} from scores() (the control) vs "
                                "c(Delta)", [paths], [known], "controls' means (C1 coherence closed form)"))
    return rows


# --- exact: fast paths against the plain reference -------------------------------------------------------


@register("fast-paths", "engine", lambda family, **_: ("exact",),
          lambda family, **_: ops(family, "scores", "transport", "bilinear"))
def check_fast_paths(family: Family, rng: np.random.Generator, *, length: int) -> list[Measurement]:
    """Every fast path of the step form -- ``steps.scores``, ``steps.transport`` and ``steps.bilinear`` -- against
    ``reference.scores`` / ``reference.transport`` (dense fp64 loops) on one sequence of odd length with different
    random q_i, k_j at every token: max |difference|."""
    steps = family.sample(rng, length, 2)
    q, k = rng.normal(size=(2, length, family.dim)), rng.normal(size=(2, length, family.dim))
    mats = steps.dense()
    fast, plain = steps.scores(q, k), reference.scores(mats, q, k)
    mask = np.tril(np.ones((length, length), dtype=bool))
    gap = float(np.max(np.abs(fast[:, mask] - plain[:, mask])))
    plain_path = reference.transport(mats, k[:, 0])
    gap = max(gap, float(np.max(np.abs(steps.transport(k[:, 0]) - plain_path))))
    line = steps.bilinear(q[:, 0], k[:, 0])
    gap = max(gap, float(np.max(np.abs(line - np.einsum("btd,bd->bt", plain_path, q[:, 0])))))
    scale = float(np.max(np.abs(plain[:, mask])))
    return [measurement("engine", family, f"scores(), transport() and bilinear() vs the fp64 reference, T={length} "
                        "(max |diff|)", "exact", gap, 0.0, 0.0, 2, side="upper", floor=1e-9 * max(scale, 1.0),
                        source="reference")]
