"""The controlled rows of ``accum verify`` (C4's far-score variance, C5's far mass, C6's value residual: control
variates whose exact means the theory knows) report honest standard errors, through the checks themselves.

Each check draws its own probe pair, so replicates of one check have different truths: the replicate spread is taken
of measured - predicted (on the log scale for the far mass), which is 0 in expectation whatever the probes, and
``verdict.stderr_ratio`` holds it to the reported errors -- the replicate-dispersion check of ``accum.stderrs`` on the
rows as the report judges them.  The controls' own rows (their sample means against the closed forms) are checked the
same way.  Budget: each test fails correct code with probability <= 1e-5 (two-sided, Bonferroni over its statistics).
"""

import numpy as np
import pytest
from scipy import stats as sps

from accum import report_plan as rp
from accum.claims import CHECKS
from accum.verdict import stderr_ratio

BUDGET = 1e-5
FAMILIES = rp.default_families()

#: check, family key, small sizes, index of the controlled row, index of the controls' row, replicates
CASES = {
    "far-mass": ("far-mass", "so2", {"far_sizes": [10, 40], "s0": 4.0, "samples": 64, "theory_samples": 1000}, 1, 3, 300),
    "values": ("values", "givens", {"far_sizes": [4, 64], "samples": 48, "theory_samples": 1000}, 0, 2, 300),
    "scores": ("scores-far-variance", "householder", {"length": 24, "offsets": [1, 4], "sequences": 48,
                                                      "theory_samples": 1000}, 0, 1, 300),
}


def differences(row) -> tuple[np.ndarray, np.ndarray]:
    """(measured - predicted, standard error) per point, on the row's scale."""
    x, p, se = (np.atleast_1d(np.asarray(a, float)) for a in (row.measured, row.predicted, row.stderr))
    if row.scale == "log":
        return np.log(x) - np.log(p), se / x
    return x - p, se


@pytest.mark.parametrize("case", list(CASES))
def test_controlled_rows_report_honest_standard_errors(case):
    check, key, sizes, controlled, control, reps = CASES[case]
    spec, family = CHECKS[check], FAMILIES[key]
    rng = np.random.default_rng(11)
    got = {controlled: [], control: []}
    for _ in range(reps):
        rows = spec.run(family, rng, **sizes)
        assert "control" in rows[controlled].what and "(the control" in rows[control].what
        for index in got:
            got[index].append(differences(rows[index]))
    k = float(sps.norm.isf(BUDGET / 4))  # two statistics (rho, mean) of two rows, two-sided
    for index, pairs in got.items():
        diff, se = np.array([d for d, _ in pairs]), np.array([s for _, s in pairs])
        rho, rho_se = stderr_ratio(diff, se)
        assert abs(rho - 1.0) <= k * rho_se, (case, index, rho, rho_se)
        z = diff.mean(axis=0) / (diff.std(axis=0, ddof=1) / np.sqrt(reps))
        assert np.all(np.abs(z) <= float(sps.norm.isf(BUDGET / (4 * z.size)))), (case, index, z)
