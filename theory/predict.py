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

Dispatch is by class, not by name: ``CLOSED_FORMS`` (``theory.forms``) maps each built-in family class to a
``ClosedForms`` object (one method per quantity); angle laws carry their own characteristic functions
(``simulations.laws``); any other family gets the moment-operator theory, exact when it defines ``moments()``.

``predict`` raises ``NoClosedForm`` (a ``NotImplementedError``) where there is no closed form (user-defined
families, far mass of token angles and of the Lie walk, ...); ``prediction`` then estimates the
quantity from the moment operators when it can.  Unknown quantities or options raise ``ParamError``.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from accum.simulations.families import make_family
from accum.simulations.montecarlo import ALIBI_SLOPE, MAX_STEPS, S0, check_family
from accum.simulations.params import ParamError, ParamSpec, check_bool

from . import far, farmass, moments, values
from ._common import NoClosedForm, as_sizes, probes
from .forms import closed_forms, mixing_estimable


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
        forms = closed_forms(family)
        controls = transient_controls(forms, farmass.transient_lags(forms.mixing_rate()), options.get("q"), options.get("k"))
        value, se, n, dof = farmass.mixing_far_mass(family, forms.mixing_rate(), options["far_sizes"], options["s0"], rng,
                                                    count, options.get("q"), options.get("k"), options.get("slope", 0.0),
                                                    controls)
        how = "" if controls is None else " with controls"
        return Prediction(_plain(value), _plain(se), f"estimated: closed stationary part + transient from {n} paths{how}",
                          n, dof)
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
    return estimated(quantity, family, rng=rng, samples=samples, **options)


def transient_controls(forms: Any, lags: int, q: Any, k: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """(E x_Delta, E x_Delta^2) for Delta = 1..lags, x = q^T P_Delta k, from the family's coherence and far second moment
    closed forms (the controls of ``farmass.mixing_far_mass``), or None where it has not both."""
    try:
        coherence = np.asarray(forms.coherence(lags, q, k), dtype=float)[1:]
        second = np.asarray(forms.far_variance_curve(lags, q, k), dtype=float)[1:] / forms.family.dim
    except NoClosedForm:
        return None
    return coherence, second


def estimated(quantity: str, family: Any, *, rng: np.random.Generator, samples: int | None = None,
              **options: Any) -> Prediction:
    """``quantity`` for ``family`` from E[A] and E[A (x) A] estimated from ``samples`` single steps drawn with ``rng``
    (``theory.moments``), whatever closed form the family has: the route ``prediction`` takes for a family without
    one, and which ``accum verify`` holds against the closed forms of the built-ins (i.i.d. steps, d <= 32).
    Jackknife standard error over ``moments.GROUPS`` groups (G - 1 degrees of freedom)."""
    family = _resolve(quantity, family, options)
    if quantity not in moments.GENERIC:
        raise moments.no_generic_form(quantity)
    fn = functools.partial(moments.GENERIC[quantity], **options)
    count = moments.check_samples(moments.DEFAULT_SAMPLES if samples is None else samples, int(family.dim))
    first, second, sizes = moments.group_moment_sums(family, count, rng)
    value, se = moments.jackknife_prediction(fn, first, second, sizes)
    return Prediction(_plain(value), _plain(se), f"estimated from moment operators ({count} samples)", count,
                      sizes.size - 1)


def _plain(x: Any) -> Any:
    """0-d arrays as floats, arrays as float arrays."""
    arr = np.asarray(x, dtype=float)
    return float(arr) if arr.ndim == 0 else arr
