"""Checks that reach the routes no claim's own row runs: a step form's transport and its transpose read at a random
k, its sample second-moment operator (``Steps.pair_operator``), and the moment-operator theory
(``theory.estimated``) held against the closed forms of the built-ins.

Every row is statistical evidence for the claim whose quantity it measures, so a wrong route fails the report:

* ``transport``: E[A_n ... A_1 k] and E[A_1^T ... A_n^T q] (vectors, every coordinate a point) against M^n k and
  (M^T)^n q, M = E[A] the family's exact one-step mean (``closed_forms(family).step_mean``); i.i.d. steps.  With a
  nonzero mean angle M is not symmetric, so a transpose that transports forward fails.  C1 (E[P_n] is the
  quantity whose decay C1 states).
* ``pair-operator``: the sample operator S(X) = mean_i A_i X A_i^T of M single steps, its adjoint T and its
  per-sample values <U, A_i V A_i^T> read at (U, V) = (q q^T, k k^T): d <qq^T, S(kk^T)> = d <T(qq^T), kk^T> =
  d mean_i (q^T A_i k)^2, each against the far second moment at lag 1 (``prediction("far-variance", offset=1)``).
  C4.
* ``step-mean``: the sampler held to the family's law through its first moment: the mean of d x d one-step matrices
  against the exact E[A], all entries at once by Hotelling's T^2 (``hotelling``), so a sampler that is off along
  directions a random probe pair hardly sees (a few tokens never drawn) fails.  C1.
* ``step-pair``: the sampler held to the family's law through its second moment E[A (x) A]: 24 contractions
  (u'A x)(v'A z) of one step -- 18 axis-aligned ones (E[A_aa^2], E[A_ab^2], E[A_aa A_bb], E[A_ab A_ba], E[A_aa A_ab],
  E[A_ab A_bb] for three index pairs a != b) and 6 along random non-unit vectors -- against the closed form
  (``closed_forms(family).pair_operator``), all at once by Hotelling's T^2, so a direction law that keeps E[A] but
  changes the fourth moments (Householder w isotropic but not uniform; SO(2) planes that share one angle) fails.
  C4 (E[A (x) A] is the operator whose powers give the far second moment).
* ``estimated-theory``: the prediction estimated from sampled moment operators (the route a user family takes)
  against the built-in's closed form: coherence (C1), far variance (C4) or far residual (C6), t with the
  jackknife's G - 1 degrees of freedom.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from scipy import stats as sps

from accum.simulations import montecarlo as mc
from accum.simulations.families import Family
from accum.simulations.steps import common_form
from accum.theory import estimated, prediction
from accum.theory.forms import closed_forms

from .claims import measurement, ops, probe_pair, reference_for, register, theory_route
from .verdict import Measurement

#: the claim each quantity of ``estimated-theory`` concerns
QUANTITY_CLAIMS = {"coherence": "C1", "far-variance": "C4", "far-residual": "C6"}


def mean_transport(family: Family, rng: np.random.Generator, x: np.ndarray, lags: Sequence[int], samples: int,
                   transposed: bool) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard error of P_n x = A_n ... A_1 x (``transposed``: A_n^T ... A_1^T x, the engine's
    ``transposed().transport``) at each n in ``lags``, from ``samples`` sequences: each (len(lags), d).

    For i.i.d. steps A_n^T ... A_1^T has the law of (A_1 ... A_n)^T, i.e. of P_n^T, so its mean is (M^T)^n x."""
    n_max = int(max(lags))
    idx = np.asarray(lags)
    moments = mc.Moments()
    for b in mc.batches(samples, mc.path_floats(mc.step_form(family), family.dim, n_max)):
        steps = family.sample(rng, n_max, b)
        path = (steps.transposed() if transposed else steps).transport(x)
        moments.add(path[:, idx].reshape(b, -1))
    d = family.dim
    return moments.mean.reshape(len(lags), d), moments.stderr().reshape(len(lags), d)


@register("transport", "C1", lambda family, **_: ("statistical", "statistical"),
          lambda family, **_: ops(family, "transport", "transposed") | theory_route(family))
