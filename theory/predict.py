"""``prediction(quantity, family, *, rng, samples, **options)`` and ``predict(...)``: the theory's value of a
measured quantity.  ``predict`` is the closed-form path (built-in families); ``prediction`` adds, for any family
with i.i.d. steps, the generic theory from the moment operators (``theory.moments``) with its standard error.

Each quantity matches one estimator of ``simulations.estimators`` (same probes, same normalisation), so
``accum verify`` can hold a measurement against it.  Probes default to q = k = m = 1/sqrt(d).

    quantity            options (defaults)                  value
    coherence           steps, q, k                         c(n) = E q^T A_n..A_1 k, n = 0..steps     (steps+1,)
    mean-product-sq     steps                               ||E A_n..A_1||_F^2 / d, n = 0..steps      (steps+1,)
    norm-sq             steps                               E|A_n..A_1 x|^2 / |x|^2, n = 0..steps     (steps+1,)
    onset               eps, max_steps (100000), q, k       n_eps: first crossing of |c(n)/c(0)| <= eps
    window              context, q, k                       W(T) = sum_{Delta<T} (c(Delta)/c(0))^2
    far-variance        offset, q, k                        d E[s^2], s = q^T A_offset..A_1 k (1 for Haar)
    far-mass            far_sizes, s0, slope (0), q, k      E sum_{Delta<=N} exp(s_Delta - s0)        (len,)
    near-weight         far_sizes, s0, slope (0), q, k      1 / (1 + far mass): Jensen lower bound of E w,
                                                            and its value once the far mass concentrates
    near-weight-bound   far_sizes, s0, q, k                 1 / (1 + N exp(-2 s0 |q||k|)) (steps of norm <= 1)
    alibi-floor         far_sizes, s0, slope                1 / (1 + sum_{Delta<=N} e^{-slope Delta})
    far-residual        far_sizes, value_rotation (True), m E|r(N)|^2 / |m|^2                         (len,)

Dispatch is by class, not by name: ``CLOSED_FORMS`` maps each built-in family class to a ``ClosedForms`` object
(one method per quantity); angle laws carry their own characteristic functions (``simulations.laws``); any other
family gets the moment-operator theory, exact when it defines ``moments()``.

``predict`` raises ``NoClosedForm`` (a ``NotImplementedError``) where there is no closed form (user-defined
families, far mass of token angles, the Lie walk's second moment, ...); ``prediction`` then estimates the
quantity from the moment operators when it can.  Unknown quantities or options raise ``ParamError``.
"""

from __future__ import annotations

import functools
import inspect
import math
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable, ClassVar

import numpy as np

from accum.simulations.families import Givens, Haar, Householder, LieWalk, NoPE, Rope, SO2Accumulated, make_family
from accum.simulations.montecarlo import ALIBI_SLOPE, MAX_STEPS, S0, check_family
from accum.simulations.params import ParamError, ParamSpec, check_bool

from . import far, farmass, groups, householder, moments, so2, values, window
from ._common import NoClosedForm, as_sizes, probes

class ClosedForms:
    """Closed forms of one built-in family, one method per quantity; the base class has none (``NoClosedForm``) except
    those that follow from others (onset and window from the coherence curve) or hold for every family of
    norm-bounded steps.  ``CLOSED_FORMS`` maps each built-in class to its forms; any other family goes through the
    moment operators (``prediction``, ``theory.moments``), which is how a new family brings its own theory:
    one class with a ``moments()`` method."""

    def __init__(self, family: Any):
        self.family = family

    def missing(self, what: str) -> NoClosedForm:
        name = f"{type(self.family).__module__}.{type(self.family).__qualname__}"
        if type(self.family) not in CLOSED_FORMS:
            return NoClosedForm(f"{name} is a user-defined family: no closed form for {what} (``prediction`` estimates "
                                "it from the moment operators; `accum check` tests its assumptions)")
        return NoClosedForm(f"{name}: no closed form for {what}")

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

    def far_mass(self, far_sizes: Any, s0: float, slope: float = 0.0, q: Any = None, k: Any = None) -> np.ndarray:
        raise self.missing("the far mass E exp(s0 q^T P k)")

    def far_residual(self, far_sizes: Any, value_rotation: bool = True, m: Any = None) -> np.ndarray:
        raise self.missing("the far residual")

    def mixing_rate(self) -> float:
        """The slowest |eigenvalue| of E[A] of orthogonal steps whose walk on the sphere mixes: the rate at which the
        far mass's estimated transient decays (``farmass.mixing_far_mass``)."""
        raise self.missing("a mixing estimate of the far mass (orthogonal Givens, Lie-walk or householder(beta=2) "
                           "steps only)")


