"""Value rotation (C6): the far residual adds incoherently when values are transported like keys.

Setting (the estimator ``far_residual``): with uniform far weights the residual is
    r(N) = (1/N) sum_{j=1}^N P_j m,   P_j the path product to far token j,
and without value rotation (QK-only) P_j = I, so r = m and |r|^2 = |m|^2 whatever N.

SO(2) planes (issue).  Per plane, E conj(z_j) z_l picks up E e^{i(Theta_j - Theta_l)} = psi(|j - l|) (conj for
j < l), with psi(k) = phi^k for i.i.d. angles, so
    E|r|^2 = sum_b (|z_mb|^2 / N^2) sum_{j,l=1}^N Re psi_b(|j - l|)
           = sum_b (|z_mb|^2 / N^2) [N + 2 Re sum_{k=1}^{N-1} (N - k) psi_b(k)]               (exact, finite N)
and for psi(k) = phi^k:  sum_{k=1}^{N-1} (N - k) phi^k = phi (N (1 - phi) - (1 - phi^N)) / (1 - phi)^2, so
    E|r|^2 / |m_b|^2 -> Re((1 + phi)/(1 - phi)) / N = (1 - |phi|^2) / (|1 - phi|^2 N)      (N -> infinity)
which is (1 + rho) / ((1 - rho) N) for a real rate rho (the paper's form).  Token chains use the transfer
matrix psi(k) = pi^T D (P D)^{k-1} 1; the weighted sum is then the matrix sum of ``_common.weighted_power_sums``.

Isotropic families (E[A] = rho I, E[A^T A] = tau I, i.i.d. steps; reconstruction): for j > l,
P_j = P_l C with C independent of P_l, so E[m^T P_j^T P_l m] = rho^{j-l} tau^l |m|^2 and
    E|r|^2 / |m|^2 = (1/N^2) [ sum_{j=1}^N tau^j + 2 sum_{1 <= l < j <= N} rho^{j-l} tau^l ]
(tau = 1 for orthogonal steps; Haar: rho = 0, so exactly 1/N).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._common import as_sizes, planes, unit_probe, weighted_power_sums


def residual_sq(phi: Any, n_far: Any) -> np.ndarray:
    """Exact E|r|^2 / |m|^2 for one plane with i.i.d. angles of characteristic phi (complex allowed), per N.

    (N + 2 Re S) / N^2 with S = sum_{k=1}^{N-1} (N - k) phi^k computed without dividing by (1 - phi)
    (``_common.weighted_power_sums``), so phi = 1 (no rotation, lattice) gives 1 exactly.  Shapes broadcast:
    phi (...,) against n_far (M,) -> (..., M).
    """
    phi = np.asarray(phi, dtype=complex)
    sizes = as_sizes(n_far)
    out = np.empty(phi.shape + (sizes.size,))
    for i, n in enumerate(sizes):
        out[..., i] = _plane_residual(phi, int(n))
    return out


def _plane_residual(phi: np.ndarray, n: int) -> np.ndarray:
    # S = sum_{k=1}^{n-1} (n - k) phi^k = phi * sum_{j=0}^{n-2} (n - 1 - j) phi^j
    _, g2 = weighted_power_sums(phi.reshape(-1, 1, 1), n)
    s = phi.reshape(-1) * g2[:, 0, 0]
    return ((n + 2.0 * s.real) / n**2).reshape(phi.shape)


def residual_sq_closed(phi: complex, n_far: Any) -> np.ndarray:
    """Same as ``residual_sq`` through the closed form phi (N(1 - phi) - (1 - phi^N)) / (1 - phi)^2 (phi != 1)."""
    n = np.asarray(n_far, dtype=float)
    s = phi * (n * (1 - phi) - (1 - phi**n)) / (1 - phi) ** 2
    return (n + 2.0 * np.real(s)) / n**2


def residual_sq_limit(phi: Any, n_far: Any) -> np.ndarray:
    """Large-N form Re((1 + phi)/(1 - phi)) / N; (1 + rho)/((1 - rho) N) for real rho."""
    phi = np.asarray(phi, dtype=complex)
    return np.real((1 + phi) / (1 - phi))[..., None] / np.asarray(n_far, dtype=float)


def residual_sq_without_rotation(n_far: Any) -> np.ndarray:
    """QK-only arm: r = m, |r|^2 / |m|^2 = 1 for every N."""
    return np.ones(np.shape(np.asarray(n_far)))


def residual_sq_chain(pi: np.ndarray, p: np.ndarray, phases: np.ndarray, n_far: Any) -> np.ndarray:
    """Exact per-plane E|r|^2/|m_b|^2 for token angles g_b(x) along a stationary chain, (B, M).

    psi(k) = pi^T D (P D)^{k-1} 1, so sum_{k=1}^{N-1} (N - k) psi(k) = pi^T D [sum_{j=0}^{N-2} (N-1-j) (P D)^j] 1.
    phases: (B, V) angles per plane and state.
    """
    sizes = as_sizes(n_far)
    e = np.exp(1j * np.asarray(phases, dtype=float))  # (B, V)
    mats = p[None, :, :] * e[:, None, :]  # P D_b
    out = np.empty((e.shape[0], sizes.size))
    for i, n in enumerate(sizes):
        _, g2 = weighted_power_sums(mats, int(n))
        s = np.einsum("v,bv,bvw->b", pi, e, g2)
        out[:, i] = (n + 2.0 * s.real) / n**2
    return out


def residual_sq_isotropic(rho: float, tau: float, n_far: Any) -> np.ndarray:
    """(1/N^2) [sum_j tau^j + 2 sum_{l<j} rho^{j-l} tau^l] for E[A] = rho I, E[A^T A] = tau I (module docstring).

    The double sum is sum_{l=1}^{N-1} tau^l sum_{k=1}^{N-l} rho^k, evaluated in O(N) per size.
    """
    sizes = as_sizes(n_far)
    out = []
    for n in sizes:
        l = np.arange(1, n + 1, dtype=float)
        tau_l = tau**l
        # inner(l) = sum_{k=1}^{N-l} rho^k
        if rho == 1.0:
            inner = n - l
        else:
            inner = rho * (1.0 - rho ** (n - l)) / (1.0 - rho)
        out.append((np.sum(tau_l) + 2.0 * np.sum(tau_l * inner)) / n**2)
    return np.array(out)


def block_residual_sq(angles: Any, n_far: Any, m: Any = None, value_rotation: bool = True) -> np.ndarray:
    """E|r(N)|^2 / |m|^2 for SO(2) blocks turned by ``angles`` (``so2.PlaneAngles``; m defaults to 1/sqrt(d)),
    per N in ``n_far``: the per-plane residuals (``residual_sq``; ``residual_sq_chain`` for a token law) weighted
    by each plane's share |z_mb|^2 / |m|^2 of m."""
    sizes = as_sizes(n_far)
    if not value_rotation:
        return residual_sq_without_rotation(sizes)
    d = angles.dim
    m = unit_probe(d) if m is None else np.asarray(m, dtype=float)
    from . import so2

    weights = np.abs(planes(m)) ** 2 / float(m @ m)
    tokens = so2.token_law(angles)
    if tokens is not None:
        pi, p = so2.token_chain(tokens, d // 2)
        per_plane = residual_sq_chain(pi, p, tokens.table(d).T, sizes)
    else:
        per_plane = residual_sq(so2.plane_characteristic(angles, 1), sizes)
    return weights @ per_plane


def scalar_residual_sq(rho: float, tau: float, n_far: Any, value_rotation: bool = True) -> np.ndarray:
    """E|r(N)|^2 / |m|^2 for i.i.d. steps with E[A] = rho I and E[A^T A] = tau I (any m), per N in ``n_far``
    (``residual_sq_isotropic``)."""
    sizes = as_sizes(n_far)
    if not value_rotation:
        return residual_sq_without_rotation(sizes)
    return residual_sq_isotropic(rho, tau, sizes)


def derive_residual_sq():
    """Sympy: (1/N^2) sum_{j,l=1}^N rho^{|j-l|} in closed form, and lim_{N->oo} N times it = (1+rho)/(1-rho).

    The double sum is split as N + 2 sum_{k=1}^{N-1} (N - k) rho^k and summed symbolically.
    """
    import sympy as sy

    rho = sy.Symbol("rho", positive=True)
    n = sy.Symbol("N", positive=True, integer=True)
    k = sy.Symbol("k", positive=True, integer=True)
    inner = sy.summation((n - k) * rho**k, (k, 1, n - 1))
    exact = sy.simplify((n + 2 * inner) / n**2)
    u = sy.Symbol("u", positive=True)  # rho = 1/(1+u) in (0, 1)
    exact_u = exact.subs(rho, 1 / (1 + u))
    if isinstance(exact_u, sy.Piecewise):
        exact_u = exact_u.args[-1][0]
    limit = sy.simplify(sy.limit(n * exact_u, n, sy.oo).subs(u, 1 / rho - 1))
    return {"rho": rho, "N": n, "exact": exact, "limit_N_times": limit}
