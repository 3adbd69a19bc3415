"""Transform families: step laws A_t, each a frozen dataclass that samples ``Steps``.

The protocol every family satisfies (built-in or user-defined) is ``Family``: a ``dim`` and
``sample(rng, n_steps, batch) -> Steps``.  That is all the estimators, checks and figures use, so a new
family plugs in without touching the engine (see ``simulations.examples`` and docs/families.md).

Built-ins (``FAMILIES``; ``accum families`` prints their parameters and ranges):

rope             A_t = R(omega), omega_b = base^(-2b/d)          (position-indexed, deterministic; rotates by
                 +omega per step, s_ij = q^T R((i-j) omega) k -- the common RoPE libraries use the other direction,
                 i.e. they equal this family with omega -> -omega; see ``conventions``)
so2-accumulated  A_t = diag_b R(theta_tb), theta from an angle law (``simulations.laws``: one class per law,
                 owning its parameters, numpy and torch samplers and characteristic function) or a per-token table
householder      A_t = I - beta w_t w_t^T (PaTH), w_t uniform on S^{d-1} or one unit vector per token
haar             A_t Haar on O(d) or SO(d) (QR with the sign fix, Mezzadri 2007)
givens           rotation by N(0, sigma^2) in a uniformly random coordinate plane
lie-walk         A_t = expm(X), X = sum_{i<j} g_ij (e_i e_j^T - e_j e_i^T), g_ij ~ N(0, sigma^2)
nope             A_t = I (no transport; the ALiBi / NoPE baseline)
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Union, runtime_checkable

import numpy as np

from .conventions import rope_frequencies
from .laws import BASE, LAWS, TORCH_LAWS, AngleLaw, TorchDraw, check_token_table, law_params, make_law
from .params import MAX_DENSE_DIM, CommandText, ParamError, ParamSpec, check_int, param_dataclass, pieces, resolve
from .steps import AngleSteps, DenseSteps, HouseholderSteps
from .userfamily import CheckedFamily, call_user, load_class

if TYPE_CHECKING:  # torch is imported by the torch samplers only
    import torch

Steps = Union[AngleSteps, HouseholderSteps, DenseSteps]


@runtime_checkable
class Family(Protocol):
    """What a transform family must provide.

    dim: the size d of each step matrix.
    sample(rng, n_steps, batch): ``batch`` independent sequences of ``n_steps`` steps, as one of the
    ``Steps`` forms (``DenseSteps`` of shape (batch, n_steps, d, d) float64 always works).
    """

    dim: int

    def sample(self, rng: np.random.Generator, n_steps: int, batch: int) -> Steps: ...


def check_sample_size(n_steps: int, batch: int) -> None:
    """Raise ``ParamError`` unless n_steps >= 1 and batch >= 1 are integers."""
    check_int("n_steps", n_steps, 1)
    check_int("batch", batch, 1)


_DIM_EVEN = ParamSpec("dim", "int", 16, "head dimension d (even: d/2 SO(2) planes)", lo=2, hi=4096, even=True)
_DIM_ANY = ParamSpec("dim", "int", 16, "dimension d", lo=1, hi=4096)


class BuiltinFamily:
    """Mixin for built-ins (each a ``param_dataclass``): parameters declared in ``PARAMS`` are validated on
    construction; the first line of the class docstring is its summary (``accum families``)."""

    name: ClassVar[str]
    PARAMS: ClassVar[tuple[ParamSpec, ...]]

    @classmethod
    def summary(cls) -> str:
        """The first line of the class docstring."""
        return (cls.__doc__ or "").strip().splitlines()[0]

    def __post_init__(self) -> None:
        """Runs after ``param_dataclass`` has validated each parameter: the cross-parameter checks."""
        self._check()

    def _check(self) -> None:
        """Cross-parameter constraints (none by default)."""

    @classmethod
    def from_params(cls, **given: Any) -> "BuiltinFamily":
        return cls(**resolve(cls.PARAMS, given, cls.name))

    def params(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def angle_law(self) -> AngleLaw | None:
        """The angle law (``simulations.laws``) that draws this family's steps, or None (not an angle-law family)."""
        return None


