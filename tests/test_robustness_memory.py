"""Issue 14, memory: each quantity's peak-memory estimate is held against the measured peak (tracemalloc, which
numpy reports its buffers to) on small runs of every step form, and work over the limit is refused up front.

The estimate must never be below the measured peak (a refusal would come too late) and not above 4x it (a
looser model would refuse work that fits).  If an estimator's memory changes (e.g. streaming), this test
names the quantity whose model in ``simulations.measure`` must follow.
"""

import time
import tracemalloc

import pytest

from accum.cli import main
from accum.simulations.measure import BUILTIN_FORMS, peak_memory, plan_measurement, run_plan
from accum.simulations.params import MAX_MEMORY_BYTES, ParamError

CASES = [
    ("coherence", "so2-accumulated", {"dim": 16}, {"steps": 300, "samples": 400}),
    ("coherence", "householder", {"dim": 16}, {"steps": 300, "samples": 400}),
    ("coherence", "haar", {"dim": 8}, {"steps": 100, "samples": 200}),
    ("onset", "householder", {"dim": 12}, {"steps": 200, "samples": 200}),
    ("window", "householder", {"dim": 12}, {"context": 200, "samples": 200}),
    ("window", "so2-accumulated", {"dim": 12}, {"context": 200, "samples": 200}),
    ("score-gap", "householder", {"dim": 12}, {"offset": 50, "samples": 20000}),
    ("product-norm", "householder", {"dim": 8}, {"steps": 50, "samples": 64}),
    ("product-norm", "haar", {"dim": 6}, {"steps": 50, "samples": 64}),
    ("near-weight", "householder", {"dim": 8}, {"n_max": 3000, "samples": 64, "chunk": 1000}),
    ("near-weight", "haar", {"dim": 6}, {"n_max": 500, "samples": 64, "chunk": 200}),
    ("far-residual", "householder", {"dim": 8}, {"n_max": 1000, "samples": 64, "chunk": 500}),
    ("far-residual", "so2-accumulated", {"dim": 8}, {"n_max": 3000, "samples": 400, "chunk": 1000}),
    ("drift", "householder", {"dim": 16}, {"steps": 3000}),
    ("drift", "haar", {"dim": 16}, {"steps": 1000}),
    ("drift", "so2-accumulated", {"dim": 16}, {"steps": 2000}),
]


@pytest.mark.parametrize("quantity, family, params, options", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_peak_memory_estimate_bounds_the_measured_peak(quantity, family, params, options):
    plan = plan_measurement(quantity, family, params, options, seed=0)
    estimate = sum(peak_memory(quantity, plan.options, plan.family.dim, BUILTIN_FORMS[family]).values())
    tracemalloc.start()
    try:
        run_plan(plan)
        _, measured = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert measured <= estimate <= 4 * measured, f"{quantity}/{family}: estimate {estimate:.3g} B, measured {measured:.3g} B"


@pytest.mark.parametrize("argv, option", [
    (["drift", "--family", "householder", "--opt", "steps=10000000"], "steps = 10000000"),
    (["drift", "--family", "haar", "--param", "dim=4096", "--opt", "steps=100"], "steps = 100"),
    (["product-norm", "--family", "haar", "--param", "dim=512", "--opt", "steps=5000"], "steps = 5000"),
    (["score-gap", "--family", "so2-accumulated", "--opt", "samples=1000000000"], "samples = 1000000000"),
    (["coherence", "--family", "householder", "--opt", "samples=1000000000"], "samples = 1000000000"),
])
def test_work_that_cannot_fit_is_refused_before_it_starts(argv, option, tmp_path, capsys):
    out = tmp_path / "r.json"
    start = time.perf_counter()
    assert main(["measure", *argv, "--json", str(out)]) == 2
    assert time.perf_counter() - start < 5.0          # refused from the estimate, not after trying
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and option in err[0] and "GiB" in err[0] and "use " in err[0]
    assert list(tmp_path.iterdir()) == []


def test_the_suggested_value_fits():
    with pytest.raises(ParamError, match=r"use steps <= (\d+)") as info:
        plan_measurement("drift", "haar", {"dim": 4096}, {"steps": 100})
    most = int(info.value.args[0].split("use steps <= ")[1].split()[0])
    plan = plan_measurement("drift", "haar", {"dim": 4096}, {"steps": most})       # no refusal at the suggestion
    assert sum(peak_memory("drift", plan.options, 4096, "dense").values()) <= MAX_MEMORY_BYTES
