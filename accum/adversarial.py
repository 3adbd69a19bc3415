"""C5's adversarial rows: SO(2) step angles (``check_adversarial``), Householder steps (their w's and betas) and dense
orthogonal steps (exponentials of the Lie algebra so(d)).

C5 as stated: no choice of steps of norm <= 1 keeps the near weight.  With unit probes q = k (near score s0) and
the far scores s_t = s0 q^T A_1 ... A_t k, t = 1..N, every |s_t| <= s0, so the near weight obeys, sample by
sample,
    w = 1 / (1 + sum_t e^{s_t - s0}) <= 1 / (1 + N e^{-2 s0})   (``theory.far.lower_bound``).
A search minimises the far mass log sum_t e^{s_t} over the steps' parameters (``starts`` random starts,
``iterations`` Adam steps on torch's gradients, fp64):

* Householder: A_t = I - beta_t u_t u_t^T, u_t = v_t / |v_t|, beta_t = 2 sigmoid(b_t) in (0, 2) (PaTH's steps;
  reflections are the limit beta -> 2, contractions the rest);
* dense orthogonal: A_t = exp(phi_t K_t), K_t = b_t a_t^T - a_t b_t^T for orthonormal a_t, b_t (Gram-Schmidt of two
  free vectors): a simple element of the Lie algebra so(d), a rotation by phi_t in the plane span(a_t, b_t) of the
  full space (a dense matrix), in closed form (K^3 = -K): exp(phi K) = I + sin(phi) K + (1 - cos(phi)) K^2.
  Products of such steps cover SO(d).  (A general exp(X - X^T) per step costs d^3 more per step and its
  search found no better sequences.)

The scores come from the prefix products A_t^T ... A_1^T (a doubling scan: log2 N batched matrix products).  The
best sequence found is then run through the engine (``HouseholderSteps`` / ``DenseSteps``
``.transposed().transport``, not the search's own products) and its near weight is held to the bound at every N;
the row reports best found / bound (how tight the bound is), and a second row that the best found decays with N.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch

from accum.simulations.families import Family
from accum.simulations.steps import AngleSteps, DenseSteps, HouseholderSteps
from accum.theory import far

from .claims import measurement, register
from .verdict import Measurement

#: Adam's step size on the steps' parameters
LEARNING_RATE = 0.05


def prefix_products(mats: torch.Tensor) -> torch.Tensor:
    """P_t = M_t M_{t-1} ... M_1 for t = 1..N from M (N, d, d): (N, d, d), by doubling (Hillis-Steele):
    after the pass with offset o, P_t holds the product of M_{max(1, t-2o+1)} .. M_t."""
    out = mats
    offset = 1
    while offset < out.shape[0]:
        out = torch.cat([out[:offset], out[offset:] @ out[:-offset]])
        offset *= 2
    return out


def householder_matrices(v: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(A (N, d, d), u (N, d), beta (N,)): A_t = I - beta_t u_t u_t^T, u = v / |v|, beta = 2 sigmoid(b)."""
    u = v / v.norm(dim=-1, keepdim=True)
    beta = 2.0 * torch.sigmoid(b)
    eye = torch.eye(v.shape[-1], dtype=v.dtype)
    return eye - beta[:, None, None] * u[:, :, None] * u[:, None, :], u, beta


def plane_rotations(ra: torch.Tensor, rb: torch.Tensor, phi: torch.Tensor) -> torch.Tensor:
    """A_t = exp(phi_t K_t) = I + sin(phi_t) K_t + (1 - cos(phi_t)) K_t^2, K = b a^T - a b^T, from free vectors
    ra, rb (N, d) (a = ra / |ra|, b = the unit part of rb orthogonal to a) and angles phi (N,): (N, d, d)."""
    a = ra / ra.norm(dim=-1, keepdim=True)
    b = rb - (rb * a).sum(-1, keepdim=True) * a
    b = b / b.norm(dim=-1, keepdim=True)
    k = b[:, :, None] * a[:, None, :] - a[:, :, None] * b[:, None, :]
    eye = torch.eye(ra.shape[-1], dtype=ra.dtype)
    return eye + torch.sin(phi)[:, None, None] * k + (1.0 - torch.cos(phi))[:, None, None] * (k @ k)