@param_dataclass
class Rope(BuiltinFamily):
    """RoPE: A_t = R(omega), omega_b = base^(-2b/d); position-indexed, not random.

    Rotates by +omega per step, so s_ij = q^T R((i - j) omega) k; the common RoPE libraries rotate the other way
    (``conventions``).  Su et al., "RoFormer: Enhanced Transformer with Rotary Position Embedding", 2021."""

    name: ClassVar[str] = "rope"
    FORM: ClassVar[type] = AngleSteps
    PARAMS: ClassVar[tuple[ParamSpec, ...]] = (_DIM_EVEN, BASE)

    def sample(self, rng: np.random.Generator, n_steps: int, batch: int) -> AngleSteps:
        check_sample_size(n_steps, batch)
        omega = rope_frequencies(self.dim, self.base)
        return AngleSteps(np.broadcast_to(omega, (batch, n_steps, self.dim // 2)).copy())

    def torch_angle_sampler(self, device: torch.device, gen: torch.Generator) -> TorchDraw:
        """draw(n_steps, batch) -> theta_tb = omega_b, (batch, n_steps, d/2) float64 on ``device`` (no randomness:
        ``gen`` is not used)."""
        import torch

        omega = torch.as_tensor(rope_frequencies(self.dim, self.base), dtype=torch.float64, device=device)
        return lambda n, b: omega.expand(b, n, self.dim // 2).clone()


@param_dataclass
class SO2Accumulated(BuiltinFamily):
    """Block SO(2) with per-plane angles summed over tokens (random or token-dependent).

    A_t = diag_b R(theta_tb) with theta drawn by the angle law ``law`` (``simulations.laws``; its parameters are
    this family's too), so a path of n steps rotates plane b by the sum of its n angles."""

    name: ClassVar[str] = "so2-accumulated"
    FORM: ClassVar[type] = AngleSteps
    PARAMS: ClassVar[tuple[ParamSpec, ...]] = (
        _DIM_EVEN,
        ParamSpec("law", "choice", "gaussian", "angle law (simulations.laws)", choices=tuple(LAWS)),
        *law_params(),
    )

    def _check(self) -> None:
        """The law's tables must fit (``AngleLaw.check_size``: a token law's table and Markov transition matrix)."""
        self.angle_law().check_size(self.dim)

    def params(self) -> dict[str, Any]:
        """dim, law and the parameters of that law only (the fields of the other laws keep their defaults): what a
        saved result records, so adding or editing another law leaves its identity unchanged."""
        own = {"dim", "law", *(spec.name for spec in LAWS[self.law].PARAMS)}
        return {k: v for k, v in dataclasses.asdict(self).items() if k in own}

    def angle_law(self) -> AngleLaw:
        """The angle law object (``simulations.laws``) with this family's parameters (built once per distinct family:
        ``sample`` asks for it at every draw, and laws are frozen)."""
        return _angle_law(self)

    @property
    def iid_steps(self) -> bool:
        """False for a Markov token source (consecutive steps share tokens); the moment theory needs i.i.d. steps."""
        return self.angle_law().iid

    def angle_table(self) -> np.ndarray:
        """Per-token angles, (vocab, d/2) (token law; ``laws.Token.table``)."""
        return make_law("token", dataclasses.asdict(self)).table(self.dim)

    def sample(self, rng: np.random.Generator, n_steps: int, batch: int) -> AngleSteps:
        check_sample_size(n_steps, batch)
        return AngleSteps(self.angle_law().sample(rng, (batch, n_steps, self.dim // 2), self.dim))

    def torch_angle_sampler(self, device: torch.device, gen: torch.Generator) -> TorchDraw:
        """The law's torch sampler (``AngleLaw.torch_sampler``): draw(n_steps, batch) -> theta (batch, n_steps, d/2)
        float64 on ``device`` from ``gen``; ``ParamError`` for a law without one."""
        law = self.angle_law()
        if law.torch_sampler is None:
            raise ParamError(f"the torch backend draws rope and so2-accumulated with law in {{{', '.join(TORCH_LAWS)}}} "
                             f"only, got {self.name} ({self.law}); use numpy draws for it")
        return law.torch_sampler(self.dim, device, gen)


@functools.lru_cache(maxsize=256)
def _angle_law(family: SO2Accumulated) -> AngleLaw:
    """``make_law`` for the family's law from its fields (a plain dict: ``dataclasses.asdict`` deep-copies)."""
    return make_law(family.law, {f.name: getattr(family, f.name) for f in dataclasses.fields(family)})


@param_dataclass
class Householder(BuiltinFamily):
    """PaTH: A_t = I - beta w w^T; orthogonal for beta in {0, 2}, contractive otherwise.

    w_t uniform on the sphere S^{d-1} (``w = sphere``, E[A] = (1 - beta/d) I) or one fixed unit vector per token
    with tokens i.i.d. uniform (``w = token``).  Yang et al., "PaTH Attention: Position Encoding via Accumulating
    Householder Transformations", 2025."""

    name: ClassVar[str] = "householder"
    FORM: ClassVar[type] = HouseholderSteps
    PARAMS: ClassVar[tuple[ParamSpec, ...]] = (
        _DIM_ANY,
        ParamSpec("beta", "float", 1.0, "strength (2 = exact reflection)", lo=0.0, hi=2.0),
        ParamSpec("w", "choice", "sphere", "direction law", choices=("sphere", "token")),
        ParamSpec("vocab", "int", 8, "vocabulary size (tokens iid uniform; vocab x d <= 5e7)", lo=1, hi=1_000_000, only_with=("w", ("token",))),
        ParamSpec("table_seed", "int", 0, "seed of the unit-vector table", lo=0, hi=2**63 - 1, only_with=("w", ("token",))),
    )

    def _check(self) -> None:
        """The token table, vocab x d, must fit (``laws.check_token_table``)."""
        if self.w == "token":
            check_token_table(self.vocab, self.dim, f"dim = {self.dim}")

    def direction_table(self) -> np.ndarray:
        """Unit vectors per token, (vocab, d): normalised default_rng(table_seed) Gaussian rows."""
        g = np.random.default_rng(self.table_seed).normal(size=(self.vocab, self.dim))
        return g / np.linalg.norm(g, axis=1, keepdims=True)

    def sample(self, rng: np.random.Generator, n_steps: int, batch: int) -> HouseholderSteps:
        check_sample_size(n_steps, batch)
        if self.w == "sphere":
            g = rng.normal(size=(batch, n_steps, self.dim))
            w = g / np.linalg.norm(g, axis=2, keepdims=True)
        else:
            w = self.direction_table()[rng.integers(self.vocab, size=(batch, n_steps))]
        return HouseholderSteps(w, np.full((batch, n_steps), self.beta))


def haar_orthogonal(rng: np.random.Generator, shape: tuple[int, ...], dim: int, special: bool) -> np.ndarray:
    """Haar-distributed O(d) (or SO(d)) matrices, shape shape + (d, d).

    Q R = G with G Gaussian; Q diag(sign(diag R)) is Haar on O(d) (Mezzadri, Notices AMS 2007).
    For SO(d) the first column is negated where det = -1 (a measure-preserving bijection O^- -> SO).
    """
    q, r = np.linalg.qr(rng.normal(size=shape + (dim, dim)))
    q = q * np.sign(np.diagonal(r, axis1=-2, axis2=-1))[..., None, :]
    if special:
        flip = np.linalg.det(q) < 0
        q[flip, :, 0] *= -1.0
    return q


def dense_in_pieces(draw, shape: tuple[int, ...], dim: int) -> np.ndarray:
    """``draw(k)`` -> (k, d, d) matrices (a QR or an expm each, ~d^3 flops), called over the flattened ``shape`` in
    pieces of about ``params.PIECE_FLOPS`` (so Ctrl-C is acted on between them), reshaped to ``shape`` + (d, d).
    Each matrix is computed on its own and the random draws follow each other in order, so the result is the one a
    single call over the whole shape would give."""
    parts = pieces(math.prod(shape), float(dim) ** 3)
    return np.concatenate([draw(part.stop - part.start) for part in parts]).reshape(*shape, dim, dim)


@param_dataclass
class Haar(BuiltinFamily):
    """Haar-random steps on O(d) or SO(d): incoherent after one step.

    Drawn by QR of a Gaussian matrix with the sign fix (``haar_orthogonal``; Mezzadri 2007)."""

    name: ClassVar[str] = "haar"
    FORM: ClassVar[type] = DenseSteps
    # each step is a d x d QR (d^3): at d = 4096 one step takes tens of seconds and Ctrl-C could not be honoured
    PARAMS: ClassVar[tuple[ParamSpec, ...]] = (
        dataclasses.replace(_DIM_ANY, hi=MAX_DENSE_DIM),
        ParamSpec("group", "choice", "O", "group", choices=("O", "SO")),
    )

    def sample(self, rng: np.random.Generator, n_steps: int, batch: int) -> DenseSteps:
        check_sample_size(n_steps, batch)
        special = self.group == "SO"
        return DenseSteps(dense_in_pieces(lambda k: haar_orthogonal(rng, (k,), self.dim, special), (batch, n_steps),
                                          self.dim))


@param_dataclass
class Givens(BuiltinFamily):
    """Rotation by N(0, sigma^2) in a uniformly random coordinate plane (i, j).

    A_t = I except A_ii = A_jj = cos(angle), A_ji = -A_ij = sin(angle), with i != j uniform."""

    name: ClassVar[str] = "givens"
    FORM: ClassVar[type] = DenseSteps
    PARAMS: ClassVar[tuple[ParamSpec, ...]] = (
        ParamSpec("dim", "int", 16, "dimension d", lo=2, hi=MAX_DENSE_DIM),
        ParamSpec("sigma", "float", 1.0, "angle standard deviation (uniform plane angle to 1e-200 well before 1e3)",
                  lo=0.0, hi=1e3),
    )

    def sample(self, rng: np.random.Generator, n_steps: int, batch: int) -> DenseSteps:
        check_sample_size(n_steps, batch)
        i = rng.integers(self.dim, size=(batch, n_steps))
        j = (i + rng.integers(1, self.dim, size=(batch, n_steps))) % self.dim
        angle = rng.normal(0.0, self.sigma, (batch, n_steps))
        a = np.broadcast_to(np.eye(self.dim), (batch, n_steps, self.dim, self.dim)).copy()
        bb, tt = np.indices((batch, n_steps))
        c, s = np.cos(angle), np.sin(angle)
        a[bb, tt, i, i], a[bb, tt, j, j] = c, c
        a[bb, tt, i, j], a[bb, tt, j, i] = -s, s
        return DenseSteps(a)


@param_dataclass
class LieWalk(BuiltinFamily):
    """A_t = expm(X), X skew with i.i.d. N(0, sigma^2) entries above the diagonal.

    A random walk on SO(d) whose steps are near I for small sigma."""

    name: ClassVar[str] = "lie-walk"
    FORM: ClassVar[type] = DenseSteps
    PARAMS: ClassVar[tuple[ParamSpec, ...]] = (
        # each step is one expm of d x d (about a second at d = 1024 on a loaded core, one call Ctrl-C cannot cut)
        ParamSpec("dim", "int", 8, "dimension d", lo=2, hi=512),
        ParamSpec("sigma", "float", 0.3, "scale of the skew generator (expm rounding grows with sigma sqrt(d); "
                  "the rate is e^{-(d-1) sigma^2/2}-small long before 1e2)", lo=0.0, hi=1e2),
    )

    def sample(self, rng: np.random.Generator, n_steps: int, batch: int) -> DenseSteps:
        check_sample_size(n_steps, batch)
        return DenseSteps(dense_in_pieces(lambda k: self.steps(rng, k), (batch, n_steps), self.dim))

    def steps(self, rng: np.random.Generator, count: int) -> np.ndarray:
        """``count`` steps (count, d, d): expm of skew matrices with N(0, sigma^2) entries above the diagonal."""
        import scipy.linalg  # here, not at the top: only the Lie walk needs it, and its import costs ~0.4 s

        g = np.triu(rng.normal(0.0, self.sigma, (count, self.dim, self.dim)), 1)
        return scipy.linalg.expm(g - np.swapaxes(g, -1, -2))


@param_dataclass
class NoPE(BuiltinFamily):
    """A_t = I: no transport (NoPE; with an ALiBi bias, the ALiBi baseline)."""

    name: ClassVar[str] = "nope"
    FORM: ClassVar[type] = AngleSteps
    PARAMS: ClassVar[tuple[ParamSpec, ...]] = (_DIM_EVEN,)

    def sample(self, rng: np.random.Generator, n_steps: int, batch: int) -> AngleSteps:
        check_sample_size(n_steps, batch)
        return AngleSteps(np.zeros((batch, n_steps, self.dim // 2)))


FAMILIES: dict[str, type[BuiltinFamily]] = {
    cls.name: cls for cls in (Rope, SO2Accumulated, Householder, Haar, Givens, LieWalk, NoPE)
}


def make_family(name: str, **params: Any) -> Family:
    """Build a family by name with validated parameters: numbers of each parameter's declared type (command-line
    text, ``params.CommandText`` from ``parse_assignments``, is parsed first; a plain string is not a number).

    ``name`` is a built-in name or ``"package.module:ClassName"`` for a user family; a user class with a
    ``PARAMS`` tuple of ``ParamSpec`` gets the same parsing and validation, otherwise parameters are passed
    to its constructor as floats (ints when integral).
    """
    if not isinstance(name, str):
        raise ParamError(f"family name must be a string, got {name!r}; built-in: {', '.join(FAMILIES)} (or module:Class)")
    if name in FAMILIES:
        return FAMILIES[name].from_params(**params)
    if ":" not in name:
        raise ParamError(f"unknown family {name!r}; built-in: {', '.join(FAMILIES)} (or module:Class)")
    cls = load_class(name)  # the current folder is on the import path for module:Class
    specs = getattr(cls, "PARAMS", None)
    if specs is not None and not (isinstance(specs, (tuple, list)) and all(isinstance(s, ParamSpec) for s in specs)):
        raise ParamError(f"family {name!r}: PARAMS must be a tuple of ParamSpec (accum.simulations.params), got a "
                         f"{type(specs).__name__}")
    kwargs = resolve(specs, params, name) if specs else {k: _number(k, v) for k, v in params.items()}
    return CheckedFamily.build(cls, kwargs, name)


def _number(key: str, given: Any) -> float | int:
    """A user family's parameter without a ``ParamSpec``: a finite real number (not a bool), or command-line text
    of one, as a float (an int when integral); anything else raises ``ParamError``."""
    is_number = isinstance(given, (int, float, np.integer, np.floating)) and not isinstance(given, (bool, np.bool_))
    if not (is_number or isinstance(given, CommandText)):
        raise ParamError(f"parameter {key!r}: {given!r} is not a number")
    try:
        value = float(given)
    except ValueError:
        raise ParamError(f"parameter {key!r}: {given!r} is not a number") from None
    except OverflowError:  # an int beyond the float range
        value = math.inf
    if not math.isfinite(value):
        raise ParamError(f"parameter {key!r} = {given!r} is not finite")
    return int(value) if value.is_integer() else value


def user_object(family: Family) -> Any:
    """The object the user's class built (a ``CheckedFamily`` unwrapped); built-ins and direct instances as given."""
    return family.user_family if isinstance(family, CheckedFamily) else family


def family_params(family: Family) -> dict[str, Any]:
    """The family's parameters as a plain dict, for saving with results: a built-in's ``params()``, a user family's
    dataclass fields (read through ``userfamily.call_user``), else its dim."""
    obj = user_object(family)
    if isinstance(obj, BuiltinFamily):
        return obj.params()
    if not dataclasses.is_dataclass(obj):
        return {"dim": family.dim}
    return call_user(family_name(family), "reading its dataclass fields", dataclasses.asdict, obj)


def family_name(family: Family) -> str:
    """Registry name for built-ins, the ``module:Class`` it was loaded as for a user family (``CheckedFamily.name``),
    ``module:Class`` of its type for any other object."""
    return getattr(family, "name", None) or f"{type(family).__module__}:{type(family).__qualname__}"


def drawn_classes(family: Family) -> tuple[str, ...]:
    """The classes of ``identity.BY_CLASS`` modules the family draws with, as "module:Class": its angle law's
    (``so2-accumulated``, or a user family's ``angle_law()``), none for the others.  A saved result's key
    fingerprints these alone of their module (``identity.job_modules``)."""
    angle_law = getattr(family, "angle_law", None)
    law = angle_law() if angle_law is not None else None
    return () if law is None else (f"{type(law).__module__}:{type(law).__qualname__}",)
