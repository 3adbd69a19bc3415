"""Angle laws of the ``so2-accumulated`` family: each law is one small class that owns its parameters, its samplers
(numpy, and torch for device draws) and its characteristic function, so a new law is one class here (``LAWS``
finds it) and nothing else: the tests run every law of ``LAWS``.

A law draws the per-plane angles theta_tb of A_t = diag_b R(theta_tb) (interleaved planes, ``conventions``) and
states phi_b(k) = E exp(i k theta_tb) for integer k, per plane b (d/2,).  The theory (``theory.so2``) builds
everything from phi (i.i.d. laws: psi_b(n; k) = phi_b(k)^n) or, for the token law, from its Markov chain.
Each law's class docstring states its density and its phi (standard results, e.g. Mardia & Jupp, "Directional
Statistics", ch. 3; tests/simulations/test_families.py checks every phi against its sampler, and
tests/theory/test_theory_so2.py against quadrature or enumeration).

Upper bounds on the parameters (a value beyond them is refused, never clipped): angles act modulo 2 pi, and in
float64 |mu|, |offset|, a <= 1e6 still leave about 1e-10 rad of resolution after the reduction (a location is
reduced to (-pi, pi] before it is used, ``wrapped``: the same law, with every draw within the angle bound
``userfamily.MAX_ANGLE`` = 1e6 that ``check_sample`` holds every family to; a location already in [-pi, pi] is
used unchanged, bit for bit); scales sigma,
gamma, table_sigma <= 1e3 are far past the point (~40) where the law is uniform on the circle to double precision,
and kappa <= 1e6 (von Mises of circular standard deviation 1e-3) keeps the Bessel ratios accurate.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, ClassVar

import numpy as np
import scipy.special as sp

from .conventions import rope_frequencies
from .params import ParamSpec, field_error, param_dataclass

if TYPE_CHECKING:  # torch is imported by the torch samplers only, when a device draw is asked for
    import torch

#: draw(n_steps, batch) -> theta (batch, n_steps, d/2) float64 tensor on the sampler's device
TorchDraw = Callable[[int, int], "torch.Tensor"]

#: the most float64 numbers a per-token table may hold, vocab x (numbers per token): 400 MB.  Checked when a family
#: is built (``check_token_table``), so a table that cannot fit is refused before any work, not mid-run.
MAX_TABLE_NUMBERS = 50_000_000
#: the most entries of the Markov token source's vocab x vocab transition matrix (``Token.chain``): 200 MB, so
#: vocab <= 5000 with ``source = markov``.
MAX_CHAIN_ENTRIES = 25_000_000

MU = ParamSpec("mu", "float", 0.0, "location", lo=-1e6, hi=1e6)
BASE = ParamSpec("base", "float", 10000.0, "RoPE frequency base", lo=1.0, hi=1e12, lo_open=True)


class AngleLaw:
    """Protocol of an angle law: ``name``, ``PARAMS`` (its ``ParamSpec``s; the instance has one field per spec),
    ``sample(rng, shape, dim)`` -> angles of ``shape`` = (batch, n_steps, d/2), ``characteristic(k, dim)`` -> (d/2,)
    complex, ``iid`` (independent angles across steps), ``check_size(dim)`` and, for device draws,
    ``torch_sampler(dim, device, gen)`` -> draw(n_steps, batch) -> theta (batch, n_steps, d/2) float64 on ``device``
    from the ``torch.Generator`` ``gen`` (``None`` on a law without one: the torch backend refuses it)."""

    name: ClassVar[str]
    PARAMS: ClassVar[tuple[ParamSpec, ...]]
    #: a law without a torch sampler declares so by leaving this None (device draws refuse it, ``TORCH_LAWS``);
    #: a law with one defines the method ``torch_sampler(self, dim, device, gen) -> TorchDraw``
    torch_sampler: ClassVar[Callable[..., TorchDraw] | None] = None
    #: True for a law whose angles are table[x_t, b] along a token chain (``Token``: ``vocab``, ``table(dim)``,
    #: ``chain()``): the theory multiplies its transfer matrices (``theory.so2``) instead of taking phi^n
    TOKEN_CHAIN: ClassVar[bool] = False

    @property
    def iid(self) -> bool:
        """Angles independent across steps (True unless the law says otherwise)."""
        return True

    def sample(self, rng: np.random.Generator, shape: tuple[int, int, int], dim: int) -> np.ndarray:
        raise NotImplementedError

    def characteristic(self, k: int, dim: int) -> np.ndarray:
        raise NotImplementedError

    def check_size(self, dim: int) -> None:
        """Refuse (``ParamError``) parameters whose tables would not fit at dimension ``dim`` (none by default)."""


def check_token_table(vocab: int, per_token: int, where: str) -> None:
    """Refuse (``ParamError`` naming vocab) a token table of vocab x ``per_token`` numbers over ``MAX_TABLE_NUMBERS``;
    ``where`` says what sets ``per_token`` (e.g. ``"dim = 4096"``)."""
    if vocab * per_token > MAX_TABLE_NUMBERS:
        raise field_error("vocab", f"= {vocab} at {where} would need a {vocab} x {per_token} token table; allowed: "
                                   f"vocab <= {MAX_TABLE_NUMBERS // per_token} there (vocab x {per_token} <= "
                                   f"{MAX_TABLE_NUMBERS}, MAX_TABLE_NUMBERS)")


def wrapped(angle: float) -> float:
    """``angle`` reduced modulo 2 pi to [-pi, pi] (IEEE remainder, exact for the float64 2 pi): the same rotation,
    R(wrapped(a)) = R(a); an angle already in [-pi, pi] comes back unchanged."""
    return math.remainder(angle, 2 * math.pi)


def _same_on_planes(value: complex, dim: int) -> np.ndarray:
    return np.full(dim // 2, value, dtype=complex)


@param_dataclass
class Gaussian(AngleLaw):
    """theta ~ N(mu, sigma^2) on every plane, mu taken modulo 2 pi (``wrapped``);
    phi(k) = exp(i k mu - k^2 sigma^2 / 2)."""

    name: ClassVar[str] = "gaussian"
    PARAMS: ClassVar[tuple[ParamSpec, ...]] = (MU, ParamSpec("sigma", "float", 0.5, "standard deviation", lo=0.0, hi=1e3))

    def sample(self, rng, shape, dim):
        return rng.normal(wrapped(self.mu), self.sigma, shape)

    def torch_sampler(self, dim, device, gen):
        """theta = wrapped(mu) + sigma N(0, 1)."""
        import torch

        return lambda n, b: torch.randn((b, n, dim // 2), generator=gen, dtype=torch.float64, device=device
                                        ).mul_(self.sigma).add_(wrapped(self.mu))

    def characteristic(self, k, dim):
        return _same_on_planes(np.exp(1j * k * wrapped(self.mu) - 0.5 * k * k * self.sigma**2), dim)


@param_dataclass
class Uniform(AngleLaw):
    """theta ~ U(-a, a) on every plane; phi(k) = sin(k a) / (k a) (1 at k = 0)."""

    name: ClassVar[str] = "uniform"
    PARAMS: ClassVar[tuple[ParamSpec, ...]] = (ParamSpec("a", "float", 1.0, "half-width: theta ~ U(-a, a)", lo=0.0, hi=1e6),)

    def sample(self, rng, shape, dim):
        return rng.uniform(-self.a, self.a, shape)

    def torch_sampler(self, dim, device, gen):
        """theta = a (2 U - 1), U ~ U[0, 1)."""
        import torch

        return lambda n, b: torch.rand((b, n, dim // 2), generator=gen, dtype=torch.float64, device=device
                                       ).mul_(2 * self.a).sub_(self.a)

    def characteristic(self, k, dim):
        return _same_on_planes(np.sinc(k * self.a / math.pi), dim)  # numpy sinc(x) = sin(pi x) / (pi x)


@param_dataclass
class VonMises(AngleLaw):
    """theta ~ von Mises(mu, kappa), density exp(kappa cos(theta - mu)) / (2 pi I_0(kappa));
    phi(k) = exp(i k mu) I_|k|(kappa) / I_0(kappa) (ratios of exponentially scaled Bessel functions, exact to
    kappa = 1e6)."""

    name: ClassVar[str] = "vonmises"
    PARAMS: ClassVar[tuple[ParamSpec, ...]] = (MU, ParamSpec("kappa", "float", 4.0, "concentration", lo=0.0, hi=1e6))

    def sample(self, rng, shape, dim):
        return rng.vonmises(self.mu, self.kappa, shape)

    def characteristic(self, k, dim):
        return _same_on_planes(np.exp(1j * k * self.mu) * sp.ive(abs(k), self.kappa) / sp.ive(0, self.kappa), dim)


@param_dataclass
class WrappedCauchy(AngleLaw):
    """theta = mu + gamma C mod 2 pi, C standard Cauchy (density sinh(gamma) / (2 pi (cosh(gamma) -
    cos(theta - mu))));  phi(k) = exp(i k mu - |k| gamma)."""

    name: ClassVar[str] = "wrapped-cauchy"
    PARAMS: ClassVar[tuple[ParamSpec, ...]] = (MU, ParamSpec("gamma", "float", 0.2, "scale", lo=0.0, hi=1e3))

    def sample(self, rng, shape, dim):
        return np.mod(self.mu + self.gamma * rng.standard_cauchy(shape), 2 * math.pi)

    def characteristic(self, k, dim):
        return _same_on_planes(np.exp(1j * k * self.mu - abs(k) * self.gamma), dim)


@param_dataclass
class Lattice(AngleLaw):
    """theta uniform on the m points offset + 2 pi j / m, j = 0 .. m-1, offset taken modulo 2 pi (``wrapped``)
    (the law with no spectral gap: |phi(k)| = 1 whenever m divides k);  phi(k) = exp(i k offset) if m divides k,
    else 0."""

    name: ClassVar[str] = "lattice"
    PARAMS: ClassVar[tuple[ParamSpec, ...]] = (
        ParamSpec("m", "int", 2, "theta uniform on offset + 2 pi k / m", lo=1, hi=1_000_000),
        ParamSpec("offset", "float", 0.0, "lattice offset", lo=-1e6, hi=1e6),
    )

    def sample(self, rng, shape, dim):
        return wrapped(self.offset) + (2 * math.pi / self.m) * rng.integers(self.m, size=shape)

    def torch_sampler(self, dim, device, gen):
        """theta = wrapped(offset) + (2 pi / m) K, K uniform on {0, ..., m-1}."""
        import torch

        step = 2 * math.pi / self.m
        return lambda n, b: torch.randint(self.m, (b, n, dim // 2), generator=gen, device=device
                                          ).to(torch.float64).mul_(step).add_(wrapped(self.offset))

    def characteristic(self, k, dim):
        return _same_on_planes(np.exp(1j * k * wrapped(self.offset)) if k % self.m == 0 else 0.0, dim)


@param_dataclass
class RopeUniform(AngleLaw):
    """RoPE's frequencies as random angles: theta_b ~ U(-omega_b, omega_b), omega_b = base^(-2b/d), so plane b
    mixes at its own rate;  phi_b(k) = sin(k omega_b) / (k omega_b)."""

    name: ClassVar[str] = "rope-uniform"
    PARAMS: ClassVar[tuple[ParamSpec, ...]] = (BASE,)

    def sample(self, rng, shape, dim):
        return rng.uniform(-1.0, 1.0, shape) * rope_frequencies(dim, self.base)

    def torch_sampler(self, dim, device, gen):
        """theta_b = omega_b (2 U - 1), U ~ U[0, 1)."""
        import torch

        omega = torch.as_tensor(rope_frequencies(dim, self.base), dtype=torch.float64, device=device)
        return lambda n, b: torch.rand((b, n, dim // 2), generator=gen, dtype=torch.float64, device=device
                                       ).mul_(2).sub_(1).mul_(omega)

    def characteristic(self, k, dim):
        return np.sinc(k * rope_frequencies(dim, self.base) / math.pi) + 0j


@param_dataclass
class Token(AngleLaw):
    """theta_tb = table[x_t, b], table ~ N(0, table_sigma^2) from ``table_seed``; tokens x_t i.i.d. uniform or a
    Markov chain (``chain``);  phi_b(k) = (1/V) sum_x exp(i k table[x, b]), the stationary marginal (consecutive
    angles are not independent for a Markov source: ``theory.so2`` uses the chain's transfer matrix)."""

    name: ClassVar[str] = "token"
    TOKEN_CHAIN: ClassVar[bool] = True
    PARAMS: ClassVar[tuple[ParamSpec, ...]] = (
        ParamSpec("vocab", "int", 8, "vocabulary size (vocab x d/2 <= 5e7; markov: vocab <= 5000)", lo=1, hi=1_000_000),
        ParamSpec("source", "choice", "iid", "token source", choices=("iid", "markov")),
        ParamSpec("stay", "float", 0.5, "probability of repeating a token", lo=0.0, hi=1.0, hi_open=True,
                  only_with=("source", ("markov",))),
        ParamSpec("table_sigma", "float", 1.0, "angle table entries ~ N(0, table_sigma^2)", lo=0.0, hi=1e3),
        ParamSpec("table_seed", "int", 0, "seed of the angle table", lo=0, hi=2**63 - 1),
    )

    @property
    def iid(self) -> bool:
        return self.source == "iid"

    def check_size(self, dim: int) -> None:
        """Refuse (``ParamError`` naming vocab) a table of vocab x d/2 angles over ``MAX_TABLE_NUMBERS`` and, for a
        Markov source, a vocab x vocab transition matrix over ``MAX_CHAIN_ENTRIES``."""
        check_token_table(self.vocab, max(1, dim // 2), f"dim = {dim} (d/2 angles per token)")
        if self.source == "markov" and self.vocab**2 > MAX_CHAIN_ENTRIES:
            most = math.isqrt(MAX_CHAIN_ENTRIES)
            raise field_error("vocab", f"= {self.vocab} with source = markov would need a {self.vocab} x {self.vocab} "
                                       f"transition matrix; allowed: vocab <= {most} (vocab^2 <= {MAX_CHAIN_ENTRIES}, "
                                       "MAX_CHAIN_ENTRIES)")

    def table(self, dim: int) -> np.ndarray:
        """Per-token angles, (vocab, d/2): default_rng(table_seed).normal(0, table_sigma)."""
        return np.random.default_rng(self.table_seed).normal(0.0, self.table_sigma, size=(self.vocab, dim // 2))

    def chain(self) -> tuple[np.ndarray, np.ndarray]:
        """(pi, P): pi uniform; P = 1 pi^T (iid) or stay I + (1 - stay) 1 1^T / V (markov)."""
        v = self.vocab
        pi = np.full(v, 1.0 / v)
        if self.source == "iid":
            return pi, np.tile(pi, (v, 1))
        return pi, self.stay * np.eye(v) + (1.0 - self.stay) / v * np.ones((v, v))

    def tokens(self, rng: np.random.Generator, batch: int, n: int) -> np.ndarray:
        """Token ids x_t, (batch, n) int64: i.i.d. uniform, or x_t = x_{t-1} with probability ``stay`` else a fresh
        uniform draw (P above: reversible, uniform stationary law)."""
        fresh = rng.integers(self.vocab, size=(batch, n))
        if self.source == "iid":
            return fresh
        redraw = rng.random((batch, n)) >= self.stay
        redraw[:, 0] = True
        last = np.maximum.accumulate(np.where(redraw, np.arange(n), 0), axis=1)
        return np.take_along_axis(fresh, last, axis=1)

    def sample(self, rng, shape, dim):
        batch, n, _ = shape
        return self.table(dim)[self.tokens(rng, batch, n)]

    def characteristic(self, k, dim):
        return np.mean(np.exp(1j * k * self.table(dim)), axis=0)


#: every law of this module, by name, in the order they are defined: a new law is its class alone (the job keys
#: fingerprint each law class apart, ``identity.BY_CLASS``, so adding one invalidates no saved result)
LAWS: dict[str, type[AngleLaw]] = {cls.name: cls for cls in AngleLaw.__subclasses__() if cls.__module__ == __name__}
#: the laws with a torch sampler (device draws), in ``LAWS`` order
TORCH_LAWS: tuple[str, ...] = tuple(name for name, cls in LAWS.items() if cls.torch_sampler is not None)


def law_params() -> tuple[ParamSpec, ...]:
    """The ``so2-accumulated`` parameters of every law, each marked ``only_with`` the laws that use it (a spec shared
    by several laws, like ``mu``, once), in ``LAWS`` order."""
    users: dict[str, list[str]] = {}
    specs: dict[str, ParamSpec] = {}
    for name, cls in LAWS.items():
        for spec in cls.PARAMS:
            specs.setdefault(spec.name, spec)
            users.setdefault(spec.name, []).append(name)
    return tuple(spec if spec.only_with else replace(spec, only_with=("law", tuple(users[spec.name])))
                 for spec in specs.values())


def make_law(name: str, values: dict[str, Any]) -> AngleLaw:
    """The law ``name`` with its parameters taken from ``values`` (a dict holding at least its PARAMS)."""
    cls = LAWS[name]
    return cls(**{spec.name: values[spec.name] for spec in cls.PARAMS})
