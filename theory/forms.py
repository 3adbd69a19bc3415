"""``closed_forms(family)``: the closed forms of a built-in family, one object per family with one method per
quantity, picked by the family's class (``CLOSED_FORMS``).  This table is the one place where the theory tells the
built-in families apart; the formula modules (``so2``, ``householder``, ``groups``, ``values``, ``far``,
``farmass``) take what differs between them as arguments: the scalar rates (``ClosedForms.rate``: E[A] = rho I;
``ClosedForms.norm_rate``: E[A^T A] = tau I), the exact one-step mean (``ClosedForms.step_mean``) and, for the
SO(2)-block families, how a step turns the planes (``ClosedForms.angles``: ``so2.PlaneAngles``, fixed angles omega
for RoPE, zeros for NoPE, the angle law for so2-accumulated).

Any other family (a user's, or a subclass of a built-in: the match is exact) gets the base ``ClosedForms``, whose
methods raise ``NoClosedForm`` (``predict.prediction`` then goes through the moment operators, ``theory.moments``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from accum.simulations.conventions import rope_frequencies
from accum.simulations.families import Givens, Haar, Householder, LieWalk, NoPE, Rope, SO2Accumulated
from accum.simulations.params import ParamError

from . import far, farmass, groups, householder, so2, values, window
from ._common import NoClosedForm, as_sizes, probes


class ClosedForms:
    """Closed forms of one built-in family, one method per quantity; the base class has none (``NoClosedForm``) except
    those that follow from others (onset and window from the coherence curve, the step mean from the scalar rate)
    or hold for every family of norm-bounded steps.  ``CLOSED_FORMS`` maps each built-in class to its forms; any
    other family goes through the moment operators (``predict.prediction``, ``theory.moments``), which is how a new
    family brings its own theory: one class with a ``moments()`` method."""

    def __init__(self, family: Any):
        self.family = family

    def missing(self, what: str) -> NoClosedForm:
        name = f"{type(self.family).__module__}.{type(self.family).__qualname__}"
        if type(self.family) not in CLOSED_FORMS:
            return NoClosedForm(f"{name} is a user-defined family: no closed form for {what} (``prediction`` estimates "
                                "it from the moment operators; `accum check` tests its assumptions)")
        return NoClosedForm(f"{name}: no closed form for {what}")

    # --- what the formula modules take as arguments ----------------------------------------------------------

    def rate(self) -> float:
        """rho with E[A] = rho I (haar, givens, lie-walk, nope and householder(sphere))."""
        raise NoClosedForm(f"{type(self.family).__name__}: no scalar mean E[A] = rho I known")

    def norm_rate(self) -> float:
        """tau with E[A^T A] = tau I: 1 for orthogonal families, 1 - beta(2-beta)/d for householder(sphere)."""
        raise NoClosedForm(f"{type(self.family).__name__}: no scalar E[A^T A] known")

    def angles(self) -> so2.PlaneAngles:
        """How one step turns the d/2 planes of an SO(2)-block family (``so2.PlaneAngles``)."""
        raise NoClosedForm(f"{type(self.family).__name__}: not an SO(2)-block family with a known angle law")

    def step_mean(self) -> np.ndarray:
        """Exact E[A] (d, d) of one step (the stationary marginal for token laws): rho I by default."""
        return self.rate() * np.eye(self.family.dim)

    def pair_operator(self) -> np.ndarray:
        """Exact E[A (x) A] (d^2, d^2) of one step in numpy's ``kron`` layout: row (i, k), column (j, l) holds
        E[A_ij A_kl], and it maps row-major vec(X) to vec(E[A X A^T]) (the stationary marginal for token laws)."""
        raise self.missing("the one-step second moment E[A (x) A]")

    def product_rate(self) -> float | None:
        """The asymptotic per-step decay rate of E[A_n ... A_1] where it differs from sigma_max(E[A]) (dependent
        steps), else None."""
        return None

    # --- the quantities ---------------------------------------------------------------------------------------

    def coherence(self, steps: int, q: Any = None, k: Any = None) -> np.ndarray:
        raise self.missing("the coherence")

    def mean_product_sq(self, steps: int) -> np.ndarray:
        raise self.missing("||E P_n||_F^2")

    def norm_sq(self, steps: int) -> np.ndarray:
        raise self.missing("E|P_n x|^2")

    def onset(self, eps: float, max_steps: int = 100_000, q: Any = None, k: Any = None) -> float:
        return window.crossing(self.coherence(max_steps, q, k), eps)

    def window(self, context: int, q: Any = None, k: Any = None) -> float:
        if context < 1:
            raise ParamError(f"context must be >= 1, got {context}")
        return window.width_from_curve(self.coherence(context - 1, q, k))

    def far_variance(self, offset: int, q: Any = None, k: Any = None) -> float:
        raise self.missing("the far-score second moment")

    def far_variance_curve(self, steps: int, q: Any = None, k: Any = None) -> np.ndarray:
        """d E[s_t^2] for t = 0..steps, (steps+1,): ``far_variance`` lag by lag (forms that iterate an operator or have
        it in closed form override this)."""
        return np.array([self.far_variance(t, q, k) for t in range(steps + 1)], dtype=float)

    def far_mass(self, far_sizes: Any, s0: float, slope: float = 0.0, q: Any = None, k: Any = None) -> np.ndarray:
        raise self.missing("the far mass E exp(s0 q^T P k)")

    def far_residual(self, far_sizes: Any, value_rotation: bool = True, m: Any = None) -> np.ndarray:
        raise self.missing("the far residual")

    def mixing_rate(self) -> float:
        """The slowest |eigenvalue| of E[A] of orthogonal steps whose walk on the sphere mixes: the rate at which the
        far mass's estimated transient decays (``farmass.mixing_far_mass``)."""
        raise self.missing("a mixing estimate of the far mass (orthogonal Givens, Lie-walk or householder(beta=2) "
                           "steps only)")

    def _scalar_far_residual(self, far_sizes: Any, value_rotation: bool) -> np.ndarray:
        """The far residual of i.i.d. steps with E[A] = rho I and E[A^T A] = tau I (``values.scalar_residual_sq``)."""
        sizes = as_sizes(far_sizes)
        if not value_rotation:
            return values.residual_sq_without_rotation(sizes)
        return values.scalar_residual_sq(self.rate(), self.norm_rate(), sizes)


