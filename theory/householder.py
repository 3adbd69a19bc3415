"""Householder (PaTH) steps A = I - beta w w^T: mean product, norm shrinkage, second moments.

Setting: the issue's Householder results (DESIGN.md C1, C4).  A is orthogonal only for beta in {0, 2}
(beta = 2: an exact reflection); for beta in (0, 2) it contracts along w by |1 - beta|.

Sphere directions (w uniform on S^{d-1}, i.i.d. over steps).  With E[w w^T] = I/d and
E[w_i w_j w_k w_l] = (d_ij d_kl + d_ik d_jl + d_il d_jk) / (d (d + 2)):
* mean product     E[A_n ... A_1] = (1 - beta/d)^n I                                  (issue, stated there)
* norm shrinkage   E|A_n ... A_1 x|^2 = (1 - beta (2 - beta)/d)^n |x|^2                (issue, stated there)
  from A^T A = I - beta (2 - beta) w w^T.
* pair operator    E[A M A^T] = (1 - 2 beta/d) M + beta^2 / (d (d+2)) (tr(M) I + M + M^T)
  (reconstruction, derived here from the fourth moment), so on symmetric M it is
  a M + b tr(M) I with a = 1 - 2 beta/d + 2 beta^2/(d (d+2)), b = beta^2/(d (d+2)), and a + d b = tau.
* far score second moment  E[(q^T A_n ... A_1 k)^2] = a^n (q.k)^2 + (tau^n - a^n) |q|^2 |k|^2 / d
  (reconstruction: M_n = a^n M_0 + gamma_n I with tr M_n = tau^n tr M_0).
  For beta = 2 (tau = 1) it tends to |q|^2 |k|^2 / d, the Haar value.

Token directions (w_t = table[x_t], x_t i.i.d. uniform on V tokens): E[A] = I - beta C with
C = W^T W / V, so E[A_n ... A_1] = (I - beta C)^n exactly; it has no gap on the complement of span(W)
(directions no token touches are fixed), e.g. when V < d.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from accum.simulations.params import field_error

from ._common import probes


def _check(beta: float, d: int) -> None:
    if not (0.0 <= beta <= 2.0):
        raise field_error("beta", f"must lie in [0, 2], got {beta!r}")
    if d < 1:
        raise field_error("d", f"must be >= 1, got {d!r}")


def mean_rate(beta: float, d: int) -> float:
    """rho = 1 - beta/d: E[I - beta w w^T] = rho I for w uniform on S^{d-1}."""
    _check(beta, d)
    return 1.0 - beta / d


def mean_product(beta: float, d: int, n: Any) -> np.ndarray:
    """(1 - beta/d)^n: the scalar of E[A_n ... A_1] = (1 - beta/d)^n I (w uniform on the sphere). n may be an array."""
    return mean_rate(beta, d) ** np.asarray(n, dtype=float)


def norm_rate(beta: float, d: int) -> float:
    """tau = 1 - beta (2 - beta)/d = E|A x|^2 / |x|^2 (1 for the exact reflection beta = 2 and for beta = 0)."""
    _check(beta, d)
    return 1.0 - beta * (2.0 - beta) / d


def norm_shrinkage(beta: float, d: int, n: Any) -> np.ndarray:
    """E|A_n ... A_1 x|^2 / |x|^2 = (1 - beta (2 - beta)/d)^n (w uniform on the sphere)."""
    return norm_rate(beta, d) ** np.asarray(n, dtype=float)


def pair_coefficients(beta: float, d: int) -> tuple[float, float]:
    """(a, b) with E[A M A^T] = a M + b tr(M) I on symmetric M; a = 1 - 2beta/d + 2beta^2/(d(d+2)), b = beta^2/(d(d+2))."""
    _check(beta, d)
    b = beta**2 / (d * (d + 2.0))
    return 1.0 - 2.0 * beta / d + 2.0 * b, b


def pair_operator(beta: float, d: int) -> np.ndarray:
    """E[A (x) A] as a (d^2, d^2) matrix, acting on row-major vec(M) as vec(E[A M A^T]) (numpy ``kron`` layout).

    E[A M A^T] = (1 - 2 beta/d) M + beta^2/(d(d+2)) (tr(M) I + M + M^T)   (module docstring).
    """
    _check(beta, d)
    eye = np.eye(d * d)
    swap = np.eye(d * d).reshape(d, d, d, d).transpose(0, 1, 3, 2).reshape(d * d, d * d)  # vec(M) -> vec(M^T)
    vi = np.eye(d).reshape(-1)
    c = beta**2 / (d * (d + 2.0))
    return (1.0 - 2.0 * beta / d) * eye + c * (np.outer(vi, vi) + eye + swap)


def far_second_moment(beta: float, d: int, n: Any, q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """E[(q^T A_n ... A_1 k)^2] = a^n (q.k)^2 + (tau^n - a^n) |q|^2 |k|^2 / d (sphere directions)."""
    a, _ = pair_coefficients(beta, d)
    tau = norm_rate(beta, d)
    n = np.asarray(n, dtype=float)
    q, k = np.asarray(q, float), np.asarray(k, float)
    return a**n * float(q @ k) ** 2 + (tau**n - a**n) * float(q @ q) * float(k @ k) / d


def far_second_moment_limit(beta: float, d: int, q: np.ndarray, k: np.ndarray) -> float:
    """n -> infinity: 0 for beta in (0, 2) (tau < 1); |q|^2 |k|^2 / d for the reflection beta = 2; (q.k)^2 for beta = 0."""
    if beta == 0:
        return float(np.dot(q, k)) ** 2
    return float(np.dot(q, q) * np.dot(k, k) / d) if beta == 2 else 0.0


def direction_table(vocab: int, d: int, table_seed: int) -> np.ndarray:
    """Unit rows (V, d): normalised default_rng(table_seed).normal(size=(V, d)) -- the engine's token table."""
    g = np.random.default_rng(table_seed).normal(size=(vocab, d))
    return g / np.linalg.norm(g, axis=1, keepdims=True)