class ModuleForms(ClosedForms):
    """Forms that a theory module states as functions of the family: ``module.coherence(family, n, q, k)`` and
    ``module.mean_product_sq(family, n)`` (``theory.so2``, ``theory.householder``)."""

    module: ClassVar[ModuleType]

    def coherence(self, steps, q=None, k=None):
        return self.module.coherence(self.family, steps, q, k)

    def mean_product_sq(self, steps):
        return self.module.mean_product_sq(self.family, steps)


class SO2Forms(ModuleForms):
    """rope, nope and so2-accumulated: everything from the path characteristic (``theory.so2``)."""

    module = so2

    def norm_sq(self, steps):
        return np.ones(steps + 1)  # rotations

    def onset(self, eps, max_steps=100_000, q=None, k=None):
        fam, law = self.family, self.family.angle_law()
        if law is not None and law.iid and q is None and k is None:
            phi = so2.plane_characteristic(fam)
            if np.allclose(phi, phi[0], rtol=0, atol=0) and np.isreal(phi[0]):
                return window.onset(phi[0].real, eps)  # one real rate on every plane
        return super().onset(eps, max_steps, q, k)

    def far_variance(self, offset, q=None, k=None):
        q, k = probes(self.family.dim, q, k)
        return self.family.dim * so2.far_second_moment(self.family, offset, q, k)

    def far_mass(self, far_sizes, s0, slope=0.0, q=None, k=None):
        if so2.token_law(self.family) is not None:
            return farmass.token_far_mass(self.family, far_sizes, s0, q, k, slope)
        return so2.far_mass(self.family, as_sizes(far_sizes), s0, q, k, slope)

    def far_residual(self, far_sizes, value_rotation=True, m=None):
        return values.family_residual_sq(self.family, far_sizes, m=m, value_rotation=value_rotation)


class HouseholderForms(ModuleForms):
    """I - beta w w^T with w on the sphere (scalar rates) or from a token table (exact finite averages;
    ``theory.householder``)."""

    module = householder

    def norm_sq(self, steps):
        fam = self.family
        if fam.w == "sphere":
            return groups.family_norm_rate(fam) ** np.arange(steps + 1, dtype=float)
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
            return window.onset(groups.family_rate(self.family), eps)
        return super().onset(eps, max_steps, q, k)

    def far_variance(self, offset, q=None, k=None):
        q, k = probes(self.family.dim, q, k)
        return self.family.dim * householder.family_far_second_moment(self.family, offset, q, k)

    def far_mass(self, far_sizes, s0, slope=0.0, q=None, k=None):
        if self.family.w == "token" or self.family.dim < 3:
            raise self.missing("the far mass of token directions or d < 3")
        return farmass.householder_far_mass(self.family, far_sizes, s0, q, k, slope)

    def far_residual(self, far_sizes, value_rotation=True, m=None):
        if self.family.w == "token":
            raise self.missing("the far residual of token directions")
        return values.family_residual_sq(self.family, far_sizes, m=m, value_rotation=value_rotation)

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

    def coherence(self, steps, q=None, k=None):
        q, k = probes(self.family.dim, q, k)
        rho = groups.family_rate(self.family)
        return rho ** np.arange(steps + 1, dtype=float) * float(q @ k)  # 0.0 ** 0 = 1: c(0) = q.k for Haar too

    def mean_product_sq(self, steps):
        rho = groups.family_rate(self.family)
        return np.array([1.0] + [rho ** (2 * n) for n in range(1, steps + 1)])

    def norm_sq(self, steps):
        return np.ones(steps + 1)

    def onset(self, eps, max_steps=100_000, q=None, k=None):
        return window.onset(groups.family_rate(self.family), eps)

    def far_residual(self, far_sizes, value_rotation=True, m=None):
        return values.family_residual_sq(self.family, far_sizes, m=m, value_rotation=value_rotation)

    def mixing_rate(self):
        return groups.family_rate(self.family)


