"""Checks that reach the routes no claim's own row runs: a step form's transport and its transpose read at a random
k, its sample second-moment operator (``Steps.pair_operator``), and the moment-operator theory
(``theory.estimated``) held against the closed forms of the built-ins.

Every row is statistical evidence for the claim whose quantity it measures, so a wrong route fails the report:

* ``transport``: E[A_n ... A_1 k] and E[A_1^T ... A_n^T q] (vectors, every coordinate a point) against M^n k and
  (M^T)^n q, M = E[A] the family's exact one-step mean (``closed_forms(family).step_mean``); i.i.d. steps.  With a
  nonzero mean angle M is not symmetric, so a transpose that transports forward fails.  C1 (E[P_n] is the
  quantity whose decay C1 states).
* ``pair-operator``: the sample operator S(X) = mean_i A_i X A_i^T of M single steps, its adjoint T and its
  per-sample values <U, A_i V A_i^T> read at (U, V) = (q q^T, k k^T): d <qq^T, S(kk^T)> = d <T(qq^T), kk^T> =
  d mean_i (q^T A_i k)^2, each against the far second moment at lag 1 (``prediction("far-variance", offset=1)``).
  C4.
* ``estimated-theory``: the prediction estimated from sampled moment operators (the route a user family takes)
  against the built-in's closed form: coherence (C1), far variance (C4) or far residual (C6), t with the
  jackknife's G - 1 degrees of freedom.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from accum.simulations import montecarlo as mc
from accum.simulations.families import Family
from accum.simulations.steps import common_form
from accum.theory import estimated, prediction
from accum.theory.forms import closed_forms

from .claims import measurement, ops, probe_pair, reference_for, register, theory_route
from .verdict import Measurement

#: the claim each quantity of ``estimated-theory`` concerns
QUANTITY_CLAIMS = {"coherence": "C1", "far-variance": "C4", "far-residual": "C6"}


def mean_transport(family: Family, rng: np.random.Generator, x: np.ndarray, lags: Sequence[int], samples: int,
                   transposed: bool) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard error of P_n x = A_n ... A_1 x (``transposed``: A_n^T ... A_1^T x, the engine's
    ``transposed().transport``) at each n in ``lags``, from ``samples`` sequences: each (len(lags), d).

    For i.i.d. steps A_n^T ... A_1^T has the law of (A_1 ... A_n)^T, i.e. of P_n^T, so its mean is (M^T)^n x."""
    n_max = int(max(lags))
    idx = np.asarray(lags)
    moments = mc.Moments()
    for b in mc.batches(samples, mc.path_floats(mc.step_form(family), family.dim, n_max)):
        steps = family.sample(rng, n_max, b)
        path = (steps.transposed() if transposed else steps).transport(x)
        moments.add(path[:, idx].reshape(b, -1))
    d = family.dim
    return moments.mean.reshape(len(lags), d), moments.stderr().reshape(len(lags), d)


@register("transport", "C1", lambda family, **_: ("statistical", "statistical"),
          lambda family, **_: ops(family, "transport", "transposed") | theory_route(family))
def check_transport(family: Family, rng: np.random.Generator, *, lags: Sequence[int], samples: int) -> list[Measurement]:
    """E[A_n..A_1 k] against M^n k and E[A_1^T..A_n^T q] against (M^T)^n q (module docstring)."""
    q, k = probe_pair(family.dim, rng)
    mean = closed_forms(family).step_mean()
    rows = []
    for transposed, x, m, what in ((False, k, mean, "E[A_n..A_1 k] vs E[A]^n k"),
                                   (True, q, mean.T, "E[A_1'..A_n' q] vs (E[A]')^n q")):
        got, se = mean_transport(family, rng, x, lags, samples, transposed)
        want = np.array([np.linalg.matrix_power(m, int(n)) @ x for n in lags])
        rows.append(measurement("C1", family, f"transport: {what}, n={list(lags)}, every coordinate", "statistical",
                                got.ravel(), se.ravel(), want.ravel(), samples, source="closed form (E[A] exact)"))
    return rows


@register("pair-operator", "C4", lambda family, **_: ("statistical",),
          lambda family, **_: ops(family, "pair-operator") | theory_route(family))
def check_pair_operator(family: Family, rng: np.random.Generator, *, samples: int,
                        theory_samples: int) -> list[Measurement]:
    """d mean_i (q^T A_i k)^2 three ways through the step form's pair operator -- its per-sample values, S and its
    adjoint T -- against the far second moment at lag 1 (module docstring)."""
    q, k = probe_pair(family.dim, rng)
    d = family.dim
    chunks = [family.sample(rng, 1, b) for b in mc.batches(samples, d * d)]
    op = common_form(chunks).pair_operator(chunks)
    u, v = np.outer(q, q), np.outer(k, k)
    values = d * op.values(u, v)
    points = [values.mean(), d * float(np.sum(u * op.left(v))), d * float(np.sum(op.right(u) * v))]
    se = values.std(ddof=1) / math.sqrt(values.size)
    p = prediction("far-variance", family, rng=rng, samples=theory_samples, offset=1, q=q, k=k)
    return [measurement("C4", family, "pair operator: d (q'A k)^2 by values(), <qq', S(kk')> and <T(qq'), kk'> vs "
                        "d E[s^2] at Delta=1", "statistical", points, [se] * 3, [p.value] * 3, values.size,
                        pred_stderr=[p.stderr] * 3, source=p.source, **reference_for(p, values.size - 1))]


@register("estimated-theory", lambda quantity, **_: QUANTITY_CLAIMS[quantity], lambda family, **_: ("statistical",),
          lambda family, **_: {"theory:moments", "theory:closed"})
def check_estimated_theory(family: Family, rng: np.random.Generator, *, quantity: str, theory_samples: int,
                           **options) -> list[Measurement]:
    """The moment-operator estimate of ``quantity`` against the family's closed form (module docstring); random
    probes q != k (m for the far residual)."""
    q, k = probe_pair(family.dim, rng)
    probes = {"m": q} if quantity == "far-residual" else {"q": q, "k": k}
    options = {key: np.asarray(v) if isinstance(v, (list, tuple)) else v for key, v in options.items()}
    got = estimated(quantity, family, rng=rng, samples=theory_samples, **options, **probes)
    want = prediction(quantity, family, **options, **probes)
    value, se = np.atleast_1d(got.value), np.atleast_1d(got.stderr)
    keep = se > 1e-9 * np.abs(value)  # c(0) = q.k, |r(1)|^2 of rotations: fixed by construction, rounding-size errors
    shown = ", ".join(f"{key}={np.asarray(val).tolist()}" for key, val in options.items())
    return [measurement(QUANTITY_CLAIMS[quantity], family, f"{quantity} ({shown}) estimated from moment operators vs "
                        "the closed form", "statistical", value[keep], se[keep], np.atleast_1d(want.value)[keep],
                        got.samples, source=f"closed form (measured: {got.source})", reference="t", dof=got.dof)]