def check_transport(family: Family, rng: np.random.Generator, *, lags: Sequence[int], samples: int) -> list[Measurement]:
    """E[A_n..A_1 k] against M^n k and E[A_1^T..A_n^T q] against (M^T)^n q (module docstring)."""
    q, k = probe_pair(family.dim, rng)
    mean = closed_forms(family).step_mean()
    rows = []
    for transposed, x, m, what in ((False, k, mean, "E[A_n..A_1 k] vs E[A]^n k"),
                                   (True, q, mean.T, "E[A_1'..A_n' q] vs (E[A]')^n q")):
        got, se = mean_transport(family, rng, x, lags, samples, transposed)
        want = np.array([np.linalg.matrix_power(m, int(n)) @ x for n in lags])
        rows.append(measurement("C1", family, f"transport: {what}, n={list(lags)}, every coordinate", "statistical",
                                got.ravel(), se.ravel(), want.ravel(), samples, source="closed form (E[A] exact)"))
    return rows


def hotelling(total: np.ndarray, outer: np.ndarray, n: int,
              rank_tol: float = 1e-10) -> tuple[float, int, float, float]:
    """Hotelling's one-sample T^2 of n rows y_i (p,) against mean 0, from their sums ``total`` = sum_i y_i (p,) and
    ``outer`` = sum_i y_i y_i' (p, p).

    ybar = total / n, S = (outer - n ybar ybar') / (n - 1); with S = V diag(lambda) V' and the r directions where
    lambda > rank_tol * max(lambda), T^2 = n sum_{j <= r} (v_j' ybar)^2 / lambda_j.  Under H0 (E[y] = 0) and normal
    rows, (n - r) T^2 / (r (n - 1)) ~ F(r, n - r) (Hotelling 1931; asymptotically chi^2_r / r for any rows with
    finite variance).  Along the other directions every row is the same number, so there ybar must be 0 up to
    rounding.  Needs n > p rows (so a direction of no sample variance is one of no variance).  Returns (the
    upper-tail p-value of T^2, r, the length of ybar's projection on the constant directions, 0 if none, and that
    length's standard error sqrt(sum_{j > r} max(lambda_j, 0) / n): for truly constant directions only the rounding
    of eigh's eigenvalues (about sqrt(eps max(lambda) / n)), but a direction that varies less than
    rank_tol * max(lambda) is counted constant too, and its mean still moves by sqrt(lambda_j / n)).  Centre the
    rows near their mean (y = x - predicted mean) so ``outer`` loses no digits, and give the coordinates comparable
    scales (the tolerance is relative to the largest variance)."""
    if n <= total.size:
        raise ValueError(f"Hotelling's T^2 needs more rows ({n}) than coordinates ({total.size})")
    ybar = total / n
    cov = (outer - n * np.outer(ybar, ybar)) / (n - 1)
    lam, vec = np.linalg.eigh((cov + cov.T) / 2)
    varying = lam > rank_tol * max(lam.max(), 0.0)
    proj = vec.T @ ybar
    r = int(varying.sum())
    t2 = n * float(np.sum(proj[varying] ** 2 / lam[varying]))
    p_value = float(sps.f.sf((n - r) * t2 / (r * (n - 1)), r, n - r)) if r else 1.0
    constant = float(np.linalg.norm(proj[~varying]))
    return p_value, r, constant, math.sqrt(float(np.sum(np.maximum(lam[~varying], 0.0))) / n)


def constant_floor(constant_se: float) -> float:
    """The tolerance of an exact row on ``hotelling``'s constant directions: rounding (1e-9) plus six standard errors
    of that projection (a direction varying less than the rank tolerance is counted constant; its mean moves by its
    own standard error, which is 0 to rounding for a truly constant one)."""
    return 1e-9 + 6.0 * constant_se


@register("step-mean", "C1", lambda family, **_: ("statistical", "exact"), lambda family, **_: theory_route(family))
def check_step_mean(family: Family, rng: np.random.Generator, *, samples: int) -> list[Measurement]:
    """``samples`` single steps A_i (dense d x d) against the exact E[A] (``closed_forms(family).step_mean``) by
    Hotelling's T^2 over the d^2 entries (``hotelling``; rows y_i = vec(A_i - E[A])).  Statistical row: the normal
    deviate z = Phi^{-1}(1 - p) of its p-value, held one-sided to 0 (a wrong E[A] or sampler makes T^2 large).
    Exact row: along the directions in which every sampled step is the same (structural zeros, tied entries) the
    mean must equal E[A] to rounding (``constant_floor``)."""
    d = family.dim
    mean = closed_forms(family).step_mean().ravel()
    total, outer = np.zeros(d * d), np.zeros((d * d, d * d))
    for b in mc.batches(samples, 2 * d * d):
        y = family.sample(rng, 1, b).dense().reshape(b, d * d) - mean
        total += y.sum(axis=0)
        outer += y.T @ y
    p_value, _, constant, constant_se = hotelling(total, outer, samples)
    what = f"E[A] of one step, all {d}x{d} entries, vs the exact E[A]"
    return [measurement("C1", family, f"{what}: Hotelling T^2 (z of its F p-value, {samples} steps)", "statistical",
                        [sps.norm.isf(p_value)], [1.0], [0.0], samples, side="upper",
                        source="Hotelling T^2 against the closed-form E[A]"),
            measurement("C1", family, f"{what}: along the directions in which every step is the same",
                        "exact", [constant], [0.0], [0.0], samples, floor=constant_floor(constant_se),
                        source="closed form (E[A] exact)")]