class HaarForms(IsotropicForms):
    def far_variance(self, offset, q=None, k=None):
        d = self.family.dim
        q, k = probes(d, q, k)
        if offset == 0 or (d == 1 and self.family.group == "SO"):
            return d * float(q @ k) ** 2
        return float(q @ q) * float(k @ k)

    def far_mass(self, far_sizes, s0, slope=0.0, q=None, k=None):
        fam, sizes = self.family, as_sizes(far_sizes)
        q, k = probes(fam.dim, q, k)
        if fam.dim == 1 and fam.group == "SO":
            return np.exp(s0 * float(q @ k) - s0) * far.alibi_far_mass(sizes, slope)
        return far.haar_far_mass(sizes, s0, fam.dim, float(np.linalg.norm(q) * np.linalg.norm(k)), slope)


class GivensForms(IsotropicForms):
    def far_variance(self, offset, q=None, k=None):
        d = self.family.dim
        q, k = probes(d, q, k)
        op = groups.givens_pair_operator(d, self.family.sigma)
        vec = np.outer(k, k).reshape(-1)
        for _ in range(offset):
            vec = op @ vec
        return d * float(q @ vec.reshape(d, d) @ q)


#: the built-in families' closed forms, by class (a user family brings its theory through ``moments()``)
CLOSED_FORMS: dict[type, type[ClosedForms]] = {Rope: SO2Forms, NoPE: SO2Forms, SO2Accumulated: SO2Forms,
                                               Householder: HouseholderForms, Haar: HaarForms, Givens: GivensForms,
                                               LieWalk: IsotropicForms}


def closed_forms(family: Any) -> ClosedForms:
    """The closed forms of ``family`` (exact class match: a subclass may change the law), or the empty base."""
    return CLOSED_FORMS.get(type(family), ClosedForms)(family)


def mixing_estimable(family: Any) -> bool:
    """Whether the far mass of ``family`` can be estimated as a mixing walk (``farmass.mixing_far_mass``): orthogonal
    steps with a known coherence rate whose transient ends within ``farmass.MAX_TRANSIENT`` lags."""
    try:
        farmass.transient_lags(closed_forms(family).mixing_rate())
    except NoClosedForm:
        return False
    return True


def coherence(family: Any, steps: int, q: Any = None, k: Any = None) -> np.ndarray:
    return closed_forms(family).coherence(steps, q, k)


def mean_product_sq(family: Any, steps: int) -> np.ndarray:
    return closed_forms(family).mean_product_sq(steps)


def norm_sq(family: Any, steps: int) -> np.ndarray:
    return closed_forms(family).norm_sq(steps)


def onset(family: Any, eps: float, max_steps: int = 100_000, q: Any = None, k: Any = None) -> float:
    return closed_forms(family).onset(eps, max_steps, q, k)


def window_width(family: Any, context: int, q: Any = None, k: Any = None) -> float:
    return closed_forms(family).window(context, q, k)


def far_variance(family: Any, offset: int, q: Any = None, k: Any = None) -> float:
    """d E[s^2] for s = q^T A_offset ... A_1 k."""
    return closed_forms(family).far_variance(offset, q, k)


