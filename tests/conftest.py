"""Helpers shared by the test modules (import them with ``from conftest import ...``).

Statistical tests compare a Monte Carlo estimate with an independent prediction by one rule,
``simulations.stats.within_budget``: z = (measured - predicted) / sqrt(se^2 + floor^2) against the normal
threshold for the test's false-failure ``budget`` split (Bonferroni) over the points it checks.  Each module
states its budget; the suite's total stays below 1e-3.
"""

from __future__ import annotations

import numpy as np

from accum.simulations.stats import within_budget


def assert_within(measured, stderr, predicted, budget: float, floor: float = 1e-12) -> None:
    """Fail with the z scores unless every point of ``measured`` +- ``stderr`` agrees with ``predicted``."""
    ok, z = within_budget(measured, stderr, predicted, budget, floor)
    assert ok, f"max |z| = {np.max(np.abs(z)):.2f} over {z.size} points: z = {z}"
