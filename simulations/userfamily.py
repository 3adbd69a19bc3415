"""Loading and checking a user-defined family (``--family package.module:ClassName``).

``load_class`` imports the class with the current folder on the import path (a ``mymod.py`` beside the
user works without PYTHONPATH); ``families.make_family`` uses it.  ``check_sample``, called before any work
by ``measure.plan_measurement`` and ``accum check`` (in the process that runs the job: a sweep plans in its
driving process without drawing from user code), draws one small sample, ``sample(rng, 3, 2)`` (three steps,
two sequences: distinct sizes, so a swapped or off-by-one shape shows) and refuses, with one
``ParamError`` line, anything the estimators would silently misread:

* the result is not a step form (``AngleSteps``, ``HouseholderSteps``, ``DenseSteps``), e.g. a plain ndarray;
* an array has the wrong shape for (batch, n_steps, d): theta (2, 3, d/2), w (2, 3, d) and beta (2, 3),
  a (2, 3, d, d), with d the family's ``dim``;
* an array is not real floating point (complex, integer, object), or holds NaN or an infinity.

It also measures what the theory assumes and returns it (``SampleReport``): the orthogonality error
max |A^T A - I| and the largest singular value max ||A||_2 over the sample (orthogonal: 1; contractive: <= 1).
"""

from __future__ import annotations

import contextlib
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
        with cwd_on_path():
            module = importlib.import_module(module_name)
    except ImportError as err:
        raise ParamError(f"--family {name!r}: cannot import module {module_name!r} ({err})") from None
    except Exception as err:  # the user's module failed while running: one line, not its traceback
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


def _check_array(name: str, label: str, x: Any, shape: tuple[int, ...]) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise ParamError(f"family {name}: {label} is a {type(x).__name__}, not a numpy array")
    if np.iscomplexobj(x) or not np.issubdtype(x.dtype, np.floating):
        raise ParamError(f"family {name}: {label} has dtype {x.dtype}; a real floating dtype (float64) is required")
    if x.shape != shape:
        raise ParamError(f"family {name}: sample(rng, n_steps={CHECK_STEPS}, batch={CHECK_BATCH}) gave {label} of "
                         f"shape {x.shape}; expected {shape} (batch, n_steps, ...) for dim = {shape_dim(shape, label)}")
    bad = ~np.isfinite(x)
    if bad.any():
        raise ParamError(f"family {name}: {label} holds {int(bad.sum())} non-finite value(s) (NaN or inf) "
                         f"of {x.size} in its first sample")
    return x.astype(np.float64, copy=False)


def shape_dim(shape: tuple[int, ...], label: str) -> int:
    """The d an expected shape encodes (theta's last axis is d/2)."""
    return 2 * shape[-1] if label == "theta" else shape[-1]


def check_sample(family: Any, name: str) -> SampleReport:
    """Draw ``family.sample(default_rng(0), 3, 2)`` and validate it (module docstring); returns the report."""
    d = check_int(f"family {name}: dim", getattr(family, "dim", None), 1)
    try:
        steps = family.sample(np.random.default_rng(0), CHECK_STEPS, CHECK_BATCH)
    except Exception as err:  # user code: one line naming what failed
        raise ParamError(f"family {name}: sample(rng, {CHECK_STEPS}, {CHECK_BATCH}) raised "
                         f"{type(err).__name__}: {err}") from None
    if not isinstance(steps, FORMS):
        raise ParamError(f"family {name}: sample() returned a {type(steps).__name__}; it must return a step form: "
                         "AngleSteps, HouseholderSteps or DenseSteps (accum.simulations.steps)")
    lead = (CHECK_BATCH, CHECK_STEPS)
    if isinstance(steps, AngleSteps):
        if d % 2:
            raise ParamError(f"family {name}: AngleSteps need an even dim (SO(2) planes), got dim = {d}")
        _check_array(name, "theta", steps.theta, lead + (d // 2,))
        return SampleReport("AngleSteps", 0.0, 1.0)
    if isinstance(steps, HouseholderSteps):
        w = _check_array(name, "w", steps.w, lead + (d,))
        beta = _check_array(name, "beta", steps.beta, lead)
        # A = I - b w w^T: singular values 1 (d - 1 times) and |1 - b |w|^2|; A^T A - I = b (b |w|^2 - 2) w w^T
        sq = np.sum(w * w, axis=-1)
        ortho = float(np.max(np.abs(beta * (beta * sq - 2.0)) * np.max(w * w, axis=-1)))
        top = float(max(1.0, np.max(np.abs(1.0 - beta * sq)))) if d > 1 else float(np.max(np.abs(1.0 - beta * sq)))
        return SampleReport("HouseholderSteps", ortho, top)
    a = _check_array(name, "a", steps.a, lead + (d, d))
    gram = np.swapaxes(a, -1, -2) @ a
    ortho = float(np.max(np.abs(gram - np.eye(d))))
    if d <= SVD_DIM:
        top = float(np.sqrt(np.max(np.linalg.eigvalsh(gram))))
    else:  # ||A||_2^2 = lambda_max(A^T A) <= 1 + ||A^T A - I||_2 <= 1 + d max|A^T A - I|
        top = float(np.sqrt(1.0 + d * ortho))
    return SampleReport("DenseSteps", ortho, top)