def far_mass(family: Any, far_sizes: Any, s0: float, slope: float = 0.0, q: Any = None, k: Any = None) -> np.ndarray:
    return closed_forms(family).far_mass(far_sizes, s0, slope, q, k)


def near_weight(family: Any, far_sizes: Any, s0: float, slope: float = 0.0, q: Any = None, k: Any = None) -> np.ndarray:
    return far.near_weight_from_mass(far_mass(family, far_sizes, s0, slope, q, k))


def near_weight_bound(family: Any, far_sizes: Any, s0: float, q: Any = None, k: Any = None) -> np.ndarray:
    """1 / (1 + N exp(-2 s0 |q||k|)): holds for every family whose steps have operator norm <= 1."""
    q, k = probes(family.dim, q, k)
    return far.lower_bound(as_sizes(far_sizes), s0 * float(np.linalg.norm(q) * np.linalg.norm(k)))


def alibi_floor(family: Any, far_sizes: Any, s0: float, slope: float) -> np.ndarray:
    """1 / (1 + sum_{Delta<=N} e^{-slope Delta}): every family whose steps have operator norm <= 1."""
    return far.alibi_floor(as_sizes(far_sizes), slope)


def far_residual(family: Any, far_sizes: Any, value_rotation: bool = True, m: Any = None) -> np.ndarray:
    if not value_rotation:
        return values.residual_sq_without_rotation(as_sizes(far_sizes))
    return closed_forms(family).far_residual(far_sizes, value_rotation, m)


QUANTITIES: dict[str, Callable[..., Any]] = {
    "coherence": coherence,
    "mean-product-sq": mean_product_sq,
    "norm-sq": norm_sq,
    "onset": onset,
    "window": window_width,
    "far-variance": far_variance,
    "far-mass": far_mass,
    "near-weight": near_weight,
    "near-weight-bound": near_weight_bound,
    "alibi-floor": alibi_floor,
    "far-residual": far_residual,
}


def predict(quantity: str, family: Any, **options: Any) -> Any:
    """The theory's prediction of ``quantity`` for ``family`` (a family object or a built-in name).

    See the module docstring for quantities and options.  Raises ``NoClosedForm`` where the theory has no
    closed form for this family, ``ValueError`` for an unknown quantity or option.
    """
    family = _resolve(quantity, family, options)
    return QUANTITIES[quantity](family, **options)


#: the ranges of the numeric options, with the estimators' limits (``simulations.estimators``)
OPTION_SPECS: dict[str, ParamSpec] = {spec.name: spec for spec in (
    ParamSpec("steps", "int", 64, "last step n of a curve", lo=0, hi=MAX_STEPS),
    ParamSpec("max_steps", "int", 100_000, "steps searched for the onset", lo=1, hi=MAX_STEPS),
    ParamSpec("context", "int", 256, "context length T", lo=1, hi=MAX_STEPS),
    ParamSpec("offset", "int", 256, "far distance Delta", lo=0, hi=MAX_STEPS),
    ParamSpec("eps", "float", 0.05, "coherence threshold", lo=0.0, hi=1.0, lo_open=True, hi_open=True),
    S0,
    ParamSpec("slope", "float", 0.0, ALIBI_SLOPE.doc, lo=ALIBI_SLOPE.lo, hi=ALIBI_SLOPE.hi),
)}


def _check_options(options: dict) -> None:
    """Validate in place the numeric options named in ``OPTION_SPECS`` (``ParamError`` naming the option and its
    range) and ``value_rotation`` (a bool); probes and far sizes are checked where they are read."""
    for name, spec in OPTION_SPECS.items():
        if name in options:
            options[name] = spec.validate(options[name])
    if "value_rotation" in options:
        check_bool("value_rotation", options["value_rotation"])