class SO2Forms(ClosedForms):
    """rope, nope and so2-accumulated: everything from the path characteristic of ``angles()`` (``theory.so2``)."""

    def norm_rate(self):
        return 1.0  # rotations

    def step_mean(self):
        return so2.mean_product(self.angles(), 1)

    def pair_operator(self):
        return so2.step_pair_operator(self.angles())

    def coherence(self, steps, q=None, k=None):
        return so2.coherence(self.angles(), steps, q, k)

    def mean_product_sq(self, steps):
        return so2.mean_product_sq(self.angles(), steps)

    def norm_sq(self, steps):
        return np.ones(steps + 1)  # rotations

    def onset(self, eps, max_steps=100_000, q=None, k=None):
        angles = self.angles()
        law = angles.law
        if law is not None and law.iid and q is None and k is None:
            phi = so2.plane_characteristic(angles)
            if np.allclose(phi, phi[0], rtol=0, atol=0) and np.isreal(phi[0]):
                return window.onset(phi[0].real, eps)  # one real rate on every plane
        return ClosedForms.onset(self, eps, max_steps, q, k)  # named, not super(): a planted copy runs outside the class

    def far_variance(self, offset, q=None, k=None):
        q, k = probes(self.family.dim, q, k)
        return self.family.dim * so2.far_second_moment(self.angles(), offset, q, k)

    def far_variance_curve(self, steps, q=None, k=None):
        return self.family.dim * so2.far_second_moment_curve(self.angles(), steps, q, k)

    def far_mass(self, far_sizes, s0, slope=0.0, q=None, k=None):
        angles = self.angles()
        if so2.token_law(angles) is not None:
            return farmass.token_far_mass(angles, far_sizes, s0, q, k, slope)
        return so2.far_mass(angles, as_sizes(far_sizes), s0, q, k, slope)

    def far_residual(self, far_sizes, value_rotation=True, m=None):
        return values.block_residual_sq(self.angles(), far_sizes, m=m, value_rotation=value_rotation)


class RopeForms(SO2Forms):
    def angles(self):
        return so2.PlaneAngles(self.family.dim, omega=rope_frequencies(self.family.dim, self.family.base))


