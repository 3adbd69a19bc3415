"""Default places of ``accum figures``: outputs under the current folder, inputs found from the package itself.

The figures and their measurements go where the user runs the command (``results/`` there).  The probe sweep that
figures 6 and 7 read is part of the source tree, beside this package (``probes/results/cpu/sweep.json`` in the
repository, ``accum/probes/...`` in an installation), so the default works from any folder.
"""

from __future__ import annotations

from pathlib import Path

DEFAULT_OUT = Path("results/figures")
DEFAULT_RESULTS = Path("results/figures-data")
#: the committed CPU probe sweep: ``probes/`` is this package's sibling in the repository and when installed
DEFAULT_PROBES = Path(__file__).resolve().parents[1] / "probes" / "results" / "cpu" / "sweep.json"