def _resolve(quantity: str, family: Any, options: dict) -> Any:
    """The family object (built from a name; anything else must be a ``Family``), after checking the quantity,
    that its options bind and their ranges (``_check_options``)."""
    if quantity not in QUANTITIES:
        raise ParamError(f"quantity {quantity!r} is unknown; allowed: {', '.join(QUANTITIES)}")
    family = check_family(make_family(family) if isinstance(family, str) else family)
    try:
        inspect.signature(QUANTITIES[quantity]).bind(family, **options)
    except TypeError as err:
        raise ParamError(f"predict({quantity!r}): bad options {sorted(options)} ({err})") from None
    _check_options(options)
    return family


@dataclass(frozen=True)
class Prediction:
    """The theory's value of a quantity with its own uncertainty.

    value: float or array; stderr: same shape (zeros for a closed form); source: "closed form" or
    "estimated from moment operators (M samples)"; samples: M (0 for a closed form); dof: degrees of freedom
    of the standard error (jackknife groups - 1; 0 for a closed form).
    """

    value: Any
    stderr: Any
    source: str
    samples: int = 0
    dof: int = 0


def prediction(quantity: str, family: Any, *, rng: np.random.Generator | None = None, samples: int | None = None,
               **options: Any) -> Prediction:
    """``quantity`` for ``family``: its closed form where one exists, else the generic moment theory.

    Order: (1) a built-in closed form (``predict``); (2) the family's exact moments, if it defines
    ``moments() -> (E[A], E[A_ij A_kl])`` (``theory.moments``; still a closed form); (3) for i.i.d. steps
    (``family.iid_steps``, True unless the family says otherwise), E[A] and E[A (x) A] estimated from
    ``samples`` (default ``moments.DEFAULT_SAMPLES``) single steps drawn with ``rng`` (required then), with a
    jackknife standard error over ``moments.GROUPS`` groups.  Quantities with no form in the moment operators
    (far mass, near weight) and dependent steps without a closed form raise ``NoClosedForm``.
    """
    family = _resolve(quantity, family, options)
    try:
        value = QUANTITIES[quantity](family, **options)
    except NoClosedForm as err:
        reason = str(err)
    else:
        return Prediction(_plain(value), _plain(np.zeros_like(np.asarray(value, dtype=float))), "closed form")
    if quantity == "far-mass" and mixing_estimable(family):
        if rng is None:
            raise ParamError("rng: required to estimate the far mass's transient (no closed form: " + reason + ")")
        count = moments.check_samples(moments.DEFAULT_SAMPLES if samples is None else samples, 1)
        value, se, n = farmass.mixing_far_mass(family, closed_forms(family).mixing_rate(), options["far_sizes"],
                                               options["s0"], rng, count,
                                               options.get("q"), options.get("k"), options.get("slope", 0.0))
        return Prediction(_plain(value), _plain(se), f"estimated: closed stationary part + transient from {n} paths",
                          n, n - 1)
    if quantity not in moments.GENERIC:
        raise moments.no_generic_form(quantity)
    fn = functools.partial(moments.GENERIC[quantity], **options)
    exact = moments.exact_moments(family)
    if exact is not None:
        value = fn(exact)
        return Prediction(_plain(value), _plain(np.zeros_like(np.asarray(value, dtype=float))),
                          "closed form (exact moment operators)")
    if not getattr(family, "iid_steps", True):
        raise NoClosedForm(f"{reason}; the steps are not i.i.d., so the moment operators do not determine it")
    if rng is None:
        raise ParamError("rng: required to estimate the moment operators (no closed form: " + reason + ")")
    count = moments.check_samples(moments.DEFAULT_SAMPLES if samples is None else samples, int(family.dim))
    first, second, sizes = moments.group_moment_sums(family, count, rng)
    value, se = moments.jackknife_prediction(fn, first, second, sizes)
    return Prediction(_plain(value), _plain(se), f"estimated from moment operators ({count} samples)", count,
                      sizes.size - 1)


def _plain(x: Any) -> Any:
    """0-d arrays as floats, arrays as float arrays."""
    arr = np.asarray(x, dtype=float)
    return float(arr) if arr.ndim == 0 else arr
