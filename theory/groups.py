"""Isotropic-mean families: Haar, Givens and the Lie walk (E[A] = rho I), and NoPE (A = I).

Haar (issue: "zero after one step").  For A Haar on O(d) (d >= 1) or SO(d) (d >= 2), right invariance
gives E[A] = E[A G] = E[A] G for every fixed G of the group; for a unit v take G with G v = -v (a rotation
by pi in a plane containing v, or -I in O(1)), so E[A] v = -E[A] v = 0.  Every product of >= 1 independent
Haar steps is Haar, hence E[A_n ... A_1] = 0 for n >= 1, and q^T P k has the law of |q||k| u_1 with u
uniform on S^{d-1}, so E[(q^T P k)^2] = |q|^2 |k|^2 / d (C4, stated in the paper).  SO(1) = {1} is the exception (E[A] = 1).

Givens: a rotation by theta ~ N(0, sigma^2) in a uniformly random coordinate plane (i, j).  Each coordinate
lies in the plane with probability 2/d, and E cos theta = e^{-sigma^2/2}, E sin theta = 0, so
    rho = 1 - (2/d) (1 - e^{-sigma^2/2})                                      (reconstruction, derived here).

Lie walk: A = expm(X), X skew with i.i.d. N(0, sigma^2) entries above the diagonal.  The law of X is
invariant under X -> O X O^T for every O in O(d), so E[A] = rho I with rho = E[tr A] / d.  The eigenvalues
of X are +-i x_j (j = 1..floor(d/2), plus a 0 when d is odd) with joint density proportional to
prod_{j<l} (x_j^2 - x_l^2)^2 prod_j x_j^{2 (d mod 2)} exp(-x_j^2 / (2 sigma^2)) (Mehta, "Random Matrices",
ch. 13, antisymmetric Gaussian ensemble).  In the variable x this is a determinantal process built from the
even (d even) or odd (d odd) Hermite functions, and int h_n(u)^2 cos(t u) du = e^{-t^2/4} L_n(t^2/2)
(L_n Laguerre), which gives the exact rate
    rho = [ (d mod 2) + 2 e^{-sigma^2/2} sum_{j=0}^{floor(d/2)-1} L_{2j + (d mod 2)}(sigma^2) ] / d
(reconstruction, derived here; d = 2: e^{-sigma^2/2}; d = 3: (1 + 2 (1 - sigma^2) e^{-sigma^2/2}) / 3).
The heat-kernel approximation rho ~ exp(-(d - 1) sigma^2 / 2) (Brownian motion on SO(d) with the Casimir
E[X^2] = -(d - 1) sigma^2 I; the issue names "heat-kernel decay", this explicit form is a reconstruction)
agrees to first order in sigma^2; ``lie_walk_heat_kernel`` gives it.  Products decay as rho^n either way.

Lie walk, second moment.  The same invariance makes E[A_ij A_kl] = a d_ij d_kl + b d_ik d_jl + c d_il d_jk (the
O(d)-invariants of V (x) V (x) V (x) V that pair the indices: Brauer), and contracting with the three pairings gives
    Q = E[(tr A)^2] = a d^2 + b d + c d,   E[|A|_F^2] = a d + b d^2 + c d = d (A orthogonal),
    S = E[tr A^2]   = a d + b d + c d^2,   S = E[tr expm(2X)] = d rho(2 sigma).
With p = d mod 2 and N = floor(d/2), tr A = p + sum_j f(x_j), f(x) = 2 cos x, a linear statistic of the
determinantal process above (projection kernel on the N functions sqrt(2) h_{2k+p}), so
    E[sum f] = tr F,  Var[sum f] = sum_k int f^2 phi_k^2 - |F|_F^2,  F_kl = int f(sqrt(2) sigma u) h_a(u) h_b(u) du
(a = 2k + p, b = 2l + p; int f^2 phi_k^2 = 2 + F(2 sigma)_kk as f^2 = 2 + 2 cos 2x), and the Fourier transform
of a product of Hermite functions, int h_a h_b e^{itu} du = sqrt(a!/b!) (it/sqrt2)^(b-a) e^{-t^2/4} L_a^(b-a)(t^2/2)
(a <= b), gives F in closed form.  Hence Q = (p + tr F)^2 + sum_k (2 + F(2 sigma)_kk) - |F|_F^2 (reconstruction,
derived here; sigma = 0 gives d^2, and sigma -> infinity Q -> d and S -> p: the eigenangles sigma x_j wrap to
independent uniform angles, which is not the Haar law, whose eigenangles repel).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import scipy.special as sp

from accum.simulations.params import field_error


def haar_mean(d: int, n: Any, group: str = "O") -> np.ndarray:
    """Scalar of E[A_n ... A_1] for Haar steps: 1 at n = 0, 0 for n >= 1 (1 for SO(1) = {1})."""
    n = np.asarray(n)
    if group == "SO" and d == 1:
        return np.ones(n.shape)
    return (n == 0).astype(float)


def haar_far_second_moment(q_norm_sq: float, k_norm_sq: float, d: int) -> float:
    """E[(q^T P k)^2] = |q|^2 |k|^2 / d for P Haar on O(d) or SO(d) (d >= 2): u_1^2 ~ Beta(1/2, (d-1)/2)."""
    return q_norm_sq * k_norm_sq / d


def givens_rate(d: int, sigma: float) -> float:
    """rho = 1 - (2/d)(1 - exp(-sigma^2/2)) for the random-plane Givens step (d >= 2)."""
    if d < 2:
        raise field_error("d", f"must be >= 2 for Givens rotations, got {d}")
    return 1.0 - 2.0 / d * (-math.expm1(-sigma**2 / 2.0))


def givens_pair_operator(d: int, sigma: float) -> np.ndarray:
    """E[A (x) A] (d^2, d^2) for the Givens step, exact: average over the d(d-1)/2 planes of
    E over theta of kron(A, A) with A = B0 + cos(theta) B1 + sin(theta) B2, using E cos = e^{-s^2/2},
    E sin = 0, E cos^2 = (1 + e^{-2 s^2})/2, E sin^2 = (1 - e^{-2 s^2})/2, E cos sin = 0.
    """
    c1, c2 = math.exp(-sigma**2 / 2), (1 + math.exp(-2 * sigma**2)) / 2
    s2 = 1.0 - c2
    eye = np.eye(d)
    total = np.zeros((d * d, d * d))
    pairs = 0
    for i in range(d):
        for j in range(i + 1, d):
            b1 = np.zeros((d, d))
            b1[i, i] = b1[j, j] = 1.0
            b0 = eye - b1
            b2 = np.zeros((d, d))
            b2[j, i], b2[i, j] = 1.0, -1.0
            k = np.kron
            total += (k(b0, b0) + c1 * (k(b0, b1) + k(b1, b0)) + c2 * k(b1, b1) + s2 * k(b2, b2))
            pairs += 1
    return total / pairs


def lie_walk_rate(d: int, sigma: float) -> float:
    """Exact rho = E[tr expm(X)] / d for the Lie walk (module docstring; reconstruction)."""
    if d < 1:
        raise field_error("d", f"must be >= 1, got {d}")
    odd = d % 2
    orders = 2 * np.arange(d // 2) + odd
    s2 = sigma**2
    return float((odd + 2.0 * math.exp(-s2 / 2.0) * np.sum(sp.eval_laguerre(orders, s2))) / d)


def lie_walk_cos_matrix(d: int, sigma: float) -> np.ndarray:
    """F (N, N), N = floor(d/2): F_kl = int 2 cos(sqrt(2) sigma u) h_a(u) h_b(u) du with a = 2k + p, b = 2l + p,
    p = d mod 2 (h_n the Hermite functions); for a <= b,
        F_kl = 2 (-1)^((b-a)/2) sqrt(a!/b!) sigma^(b-a) e^{-sigma^2/2} L_a^(b-a)(sigma^2)
    (module docstring; its trace is d rho - p, ``lie_walk_rate``)."""
    if d < 1:
        raise field_error("d", f"must be >= 1, got {d}")
    if sigma < 0:
        raise field_error("sigma", f"must be >= 0, got {sigma}")
    orders = 2 * np.arange(d // 2) + d % 2
    low, high = np.minimum.outer(orders, orders), np.maximum.outer(orders, orders)
    gap = high - low
    if sigma > 0:
        power = np.exp(0.5 * (sp.gammaln(low + 1) - sp.gammaln(high + 1)) + gap * math.log(sigma))
    else:
        power = (gap == 0).astype(float)
    sign = np.where((gap // 2) % 2 == 0, 1.0, -1.0)
    return 2.0 * sign * power * math.exp(-sigma**2 / 2.0) * sp.eval_genlaguerre(low, gap, sigma**2)


def lie_walk_trace_moments(d: int, sigma: float) -> tuple[float, float]:
    """(Q, S) = (E[(tr A)^2], E[tr A^2]) of one Lie-walk step, exact (module docstring)."""
    f1, f2 = lie_walk_cos_matrix(d, sigma), lie_walk_cos_matrix(d, 2.0 * sigma)
    p = d % 2
    q = (p + np.trace(f1)) ** 2 + np.sum(2.0 + np.diag(f2)) - np.sum(f1**2)
    return float(q), float(p + np.trace(f2))


def isotropic_pair_coefficients(d: int, trace_sq: float, norm_sq: float, trace_of_sq: float) -> np.ndarray:
    """(a, b, c) of E[A_ij A_kl] = a d_ij d_kl + b d_ik d_jl + c d_il d_jk for a step law invariant under
    A -> G A G^T (G orthogonal), from Q = E[(tr A)^2], E[|A|_F^2] and S = E[tr A^2]: the three contractions of the
    module docstring, (d (d - 1) I + d 11') (a, b, c) = (Q, E|A|_F^2, S)."""
    return np.linalg.solve(d * (d - 1) * np.eye(3) + d * np.ones((3, 3)), [trace_sq, norm_sq, trace_of_sq])


def isotropic_pair_operator(d: int, coefficients: np.ndarray) -> np.ndarray:
    """E[A (x) A] (d^2, d^2, ``kron`` layout: entry ((i, k), (j, l)) = E[A_ij A_kl]) from the coefficients (a, b, c)
    of ``isotropic_pair_coefficients``: a I + b vec(I) vec(I)^T + c K (K the commutation matrix)."""
    a, b, c = coefficients
    eye = np.eye(d)
    vec_eye = eye.reshape(-1)
    swap = np.einsum("il,kj->ikjl", eye, eye).reshape(d * d, d * d)
    return a * np.eye(d * d) + b * np.outer(vec_eye, vec_eye) + c * swap


def isotropic_far_variance_curve(d: int, coefficients: np.ndarray, steps: int, q: np.ndarray,
                                 k: np.ndarray) -> np.ndarray:
    """d E[(q'A_t..A_1 k)^2] = d q' S^t(kk') q for t = 0..steps, (steps+1,), for i.i.d. steps whose S(X) = E[A X A^T]
    = a X + b tr(X) I + c X^T (``isotropic_pair_coefficients``).  On X = alpha kk' + beta I, S(X) = (a + c) X
    + b tr(X) I, so alpha <- (a + c) alpha and beta <- (a + c) beta + b (alpha |k|^2 + beta d), from (1, 0); the value
    at t is d (alpha_t (q'k)^2 + beta_t |q|^2)."""
    a, b, c = coefficients
    alpha, beta = np.ones(steps + 1), np.zeros(steps + 1)
    for t in range(steps):
        alpha[t + 1] = (a + c) * alpha[t]
        beta[t + 1] = (a + c) * beta[t] + b * (alpha[t] * float(k @ k) + beta[t] * d)
    return d * (alpha * float(q @ k) ** 2 + beta * float(q @ q))


def lie_walk_pair_coefficients(d: int, sigma: float) -> np.ndarray:
    """(a, b, c) of one Lie-walk step's E[A (x) A], exact: ``lie_walk_trace_moments`` and E[|A|_F^2] = d."""
    trace_sq, trace_of_sq = lie_walk_trace_moments(d, sigma)
    return isotropic_pair_coefficients(d, trace_sq, float(d), trace_of_sq)


def lie_walk_pair_operator(d: int, sigma: float) -> np.ndarray:
    """E[A (x) A] (d^2, d^2) of one Lie-walk step, exact (``isotropic_pair_operator``)."""
    return isotropic_pair_operator(d, lie_walk_pair_coefficients(d, sigma))


def lie_walk_heat_kernel(d: int, sigma: float) -> float:
    """Heat-kernel approximation exp(-(d-1) sigma^2 / 2) of the Lie-walk rate (first order in sigma^2)."""
    return math.exp(-(d - 1) * sigma**2 / 2.0)


def derive_lie_walk_small_sigma(d: int):
    """Sympy: series of the exact Lie-walk rate in s = sigma^2 to first order, for a given d.

    Returns (exact expression in s, its first-order coefficient); the heat-kernel claim is that the
    coefficient equals -(d - 1)/2.
    """
    import sympy as sy

    s = sy.Symbol("s", positive=True)
    odd = d % 2
    expr = (odd + 2 * sy.exp(-s / 2) * sum(sy.assoc_laguerre(2 * j + odd, 0, s) for j in range(d // 2))) / d
    coeff = sy.diff(expr, s).subs(s, 0)
    return sy.simplify(expr), sy.nsimplify(sy.simplify(coeff))
