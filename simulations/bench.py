"""``accum bench``: speed ratios of the fast paths against their baselines, measured in one run.

Each entry times a fast path and its baseline on the same inputs (best of ``repeats`` wall-clock runs,
after one warm-up; a baseline slower than a second runs once) and reports fast/baseline (or baseline/fast
for speed-ups) with the target from issue 2.  Two dense baselines at T = 1024:

* ``reference.scores``, the plain fp64 reference the tests hold every fast path against (explicit loops,
  one dense mat-vec per pair): the baseline of the 50x target;
* ``reference.scores_dense_scan``, a BLAS-vectorised O(T^2 d^2) scan.  Its ratio is bounded by about d
  (the scan does d times the fast path's arithmetic, both in BLAS), so it carries no target: it is context.

Estimator rows (issue 16) time an estimator against drawing exactly the random numbers it consumes: the
baseline replays the estimator's own schedule of ``family.sample`` calls (same batch sizes, same step
chunks, same seed) and does nothing else, so the ratio is the estimator's cost over its random-number floor.

Threads: every row runs inside ``threadpool_limits(threads)`` (numpy/BLAS/OpenMP) with torch's intra-op
threads set to the same number (default 1), both recorded in the JSON.  With one thread per process the
ratios do not depend on whether another process uses the second core; with the default thread count they
do (BLAS oversubscription made one ratio 30x worse in issue 14).

Ratios, not absolute times, are the result: they transfer between machines far better.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from typing import Callable

import numpy as np
import torch
from threadpoolctl import threadpool_info, threadpool_limits

from . import estimators as est
from . import montecarlo as mc
from . import reference
from .families import make_family
from .params import check_int, integer_option
from .results import make_record, reserve_output


def best_time(fn: Callable[[], object], repeats: int) -> float:
    """Minimum wall-clock seconds of ``fn()`` over ``repeats`` runs after one warm-up call.

    A first call that takes over a second is the measurement itself: a slow baseline is not run again.
    """
    start = time.perf_counter()
    fn()
    first = time.perf_counter() - start
    if first > 1.0:
        return first
    return min(timed(fn) for _ in range(repeats))


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def paired_times(fast: Callable[[], object], base: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Minimum wall-clock seconds of ``fast()`` and ``base()`` over ``repeats`` rounds, timed alternately.

    Alternating (fast, base, fast, base, ...) puts both under the same load when another process comes
    and goes, so their ratio holds even when the absolute times do not.  One warm-up call each, not timed.
    """
    fast()
    base()
    times = [(timed(fast), timed(base)) for _ in range(repeats)]
    return min(t[0] for t in times), min(t[1] for t in times)


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


def coherence_draws(family, n_steps: int, n_samples: int, seed: int, product: bool = False) -> None:
    """The ``family.sample`` calls of ``coherence`` (or, with ``product``, of ``mean_product_sq``)."""
    rng = np.random.default_rng(seed)
    form = mc.step_form(family)
    per_sample = form.product_floats(family.dim, n_steps) if product else mc.path_floats(form, family.dim, n_steps)
    for size in mc.group_sizes(n_samples, least=4 if product else 2):
        for b in mc.batches(size, per_sample):
            family.sample(rng, n_steps, b)


def stream_draws(family, far_sizes: list[int], n_samples: int, seed: int, chunk: int = 4096) -> None:
    """The ``family.sample`` calls of ``near_weight`` / ``far_residual``: chunks cut at every far size."""
    rng = np.random.default_rng(seed)
    for b in mc.batches(n_samples, mc.stream_floats(mc.step_form(family), family.dim, chunk, max(far_sizes))):
        done = 0
        for target in far_sizes:
            while done < target:
                n = min(chunk, target - done)
                family.sample(rng, n, b)
                done += n


def estimator_rows(repeats: int) -> list[dict]:
    """Estimators over their random-number floor (targets from issue 16), SO(2) d = 16 Gaussian angles."""
    so2, hh = make_family("so2-accumulated", dim=16), make_family("householder", dim=16)
    n_steps, n = 128, 4000
    out = []
    for name, fam in (("so2-accumulated d=16", so2), ("householder d=16", hh)):
        out.append(_ratio(f"coherence estimator / drawing its random steps ({name}, n=128, 4000 samples)",
                          *paired_times(lambda: est.coherence(fam, n_steps, n, np.random.default_rng(1)),
                                        lambda: coherence_draws(fam, n_steps, n, 1), repeats), 1.5, "slowdown"))
    out.append(_ratio("product-norm estimator / drawing its random steps (so2-accumulated d=16, n=128, 2000 samples)",
                      *paired_times(lambda: est.mean_product_sq(so2, n_steps, 2000, np.random.default_rng(1)),
                                    lambda: coherence_draws(so2, n_steps, 2000, 1, product=True), repeats), 1.5, "slowdown"))
    small = make_family("householder", dim=8)
    out.append(_ratio("product-norm estimator / drawing its random steps (householder d=8, n=64, 400 samples; "
                      "d^2 work per d draws, context)",
                      *paired_times(lambda: est.mean_product_sq(small, 64, 400, np.random.default_rng(1)),
                                    lambda: coherence_draws(small, 64, 400, 1, product=True), repeats), None, "slowdown"))
    far_sizes, samples = [1000, 100_000], 8

    def floor() -> None:
        stream_draws(so2, far_sizes, samples, 1)

    rows = (("near_weight", lambda: est.near_weight(so2, far_sizes, 4.0, samples, np.random.default_rng(1))),
            ("far mass with ALiBi slope (near_weight)",
             lambda: est.near_weight(so2, far_sizes, 4.0, samples, np.random.default_rng(1), alibi_slope=1e-4)),
            ("far_residual", lambda: est.far_residual(so2, far_sizes, samples, np.random.default_rng(1))))
    for name, run in rows:
        out.append(_ratio(f"{name} / drawing its random steps (so2-accumulated d=16, N=1e5, 8 samples)",
                          *paired_times(run, floor, repeats), 2.0, "slowdown"))
    return out


