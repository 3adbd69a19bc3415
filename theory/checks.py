"""Assumption checks for any transform family (``accum check``): which of the claims C1-C6 apply to it.

Everything is estimated from the family's own sampler -- ``family.sample(rng, 1, M).dense()[:, 0]`` gives M
independent single steps A_1..A_M (float64, (M, d, d)) -- so built-in and user-defined families are checked
the same way.  Each statistical condition is decided at a stated false-failure budget (default 1e-3 for
the whole report, split by Bonferroni over the conditions and over the sub-tests inside each), with the
threshold k = Phi^{-1}(1 - alpha) of a one-sided normal test.

Conditions (reconstructions of the paper's "spectral-gap condition" in checkable form):

orthogonal          max_i ||A_i^T A_i - I||_F <= 1e-8 (exact rotations / reflections; PaTH with beta in (0, 2)
                    is not orthogonal, it contracts).
norm-bounded        max_i ||A_i||_2 <= 1 + 1e-10: then |q^T A_n ... A_1 k| <= |q||k| and C5's bound holds.
first-moment gap    g1 = sigma_max(E[A]) < 1 beyond k standard errors: g1_hat + k se < 1 - 1e-12.  For i.i.d. steps
                    ||E[A_n ... A_1]|| = ||E[A]^n|| <= g1^n, i.e. C1 with rate g1.  The standard error is
                    the delta method: d sigma_max = u^T (d E[A]) v (u, v the top singular vectors), so
                    se = sd_i(u^T A_i v) / sqrt(M).
second-moment gap   E[A (x) A] acts on matrices as M -> E[A M A^T] (row-major vec, numpy ``kron`` layout);
                    its powers govern E[(q^T P_n k)^2].  Vectors fixed by every sample, A M A^T = M, stay
                    fixed for ever: for orthogonal A the identity vec(I) always is; SO(2) blocks also fix
                    each plane's I_b and J_b; a lattice law {0, pi} fixes every within-plane 2x2 matrix.
                    Those fixed vectors F are found as the null space (to 1e-9) of E_hat[A (x) A] - I (for
                    steps of norm <= 1, a vector fixed by the average of A_i (x) A_i is fixed by each).  The
                    relevant subspace is the orthogonal complement of F, invariant under E[A (x) A] for
                    orthogonal steps; the condition is g2 = sigma_max(E[A (x) A] restricted to it) < 1 beyond
                    k se (delta method as above).  Then E[P_n (x) P_n] converges geometrically to the
                    orthogonal projector onto F, and the far-score second moment converges to
                    vec(q q^T)^T Pi_F vec(k k^T).  An empty complement (A = I, beta = 0) fails.
coherent direction  kappa = max_{|q| = 1} ||Pi_F vec(q q^T)||^2 is the limit of E[(q^T P_n q)^2] for the worst
                    aligned unit probe.  kappa = 1 means some q keeps |q^T P_n q| = 1 for ever (a common
                    invariant line of all steps: lattice angles, untouched directions); C4 needs kappa < 1.
                    Estimated by multi-start ascent on the sphere (starts: the coordinate axes and random
                    points), so it is a lower bound on the true maximum.  Haar: 1/d; SO(2) planes: 1/2.
non-lattice         for block-diagonal SO(2) families (angles read from the samples), max over planes b and
                    1 <= k <= K of |phi_b(k)| < 1 beyond k se, phi_b(k) = E exp(i k theta_b).  A lattice law of
                    period m <= K has |phi(m)| = 1 and fails: its accumulated angle never spreads over the
                    circle.  Only the marginal law of each plane is tested (dependence across planes, as in
                    token tables, is not).
independent steps   the one-step conditions speak about products only for i.i.d. steps; two-step samples test
                    E[A_2 A_1] = E[A_2] E[A_1] entrywise (delta-method z, Bonferroni over d^2 entries).  A
                    Markov token source fails this; C1-C3 are then decided by the theory's transfer-matrix rate
                    where the family has one (built-in token laws), and reported as not certified otherwise.

Claims (verdict): C1, C2, C3 need the first-moment gap, non-lattice angles (where angles exist) and
independent steps (or the theory's product rate); C4 needs the second-moment gap, kappa < 1 and non-lattice
angles; C5's bound (near weight <= 1/(1 + N e^{-2S})) applies to every norm-bounded family -- no rotation
escapes it; C6 needs C1 and norm-bounded steps.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy.stats import norm

from ._common import NoClosedForm, family_kind

ORTHO_TOL = 1e-8
NORM_TOL = 1e-10
FIXED_TOL = 1e-9
GAP_TOL = 1e-12  # a norm within rounding of 1 is no gap
BATCH = 2000


@dataclass
class Condition:
    """One assumption: ``passed`` (None: not applicable or skipped), the estimate and what it was held to."""

    name: str
    passed: bool | None
    value: float | None = None
    stderr: float | None = None
    bound: float | None = None
    k: float | None = None
    detail: str = ""


@dataclass
class Report:
    family: str
    params: dict
    dim: int
    samples: int
    budget: float
    conditions: dict[str, Condition]
    claims: dict[str, dict]
    theory: dict = field(default_factory=dict)
    condition_holds: bool = False

    def to_dict(self) -> dict:
        out = asdict(self)
        out["conditions"] = {k: asdict(v) for k, v in self.conditions.items()}
        return out


# --- estimators of the step law ----------------------------------------------------------------------------


def sample_steps(family: Any, samples: int, rng: np.random.Generator) -> np.ndarray:
    """M independent single steps, float64 (M, d, d), from ``family.sample(rng, 1, b).dense()[:, 0]`` in batches."""
    parts, left = [], samples
    while left > 0:
        b = min(BATCH, left)
        mats = np.asarray(family.sample(rng, 1, b).dense(), dtype=np.float64)
        d = family.dim
        if mats.shape != (b, 1, d, d):
            raise ValueError(f"family.sample(rng, 1, {b}).dense() has shape {mats.shape}, expected {(b, 1, d, d)}")
        parts.append(mats[:, 0])
        left -= b
    return np.concatenate(parts)


def mean_step(mats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """E_hat[A] and its entrywise standard error, (d, d) each."""
    m = mats.shape[0]
    return mats.mean(axis=0), mats.std(axis=0, ddof=1) / math.sqrt(m)


def pair_mean(mats: np.ndarray) -> np.ndarray:
    """E_hat[A (x) A], (d^2, d^2): entry ((i,k), (j,l)) = mean A_ij A_kl, so it maps vec(M) to vec(E[A M A^T])."""
    m, d, _ = mats.shape
    x = mats.reshape(m, d * d)
    g = x.T @ x / m  # g[(i,j),(k,l)] = E A_ij A_kl
    return g.reshape(d, d, d, d).transpose(0, 2, 1, 3).reshape(d * d, d * d)


def top_singular(mean: np.ndarray, per_sample: Any) -> tuple[float, float, np.ndarray, np.ndarray]:
    """sigma_max of ``mean`` with its delta-method standard error.

    per_sample(u, v) -> (M,) values u^T X_i v of the samples X_i whose average is ``mean``.
    Returns (sigma, se, u, v).
    """
    u, s, vh = np.linalg.svd(mean)
    top_u, top_v = u[:, 0], vh[0]
    vals = per_sample(top_u, top_v)
    se = float(vals.std(ddof=1) / math.sqrt(vals.size)) if vals.size > 1 else 0.0
    return float(s[0]), se, top_u, top_v


def fixed_space(pair: np.ndarray, tol: float = FIXED_TOL) -> tuple[np.ndarray, np.ndarray]:
    """Orthonormal bases (F, F_perp) of the fixed vectors of ``pair`` (null space of pair - I to ``tol``) and of
    their orthogonal complement, as columns, from the SVD of pair - I."""
    n = pair.shape[0]
    _, s, vh = np.linalg.svd(pair - np.eye(n))
    null = s <= tol * max(1.0, float(np.abs(pair).max()))
    return vh[null].T, vh[~null].T


def coherent_direction(basis: np.ndarray, d: int, rng: np.random.Generator, starts: int = 24, iters: int = 300) -> float:
    """kappa = max_{|q|=1} sum_j (q^T S_j q)^2 with S_j the symmetric parts of the fixed-space basis matrices.

    Shifted symmetric power iteration q <- normalise(sum_j (q^T S_j q) S_j q + c q) (Kolda & Mayo 2011,
    SS-HOPM; the shift c makes each step an ascent step) from the coordinate axes and ``starts`` random points.
    Returns a lower bound on the maximum (0 if the fixed space is empty).
    """
    if basis.shape[1] == 0:
        return 0.0
    mats = basis.T.reshape(-1, d, d)
    sym = (mats + np.swapaxes(mats, 1, 2)) / 2
    f = sym.shape[0]
    # the order-4 tensor sum_j S_j (x) S_j unfolds to sum_j vec(S_j) vec(S_j)^T, of norm <= 1 for an orthonormal
    # basis; a shift of 3 times that norm makes every step an ascent step (SS-HOPM condition for order 4)
    shift = 3.0 * float(np.linalg.norm(sym.reshape(sym.shape[0], -1), ord=2) ** 2)
    q = np.concatenate([np.eye(d), rng.normal(size=(starts, d))])
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    flat = sym.reshape(f * d, d)
    best = 0.0
    for _ in range(iters):
        sq = (flat @ q.T).reshape(f, d, -1)  # (S_j q)_i per start
        val = np.einsum("si,fis->fs", q, sq)  # q^T S_j q
        value = np.sum(val**2, axis=0)
        if value.max() <= best + 1e-12 or value.max() >= 1.0 - 1e-12:
            best = max(best, float(value.max()))
            break
        best = float(value.max())
        q = np.einsum("fs,fis->si", val, sq) + shift * q
        q /= np.linalg.norm(q, axis=1, keepdims=True)
    return best


def plane_angles(mats: np.ndarray) -> np.ndarray | None:
    """Angles theta (M, d/2) if every sample is block-diagonal SO(2) on interleaved planes, else None."""
    m, d, _ = mats.shape
    if d % 2:
        return None
    mask = np.zeros((d, d), dtype=bool)
    for b in range(d // 2):
        mask[2 * b : 2 * b + 2, 2 * b : 2 * b + 2] = True
    if np.max(np.abs(mats[:, ~mask]), initial=0.0) > ORTHO_TOL:
        return None
    ev, od = np.arange(0, d, 2), np.arange(1, d, 2)
    c, s = mats[:, ev, ev], mats[:, od, ev]
    if (np.max(np.abs(mats[:, od, od] - c)) > ORTHO_TOL or np.max(np.abs(mats[:, ev, od] + s)) > ORTHO_TOL
            or np.max(np.abs(c * c + s * s - 1)) > ORTHO_TOL):
        return None
    return np.arctan2(s, c)


def lattice_statistics(theta: np.ndarray, k_max: int) -> tuple[np.ndarray, np.ndarray]:
    """|phi_hat_b(k)| and delta-method standard errors for k = 1..k_max, each (k_max, d/2)."""
    m = theta.shape[0]
    mods, ses = [], []
    for k in range(1, k_max + 1):
        e = np.exp(1j * k * theta)
        phi = e.mean(axis=0)
        mod = np.abs(phi)
        direction = np.where(mod > 0, np.conj(phi) / np.where(mod > 0, mod, 1.0), 1.0)
        proj = (e * direction).real
        mods.append(mod)
        ses.append(proj.std(axis=0, ddof=1) / math.sqrt(m))
    return np.array(mods), np.array(ses)


def step_dependence(family: Any, samples: int, rng: np.random.Generator) -> tuple[float, int]:
    """max_entries |z| of E_hat[A_2 A_1] - E_hat[A_2] E_hat[A_1] (delta-method se), and the number of entries tested."""
    seq = np.concatenate([np.asarray(family.sample(rng, 2, min(BATCH, samples - i)).dense(), dtype=np.float64)
                          for i in range(0, samples, BATCH)])
    a1, a2 = seq[:, 0], seq[:, 1]
    m1, m2 = a1.mean(axis=0), a2.mean(axis=0)
    prod = a2 @ a1
    diff = prod.mean(axis=0) - m2 @ m1
    influence = prod - a2 @ m1 - m2 @ a1  # linearisation of mean(A2 A1) - mean(A2) mean(A1)
    se = influence.std(axis=0, ddof=1) / math.sqrt(seq.shape[0])
    z = np.abs(diff) / np.sqrt(se**2 + 1e-20)  # floor 1e-10: rounding of deterministic steps is not dependence
    return float(z.max()), int(z.size)


# --- theory for built-ins (the predicted mean-step norm, Markov product rates) --------------------------


def theory_mean(family: Any) -> np.ndarray | None:
    """Exact E[A] (d, d) of one step for built-in families (the stationary marginal for token laws), else None."""
    kind = family_kind(family)
    if kind is None:
        return None
    from . import groups, householder, so2

    try:
        if kind in ("so2-accumulated", "rope", "nope"):
            return so2.mean_product(family, 1)
        if kind == "householder":
            parts = householder.family_parts(family)
            if parts["w"] == "token":
                return householder.token_step_mean(parts["beta"], parts["table"])
            return householder.mean_rate(parts["beta"], parts["d"]) * np.eye(family.dim)
        return groups.family_rate(family) * np.eye(family.dim)
    except NoClosedForm:
        return None


def theory_rates(family: Any) -> dict:
    """Exact sigma_max(E[A]) (and the transfer-matrix product rate for Markov token laws) for built-in families;
    {} for user-defined ones."""
    mean = theory_mean(family)
    if mean is None:
        return {}
    out: dict[str, Any] = {"mean_step_norm": float(np.linalg.norm(mean, ord=2))}
    if family_kind(family) == "so2-accumulated" and family.law == "token" and family.source == "markov":
        from . import so2

        out["product_rate"] = float(np.max(so2.transfer_rate(family)))
    return out


# --- the report --------------------------------------------------------------------------------------------


def _k_one_sided(alpha: float, tests: int) -> float:
    return float(norm.isf(alpha / max(tests, 1)))


def check(family: Any, samples: int = 4000, rng: np.random.Generator | None = None, budget: float = 1e-3,
          k_max: int = 32, pair_dim: int = 24) -> Report:
    """Run every condition on ``family`` and decide which claims apply (module docstring).

    samples: M single steps (and M two-step sequences for the independence test); budget: false-failure
    probability of the whole report; k_max: largest frequency of the non-lattice test; pair_dim: largest d for
    which E[A (x) A] (d^4 numbers) is estimated.
    """
    if not (0.0 < budget < 1.0):
        raise ValueError(f"budget must lie in (0, 1), got {budget}")
    if samples < 10:
        raise ValueError(f"samples must be >= 10, got {samples}")
    rng = np.random.default_rng() if rng is None else rng
    d = int(family.dim)
    mats = sample_steps(family, samples, rng)
    alpha = budget / 4.0  # four statistical conditions: first gap, second gap, non-lattice, independence
    conds: dict[str, Condition] = {}

    gram = np.einsum("mji,mjk->mik", mats, mats) - np.eye(d)
    drift = float(np.max(np.linalg.norm(gram, axis=(1, 2))))
    conds["orthogonal"] = Condition("orthogonal", drift <= ORTHO_TOL, drift, None, ORTHO_TOL,
                                    detail="max ||A^T A - I||_F over the samples")
    op_norm = float(np.max(np.linalg.norm(mats, ord=2, axis=(1, 2))))
    conds["norm-bounded"] = Condition("norm-bounded", op_norm <= 1.0 + NORM_TOL, op_norm, None, 1.0,
                                      detail="max ||A||_2 over the samples")

    k1 = _k_one_sided(alpha, 1)
    mean, _ = mean_step(mats)
    # sigma_max of a noisy mean is biased upwards (by about the entry noise times sqrt(d)), so the test errs
    # towards failing a gap; the delta-method se covers the fluctuation, not that bias
    g1, se1, _, _ = top_singular(mean, lambda u, v: np.einsum("i,mij,j->m", u, mats, v))
    conds["first-moment-gap"] = Condition("first-moment-gap", g1 + k1 * se1 < 1.0 - GAP_TOL, g1, se1, 1.0, k1,
                                          detail="sigma_max(E[A]) + k se < 1")

    if d <= pair_dim:
        pair = pair_mean(mats)
        fixed, comp = fixed_space(pair)
        if comp.shape[1] == 0:
            conds["second-moment-gap"] = Condition("second-moment-gap", False, 1.0, 0.0, 1.0, k1,
                                                   detail=f"every direction is fixed (dim F = {fixed.shape[1]} = d^2)")
        else:
            restricted = comp.T @ pair @ comp

            def per_sample(u, v):
                uu, vv = (comp @ u).reshape(d, d), (comp @ v).reshape(d, d)
                return np.einsum("ik,mij,jl,mkl->m", uu, mats, vv, mats)

            g2, se2, _, _ = top_singular(restricted, per_sample)
            conds["second-moment-gap"] = Condition("second-moment-gap", g2 + k1 * se2 < 1.0 - GAP_TOL, g2, se2, 1.0, k1,
                                                   detail=f"sigma_max(E[A (x) A]) on the complement of the fixed space F "
                                                          f"(dim F = {fixed.shape[1]})")
        kappa = coherent_direction(fixed, d, rng)
        conds["coherent-direction"] = Condition("coherent-direction", kappa < 1.0 - 1e-6, kappa, None, 1.0,
                                                detail="kappa = max_q lim E[(q^T P_n q)^2] (< 1: no unit probe stays coherent)")
    else:
        for name in ("second-moment-gap", "coherent-direction"):
            conds[name] = Condition(name, None, detail=f"skipped: d = {d} > pair_dim = {pair_dim}")

    theta = plane_angles(mats)
    if theta is None:
        conds["non-lattice"] = Condition("non-lattice", None, detail="not a block-diagonal SO(2) family")
    else:
        mods, ses = lattice_statistics(theta, k_max)
        kl = _k_one_sided(alpha, mods.size)
        upper = mods + kl * ses
        worst = np.unravel_index(int(np.argmax(upper)), upper.shape)
        conds["non-lattice"] = Condition("non-lattice", bool(np.all(upper < 1.0)), float(mods[worst]), float(ses[worst]), 1.0, kl,
                                         detail=f"max_(b, 1<=k<={k_max}) |phi_b(k)| (worst: plane {worst[1]}, k = {worst[0] + 1})")

    zmax, entries = step_dependence(family, samples, rng)
    kd = float(norm.isf(alpha / (2 * entries)))
    conds["independent-steps"] = Condition("independent-steps", zmax <= kd, zmax, None, kd, kd,
                                           detail="max |z| of E[A2 A1] - E[A2] E[A1] (two-step samples)")

    theory = theory_rates(family)
    exact = theory_mean(family)
    if exact is not None:  # the sampler against the closed form, entrywise (informational, not a condition)
        mean_se = mats.std(axis=0, ddof=1) / math.sqrt(samples)
        theory["mean_step_max_z"] = float(np.max(np.abs(mean - exact) / np.sqrt(mean_se**2 + 1e-20)))
        theory["mean_step_k"] = float(norm.isf(alpha / (2 * d * d)))
    claims, holds = verdict(conds, theory)
    from accum.simulations.families import family_name, family_params

    return Report(family_name(family), family_params(family), d, samples, budget, conds, claims, theory, holds)


def verdict(conds: dict[str, Condition], theory: dict | None = None) -> tuple[dict[str, dict], bool]:
    """Which claims apply given the conditions (module docstring); also whether the spectral-gap condition holds."""
    theory = theory or {}

    def ok(name: str) -> bool:
        return conds[name].passed is not False  # None (not applicable / skipped) does not block

    reasons_c1 = []
    if not conds["first-moment-gap"].passed:
        reasons_c1.append("no first-moment gap (||E[A]|| = 1 within k se)")
    if not ok("non-lattice"):
        reasons_c1.append("lattice angle law (|phi(k)| = 1 for some k)")
    dependent = conds["independent-steps"].passed is False
    certified_by_theory = dependent and theory.get("product_rate", 1.0) < 1.0
    if dependent and not certified_by_theory:
        reasons_c1.append("steps are dependent and no product rate is known (one-step gap does not certify the product)")
    c1 = not reasons_c1
    note = (f"; dependent steps: product rate {theory['product_rate']:.4g} < 1 from the theory's transfer matrix"
            if certified_by_theory else "")
    claims = {
        "C1": {"applies": c1, "why": ("first-moment gap" + note) if c1 else "; ".join(reasons_c1)},
        "C2": {"applies": c1, "why": "window <= 1/(1 - g^2), independent of T (follows C1)" if c1 else "needs C1"},
        "C3": {"applies": c1, "why": "stationary steps with a gap: the suppression profile depends on Delta only" if c1 else "needs C1"},
    }
    reasons_c4 = [r for r, bad in (("no second-moment gap on the complement of the fixed space", not ok("second-moment-gap")),
                                   ("a unit probe stays coherent (kappa = 1)", not ok("coherent-direction")),
                                   ("lattice angle law", not ok("non-lattice")),
                                   ("second moments not estimated (d > pair_dim)", conds["second-moment-gap"].passed is None))
                  if bad]
    claims["C4"] = {"applies": not reasons_c4, "why": "second-moment gap and no coherent direction" if not reasons_c4 else "; ".join(reasons_c4)}
    bounded = bool(conds["norm-bounded"].passed)
    claims["C5"] = {"applies": bounded, "why": ("bound applies: near weight <= 1/(1 + N e^{-2S}) -> 0; only explicit far-mass "
                                                "control (ALiBi) keeps it") if bounded else "steps can expand norms: the bound is not guaranteed"}
    c6 = c1 and bounded
    claims["C6"] = {"applies": c6, "why": "residual of transported values adds incoherently (|r|^2 ~ 1/N)" if c6 else
                    ("needs C1" if not c1 else "steps not norm-bounded")}
    holds = c1 and not reasons_c4
    return claims, holds


def format_report(report: Report) -> str:
    """Human-readable text: one line per condition, then the verdict per claim."""
    lines = [f"accum check {report.family}  d={report.dim}  samples={report.samples}  false-failure budget {report.budget:g}",
             f"params: {report.params}", ""]
    for c in report.conditions.values():
        mark = {True: "PASS", False: "FAIL", None: "n/a "}[c.passed]
        val = "" if c.value is None else f"{c.value:.6g}"
        se = "" if c.stderr is None else f" +- {c.stderr:.2g}"
        kk = "" if c.k is None else f" (k = {c.k:.2f})"
        lines.append(f"  {mark}  {c.name:<20} {val}{se}{kk}  {c.detail}")
    if report.theory:
        lines.append("")
        lines.append("  theory: " + ", ".join(f"{k} = {v:.6g}" for k, v in report.theory.items()))
    lines.append("")
    lines.append(f"spectral-gap condition: {'HOLDS' if report.condition_holds else 'FAILS'}")
    for name, c in report.claims.items():
        lines.append(f"  {name} {'applies' if c['applies'] else 'does not apply'}: {c['why']}")
    return "\n".join(lines)
