"""Named measurements: one quantity, one family, validated options, one seed -> a saved record.

This is what ``accum measure`` and sweeps call.  Each quantity declares its options as ``ParamSpec`` entries
(so ranges are checked before any work starts) and maps to one estimator in ``simulations.estimators``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import estimators as est
from .families import Family, family_name, family_params, make_family
from .params import ParamError, ParamSpec, check_seed, resolve
from .results import make_record

_SAMPLES = lambda default: ParamSpec("samples", "int", default, "Monte Carlo samples", lo=2, hi=10**9)  # noqa: E731


def far_grid(n_max: int, points: int) -> np.ndarray:
    """Geometric grid of far-set sizes from 10 (or n_max) to n_max, increasing integers."""
    lo = min(10, n_max)
    return np.unique(np.geomspace(lo, n_max, points).round().astype(np.int64))


@dataclass(frozen=True)
class Quantity:
    name: str
    doc: str
    options: tuple[ParamSpec, ...]
    run: Callable[[Family, dict, np.random.Generator], dict]


def _coherence(f: Family, o: dict, rng: np.random.Generator) -> dict:
    return est.coherence(f, o["steps"], o["samples"], rng).to_dict()


def _product_norm(f: Family, o: dict, rng: np.random.Generator) -> dict:
    return est.mean_product_sq(f, o["steps"], o["samples"], rng).to_dict()


def _onset(f: Family, o: dict, rng: np.random.Generator) -> dict:
    return est.onset(f, o["eps"], o["steps"], o["samples"], rng).to_dict()


def _window(f: Family, o: dict, rng: np.random.Generator) -> dict:
    return est.window(f, o["context"], o["samples"], rng).to_dict()


def _score_gap(f: Family, o: dict, rng: np.random.Generator) -> dict:
    return est.score_gap(f, o["offset"], o["samples"], rng).to_dict()


def _near_weight(f: Family, o: dict, rng: np.random.Generator) -> dict:
    grid = far_grid(o["n_max"], o["points"])
    return est.near_weight(f, grid, o["s0"], o["samples"], rng, alibi_slope=o["alibi_slope"], chunk=o["chunk"]).to_dict()


def _far_residual(f: Family, o: dict, rng: np.random.Generator) -> dict:
    grid = far_grid(o["n_max"], o["points"])
    return est.far_residual(f, grid, o["samples"], rng, value_rotation=bool(o["value_rotation"]), chunk=o["chunk"]).to_dict()


def _drift(f: Family, o: dict, rng: np.random.Generator) -> dict:
    return est.drift(f, o["steps"], rng)


_STEPS = lambda default: ParamSpec("steps", "int", default, "number of accumulated steps n", lo=1, hi=10**7)  # noqa: E731
_CHUNK = ParamSpec("chunk", "int", 4096, "streaming chunk length", lo=1, hi=10**7)
_GRID = (ParamSpec("n_max", "int", 10_000, "largest far-set size N", lo=1, hi=10**9),
         ParamSpec("points", "int", 5, "far-set sizes on a geometric grid", lo=1, hi=200))

QUANTITIES: dict[str, Quantity] = {q.name: q for q in (
    Quantity("coherence", "c(n) = E[q^T A_n...A_1 k], n = 0..steps", (_STEPS(64), _SAMPLES(2000)), _coherence),
    Quantity("product-norm", "||E[A_n...A_1]||_F^2 / d, unbiased", (_STEPS(32), _SAMPLES(500)), _product_norm),
    Quantity("onset", "incoherence onset n_eps = min{n: |c(n)| <= eps}",
             (ParamSpec("eps", "float", 0.05, "coherence threshold", lo=0.0, hi=1.0, lo_open=True, hi_open=True),
              _STEPS(512), _SAMPLES(2000)), _onset),
    Quantity("window", "mixing-window width W(T) = sum_Delta c_T(Delta)^2",
             (ParamSpec("context", "int", 256, "context length T", lo=1, hi=10**7), _SAMPLES(400)), _window),
    Quantity("score-gap", "far-score variance d E[s^2] and the near/far gap",
             (ParamSpec("offset", "int", 256, "far distance Delta", lo=1, hi=10**7), _SAMPLES(20000)), _score_gap),
    Quantity("near-weight", "near-target attention weight vs far-set size N",
             (*_GRID, ParamSpec("s0", "float", 4.0, "near logit |q||k|", lo=0.0, lo_open=True),
              ParamSpec("alibi_slope", "float", 0.0, "ALiBi slope (0 = none)", lo=0.0), _SAMPLES(32), _CHUNK), _near_weight),
    Quantity("far-residual", "|far value residual|^2 / |m|^2 vs N",
             (*_GRID, ParamSpec("value_rotation", "int", 1, "1: rotate values (QKV), 0: QK only", lo=0, hi=1),
              _SAMPLES(400), _CHUNK), _far_residual),
    Quantity("drift", "orthogonality drift of one product, fp64 and fp32", (_STEPS(10000),), _drift),
)}


def resolve_job(quantity: str, family: str, family_args: dict, options: dict) -> tuple[Quantity, Family, dict]:
    """Validate a job before running it: known quantity, valid family parameters, valid options."""
    if quantity not in QUANTITIES:
        raise ParamError(f"unknown quantity {quantity!r}; known: {', '.join(QUANTITIES)}")
    q = QUANTITIES[quantity]
    opts = resolve(q.options, options, f"quantity {quantity}")
    if "points" in opts:
        check_far_grid(opts["n_max"], opts["points"], quantity)
    return q, make_family(family, **family_args), opts


def check_far_grid(n_max: int, points: int, owner: str) -> None:
    """Refuse ``points`` larger than the number of distinct far-set sizes ``far_grid`` can give up to n_max."""
    if far_grid(n_max, points).size < points:
        most = max(p for p in range(1, points) if far_grid(n_max, p).size == p)
        raise ParamError(f"quantity {owner}: points = {points} would repeat far-set sizes up to n_max = {n_max} "
                         f"(rounded geometric grid); use points <= {most} or a larger n_max")


def measure(quantity: str, family: str, family_args: dict | None = None, options: dict | None = None,
            seed: int = 0) -> dict:
    """Run one measurement and return its record (config, seed, result, timings, version)."""
    seed = check_seed(seed)
    q, fam, opts = resolve_job(quantity, family, family_args or {}, options or {})
    start = time.perf_counter()
    result = q.run(fam, opts, np.random.default_rng(seed))
    config = {"quantity": quantity, "family": family_name(fam), "params": family_params(fam), "options": opts}
    return make_record("measurement", config, result, seed, {"seconds": time.perf_counter() - start})
