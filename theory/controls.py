"""Exact means of the control variates behind ``accum verify``'s controlled estimators
(``simulations.montecarlo.controlled_mean``): the far-score sums beside the far mass (C5) and the mean far residual
beside |r|^2 (C6).

A control variate X is only as good as its mean: these are closed forms of quantities other rows hold to the same
theory (the coherence c(n) and the far second moment are C1's and C4's), and the checks that use them also hold the
controls' sample means to these values in a row of their own, so a defect that moves a control is seen there at
first order instead of being regressed away.  Families without the closed forms raise ``NoClosedForm`` (their
estimators then run without controls).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._common import NoClosedForm, as_sizes, probes
from .forms import closed_forms


def far_score_sums(family: Any, far_sizes: Any, q: Any = None, k: Any = None) -> np.ndarray:
    """(len(far_sizes), 2): for each N, E sum_{Delta=1}^N x_Delta = sum_{Delta=1}^N c(Delta) and
    E sum_{Delta=1}^N x_Delta^2 = sum_{Delta=1}^N v(Delta) / d, x_Delta = q^T A_i ... A_{i-Delta+1} k the unit far
    score, c the coherence and v = d E[x^2] the far second moment (``ClosedForms.coherence``, ``far_variance_curve``;
    stationary steps: the law of a lag-Delta product does not depend on i)."""
    sizes = as_sizes(far_sizes)
    forms, top = closed_forms(family), int(sizes[-1])
    coherence = np.asarray(forms.coherence(top, q, k), dtype=float)
    second = np.asarray(forms.far_variance_curve(top, q, k), dtype=float) / family.dim
    return np.stack([np.cumsum(coherence[1:])[sizes - 1], np.cumsum(second[1:])[sizes - 1]], axis=1)


def coherence_at(family: Any, offsets: Any, q: Any = None, k: Any = None) -> np.ndarray:
    """(len(offsets),): c(Delta) = E q^T A_i ... A_{i-Delta+1} k at each lag, the closed form only (an estimated
    coherence has an error of its own: no control)."""
    lags = as_sizes(offsets)
    return np.asarray(closed_forms(family).coherence(int(lags.max()), q, k), dtype=float)[lags]


def mean_residual(family: Any, far_sizes: Any, m: Any = None) -> np.ndarray:
    """(len(far_sizes), d): E r(N) = (1/N) sum_{Delta=1}^N E[A]^Delta m for i.i.d. steps (E[P_Delta] = E[A]^Delta,
    ``ClosedForms.step_mean``), r(N) the far value residual of ``simulations.farset.far_residual``."""
    if not getattr(family, "iid_steps", True):
        raise NoClosedForm("the mean residual of dependent steps: E[P_Delta] is not a power of E[A]")
    sizes = as_sizes(far_sizes)
    mean = np.asarray(closed_forms(family).step_mean(), dtype=float)
    m, _ = probes(family.dim, m, None)
    vec, total, out = m, np.zeros_like(m), []
    for delta in range(1, int(sizes[-1]) + 1):
        vec = mean @ vec
        total = total + vec
        if delta in sizes:
            out.append(total / delta)
    return np.array(out)
