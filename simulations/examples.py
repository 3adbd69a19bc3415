"""A user-defined family, written exactly as a user would (docs/families.md: "Adding a family").

Signed permutations: A = P diag(s) with P a uniform random permutation matrix and s uniform in {-1, 1}^d.
E[A] = 0 (the signs average out), so the family is incoherent after one step; with the signs removed
E[A] = 11^T / d has norm 1 and ``accum check`` reports no spectral gap.
"""

from __future__ import annotations

import numpy as np

from .params import ParamSpec, param_dataclass
from .steps import DenseSteps


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
