"""Conventions shared by every part of accum.

SO(2) pairing
    A d-dimensional vector (d even) is split into d/2 planes, **interleaved**: plane b holds the
    coordinates (2b, 2b+1).  A rotation by angle theta acts on a plane as
    [[cos theta, -sin theta], [sin theta, cos theta]], i.e. multiplication of x_{2b} + i x_{2b+1}
    by exp(i theta).  Every module (engine, theory, probes) uses this pairing.

Score convention (PaTH / fla)
    Tokens are indexed 0..T-1 and token t carries a step transform A_t.  For j <= i,
        s_ij = q_i^T A_i A_{i-1} ... A_{j+1} k_j,
    so s_ii = q_i^T k_i and A_0 never enters a score.  RoPE is A_t = R(omega) for every t.

Rotation direction (differs from the common RoPE libraries)
    accum's ``rope`` rotates by +omega per step, so s_ij = q_i^T R((i - j) omega) k_j.  The usual RoPE
    (RoFormer; the libraries that follow it) rotates q_m by +m omega and k_n by +n omega and scores
    (R(m omega) q)^T R(n omega) k = q^T R((j - i) omega) k: the other direction.  Standard RoPE is accum's rope
    with omega -> -omega (tested in tests/simulations/test_families.py).  |c(n)|, windows, far-score laws and
    trained models are unchanged by the flip; a signed coherence (Im parts, nonzero mean angles) is mirrored.
"""

from __future__ import annotations

import numpy as np

from .params import field_error


def rope_frequencies(dim: int, base: float = 10000.0) -> np.ndarray:
    """RoPE plane frequencies.

    omega_b = base^(-2b/d),  b = 0 .. d/2 - 1   (Su et al., RoFormer, eq. 15).

    Args:
        dim: even head dimension d >= 2.
        base: frequency base, > 1.
    Returns:
        float64 array of shape (d/2,).
    """
    if not isinstance(dim, (int, np.integer)) or dim < 2 or dim % 2:
        raise field_error("dim", f"must be an even integer >= 2 for SO(2) planes, got {dim!r}")
    if not np.isfinite(base) or base <= 1.0:
        raise field_error("base", f"must be a finite number > 1, got {base!r}")
    return base ** (-2.0 * np.arange(dim // 2) / dim)
