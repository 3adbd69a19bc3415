"""Sampled steps for the assumption checks (``theory.checks``): M independent single steps drawn in chunks and kept
in their structured form (``family.sample(rng, 1, M)``), the default M, and what one sample at a time shows --
orthogonality drift, the largest operator norm, the step mean with its standard error, u^T A_i v per sample, the
split into halves and the two-step independence test.  Every product goes through the form's own ``apply``, so
d = 256 costs O(M d^2) per operator application for structured steps.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from accum.simulations.pairs import row_blocks
from accum.simulations.params import ParamError, pieces

ORTHO_TOL = 1e-8
#: float64 numbers per chunk of sampled steps held as dense matrices at once (80 MB)
CHUNK_NUMBERS = 10_000_000
#: default sample count, and the work budget (d^3 flops per dense step) that lowers it for dense steps at large d
DEFAULT_SAMPLES, MIN_DENSE_SAMPLES, DENSE_WORK = 4000, 200, 2_000_000_000
#: samples x d^2 (the numbers of the step matrices, held for dense steps and touched once per pass) at most this
MAX_STEP_NUMBERS = 250_000_000
#: power iteration steps per sample for ||A||_2 above NORM_EXACT_DIM
POWER_ITERS = 40
#: largest d for which ||A||_2 is computed exactly per sample (eigvalsh of A^T A); above it, power iteration
NORM_EXACT_DIM = 64


def chunk_size(d: int) -> int:
    """Steps per chunk so that a chunk of dense d x d matrices holds at most CHUNK_NUMBERS numbers."""
    return max(1, min(2000, CHUNK_NUMBERS // (d * d)))


def draw_steps(family: Any, samples: int, rng: np.random.Generator, n_steps: int = 1,
               progress: Callable[[str], None] | None = None) -> list:
    """``samples`` independent sequences of ``n_steps`` steps, as a list of ``Steps`` chunks (``family.sample``);
    ``progress`` is told of each chunk drawn."""
    d, chunks, left = int(family.dim), [], samples
    while left > 0:
        b = min(chunk_size(d), left)
        steps = family.sample(rng, n_steps, b)
        if (steps.batch, steps.n_steps, steps.dim) != (b, n_steps, d):
            raise ParamError(f"family.sample(rng, {n_steps}, {b}) returned (batch, n_steps, dim) = "
                             f"{(steps.batch, steps.n_steps, steps.dim)}, expected {(b, n_steps, d)}")
        chunks.append(steps)
        left -= b
        if progress is not None:
            progress(f"{samples - left} of {samples} samples of {n_steps} step(s) drawn")
    return chunks


def default_samples(family: Any, rng: np.random.Generator) -> int:
    """DEFAULT_SAMPLES, at most MAX_STEP_NUMBERS / d^2, and for steps in the dense form (plain matrices: O(d^3) per
    product) at most DENSE_WORK / d^3 (but not below MIN_DENSE_SAMPLES from that work budget)."""
    d = int(family.dim)
    cap = min(DEFAULT_SAMPLES, MAX_STEP_NUMBERS // d**2)
    if family.sample(rng, 1, 1).form_name != "dense":
        return int(cap)
    return int(min(cap, max(MIN_DENSE_SAMPLES, DENSE_WORK // d**3)))


def bilinear_values(chunks: list, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """u^T A_i v for every sampled step, (M,)."""
    return np.concatenate([c.apply(0, np.broadcast_to(v[:, None], (c.batch, v.size, 1)))[:, :, 0] @ u for c in chunks])


def split(chunks: list) -> tuple[list, list]:
    """The chunks in two halves (by chunk; a single chunk is cut in two sequences of steps)."""
    if len(chunks) >= 2:
        return chunks[: len(chunks) // 2], chunks[len(chunks) // 2 :]
    c = chunks[0]
    half = c.batch // 2
    return [c.take(slice(0, half))], [c.take(slice(half, c.batch))]


def step_mean_with_se(chunks: list) -> tuple[np.ndarray, np.ndarray]:
    """E_hat[A] and its entrywise standard error, (d, d) each.  The steps are made dense a few at a time
    (``params.pieces``, counting 2 d^3 flops a step) and a block of columns at a time, A[:, J] = A I[:, J]
    (``pairs.row_blocks``, at most ``PIECE_ELEMENTS`` entries a block), so Ctrl-C is acted on between them: at d = 4096
    one whole dense step is 134 MB, and making it (A = I - beta w w^T on the identity) was 0.7 s of uninterruptible
    numpy work on a loaded machine."""
    d = chunks[0].dim
    eye = np.eye(d)
    total, squares, m = np.zeros((d, d)), np.zeros((d, d)), 0
    for c in chunks:
        for part in pieces(c.batch, 2.0 * float(d) ** 3):
            steps, count = c.take(part), part.stop - part.start
            for cols in row_blocks(d, 0.0, count * d):
                block = steps.apply(0, np.broadcast_to(eye[:, cols], (count, d, cols.stop - cols.start)))
                total[:, cols] += block.sum(axis=0)
                squares[:, cols] += (block**2).sum(axis=0)
        m += c.batch
    mean = total / m
    return mean, np.sqrt(np.maximum(squares - m * mean**2, 0.0) / (m - 1) / m)


def orthogonality_drift(chunks: list) -> float:
    """max_i ||A_i^T A_i - I||_F over the sampled single steps, each in its form (``Steps.orthogonality_drift``)."""
    return max(0.0, *(float(np.max(c.orthogonality_drift())) for c in chunks))


def largest_norm(chunks: list, drift: float, rng: np.random.Generator) -> tuple[float, str]:
    """max_i ||A_i||_2 and how it was obtained.

    Orthogonal samples (drift <= ORTHO_TOL): sqrt(1 + drift) bounds it.  d <= NORM_EXACT_DIM: exact, from
    eigvalsh(A^T A).  Otherwise a lower bound by POWER_ITERS steps of the power method on A^T A per sample.
    """
    d = chunks[0].dim
    if drift <= ORTHO_TOL:
        return math.sqrt(1.0 + drift), "orthogonal samples: ||A||_2 <= sqrt(1 + drift)"
    if d <= NORM_EXACT_DIM:
        top = max(float(np.max(np.linalg.eigvalsh(c.sandwich(np.eye(d), adjoint=True))[:, -1])) for c in chunks)
        return math.sqrt(max(top, 0.0)), "max ||A||_2 over the samples (exact)"
    best = 0.0
    for c in chunks:
        x = rng.normal(size=(c.batch, d, 1))
        for _ in range(POWER_ITERS):
            x /= np.linalg.norm(x, axis=1, keepdims=True)
            y = c.transposed().apply(0, c.apply(0, x))
        best = max(best, float(np.max(np.einsum("bdr,bdr->b", x, y))))
    return math.sqrt(best), f"max ||A||_2 over the samples (power method, {POWER_ITERS} steps: a lower bound)"


#: relative size of rounding in a difference of means of products (far above float64's 1e-16, far below any
#: dependence worth a name): identical steps 1e10 I differ by rounding of their 1e20-sized products, not by dependence
ROUNDING_FLOOR = 1e-12


def step_dependence(family: Any, samples: int, rng: np.random.Generator, probes: int = 16,
                    progress: Callable[[str], None] | None = None) -> tuple[float, int]:
    """max_j |z_j| of x_j^T (E_hat[A_2 A_1] - E_hat[A_2] E_hat[A_1]) y_j over ``probes`` Gaussian pairs (x_j, y_j).

    Independent consecutive steps give zero for every pair; dependence (a Markov token source, a repeated angle)
    shows in generic bilinear forms.  The influence of one sequence is x^T A_2 A_1 y - x^T A_2 M_1 y - x^T M_2 A_1 y
    (linearisation of the difference of means), so se = sd / sqrt(M); only step-vector products are used,
    O(M d probes) for structured steps.  Returns (max |z|, number of probes).
    """
    chunks = draw_steps(family, samples, rng, n_steps=2, progress=progress)
    d = int(family.dim)
    x, y = rng.normal(size=(2, d, probes))

    def parts(c):  # A_1 y (c, d, K) and A_2^T x (c, d, K)
        return (c.apply(0, np.broadcast_to(y, (c.batch, d, probes))),
                c.transposed().apply(1, np.broadcast_to(x, (c.batch, d, probes))))

    m1y, m2x = np.zeros((d, probes)), np.zeros((d, probes))
    for c in chunks:
        a1y, a2x = parts(c)
        m1y += a1y.sum(axis=0) / samples
        m2x += a2x.sum(axis=0) / samples
    vals = []
    for c in chunks:
        a1y, a2x = parts(c)
        both = np.einsum("dk,bdk->bk", x, c.apply(1, a1y))
        vals.append(both - np.einsum("bdk,dk->bk", a2x, m1y) - np.einsum("dk,bdk->bk", m2x, a1y))
    infl = np.concatenate(vals)
    diff = infl.mean(axis=0) + np.einsum("dk,dk->k", m2x, m1y)  # mean(x A2 A1 y) - x^T M2 M1 y
    se = infl.std(axis=0, ddof=1) / math.sqrt(samples)
    # rounding of deterministic steps is not dependence: a floor of 1e-10, or ROUNDING_FLOOR of the products' size
    scale = np.abs(infl).max(axis=0) + np.abs(np.einsum("dk,dk->k", m2x, m1y))
    floor = np.maximum(1e-10, ROUNDING_FLOOR * scale)
    z = np.abs(diff) / np.sqrt(se**2 + floor**2)
    return float(z.max()), probes
