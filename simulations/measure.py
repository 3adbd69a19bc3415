"""Named measurements: one quantity, one family, validated options, one seed -> a saved record.

This is what ``accum measure`` and sweeps call.  Each quantity declares its options as ``ParamSpec`` entries
(so ranges are checked before any work starts) and maps to one estimator in ``simulations.estimators``.
Before a job runs, ``peak_memory`` estimates its peak memory from the options, d and the family's step
form, and work over ``MAX_MEMORY_BYTES`` is refused naming the option that drives it.  After it runs,
a result holding NaN or an infinity is refused (``NonFiniteError`` naming the family parameters): a
meaningless number is never returned as a measurement.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from accum.runtime import progress_bar

from . import estimators as est
from . import montecarlo as mc
from .families import FAMILIES, Family, Steps, family_name, family_params, make_family
from .params import MAX_MEMORY_BYTES, ParamError, ParamSpec, check_memory, check_seed, resolve
from .results import NonFiniteError, jsonable, make_record
from .userfamily import SampleReport, first_sample, sample_report

#: fewest samples of the jackknife estimators (product-norm, window: ``montecarlo.group_sizes(..., least=4)``, so each
#: left-out set keeps two samples); the others need two for a standard error.  tests/test_fuzz.py runs every
#: quantity at the low end of each option's range, so a range here that an estimator refuses fails there.
JACKKNIFE_SAMPLES = 4


def _SAMPLES(default: int, least: int = 2) -> ParamSpec:
    return ParamSpec("samples", "int", default, "Monte Carlo samples", lo=least, hi=mc.MAX_SAMPLES)


def far_grid(n_max: int, points: int) -> np.ndarray:
    """Geometric grid of far-set sizes from 10 (or n_max) to n_max, increasing integers."""
    lo = min(10, n_max)
    return np.unique(np.geomspace(lo, n_max, points).round().astype(np.int64))


@dataclass(frozen=True)
class Quantity:
    """A named measurement: its options, the estimator call, and its peak-memory model
    ``memory(options, d, form) -> {option: fp64 numbers it drives}``."""

    name: str
    doc: str
    options: tuple[ParamSpec, ...]
    run: Callable[[Family, dict, np.random.Generator], dict]
    memory: Callable[[dict, int, str], dict[str, float]]


def _device(f: Family, o: dict) -> tuple[Family, str | None]:
    """The family and device for an estimator with a ``device`` option: numpy draws go through ``f`` (which may
    count them for the progress bar); torch draws its own angles from the family itself (``f.family``)."""
    if o["device"] == "numpy":
        return f, None
    return getattr(f, "family", f), o["device"]


def _coherence(f: Family, o: dict, rng: np.random.Generator) -> dict:
    fam, device = _device(f, o)
    return est.coherence(fam, o["steps"], o["samples"], rng, device=device).to_dict()


def _product_norm(f: Family, o: dict, rng: np.random.Generator) -> dict:
    return est.mean_product_sq(f, o["steps"], o["samples"], rng).to_dict()


def _onset(f: Family, o: dict, rng: np.random.Generator) -> dict:
    """The onset, refused (not saved as inf) when |c(n)| stays above eps up to ``steps`` in all samples or in
    a jackknife group (its standard error is then not finite)."""
    onset = est.onset(f, o["eps"], o["steps"], o["samples"], rng)
    if not (math.isfinite(onset.mean) and math.isfinite(onset.stderr)):
        raise ParamError(f"quantity onset: |c(n)| stays above eps = {o['eps']} up to steps = {o['steps']} "
                         f"({'in every sample' if not math.isfinite(onset.mean) else 'in some jackknife groups'}): "
                         "the onset lies beyond; use more steps or a larger eps")
    return onset.to_dict()


def _window(f: Family, o: dict, rng: np.random.Generator) -> dict:
    return est.window(f, o["context"], o["samples"], rng).to_dict()


def _score_gap(f: Family, o: dict, rng: np.random.Generator) -> dict:
    """The far-score statistics; when the far scores have no spread (deterministic steps such as rope or nope)
    the standardised gap (q.k - E s) / sd(s) is unbounded: saved as null with ``gap_sd_note`` saying why."""
    out = est.score_gap(f, o["offset"], o["samples"], rng).to_dict()
    if not math.isfinite(out["gap_sd"]):
        out["gap_sd"] = None
        out["gap_sd_note"] = "far scores have zero spread (deterministic steps): the standardised gap is unbounded"
    return out


def _near_weight(f: Family, o: dict, rng: np.random.Generator) -> dict:
    grid = far_grid(o["n_max"], o["points"])
    fam, device = _device(f, o)
    return est.near_weight(fam, grid, o["s0"], o["samples"], rng, alibi_slope=o["alibi_slope"], chunk=o["chunk"],
                           device=device).to_dict()


def _far_residual(f: Family, o: dict, rng: np.random.Generator) -> dict:
    grid = far_grid(o["n_max"], o["points"])
    fam, device = _device(f, o)
    return est.far_residual(fam, grid, o["samples"], rng, value_rotation=bool(o["value_rotation"]), chunk=o["chunk"],
                            device=device).to_dict()


def _drift(f: Family, o: dict, rng: np.random.Generator) -> dict:
    return est.drift(f, o["steps"], rng)


# ------------------------------------------------------------------------------------------ peak memory
# The estimates follow the estimators' batching (``mc.batches``: about ``BATCH_BUDGET`` numbers of
# path per batch, within one of min(16, samples) groups) and count every array alive at the peak, in fp64
# numbers; tests/test_robustness_memory.py holds them against tracemalloc's measured peak on small runs.

def sample_numbers(form: type, d: int) -> int:
    """fp64 numbers alive per step and sequence while a step form (a ``Steps`` class, by its ``form_name``) is
    sampled: the angles d/2, Householder w and its Gaussian draw 2d + 1, dense matrices with their sampling
    temporaries (QR / expm) 4 d^2."""
    return {"angle": d // 2 or 1, "householder": 2 * d + 1, "dense": 4 * d * d}[form.form_name]


def batch_size(per_sample: int, available: int) -> int:
    """Sequences per batch, as ``mc.batches``: BATCH_BUDGET // per_sample, at least 1, at most available."""
    return min(available, max(1, mc.BATCH_BUDGET // max(per_sample, 1)))


def group_size(samples: int) -> int:
    """Largest group of ``mc.group_sizes``: ceil(samples / min(16, samples))."""
    return -(-samples // min(16, samples))


def _path_memory(option: str, n: int, samples_per_batch: int, d: int, form: type, copies: int = 1) -> dict[str, float]:
    """A batch of b sequences of n steps read by a bilinear form (``estimators.bilinear_path``): b is sized by
    the whole path's numbers (``mc.path_floats``), and a path longer than ``mc.path_chunk``
    steps is drawn in chunks of that many; per chunk step the draws (``copies`` of them, with their sampling
    temporaries) and about four (b, chunk+1, d) working arrays."""
    b = batch_size(mc.path_floats(form, d, n), samples_per_batch)
    chunk = min(n, mc.path_chunk(form, d))
    return {option: b * (chunk + 1) * (copies * sample_numbers(form, d) + 4 * d)}


def _grouped_memory(option: str, n: int, samples: int, d: int, form: type, copies: int = 1) -> dict[str, float]:
    """``mc.grouped_sums``: one batch of paths (``_path_memory``) folded into running group sums
    (the sample count changes nothing beyond one batch)."""
    return _path_memory(option, n, group_size(samples), d, form, copies)


def _memory_coherence(o: dict, d: int, form: type) -> dict[str, float]:
    return _grouped_memory("steps", o["steps"], o["samples"], d, form)


def _memory_window(o: dict, d: int, form: type) -> dict[str, float]:
    return _grouped_memory("context", o["context"], o["samples"], d, form, copies=2)  # + transposed


def _memory_score_gap(o: dict, d: int, form: type) -> dict[str, float]:
    """One batch of paths at a time, folded into running moments and histogram counts."""
    return _path_memory("offset", o["offset"], o["samples"], d, form)


def _memory_product_norm(o: dict, d: int, form: type) -> dict[str, float]:
    """A batch of b samples sized by ``form.product_floats``.  Angle form: the angles, their cumulative
    sums and sines (b, n, d/2 each) and the 16 groups' plane sums (2, n, d/2), twice while the jackknife runs.
    Other forms: d transports (b, n+1, d, d): the list, its stack and the square; per-group sums
    (16 + 2) x (n+1) d^2 kept, twice while the jackknife runs."""
    n = o["steps"]
    b = batch_size(form.product_floats(d, n), group_size(o["samples"]))
    if form.form_name == "angle":
        return {"steps": b * n * (sample_numbers(form, d) + d) + 40 * n * d}
    return {"steps": b * (n + 1) * (sample_numbers(form, d) + 5 * d * d) + 40 * (n + 1) * d * d}


def _memory_streamed(o: dict, d: int, form: type) -> dict[str, float]:
    """near-weight / far-residual: b sequences of one chunk (min(chunk, n_max) steps) at a time, as steps and
    three (b, chunk, d) working arrays; each batch's rows of ``points`` results folded into running moments."""
    c = min(o["chunk"], o["n_max"])
    b = batch_size(mc.stream_floats(form, d, o["chunk"], o["n_max"]), o["samples"])
    return {"chunk": b * c * (2 * sample_numbers(form, d) + 3 * d + 1)}


def _memory_drift(o: dict, d: int, form: type) -> dict[str, float]:
    """One chunk of at most max(1, BATCH_BUDGET / d^2) steps at a time (``estimators.drift``), held as matrices:
    sampled, its dense form, an fp64 and an fp32 copy."""
    chunk = min(o["steps"], max(1, mc.BATCH_BUDGET // (d * d)))
    dense = 0 if form.form_name == "dense" else d * d
    return {"steps": chunk * (sample_numbers(form, d) + dense + 1.5 * d * d)}


_STEPS = lambda default: ParamSpec("steps", "int", default, "number of accumulated steps n", lo=1, hi=mc.MAX_STEPS)  # noqa: E731
_CHUNK = ParamSpec("chunk", "int", 4096, "streaming chunk length", lo=1, hi=mc.MAX_STEPS)
_DEVICE = ParamSpec("device", "choice", "numpy", "numpy draws (default), or torch draws and sums on cpu / cuda "
                    "(rope, and so2-accumulated with gaussian, uniform, rope-uniform or lattice angles; another "
                    "random stream of the same law)", choices=("numpy", "cpu", "cuda"))
_GRID = (ParamSpec("n_max", "int", 10_000, "largest far-set size N", lo=1, hi=mc.MAX_FAR_SIZE),
         ParamSpec("points", "int", 5, "far-set sizes on a geometric grid", lo=1, hi=200))

QUANTITIES: dict[str, Quantity] = {q.name: q for q in (
    Quantity("coherence", "c(n) = E[q^T A_n...A_1 k], n = 0..steps", (_STEPS(64), _SAMPLES(2000), _DEVICE), _coherence,
             _memory_coherence),
    Quantity("product-norm", "||E[A_n...A_1]||_F^2 / d, unbiased", (_STEPS(32), _SAMPLES(500, JACKKNIFE_SAMPLES)),
             _product_norm, _memory_product_norm),
    Quantity("onset", "incoherence onset n_eps = min{n: |c(n)| <= eps}",
             (ParamSpec("eps", "float", 0.05, "coherence threshold", lo=0.0, hi=1.0, lo_open=True, hi_open=True),
              _STEPS(512), _SAMPLES(2000)), _onset, _memory_coherence),
    Quantity("window", "mixing-window width W(T) = sum_Delta c_T(Delta)^2",
             (ParamSpec("context", "int", 256, "context length T", lo=1, hi=mc.MAX_STEPS), _SAMPLES(400, JACKKNIFE_SAMPLES)),
             _window, _memory_window),
    Quantity("score-gap", "far-score variance d E[s^2] and the near/far gap",
             (ParamSpec("offset", "int", 256, "far distance Delta", lo=1, hi=mc.MAX_STEPS), _SAMPLES(20000)), _score_gap, _memory_score_gap),
    Quantity("near-weight", "near-target attention weight vs far-set size N",
             (*_GRID, mc.S0, mc.ALIBI_SLOPE, _SAMPLES(32), _CHUNK, _DEVICE),
             _near_weight, _memory_streamed),
    Quantity("far-residual", "|far value residual|^2 / |m|^2 vs N",
             (*_GRID, ParamSpec("value_rotation", "int", 1, "1: rotate values (QKV), 0: QK only", lo=0, hi=1),
              _SAMPLES(400), _CHUNK, _DEVICE), _far_residual, _memory_streamed),
    Quantity("drift", "orthogonality drift of one product, fp64 and fp32", (_STEPS(10000),), _drift, _memory_drift),
)}


#: step-sequence draws of each quantity (batch x n_steps summed over its sample() calls), for the progress bar
STEPS_DRAWN: dict[str, Callable[[dict], int]] = {
    "coherence": lambda o: o["samples"] * o["steps"], "onset": lambda o: o["samples"] * o["steps"],
    "product-norm": lambda o: o["samples"] * o["steps"], "window": lambda o: o["samples"] * o["context"],
    "score-gap": lambda o: o["samples"] * o["offset"], "near-weight": lambda o: o["samples"] * o["n_max"],
    "far-residual": lambda o: o["samples"] * o["n_max"], "drift": lambda o: o["steps"],
}


class ProgressFamily:
    """``family`` seen by an estimator, advancing ``bar`` by batch x n_steps at each ``sample`` call."""

    def __init__(self, family: Family, bar: Any) -> None:
        self.family, self.bar, self.dim = family, bar, family.dim

    def sample(self, rng: np.random.Generator, n_steps: int, batch: int):
        steps = self.family.sample(rng, n_steps, batch)
        self.bar.update(n_steps * batch)
        return steps


def resolve_job(quantity: str, family: str, family_args: dict,
                options: dict) -> tuple[Quantity, Family, dict, Steps]:
    """Validate a job before running it: known quantity, valid family parameters, valid options, the family's
    first sample (``userfamily.first_sample``, a built-in exactly as a user family; sweeps call this for every
    grid point before any job runs) and an estimated peak memory for the step form that sample has within
    ``MAX_MEMORY_BYTES`` (``check_job_memory``; for a built-in, whose class declares its form, also before the
    draw).  Returns the quantity, family, resolved options and that sample.
    """
    if quantity not in QUANTITIES:
        raise ParamError(f"unknown quantity {quantity!r}; known: {', '.join(QUANTITIES)}")
    q = QUANTITIES[quantity]
    opts = resolve(q.options, options, f"quantity {quantity}")
    if "points" in opts:
        check_far_grid(opts["n_max"], opts["points"], quantity)
    fam = make_family(family, **family_args)
    if opts.get("device", "numpy") != "numpy":
        check_torch_device(fam, opts["device"])
    declared = getattr(type(fam), "FORM", None)  # a built-in's class names its form: too large work is refused
    if declared is not None:                    # from the estimate before anything is drawn
        check_job_memory(q, fam, opts, declared)
    steps = first_sample(fam, family)
    check_job_memory(q, fam, opts, type(steps))
    return q, fam, opts, steps


def check_torch_device(family: Family, device: str) -> None:
    """Refuse ``device`` (cpu / cuda) up front when it is not here or the torch backend cannot draw ``family``
    (``backend_torch.angle_sampler``); ParamError names the option."""
    from . import backend_torch as bt

    try:
        dev = bt.check_device(device)
        bt.angle_sampler(family, dev, bt.torch_generator(np.random.default_rng(0), dev))
    except ParamError as err:
        raise ParamError(f"--opt device={device}: {err}") from None


def peak_memory(quantity: str, options: dict, dim: int, form: type) -> dict[str, float]:
    """Estimated peak memory in bytes of ``quantity`` with resolved ``options`` at dimension ``dim`` for a
    family of step ``form`` (a ``Steps`` class), split by the option that drives each part: {option: bytes}."""
    return {k: 8.0 * v for k, v in QUANTITIES[quantity].memory(options, dim, form).items()}


def check_job_memory(q: Quantity, family: Family, opts: dict, form: type) -> None:
    """Refuse a job whose ``peak_memory`` exceeds ``MAX_MEMORY_BYTES``, naming the option driving most of it
    and the largest value of it that fits (found by bisection: memory does not decrease as the option grows),
    or a smaller dim if none does."""
    parts = peak_memory(q.name, opts, family.dim, form)
    total = sum(parts.values())
    if total <= MAX_MEMORY_BYTES:
        return
    option = max(parts, key=parts.get)
    value = opts[option]

    def fits_at(v: int) -> bool:
        return sum(peak_memory(q.name, {**opts, option: v}, family.dim, form).values()) <= MAX_MEMORY_BYTES

    lo, hi = 0, value  # fits_at(hi) is False; find the largest v in [1, value) with fits_at(v)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits_at(mid) else (lo, mid)
    most = lo
    fits = (f"use {option} <= {most}" + ("" if option == "samples" else " (or a smaller dim)") if most >= 1 else
            f"use a smaller dim than {family.dim} (or fewer samples)")
    check_memory(total, option, value, f"quantity {q.name} with family {family_name(family)} at dim = {family.dim}", fits)


def check_finite_result(result: dict, quantity: str, family: Family) -> None:
    """Raise ``NonFiniteError`` if any number of ``result`` is NaN or infinite, naming the family parameters
    that produced it: such a number is not a measurement (fp64 overflow, or a family outside its range)."""
    try:
        jsonable(result, "result")
    except NonFiniteError as err:
        raise NonFiniteError(f"quantity {quantity}, family {family_name(family)} ({set_params(family)}): {err} -- "
                             "these parameters give no finite result in fp64; use smaller values") from None


def set_params(family: Family) -> str:
    """"k=v, ..." for the parameters a built-in family has away from their defaults (all of a user family's)."""
    params = family_params(family)
    specs = FAMILIES[family_name(family)].PARAMS if family_name(family) in FAMILIES else ()
    defaults = {spec.name: spec.default for spec in specs}
    return ", ".join(f"{k}={v}" for k, v in params.items() if k not in defaults or defaults[k] != v) or "defaults"


def check_far_grid(n_max: int, points: int, owner: str) -> None:
    """Refuse ``points`` larger than the number of distinct far-set sizes ``far_grid`` can give up to n_max."""
    if far_grid(n_max, points).size < points:
        most = max(p for p in range(1, points) if far_grid(n_max, p).size == p)
        raise ParamError(f"quantity {owner}: points = {points} would repeat far-set sizes up to n_max = {n_max} "
                         f"(rounded geometric grid); use points <= {most} or a larger n_max")


@dataclass(frozen=True)
class Plan:
    """A validated measurement, ready to run: ``plan_measurement`` -> ``run_plan``.  ``family_check``: what the
    family's first sample showed (built-in or user-defined alike)."""

    quantity: Quantity
    family: Family
    options: dict
    seed: int
    family_check: SampleReport


def plan_measurement(quantity: str, family: str, family_args: dict | None = None, options: dict | None = None,
                     seed: int = 0) -> Plan:
    """Every check that can be made before any work: the seed and ``resolve_job`` (the first sample and the
    memory its step form needs); the plan holds what that sample showed (``family_check``)."""
    seed = check_seed(seed)
    q, fam, opts, steps = resolve_job(quantity, family, family_args or {}, options or {})
    return Plan(q, fam, opts, seed, sample_report(steps))


def run_plan(plan: Plan, progress: bool = False) -> dict:
    """Run a planned measurement and return its record (config, seed, result, timings, version, and
    ``family_check``: the first sample's step form, orthogonality error, largest singular value).
    ``progress``: a bar of steps drawn on stderr (when it is a terminal)."""
    start = time.perf_counter()
    total = STEPS_DRAWN[plan.quantity.name](plan.options)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"), \
            progress_bar(total, f"accum measure {plan.quantity.name}", "step", progress, every=10.0) as bar:  # an overflow is refused below, as one line
        result = plan.quantity.run(ProgressFamily(plan.family, bar), plan.options, np.random.default_rng(plan.seed))
    check_finite_result(result, plan.quantity.name, plan.family)
    name = family_name(plan.family)
    config = {"quantity": plan.quantity.name, "family": name, "params": family_params(plan.family),
              "options": plan.options}
    record = make_record("measurement", config, result, plan.seed, {"seconds": time.perf_counter() - start})
    return {**record, "family_check": plan.family_check.to_dict()}


def measure(quantity: str, family: str, family_args: dict | None = None, options: dict | None = None,
            seed: int = 0) -> dict:
    """Run one measurement and return its record (``plan_measurement`` then ``run_plan``)."""
    return run_plan(plan_measurement(quantity, family, family_args, options, seed))


def config_from_record(record: dict, source: str) -> tuple[str, str, dict, dict, int]:
    """(quantity, family, params, options, seed) of a saved measurement record, to run it again exactly: the seed is
    the record's own (a sweep job's 128-bit seed included), refused naming ``source`` unless an integer >= 0."""
    config = record.get("config")
    ok = (record.get("kind") == "measurement" and isinstance(config, dict)
          and isinstance(config.get("quantity"), str) and isinstance(config.get("family"), str)
          and isinstance(config.get("params"), dict) and isinstance(config.get("options"), dict))
    if not ok:
        raise ParamError(f"--from {source}: not a measurement record (kind measurement with config quantity, "
                         "family, params, options)")
    try:
        seed = check_seed(record.get("seed"))
    except ParamError as err:
        raise ParamError(f"--from {source}: {err}") from None
    return config["quantity"], config["family"], config["params"], config["options"], seed
