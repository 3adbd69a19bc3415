"""C5 and C6 checks of ``accum verify``: the far mass under its bound, with ALiBi and through two engines, and the value
residual -- the estimators over a far set (``simulations.farset``), controlled where the theory knows the controls'
means (``claims.controlled``, ``theory.controls``).  Registered in ``claims.CHECKS`` like every check.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from accum.simulations import estimators as est
from accum.simulations import montecarlo as mc
from accum.simulations.families import Family
from accum.theory import controls, far, prediction
from accum.theory.forms import mixing_estimable
from accum.theory.predict import NoClosedForm

from .claims import (control_row, controlled, deterministic, far_score_ops, judged_as, known_controls, measurement, ops,
                     probe_pair, reference_for, register, theory_route, unit)
from .verdict import Measurement

#: |m| of the value vector of the C6 rows: not 1, so a residual normalised by |m| where |m|^2 belongs (or not at all)
#: shows; |r|^2 / |m|^2 and its controlled estimate do not depend on |m| (u scales with m)
VALUE_NORM = 1.7


# --- C5: far mass, the bound, ALiBi ----------------------------------------------------------------------


def _has_far_mass(family: Family) -> bool:
    if mixing_estimable(family):
        return True
    try:
        prediction("far-mass", family, far_sizes=[1], s0=1.0)
    except (NoClosedForm, NotImplementedError):
        return False
    return True


def _has_far_controls(family: Family) -> bool:
    return known_controls(controls.far_score_sums, family, [1]) is not None


def _far_mass_kinds(family: Family, **_) -> tuple[str, ...]:
    if not _has_far_mass(family):
        return ("bound",)
    return ("bound", "statistical", "statistical") + (("statistical",) if _has_far_controls(family) else ())


@register("far-mass", "C5", _far_mass_kinds, lambda family, **_: far_score_ops(family) | theory_route(family))
def check_far_mass(family: Family, rng: np.random.Generator, *, far_sizes: Sequence[int], s0: float,
                   samples: int, theory_samples: int = 20_000) -> list[Measurement]:
    """Near weight under the norm bound 1/(1 + N e^{-s0 (1 + |q||k|)}) (a sanity row: the near logit is s0 and every far
    one is at least -s0 |q||k| for steps of norm <= 1, so it holds sample by sample); where the theory has it, the far mass E sum e^{s - s0} on the log scale and the Jensen bound
    E w >= 1/(1 + E M) one-sided.  An estimated far mass (``theory.farmass``, mixing orthogonal steps) uses
    ``theory_samples`` paths and enters with its own standard error.  Non-unit probes q != k (``probe_pair``).

    Control variates: where the theory knows E sum_Delta x_Delta and E sum_Delta x_Delta^2 (x the unit far score;
    ``theory.controls.far_score_sums``), the far mass is the regression estimate with those two controls
    (``montecarlo.controlled_mean``: t with n - 3 dof; e^{s - s0} is close to a quadratic in s, R^2 ~ 0.9-0.99), and a
    fourth row holds the controls' sample means to those values."""
    q, k = probe_pair(family.dim, rng)
    e = est.near_weight(family, far_sizes, s0, samples, rng, q=q, k=k)
    sizes = np.asarray(far_sizes)
    reach = float(np.linalg.norm(q) * np.linalg.norm(k))
    rows = [measurement("C5", family, f"near weight <= 1/(1+N e^(-s0 (1 + |q||k|))), s0={s0}, N={list(far_sizes)}",
                        "bound", e.mean, 0.0, far.lower_bound(sizes, s0 * (1.0 + reach) / 2.0), e.n, side="upper",
                        floor=1e-12, source="bound")]
    if _has_far_mass(family):
        mass = prediction("far-mass", family, rng=rng, samples=theory_samples, far_sizes=sizes, s0=s0, q=q, k=k)
        known = known_controls(controls.far_score_sums, family, sizes, q, k)
        value, se, dof = controlled(e, known)
        jensen = "Jensen bound of the " + ("closed form" if not mass.samples else "estimated far mass")
        top = np.asarray(mass.value)[-1]
        rows.append(measurement("C5", family, f"far mass E sum e^(s-s0), N={list(far_sizes)} (log scale"
                                f"{'' if known is None else '; controls sum s, sum s^2'})", "statistical", value, se,
                                mass.value, e.n, pred_stderr=mass.stderr, scale="log", source=mass.source,
                                **reference_for(mass, dof)))
        rows.append(measurement("C5", family, f"near weight >= 1/(1 + E far mass) (Jensen), N={far_sizes[-1]}",
                                "statistical", e.mean[-1], e.stderr[-1], 1.0 / (1.0 + top), e.n,
                                pred_stderr=np.asarray(mass.stderr)[-1] / (1.0 + top) ** 2, side="lower",
                                source=jensen, **reference_for(mass, e.n - 1)))
        if known is not None:
            rows.append(control_row("C5", family, f"far-score sums sum x, sum x^2 (the controls), N={list(far_sizes)}",
                                    [e], [known], "controls' means (C1 coherence, C4 far second moment closed forms)"))
    return rows


