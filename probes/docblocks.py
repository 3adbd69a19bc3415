"""The probe results quoted in the documentation, as the commands print them from the committed sweeps.

probes/REPORT.md holds ``accum probe report`` between ``<!-- probe-results:start -->`` and ``<!-- probe-results:end
-->``; docs/probes.md holds ``accum probe report --summary`` between the ``probe-summary`` markers.  No number in
those blocks is typed by hand: ``python -m accum.probes.docblocks`` rewrites them from the commands' output, and the
tests fail while a block differs from it.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
from pathlib import Path

#: the checkout this module sits in (probes/ under the repository root)
ROOT = Path(__file__).resolve().parent.parent
#: (file relative to the repository root, marker name, the ``accum probe`` arguments whose output the block holds)
BLOCKS = ((Path("probes", "REPORT.md"), "probe-results", ["report"]),
          (Path("docs", "probes.md"), "probe-summary", ["report", "--summary"]))


def command_output(argv: list[str]) -> str:
    """What ``accum probe ARGV`` prints on stdout (``SystemExit``-free: the report commands return a status)."""
    from accum.probes.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(["probe", *argv])
    if status != 0:
        raise RuntimeError(f"accum probe {' '.join(argv)} exited with {status}")
    return out.getvalue()


def block_pattern(name: str) -> re.Pattern:
    """The text between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->`` (group 1)."""
    return re.compile(rf"<!-- {name}:start -->\n(.*?)<!-- {name}:end -->", re.S)


def quoted(path: Path, name: str) -> str:
    """The block ``name`` of ``path`` as it stands."""
    match = block_pattern(name).search(path.read_text())
    if match is None:
        raise ValueError(f"{path} has no {name} block")
    return match.group(1)


def refresh() -> list[Path]:
    """Rewrite every block from its command's output; returns the files that changed."""
    changed = []
    for relative, name, argv in BLOCKS:
        path = ROOT / relative
        text = path.read_text()
        new = block_pattern(name).sub(lambda m: f"<!-- {name}:start -->\n{command_output(argv)}<!-- {name}:end -->",
                                      text)
        if new != text:
            path.write_text(new)
            changed.append(path)
    return changed


if __name__ == "__main__":
    for changed_path in refresh():
        print(f"rewrote {changed_path}", file=sys.stderr)
