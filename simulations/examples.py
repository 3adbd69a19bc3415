"""A user-defined family, written exactly as a user would (docs/families.md: "Adding a family").

Signed permutations: A = P diag(s) with P a uniform random permutation matrix and s uniform in {-1, 1}^d.
E[A] = 0 (the signs average out), so the family is incoherent after one step; with the signs removed
E[A] = 11^T / d has norm 1 and ``accum check`` reports no spectral gap.
"""

from __future__ import annotations

import numpy as np

from .params import ParamSpec, param_dataclass
from .steps import AngleSteps, DenseSteps


@param_dataclass
class SignedPermutation:
    """Random signed permutations; ``signed=0`` gives plain permutations (no spectral gap)."""

    PARAMS = (
        ParamSpec("dim", "int", 8, "dimension d", lo=1, hi=4096),
        ParamSpec("signed", "int", 1, "1: random signs, 0: plain permutations", lo=0, hi=1),
    )

    def sample(self, rng: np.random.Generator, n_steps: int, batch: int) -> DenseSteps:
        perm = rng.permuted(np.broadcast_to(np.arange(self.dim), (batch, n_steps, self.dim)), axis=-1)
        signs = rng.choice([-1.0, 1.0], size=(batch, n_steps, self.dim)) if self.signed else np.ones((batch, n_steps, self.dim))
        a = np.zeros((batch, n_steps, self.dim, self.dim))
        np.put_along_axis(a, perm[..., None], signs[..., None], axis=-1)
        return DenseSteps(a)


@param_dataclass
class TwoPointAngles:
    """Block SO(2) steps whose angles are +-a with probability 1/2, independently per step and plane.

    phi(k) = E exp(i k theta) = cos(k a), so |E[A_n ... A_1]| per plane is |cos a|^n: incoherent after a few
    steps unless a is near a multiple of pi.  A user family as a user writes it (module:Class), trainable as a
    probe arm: ``accum probe train --arm family --family accum.simulations.examples:TwoPointAngles
    --family-param a=0.7``."""

    PARAMS = (
        ParamSpec("dim", "int", 8, "head dimension d (even: d/2 planes)", lo=2, hi=4096, even=True),
        ParamSpec("a", "float", 1.0, "the angle's magnitude: theta = +-a", lo=0.0, hi=1e3),
    )

    def sample(self, rng: np.random.Generator, n_steps: int, batch: int) -> AngleSteps:
        return AngleSteps(self.a * rng.choice([-1.0, 1.0], size=(batch, n_steps, self.dim // 2)))