def thread_settings() -> dict:
    """Threads in force: each threadpool (numpy/BLAS/OpenMP) as threadpoolctl sees it, and torch's."""
    return {"threadpools": [{k: p[k] for k in ("user_api", "internal_api", "num_threads")} for p in threadpool_info()],
            "torch_threads": torch.get_num_threads()}


def run_benchmarks(repeats: int = 3, seed: int = 0, threads: int = 1) -> tuple[list[dict], dict]:
    """All rows with numpy/BLAS/OpenMP and torch pinned to ``threads``; returns (rows, thread settings)."""
    before = torch.get_num_threads()
    with threadpool_limits(limits=threads):
        torch.set_num_threads(threads)
        try:
            return _all_rows(repeats, seed), thread_settings()
        finally:
            torch.set_num_threads(before)


def _all_rows(repeats: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    d = 64
    t = 4096
    q, k = rng.normal(size=(1, t, d)), rng.normal(size=(1, t, d))
    so2, rope = make_family("so2-accumulated", dim=d, law="rope-uniform"), make_family("rope", dim=d)
    out.append(_ratio("so2-accumulated scores / RoPE scores (T=4096, d=64, sampling included)",
                      *paired_times(lambda: so2.sample(rng, t, 1).scores(q, k), lambda: rope.sample(rng, t, 1).scores(q, k), repeats),
                      1.5, "slowdown"))
    t = 2048
    q, k = q[:, :t], k[:, :t]
    hh = make_family("householder", dim=d, beta=1.5)
    steps = hh.sample(rng, t, 1)
    out.append(_ratio("Householder all-pair scores / causal q k^T (T=2048, d=64)",
                      *paired_times(lambda: steps.scores(q, k), lambda: causal_qk(q, k), repeats), 4.0, "slowdown"))
    out.extend(estimator_rows(repeats))
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
    p = sub.add_parser("bench", help="speed ratios against references; exit 1 if a row misses its target",
                       description="Time each fast path against its baseline (the fp64 reference, or drawing the "
                                   "random numbers an estimator consumes) and print the ratio with its target: ok, "
                                   "MISS, or info (context rows without a target).  Exit status 1 when a row misses "
                                   "its target (--allow-miss: 0).  Rows and targets: docs/benchmarks.md.")
    p.add_argument("--json", metavar="PATH", help="also write the ratios, with their config, to this JSON file")
    p.add_argument("--repeats", type=integer_option, default=3, metavar="N",
                   help="timings per row; each row keeps the best of N (default 3)")
    p.add_argument("--threads", type=integer_option, default=1, metavar="N", help="numpy/BLAS and torch threads for every row (default 1)")
    p.add_argument("--allow-miss", action="store_true", help="exit 0 even when a row misses its target (still "
                                                              "printed as MISS)")
    p.set_defaults(run=run_bench)


def run_bench(args: argparse.Namespace) -> int:
    """Check the options, reserve the --json file (refused before any work), run, print, write the record."""
    check_int("--repeats", args.repeats, 1, 100)
    check_int("--threads", args.threads, 1, os.cpu_count() or 1)  # at most the cores here
    with reserve_output(args.json, "--json") if args.json is not None else contextlib.nullcontext() as out:
        start = time.perf_counter()
        rows, threads = run_benchmarks(args.repeats, threads=args.threads)
        print(f"threads: {args.threads} (numpy/BLAS/OpenMP via threadpoolctl, torch {threads['torch_threads']})")
        for r in rows:
            cmp = "<=" if r["kind"] == "slowdown" else ">="
            verdict = "info" if r["meets"] is None else "ok  " if r["meets"] else "MISS"
            target = "(context, no target)" if r["target"] is None else f"(target {cmp} {r['target']:g})"
            print(f"{verdict} {r['ratio']:8.2f}  {target:<20}  {r['name']}")
        if out is not None:
            config = {"repeats": args.repeats, "cpu_count": os.cpu_count(), "threads": args.threads,
                      "thread_settings": threads}
            out.write_json(make_record("bench", config, {"ratios": rows}, 0, {"seconds": time.perf_counter() - start}))
    missed = [r["name"] for r in rows if r["meets"] is False]
    if missed:
        print(f"accum bench: {len(missed)} of {len(rows)} rows missed their target: {'; '.join(missed)}", file=sys.stderr)
    return 1 if missed and not args.allow_miss else 0