def token_step_mean(beta: float, table: np.ndarray) -> np.ndarray:
    """E[A] = I - beta W^T W / V for w uniform over the V table rows, (d, d)."""
    v, d = table.shape
    return np.eye(d) - beta * table.T @ table / v


def token_pair_operator(beta: float, table: np.ndarray) -> np.ndarray:
    """E[A (x) A] = (1/V) sum_v kron(A_v, A_v), (d^2, d^2), exact finite average."""
    v, d = table.shape
    mats = np.eye(d)[None] - beta * table[:, :, None] * table[:, None, :]
    return np.einsum("vij,vkl->ikjl", mats, mats).reshape(d * d, d * d) / v


def family_parts(family: Any) -> dict:
    """Step-law summary of a householder family (``beta``, ``dim``, ``w`` and, for w=token, ``vocab`` and
    ``table_seed``): beta, d, and for w=token the table.  ``theory.forms`` sends only the built-in householder
    family here."""
    out = {"beta": float(family.beta), "d": int(family.dim), "w": family.w}
    if family.w == "token":
        out["table"] = direction_table(family.vocab, family.dim, family.table_seed)
    return out


def coherence(family: Any, n: int, q: Any = None, k: Any = None) -> np.ndarray:
    """c(t) = q^T E[A_t ... A_1] k, t = 0..n: (1 - beta/d)^t q.k (sphere); q^T (I - beta C)^t k (token)."""
    parts = family_parts(family)
    q, k = probes(family.dim, q, k)
    if parts["w"] == "sphere":
        return mean_product(parts["beta"], parts["d"], np.arange(n + 1)) * float(q @ k)
    mean = token_step_mean(parts["beta"], parts["table"])
    out, x = np.empty(n + 1), k.copy()
    for t in range(n + 1):
        out[t] = q @ x
        x = mean @ x
    return out


def mean_product_sq(family: Any, n: int) -> np.ndarray:
    """||E[A_t ... A_1]||_F^2 / d, t = 0..n: (1 - beta/d)^{2t} (sphere); ||(I - beta C)^t||_F^2 / d (token)."""
    parts = family_parts(family)
    if parts["w"] == "sphere":
        return mean_product(parts["beta"], parts["d"], 2 * np.arange(n + 1))
    eig = np.linalg.eigvalsh(token_step_mean(parts["beta"], parts["table"]))
    return np.array([np.sum(eig ** (2 * t)) for t in range(n + 1)]) / family.dim


