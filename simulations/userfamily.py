"""Loading and checking a user-defined family (``--family package.module:ClassName``).

``load_class`` imports the class with the current folder on the import path (a ``mymod.py`` beside the
user works without PYTHONPATH); ``families.make_family`` uses it and hands the engine a ``CheckedFamily``, whose
every draw goes through ``sample_checked``.  That refuses, with one ``ParamError`` line, a draw that raises (the
user's exception, or SystemExit, named in the line) and anything the estimators would silently misread:

* the result is not a step form (``AngleSteps``, ``HouseholderSteps``, ``DenseSteps``), e.g. a plain ndarray;
* an array has the wrong shape for (batch, n_steps, d): theta (2, 3, d/2), w (2, 3, d) and beta (2, 3),
  a (2, 3, d, d), with d the family's ``dim``;
* an array is not real floating point (complex, integer, object), holds NaN or an infinity, an entry above
  MAX_ENTRY (whose square overflows), or an angle above MAX_ANGLE (angles act modulo 2 pi: float64 keeps no
  precision in the running sums of larger ones).

What the user's code prints (in ``sample``, its module's import, any method the engine calls) goes to stderr, so
stdout carries only the command's own output (the JSON line of ``accum measure``).

``check_sample``, called before any work by ``measure.plan_measurement``, ``accum check``, ``verify`` and
``figures``, draws one small sample that way, ``sample(rng, 3, 2)`` (three steps, two sequences: distinct sizes,
so a swapped or off-by-one shape shows).

It also measures what the theory assumes and returns it (``SampleReport``): the orthogonality error
max |A^T A - I| and the largest singular value max ||A||_2 over the sample (orthogonal: 1; contractive: <= 1).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import re
import sys
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from .params import ParamError, check_int
from .steps import AngleSteps, DenseSteps, HouseholderSteps

FORMS = (AngleSteps, HouseholderSteps, DenseSteps)
CHECK_STEPS, CHECK_BATCH = 3, 2
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
#: above this d the largest singular value is bounded through the orthogonality error instead of computed
SVD_DIM = 512


def user_prints_to_stderr() -> contextlib.AbstractContextManager:
    """The block's prints on stderr: a user family's output never mixes with a command's stdout."""
    return contextlib.redirect_stdout(sys.stderr)


@contextlib.contextmanager
def cwd_on_path() -> Iterator[None]:
    """The current folder first on ``sys.path`` while the block runs (as ``python -c`` would have it)."""
    here = os.getcwd()
    added = here not in sys.path
    if added:
        sys.path.insert(0, here)
    try:
        yield
    finally:
        if added and here in sys.path:
            sys.path.remove(here)


def load_class(name: str) -> type:
    """The class named by ``"package.module:ClassName"``; ``ParamError`` for a malformed name, a module that
    cannot be imported (or fails while importing), a missing attribute, or an attribute that is not a class."""
    module_name, _, cls_name = name.partition(":")
    if not _DOTTED.fullmatch(module_name) or not _DOTTED.fullmatch(cls_name):
        raise ParamError(f"--family {name!r}: expected package.module:ClassName (two dotted Python names)")
    try:
        with cwd_on_path(), user_prints_to_stderr():
            module = importlib.import_module(module_name)
    except ImportError as err:
        raise ParamError(f"--family {name!r}: cannot import module {module_name!r} ({err})") from None
    except (Exception, SystemExit) as err:  # the user's module failed while running: one line, not its traceback
        raise ParamError(f"--family {name!r}: importing {module_name!r} raised {type(err).__name__}: {err}") from None
    cls: Any = module
    for part in cls_name.split("."):
        cls = getattr(cls, part, None)
        if cls is None:
            raise ParamError(f"--family {name!r}: module {module_name!r} has no {cls_name!r}")
    if not isinstance(cls, type):
        raise ParamError(f"--family {name!r}: {cls_name!r} is not a class but a {type(cls).__name__}")
    return cls


@dataclass(frozen=True)
class SampleReport:
    """What the first sample of a user family showed: its step form, max |A^T A - I| and max ||A||_2."""

    form: str
    orthogonality_error: float
    largest_singular_value: float

    def to_dict(self) -> dict:
        return {"form": self.form, "orthogonality_error": self.orthogonality_error,
                "largest_singular_value": self.largest_singular_value}

    def line(self, name: str) -> str:
        kind = ("orthogonal" if self.orthogonality_error <= 1e-8 else
                "contractive" if self.largest_singular_value <= 1 + 1e-8 else "EXPANDING (products may overflow)")
        return (f"family {name}: {self.form}, max |A^T A - I| = {self.orthogonality_error:.2g}, "
                f"max ||A||_2 = {self.largest_singular_value:.6g}: {kind}")


#: largest |entry| of a step's matrix, vector or factor: its square (in A^T A, |w|^2) must stay finite in float64
MAX_ENTRY = 1e150
#: largest |angle| of angle steps (radians), the built-in laws' bound on their location mu
MAX_ANGLE = 1e6