def near_weight(path: np.ndarray, probe: np.ndarray, s0: float) -> float:
    """1 / (1 + sum_t e^{s_t - s0}), s_t = s0 probe . path_t for the far path (N, d) (t = 1..N)."""
    return float(1.0 / (1.0 + math.exp(np.logaddexp.reduce(s0 * path @ probe) - s0)))


def searched_weight(kind: str, n: int, d: int, s0: float, iterations: int, rng: np.random.Generator) -> float:
    """One start of the search (module docstring) for N = ``n`` steps of ``kind`` ("householder" or "orthogonal"):
    the near weight of the sequence found, computed by the engine in fp64."""
    probe = np.full(d, 1.0 / math.sqrt(d))
    q = torch.from_numpy(probe)
    if kind == "householder":
        params = [torch.from_numpy(rng.normal(size=(n, d))), torch.from_numpy(rng.normal(size=n))]
    else:
        params = [torch.from_numpy(rng.normal(size=(n, d))), torch.from_numpy(rng.normal(size=(n, d))),
                  torch.from_numpy(rng.uniform(-math.pi, math.pi, size=n))]
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.Adam(params, lr=LEARNING_RATE)

    def steps() -> torch.Tensor:
        return householder_matrices(*params)[0] if kind == "householder" else plane_rotations(*params)

    for _ in range(iterations):
        opt.zero_grad()
        x = prefix_products(steps().transpose(-1, -2)) @ q  # A_t^T ... A_1^T q, (N, d)
        torch.logsumexp(s0 * (x @ q), dim=0).backward()
        opt.step()
    with torch.no_grad():
        if kind == "householder":
            _, u, beta = householder_matrices(*params)
            engine = HouseholderSteps(u.numpy()[None], beta.numpy()[None])
        else:
            engine = DenseSteps(steps().numpy()[None])
    return near_weight(engine.transposed().transport(probe)[0, 1:], probe, s0)


def adversarial_rows(kind: str, family: Family, rng: np.random.Generator, far_sizes: Sequence[int], s0: float,
                     iterations: int, starts: int) -> list[Measurement]:
    """The best near weight over ``starts`` searches per N, held to the bound (upper), and its largest step up
    with N held to 0 (upper): both adversarial rows of C5."""
    best = np.array([max(searched_weight(kind, int(n), family.dim, s0, iterations, rng) for _ in range(starts))
                     for n in far_sizes])
    bound = far.lower_bound(np.asarray(far_sizes), s0)
    steps = {"householder": "Householder steps (w, beta)", "orthogonal": "dense orthogonal steps exp(phi K), K in so(d)"}[kind]
    return [measurement("C5", family, f"adversarial {steps}: best near weight found <= bound (measured/predicted: "
                        f"tightness), N={list(far_sizes)}", "adversarial", best, 0.0, bound, starts, side="upper",
                        floor=1e-12, source="bound"),
            measurement("C5", family, f"adversarial {steps}: best near weight found decays with N (largest step up)",
                        "adversarial", np.max(np.diff(best)), 0.0, 0.0, starts, side="upper", floor=1e-12,
                        source="claim")]


@register("adversarial-householder", "C5", lambda family, **_: ("adversarial", "adversarial"))
def check_adversarial_householder(family: Family, rng: np.random.Generator, *, far_sizes: Sequence[int], s0: float,
                                  iterations: int, starts: int) -> list[Measurement]:
    """C5 against the best Householder steps a search finds (module docstring)."""
    return adversarial_rows("householder", family, rng, far_sizes, s0, iterations, starts)


