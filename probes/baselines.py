"""Far-mass predictors that know nothing of the rotation law: what a law-based prediction must beat to count as
evidence for the theory (``probes.theory_stats``).

The measured far mass at length T = M L is the mean over the queries i in [L, T) of the attention on their keys
j <= i - L, i.e. on the lags n = i - j in [L, i] (``probes.evaluate``).  Both predictors give that mean per head:

* ``uniform_far_mass``: uniform attention over the keys with the head's ALiBi bias -m n (m = 0 for every other arm),
      F_i = sum_{n=L}^{i} e^{-m n} / sum_{n=0}^{i} e^{-m n}   (= (i - L + 1) / (i + 1) when m = 0);
  no model information but the bias.
* ``carried_far_mass``: the head's measured 2x far mass carried forward: every far key gets the same weight r
  relative to the near partition function (times the bias e^{-m (n - L)}), r fitted so that the mean of
      F_i(r) = r G_i / (1 + r G_i),   G_i = sum_{n=L}^{i} e^{-m (n - L)},
  over i in [L, 2L) equals the measured 2x far mass; no knowledge of how the scores of far keys change with the lag.

The third baseline, the head's own law-based prediction with A = I, needs the model (``probes.bridge``).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import brentq


def far_weight_sums(slope: float, seq_len: int, length: int) -> np.ndarray:
    """G_i = sum_{n=L}^{i} e^{-m (n - L)} for the queries i = L..T-1 (T = ``length``): the far keys' bias weights
    relative to the lag-L key's."""
    n_far = np.arange(1, length - seq_len + 1, dtype=float)
    return n_far if slope == 0.0 else -np.expm1(-slope * n_far) / -math.expm1(-slope)


def uniform_far_mass(slope: float, seq_len: int, multipliers: list[int]) -> list[float]:
    """Per multiplier M the mean over i in [L, M L) of the uniform-with-bias far mass (module docstring),
    F_i = e^{-m L} (1 - e^{-m (i - L + 1)}) / (1 - e^{-m (i + 1)})  ((i - L + 1) / (i + 1) when m = 0)."""
    i = np.arange(seq_len, max(multipliers) * seq_len, dtype=float)
    per_query = (i - seq_len + 1) / (i + 1) if slope == 0.0 else \
        math.exp(-slope * seq_len) * np.expm1(-slope * (i - seq_len + 1)) / np.expm1(-slope * (i + 1))
    return [float(per_query[: (m - 1) * seq_len].mean()) for m in multipliers]


def carried_far_mass(far_2x: float, slope: float, seq_len: int, multipliers: list[int]) -> list[float]:
    """Per multiplier M the mean over i in [L, M L) of F_i(r), r fitted to the measured 2x far mass ``far_2x``
    (module docstring); 0 at every length when far_2x <= 0."""
    g = far_weight_sums(slope, seq_len, max(multipliers) * seq_len)
    if far_2x <= 0.0:
        return [0.0] * len(multipliers)
    first = g[:seq_len]

    def excess(log_r: float) -> float:
        x = math.exp(log_r) * first
        return float(np.mean(x / (1 + x))) - far_2x

    log_r = brentq(excess, -80.0, 80.0) if excess(-80.0) < 0 < excess(80.0) else (80.0 if excess(80.0) <= 0 else -80.0)
    x = math.exp(log_r) * g
    per_query = x / (1 + x)
    return [float(per_query[: (m - 1) * seq_len].mean()) for m in multipliers]
