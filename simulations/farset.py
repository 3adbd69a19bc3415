"""Estimators over a far set of N keys, streamed over the steps in chunks (C5 and C6): the near weight
w = 1 / (1 + sum_{Delta<=N} exp(s_Delta - s0)) with its far mass, and the value residual r(N).

Neither the sample count nor the far-set size changes peak memory beyond one batch of one chunk
(``montecarlo.stream_floats``).  Block-SO(2) steps take closed-form fast paths whose cumulative sums and cosines
run in torch's float64 kernels (``backend_torch``); ``device="cpu"|"cuda"`` also draws their angles with torch on
that device (a different random stream, same law).  Default probes q = k = m = 1/sqrt(d).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .families import Family
from .params import check_bool, check_int, field_error
from .steps import accumulate_angle_values

from .montecarlo import (ALIBI_SLOPE, MAX_FAR_SIZE, MAX_STEPS, S0, CoMoments, FarResidualEstimate, Moments,
                         NearWeightEstimate, batches, check_budget, check_family, check_rng, check_samples, dependent_span,
                         probe, step_form, stream_floats)


def _check_sizes(name: str, sizes: Sequence[int]) -> np.ndarray:
    """``sizes`` as a 1-d integer array, increasing, in [1, MAX_FAR_SIZE]; else ``ParamError`` naming ``name``."""
    arr = np.asarray(sizes)
    if (arr.ndim != 1 or arr.size == 0 or not np.issubdtype(arr.dtype, np.integer) or np.any(arr < 1)
            or np.any(arr > MAX_FAR_SIZE) or np.any(np.diff(arr) <= 0)):
        raise field_error(name, f"must be a non-empty increasing list of integers in [1, {MAX_FAR_SIZE}], "
                                f"got {sizes!r}")
    return arr


def _check_streaming(family: Any, far_sizes: Any, n_samples: Any, rng: Any, chunk: Any) -> np.ndarray:
    """The arguments shared by ``near_weight`` and ``far_residual``; returns the far sizes as an array."""
    check_family(family)
    check_rng(rng)
    check_samples(n_samples)
    check_int("chunk", chunk, 1, MAX_STEPS)
    return _check_sizes("far_sizes", far_sizes)


def near_weight(family: Family, far_sizes: Sequence[int], s0: float, n_samples: int, rng: np.random.Generator,
                alibi_slope: float = 0.0, chunk: int = 4096, device: str | None = None, q: np.ndarray | None = None,
                k: np.ndarray | None = None, batch_floats: int | None = None) -> NearWeightEstimate:
    """Attention weight on one near target among N far copies of its key, for each N in ``far_sizes``.

    Scores (logits): near s_0 (Delta = 0, no transport); far s_Delta = s0 q^T A_i ... A_{i-Delta+1} k - slope Delta
    for Delta = 1..N with probes q, k (default q = k = 1/sqrt(d); pass unit vectors, then |s_Delta + slope Delta|
    <= s0 for any orthogonal steps; q != k tells a transport from its transpose).  Near weight
        w(N) = e^{s0} / (e^{s0} + sum_{Delta=1}^N e^{s_Delta}).
    The far sum is streamed over Delta in chunks with a running log-sum-exp (memory O(chunk), any N), and
    samples in batches folded into running moments (memory O(batch), any n_samples).  The estimate also holds the far
    mass M(N) = sum_Delta e^{s_Delta - s0} (an unbiased mean, E M = N E e^{s - s0} for stationary steps) and
    its log.  Far scores come from ``_far_score_stream`` (one cos per plane and step for SO(2) steps).  Per N it also
    keeps the paths' means and covariance of (M(N), sum_Delta x_Delta, sum_Delta x_Delta^2), x_Delta the unit far score
    q^T A_i ... A_{i-Delta+1} k: controls whose exact means the theory knows (``montecarlo.controlled_mean``).
    device: None draws with ``rng``; "cpu" / "cuda" draws the angles with torch there (see ``coherence``).
    batch_floats: memory of one batch of samples in float64 numbers (default ``montecarlo.BATCH_BUDGET``).
    """
    import torch

    sizes = _check_streaming(family, far_sizes, n_samples, rng, chunk)
    s0, alibi_slope = S0.validate(s0), ALIBI_SLOPE.validate(alibi_slope)
    d = family.dim
    q, k, budget = probe("q", q, d), probe("k", k, d), check_budget(batch_floats)
    span = dependent_span(family, sizes[-1])  # one piece per batch: no chunk restarts a Markov chain
    next_scores = _score_source(family, rng, q, k, device, span)
    weight, mass, log_mass, controls = Moments(), Moments(), Moments(), CoMoments()
    for b in batches(n_samples, stream_floats(step_form(family), d, span or chunk, int(sizes[-1])), budget):
        scores = next_scores(b)
        lse, done, rows, sums = None, 0, [], torch.zeros((2, b), dtype=torch.float64)
        for target in sizes:
            while done < target:
                n = min(chunk, target - done)
                x = scores(n)
                sums += torch.stack([x.sum(dim=1), (x * x).sum(dim=1)]).cpu()
                logits = s0 * x
                if alibi_slope:
                    logits -= alibi_slope * torch.arange(done + 1, done + n + 1, dtype=torch.float64, device=logits.device)
                part = torch.logsumexp(logits, dim=1)
                lse = part if lse is None else torch.logaddexp(lse, part)
                done += n
            rows.append(np.concatenate([lse.cpu().numpy()[None], sums.numpy()]))
        lm = np.array([r[0] for r in rows]).T - s0
        weight.add(1.0 / (1.0 + np.exp(lm)))
        mass.add(np.exp(lm))
        log_mass.add(lm)
        controls.add(np.stack([np.exp(lm), *(np.array([r[j] for r in rows]).T for j in (1, 2))], axis=-1))
    return NearWeightEstimate(
        weight.mean, weight.stderr(), weight.n, far_sizes=sizes, far_mass=mass.mean, far_mass_stderr=mass.stderr(),
        log_far_mass=log_mass.mean, log_far_mass_stderr=log_mass.stderr(), s0=s0, alibi_slope=alibi_slope,
        controls_mean=controls.mean, controls_cov=controls.cov())


def _score_source(family: Family, rng: np.random.Generator, q: np.ndarray, k: np.ndarray, device: str | None,
                  span: int | None = None):
    """For a batch size b, a stream ``scores(n) -> (b, n)`` float64 tensor of q^T A_i ... A_{i-Delta+1} k for the
    next n offsets Delta, each call continuing where the last one stopped.  ``span``: the batch's steps are drawn as
    one path of that many and served in slices (``StepShape.during``, as ``far_residual`` does): a path of dependent
    steps is not restarted at each call.

    Generic steps: the query is pulled back, x_Delta = A^T ... A^T q (``transposed().transport``), carried
    across calls, scores k . x_Delta.  Block-SO(2) steps (``AngleSteps``, or angles drawn on ``device``): the
    carried state is the cumulative angle Theta (wrapped to [-pi, pi]) and the scores are
    sum_b |c_b| cos(Theta_Delta,b + arg c_b) with c_b = conj(z_qb) z_kb (``backend_torch.far_logits``).
    """
    import torch

    from . import backend_torch as bt

    dev = bt.check_device(device)
    draw = None if dev is None else bt.angle_sampler(family, dev, bt.torch_generator(rng, dev))
    coef_abs, coef_arg = bt.probe_coefficients(q, k, dev) if family.dim % 2 == 0 else (None, None)  # SO(2): d even

    def for_batch(b: int):
        path = family.sample(rng, span, b) if span and draw is None else None  # one path, served in slices
        state = {"x": None, "theta": torch.zeros((b, family.dim // 2), dtype=torch.float64, device=dev), "done": 0}

        def scores(n: int) -> torch.Tensor:
            if draw is not None:
                theta = draw(n, b)
            else:
                start, state["done"] = state["done"], state["done"] + n
                steps = family.sample(rng, n, b) if path is None else path.during(slice(start, start + n))
                theta = steps.angles()
                if theta is None or state["x"] is not None:
                    if state["x"] is None:
                        state["x"] = np.broadcast_to(q, (b, family.dim))
                    path_x = steps.transposed().transport(state["x"])
                    state["x"] = path_x[:, -1]
                    return torch.from_numpy(np.ascontiguousarray(path_x[:, 1:] @ k))
                theta = bt.as_tensor(theta)
            y, state["theta"] = bt.far_logits(theta, state["theta"], coef_abs, coef_arg)
            return y

        return scores

    return for_batch


def far_residual(family: Family, far_sizes: Sequence[int], n_samples: int, rng: np.random.Generator,
                 value_rotation: bool = True, chunk: int = 4096, device: str | None = None, m: np.ndarray | None = None,
                 batch_floats: int | None = None) -> FarResidualEstimate:
    """Squared norm of the uniformly weighted far value residual, |r(N)|^2 / |m|^2, for each N.

    r(N) = (1/N) sum_{Delta=1}^N P_Delta m with P_Delta = A_i ... A_{i-Delta+1} (values transported like keys,
    the QKV arm) or P_Delta = I (value_rotation=False, QK-only: r = m).  Computed by the recurrence
    U_t = A_t (U_{t-1} + m), U_N = N r(N), streamed in chunks of steps and batches of samples (running
    moments).  Theory for SO(2) with real plane coherence rho: E|r|^2 / |m|^2 -> (1 + rho) / ((1 - rho) N).
    device: None draws with ``rng``; "cpu" / "cuda" draws the angles with torch there (see ``coherence``).
    m: the value vector (default 1/sqrt(d)); batch_floats: memory of one batch (``near_weight``).  Per N it also keeps
    the paths' means and covariance of (|r|^2 / |m|^2, r): the vector r is a control whose exact mean is
    (1/N) sum_Delta E[P_Delta] m for i.i.d. steps (``montecarlo.controlled_mean``).
    Dependent steps (``family.iid_steps`` False: a Markov token source) are drawn as one path of N_max steps per
    batch and read in slices, so neither a chunk nor a smaller far size restarts the chain.
    """
    from . import backend_torch as bt

    sizes = _check_streaming(family, far_sizes, n_samples, rng, chunk)
    check_bool("value_rotation", value_rotation)
    d = family.dim
    m, budget = probe("m", m, d), check_budget(batch_floats)
    dev = bt.check_device(device)
    draw = None if dev is None else bt.angle_sampler(family, dev, bt.torch_generator(rng, dev))
    span = dependent_span(family, sizes[-1])  # one piece per batch: no chunk restarts a Markov chain
    moments, controls = Moments(), CoMoments()
    for b in batches(n_samples, stream_floats(step_form(family), d, span or chunk, int(sizes[-1])), budget):
        u = np.zeros((b, d))
        done = 0
        out, residuals = [], []
        path = family.sample(rng, span, b) if span and value_rotation else None
        for target in sizes:
            while done < target:
                n = min(chunk, target - done)
                if not value_rotation:
                    u = u + n * m
                elif draw is not None:
                    u = accumulate_angle_values(draw(n, b), u, m)
                elif path is not None:
                    u = path.during(slice(done, done + n)).accumulate_values(u, m)
                else:
                    u = family.sample(rng, n, b).accumulate_values(u, m)
                done += n
            out.append(np.sum((u / target) ** 2, axis=1) / float(m @ m))
            residuals.append(u / target)
        moments.add(np.array(out).T)
        controls.add(np.concatenate([np.array(out).T[:, :, None], np.stack(residuals, axis=1)], axis=2))
    return FarResidualEstimate(moments.mean, moments.stderr(), moments.n, far_sizes=sizes, value_rotation=value_rotation,
                               controls_mean=controls.mean, controls_cov=controls.cov())