#: the contractions of the step-pair check: index pairs (a, b) read axis-aligned, and random (u, x, v, z) directions
PAIR_INDEX_PAIRS, PAIR_RANDOM_DIRECTIONS = 3, 6


def pair_directions(dim: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(u, x, v, z) directions of the step-pair check, (J, 4, d), and the index pairs they use: three pairs a != b --
    the first plane (0, 1), a random plane (2c, 2c + 1) and a random pair -- each read as E[A_aa^2], E[A_ab^2],
    E[A_aa A_bb], E[A_ab A_ba], E[A_aa A_ab], E[A_ab A_bb] (coordinate vectors), then ``PAIR_RANDOM_DIRECTIONS`` of
    independent normal vectors (norms about sqrt(d), not 1)."""
    eye = np.eye(dim)
    plane = 2 * int(rng.integers(dim // 2))
    pairs = [(0, 1), (plane, plane + 1), tuple(int(i) for i in rng.choice(dim, size=2, replace=False))]
    read = []
    for a, b in pairs[:PAIR_INDEX_PAIRS]:
        ea, eb = eye[a], eye[b]
        read += [(ea, ea, ea, ea), (ea, eb, ea, eb), (ea, ea, eb, eb), (ea, eb, eb, ea), (ea, ea, ea, eb),
                 (ea, eb, eb, eb)]
    dirs = np.concatenate([np.array(read, dtype=float), rng.normal(size=(PAIR_RANDOM_DIRECTIONS, 4, dim))])
    return dirs, np.array(pairs)


def pair_contractions(mats: np.ndarray, dirs: np.ndarray) -> np.ndarray:
    """(u_j' A_i x_j)(v_j' A_i z_j) for steps ``mats`` (n, d, d) and directions ``dirs`` (J, 4, d): (n, J)."""
    first = np.einsum("jd,nde,je->nj", dirs[:, 0], mats, dirs[:, 1])
    second = np.einsum("jd,nde,je->nj", dirs[:, 2], mats, dirs[:, 3])
    return first * second


def pair_expectations(pair: np.ndarray, dirs: np.ndarray) -> np.ndarray:
    """E[(u'A x)(v'A z)] = (u (x) v)' S (x (x) z) for each direction, S = E[A (x) A] in ``kron`` layout (d^2, d^2): (J,)."""
    d = dirs.shape[-1]
    left = np.einsum("ja,jb->jab", dirs[:, 0], dirs[:, 2]).reshape(-1, d * d)
    right = np.einsum("ja,jb->jab", dirs[:, 1], dirs[:, 3]).reshape(-1, d * d)
    return np.einsum("ja,ab,jb->j", left, pair, right)


@register("step-pair", "C4", lambda family, **_: ("statistical", "exact"), lambda family, **_: theory_route(family))
def check_step_pair(family: Family, rng: np.random.Generator, *, samples: int) -> list[Measurement]:
    """``samples`` single steps (dense) read along ``pair_directions`` against E[A (x) A] of the closed form
    (``pair_expectations``), Hotelling's T^2 over the J contractions (rows y_i = (contraction - expectation) /
    (|u||x||v||z|), each in units of its bound for an orthogonal step, so the random directions' spread, about d^2
    times the axis-aligned ones', does not push a slowly turning plane's contractions under ``hotelling``'s
    relative rank tolerance: rope-uniform's slowest plane was counted constant once in 32 reports).  The
    statistical row is the normal deviate of its p-value, held one-sided as in ``check_step_mean``; the exact row
    holds the directions in which every sampled contraction is the same number (structural zeros of a block step)
    to rounding (``constant_floor``)."""
    dirs, _ = pair_directions(family.dim, rng)
    scale = np.prod(np.linalg.norm(dirs, axis=-1), axis=1)
    want = pair_expectations(closed_forms(family).pair_operator(), dirs) / scale
    total, outer = np.zeros(len(dirs)), np.zeros((len(dirs), len(dirs)))
    for b in mc.batches(samples, 2 * family.dim * family.dim):
        y = pair_contractions(family.sample(rng, 1, b).dense()[:, 0], dirs) / scale - want
        total += y.sum(axis=0)
        outer += y.T @ y
    p_value, _, constant, constant_se = hotelling(total, outer, samples)
    what = (f"E[A (x) A] of one step along {len(dirs)} contractions (u'Ax)(v'Az) ({6 * PAIR_INDEX_PAIRS} axis-aligned, "
            f"{PAIR_RANDOM_DIRECTIONS} random) vs the closed form")
    return [measurement("C4", family, f"{what}: Hotelling T^2 (z of its F p-value, {samples} steps)", "statistical",
                        [sps.norm.isf(p_value)], [1.0], [0.0], samples, side="upper",
                        source="Hotelling T^2 against the closed-form E[A (x) A]"),
            measurement("C4", family, f"{what}: along the directions in which every step is the same", "exact",
                        [constant], [0.0], [0.0], samples, floor=constant_floor(constant_se),
                        source="closed form (E[A (x) A] exact)")]


@register("pair-operator", "C4", lambda family, **_: ("statistical",),
          lambda family, **_: ops(family, "pair-operator") | theory_route(family))
def check_pair_operator(family: Family, rng: np.random.Generator, *, samples: int,
                        theory_samples: int) -> list[Measurement]:
    """d mean_i (q^T A_i k)^2 three ways through the step form's pair operator -- its per-sample values, S and its
    adjoint T -- against the far second moment at lag 1 (module docstring)."""
    q, k = probe_pair(family.dim, rng)
    d = family.dim
    chunks = [family.sample(rng, 1, b) for b in mc.batches(samples, d * d)]
    op = common_form(chunks).pair_operator(chunks)
    u, v = np.outer(q, q), np.outer(k, k)
    values = d * op.values(u, v)
    points = [values.mean(), d * float(np.sum(u * op.left(v))), d * float(np.sum(op.right(u) * v))]
    se = values.std(ddof=1) / math.sqrt(values.size)
    p = prediction("far-variance", family, rng=rng, samples=theory_samples, offset=1, q=q, k=k)
    return [measurement("C4", family, "pair operator: d (q'A k)^2 by values(), <qq', S(kk')> and <T(qq'), kk'> vs "
                        "d E[s^2] at Delta=1", "statistical", points, [se] * 3, [p.value] * 3, values.size,
                        pred_stderr=[p.stderr] * 3, source=p.source, **reference_for(p, values.size - 1))]


@register("estimated-theory", lambda quantity, **_: QUANTITY_CLAIMS[quantity], lambda family, **_: ("statistical",),
          lambda family, **_: {"theory:moments", "theory:closed"})
def check_estimated_theory(family: Family, rng: np.random.Generator, *, quantity: str, theory_samples: int,
                           **options) -> list[Measurement]:
    """The moment-operator estimate of ``quantity`` against the family's closed form (module docstring); random
    probes q != k (m for the far residual)."""
    q, k = probe_pair(family.dim, rng)
    probes = {"m": q} if quantity == "far-residual" else {"q": q, "k": k}
    options = {key: np.asarray(v) if isinstance(v, (list, tuple)) else v for key, v in options.items()}
    got = estimated(quantity, family, rng=rng, samples=theory_samples, **options, **probes)
    want = prediction(quantity, family, **options, **probes)
    value, se = np.atleast_1d(got.value), np.atleast_1d(got.stderr)
    keep = se > 1e-9 * np.abs(value)  # c(0) = q.k, |r(1)|^2 of rotations: fixed by construction, rounding-size errors
    shown = ", ".join(f"{key}={np.asarray(val).tolist()}" for key, val in options.items())
    return [measurement(QUANTITY_CLAIMS[quantity], family, f"{quantity} ({shown}) estimated from moment operators vs "
                        "the closed form", "statistical", value[keep], se[keep], np.atleast_1d(want.value)[keep],
                        got.samples, source=f"closed form (measured: {got.source})", reference="t", dof=got.dof)]
