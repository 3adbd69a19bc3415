"""Text of an assumption-check report (``accum check``): one line per condition, then the verdict per claim."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .checks import Report


def format_report(report: Report) -> str:
    """Human-readable text: one line per condition, then the verdict per claim."""
    lines = [f"accum check {report.family}  d={report.dim}  samples={report.samples}  false-failure budget {report.budget:g}",
             f"params: {report.params}", ""]
    for c in report.conditions.values():
        marks = {True: "PASS", False: "FAIL"} if c.required else {True: "yes ", False: "no  "}
        mark = marks.get(c.passed, "skip" if c.detail.startswith("skipped") else "n/a ")
        val = "" if c.value is None else f"{c.value:.6g}"
        se = "" if c.stderr is None else f" +- {c.stderr:.2g}"
        kk = "" if c.k is None else f" (k = {c.k:.2f})"
        lines.append(f"  {mark}  {c.name:<20} {val}{se}{kk}  {c.detail}")
    if report.theory:
        lines.append("")
        lines.append("  theory: " + ", ".join(f"{k} = {v:.6g}" for k, v in report.theory.items()))
    lines.append("")
    lines.append(f"spectral-gap condition: {'HOLDS' if report.condition_holds else 'FAILS'}")
    for name, c in report.claims.items():
        lines.append(f"  {name} {'applies' if c['applies'] else 'does not apply'}: {c['why']}")
    return "\n".join(lines)
