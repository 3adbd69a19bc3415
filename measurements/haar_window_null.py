"""The null law of Haar's window rows judged by the degenerate U-statistics' law (``accum.degenerate``): the quick
plan's Haar window job at the window calibration's seeds (S + 1 .. S + N, the reports of
``accum verify --quick --calibrate N --seed S --only window``), each row judged at the whole plan's evidence count as
the report judges it; the deviates' mean, sd and Kolmogorov-Smirnov p against N(0, 1), and the rows that fail.

    OMP_NUM_THREADS=1 .venv/bin/python measurements/haar_window_null.py 15000 300 > measurements/haar-window-null.txt
"""

import sys

import numpy as np
from scipy import stats

from accum import report as rep, report_plan as rp
from accum.verdict import judge_all

first, runs = int(sys.argv[1]), int(sys.argv[2])
plan = rp.plan(rp.PRESETS["quick"])
jobs = [j for j in plan if j.check == "window" and "haar" in rp.label(j.family)]
assert len(jobs) == 1, jobs
budget, evidence = 0.01, rp.evidence_rows(plan)  # the report's default budget
deviates: dict[str, list[float]] = {}
failed = []
for seed in range(first + 1, first + runs + 1):
    measurements = rep.run_plan(jobs, seed, progress=False)[0]
    for m in measurements:
        deviates.setdefault(m.what, []).extend(np.atleast_1d(m.measured).tolist())
    for row in judge_all(measurements, budget, evidence):
        if not row.passed:
            failed.append((seed, row.what, float(row.z), float(row.k)))
print(f"Haar's window rows at seeds {first + 1}..{first + runs}, judged at R = {evidence}")
for what, z in deviates.items():
    z = np.array(z)
    print(f"{what}\n    {z.size} deviates: mean {z.mean():.3f}, sd {z.std():.3f}, min {z.min():.2f}, max {z.max():.2f}, "
          f"KS p against N(0, 1) {stats.kstest(z, 'norm').pvalue:.3f}")
print(f"rows failed: {len(failed)} of {runs * len(deviates)}" + "".join(f"\n    seed {s}: {w} z {z:.2f} k {k:.2f}"
                                                                  for s, w, z, k in failed))