def _alibi_kinds(family: Family, **_) -> tuple[str, ...]:
    return ("exact",) if deterministic(family) else ("statistical",)


@register("alibi", "C5", _alibi_kinds, lambda family, **_: far_score_ops(family) | theory_route(family))
def check_alibi(family: Family, rng: np.random.Generator, *, far_sizes: Sequence[int], s0: float, slope: float,
                samples: int) -> list[Measurement]:
    """With the ALiBi bias -slope Delta the far mass converges (summable); measured against the theory's far
    mass with the bias, two-sided on the log scale (exact for the deterministic NoPE baseline)."""
    e = est.near_weight(family, far_sizes, s0, samples, rng, alibi_slope=slope)
    mass = prediction("far-mass", family, far_sizes=np.asarray(far_sizes), s0=s0, slope=slope)
    kind = _alibi_kinds(family)[0]
    ref = {} if kind == "exact" else {"reference": "t", "dof": e.n - 1}
    return [measurement("C5", family, f"ALiBi slope {slope}: far mass, N={list(far_sizes)} (log scale)", kind,
                        e.far_mass, e.far_mass_stderr, mass.value, e.n, scale="log",
                        floor=1e-9, source=mass.source, **ref)]


@register("far-mass-engines", "C5", lambda family, **_: ("statistical",),
          lambda family, **_: far_score_ops(family) | ops(family, "scores"))
