"""``accum verify``: the command line of the report -- every claim C1-C6 held against its prediction, with
verdicts that are calibrated and can fail.

The report is a plan of checks (``accum.report_plan``), each run on its own random stream seeded from a hash
of its identity (check, family, parameters, sizes) -- adding a check changes no other row.  R evidence rows
(statistical and adversarial) share the false-failure budget (Bonferroni, ``accum.verdict``); exact and
bound rows form the "exact and sanity" section, which fails the report when violated but is not evidence
for a claim.  ``accum.report`` runs and judges it, ``accum.report_format`` prints it.

``--family F`` runs every check that applies to F (``theory.checks.check`` says which claims do);
``--calibrate N`` runs the report at N fresh seeds and measures its false-failure rate (``accum.calibration``).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from typing import TYPE_CHECKING

import numpy as np

from accum.interrupts import holding_interrupts
from accum.runtime import Interrupted
from accum.simulations.params import ParamError, check_int, check_seed, float_option, integer_option, parse_assignments
from accum.simulations.results import check_output_path, make_output_dir, make_record, reserve_output
from accum.simulations.runner import WORKERS_HELP

if TYPE_CHECKING:
    from accum.simulations.families import Family
    from accum.theory.checks import Report

# The report's modules (the checks, the theory, torch for the adversarial searches) are imported by the functions
# that run it, so `accum verify --help` and a refused option answer at once.


def add_verify(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", help="check every claim C1-C6; exit 1 if any fails",
                       description="Measure each claim's quantity by Monte Carlo for every family it is about, hold it "
                                   "against its prediction (closed form, or estimated from a family's moment "
                                   "operators) and print one row per check -- prediction, measurement +- se, z, "
                                   "threshold, detectable error, verdict -- then one verdict per claim C1-C6.  The "
                                   "evidence rows share the false-failure budget.  Exit status 0 when every claim "
                                   "passes, 1 when one fails, 2 for bad input -- and for a --family to which no "
                                   "claim applies (e.g. steps that expand norms): one line names the conditions of "
                                   "`accum check` it fails, and nothing is run or written.  Progress: a bar on a terminal, "
                                   "otherwise one line per finished check on stderr.  Statistics: docs/verify.md.")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", dest="preset", action="store_const", const="quick", help="the smaller report (default): every engine and theory route, a 1%% error detected per claim and "
                      "family; about 72 CPU-seconds, 39 s on 2 cores (docs/verify.md)")
    size.add_argument("--full", dest="preset", action="store_const", const="full", help="the larger report: more samples, tighter detectable errors (its time and memory: docs/verify.md)")
    p.set_defaults(preset="quick", run=run_verify)
    p.add_argument("--seed", type=integer_option, default=0,
                   help="the report's seed; each check's stream comes from it and the check's identity (default 0)")
    p.add_argument("--budget", type=float_option, default=0.01,
                   help="false-failure probability for the whole report, in [1e-12, 1) (default 0.01)")
    p.add_argument("--family", help="verify one family (built-in name or module:Class) on every claim that applies "
                                    "(`accum check F` says which; exit 2 when none does)")
    p.add_argument("--param", action="append", metavar="K=V", help="parameter of --family (repeatable)")
    p.add_argument("--calibrate", type=integer_option, metavar="N", help="run the report at N fresh seeds; print its failure rate")
    p.add_argument("--only", nargs="+", metavar="CHECK", help="with --calibrate: only these checks of the report "
                   "(names as in its timings, e.g. far-mass), each row judged at the whole plan's share")
    p.add_argument("--workers", type=integer_option, metavar="K", help=WORKERS_HELP)
    p.add_argument("--scheduler", metavar="tcp://HOST:PORT", help="run the checks (or --calibrate's reports) on Dask")
    p.add_argument("--cache", metavar="DIR", help="save each finished check (with --calibrate: each finished report) "
                                                  "here; a re-run reuses it")
    p.add_argument("--json", metavar="PATH", help="also write the report (rows, verdicts, timings; with --calibrate: the "
                                               "calibration summary) as a JSON record")
    p.add_argument("--markdown", metavar="PATH", help="also write the report's tables as Markdown")
    p.add_argument("--no-progress", action="store_true", help="no progress (a bar on a terminal, else one line per "
                                                              "finished check on stderr)")


def applicable_claims(family: "Family", seed: int) -> tuple[set[str], dict]:
    """The claims ``accum check`` says apply to ``family`` (its report's ``claims`` dict); ``ParamError`` naming
    --family, the conditions it fails and each claim's reason when none applies (``no_claim_applies``): a report
    over no claim would verify nothing, so it is refused before any Monte Carlo, as bad input (exit 2)."""
    from accum.theory.checks import check

    from accum.runtime import Heartbeat

    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # the rows say what is not finite
        found = check(family, rng=np.random.default_rng(seed), progress=Heartbeat("accum verify: accum check"))
    claims = {c for c, v in found.claims.items() if v["applies"]}
    if not claims:
        raise ParamError(no_claim_applies(found))
    return claims, found.claims


def no_claim_applies(found: "Report") -> str:
    """The one line for a family to which no claim applies: the family, the required conditions of ``accum check``
    that fail (name, estimate and what it is held to) and the claims grouped by their reason, e.g. "--family m:F
    (dim=4): no claim C1-C6 applies, nothing to verify; conditions failed: norm-bounded (estimate 1.5),
    first-moment-gap (estimate 1.5); C1: no first-moment gap ...; C2, C3, C6: needs C1; ..."."""
    failed = [c.name + ("" if c.value is None else f" (estimate {c.value:.4g})")
              for c in found.conditions.values() if c.required and c.passed is False]
    by_reason: dict[str, list[str]] = {}
    for claim, v in found.claims.items():
        by_reason.setdefault(v["why"], []).append(claim)
    reasons = "; ".join(f"{', '.join(claims)}: {why}" for why, claims in by_reason.items())
    given = ", ".join(f"{k}={v}" for k, v in found.params.items())
    return (f"--family {found.family}{f' ({given})' if given else ''}: no claim C1-C6 applies, nothing to verify; "
            f"conditions failed: {', '.join(failed) or 'none'}; {reasons} (`accum check` shows every condition)")


def refuse_nonfinite_rows(result: dict, family: "Family") -> None:
    """``NonFiniteError`` naming the family and its parameters if a row of its report measured or predicted NaN or
    infinity (fp64 overflow, e.g. expanding steps): the one line ``accum measure`` gives, not a report of NaNs."""
    from accum.simulations.families import family_name
    from accum.simulations.measure import set_params
    from accum.simulations.results import NonFiniteError

    for row in result["rows"]:
        for key in ("measured", "predicted"):
            value = row[key]
            if isinstance(value, float) and not math.isfinite(value):
                raise NonFiniteError(f"family {family_name(family)} ({set_params(family)}): {row['what']}: {key} = "
                                     f"{value} is not finite -- these parameters give no finite result in fp64; use "
                                     "smaller values")


def reserved_outputs(stack: contextlib.ExitStack, args: argparse.Namespace) -> tuple[Any, Any]:
    """--json and --markdown proven writable before any work (``results.reserve_output``; nothing is left if
    the run fails or is interrupted)."""
    if args.json is not None and args.markdown is not None and Path(args.json).resolve() == Path(args.markdown).resolve():
        raise ParamError(f"--json and --markdown name the same file {args.json}; give two paths")
    return tuple(None if path is None else stack.enter_context(reserve_output(path, option))
                 for option, path in (("--json", args.json), ("--markdown", args.markdown)))


def check_options(args: argparse.Namespace) -> None:
    """Every option of ``accum verify`` that can be checked without work; ``ParamError`` names it."""
    check_seed(args.seed, "--seed")
    if not 1e-12 <= args.budget < 1.0:
        raise ParamError(f"--budget must lie in [1e-12, 1), got {args.budget!r}")
    if args.param and not args.family:
        raise ParamError("--param needs --family")
    from accum.simulations.runner import check_scheduler, check_workers

    if args.scheduler is not None:
        check_scheduler(args.scheduler, "--scheduler")
        if args.workers is not None:
            raise ParamError("give --workers (local processes) or --scheduler (Dask), not both")
    if args.workers is not None:
        check_workers(args.workers, "--workers")
    if args.calibrate is not None:
        check_int("--calibrate", args.calibrate, 1, 100_000)
        if args.family:
            raise ParamError("--calibrate runs the default report; leave out --family")
    if args.only is not None:
        from .report_plan import PRESETS, plan

        if args.calibrate is None:
            raise ParamError("--only goes with --calibrate")
        names = sorted({j.check for j in plan(PRESETS[args.preset])})
        unknown = [c for c in args.only if c not in names]
        if unknown:
            raise ParamError(f"--only: no check {unknown[0]!r} in the {args.preset} report; its checks: {', '.join(names)}")
    if args.cache is not None:
        check_cache_folder(check_output_path(args.cache, "--cache", directory=True))


def check_cache_folder(folder: Path) -> None:
    """A ``--cache`` folder is new, empty or a cache: it holds only JSON records (``<sha256 of key>.json``, written by
    ``report.save_keyed``) and hidden files; anything else (a probe run's weights, a sub-folder) means another
    command's folder, which the cache would fill with its records: ``ParamError`` naming the first such entry."""
    if not folder.is_dir():
        return
    foreign = sorted(p.name for p in folder.iterdir()
                     if not p.name.startswith(".") and not (p.suffix == ".json" and p.is_file() and not p.is_symlink()))
    if foreign:
        raise ParamError(f"--cache {folder}: holds {foreign[0]!r}, which no cache writes (a cache holds only the JSON "
                         "records of verify's checks or reports); give a new or empty folder, or a cache")


def run_verify(args: argparse.Namespace) -> int:
    """``accum verify``: the options checked, the outputs reserved, the report (or --calibrate) run and printed."""
    check_options(args)
    from accum.simulations.families import family_name, family_params, make_family
    from accum.simulations.runner import DEFAULT_WORKERS, connect
    from accum.simulations.userfamily import check_sample

    from .report import report, run_report
    from .report_format import format_markdown, format_table
    from .report_plan import CLAIMS, PRESETS, plan_for_family

    workers = DEFAULT_WORKERS if args.workers is None else args.workers
    with contextlib.ExitStack() as stack:
        json_out, markdown_out = reserved_outputs(stack, args)
        if args.calibrate is not None:
            return run_calibrate(args, workers, json_out)
        family = None
        if args.family:
            family = make_family(args.family, **parse_assignments(args.param, "--param"))
            check_sample(family, args.family)  # its first sample, built-in or not: a step form, asked shapes, finite
        cache = None if args.cache is None else make_output_dir(args.cache, "--cache")
        start = time.perf_counter()
        preset = PRESETS[args.preset]
        with connect(args.scheduler) if args.scheduler else contextlib.nullcontext() as client:
            if family is not None:
                claims, why = applicable_claims(family, args.seed)
                result = report(plan_for_family(preset, family, claims), sorted(claims), args.preset, args.seed,
                                args.budget, not args.no_progress, workers, client, cache)
                refuse_nonfinite_rows(result, family)
                result["skipped_claims"] = {c: why[c]["why"] for c in CLAIMS if c not in claims}
                result["config"] = {"family": family_name(family), "params": family_params(family), **asdict(preset)}
            else:
                result = run_report(args.preset, args.seed, args.budget, not args.no_progress, workers, client, cache)
        print(format_table(result))
        for c, why in result.get("skipped_claims", {}).items():
            print(f"{c} not run: {why}")
        if json_out is not None:
            json_out.write_json(make_record("verify", {"preset": args.preset, "budget": args.budget, **result["config"]},
                                            result, args.seed, {"seconds": time.perf_counter() - start,
                                                                **result["timings"]}))
        if markdown_out is not None:
            markdown_out.write_text(format_markdown(result))
    return 0 if result["passed"] else 1


def run_calibrate(args: argparse.Namespace, workers: int, json_out: Any) -> int:
    """``accum verify --calibrate N``: the report at N fresh seeds, its failure rate printed (and saved)."""
    from accum.simulations.runner import connect

    from .calibration import calibrate, format_calibration

    start = time.perf_counter()
    with connect(args.scheduler) if args.scheduler else contextlib.nullcontext() as client:
        cache = None if args.cache is None else make_output_dir(args.cache, "--cache")
        try:
            with holding_interrupts():  # an interrupt reports what was kept (accum.interrupts)
                result = calibrate(args.preset, args.calibrate, args.seed, args.budget, workers, client,
                                   progress=not args.no_progress, cache=cache, only=args.only)
        except KeyboardInterrupt:
            if cache is None:
                raise
            raise Interrupted(f"interrupted; the finished reports are kept in {cache} (run the same command to "
                              "resume)") from None
    print(format_calibration(result))
    if json_out is not None:
        json_out.write_json(make_record("verify-calibration", {"preset": args.preset, "budget": args.budget,
                                                               "runs": args.calibrate, "only": args.only}, result, args.seed,
                                        {"seconds": time.perf_counter() - start}))
    return 0
