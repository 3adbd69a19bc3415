"""A report of ``accum verify`` as text: the console table (``format_table``) and Markdown
(``format_markdown``).  Both print the same cells (``_cells``) of the JSON rows, in columns as wide as their
widest cell, so nothing is cut.
"""

from __future__ import annotations

import math
from typing import Sequence

from .report_plan import CLAIMS


#: (column, alignment) of the rows tables; a column is as wide as its widest cell (``_widths``)
COLUMNS = (("claim", "<"), ("family", "<"), ("check", "<"), ("kind", "<"), ("predicted", ">"), ("measured", ">"),
           ("se", ">"), ("z", ">"), ("k", ">"), ("ref", "<"), ("mde", ">"), ("verdict", "<"))


def _cells(r: dict) -> list[str]:
    """A JSON row as the text of its cells; the mde is relative (%) or, where the prediction is 0, absolute (±)."""
    ref = r["reference"] + (f"{r['dof']:.0f}" if r["reference"] == "t" else "")
    mde = "" if r["mde"] is None else f"{100 * r['mde']:.2g}%"
    if r["mde_absolute"] is not None:  # a prediction of 0: the smallest departure from 0 detected
        mde = f"±{r['mde_absolute']:.2g}"
    z, k = (f"{r['z']:.3g}", f"{r['k']:.2f}") if r["counts_as_evidence"] else ("", "")  # sanity rows: a tolerance
    return [r["claim"], r["family"], r["what"], r["kind"], f"{r['predicted']:.4g}", f"{r['measured']:.4g}",
            f"{r['stderr']:.2g}", z, k, ref, mde, "PASS" if r["passed"] else "FAIL"]


def _widths(table: Sequence[Sequence[str]]) -> list[int]:
    """Each column's width: its widest cell in ``table`` (the header included), so no cell is ever cut."""
    return [max(len(cells[i]) for cells in table) for i in range(len(COLUMNS))]


def _line(cells: Sequence[str], widths: Sequence[int]) -> str:
    return " ".join(f"{text:{align}{width}}" for text, (_, align), width in zip(cells, COLUMNS, widths)).rstrip()


def _sections(report_: dict) -> list[tuple[str, list[dict]]]:
    rows = report_["rows"]
    return [("evidence (statistical and adversarial rows; they share the false-failure budget)",
             [r for r in rows if r["counts_as_evidence"]]),
            ("exact and sanity (deterministic rows and sample-by-sample bounds: shown, fail the report if "
             "violated, not evidence)", [r for r in rows if not r["counts_as_evidence"]])]


def _detectable(rows: Sequence[dict], claim: str) -> str:
    """The claim's detectable relative error in its closed forms, as text: per family the best (smallest)
    minimum detectable effect of its rows held to a closed form, then the worst over the families."""
    best: dict[str, float] = {}
    for r in rows:
        if r["claim"] == claim and r["source"] == "closed form" and r["mde"] is not None:
            best[r["family"]] = min(best.get(r["family"], math.inf), r["mde"])
    return f"  (a closed form {100 * max(best.values()):.2g}% off fails)" if best else ""


def format_table(report_: dict) -> str:
    """Fixed-width text: the evidence rows, the exact and sanity rows, then one verdict line per claim."""
    header = [c[0] for c in COLUMNS]
    widths = _widths([header, *(_cells(r) for r in report_["rows"])])  # one width for both sections
    head = _line(header, widths)
    lines = []
    for title, rows in _sections(report_):
        lines += ["", title, head, "-" * len(head)] + [_line(_cells(r), widths) for r in rows]
    lines.append("")
    for c, ok in report_["claims"].items():
        lines.append(f"{c} {'PASS' if ok else 'FAIL'}  {CLAIMS.get(c, c)}{_detectable(report_['rows'], c)}")
    lines.append(f"sanity {'PASS' if report_['sanity_passed'] else 'FAIL'}  exact rows and bounds")
    lines.append(f"report {'PASS' if report_['passed'] else 'FAIL'} (preset {report_['preset']}, seed {report_['seed']}, "
                 f"false-failure budget {report_['budget']:g} over {report_['evidence_rows']} evidence rows)")
    return "\n".join(lines)


def _md(text: str) -> str:
    return str(text).replace("|", "\\|")


def format_markdown(report_: dict) -> str:
    out = [f"# accum verify ({report_['preset']}, seed {report_['seed']}, budget {report_['budget']:g})"]
    for title, rows in _sections(report_):
        out += ["", f"## {_md(title)}", "", "| " + " | ".join(c[0] for c in COLUMNS) + " |",
                "|" + "|".join("---:" if c[1] == ">" else "---" for c in COLUMNS) + "|"]
        out += ["| " + " | ".join(_md(x) for x in _cells(r)) + " |" for r in rows]
    out += ["", "| claim | statement | verdict |", "|---|---|---|"]
    out += [f"| {c} | {_md(CLAIMS.get(c, c))} | {'PASS' if ok else '**FAIL**'} |" for c, ok in report_["claims"].items()]
    return "\n".join(out) + "\n"
