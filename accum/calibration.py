"""``accum verify --calibrate N``: the default report at N fresh seeds, its false-failure rate with a 95%
interval, and each evidence row's failures against its share of the budget (``calibrate``,
``summarize_calibration``, ``format_calibration``); with a cache each finished report's outcome is saved, so
an interrupted calibration resumes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from tqdm import tqdm

from accum.simulations.identity import code_identity, import_closure
from accum.simulations.runner import map_outcomes

from .report import load_keyed, report, save_keyed, verify_modules
from .report_plan import CLAIMS, plan_part
from .verdict import binomial_interval, binomial_tail


def _report_outcome(args: tuple[str, int, float, tuple[str, ...] | None]) -> dict:
    """One calibration run: the report at ``seed`` (or its checks in ``only``, judged at the whole plan's R),
    reduced to pass/fail per row (picklable, for the pool)."""
    preset, seed, budget, only = args
    jobs, n_evidence = plan_part(preset, only)
    r = report(jobs, list(CLAIMS), preset, seed, budget, progress=False, n_evidence=n_evidence)
    # a part has no claim verdicts (the claims of the checks left out have no evidence in it): it passes when its rows do
    passed = r["passed"] if only is None else all(x["passed"] for x in r["rows"])
    return {"seed": seed, "passed": passed, "rows": [(x["claim"], x["family"], x["what"], x["passed"],
                                                      x["counts_as_evidence"]) for x in r["rows"]]}


def calibration_modules() -> tuple[str, ...]:
    """A calibration report's pass / fail depends on the checks' numbers (``verify_modules``), on the plan, the
    judging and the thresholds (``accum.report``, ``accum.verdict``) and on the outcome kept per report (this
    module): this module and what it imports of the package (``identity.import_closure``) fingerprint a saved
    report with the checks' modules."""
    return tuple(sorted({*verify_modules(), *import_closure("accum", "calibration")}))


def calibration_key(preset: str, seed: int, budget: float, code: dict, only: Sequence[str] | None = None) -> dict:
    """What a saved calibration report is reused for: the same preset, seed, budget, checks and code version."""
    key = {"calibration-report": preset, "seed": seed, "budget": budget, "code": code}
    return key if only is None else {**key, "only": sorted(only)}


def calibrate(preset: str, runs: int, seed: int, budget: float, workers: int, client: Any, progress: bool,
              cache: Path | None = None, only: Sequence[str] | None = None) -> dict:
    """The report at seeds seed + 1 .. seed + runs: its false-failure rate with a 95% Clopper-Pearson interval,
    and each evidence row's failures against its share runs * budget / R.

    ``only`` (check names) calibrates that part of the report: its rows judged at the whole plan's R, so their
    failure rate is their share of the report's (for rows that changed since a calibration of the whole report;
    each check runs on its own stream, so the others' rows are untouched).  With ``cache`` each finished report's
    outcome is saved there as it arrives (keyed by preset, seed, budget, checks and code version), so an
    interrupted calibration resumes and a longer one reuses a shorter one's reports."""
    only = None if only is None else tuple(sorted(set(only)))
    code = code_identity(calibration_modules()) if cache is not None else {}
    done = {}
    if cache is not None:
        for i in range(runs):
            found = load_keyed(cache, calibration_key(preset, seed + 1 + i, budget, code, only))
            if found is not None:
                done[seed + 1 + i] = found
    items = [(preset, seed + 1 + i, budget, only) for i in range(runs) if seed + 1 + i not in done]
    outcomes = list(done.values())
    with tqdm(total=runs, initial=len(done), desc="accum verify --calibrate", unit="report", disable=None if progress else True) as bar:
        for (_, s, _, _), outcome in map_outcomes(_report_outcome, items, workers, client):
            if isinstance(outcome, Exception):
                raise outcome
            if cache is not None:
                save_keyed(cache, "verify-calibration-report", calibration_key(preset, s, budget, code, only), outcome, s,
                           {})
            outcomes.append(outcome)
            bar.update()
    return {**summarize_calibration(outcomes, preset, seed + 1, budget, plan_part(preset, only)[1]),
            "checks": "all" if only is None else list(only)}


#: a row "fails more than 3x its share" (issue 12's target) when its count is significant against 3x its share
SHARE_MULTIPLE, SHARE_LEVEL = 3.0, 0.05


def summarize_calibration(outcomes: list[dict], preset: str, first_seed: int, budget: float,
                          n_evidence: int | None = None) -> dict:
    """Calibration summary from per-report outcomes (``_report_outcome``; every run has the plan's rows in the
    plan's order): the report's failure rate with its 95% Clopper-Pearson interval, and per evidence row its
    failures n against its share runs * budget / R (R evidence rows) with the one-sided exact binomial p-value
    P(X >= n | rate 3 budget / R).  A row's expected count is small (0.09 at N = 500, budget 0.01, R = 57), so
    a single failure is already 11x it; "more than 3x its share" is therefore judged by that test: p < 0.05
    says the row's false-failure rate is above 3x its share.  R is ``n_evidence`` (the whole plan's, for a part
    of it), by default the evidence rows of the outcomes."""
    outcomes = sorted(outcomes, key=lambda o: o["seed"])
    runs = len(outcomes)
    failures = sum(not o["passed"] for o in outcomes)
    lo, hi = binomial_interval(failures, runs)
    first = outcomes[0]["rows"]
    n_evidence = sum(row[4] for row in first) if n_evidence is None else n_evidence
    row_rate = budget / max(n_evidence, 1)
    share = runs * row_rate
    rows = []
    for i, (c, f, w, _, e) in enumerate(first):
        n = sum(not o["rows"][i][3] for o in outcomes)
        p = binomial_tail(n, runs, SHARE_MULTIPLE * row_rate) if e else None
        rows.append({"claim": c, "family": f, "what": w, "evidence": e, "failures": n, "expected": share if e else 0.0,
                     "ratio_to_share": (n / share) if e else None, "p_above_3x_share": p})
    above = [r for r in rows if r["evidence"] and r["p_above_3x_share"] < SHARE_LEVEL]
    return {"preset": preset, "runs": runs, "first_seed": first_seed, "budget": budget, "failures": failures,
            "rate": failures / runs, "interval95": [lo, hi], "evidence_rows": n_evidence, "rows": rows,
            "rows_above_3x_share": len(above), "seeds_failed": sorted(o["seed"] for o in outcomes if not o["passed"])}


def format_calibration(c: dict) -> str:
    lo, hi = c["interval95"]
    part = "" if c.get("checks", "all") == "all" else f" (checks {', '.join(c['checks'])} only, judged at the whole plan's R)"
    lines = [f"accum verify --calibrate {c['runs']} --{c['preset']}{part}: {c['failures']} of {c['runs']} reports "
             f"failed, rate {c['rate']:.4f}, 95% interval [{lo:.4f}, {hi:.4f}] (budget {c['budget']:g})",
             f"each of the {c['evidence_rows']} evidence rows may fail {c['runs'] * c['budget'] / c['evidence_rows']:.3g} "
             "times in expectation (its share); rows that failed:"]
    failed = sorted((r for r in c["rows"] if r["failures"]), key=lambda r: -r["failures"])
    for r in failed:
        share = f"{r['ratio_to_share']:.1f}x share, p(>3x) = {r['p_above_3x_share']:.2f}" if r["evidence"] else "sanity row"
        lines.append(f"  {r['failures']:4d}  {share:<30} {r['claim']:<6} {r['family'][:40]:<40} {r['what'][:60]}")
    if not failed:
        lines.append("  none")
    lines.append(f"rows whose failures are significant against {SHARE_MULTIPLE:g}x their share (one-sided exact "
                 f"binomial, p < {SHARE_LEVEL:g}): {c['rows_above_3x_share']}")
    return "\n".join(lines)
