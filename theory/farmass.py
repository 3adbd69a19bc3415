"""Far mass E M(N) = sum_{Delta=1}^N e^{-slope Delta} E exp(s_Delta - s0), s_Delta = s0 q^T A_Delta ... A_1 k, for
the families that ``theory.so2`` and ``theory.far`` leave without one (C5).  Reconstructions, derived here.

1. Householder steps, w uniform on the sphere, any beta in [0, 2], d >= 3 (closed form).
   Write x_t = A_t ... A_1 k_hat = r_t e_t (|e_t| = 1, r_0 = 1).  With c_t = w_t . e_{t-1}:
       r_t^2 = r_{t-1}^2 rho(c_t)^2,  rho(c)^2 = 1 - beta (2 - beta) c^2,
       e_t . e_{t-1} = gamma(c_t) = (1 - beta c_t^2) / rho(c_t),
   and given c_t the new direction is uniform on the circle of that cosine around e_{t-1} (w = c e + sqrt(1-c^2) v,
   v uniform on the sphere orthogonal to e); c_t^2 ~ Beta(1/2, (d-1)/2), i.i.d. over t.  The Gegenbauer
   polynomials C_l = C_l^alpha, alpha = (d-2)/2, are the zonal spherical functions, so (Funk-Hecke)
       E[C_l(q_hat . e_t) | c_1..c_t] = C_l(q_hat . k_hat) prod_{t' <= t} C_l(gamma(c_t')) / C_l(1).
   The expansion e^{z t} = Gamma(alpha) (z/2)^{-alpha} sum_l (l + alpha) I_{l+alpha}(z) C_l(t) (DLMF 10.23.8)
   with z = s r (s = s0 |q||k|) and (z/2)^{-alpha} I_{l+alpha}(z) = sum_m (z/2)^{l+2m} / (m! Gamma(l+alpha+m+1))
   puts r^{l+2m} next to prod_t C_l(gamma(c_t)); the c_t are independent, so
       E exp(s0 q^T P_Delta k) = Gamma(alpha) sum_{l,m} (l+alpha) C_l(q_hat.k_hat) (s/2)^{l+2m} / (m! Gamma(l+alpha+m+1))
                                  mu_{lm}^Delta,
       mu_{lm} = E[rho(c)^{l+2m} C_l(gamma(c)) / C_l(1)],
   a double series of geometric sequences in Delta (summed over Delta in closed form).  rho^{l+2m} C_l(gamma) is a
   polynomial of degree <= l + m in y = c^2, so Gauss-Jacobi quadrature for the Beta weight evaluates mu exactly.
   beta = 2 (reflections): rho = 1 and mu_{lm} = lambda_l = E C_l(1 - 2c^2)/C_l(1), and as Delta -> infinity only
   l = 0 survives: the Haar value 0F1(; d/2; s^2/4) (``far.haar_mgf``).  beta in (0, 2): mu_{lm} < 1 except l = m = 0,
   so every far score tends to 0 and E M(N) - N e^{-s0} converges: the far set tends to uniform weight.
   Truncation: |mu| <= 1 and |C_l(t)| <= C_l(1) bound each term by its value at t = 1, r = 1; terms are kept until
   that bound is below 1e-17 e^{s} (the bounds sum to e^{s}).

2. Token angles on SO(2) blocks (law = token, i.i.d. or Markov source; transfer matrices).  With c_b =
   conj(z_qb) z_kb, x_b = s0 |c_b|, a_b = arg c_b and e^{x cos phi} = sum_{j in Z} I_j(x) e^{i j phi}
   (A&S 9.6.34), over the d/2 planes
       exp(s0 q^T P_Delta k) = sum_{j in Z^{d/2}} prod_b I_{j_b}(x_b) e^{i j_b a_b}  exp(i j . Theta(Delta)),
   and the planes share the tokens, so E exp(i j . Theta(Delta)) = pi^T D_j (P D_j)^{Delta-1} 1 with
   D_j = diag_x exp(i sum_b j_b table[x, b]) (``so2.chain_characteristic``).  Summed over Delta = 1..N in closed form
   as a geometric series of the matrix P D_j (``chain_sums``).  Modes j are kept while prod_b I_{j_b}(x_b)/I_0(x_b)
   >= ``MODE_WEIGHT``; the neglected weight is exact (sum over all j is prod_b e^{x_b}/I_0(x_b)) and bounds the error of every lag's term by
   that fraction of e^{-s0} prod_b I_0(x_b).

3. Orthogonal steps whose walk on the sphere mixes (Givens, Householder reflections on a token table, Lie walk):
   estimated.  The stationary law of P_Delta k_hat is uniform on the sphere, so f(inf) = e^{-s0} 0F1(; d/2; s^2/4)
   (closed form); the transient sum_{Delta <= D} (f(Delta) - f(inf)) is estimated from ``samples`` paths of the
   one-step law run through the plain fp64 reference (``simulations.reference.transport``, not the streaming
   estimator), with its standard error (n - 1 dof), and taken as complete once rate^D <= ``TRANSIENT_DECAY``
   (rate = the slowest |eigenvalue| of E[A], the coherence rate).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import scipy.special as sp

from accum.simulations import reference
from accum.simulations.montecarlo import controlled_mean

from . import far, so2
from ._common import NoClosedForm, as_sizes, plane_coefficients, probes

#: modes j of the token-law expansion kept while their relative Bessel weight is at least this (so2 token law,
#: d = 16, s0 = 4: 68k modes, about 4 s; against 1e-8 (1M modes) the far mass differs by 3e-4 relative at N = 1
#: and 2e-5 at N = 1000)
MODE_WEIGHT = 1e-5
#: most modes of the token-law expansion (each is a V x V eigenproblem)
MAX_MODES = 3_000_000
#: the transient of a mixing family is complete at the lag D where rate^D <= this
TRANSIENT_DECAY = 1e-8
#: most lags D of an estimated transient
MAX_TRANSIENT = 5000


def geometric_sums(ratio: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """sum_{Delta=1}^N r^Delta for each ratio r (any shape, complex allowed) and each N: shape ratio.shape + (len,).

    r (1 - r^N) / (1 - r), and N where |1 - r| < 1e-12 (r = 1)."""
    r = np.asarray(ratio)[..., None]
    n = np.asarray(sizes, dtype=float)
    one = np.abs(1.0 - r) < 1e-12
    with np.errstate(divide="ignore", invalid="ignore"):
        out = r * (1.0 - r**n) / (1.0 - r)
    return np.where(one, n * np.ones_like(r), out)


# --- 1. Householder steps on the sphere ------------------------------------------------------------------


def series_orders(s: float) -> int:
    """L = M: orders of the (l, m) series at which every dropped term is below 1e-17 e^s (module docstring)."""
    return int(math.ceil(2.0 * s + 40.0))


def gegenbauer_coefficients(s: float, t0: float, d: int, orders: int) -> np.ndarray:
    """Gamma(alpha) (l+alpha) C_l(t0) (s/2)^{l+2m} / (m! Gamma(l+alpha+m+1)), (L+1, M+1), alpha = (d-2)/2."""
    alpha = (d - 2) / 2.0
    l = np.arange(orders + 1)[:, None]
    m = np.arange(orders + 1)[None, :]
    log_c1 = sp.gammaln(l + 2 * alpha) - sp.gammaln(2 * alpha) - sp.gammaln(l + 1)  # C_l(1) = (2 alpha)_l / l!
    ratio = sp.eval_gegenbauer(l, alpha, t0) / np.exp(log_c1)
    log_rest = (sp.gammaln(alpha) + np.log(l + alpha) + log_c1 + (l + 2 * m) * math.log(s / 2.0)
                - sp.gammaln(m + 1) - sp.gammaln(l + alpha + m + 1)) if s > 0 else np.where((l + m) == 0, 0.0, -np.inf)
    return ratio * np.exp(log_rest)


def householder_step_factors(beta: float, d: int, orders: int) -> np.ndarray:
    """mu_{lm} = E[rho(c)^{l+2m} C_l(gamma(c)) / C_l(1)], c^2 ~ Beta(1/2, (d-1)/2), (L+1, M+1) (module docstring).

    Gauss-Jacobi quadrature in y = c^2 (weight y^{-1/2} (1-y)^{(d-3)/2}), exact for the degree <= L + M integrand."""
    alpha = (d - 2) / 2.0
    x, wts = sp.roots_jacobi(orders + 4, (d - 3) / 2.0, -0.5)
    y = (1.0 + x) / 2.0
    wts = wts / wts.sum()
    rho = np.sqrt(np.maximum(1.0 - beta * (2.0 - beta) * y, 0.0))
    gamma = np.where(rho > 0, (1.0 - beta * y) / np.where(rho > 0, rho, 1.0), 1.0)
    l = np.arange(orders + 1)
    zonal = sp.eval_gegenbauer(l[:, None], alpha, gamma[None, :]) / sp.eval_gegenbauer(l, alpha, 1.0)[:, None]
    m = np.arange(orders + 1)
    power = rho[None, None, :] ** (l[:, None, None] + 2 * m[None, :, None])
    return np.einsum("lq,lmq,q->lm", zonal, power, wts)


def sphere_walk_far_mass(sizes: np.ndarray, s0: float, s: float, t0: float, d: int, factors: np.ndarray,
                         slope: float) -> np.ndarray:
    """e^{-s0} sum_{l,m} coef_{lm} sum_{Delta=1}^N (mu_{lm} e^{-slope})^Delta for step factors mu (module docstring)."""
    coef = gegenbauer_coefficients(s, t0, d, factors.shape[0] - 1)
    sums = geometric_sums(factors * math.exp(-slope), sizes)
    return math.exp(-s0) * np.einsum("lm,lmn->n", coef, sums)


def householder_far_mass(family: Any, far_sizes: Any, s0: float, q: Any = None, k: Any = None,
                         slope: float = 0.0) -> np.ndarray:
    """E M(N) for the householder family with w = sphere, d >= 3 (module docstring, 1); shape (len(far_sizes),)."""
    if family.w != "sphere":
        raise NoClosedForm("householder far mass: in closed form only for w = sphere")
    d = int(family.dim)
    if d < 3:
        raise NoClosedForm(f"householder far mass: the Gegenbauer series needs d >= 3, got {d}")
    q, k = probes(d, q, k)
    s, t0 = _scale_and_cosine(s0, q, k)
    orders = series_orders(s)
    return sphere_walk_far_mass(as_sizes(far_sizes), s0, s, t0, d,
                                householder_step_factors(float(family.beta), d, orders), slope)


def _scale_and_cosine(s0: float, q: np.ndarray, k: np.ndarray) -> tuple[float, float]:
    """s = s0 |q||k| and the cosine q_hat . k_hat (0 when a probe is 0)."""
    nq, nk = float(np.linalg.norm(q)), float(np.linalg.norm(k))
    t0 = float(q @ k) / (nq * nk) if nq * nk > 0 else 0.0
    return s0 * nq * nk, float(np.clip(t0, -1.0, 1.0))


# --- 2. token angles on SO(2) planes -----------------------------------------------------------------------


def token_modes(x: np.ndarray, least: float = MODE_WEIGHT) -> tuple[np.ndarray, np.ndarray, float]:
    """Modes j (n, h) with relative weight prod_b I_{|j_b|}(x_b)/I_0(x_b) >= ``least``, their weights (n,) and the
    neglected weight prod_b e^{x_b}/I_0(x_b) - sum(kept) (module docstring, 2)."""
    order = max(1, int(np.max(np.ceil(4.0 * x + 30.0))))
    j = np.arange(-order, order + 1)
    modes, weights = np.zeros((1, 0), dtype=np.int64), np.ones(1)
    for xb in x:
        per = sp.ive(np.abs(j), xb) / sp.ive(0, xb)
        cand = weights[:, None] * per[None, :]
        keep = cand >= least
        rows, cols = np.nonzero(keep)
        if rows.size > MAX_MODES:
            raise NoClosedForm(f"token far mass: over {MAX_MODES} Fourier modes above weight {least:g}")
        modes = np.concatenate([modes[rows], j[cols][:, None]], axis=1)
        weights = cand[rows, cols]
    total = float(np.prod(1.0 / sp.ive(0, x)))  # prod_b e^{x_b} / I_0(x_b)
    return modes, weights, max(total - float(weights.sum()), 0.0)


#: modes of the token-law expansion summed at once (each holds a V x V transfer matrix and its powers)
MODE_BATCH = 20_000


def chain_sums(pi: np.ndarray, p: np.ndarray, phases: np.ndarray, sizes: np.ndarray, slope: float) -> np.ndarray:
    """sum_{Delta=1}^N c^Delta pi^T D (P D)^{Delta-1} 1, c = e^{-slope}, D = diag e^{i phases}, for each row of
    phases (n, V) and each N: (n, len).

    With M = c P D the sum is the geometric series c (pi D)^T (I - M)^{-1} (I - M^N) 1; M^N 1 by repeated squaring
    (no eigendecomposition: P D can be defective, e.g. the rank-one P = 1 pi^T of an i.i.d. source).  I - M is
    singular only when c = 1 and D = I (M = P stochastic); those rows are sum_{Delta<=N} 1 = N.  |M|_inf <= 1, so
    the powers cannot overflow."""
    c = math.exp(-slope)
    sizes = np.asarray(sizes, dtype=np.int64)
    out = np.empty((phases.shape[0], sizes.size), dtype=complex)
    eye = np.eye(p.shape[0])
    for start in range(0, phases.shape[0], MODE_BATCH):
        e = np.exp(1j * phases[start:start + MODE_BATCH])
        mats = c * p[None, :, :] * e[:, None, :]
        powered = np.ones(mats.shape[:2] + (sizes.size,), dtype=complex)  # M^N 1, one column per N
        square = mats  # M^(2^bit)
        for bit in range(int(sizes.max()).bit_length()):
            if bit:
                square = square @ square
            on = ((sizes >> bit) & 1).astype(bool)
            powered[..., on] = square @ powered[..., on]
        trivial = (c == 1.0) & np.all(np.abs(e - 1.0) < 1e-12, axis=1)
        system = np.where(trivial[:, None, None], eye, eye - mats)
        solved = np.linalg.solve(system, 1.0 - powered)
        block = c * np.einsum("nv,nvm->nm", pi[None, :] * e, solved)
        out[start:start + MODE_BATCH] = np.where(trivial[:, None], sizes[None, :].astype(float), block)
    return out


def token_far_mass(angles: so2.PlaneAngles, far_sizes: Any, s0: float, q: Any = None, k: Any = None,
                   slope: float = 0.0, least: float = MODE_WEIGHT) -> np.ndarray:
    """E M(N) for SO(2) blocks turned by a token law (``angles``: ``so2.PlaneAngles``, so2-accumulated with the token
    law; module docstring, 2), modes of weight >= ``least``; shape (len(far_sizes),)."""
    tokens = so2.token_law(angles)
    if tokens is None:
        raise NoClosedForm("not an SO(2) family with token angles")
    q, k = probes(angles.dim, q, k)
    c = plane_coefficients(q, k)
    x = s0 * np.abs(c)
    modes, _, _ = token_modes(x, least)
    pi, p = tokens.chain()
    table = tokens.table(angles.dim)  # (V, d/2)
    amp = np.prod(sp.ive(np.abs(modes), x[None, :]) / sp.ive(0, x)[None, :], axis=1) * np.exp(1j * modes @ np.angle(c))
    sums = chain_sums(pi, p, modes @ table.T, as_sizes(far_sizes), slope)
    log_i0 = float(np.sum(np.log(sp.ive(0, x)) + x))
    return math.exp(log_i0 - s0) * (amp @ sums).real


# --- 3. mixing orthogonal steps: closed stationary part, estimated transient --------------------------------


def transient_lags(rate: float) -> int:
    """D = the first lag with rate^D <= TRANSIENT_DECAY (at least 1); ``NoClosedForm`` beyond MAX_TRANSIENT."""
    if rate <= 0:
        return 1
    if rate >= 1:  # no decay: log(rate) >= 0
        raise NoClosedForm(f"coherence rate {rate:.6g}: its transient never ends")
    lags = 1 if rate < TRANSIENT_DECAY else int(math.ceil(math.log(TRANSIENT_DECAY) / math.log(rate)))
    if lags > MAX_TRANSIENT:
        raise NoClosedForm(f"coherence rate {rate:.6g}: its transient would need over {MAX_TRANSIENT} lags")
    return lags


def stationary_term(s0: float, q: np.ndarray, k: np.ndarray, d: int) -> float:
    """f(inf) = e^{-s0} 0F1(; d/2; s0^2 |q|^2 |k|^2 / 4): P_Delta k uniform on the sphere of radius |k|."""
    return math.exp(-s0) * far.haar_mgf(s0, d, float(np.linalg.norm(q) * np.linalg.norm(k)))


def mixing_far_mass(family: Any, rate: float, far_sizes: Any, s0: float, rng: np.random.Generator, samples: int,
                    q: Any = None, k: Any = None, slope: float = 0.0,
                    controls: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray, int, int]:
    """(E M(N), its standard error, the paths, the standard error's dof) for a mixing orthogonal family whose coherence
    rate (the slowest |eigenvalue| of E[A]) is ``rate`` (module docstring, 3; ``forms.ClosedForms.mixing_rate``).

    E M(N) = f(inf) sum_{Delta<=N} e^{-slope Delta} + E sum_{Delta <= min(N, D)} e^{-slope Delta} (g_Delta - f(inf)),
    g_Delta = exp(s0 x_Delta - s0), x_Delta = q^T P_Delta k, on ``samples`` paths of D steps (``reference.transport``,
    batches of at most 2e6 stored numbers); the standard error is that of the per-path transient sums (n - 1 dof).
    ``controls`` = (E x_Delta, E x_Delta^2) for Delta = 1..D (the coherence and far second moment closed forms): the
    transient is then the regression estimate with the per-path controls sum_{Delta <= min(N, D)} x_Delta and
    x_Delta^2 (``simulations.montecarlo.controlled_mean``, n - 3 dof), as the measured far mass is."""
    sizes = as_sizes(far_sizes)
    d = int(family.dim)
    q, k = probes(d, q, k)
    lags = transient_lags(rate)
    limit = stationary_term(s0, q, k, d)
    decay = np.exp(-slope * np.arange(1, lags + 1))
    cut = np.minimum(sizes, lags)
    per_path, lin, sq = [], [], []
    batch = max(1, 2_000_000 // (lags * d * d))
    for start in range(0, samples, batch):
        b = min(batch, samples - start)
        path = reference.transport(np.asarray(family.sample(rng, lags, b).dense()), np.broadcast_to(k, (b, d)))
        x = path[:, 1:] @ q
        excess = (np.exp(s0 * x - s0) - limit) * decay
        cum = np.cumsum(excess, axis=1)
        per_path.append(cum[:, cut - 1])
        lin.append(np.cumsum(x, axis=1)[:, cut - 1])
        sq.append(np.cumsum(x * x, axis=1)[:, cut - 1])
    per_path = np.concatenate(per_path)
    if controls is None:
        mean, se, dof = per_path.mean(axis=0), per_path.std(axis=0, ddof=1) / math.sqrt(samples), samples - 1
    else:
        data = np.stack([per_path, np.concatenate(lin), np.concatenate(sq)], axis=-1)  # (n, len, 3)
        dev = data - data.mean(axis=0)
        cov = np.einsum("nli,nlj->lij", dev, dev) / (samples - 1)
        known = np.stack([np.cumsum(np.asarray(c, dtype=float)[:lags])[cut - 1] for c in controls], axis=-1)
        mean, se, dof = controlled_mean(data.mean(axis=0), cov, samples, known)
    value = limit * far.alibi_far_mass(sizes, slope) + mean
    return value, se, samples, dof
