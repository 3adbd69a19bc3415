"""Every probe number in probes/REPORT.md's results block and docs/probes.md's verdict block is what
``accum probe report`` prints from the committed sweeps (``python -m accum.probes.docblocks`` rewrites them)."""

from pathlib import Path

import pytest

from accum.probes.docblocks import BLOCKS, command_output, quoted

#: the checkout these tests sit in: the documents are read beside the tests (the mutation harness links them there)
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("path, name, argv", BLOCKS, ids=[name for _, name, _ in BLOCKS])
def test_quoted_results_are_the_commands_output(path, name, argv):
    assert quoted(REPO / path, name) == command_output(argv), (
        f"{path}'s {name} block differs from `accum probe {' '.join(argv)}`: run python -m accum.probes.docblocks")
