"""``accum bench``: speed ratios of the fast paths against their baselines, measured in one run.

Each entry times a fast path and its baseline on the same inputs (best of ``repeats`` wall-clock runs,
after one warm-up; a baseline slower than a second runs once) and reports fast/baseline (or baseline/fast
for speed-ups) with the target from issue 2.  Two dense baselines at T = 1024:

* ``reference.scores``, the plain fp64 reference the tests hold every fast path against (explicit loops,
  one dense mat-vec per pair): the baseline of the 50x target;
* ``reference.scores_dense_scan``, a BLAS-vectorised O(T^2 d^2) scan.  Its ratio is bounded by about d
  (the scan does d times the fast path's arithmetic, both in BLAS), so it carries no target: it is context.

Ratios, not absolute times, are the result: they transfer between machines far better.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Callable

import numpy as np

from . import estimators as est
from . import reference
from .families import make_family
from .params import ParamError, check_positive_int
from .results import atomic_write_json, check_output_path, make_record


def best_time(fn: Callable[[], object], repeats: int) -> float:
    """Minimum wall-clock seconds of ``fn()`` over ``repeats`` runs after one warm-up call.

    A first call that takes over a second is the measurement itself: a slow baseline is not run again.
    """
    start = time.perf_counter()
    fn()
    first = time.perf_counter() - start
    if first > 1.0:
        return first
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def causal_qk(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Plain attention scores q k^T with the causal mask (NaN above the diagonal), the baseline."""
    s = q @ np.swapaxes(k, -1, -2)
    s[..., np.triu(np.ones(s.shape[-2:], dtype=bool), 1)] = np.nan
    return s


def _ratio(name: str, fast: float, base: float, target: float | None, kind: str) -> dict:
    """kind 'slowdown': fast/base must be <= target; 'speedup': base/fast must be >= target (None: context)."""
    value = fast / base if kind == "slowdown" else base / fast
    ok = None if target is None else bool(value <= target if kind == "slowdown" else value >= target)
    return {"name": name, "fast_s": fast, "baseline_s": base, "ratio": value, "kind": kind, "target": target, "meets": ok}


def run_benchmarks(repeats: int = 3, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    d = 64
    t = 4096
    q, k = rng.normal(size=(1, t, d)), rng.normal(size=(1, t, d))
    so2, rope = make_family("so2-accumulated", dim=d, law="rope-uniform"), make_family("rope", dim=d)
    out.append(_ratio("so2-accumulated scores / RoPE scores (T=4096, d=64, sampling included)",
                      best_time(lambda: so2.sample(rng, t, 1).scores(q, k), repeats),
                      best_time(lambda: rope.sample(rng, t, 1).scores(q, k), repeats), 1.5, "slowdown"))
    t = 2048
    q, k = q[:, :t], k[:, :t]
    hh = make_family("householder", dim=d, beta=1.5)
    steps = hh.sample(rng, t, 1)
    out.append(_ratio("Householder all-pair scores / causal q k^T (T=2048, d=64)",
                      best_time(lambda: steps.scores(q, k), repeats), best_time(lambda: causal_qk(q, k), repeats), 4.0, "slowdown"))
    for name, fam in (("householder d=16", make_family("householder", dim=16)), ("so2-accumulated d=16", make_family("so2-accumulated", dim=16))):
        n_steps, n = 128, 4000
        draw = (lambda f: lambda: f.sample(np.random.default_rng(1), n_steps, n))(fam)
        run = (lambda f: lambda: est.coherence(f, n_steps, n, np.random.default_rng(1)))(fam)
        out.append(_ratio(f"coherence estimator / drawing its random steps ({name}, n=128, 4000 samples)",
                          best_time(run, repeats), best_time(draw, repeats), 3.0, "slowdown"))
    t = 1024
    q, k = q[:, :t], k[:, :t]
    for name, fam in (("so2-accumulated", so2), ("householder", hh)):
        steps = fam.sample(rng, t, 1)
        mats = steps.dense()
        fast = best_time(lambda: steps.scores(q, k), repeats)
        out.append(_ratio(f"plain fp64 reference (the tests' oracle) / fast scores ({name}, T=1024, d=64)",
                          fast, best_time(lambda: reference.scores(mats, q, k), 1), 50.0, "speedup"))
        out.append(_ratio(f"vectorised dense fp64 scan / fast scores ({name}, T=1024, d=64)",
                          fast, best_time(lambda: reference.scores_dense_scan(mats, q, k), repeats), None, "speedup"))
    return out


def add_bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="speed ratios against references")
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--repeats", type=int, default=3)
    p.set_defaults(run=run_bench)


def run_bench(args: argparse.Namespace) -> int:
    if args.json is not None:
        check_output_path(args.json, "--json")
    start = time.perf_counter()
    if check_positive_int("--repeats", args.repeats) > 100:
        raise ParamError(f"--repeats must be an integer in [1, 100], got {args.repeats}")
    rows = run_benchmarks(args.repeats)
    for r in rows:
        cmp = "<=" if r["kind"] == "slowdown" else ">="
        verdict = "info" if r["meets"] is None else "ok  " if r["meets"] else "MISS"
        target = "(context, no target)" if r["target"] is None else f"(target {cmp} {r['target']:g})"
        print(f"{verdict} {r['ratio']:8.2f}  {target:<20}  {r['name']}")
    if args.json is not None:
        config = {"repeats": args.repeats, "cpu_count": os.cpu_count()}
        atomic_write_json(args.json, make_record("bench", config, {"ratios": rows}, 0, {"seconds": time.perf_counter() - start}))
    return 0