@register("adversarial-orthogonal", "C5", lambda family, **_: ("adversarial", "adversarial"))
def check_adversarial_orthogonal(family: Family, rng: np.random.Generator, *, far_sizes: Sequence[int], s0: float,
                                 iterations: int, starts: int) -> list[Measurement]:
    """C5 against the best dense orthogonal steps a search finds (module docstring)."""
    return adversarial_rows("orthogonal", family, rng, far_sizes, s0, iterations, starts)


def _far_logits(theta: np.ndarray, coef: np.ndarray, s0: float) -> np.ndarray:
    """s0 q^T R(-Theta_Delta) k for Delta = 1..N from step angles theta (N, d/2) and plane coefficients
    c_b = conj(z_qb) z_kb: s0 sum_b Re(c_b e^{-i Theta_b})."""
    return s0 * (np.exp(-1j * np.cumsum(theta, axis=0)) @ coef).real


@register("adversarial-so2", "C5", lambda family, **_: ("adversarial", "adversarial"))
def check_adversarial(family: Family, rng: np.random.Generator, *, far_sizes: Sequence[int], s0: float,
                      iterations: int, starts: int) -> list[Measurement]:
    """C5 as stated: no choice of rotations keeps the near weight.  For each N, gradient ascent on the step
    angles of an SO(2) sequence (``starts`` random starts, ``iterations`` Adam-like steps on
    log sum_Delta e^{s_Delta}) minimises the far mass; the best sequence found is then run through the engine
    (``AngleSteps.transposed().transport``) and its near weight held to the bound 1/(1 + N e^{-2 s0}).
    The row passes when the best found obeys the bound at every N and decays with N; it reports how tight the
    bound is (best found / bound)."""
    d = family.dim
    one = np.full(d, 1.0 / math.sqrt(d))
    coef = np.conj(one[0::2] + 1j * one[1::2]) * (one[0::2] + 1j * one[1::2])
    best = []
    for n in far_sizes:
        found = 0.0
        for _ in range(starts):
            theta = rng.uniform(-math.pi, math.pi, size=(n, d // 2))
            m, v = np.zeros_like(theta), np.zeros_like(theta)
            for it in range(1, iterations + 1):
                cum = np.cumsum(theta, axis=0)
                logits = s0 * (np.exp(-1j * cum) @ coef).real
                w = np.exp(logits - logits.max())
                w /= w.sum()
                # d logits_Delta / d Theta_{Delta b} = s0 Im(c_b e^{-i Theta_b}); Theta_Delta = sum_{t <= Delta} theta_t
                g_cum = w[:, None] * s0 * (coef[None, :] * np.exp(-1j * cum)).imag
                grad = np.cumsum(g_cum[::-1], axis=0)[::-1]  # d/d theta_t = sum_{Delta >= t}
                m = 0.9 * m + 0.1 * grad
                v = 0.999 * v + 0.001 * grad**2
                theta -= 0.05 * (m / (1 - 0.9**it)) / (np.sqrt(v / (1 - 0.999**it)) + 1e-12)
            path = AngleSteps(theta[None]).transposed().transport(one)[0, 1:]
            logits = s0 * path @ one
            weight = 1.0 / (1.0 + np.exp(np.logaddexp.reduce(logits) - s0))
            found = max(found, float(weight))
        best.append(found)
    best = np.array(best)
    bound = far.lower_bound(np.asarray(far_sizes), s0)
    return [measurement("C5", family, f"adversarial: best near weight found <= bound (measured/predicted: "
                        f"tightness), N={list(far_sizes)}", "adversarial", best, 0.0, bound,
                        starts, side="upper", floor=1e-12, source="bound"),
            measurement("C5", family, "adversarial: best near weight found decays with N (largest step up)",
                        "adversarial", np.max(np.diff(best)), 0.0, 0.0, starts, side="upper", floor=1e-12,
                        source="claim")]