def _check_array(name: str, call: str, label: str, x: Any, shape: tuple[int, ...]) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise ParamError(f"family {name}: {label} is a {type(x).__name__}, not a numpy array")
    if np.iscomplexobj(x) or not np.issubdtype(x.dtype, np.floating):
        raise ParamError(f"family {name}: {label} has dtype {x.dtype}; a real floating dtype (float64) is required")
    if x.shape != shape:
        raise ParamError(f"family {name}: {call} gave {label} of shape {x.shape}; expected {shape} "
                         f"(batch, n_steps, ...) for dim = {shape_dim(shape, label)}")
    bad = ~np.isfinite(x)
    if bad.any():
        raise ParamError(f"family {name}: {call} gave {label} with {int(bad.sum())} non-finite value(s) (NaN or inf) "
                         f"of {x.size}")
    top = float(np.max(np.abs(x), initial=0.0))
    if label == "theta" and top > MAX_ANGLE:
        raise ParamError(f"family {name}: {call} gave {label} with angles up to {top:.3g}; |angles| must be at most "
                         f"{MAX_ANGLE:g} radians, the built-in laws' bound (angles act modulo 2 pi: reduce them; the running sums "
                         "of huge angles lose their fraction of a turn)")
    if label != "theta" and top > MAX_ENTRY:
        raise ParamError(f"family {name}: {call} gave {label} with entries up to {top:.3g}; |entries| must be at "
                         f"most {MAX_ENTRY:g} (their squares overflow float64)")
    return x.astype(np.float64, copy=False)


def shape_dim(shape: tuple[int, ...], label: str) -> int:
    """The d an expected shape encodes (theta's last axis is d/2)."""
    return 2 * shape[-1] if label == "theta" else shape[-1]


def sample_checked(family: Any, name: str, rng: np.random.Generator, n_steps: int, batch: int) -> Any:
    """``family.sample(rng, n_steps, batch)``, refused with one ``ParamError`` line (module docstring) when the
    user's code raises (SystemExit included) or returns anything but a step form of shape (batch, n_steps, ...)
    for the family's dim with finite real entries (|entry| <= MAX_ENTRY)."""
    if isinstance(family, CheckedFamily):  # check_sample may be handed the engine's view of the family
        family = family.user_family
    call = f"sample(rng, n_steps={n_steps}, batch={batch})"
    d = check_int(f"family {name}: dim", getattr(family, "dim", None), 1)
    try:
        with user_prints_to_stderr():
            steps = family.sample(rng, n_steps, batch)
    except (Exception, SystemExit) as err:  # user code: one line naming what failed
        raise ParamError(f"family {name}: {call} raised {type(err).__name__}: {err}") from None
    if not isinstance(steps, FORMS):  # acceptance of the result as one of the accepted forms, not a dispatch
        raise ParamError(f"family {name}: sample() returned a {type(steps).__name__}; it must return a step form: "
                         "AngleSteps, HouseholderSteps or DenseSteps (accum.simulations.steps)")
    if steps.MAX_DIM is not None and d > steps.MAX_DIM:
        raise ParamError(f"family {name}: dim = {d}: {type(steps).__name__} are drawn at d <= {steps.MAX_DIM} (each "
                         "step's d x d product is one numpy call of seconds, which Ctrl-C could not interrupt)")
    try:
        shapes = steps.array_shapes((batch, n_steps), d)
    except ValueError as err:  # a dim the form cannot hold
        raise ParamError(f"family {name}: {err}") from None
    for label, shape in shapes.items():
        _check_array(name, call, label, getattr(steps, label), shape)
    return steps


class CheckedFamily:
    """A user family as the engine sees it (``families.make_family`` builds it for ``module:Class`` names): every
    ``sample`` goes through ``sample_checked``, so a later draw that raises, changes shape or goes non-finite is one
    ``ParamError`` line, never a traceback or a silently misread result.  Other attributes are the user's
    (``user_family``); ``families.family_name`` / ``family_params`` read the user's object."""

    __slots__ = ("user_family", "checked_name")

    def __init__(self, user_family: Any, checked_name: str) -> None:
        self.user_family, self.checked_name = user_family, checked_name

    @property
    def dim(self) -> int:
        return self.user_family.dim

    def sample(self, rng: np.random.Generator, n_steps: int, batch: int) -> Any:
        return sample_checked(self.user_family, self.checked_name, rng, n_steps, batch)

    def __getattr__(self, attr: str) -> Any:  # only called for attributes not found above
        if attr.startswith("__") or attr in CheckedFamily.__slots__:
            raise AttributeError(attr)
        value = getattr(self.user_family, attr)
        return quiet_method(value) if callable(value) and not isinstance(value, type) else value

    def __getstate__(self) -> tuple:
        return self.user_family, self.checked_name

    def __setstate__(self, state: tuple) -> None:
        self.user_family, self.checked_name = state

    def __repr__(self) -> str:
        return repr(self.user_family)


def quiet_method(method: Any) -> Any:
    """``method`` of a user family with its prints sent to stderr (``user_prints_to_stderr``)."""
    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        with user_prints_to_stderr():
            return method(*args, **kwargs)

    return call


def first_sample(family: Any, name: str) -> Any:
    """``family.sample(default_rng(0), 3, 2)`` drawn through ``sample_checked`` (module docstring)."""
    return sample_checked(family, name, np.random.default_rng(0), CHECK_STEPS, CHECK_BATCH)


def sample_report(steps: Any) -> SampleReport:
    """What the theory assumes, measured on checked steps by their form (``Steps.sample_report``)."""
    return SampleReport(type(steps).__name__, *steps.sample_report(SVD_DIM))


def check_sample(family: Any, name: str) -> SampleReport:
    """Draw the family's ``first_sample`` and measure what the theory assumes; returns the report."""
    return sample_report(first_sample(family, name))
