"""A user-defined family (``--family package.module:ClassName``): where its module resolves, how its code runs, and
what is checked of what that code returns.

**Where its module resolves.**  ``load_class`` imports the class with the current folder first on the import path
(a ``mymod.py`` beside the user works without PYTHONPATH, as ``python -c`` would have it).  A worker of the job
runner (``simulations.runner``: a local process pool or a Dask worker) resolves it the same way: every job carries
the parent's ``userpath.user_module_folders`` and the worker puts them on its import path before it reads the job
(``userpath.resolve_user_modules_from``), so a family named by a string (a sweep job) and a pickled ``CheckedFamily`` (a
verify check) both import in the worker.  A Dask worker on another machine needs the folder at the same path there.

**How its code runs.**  ``families.make_family`` hands the engine a ``CheckedFamily`` (``CheckedFamily.build``), and
every piece of user code -- the module's import, the constructor, ``dim``, ``sample``, any other attribute or method
the engine reads, pickling for a worker -- runs through ``call_user``:

* its output goes to stderr, so stdout carries only the command's own output (the JSON line of ``accum measure``):
  ``print``, ``sys.stdout``, ``sys.__stdout__`` and ``os.write(1, ...)`` alike (``user_output_on_stderr``); closing
  its ``sys.stdout`` closes nothing of the process;
* any exception it raises (``SystemExit``, ``GeneratorExit`` and every other ``BaseException`` included) is one
  ``ParamError`` line naming the family and what was called; only ``KeyboardInterrupt`` (Ctrl-C, SIGTERM: ``INTERRUPTS``)
  passes through, so an interrupt stays an interrupt;
* an attribute is the family's only where its class or instance has it (``inspect.getattr_static``): a catch-all
  ``__getattr__`` does not make every optional method of the engine appear; the optional ones the engine reads must
  be what ``CAPABILITIES`` says (``moments`` a method, ``iid_steps`` True or False, ...).

**What is checked.**  Every draw goes through ``check_steps``, which refuses with one line anything the estimators
would silently misread:

* the result is not a step form (``AngleSteps``, ``HouseholderSteps``, ``DenseSteps``), e.g. a plain ndarray;
* an array has the wrong shape for (batch, n_steps, d): theta (2, 3, d/2), w (2, 3, d) and beta (2, 3),
  a (2, 3, d, d), with d the family's ``dim``;
* an array is not real floating point (complex, integer, object), holds NaN or an infinity, an entry above
  MAX_ENTRY (whose square overflows), or an angle above MAX_ANGLE (angles act modulo 2 pi: float64 keeps no
  precision in the running sums of larger ones).

``CheckedFamily.build`` also draws ``sample(default_rng(0), 3, 2)`` twice (three steps, two sequences: distinct
sizes, so a swapped or off-by-one shape shows) and refuses a family whose two draws differ: its draws do not come
from ``rng`` alone, so no saved result of it could be reproduced (``accum measure --from``).  ``check_sample``, called
before any work by ``accum check``, ``verify`` and ``figures`` (the commands that use the theory), checks the first
sample and, for a family that states its exact ``moments()``, their shapes (``check_moments``) before any Monte Carlo.

It also measures what the theory assumes and returns it (``SampleReport``): the orthogonality error
max |A^T A - I| and the largest singular value max ||A||_2 over the sample (orthogonal: 1; contractive: <= 1).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
import io
import os
import pickle
import re
import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from .params import ParamError, check_int
from .userpath import folders_first_on_path, user_module_folders
from .steps import AngleSteps, DenseSteps, HouseholderSteps

FORMS = (AngleSteps, HouseholderSteps, DenseSteps)
CHECK_STEPS, CHECK_BATCH = 3, 2
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
#: above this d the largest singular value is bounded through the orthogonality error instead of computed
SVD_DIM = 512
#: what user code may raise that is not the family's failure but the user's interrupt (``accum.runtime``: SIGINT and
#: SIGTERM raise KeyboardInterrupt); everything else it raises is one line naming the family (``call_user``)
INTERRUPTS = (KeyboardInterrupt,)
#: the optional attributes the engine reads from any family, and what each must be when a family has it
CAPABILITIES = {"moments": "a method", "angle_law": "a method", "torch_angle_sampler": "a method",
                "iid_steps": "True or False"}
#: longest message of a user's exception quoted in the one line
MESSAGE_CHARS = 300


# --- the class behind a module:Class name ----------------------------------------------------------------------

def load_class(name: str) -> type:
    """The class named by ``"package.module:ClassName"``; ``ParamError`` for a malformed name, a module that
    cannot be imported (or fails while importing), a missing attribute, or an attribute that is not a class."""
    module_name, _, cls_name = name.partition(":")
    if not _DOTTED.fullmatch(module_name) or not _DOTTED.fullmatch(cls_name):
        raise ParamError(f"--family {name!r}: expected package.module:ClassName (two dotted Python names)")
    try:
        with folders_first_on_path(user_module_folders()), user_output_on_stderr():
            module = importlib.import_module(module_name)
    except ImportError as err:
        raise ParamError(f"--family {name!r}: cannot import module {module_name!r} ({message_of(err)})") from None
    except INTERRUPTS:
        raise
    except BaseException as err:  # the user's module failed while running: one line, not its traceback
        raise ParamError(f"--family {name!r}: importing {module_name!r} raised {described(err)}") from None
    cls: Any = module
    for part in cls_name.split("."):
        cls = call_user(name, f"reading {part!r} of {module_name!r}", getattr, cls, part, None)
        if cls is None:
            raise ParamError(f"--family {name!r}: module {module_name!r} has no {cls_name!r}")
    if not isinstance(cls, type):
        raise ParamError(f"--family {name!r}: {cls_name!r} is not a class but a {type(cls).__name__}")
    return cls


# --- how the user's code runs ---------------------------------------------------------------------------------------

class StdoutView(io.TextIOBase):
    """What user code sees as ``sys.stdout`` (and ``sys.__stdout__``): text written to it goes to ``target`` (the
    process's stderr); closing it closes this view only."""

    def __init__(self, target: Any) -> None:
        super().__init__()
        self.target = target

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if self.closed:
            raise ValueError("I/O operation on closed file.")
        return self.target.write(text)

    def flush(self) -> None:
        if not self.closed:
            self.target.flush()

    def fileno(self) -> int:
        return self.target.fileno()


#: fd 1 is one per process: a thread that runs user code holds this while fd 1 points at stderr (reentrant: user
#: code that runs user code nests)
_STDOUT_LOCK = threading.RLock()


def _flush(streams: Iterable[Any]) -> None:
    for stream in streams:
        with contextlib.suppress(OSError, ValueError, AttributeError):  # closed, or not a stream: nothing to flush
            stream.flush()


def _point_fd1_at_stderr() -> int | None:
    """fd 1 made a copy of fd 2; returns a copy of what fd 1 was (None, and nothing changed, where either is closed)."""
    try:
        saved = os.dup(1)
    except OSError:
        return None
    try:
        os.dup2(2, 1)
    except OSError:
        os.close(saved)
        return None
    return saved


@contextlib.contextmanager
def user_output_on_stderr() -> Iterator[None]:
    """Run the block (user code) with everything it writes to stdout on stderr instead.

    The command's own buffered output is flushed first; then fd 1 is a copy of fd 2 (``os.write(1, ...)``, C code)
    and ``sys.stdout`` / ``sys.__stdout__`` a ``StdoutView`` of ``sys.stderr``.  After it, streams the block
    wrote to through an older reference are flushed while fd 1 still points at stderr, then everything is restored."""
    with _STDOUT_LOCK:
        saved, saved_fd = (sys.stdout, sys.__stdout__), None
        try:  # set up inside the try: an interrupt meanwhile still restores what was changed
            _flush(saved)
            saved_fd = _point_fd1_at_stderr()
            sys.stdout = sys.__stdout__ = StdoutView(sys.stderr)
            yield
        finally:
            sys.stdout, sys.__stdout__ = saved
            _flush((*saved, sys.stderr))
            if saved_fd is not None:
                os.dup2(saved_fd, 1)
                os.close(saved_fd)


def message_of(err: BaseException) -> str:
    """A user's exception's message on one line (at most ``MESSAGE_CHARS``), even when its ``__str__`` fails."""
    try:
        text = " ".join(str(err).split())
    except INTERRUPTS:
        raise
    except BaseException:
        text = "(its message could not be printed)"
    return text if len(text) <= MESSAGE_CHARS else text[:MESSAGE_CHARS - 3] + "..."


def described(err: BaseException) -> str:
    """``TypeName: message`` of a user's exception (``message_of``)."""
    return f"{type(err).__name__}: {message_of(err)}"


def call_user(name: str, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, user code of family ``name``, with its output on stderr (``user_output_on_stderr``);
    anything it raises but ``INTERRUPTS`` is one ``ParamError`` line "family NAME: WHAT raised TYPE: MESSAGE"."""
    try:
        with user_output_on_stderr():
            return fn(*args, **kwargs)
    except INTERRUPTS:
        raise
    except BaseException as err:  # user code: one line naming what failed, never its traceback
        raise ParamError(f"family {name}: {what} raised {described(err)}") from None


def call_method(obj: Any, method: str, *args: Any) -> Any:
    """``obj.method(*args)`` (the attribute is read inside, so a property that raises is the call's failure)."""
    return getattr(obj, method)(*args)


# --- what is checked of what the user's code returns ----------------------------------------------------------------

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


def check_steps(name: str, call: str, steps: Any, d: int, batch: int, n_steps: int) -> Any:
    """``steps``, what ``call`` of family ``name`` returned, if it is a step form of ``batch`` sequences of
    ``n_steps`` steps of dim ``d`` with finite real entries (module docstring); one ``ParamError`` line otherwise."""
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


def same_draw(a: Any, b: Any) -> bool:
    """Whether two checked step forms hold the same steps (same form, every array equal)."""
    return type(a) is type(b) and all(np.array_equal(getattr(a, f.name), getattr(b, f.name))
                                      for f in dataclasses.fields(a))


def check_moments(name: str, moments: Any, d: int) -> tuple[np.ndarray, np.ndarray]:
    """What a family's ``moments()`` returned, as float64 (E[A] of shape (d, d), E[A_ij A_kl] of shape (d, d, d, d)),
    finite; one ``ParamError`` line naming the family otherwise."""
    if not isinstance(moments, (tuple, list)) or len(moments) != 2:
        raise ParamError(f"family {name}: moments() returned a {type(moments).__name__}; it must return the pair "
                         f"(E[A] of shape {(d, d)}, E[A_ij A_kl] of shape {(d,) * 4})")
    out = []
    for label, x, shape in (("E[A]", moments[0], (d, d)), ("E[A_ij A_kl]", moments[1], (d,) * 4)):
        try:
            x = np.asarray(x, dtype=np.float64)
        except (TypeError, ValueError) as err:
            raise ParamError(f"family {name}: moments() gave {label} that is not an array of reals ({err})") from None
        if x.shape != shape:
            raise ParamError(f"family {name}: moments() gave {label} of shape {x.shape}; expected {shape} for "
                             f"dim = {d}")
        if not np.all(np.isfinite(x)):
            raise ParamError(f"family {name}: moments() gave {label} with non-finite values (NaN or inf)")
        out.append(x)
    return out[0], out[1]


class CheckedFamily:
    """A user family as the engine sees it (``families.make_family`` builds it for ``module:Class`` names, through
    ``build``): ``name`` is the ``module:Class`` it was loaded as, ``dim`` the dimension it stated (read once), every
    ``sample`` goes through ``call_user`` and ``check_steps``, so a later draw that raises, changes shape or goes
    non-finite is one ``ParamError`` line, never a traceback or a silently misread result.  Other attributes are the
    user's (``__getattr__``); ``user_family`` is the object the user's class built.  It pickles for a worker with its
    module resolved there first (``rebuild``)."""

    __slots__ = ("user_family", "name", "dim")

    def __init__(self, user_family: Any, name: str, dim: int) -> None:
        self.user_family, self.name, self.dim = user_family, name, dim

    @classmethod
    def build(cls, user_class: type, kwargs: dict[str, Any], name: str) -> "CheckedFamily":
        """``user_class(**kwargs)`` as the engine's family: the constructor run (``call_user``), the ``Family``
        protocol present (``dim``, an integer >= 1, and a ``sample`` method) and two first draws checked and equal."""
        try:
            with user_output_on_stderr():
                family = user_class(**kwargs)
        except INTERRUPTS:
            raise
        except BaseException as err:  # the user's constructor: one line, not its traceback
            raise ParamError(f"family {name!r} refused its parameters {kwargs}: {described(err)}") from None
        for attr in ("dim", "sample"):
            try:
                inspect.getattr_static(family, attr)
            except AttributeError:
                raise ParamError(f"family {name!r} does not implement the Family protocol (dim, sample): it has no "
                                 f"{attr}") from None
        dim = call_user(name, "reading dim", getattr, family, "dim")
        if not isinstance(dim, (int, np.integer)) or isinstance(dim, (bool, np.bool_)):
            raise ParamError(f"family {name}: dim must be an integer >= 1, got a {type(dim).__name__}")
        checked = cls(family, name, check_int(f"family {name}: dim", dim, 1))
        checked.check_reproducible()
        return checked

    def sample(self, rng: np.random.Generator, n_steps: int, batch: int) -> Any:
        """The user's ``sample(rng, n_steps, batch)``, run by ``call_user`` and checked by ``check_steps``."""
        call = f"sample(rng, n_steps={n_steps}, batch={batch})"
        steps = call_user(self.name, call, call_method, self.user_family, "sample", rng, n_steps, batch)
        return check_steps(self.name, call, steps, self.dim, batch, n_steps)

    def check_reproducible(self) -> None:
        """Refuse (``ParamError``) a family whose ``sample(default_rng(0), 3, 2)`` differs between two calls: its
        draws depend on more than ``rng`` (a global or its own generator, state kept between calls), so a saved
        result of it could not be reproduced (``accum measure --from``)."""
        first, again = (self.sample(np.random.default_rng(0), CHECK_STEPS, CHECK_BATCH) for _ in range(2))
        if not same_draw(first, again):
            raise ParamError(f"family {self.name}: two calls sample(rng, {CHECK_STEPS}, {CHECK_BATCH}) with generators "
                             "of the same seed gave different steps: its draws do not come from rng alone (a global "
                             "or its own generator, or state kept between calls), so its results could not be "
                             "reproduced; draw every random number from the rng it is given")

    def __getattr__(self, attr: str) -> Any:  # only called for attributes not found above
        if attr.startswith("__") or attr in CheckedFamily.__slots__:
            raise AttributeError(attr)
        user = self.user_family
        try:
            inspect.getattr_static(user, attr)  # the user's class or instance has it: not a catch-all __getattr__
        except AttributeError:
            raise AttributeError(attr) from None
        value = call_user(self.name, f"reading {attr}", getattr, user, attr, _ABSENT)
        if value is _ABSENT:  # a slot never set, or a property that says it is absent
            raise AttributeError(attr)
        wanted = CAPABILITIES.get(attr)
        is_method = callable(value) and not isinstance(value, type)
        if (wanted == "a method" and not is_method) or (wanted == "True or False" and not isinstance(value, (bool, np.bool_))):
            raise ParamError(f"family {self.name}: {attr} must be {wanted}, got a {type(value).__name__}")
        return UserMethod(self.name, attr, value) if is_method else value

    def __reduce__(self) -> tuple:
        blob = call_user(self.name, "pickling (for a worker)", pickle.dumps, self.user_family)
        return rebuild, (self.name, self.dim, blob)

    def __repr__(self) -> str:
        return f"{self.name}(dim={self.dim})"


_ABSENT = object()


class UserMethod:
    """A bound method of a user family, called through ``call_user`` (its output on stderr, its failures one line
    naming the family and the method)."""

    __slots__ = ("name", "attr", "method")

    def __init__(self, name: str, attr: str, method: Callable[..., Any]) -> None:
        self.name, self.attr, self.method = name, attr, method

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return call_user(self.name, f"{self.attr}()", self.method, *args, **kwargs)


def rebuild(name: str, dim: int, blob: bytes) -> CheckedFamily:
    """A pickled ``CheckedFamily`` read back (in a worker): its module imported as ``load_class`` imports it, then
    the user's object unpickled."""
    load_class(name)
    return CheckedFamily(call_user(name, "unpickling (in a worker)", pickle.loads, blob), name, dim)


def first_sample(family: Any, name: str) -> Any:
    """``family.sample(default_rng(0), 3, 2)``, checked by ``check_steps`` (a built-in exactly as a user family)."""
    call = f"sample(rng, n_steps={CHECK_STEPS}, batch={CHECK_BATCH})"
    steps = family.sample(np.random.default_rng(0), CHECK_STEPS, CHECK_BATCH)
    return check_steps(name, call, steps, family.dim, CHECK_BATCH, CHECK_STEPS)


def sample_report(steps: Any) -> SampleReport:
    """What the theory assumes, measured on checked steps by their form (``Steps.sample_report``)."""
    return SampleReport(type(steps).__name__, *steps.sample_report(SVD_DIM))


def check_sample(family: Any, name: str) -> SampleReport:
    """Before any work of a command that uses the theory: draw the family's ``first_sample`` and measure what the
    theory assumes, and check the family's exact ``moments()`` where it states them (``check_moments``); returns
    the report."""
    moments = getattr(family, "moments", None)
    if moments is not None:
        check_moments(name, moments(), family.dim)
    return sample_report(first_sample(family, name))