class NoPEForms(SO2Forms):
    """A = I: no plane turns (``theory.so2`` with omega = 0), and E[A] = I."""

    def angles(self):
        return so2.PlaneAngles(self.family.dim, omega=np.zeros(self.family.dim // 2))

    def rate(self):
        return 1.0

    def far_residual(self, far_sizes, value_rotation=True, m=None):
        return self._scalar_far_residual(far_sizes, value_rotation)


class SO2AccumulatedForms(SO2Forms):
    def angles(self):
        return so2.PlaneAngles(self.family.dim, law=self.family.angle_law())

    def product_rate(self):
        """A Markov token source: the transfer-matrix product rate max_b rho(P D_b) (``so2.transfer_rate``)."""
        if self.family.iid_steps:
            return None
        return float(np.max(so2.transfer_rate(self.angles())))


class HouseholderForms(ClosedForms):
    """I - beta w w^T with w on the sphere (scalar rates) or from a token table (exact finite averages;
    ``theory.householder``)."""

    def rate(self):
        if self.family.w == "sphere":
            return 1.0 - self.family.beta / self.family.dim
        return super().rate()

    def norm_rate(self):
        if self.family.w == "sphere":
            return 1.0 - self.family.beta * (2.0 - self.family.beta) / self.family.dim
        return super().norm_rate()

    def step_mean(self):
        parts = householder.family_parts(self.family)
        if parts["w"] == "token":
            return householder.token_step_mean(parts["beta"], parts["table"])
        return householder.mean_rate(parts["beta"], parts["d"]) * np.eye(self.family.dim)

    def pair_operator(self):
        parts = householder.family_parts(self.family)
        if parts["w"] == "token":
            return householder.token_pair_operator(parts["beta"], parts["table"])
        return householder.pair_operator(parts["beta"], parts["d"])

    def coherence(self, steps, q=None, k=None):
        return householder.coherence(self.family, steps, q, k)

    def mean_product_sq(self, steps):
        return householder.mean_product_sq(self.family, steps)

    def norm_sq(self, steps):
        fam = self.family
        if fam.w == "sphere":
            return self.norm_rate() ** np.arange(steps + 1, dtype=float)
        parts = householder.family_parts(fam)
        x = np.full(fam.dim, 1.0 / math.sqrt(fam.dim))
        op = householder.token_pair_operator(parts["beta"], parts["table"])
        vec, out = np.outer(x, x).reshape(-1), []
        for _ in range(steps + 1):
            out.append(np.trace(vec.reshape(fam.dim, fam.dim)))
            vec = op @ vec
        return np.array(out)

    def onset(self, eps, max_steps=100_000, q=None, k=None):
        if self.family.w == "sphere":
            return window.onset(self.rate(), eps)
        return super().onset(eps, max_steps, q, k)

    def far_variance(self, offset, q=None, k=None):
        q, k = probes(self.family.dim, q, k)
        return self.family.dim * householder.family_far_second_moment(self.family, offset, q, k)

    def far_variance_curve(self, steps, q=None, k=None):
        return self.family.dim * householder.family_far_second_moment_curve(self.family, steps, q, k)

    def far_mass(self, far_sizes, s0, slope=0.0, q=None, k=None):
        if self.family.w == "token" or self.family.dim < 3:
            raise self.missing("the far mass of token directions or d < 3")
        return farmass.householder_far_mass(self.family, far_sizes, s0, q, k, slope)

    def far_residual(self, far_sizes, value_rotation=True, m=None):
        if self.family.w == "token":
            raise self.missing("the far residual of token directions")
        return self._scalar_far_residual(far_sizes, value_rotation)

    def mixing_rate(self):
        """Reflections (beta = 2) only: 1 - 2/d on the sphere, the top |eigenvalue| of I - 2 W^T W / V for a table."""
        fam = self.family
        if fam.beta != 2.0:
            return super().mixing_rate()
        if fam.w == "sphere":
            return 1.0 - 2.0 / fam.dim
        table = householder.family_parts(fam)["table"]
        return float(np.max(np.abs(np.linalg.eigvalsh(householder.token_step_mean(2.0, table)))))


class IsotropicForms(ClosedForms):
    """E[A] = rho I and orthogonal steps (Haar, Givens, Lie walk: ``theory.groups``)."""

    def norm_rate(self):
        return 1.0

    def coherence(self, steps, q=None, k=None):
        q, k = probes(self.family.dim, q, k)
        rho = self.rate()
        return rho ** np.arange(steps + 1, dtype=float) * float(q @ k)  # 0.0 ** 0 = 1: c(0) = q.k for Haar too

    def mean_product_sq(self, steps):
        rho = self.rate()
        return np.array([1.0] + [rho ** (2 * n) for n in range(1, steps + 1)])

    def norm_sq(self, steps):
        return np.ones(steps + 1)

    def onset(self, eps, max_steps=100_000, q=None, k=None):
        return window.onset(self.rate(), eps)

    def far_residual(self, far_sizes, value_rotation=True, m=None):
        return self._scalar_far_residual(far_sizes, value_rotation)

    def mixing_rate(self):
        return self.rate()


class HaarForms(IsotropicForms):
    def rate(self):
        return float(groups.haar_mean(self.family.dim, 1, self.family.group))

    def pair_operator(self):
        """E[A_ij A_kl] = delta_ik delta_jl / d (O(d), and SO(d) for d >= 3, whose only invariant of V (x) V is the
        identity): E[A X A^T] = tr(X) I / d."""
        d = self.family.dim
        if self.family.group == "SO" and d <= 2:
            raise self.missing("E[A (x) A] of SO(1) or SO(2)")
        return groups.isotropic_pair_operator(d, np.array([0.0, 1.0 / d, 0.0]))

    def far_variance(self, offset, q=None, k=None):
        d = self.family.dim
        q, k = probes(d, q, k)
        if offset == 0 or (d == 1 and self.family.group == "SO"):
            return d * float(q @ k) ** 2
        return float(q @ q) * float(k @ k)

    def far_variance_curve(self, steps, q=None, k=None):
        return np.array([self.far_variance(min(t, 1), q, k) for t in range(steps + 1)])  # constant after one step

    def far_mass(self, far_sizes, s0, slope=0.0, q=None, k=None):
        fam, sizes = self.family, as_sizes(far_sizes)
        q, k = probes(fam.dim, q, k)
        if fam.dim == 1 and fam.group == "SO":
            return np.exp(s0 * float(q @ k) - s0) * far.alibi_far_mass(sizes, slope)
        return far.haar_far_mass(sizes, s0, fam.dim, float(np.linalg.norm(q) * np.linalg.norm(k)), slope)


class GivensForms(IsotropicForms):
    def rate(self):
        return groups.givens_rate(self.family.dim, self.family.sigma)

    def pair_operator(self):
        return groups.givens_pair_operator(self.family.dim, self.family.sigma)

    def far_variance(self, offset, q=None, k=None):
        d = self.family.dim
        q, k = probes(d, q, k)
        op = groups.givens_pair_operator(d, self.family.sigma)
        vec = np.outer(k, k).reshape(-1)
        for _ in range(offset):
            vec = op @ vec
        return d * float(q @ vec.reshape(d, d) @ q)

    def far_variance_curve(self, steps, q=None, k=None):
        q, k = probes(self.family.dim, q, k)
        op = groups.givens_pair_operator(self.family.dim, self.family.sigma)
        return self.family.dim * householder.quadratic_curve(op, q, k, steps)


class LieWalkForms(IsotropicForms):
    def rate(self):
        return groups.lie_walk_rate(self.family.dim, self.family.sigma)

    def pair_operator(self):
        return groups.lie_walk_pair_operator(self.family.dim, self.family.sigma)

    def far_variance(self, offset, q=None, k=None):
        return float(self.far_variance_curve(offset, q, k)[offset])

    def far_variance_curve(self, steps, q=None, k=None):
        q, k = probes(self.family.dim, q, k)
        coefficients = groups.lie_walk_pair_coefficients(self.family.dim, self.family.sigma)
        return groups.isotropic_far_variance_curve(self.family.dim, coefficients, steps, q, k)


#: the built-in families' closed forms, by class (a user family brings its theory through ``moments()``)
CLOSED_FORMS: dict[type, type[ClosedForms]] = {Rope: RopeForms, NoPE: NoPEForms, SO2Accumulated: SO2AccumulatedForms,
                                               Householder: HouseholderForms, Haar: HaarForms, Givens: GivensForms,
                                               LieWalk: LieWalkForms}


def closed_forms(family: Any) -> ClosedForms:
    """The closed forms of ``family`` (exact class match: a subclass may change the law), or the empty base."""
    return CLOSED_FORMS.get(type(family), ClosedForms)(family)


def has_closed_forms(family: Any) -> bool:
    """Whether ``family`` is a built-in with its own closed forms (exact class match), not the empty base."""
    return type(family) in CLOSED_FORMS


def plane_angles(family: Any) -> so2.PlaneAngles:
    """How one step of ``family`` turns its planes (``so2.PlaneAngles``, the argument of ``theory.so2``'s formulas);
    ``NoClosedForm`` for a family that is not a built-in SO(2)-block family."""
    return closed_forms(family).angles()


def mixing_estimable(family: Any) -> bool:
    """Whether the far mass of ``family`` can be estimated as a mixing walk (``farmass.mixing_far_mass``): orthogonal
    steps with a known coherence rate whose transient ends within ``farmass.MAX_TRANSIENT`` lags."""
    try:
        farmass.transient_lags(closed_forms(family).mixing_rate())
    except NoClosedForm:
        return False
    return True
