"""Rows for the estimators of ``accum check`` (``theory.checks``): its split-sample spectral gaps and its independence
test, run on built-in families whose moments the theory knows exactly.  Registered in ``claims.CHECKS``.

* ``check-gaps``: ``theory.gaps.first_moment_gap`` estimates u'E[A]v along the top singular pair (u, v) of the first
  half's mean, from the second half, unbiased given the first half; with E[A] exact (``closed_forms.step_mean``) its
  target u'E[A]v is known, so (estimate - target) / se is a two-sided normal z (the mean of M/2 independent
  values, taken through ``verdict.hall_transform`` with their skewness: Givens values, skewness about -7, made the
  plain z exceed 3.94 eleven times as often as the normal): a biased estimator, a wrong half or a wrong standard
  error fails it.  Likewise
  ``theory.gaps.second_moment_gap`` estimates <U, S(V)> along the power method's pair, S = X -> E[A X A'], whose exact
  value comes from the closed form E[A (x) A] (``closed_forms.pair_operator``); its detectable error is stated on the
  pair's scale |U|_F |V|_F (the target itself is ~0 for Haar steps, where S(X) = tr(X) I / d).  A third, one-sided row holds the
  split-sample g1 under the exact sigma_max(E[A]) (the target is at most g1: the estimate is biased low, never high).
  C1 and C4 (the gaps the claims rest on).
* ``check-independence``: ``theory.sampled.step_dependence`` on i.i.d. steps: max_j |z_j| over its 16 probe pairs
  as the normal deviate of its Bonferroni p-value min(1/2, 16 * 2 Phi(-max |z|)), held one-sided (the Markov token source
  must fail it, ``tests/theory/test_theory_checks.py``): a z that is not N(0, 1) under independence (a wrong
  influence function, a wrong se) fails.  C1.
"""

from __future__ import annotations

import numpy as np
from scipy import stats as sps

from accum.simulations.families import Family
from accum.theory.forms import closed_forms
from accum.theory.gaps import first_moment_gap, second_moment_gap
from accum.theory.sampled import draw_steps, split, step_dependence

from .claims import measurement, register, theory_route
from .verdict import Measurement


def _gap_kinds(family: Family, moment: str, **_) -> tuple[str, ...]:
    return ("statistical", "statistical") if moment == "first" else ("statistical",)


@register("check-gaps", lambda moment, **_: {"first": "C1", "second": "C4"}[moment], _gap_kinds,
          lambda family, **_: theory_route(family))
def check_gaps(family: Family, rng: np.random.Generator, *, moment: str, samples: int) -> list[Measurement]:
    """The split-sample g1 (``moment = "first"``: against u'E[A]v and, one-sided, sigma_max(E[A])) or g2 (``"second"``:
    against <U, S(V)>) of ``accum check`` on ``samples`` steps, each at its exact target given the first half (module
    docstring)."""
    forms = closed_forms(family)
    half1, half2 = split(draw_steps(family, samples, rng))
    n = sum(c.batch for c in half2)
    if moment == "first":
        mean, g1 = forms.step_mean(), first_moment_gap(half1, half2)
        u, v = g1.pair
        return [measurement("C1", family, f"accum check: split-sample g1 vs u'E[A]v exact ({samples} steps)",
                            "statistical", g1.value, g1.stderr, float(u @ mean @ v), n, skew=g1.skew,
                            source="closed form E[A] along the first half's pair"),
                measurement("C1", family, "accum check: split-sample g1 <= sigma_max(E[A]) exact", "statistical",
                            g1.value, g1.stderr, float(np.linalg.svd(mean, compute_uv=False)[0]), n, side="upper",
                            skew=g1.skew, source="closed form E[A]")]
    g2 = second_moment_gap(half1, half2, rng)
    left, right = g2.pair
    return [measurement("C4", family, f"accum check: split-sample g2 vs <U, S(V)> exact ({samples} steps)",
                        "statistical", g2.value, g2.stderr, float(left.ravel() @ forms.pair_operator() @ right.ravel()),
                        n, floor=1e-9, effect_scale=float(np.linalg.norm(left) * np.linalg.norm(right)), skew=g2.skew,
                        source="closed form E[A (x) A] along the first half's pair")]


@register("check-independence", "C1", lambda family, **_: ("statistical",), lambda family, **_: set())
def check_independence(family: Family, rng: np.random.Generator, *, samples: int) -> list[Measurement]:
    """``accum check``'s independence statistic on i.i.d. steps, as the normal deviate of its Bonferroni p-value
    (module docstring), held one-sided to 0."""
    zmax, pairs = step_dependence(family, samples, rng)
    p_value = min(0.5, pairs * 2.0 * float(sps.norm.sf(zmax)))  # p >= 1/2 read as z = 0: the row is one-sided
    return [measurement("C1", family, f"accum check: independence max|z| over {pairs} probe pairs, i.i.d. steps (z of its "
                        f"Bonferroni p-value, {samples} two-step samples)", "statistical", [sps.norm.isf(p_value)], [1.0],
                        [0.0], samples, side="upper", source="N(0, 1) under independence")]
