"""Assumption checks for any transform family (``accum check``): which of the claims C1-C6 apply to it.

Everything is estimated from the family's own sampler -- ``family.sample(rng, 1, M)`` gives M independent
single steps A_1..A_M, kept in their structured form (SO(2) angles, Householder vectors, or dense matrices) and
multiplied in it, so that d = 256 costs O(M d^2) per operator application for structured steps -- and built-in
and user-defined families are checked the same way.  The rng is required (no unseeded default).  Each statistical condition is decided at a stated false-failure budget (default 1e-3 for
the whole report, split by Bonferroni over the conditions and over the sub-tests inside each), with the
threshold k = Phi^{-1}(1 - alpha) of a one-sided normal test.

Conditions (reconstructions of the paper's "spectral-gap condition" in checkable form):

orthogonal          max_i ||A_i^T A_i - I||_F <= 1e-8 (exact rotations / reflections; PaTH with beta in (0, 2)
                    is not orthogonal, it contracts).
norm-bounded        max_i ||A_i||_2 <= 1 + 1e-10: then |q^T A_n ... A_1 k| <= |q||k| and C5's bound holds.
first-moment gap    g1 = sigma_max(E[A]) < 1 beyond k standard errors: g1_hat + k se < 1 - 1e-12.  For i.i.d. steps
                    ||E[A_n ... A_1]|| = ||E[A]^n|| <= g1^n, i.e. C1 with rate g1.  Split-sample estimate
                    (``first_moment_gap``): top singular vectors u, v from the first half of the samples,
                    g1_hat = mean over the second half of u^T A_i v, se = sd / sqrt(M/2).  The plug-in
                    sigma_max(E_hat[A]) is biased upwards by the noise of E_hat[A] (Householder beta = 1, d = 16:
                    0.944 against the exact 0.9375 at M = 4000) and is only reported.
second-moment gap   E[A (x) A] acts on matrices as S: M -> E[A M A^T] (row-major vec, numpy ``kron`` layout);
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
                    Estimated matrix-free (``second_moment_gap``): power iteration of T S (T = S^*) started in
                    range(I - S) = F^perp, split-sample as for g1; the d^2 x d^2 matrix is never formed.
                    Skipped (reported, not failed) for steps that are not norm-bounded.
coherent direction  kappa = max_{|q| = 1} ||Pi_F vec(q q^T)||^2 is the limit of E[(q^T P_n q)^2] for the worst
                    aligned unit probe.  kappa = 1 means some q keeps |q^T P_n q| = 1 for ever (a common
                    invariant line of all steps: lattice angles, untouched directions); C4 needs kappa < 1.
                    Estimated by multi-start ascent on the sphere (starts: the coordinate axes and random
                    points), so it is a lower bound on the true maximum.  Haar: 1/d; SO(2) planes: 1/2.
                    Block SO(2) steps: computed in the plane basis at any d (``plane_coherent_direction``; 1/2, or 1
                    for angles in {0, pi}); Householder steps from the span of their w's at any d
                    (``householder_coherent_direction``).  Other steps need the explicit fixed space (d^4
                    numbers): skipped for d > pair_dim.
non-lattice         for block-diagonal SO(2) families (angles read from the samples), max over planes b and
                    1 <= k <= K of |phi_b(k)| < 1 beyond k se, phi_b(k) = E exp(i k theta_b).  A lattice law of
                    period m <= K has |phi(m)| = 1 and fails: its accumulated angle never spreads over the
                    circle.  Only the marginal law of each plane is tested (dependence across planes, as in
                    token tables, is not).
independent steps   the one-step conditions speak about products only for i.i.d. steps; two-step samples test
                    x^T E[A_2 A_1] y = x^T E[A_2] E[A_1] y for 16 Gaussian probe pairs (delta-method z, Bonferroni
                    over the pairs; step-vector products only, so O(M d) per pair).  A
                    Markov token source fails this; C1-C3 are then decided by the theory's transfer-matrix rate
                    where the family has one (built-in token laws), and reported as not certified otherwise.

A skipped condition is shown as "skip" and never fails a claim.  Claims (verdict): C1, C2, C3 need the first-moment gap, non-lattice angles (where angles exist) and
independent steps (or the theory's product rate); C4 needs norm-bounded steps, the second-moment gap, kappa < 1
and non-lattice angles; C5's bound (near weight <= 1/(1 + N e^{-2S})) applies to every norm-bounded family -- no rotation
escapes it; C6 needs C1 and norm-bounded steps.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy.stats import norm

from accum.simulations.families import Householder, NoPE, Rope, SO2Accumulated, family_name, family_params
from accum.simulations.params import ParamError, check_int
from accum.simulations.steps import AngleSteps, DenseSteps, HouseholderSteps

from ._common import NoClosedForm

ORTHO_TOL = 1e-8
NORM_TOL = 1e-10
FIXED_TOL = 1e-9
GAP_TOL = 1e-12  # a norm within rounding of 1 is no gap
#: float64 numbers per chunk of sampled steps held as dense matrices at once (80 MB)
CHUNK_NUMBERS = 10_000_000
#: default sample count, and the work budget (d^3 flops per dense step) that lowers it for dense steps at large d
DEFAULT_SAMPLES, MIN_DENSE_SAMPLES, DENSE_WORK = 4000, 200, 2_000_000_000
#: samples x d^2 (the numbers of the step matrices, held for dense steps and touched once per pass) at most this
MAX_STEP_NUMBERS = 250_000_000
#: power iteration: at most this many steps, stopped at this relative change, or when rounding that leaks into
#: the fixed space could have grown to LEAK_LIMIT (a fixed vector gains 1/sigma^2 per step against the rest)
POWER_ITERS, POWER_TOL, LEAK_LIMIT = 40, 1e-5, 1e-6
#: the second-moment power method may take up to POWER_WORK flops (at least POWER_ITERS, at most POWER_ITERS_MAX steps)
POWER_WORK, POWER_ITERS_MAX = 30_000_000_000, 300
#: largest d for which ||A||_2 is computed exactly per sample (eigvalsh of A^T A); above it, power iteration
NORM_EXACT_DIM = 64


@dataclass
class Condition:
    """One assumption: ``passed`` (None: not applicable or skipped), the estimate and what it was held to.

    ``required`` False marks a property that no claim needs (orthogonality: the claims need norm-bounded steps);
    it is shown as yes / no rather than PASS / FAIL.
    """

    name: str
    passed: bool | None
    value: float | None = None
    stderr: float | None = None
    bound: float | None = None
    k: float | None = None
    detail: str = ""
    required: bool = True


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


# --- sampled steps, kept in their structured form ---------------------------------------------------------


def chunk_size(d: int) -> int:
    """Steps per chunk so that a chunk of dense d x d matrices holds at most CHUNK_NUMBERS numbers."""
    return max(1, min(2000, CHUNK_NUMBERS // (d * d)))


def draw_steps(family: Any, samples: int, rng: np.random.Generator, n_steps: int = 1) -> list:
    """``samples`` independent sequences of ``n_steps`` steps, as a list of ``Steps`` chunks (``family.sample``)."""
    d, chunks, left = int(family.dim), [], samples
    while left > 0:
        b = min(chunk_size(d), left)
        steps = family.sample(rng, n_steps, b)
        if (steps.batch, steps.n_steps, steps.dim) != (b, n_steps, d):
            raise ParamError(f"family.sample(rng, {n_steps}, {b}) returned (batch, n_steps, dim) = "
                             f"{(steps.batch, steps.n_steps, steps.dim)}, expected {(b, n_steps, d)}")
        chunks.append(steps)
        left -= b
    return chunks


def is_dense(steps: Any) -> bool:
    """True when the steps are plain matrices (``DenseSteps`` or an unknown form): O(d^3) per product."""
    return not isinstance(steps, (AngleSteps, HouseholderSteps))


def default_samples(family: Any, rng: np.random.Generator) -> int:
    """DEFAULT_SAMPLES, at most MAX_STEP_NUMBERS / d^2, and for dense steps at most DENSE_WORK / d^3 (but not
    below MIN_DENSE_SAMPLES from that work budget)."""
    d = int(family.dim)
    cap = min(DEFAULT_SAMPLES, MAX_STEP_NUMBERS // d**2)
    if not is_dense(family.sample(rng, 1, 1)):
        return int(cap)
    return int(min(cap, max(MIN_DENSE_SAMPLES, DENSE_WORK // d**3)))


def apply_step(steps: Any, t: int, x: np.ndarray) -> np.ndarray:
    """A_t x for every sequence: x (batch, d, r) -> (batch, d, r), in the steps' own form.

    SO(2) planes: rows (2b, 2b+1) of x rotated by theta_tb (O(d r)); Householder: x - beta w (w^T x) (O(d r));
    otherwise the dense product (O(d^2 r)).
    """
    if isinstance(steps, AngleSteps):
        rot = np.exp(1j * steps.theta[:, t])[:, :, None]
        z = rot * (x[:, 0::2, :] + 1j * x[:, 1::2, :])
        out = np.empty_like(x, dtype=float)
        out[:, 0::2, :], out[:, 1::2, :] = z.real, z.imag
        return out
    if isinstance(steps, HouseholderSteps):
        return steps.apply(t, x)
    return np.asarray(steps.dense(), dtype=np.float64)[:, t] @ x


def sandwich(steps: Any, x: np.ndarray, adjoint: bool = False) -> np.ndarray:
    """A X A^T per sample (or A^T X A with ``adjoint``), x (d, d) or (batch, d, d) -> (batch, d, d).

    A X A^T = (A (A X)^T)^T, two structured products.
    """
    s = steps.transposed() if adjoint else steps
    x = np.broadcast_to(x, (s.batch,) + x.shape[-2:])
    y = apply_step(s, 0, x)
    return np.swapaxes(apply_step(s, 0, np.swapaxes(y, 1, 2)), 1, 2)


def bilinear_values(chunks: list, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """u^T A_i v for every sampled step, (M,)."""
    return np.concatenate([apply_step(c, 0, np.broadcast_to(v[:, None], (c.batch, v.size, 1)))[:, :, 0] @ u for c in chunks])


class DensePair:
    """The sample second-moment operator of dense steps: S(X) = mean_i A_i X A_i^T, T(X) = mean_i A_i^T X A_i.

    O(M d^3) per application; ``values(U, V)`` = <U, A_i V A_i^T> per sample (Frobenius product)."""

    def __init__(self, chunks: list):
        self.mats = [np.asarray(c.dense(), dtype=np.float64)[:, 0] for c in chunks]
        self.size = sum(a.shape[0] for a in self.mats)
        d = self.mats[0].shape[1]
        self.cost = 4.0 * self.size * d**3  # flops of one application

    def left(self, x: np.ndarray) -> np.ndarray:
        return sum(np.sum(a @ x @ np.swapaxes(a, 1, 2), axis=0) for a in self.mats) / self.size

    def right(self, x: np.ndarray) -> np.ndarray:
        return sum(np.sum(np.swapaxes(a, 1, 2) @ x @ a, axis=0) for a in self.mats) / self.size

    def values(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        return np.concatenate([np.einsum("ij,bij->b", u, a @ v @ np.swapaxes(a, 1, 2)) for a in self.mats])


class AnglePair:
    """The sample second-moment operator of block SO(2) steps, diagonal in the plane basis.

    A real 2 x 2 block Y = [[a, b], [c, e]] acts on w = x + i y as Y w = p w + r conj(w) with
    p = ((a + e) + i (c - b)) / 2, r = ((a - e) + i (c + b)) / 2, and R(alpha) Y R(beta)^T has
    (p, r) -> (e^{i(alpha - beta)} p, e^{i(alpha + beta)} r).  With z_ib = e^{i theta_ib}, block (b, b') of
    S(X) is therefore (p G-_bb', r G+_bb'), G-_bb' = mean_i z_ib conj(z_ib'), G+_bb' = mean_i z_ib z_ib', and T
    uses their conjugates: O(M d^2) once, O(d^2) per application.  <Y1, Y2> = 2 Re(conj(p1) p2 + conj(r1) r2).
    """

    def __init__(self, chunks: list):
        self.z = np.exp(1j * np.concatenate([c.theta[:, 0] for c in chunks]))  # (M, d/2)
        m = self.z.shape[0]
        self.minus = self.z.T @ np.conj(self.z) / m
        self.plus = self.z.T @ self.z / m
        self.cost = 16.0 * self.minus.size  # flops of one application (elementwise in the plane basis)

    @staticmethod
    def to_planes(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        a, b, c, e = x[0::2, 0::2], x[0::2, 1::2], x[1::2, 0::2], x[1::2, 1::2]
        return ((a + e) + 1j * (c - b)) / 2, ((a - e) + 1j * (c + b)) / 2

    @staticmethod
    def from_planes(p: np.ndarray, r: np.ndarray) -> np.ndarray:
        h = p.shape[0]
        out = np.empty((2 * h, 2 * h))
        out[0::2, 0::2], out[1::2, 0::2] = (p + r).real, (p + r).imag
        out[1::2, 1::2], out[0::2, 1::2] = (p - r).real, -(p - r).imag
        return out

    def left(self, x: np.ndarray) -> np.ndarray:
        p, r = self.to_planes(x)
        return self.from_planes(p * self.minus, r * self.plus)

    def right(self, x: np.ndarray) -> np.ndarray:
        p, r = self.to_planes(x)
        return self.from_planes(p * np.conj(self.minus), r * np.conj(self.plus))

    def values(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        (pu, ru), (pv, rv) = self.to_planes(u), self.to_planes(v)
        z = self.z
        minus = np.einsum("mb,bc,mc->m", z, np.conj(pu) * pv, np.conj(z), optimize=True)
        plus = np.einsum("mb,bc,mc->m", z, np.conj(ru) * rv, z, optimize=True)
        return 2.0 * (minus + plus).real


def householder_samples(chunks: list) -> tuple[np.ndarray, np.ndarray]:
    """The sampled single Householder steps of ``chunks`` as w (M, d) and beta (M,)."""
    return np.concatenate([c.w[:, 0] for c in chunks]), np.concatenate([c.beta[:, 0] for c in chunks])


class HouseholderPair:
    """The sample second-moment operator of steps A = I - beta w w^T (symmetric, so T = S):

        S(X) = X - C X - X C + W^T diag(beta_i^2 w_i^T X w_i) W / M,   C = W^T diag(beta) W / M,

    O(M d^2) per application (two products with the (M, d) matrix W), never a d^2 x d^2 matrix."""

    def __init__(self, chunks: list):
        self.w, self.beta = householder_samples(chunks)
        self.c = self.w.T @ (self.beta[:, None] * self.w) / self.w.shape[0]
        self.cost = 6.0 * self.w.size * self.w.shape[1]  # flops of one application

    def quad(self, x: np.ndarray) -> np.ndarray:
        """w_i^T X w_i per sample."""
        return np.einsum("md,md->m", self.w @ x, self.w)

    def left(self, x: np.ndarray) -> np.ndarray:
        weights = self.beta**2 * self.quad(x)
        return x - self.c @ x - x @ self.c + self.w.T @ (weights[:, None] * self.w) / self.w.shape[0]

    right = left

    def values(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        # <U, A V A> = <U, V> - beta (w^T V U^T w + w^T U^T V w) + beta^2 (w^T V w)(w^T U w)
        return (np.sum(u * v) - self.beta * (self.quad(v @ u.T) + self.quad(u.T @ v))
                + self.beta**2 * self.quad(v) * self.quad(u))


def pair_operator(chunks: list) -> DensePair | AnglePair | HouseholderPair:
    """The sample operator X -> mean_i A_i X A_i^T in the cheapest form the steps allow."""
    if all(isinstance(c, AngleSteps) for c in chunks):
        return AnglePair(chunks)
    if all(isinstance(c, HouseholderSteps) for c in chunks):
        return HouseholderPair(chunks)
    return DensePair(chunks)


def split(chunks: list) -> tuple[list, list]:
    """The chunks in two halves (by chunk; a single chunk is cut in two sequences of steps)."""
    if len(chunks) >= 2:
        return chunks[: len(chunks) // 2], chunks[len(chunks) // 2 :]
    c = chunks[0]
    half = c.batch // 2
    return [take(c, slice(0, half))], [take(c, slice(half, c.batch))]


def take(steps: Any, index: slice) -> Any:
    """The sequences ``index`` of a ``Steps`` object, in the same form."""
    if isinstance(steps, AngleSteps):
        return AngleSteps(steps.theta[index])
    if isinstance(steps, HouseholderSteps):
        return HouseholderSteps(steps.w[index], steps.beta[index])
    return DenseSteps(np.asarray(steps.dense(), dtype=np.float64)[index])


# --- the two spectral gaps: split-sample estimates ----------------------------------------------------------


@dataclass(frozen=True)
class Gap:
    """A split-sample estimate of a top singular value (see ``first_moment_gap``): ``value`` +- ``stderr`` from the
    second half, ``plug_in`` the biased-upwards sigma_max of the first half's estimate, ``iterations`` of the power
    method (0 for a direct SVD), ``all_fixed`` when every direction is fixed (no complement), ``converged`` False
    when the power method stopped at its step cap (its value is then a lower bound)."""

    value: float
    stderr: float
    plug_in: float
    iterations: int = 0
    all_fixed: bool = False
    converged: bool = True


def first_moment_gap(half1: list, half2: list) -> Gap:
    """g1 = sigma_max(E[A]) by sample splitting.

    (u, v) = top singular pair of the first half's mean M_1; the estimate is u^T M_2 v over the second half,
    with se = sd_i(u^T A_i v) / sqrt(M_2).  Given the first half it is unbiased for u^T E[A] v <= g1, and
    u^T E[A] v = g1 - O(|u - u*|^2) when (u, v) is near the true pair, whereas sigma_max(M_hat) is biased
    upwards by the noise of M_hat (about its entry noise times 2 sqrt(d)) -- reported as ``plug_in``.
    """
    u, s, vh = np.linalg.svd(step_mean_with_se(half1)[0])
    vals = bilinear_values(half2, u[:, 0], vh[0])
    return Gap(float(vals.mean()), float(vals.std(ddof=1) / math.sqrt(vals.size)), float(s[0]))


def second_moment_gap(half1: list, half2: list, rng: np.random.Generator) -> Gap:
    """g2 = sigma_max of S(X) = E[A X A^T] on the complement F^perp of its fixed space, matrix-free.

    For steps of norm <= 1, S is a contraction in the Frobenius norm, so ker(I - S) = ker(I - S^*) = F and
    range(I - S) = F^perp; both F and F^perp are invariant under S and S^* = T (T(X) = E[A^T X A]).  Hence
    Y_0 = X_0 - S_1(X_0) (X_0 Gaussian) lies in F^perp, and the power method Y <- T_1(S_1(Y)) / norm on the first
    half's operators converges to the top right singular vector V of S_1 on F^perp; U = S_1(V) / |S_1(V)|.
    X_0 = G / |G| + I / sqrt(d): a Gaussian start alone gives the trace direction weight 1/d, and for isotropic
    contractions (Householder beta in (0, 2): S(I) = tau I with tau = 1 - beta (2 - beta)/d the top value, the
    traceless part only ~1 - 2 beta/d) the power method would need ~d^2 steps to find it.  The power method's
    value is a lower bound that converges to g2 from below.
    Rounding leaks into F (where T S has eigenvalue 1) grow by 1/sigma^2 per step, so the iteration stops
    before such a leak could reach LEAK_LIMIT, at POWER_TOL relative change, or at its step cap (POWER_WORK flops;
    then ``converged`` is False and the value a lower bound).
    The estimate is <U, S_2(V)> on the second half, se = sd_i <U, A_i V A_i^T> / sqrt(M_2) (unbiased for
    <U, S V> <= g2 given the first half), never forming the d^2 x d^2 matrix.  Y_0 = 0 means every direction is
    fixed (A X A^T = X for every sampled step, e.g. A = I).
    """
    d = half1[0].dim
    op1, op2 = pair_operator(half1), pair_operator(half2)
    g = rng.normal(size=(d, d))
    x0 = g / np.linalg.norm(g) + np.eye(d) / math.sqrt(d)  # the trace direction with weight 1/sqrt(2), see above
    y = x0 - op1.left(x0)
    size = np.linalg.norm(y)
    if size <= FIXED_TOL * np.linalg.norm(x0):
        return Gap(1.0, 0.0, 1.0, 0, True)
    v, sigma, leak, it = y / size, 0.0, math.log(LEAK_LIMIT / np.finfo(float).eps), 0
    cap = int(min(POWER_ITERS_MAX, max(POWER_ITERS, POWER_WORK // (2.0 * op1.cost))))
    converged = False
    while it < cap and not converged:
        it += 1
        z = op1.left(v)
        new = float(np.linalg.norm(z))
        w = op1.right(z)
        norm_w = float(np.linalg.norm(w))
        converged = abs(new - sigma) <= POWER_TOL * max(new, 1e-300) or norm_w == 0.0
        sigma = new
        if not converged:
            v = w / norm_w
            # a leak into F could reach LEAK_LIMIT: stop (sigma is then far below 1, the decision is not close)
            converged = it * 2.0 * math.log(1.0 / max(sigma, 1e-300)) >= leak
    if sigma == 0.0:
        return Gap(0.0, 0.0, 0.0, it)
    u = op1.left(v)
    u /= np.linalg.norm(u)
    vals = op2.values(u, v)
    return Gap(float(vals.mean()), float(vals.std(ddof=1) / math.sqrt(vals.size)), sigma, it, converged=converged)


# --- one-sample conditions, chunk by chunk ------------------------------------------------------------------


def orthogonality_drift(chunks: list) -> float:
    """max_i ||A_i^T A_i - I||_F, in the steps' form.

    SO(2) planes: A^T A - I = diag_b (cos^2 + sin^2 - 1) I_2, so sqrt(2 sum_b (c_b^2 + s_b^2 - 1)^2) as evaluated
    in floating point; Householder: A^T A - I = (beta^2 |w|^2 - 2 beta) w w^T, Frobenius norm
    |beta^2 |w|^2 - 2 beta| |w|^2; dense: the matrix itself.
    """
    d = chunks[0].dim
    worst = 0.0
    for c in chunks:
        if isinstance(c, AngleSteps):
            err = np.cos(c.theta[:, 0]) ** 2 + np.sin(c.theta[:, 0]) ** 2 - 1.0
            drift = np.sqrt(2.0 * np.sum(err**2, axis=1))
        elif isinstance(c, HouseholderSteps):
            w2 = np.sum(c.w[:, 0] ** 2, axis=1)
            drift = np.abs(c.beta[:, 0] ** 2 * w2 - 2.0 * c.beta[:, 0]) * w2
        else:
            a = np.asarray(c.dense(), dtype=np.float64)[:, 0]
            drift = np.linalg.norm(np.swapaxes(a, 1, 2) @ a - np.eye(d), axis=(1, 2))
        worst = max(worst, float(np.max(drift)))
    return worst


def largest_norm(chunks: list, drift: float, rng: np.random.Generator) -> tuple[float, str]:
    """max_i ||A_i||_2 and how it was obtained.

    Orthogonal samples (drift <= ORTHO_TOL): sqrt(1 + drift) bounds it.  d <= NORM_EXACT_DIM: exact, from
    eigvalsh(A^T A).  Otherwise a lower bound by POWER_ITERS steps of the power method on A^T A per sample.
    """
    d = chunks[0].dim
    if drift <= ORTHO_TOL:
        return math.sqrt(1.0 + drift), "orthogonal samples: ||A||_2 <= sqrt(1 + drift)"
    if d <= NORM_EXACT_DIM:
        top = max(float(np.max(np.linalg.eigvalsh(sandwich(c, np.eye(d), adjoint=True))[:, -1])) for c in chunks)
        return math.sqrt(max(top, 0.0)), "max ||A||_2 over the samples (exact)"
    best = 0.0
    for c in chunks:
        x = rng.normal(size=(c.batch, d, 1))
        for _ in range(POWER_ITERS):
            x /= np.linalg.norm(x, axis=1, keepdims=True)
            y = apply_step(c.transposed(), 0, apply_step(c, 0, x))
        best = max(best, float(np.max(np.einsum("bdr,bdr->b", x, y))))
    return math.sqrt(best), f"max ||A||_2 over the samples (power method, {POWER_ITERS} steps: a lower bound)"


def sample_angles(chunks: list) -> np.ndarray | None:
    """Angles theta (M, d/2) if every sample is block-diagonal SO(2) on interleaved planes, else None."""
    parts = []
    for c in chunks:
        theta = c.theta[:, 0] if isinstance(c, AngleSteps) else plane_angles(np.asarray(c.dense(), dtype=float)[:, 0])
        if theta is None:
            return None
        parts.append(theta)
    return np.concatenate(parts)


def step_dependence(family: Any, samples: int, rng: np.random.Generator, probes: int = 16) -> tuple[float, int]:
    """max_j |z_j| of x_j^T (E_hat[A_2 A_1] - E_hat[A_2] E_hat[A_1]) y_j over ``probes`` Gaussian pairs (x_j, y_j).

    Independent consecutive steps give zero for every pair; dependence (a Markov token source, a repeated angle)
    shows in generic bilinear forms.  The influence of one sequence is x^T A_2 A_1 y - x^T A_2 M_1 y - x^T M_2 A_1 y
    (linearisation of the difference of means), so se = sd / sqrt(M); only step-vector products are used,
    O(M d probes) for structured steps.  Returns (max |z|, number of probes).
    """
    chunks = draw_steps(family, samples, rng, n_steps=2)
    d = int(family.dim)
    x, y = rng.normal(size=(2, d, probes))

    def parts(c):  # A_1 y (c, d, K) and A_2^T x (c, d, K)
        return (apply_step(c, 0, np.broadcast_to(y, (c.batch, d, probes))),
                apply_step(c.transposed(), 1, np.broadcast_to(x, (c.batch, d, probes))))

    m1y, m2x = np.zeros((d, probes)), np.zeros((d, probes))
    for c in chunks:
        a1y, a2x = parts(c)
        m1y += a1y.sum(axis=0) / samples
        m2x += a2x.sum(axis=0) / samples
    vals = []
    for c in chunks:
        a1y, a2x = parts(c)
        both = np.einsum("dk,bdk->bk", x, apply_step(c, 1, a1y))
        vals.append(both - np.einsum("bdk,dk->bk", a2x, m1y) - np.einsum("dk,bdk->bk", m2x, a1y))
    infl = np.concatenate(vals)
    diff = infl.mean(axis=0) + np.einsum("dk,dk->k", m2x, m1y)  # mean(x A2 A1 y) - x^T M2 M1 y
    se = infl.std(axis=0, ddof=1) / math.sqrt(samples)
    z = np.abs(diff) / np.sqrt(se**2 + 1e-20)  # floor 1e-10: rounding of deterministic steps is not dependence
    return float(z.max()), probes


# --- explicit second moments for small d (the coherent-direction test) -----------------------------------


def dense_steps(chunks: list) -> np.ndarray:
    """Every sampled step as a dense matrix, (M, d, d) (small d only)."""
    return np.concatenate([np.asarray(c.dense(), dtype=np.float64)[:, 0] for c in chunks])


def pair_mean(mats: np.ndarray) -> np.ndarray:
    """E_hat[A (x) A], (d^2, d^2): entry ((i,k), (j,l)) = mean A_ij A_kl, so it maps vec(M) to vec(E[A M A^T])."""
    m, d, _ = mats.shape
    x = mats.reshape(m, d * d)
    g = x.T @ x / m  # g[(i,j),(k,l)] = E A_ij A_kl
    return g.reshape(d, d, d, d).transpose(0, 2, 1, 3).reshape(d * d, d * d)


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


def plane_coherent_direction(pair: AnglePair, rng: np.random.Generator, starts: int = 24, iters: int = 300) -> float:
    """kappa = max_{|q|=1} ||Pi_F vec(q q^T)||^2 for block SO(2) steps, in the plane basis (any d, no d^4 matrix).

    In the plane basis S is diagonal (``AnglePair``): the p-part of block (b, c) is multiplied by G-_bc, the r-part
    by G+_bc, so the fixed space F is coordinate-aligned: p_bc is fixed iff G-_bc = 1 (theta_b = theta_c mod 2 pi in
    every sample), r_bc iff G+_bc = 1 (theta_b = -theta_c).  Block (b, c) of q q^T has p = w_b conj(w_c) / 2,
    r = w_b w_c / 2 (w_b: plane b of q as a complex number) and <Y, Y> = 2 (|p|^2 + |r|^2), hence

        ||Pi_F vec(q q^T)||^2 = x^T G x / 2,   x_b = |w_b|^2 (a point of the simplex),  G = 1[G- = 1] + 1[G+ = 1].

    G_bb >= 1 (G-_bb = 1 always): one plane gives 1/2; a plane with G+_bb = 1 (angles in {0, pi}) gives 1.  The
    maximum over the simplex is taken by replicator steps x <- x * (G x) / x^T G x (ascent for a nonnegative
    symmetric G, Baum & Eagon 1967) from the uniform point and ``starts`` random points, and compared with the
    vertices (fixed points of those steps), so it is a lower bound, as for ``coherent_direction``.
    """
    g = ((np.abs(pair.minus - 1.0) <= FIXED_TOL).astype(float) + (np.abs(pair.plus - 1.0) <= FIXED_TOL))
    g = (g + g.T) / 2  # symmetric up to rounding already: G-_cb = conj(G-_bc), G+ symmetric
    h = g.shape[0]
    x = np.concatenate([np.full((1, h), 1.0 / h), rng.dirichlet(np.ones(h), size=starts)])
    for _ in range(iters):
        gx = x @ g
        value = np.einsum("sb,sb->s", x, gx)
        x = x * gx / value[:, None]
    return float(max(np.max(np.diag(g)), np.max(np.einsum("sb,bc,sc->s", x, g, x)))) / 2.0


def householder_coherent_direction(w: np.ndarray, beta: np.ndarray) -> float | None:
    """kappa for steps A_i = I - beta_i w_i w_i^T, w (M, d), beta (M,), from the span of the w's (any d, no d^4
    matrix); None when the steps mix reflections with other nonzero factors (the explicit fixed space decides).

    With b = beta |w|^2, u = w / |w| and P = u u^T, a fixed X (A X A^T = X) has b (P X + X P) = b^2 P X P, and
    sandwiching by P gives (2 - b) P X P = 0.  So for b not in {0, 2}: X u = 0 = X^T u; for b = 2 (a reflection):
    X commutes with P.  With V = span{u_i : b_i != 0}:
      no b = 2:    F = matrices on V_perp,                         kappa = 1 if V != R^d else 0;
      every b = 2: F = sum_c R I_(V_c) + matrices on V_perp,       kappa = max(max_c 1 / dim V_c, 1 if V != R^d),
    V_c the spans of the components of the graph u_i ~ u_j iff u_i^T u_j != 0 (found by growing a span: a vector
    joins a component iff it is not orthogonal to the component's span).  The algebra of a connected set of rank-one
    projections acts irreducibly on their span and commutes only with scalars there, so Pi_F(q q^T) has norm^2
    sum_c |P_c q|^4 / dim V_c + |P_perp q|^4, convex in the masses |P_c q|^2: its maximum is at a vertex.
    """
    norms = np.linalg.norm(w, axis=1)
    b = beta * norms**2
    active = np.abs(b) > FIXED_TOL
    u = w[active] / norms[active, None]
    d = w.shape[1]
    uncovered = 1.0 if span_basis(u).shape[1] < d else 0.0
    reflection = np.abs(b[active] - 2.0) <= FIXED_TOL
    if not reflection.any():
        return uncovered
    if not reflection.all():
        return None
    largest, left = uncovered, u
    while left.shape[0]:
        basis, members = left[:1].T, np.zeros(left.shape[0], dtype=bool)
        members[0] = True
        while True:
            joins = ~members & (np.abs(left @ basis).max(axis=1) > FIXED_TOL)
            if not joins.any():
                break
            members |= joins
            basis = span_basis(left[members])
        largest = max(largest, 1.0 / basis.shape[1])
        left = left[~members]
    return largest


def span_basis(vectors: np.ndarray) -> np.ndarray:
    """Orthonormal basis (d, r) of the span of the rows of ``vectors`` (m, d), r its numerical rank (singular values
    above numpy's ``matrix_rank`` tolerance, s_max max(m, d) eps), from one SVD."""
    if vectors.shape[0] == 0:
        return np.zeros((vectors.shape[1], 0))
    left, s, _ = np.linalg.svd(vectors.T, full_matrices=False)
    return left[:, : int(np.sum(s > s.max() * max(vectors.shape) * np.finfo(float).eps))]


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


# --- theory for built-ins (the predicted mean-step norm, Markov product rates) --------------------------


def theory_mean(family: Any) -> np.ndarray | None:
    """Exact E[A] (d, d) of one step for built-in families (the stationary marginal for token laws), else None."""
    from . import groups, householder, so2

    kind = type(family)
    try:
        if kind in (SO2Accumulated, Rope, NoPE):
            return so2.mean_product(family, 1)
        if kind is Householder:
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
    if type(family) is SO2Accumulated and not family.iid_steps:
        from . import so2

        try:
            out["product_rate"] = float(np.max(so2.transfer_rate(family)))
        except NoClosedForm:  # too large a transfer matrix: C1 is then not certified for the dependent steps
            pass
    return out


# --- the report --------------------------------------------------------------------------------------------


def _k_one_sided(alpha: float, tests: int) -> float:
    return float(norm.isf(alpha / max(tests, 1)))


def check(family: Any, rng: np.random.Generator, samples: int | None = None, budget: float = 1e-3, k_max: int = 32,
          pair_dim: int = 24) -> Report:
    """Run every condition on ``family`` and decide which claims apply (module docstring).

    rng: the only source of randomness (required); samples: M single steps (and M two-step sequences for the
    independence test), default ``default_samples``; budget: false-failure probability of the whole report;
    k_max: largest frequency of the non-lattice test; pair_dim: largest d for which E[A (x) A] is formed
    explicitly (d^4 numbers) to find the fixed space for the coherent-direction test (skipped above it).
    """
    if not (0.0 < budget < 1.0):
        raise ParamError(f"budget must lie in (0, 1), got {budget}")
    samples = default_samples(family, rng) if samples is None else samples
    check_int("samples", samples, 10)
    d = int(family.dim)
    chunks = draw_steps(family, samples, rng)
    half1, half2 = split(chunks)
    alpha = budget / 4.0  # four statistical conditions: first gap, second gap, non-lattice, independence
    k1 = _k_one_sided(alpha, 1)
    conds: dict[str, Condition] = {}

    drift = orthogonality_drift(chunks)
    conds["orthogonal"] = Condition("orthogonal", drift <= ORTHO_TOL, drift, None, ORTHO_TOL,
                                    detail="max ||A^T A - I||_F over the samples (a property: the claims need "
                                           "norm-bounded steps, not orthogonal ones)", required=False)
    op_norm, how = largest_norm(chunks, drift, rng)
    conds["norm-bounded"] = Condition("norm-bounded", op_norm <= 1.0 + NORM_TOL, op_norm, None, 1.0, detail=how)

    g1 = first_moment_gap(half1, half2)
    conds["first-moment-gap"] = Condition(
        "first-moment-gap", g1.value + k1 * g1.stderr < 1.0 - GAP_TOL, g1.value, g1.stderr, 1.0, k1,
        detail=f"sigma_max(E[A]) + k se < 1 (split-sample estimate; plug-in sigma_max = {g1.plug_in:.4g}, biased up)")

    if not conds["norm-bounded"].passed:
        conds["second-moment-gap"] = Condition("second-moment-gap", None,
                                               detail="skipped: steps are not norm-bounded (the fixed-space argument needs ||A|| <= 1)")
    else:
        g2 = second_moment_gap(half1, half2, rng)
        if g2.all_fixed:
            conds["second-moment-gap"] = Condition("second-moment-gap", False, 1.0, 0.0, 1.0, k1,
                                                   detail="every direction is fixed (A X A^T = X for every sampled step)")
        else:
            conds["second-moment-gap"] = Condition(
                "second-moment-gap", g2.value + k1 * g2.stderr < 1.0 - GAP_TOL, g2.value, g2.stderr, 1.0, k1,
                detail=f"sigma_max of X -> E[A X A^T] off its fixed space (matrix-free power method, {g2.iterations} "
                       f"steps{'' if g2.converged else ', NOT converged: a lower bound'}; split-sample estimate, "
                       f"plug-in {g2.plug_in:.4g})")
    kappa, where = None, ""
    if all(isinstance(c, AngleSteps) for c in chunks):
        kappa, where = plane_coherent_direction(AnglePair(chunks), rng), "fixed space in the plane basis"
    elif all(isinstance(c, HouseholderSteps) for c in chunks):
        kappa = householder_coherent_direction(*householder_samples(chunks))
        where = "fixed space from the span of the w's"
    if kappa is None and d <= pair_dim:
        kappa, where = coherent_direction(fixed_space(pair_mean(dense_steps(chunks)))[0], d, rng), "explicit fixed space"
    conds["coherent-direction"] = (
        Condition("coherent-direction", None, detail=f"skipped: d = {d} > pair_dim = {pair_dim} (needs the explicit "
                                                     "fixed space)") if kappa is None else
        Condition("coherent-direction", kappa < 1.0 - 1e-6, kappa, None, 1.0,
                  detail=f"kappa = max_q lim E[(q^T P_n q)^2] (< 1: no unit probe stays coherent; {where})"))

    theta = sample_angles(chunks)
    if theta is None:
        conds["non-lattice"] = Condition("non-lattice", None, detail="not a block-diagonal SO(2) family")
    elif not np.any(theta):
        conds["non-lattice"] = Condition("non-lattice", None, detail="not applicable: every sampled step is the identity")
    else:
        mods, ses = lattice_statistics(theta, k_max)
        kl = _k_one_sided(alpha, mods.size)
        upper = mods + kl * ses
        worst = np.unravel_index(int(np.argmax(upper)), upper.shape)
        passed = bool(np.all(upper < 1.0))
        first_k = int(np.argmax(np.any(upper >= 1.0, axis=1))) + 1 if not passed else 0
        what = ("" if passed else "; deterministic angles (|phi(1)| = 1)" if first_k == 1
                else f"; angles on a lattice of step 2 pi / {first_k} (|phi({first_k})| = 1)")
        conds["non-lattice"] = Condition("non-lattice", passed, float(mods[worst]), float(ses[worst]), 1.0, kl,
                                         detail=f"max_(b, 1<=k<={k_max}) |phi_b(k)| (worst: plane {worst[1]}, "
                                                f"k = {worst[0] + 1}){what}")

    zmax, pairs = step_dependence(family, samples, rng)
    kd = float(norm.isf(alpha / (2 * pairs)))
    conds["independent-steps"] = Condition("independent-steps", zmax <= kd, zmax, None, kd, kd,
                                           detail=f"max |z| of x^T (E[A2 A1] - E[A2] E[A1]) y over {pairs} random probe pairs")

    theory = theory_rates(family)
    exact = theory_mean(family)
    if exact is not None:  # the sampler against the closed form, entrywise (informational, not a condition)
        mean, se = step_mean_with_se(chunks)
        theory["mean_step_max_z"] = float(np.max(np.abs(mean - exact) / np.sqrt(se**2 + 1e-20)))
        theory["mean_step_k"] = float(norm.isf(alpha / (2 * d * d)))
    claims, holds = verdict(conds, theory)
    return Report(family_name(family), family_params(family), d, samples, budget, conds, claims, theory, holds)


def step_mean_with_se(chunks: list) -> tuple[np.ndarray, np.ndarray]:
    """E_hat[A] and its entrywise standard error, (d, d) each."""
    d = chunks[0].dim
    total, squares, m = np.zeros((d, d)), np.zeros((d, d)), 0
    for c in chunks:
        a = apply_step(c, 0, np.broadcast_to(np.eye(d), (c.batch, d, d)))
        total += a.sum(axis=0)
        squares += (a**2).sum(axis=0)
        m += c.batch
    mean = total / m
    return mean, np.sqrt(np.maximum(squares - m * mean**2, 0.0) / (m - 1) / m)


def verdict(conds: dict[str, Condition], theory: dict | None = None) -> tuple[dict[str, dict], bool]:
    """Which claims apply given the conditions (module docstring); also whether the spectral-gap condition holds.

    A skipped condition (passed None) never blocks a claim; it is named in the claim's reason.
    """
    theory = theory or {}

    def failed(name: str) -> bool:
        return conds[name].passed is False

    def skipped(names: tuple[str, ...]) -> str:
        gone = [n for n in names if conds[n].passed is None and conds[n].detail.startswith("skipped")]
        return f" ({', '.join(gone)} skipped)" if gone else ""

    reasons_c1 = []
    if failed("first-moment-gap"):
        g1 = conds["first-moment-gap"]
        hint = ("; it is below 1, so more --samples may resolve it"
                if g1.stderr and g1.value < 1.0 - GAP_TOL - g1.stderr else "")
        reasons_c1.append(f"no first-moment gap (sigma_max(E[A]) = {g1.value:.4g}, not < 1 by k se{hint})")
    if failed("non-lattice"):
        reasons_c1.append("angle law without spread: " + conds["non-lattice"].detail.rpartition("; ")[2])
    dependent = failed("independent-steps")
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
    gap2 = conds["second-moment-gap"]
    gap2_why = (gap2.detail if gap2.value is None or gap2.detail.startswith("every")
                else f"g2 = {gap2.value:.4g}, not < 1 by k se")
    reasons_c4 = [r for r, bad in (
        (f"no second-moment gap off the fixed space ({gap2_why})", failed("second-moment-gap")),
        ("a unit probe stays coherent (kappa = 1)", failed("coherent-direction")),
        ("steps can expand norms (the second-moment argument needs ||A|| <= 1)", failed("norm-bounded")),
        ("angle law without spread: " + conds["non-lattice"].detail.rpartition("; ")[2], failed("non-lattice")))
        if bad]
    tested = skipped(("second-moment-gap", "coherent-direction"))
    claims["C4"] = {"applies": not reasons_c4,
                    "why": ("second-moment gap and no coherent direction" + tested) if not reasons_c4 else "; ".join(reasons_c4)}
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
        marks = {True: "PASS", False: "FAIL"} if c.required else {True: "yes ", False: "no  "}
        mark = marks.get(c.passed, "skip" if c.detail.startswith("skipped") else "n/a ")
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
