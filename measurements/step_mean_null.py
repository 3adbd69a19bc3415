"""The null law of the step-mean rows (``accum.routechecks.check_step_mean``): the quick plan's step-mean jobs at
seeds 1..N on the correct code; per family and pooled, the p-values 1 - Phi(z) against U(0, 1) (Kolmogorov-Smirnov)
and the fractions below 0.01 and 0.001.

    OMP_NUM_THREADS=1 .venv/bin/python measurements/step_mean_null.py 200 > measurements/step-mean-null.txt
"""

import sys

import numpy as np
from scipy import stats

from accum import report as rep, report_plan as rp

seeds = int(sys.argv[1])
jobs = [j for j in rp.plan(rp.PRESETS["quick"]) if j.check == "step-mean"]
z: dict[str, list[float]] = {}
for seed in range(1, seeds + 1):
    for m in rep.run_plan(jobs, seed, progress=False)[0]:
        if m.kind == "statistical":
            z.setdefault(m.family, []).append(float(m.measured[0]))
pooled = []
for family, values in z.items():
    p = stats.norm.sf(np.array(values))
    pooled += list(p)
    print(f"{family:60s} mean z {np.mean(values):6.3f}  sd {np.std(values):5.3f}  max {np.max(values):5.2f}  "
          f"KS p {stats.kstest(p, 'uniform').pvalue:.3f}")
pooled = np.array(pooled)
print(f"pooled: {pooled.size} p-values, KS p {stats.kstest(pooled, 'uniform').pvalue:.3f}, "
      f"below 0.01: {np.mean(pooled < 0.01):.4f}, below 0.001: {np.mean(pooled < 0.001):.4f}")
