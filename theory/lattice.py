"""Lattice statistics of block-SO(2) angle laws (the non-lattice condition of ``theory.checks``): the angles of every
sampled step -- the form's own, or read from matrices that are block rotations on interleaved planes -- and
|phi_b(k)| = |E exp(i k theta_b)| with delta-method standard errors.
"""

from __future__ import annotations

import math

import numpy as np

from .sampled import ORTHO_TOL


def sample_angles(chunks: list) -> np.ndarray | None:
    """Angles theta (M, d/2) if every sampled single step is block-diagonal SO(2) on interleaved planes, else None:
    the form's angles (``Steps.angles``) where it has them, else read from its matrices (``plane_angles``)."""
    parts = []
    for c in chunks:
        theta = c.angles()
        theta = plane_angles(np.asarray(c.dense(), dtype=float)[:, 0]) if theta is None else theta[:, 0]
        if theta is None:
            return None
        parts.append(theta)
    return np.concatenate(parts)


def plane_angles(mats: np.ndarray) -> np.ndarray | None:
    """Angles theta (M, d/2) if every sample is block-diagonal SO(2) on interleaved planes, else None."""
    m, d, _ = mats.shape
    if d % 2:
        return None
    mask = np.zeros((d, d), dtype=bool)
    for b in range(d // 2):
        mask[2 * b : 2 * b + 2, 2 * b : 2 * b + 2] = True
    if np.max(np.abs(mats[:, ~mask]), initial=0.0) > ORTHO_TOL:
        return None
    ev, od = np.arange(0, d, 2), np.arange(1, d, 2)
    c, s = mats[:, ev, ev], mats[:, od, ev]
    if (np.max(np.abs(mats[:, od, od] - c)) > ORTHO_TOL or np.max(np.abs(mats[:, ev, od] + s)) > ORTHO_TOL
            or np.max(np.abs(c * c + s * s - 1)) > ORTHO_TOL):
        return None
    return np.arctan2(s, c)


def lattice_statistics(theta: np.ndarray, k_max: int) -> tuple[np.ndarray, np.ndarray]:
    """|phi_hat_b(k)| and delta-method standard errors for k = 1..k_max, each (k_max, d/2)."""
    m = theta.shape[0]
    mods, ses = [], []
    for k in range(1, k_max + 1):
        e = np.exp(1j * k * theta)
        phi = e.mean(axis=0)
        mod = np.abs(phi)
        direction = np.where(mod > 0, np.conj(phi) / np.where(mod > 0, mod, 1.0), 1.0)
        proj = (e * direction).real
        mods.append(mod)
        ses.append(proj.std(axis=0, ddof=1) / math.sqrt(m))
    return np.array(mods), np.array(ses)
