"""Accumulated SO(2) angles: characteristic functions, coherence, second moments and far mass.

Setting (the paper's accumulated-rotation model as the issue states it; DESIGN.md C1, C4-C6).  A step is
A_t = diag_b R(theta_tb) on d/2 interleaved planes (``simulations.conventions``).  The product over n
steps rotates plane b by the accumulated angle Theta_b(n) = theta_1b + ... + theta_nb, so with
c_b = conj(z_qb) z_kb (``_common.plane_coefficients``)

    q^T A_n ... A_1 k = sum_b Re(c_b exp(i Theta_b(n))).

Everything below follows from the path characteristic psi_b(n; k) = E exp(i k Theta_b(n)):

* i.i.d. angles (every law except ``token``/``markov``):  psi_b(n; k) = phi_b(k)^n, phi_b(k) = E e^{i k theta_b}
  (independence of the steps; the statement "E[exp(i sum theta)] = phi(1)^n per plane" of the issue).
* token angles theta_tb = table[x_t, b] with tokens from a stationary Markov chain (pi, P) (i.i.d. tokens are
  P = 1 pi^T): the transfer-matrix formula
        psi_b(n; k) = pi^T D (P D)^{n-1} 1,   D = diag_x exp(i k table[x, b]),
  obtained by summing the chain's path probabilities pi(x_1) P(x_1, x_2) ... P(x_{n-1}, x_n) against
  prod_t exp(i k table[x_t, b]) one step at a time.  (Reconstruction: standard Markov additive-functional
  algebra, not copied from the paper.)  For i.i.d. tokens it reduces to (pi^T D 1)^n.

Laws: each angle law's one-step characteristic function phi(k) lives with the law (``simulations.laws``, whose
docstring lists them with their sources; wrapped-cauchy phi(1) = exp(i mu - gamma) as in the issue).
A lattice law has |phi(m)| = 1: the accumulated angle never spreads over the circle, so although
E cos Theta can vanish (m = 2: angles {0, pi}), |q^T P k| stays coherent -- the non-lattice condition fails.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import scipy.special as sp

from accum.simulations.params import field_error

from ._common import NoClosedForm, as_sizes, plane_coefficients, probes


@dataclass(frozen=True, eq=False)
class PlaneAngles:
    """What the formulas below need of a family of SO(2) blocks: its dimension d and how one step turns the d/2
    planes -- by fixed angles ``omega`` (d/2,) (RoPE: omega_b = base^(-2b/d); NoPE: zeros), or by angles drawn
    from the angle ``law`` (``simulations.laws``; so2-accumulated).  ``theory.forms.plane_angles(family)`` gives
    it for a built-in family."""

    dim: int
    omega: np.ndarray | None = None
    law: Any = None


def token_law(angles: PlaneAngles) -> Any:
    """The token law of ``angles`` (an angle law with ``TOKEN_CHAIN``, e.g. ``simulations.laws.Token``: planes share
    the tokens) or None."""
    law = angles.law
    return law if law is not None and law.TOKEN_CHAIN else None


#: the exact theory of a token law multiplies V x V transfer matrices, one per plane (per pair of planes for second
#: moments): at most this many complex entries at once (64 MB), so that it stays within seconds and memory
MAX_TRANSFER_ENTRIES = 4_000_000


def token_chain(tokens: Any, copies: int) -> tuple[np.ndarray, np.ndarray]:
    """``tokens.chain()`` (pi (V,), P (V, V)) for a computation over ``copies`` transfer matrices P D_b, or
    ``NoClosedForm`` when copies x V^2 exceeds MAX_TRANSFER_ENTRIES (the prediction is then missing, not wrong)."""
    v = int(tokens.vocab)
    if copies * v * v > MAX_TRANSFER_ENTRIES:
        raise NoClosedForm(f"token law with vocab = {v}: its exact transfer-matrix theory needs {copies} x {v} x {v} "
                           f"entries, over MAX_TRANSFER_ENTRIES = {MAX_TRANSFER_ENTRIES:g}")
    return tokens.chain()


def plane_characteristic(angles: PlaneAngles, k: int = 1) -> np.ndarray:
    """One-step characteristic phi_b(k) = E exp(i k theta_{t,b}) per plane, complex (d/2,).

    For the token law this is the stationary marginal (1/V) sum_x exp(i k table[x, b]); for a Markov
    source the product is not phi^n -- use ``path_characteristic``.  Fixed angles: exp(i k omega_b)
    (deterministic; NoPE: 1).
    """
    if angles.omega is not None:
        return np.exp(1j * k * angles.omega)
    return angles.law.characteristic(int(k), angles.dim)


def chain_characteristic(pi: np.ndarray, p: np.ndarray, phases: np.ndarray, n: int) -> np.ndarray:
    """E exp(i sum_{t=1}^t' g(x_t)) for t' = 0..n along a stationary chain, shape (..., n+1).

    pi (V,), p (V, V) row-stochastic, phases (..., V) = g(x) per state (several functions g at once).
    Forward recursion alpha_1 = pi * e^{ig}, alpha_{t+1} = (alpha_t P) * e^{ig}, value alpha_t . 1, i.e.
    pi^T D (P D)^{t-1} 1.
    """
    e = np.exp(1j * np.asarray(phases, dtype=float))
    out = np.empty(e.shape[:-1] + (n + 1,), dtype=complex)
    out[..., 0] = 1.0
    alpha = pi * e
    for t in range(1, n + 1):
        if t > 1:
            alpha = (alpha @ p) * e
        out[..., t] = alpha.sum(axis=-1)
    return out


def path_characteristic(angles: PlaneAngles, n: int, k: int = 1) -> np.ndarray:
    """psi_b(t; k) = E exp(i k Theta_b(t)) for t = 0..n, complex (n+1, d/2).

    i.i.d. angles: phi_b(k)^t.  Token law: ``chain_characteristic`` (transfer matrix, exact for both sources).
    Fixed angles (RoPE, NoPE): exp(i k t omega_b).
    """
    if n < 0:
        raise field_error("n", f"must be >= 0, got {n}")
    t = np.arange(n + 1)
    tokens = token_law(angles)
    if tokens is not None:
        pi, p = token_chain(tokens, angles.dim // 2)
        return chain_characteristic(pi, p, k * tokens.table(angles.dim).T, n).T
    if angles.omega is not None:
        return np.exp(1j * k * np.outer(t, angles.omega))
    phi = plane_characteristic(angles, k)
    return np.power(phi[None, :], t[:, None])


def transfer_rate(angles: PlaneAngles, k: int = 1) -> np.ndarray:
    """Asymptotic per-step decay rate of |psi_b(n; k)| per plane, (d/2,).

    i.i.d. angles: |phi_b(k)|.  Token law: spectral radius of P D_b (for i.i.d. tokens this is |phi_b(k)|,
    the other eigenvalues of the rank-one 1 pi^T D being 0).  1 means no decay (RoPE, NoPE, lattice at k=m).
    """
    tokens = token_law(angles)
    if tokens is not None:
        pi, p = token_chain(tokens, angles.dim // 2)
        d = np.exp(1j * k * tokens.table(angles.dim).T)  # (d/2, V)
        mats = p[None, :, :] * d[:, None, :]  # P D_b: column x scaled by e^{i k table[x, b]}
        return np.max(np.abs(np.linalg.eigvals(mats)), axis=-1)
    return np.abs(plane_characteristic(angles, k))


# --- first moments: the mean product and coherence ------------------------------------------------------


def mean_product(angles: PlaneAngles, n: int) -> np.ndarray:
    """E[A_n ... A_1], (d, d): block-diagonal, plane b block [[Re psi, -Im psi], [Im psi, Re psi]], psi = psi_b(n; 1)."""
    psi = path_characteristic(angles, n)[-1]
    d = angles.dim
    out = np.zeros((d, d))
    ev, od = np.arange(0, d, 2), np.arange(1, d, 2)
    out[ev, ev], out[ev, od] = psi.real, -psi.imag
    out[od, ev], out[od, od] = psi.imag, psi.real
    return out


def coherence(angles: PlaneAngles, n: int, q: Any = None, k: Any = None) -> np.ndarray:
    """c(t) = E[q^T A_t ... A_1 k] = sum_b Re(c_b psi_b(t; 1)) for t = 0..n, float (n+1,).

    q, k default to 1/sqrt(d) (so c(0) = 1 and, for identical planes, c(t) = Re phi^t).
    """
    q, k = probes(angles.dim, q, k)
    return (path_characteristic(angles, n) @ plane_coefficients(q, k)).real


def mean_product_sq(angles: PlaneAngles, n: int) -> np.ndarray:
    """||E[A_t ... A_1]||_F^2 / d = (2/d) sum_b |psi_b(t)|^2 for t = 0..n, (n+1,)."""
    return 2.0 * np.sum(np.abs(path_characteristic(angles, n)) ** 2, axis=1) / angles.dim


# --- second moments: far-score variance (C4, block version) ---------------------------------------------


def pair_characteristics(angles: PlaneAngles, n: int) -> tuple[np.ndarray, np.ndarray]:
    """J+_{bb'} = E e^{i(Theta_b + Theta_b')} and J-_{bb'} = E e^{i(Theta_b - Theta_b')} at step n, (d/2, d/2) each.

    Independent planes (i.i.d. laws): J+- = psi_b(n) psi_b'(n; +-1) off the diagonal, J+_bb = psi_b(n; 2),
    J-_bb = 1.  Token law (planes share the tokens): the chain formula with g = table[:, b] +- table[:, b'].
    Fixed angles (RoPE, NoPE): exp(i n (omega_b +- omega_b')).
    """
    half = angles.dim // 2
    tokens = token_law(angles)
    if tokens is not None:
        tab = tokens.table(angles.dim).T  # (d/2, V)
        pi, p = token_chain(tokens, half * half)
        plus = chain_characteristic(pi, p, tab[:, None, :] + tab[None, :, :], n)[..., -1]
        minus = chain_characteristic(pi, p, tab[:, None, :] - tab[None, :, :], n)[..., -1]
        return plus, minus
    if angles.omega is not None:
        om = angles.omega
        return np.exp(1j * n * (om[:, None] + om[None, :])), np.exp(1j * n * (om[:, None] - om[None, :]))
    psi1 = path_characteristic(angles, n, 1)[-1]
    psi2 = path_characteristic(angles, n, 2)[-1]
    plus = np.outer(psi1, psi1)
    minus = np.outer(psi1, np.conj(psi1))
    idx = np.arange(half)
    plus[idx, idx] = psi2
    minus[idx, idx] = 1.0
    return plus, minus


def step_pair_operator(angles: PlaneAngles) -> np.ndarray:
    """E[A (x) A] of one step as a (d^2, d^2) matrix in numpy's ``kron`` layout (row (i, k), column (j, l) holds
    E[A_ij A_kl]; it maps row-major vec(X) to vec(E[A X A^T])).

    A = sum_b (cos theta_b E_b + sin theta_b F_b) with E_b the identity and F_b = [[0, -1], [1, 0]] on plane b, so
    E[A (x) A] = sum_{b,c} sum_{f,g} E[f(theta_b) g(theta_c)] kron(G_fb, G_gc) with, from J+- = E e^{i(theta_b +- theta_c)}
    (``pair_characteristics`` at n = 1), E cos cos = Re(J+ + J-)/2, E sin sin = Re(J- - J+)/2, E cos_b sin_c =
    Im(J+ - J-)/2, E sin_b cos_c = Im(J+ + J-)/2 (product-to-sum; b = c included).  Reconstruction (derived here)."""
    d, half = angles.dim, angles.dim // 2
    plus, minus = pair_characteristics(angles, 1)
    weights = np.empty((2, half, 2, half))  # (f, b, g, c): f, g = 0 cos, 1 sin
    weights[0, :, 0, :] = (plus + minus).real / 2
    weights[1, :, 1, :] = (minus - plus).real / 2
    weights[0, :, 1, :] = (plus - minus).imag / 2
    weights[1, :, 0, :] = (plus + minus).imag / 2
    basis = np.zeros((2, half, d, d))
    ev, od, b = np.arange(0, d, 2), np.arange(1, d, 2), np.arange(half)
    basis[0, b, ev, ev] = basis[0, b, od, od] = 1.0
    basis[1, b, ev, od], basis[1, b, od, ev] = -1.0, 1.0
    basis = basis.reshape(d, d, d)  # the 2 * half basis matrices, cos ones first
    pair = np.einsum("xy,xij,ykl->ikjl", weights.reshape(d, d), basis, basis)
    return pair.reshape(d * d, d * d)


def far_second_moment(angles: PlaneAngles, n: int, q: Any = None, k: Any = None) -> float:
    """E[s^2] for the far score s = q^T A_n ... A_1 k (block version of C4's |q|^2 |k|^2 / d).

    Re(u) Re(v) = (Re(u v) + Re(u conj v)) / 2 gives
        E s^2 = (1/2) sum_{b,b'} Re(c_b c_b' J+_{bb'} + c_b conj(c_b') J-_{bb'})      (``pair_characteristics``).
    For independent planes whose angles have spread out (psi(n; 1), psi(n; 2) -> 0) this tends to
    sum_b |c_b|^2 / 2 = sum_b |z_qb|^2 |z_kb|^2 / 2, which is |q|^2 |k|^2 / d when every plane carries
    the same share of q and of k (e.g. q = k = 1/sqrt(d)).  Reconstruction (derived here).
    """
    q, k = probes(angles.dim, q, k)
    c = plane_coefficients(q, k)
    plus, minus = pair_characteristics(angles, n)
    total = np.sum((np.outer(c, c) * plus).real) + np.sum((np.outer(c, np.conj(c)) * minus).real)
    return float(total / 2.0)


def far_second_moment_curve(angles: PlaneAngles, n: int, q: Any = None, k: Any = None) -> np.ndarray:
    """E[s_t^2] for t = 0..n, (n+1,): ``far_second_moment`` at every lag from one pass over the path characteristics.

    Independent planes: sum_{b,b'} c_b c_b' J+_{bb'} = (sum_b c_b psi_b)^2 - sum_b c_b^2 psi_b^2 + sum_b c_b^2 psi_b(t; 2)
    and sum_{b,b'} c_b conj(c_b') J-_{bb'} = |sum_b c_b psi_b|^2 - sum_b |c_b|^2 |psi_b|^2 + sum_b |c_b|^2 (diagonals
    replaced), psi_b = psi_b(t; 1); token and fixed angles: ``pair_characteristics``' matrices at every t."""
    q, k = probes(angles.dim, q, k)
    c = plane_coefficients(q, k)
    tokens = token_law(angles)
    if tokens is not None or angles.omega is not None:
        half = angles.dim // 2
        if tokens is not None:
            tab = tokens.table(angles.dim).T
            pi, p = token_chain(tokens, half * half)
            plus = np.moveaxis(chain_characteristic(pi, p, tab[:, None, :] + tab[None, :, :], n), -1, 0)
            minus = np.moveaxis(chain_characteristic(pi, p, tab[:, None, :] - tab[None, :, :], n), -1, 0)
        else:
            t, om = np.arange(n + 1)[:, None, None], angles.omega
            plus, minus = np.exp(1j * t * (om[:, None] + om[None, :])), np.exp(1j * t * (om[:, None] - om[None, :]))
        total = np.einsum("b,c,tbc->t", c, c, plus).real + np.einsum("b,c,tbc->t", c, np.conj(c), minus).real
        return total / 2.0
    psi1, psi2 = path_characteristic(angles, n, 1), path_characteristic(angles, n, 2)
    lin = psi1 @ c
    plus = lin**2 - (psi1**2) @ (c**2) + psi2 @ (c**2)
    minus = np.abs(lin) ** 2 - (np.abs(psi1) ** 2) @ (np.abs(c) ** 2) + np.sum(np.abs(c) ** 2)
    return (plus.real + minus.real) / 2.0


def far_second_moment_limit(q: Any, k: Any) -> float:
    """n -> infinity limit of E s^2 for independent non-lattice planes: sum_b |z_qb|^2 |z_kb|^2 / 2."""
    c = plane_coefficients(np.asarray(q, float), np.asarray(k, float))
    return float(np.sum(np.abs(c) ** 2) / 2.0)


# --- far mass: E sum_Delta exp(s_Delta - s0) (C5) ------------------------------------------------------


def _bessel_order(x_max: float, tol: float = 1e-18) -> int:
    """Smallest K with I_K(x)/I_0(x) < tol for x <= x_max (at least 1)."""
    ks = np.arange(0, 2000)
    ratio = sp.ive(ks, x_max) / sp.ive(0, x_max) if x_max > 0 else (ks == 0).astype(float)
    small = np.flatnonzero(ratio < tol)
    return int(max(1, small[0] if small.size else ks[-1]))


def far_mass_terms(angles: PlaneAngles, n_max: int, s0: float, q: Any = None,
                   k: Any = None) -> tuple[np.ndarray, float]:
    """f(Delta) = E exp(s0 q^T A_Delta ... A_1 k - s0) for Delta = 1..D (D <= n_max) and the limit f(inf).

    Independent planes: e^{x cos(Theta + alpha)} = I_0(x) + 2 sum_{j>=1} I_j(x) cos(j (Theta + alpha))
    (Abramowitz & Stegun 9.6.34) gives, with x_b = s0 |c_b| and alpha_b = arg c_b,
        f(Delta) = e^{-s0} prod_b [ I_0(x_b) + 2 sum_j I_j(x_b) Re(e^{i j alpha_b} psi_b(Delta; j)) ].
    Terms are returned up to D = the step after which every psi_b(Delta; j) I_j / I_0 is below 1e-17
    (so f(Delta) = f(inf) = e^{-s0} prod_b I_0(x_b) to double precision beyond D), or n_max if sooner.
    Fixed angles (RoPE, NoPE) are deterministic: f(Delta) = exp(s0 (q^T R(Delta omega) k - 1)), with a limit
    only when no plane turns (NoPE).
    Token-dependent angles couple the planes: ``NoClosedForm``.  Reconstruction (derived here).
    """
    q, k = probes(angles.dim, q, k)
    c = plane_coefficients(q, k)
    if angles.omega is not None:
        omega = angles.omega
        coh = np.concatenate([(np.exp(1j * np.outer(delta, omega)) @ c).real for delta in _chunks(n_max)])
        return np.exp(s0 * (coh - 1.0)), (math.nan if np.any(omega) else float(np.exp(s0 * (c.real.sum() - 1.0))))
    if token_law(angles) is not None:
        raise NoClosedForm("far mass of token-dependent angles: the planes share tokens, no product form")
    x = s0 * np.abs(c)
    alpha = np.angle(c)
    order = _bessel_order(float(x.max()))
    j = np.arange(1, order + 1)
    phis = np.stack([plane_characteristic(angles, int(jj)) for jj in j], axis=1)  # (d/2, K)
    weight = 2.0 * sp.ive(j[None, :], x[:, None]) / sp.ive(0, x)[:, None]  # (d/2, K), relative to I_0
    r = np.abs(phis)
    active = weight > 1e-17
    need = np.zeros_like(r)
    slow = active & (r >= 1.0 - 1e-15)
    decaying = active & ~slow & (r > 0)
    need[slow] = np.inf
    need[decaying] = np.log(1e-17 / weight[decaying]) / np.log(r[decaying])
    need[active & (r == 0)] = 1.0
    cut = int(min(n_max, np.ceil(np.max(need, initial=0.0)) + 1))
    log_i0 = np.log(sp.ive(0, x)) + x  # log I_0(x_b)
    phase = weight * np.exp(1j * j[None, :] * alpha[:, None])  # (d/2, K)
    parts = []
    for delta in _chunks(cut):
        # prod over planes of I_0(x_b) [1 + sum_j weight_bj Re(e^{i j alpha_b} phi_bj^Delta)]
        powers = np.power(phis[None], delta[:, None, None])  # (chunk, d/2, K)
        inner = 1.0 + np.sum((phase[None] * powers).real, axis=2)
        parts.append(np.sum(log_i0) - s0 + np.sum(np.log(inner), axis=1))
    return np.exp(np.concatenate(parts)), float(np.exp(np.sum(log_i0) - s0))


def _chunks(n: int, size: int = 8192):
    """Delta = 1..n in consecutive arrays of at most ``size`` (bounded memory for any far-set size)."""
    for start in range(1, n + 1, size):
        yield np.arange(start, min(start + size, n + 1))


def far_mass(angles: PlaneAngles, far_sizes: Sequence[int], s0: float, q: Any = None, k: Any = None,
             slope: float = 0.0) -> np.ndarray:
    """E M(N) = sum_{Delta=1}^N e^{-slope Delta} E exp(s_Delta - s0), s_Delta = s0 q^T A_Delta ... A_1 k, per N.

    ``slope`` > 0 adds the ALiBi bias -slope Delta.  Exact (``far_mass_terms`` + the constant tail
    f(inf) sum_{Delta > D} e^{-slope Delta} in closed form).  Shape (len(far_sizes),).
    """
    sizes = as_sizes(far_sizes)
    terms, limit = far_mass_terms(angles, int(sizes.max()), s0, q, k)
    cut = terms.size
    delta = np.arange(1, cut + 1)
    cum = np.concatenate([[0.0], np.cumsum(terms * np.exp(-slope * delta))])
    out = []
    for n in sizes:
        head = cum[min(n, cut)]
        tail = 0.0
        if n > cut:
            tail = limit * _geometric(slope, cut + 1, n)
        out.append(head + tail)
    return np.array(out)


def _geometric(slope: float, lo: int, hi: int) -> float:
    """sum_{Delta=lo}^{hi} e^{-slope Delta} (hi - lo + 1 when slope = 0)."""
    if slope == 0:
        return float(hi - lo + 1)
    r = math.exp(-slope)
    return float(r**lo * (-math.expm1(-slope * (hi - lo + 1))) / (-math.expm1(-slope)))


# --- symbolic derivations --------------------------------------------------------------------------------


def derive_characteristic(law: str):
    """Sympy derivation of phi(k) for a law, returning (expression, symbols dict).

    gaussian, uniform: the integral int e^{i k x} p(x) dx done by sympy; wrapped-cauchy: the Cauchy
    characteristic function (sympy.stats) with the wrapping identity E e^{i k (X mod 2 pi)} = E e^{i k X}
    for integer k; lattice: the finite geometric sum (1/m) sum_j e^{i k (offset + 2 pi j / m)} for a given
    m; vonmises: I_k(kappa)/I_0(kappa) e^{i k mu} from the integral representation
    I_k(kappa) = (1/pi) int_0^pi e^{kappa cos t} cos(k t) dt (A&S 9.6.19), stated, not integrated.
    """
    import sympy as sy

    k = sy.Symbol("k", integer=True, positive=True)
    x = sy.Symbol("x", real=True)
    mu = sy.Symbol("mu", real=True)
    if law == "gaussian":
        s = sy.Symbol("sigma", positive=True)
        pdf = sy.exp(-(x - mu) ** 2 / (2 * s**2)) / sy.sqrt(2 * sy.pi * s**2)
        expr = sy.simplify(sy.integrate(sy.exp(sy.I * k * x) * pdf, (x, -sy.oo, sy.oo)))
        return expr, {"k": k, "mu": mu, "sigma": s}
    if law == "uniform":
        a = sy.Symbol("a", positive=True)
        expr = sy.simplify(sy.integrate(sy.exp(sy.I * k * x) / (2 * a), (x, -a, a)).rewrite(sy.sin))
        return expr, {"k": k, "a": a}
    if law == "wrapped-cauchy":
        from sympy.stats import Cauchy, characteristic_function

        g = sy.Symbol("gamma", positive=True)
        expr = characteristic_function(Cauchy("X", mu, g))(k)
        return sy.simplify(expr), {"k": k, "mu": mu, "gamma": g}
    if law == "vonmises":
        kap = sy.Symbol("kappa", positive=True)
        return sy.exp(sy.I * k * mu) * sy.besseli(k, kap) / sy.besseli(0, kap), {"k": k, "mu": mu, "kappa": kap}
    if law == "lattice":
        off = sy.Symbol("offset", real=True)
        m = sy.Symbol("m", integer=True, positive=True)
        j = sy.Symbol("j", integer=True, nonnegative=True)
        expr = sy.Sum(sy.exp(sy.I * k * (off + 2 * sy.pi * j / m)), (j, 0, m - 1)) / m
        return expr, {"k": k, "offset": off, "m": m, "j": j}
    raise field_error("law", f"has no derivation here: {law!r}")