def family_far_second_moment(family: Any, n: int, q: Any = None, k: Any = None) -> float:
    """E[(q^T A_n ... A_1 k)^2]: closed form (sphere) or the exact pair-operator power (token)."""
    parts = family_parts(family)
    q, k = probes(family.dim, q, k)
    if parts["w"] == "sphere":
        return float(far_second_moment(parts["beta"], parts["d"], n, q, k))
    op = token_pair_operator(parts["beta"], parts["table"])
    vec = np.outer(k, k).reshape(-1)
    for _ in range(n):
        vec = op @ vec
    return float(q @ vec.reshape(family.dim, family.dim) @ q)


def family_far_second_moment_curve(family: Any, n: int, q: Any = None, k: Any = None) -> np.ndarray:
    """``family_far_second_moment`` at every lag t = 0..n, (n+1,), the token pair operator applied once per lag."""
    parts = family_parts(family)
    q, k = probes(family.dim, q, k)
    if parts["w"] == "sphere":
        return np.asarray(far_second_moment(parts["beta"], parts["d"], np.arange(n + 1), q, k), dtype=float)
    op = token_pair_operator(parts["beta"], parts["table"])
    return quadratic_curve(op, q, k, n)


def quadratic_curve(op: np.ndarray, q: np.ndarray, k: np.ndarray, n: int) -> np.ndarray:
    """q^T S^t(k k^T) q for t = 0..n, S the pair operator ``op`` (d^2, d^2) acting on vec(X)."""
    d = q.size
    vec, out = np.outer(k, k).reshape(-1), np.empty(n + 1)
    for t in range(n + 1):
        out[t] = q @ vec.reshape(d, d) @ q
        vec = op @ vec
    return out


# --- symbolic derivations --------------------------------------------------------------------------------


def derive_sphere_moments():
    """E[w_1^2] = 1/d, E[w_1^4] = 3/(d(d+2)), E[w_1^2 w_2^2] = 1/(d(d+2)) by the Gaussian trick (sympy).

    g ~ N(0, I_d) factorises as g = |g| w with |g| independent of w, so E[g_1^4] = E|g|^4 E[w_1^4] and
    E[g_1^2 g_2^2] = E|g|^4 E[w_1^2 w_2^2]; E|g|^4 = d(d+2) (chi-square moments), E[g_1^4] = 3.
    Returns a dict of sympy expressions in the positive integer symbol d.
    """
    import sympy as sy
    from sympy.stats import ChiSquared, E, Normal

    d = sy.Symbol("d", positive=True, integer=True)
    g = Normal("g", 0, 1)
    r2 = ChiSquared("R2", d)  # |g|^2
    norm4 = sy.simplify(E(r2**2))
    return {"d": d, "w2": sy.Integer(1) / d, "w4": sy.simplify(E(g**4) / norm4),
            "w2w2": sy.simplify(E(g**2) ** 2 / norm4), "norm4": norm4}


def derive_rates():
    """Sympy: rho = 1 - beta/d, tau = 1 - beta(2-beta)/d, (a, b) of the pair operator, from the moments.

    On M = e_1 e_1^T (symmetric), E[A M A^T]_{11} = 1 - 2 beta E w_1^2 + beta^2 E w_1^4 = a + b and
    E[A M A^T]_{22} = beta^2 E[w_1^2 w_2^2] = b; tau = E|A e_1|^2 = 1 - 2 beta E w_1^2 + beta^2 E w_1^2.
    """
    import sympy as sy

    mom = derive_sphere_moments()
    beta = sy.Symbol("beta", nonnegative=True)
    b = sy.simplify(beta**2 * mom["w2w2"])
    a = sy.simplify(1 - 2 * beta * mom["w2"] + beta**2 * mom["w4"] - b)
    rho = sy.simplify(1 - beta * mom["w2"])
    tau = sy.simplify(1 - 2 * beta * mom["w2"] + beta**2 * mom["w2"])
    return {"d": mom["d"], "beta": beta, "rho": rho, "tau": tau, "a": a, "b": b}