def check_far_mass_engines(family: Family, rng: np.random.Generator, *, far_size: int, s0: float,
                           samples: int) -> list[Measurement]:
    """The far mass M(N) = sum_{Delta=1}^N e^{s_Delta - s0} two ways: the streaming estimator (chunked
    log-sum-exp over transported queries) and the last row of the all-pairs ``scores`` fast path on fresh
    sequences of length N + 1.  Both estimate E M(N); their log-ratio is held to 0 (two-sample z, t with the
    smaller sample's dof).  For families without a closed far mass this is C5's statistical row.  Non-unit q != k."""
    q, k = probe_pair(family.dim, rng)
    streamed = est.near_weight(family, [far_size], s0, samples, rng, chunk=max(1, far_size // 3), q=q, k=k)
    length = far_size + 1
    qs, ks = np.broadcast_to(q, (length, family.dim)), np.broadcast_to(k, (length, family.dim))
    masses = np.concatenate([np.sum(np.exp(s0 * family.sample(rng, length, b).scores(qs, ks)[:, -1, :-1] - s0),
                                    axis=1) for b in mc.batches(samples, 4 * length * length)])
    return [measurement("C5", family, f"far mass at N={far_size}: streaming vs all-pairs scores() (log scale)",
                        "statistical", streamed.far_mass[0], streamed.far_mass_stderr[0],
                        masses.mean(), samples, pred_stderr=masses.std(ddof=1) / math.sqrt(samples), scale="log",
                        reference="t", dof=samples - 1, source="second engine (scores fast path)")]


# --- C6: value rotation ----------------------------------------------------------------------------------


def residual_runs(far_sizes: Sequence[int], samples: int) -> list[tuple[list[int], int]]:
    """The far-residual runs behind a values row, (far sizes, paths) each: a size N with N_max >= 16 N gets a run of its
    own with samples x min(8, N_max // (8 N)) paths (a path of N steps costs N, so the short sizes buy resolution
    cheaply, as the window's short contexts do), the others share one run of ``samples`` paths."""
    top = int(far_sizes[-1])
    boost = {int(n): max(1, min(8, top // (8 * int(n)))) for n in far_sizes}
    rest = [n for n in boost if boost[n] == 1]
    return [([n], samples * boost[n]) for n in boost if boost[n] > 1] + ([(rest, samples)] if rest else [])


def _values_kinds(family: Family, **_) -> tuple[str, ...]:
    """statistical residual, exact QK-only contrast, statistical controls (where the theory has them); all exact for a
    deterministic family (RoPE, NoPE: one residual, no spread)."""
    known = known_controls(controls.mean_residual, family, [1])
    kind = "exact" if deterministic(family) else "statistical"
    return (kind, "exact") + (() if known is None else (kind,))


@register("values", "C6", _values_kinds, lambda family, **_: ops(family, "values") | theory_route(family))
def check_values(family: Family, rng: np.random.Generator, *, far_sizes: Sequence[int], samples: int,
                 theory_samples: int) -> list[Measurement]:
    """|r(N)|^2/|m|^2 with value rotation against theory (-> (1+rho)/((1-rho) N)); without value rotation the
    residual is m itself, |r|^2/|m|^2 = 1 (the QK-only contrast, exact).  m is a random unit vector (not the
    symmetric 1/sqrt(d)) times ``VALUE_NORM``; paths per N from ``residual_runs``.

    Control variates: for i.i.d. steps mu = E r(N) = (1/N) sum_Delta E[A]^Delta m is known (``theory.controls``), and
    |r|^2 = |mu|^2 + 2 mu.(r - mu) + |r - mu|^2: the noise of the linear part lies along mu, so |r|^2 is the regression
    estimate on the one control mu.r (known mean |mu|^2; ``montecarlo.controlled_mean``, n - 2 dof; regressing on all d
    coordinates of r adds a bias of order d / n, and the fixed coefficient 2 mu misses the skew of |r - mu|^2 along
    mu, which made givens worse than no control).  A third row holds the mean of r to mu."""
    m = VALUE_NORM * unit(probe_pair(family.dim, rng)[0])
    known = known_controls(controls.mean_residual, family, list(far_sizes), m)
    p = prediction("far-residual", family, rng=rng, samples=theory_samples, far_sizes=np.asarray(far_sizes), m=m)
    runs = [(ns, est.far_residual(family, ns, n, rng, m=m)) for ns, n in residual_runs(far_sizes, samples)]
    where = {int(n): i for i, n in enumerate(far_sizes)}
    mus = [None if known is None else known[[where[n] for n in ns]] for ns, _ in runs]
    parts = [controlled(e, mu, None if mu is None else mu[..., None]) for (_, e), mu in zip(runs, mus)]
    order = np.argsort([n for ns, _ in runs for n in ns])
    value, se = (np.concatenate([np.atleast_1d(part[j]) for part in parts])[order] for j in (0, 1))
    dof, n = min(part[2] for part in parts), runs[-1][1].n
    plain = est.far_residual(family, far_sizes[:1], 2, rng, value_rotation=False, m=m)
    kind = _values_kinds(family)[0]
    rows = [measurement("C6", family, f"|r(N)|^2/|m|^2 with value rotation, N={list(far_sizes)}"
                        f"{'' if known is None else ' (controls r(N))'}", kind, value, se, p.value, n,
                        pred_stderr=p.stderr, source=p.source, **judged_as(kind, reference_for(p, dof))),
            measurement("C6", family, "QK-only contrast: |r|^2/|m|^2 = 1", "exact", plain.mean, 0.0, 1.0, plain.n,
                        floor=1e-12, source="closed form")]
    if known is not None:
        rows.append(control_row("C6", family, f"mean residual r(N) (the controls) vs (1/N) sum E[A]^Delta m, "
                                f"N={list(far_sizes)}", [e for _, e in runs], mus,
                                "controls' means (E[A] closed form)", kind))
    return rows
