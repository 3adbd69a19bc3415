"""``accum check FAMILY [--param k=v ...] [--seed S] [--json PATH]``: assumption checks for a family.

Prints one line per condition (orthogonality, norm bound, first- and second-moment spectral gaps, coherent
directions, non-lattice angles, independence of consecutive steps) and which claims C1-C6 then apply
(``theory.checks``).  Exit status: 0 when the spectral-gap condition holds, 1 when it fails, 2 for bad input
(``ParamError``, reported by ``accum.cli``).  ``--json`` writes the report as an accum result record.
"""

from __future__ import annotations

import argparse
import contextlib
import time

import numpy as np

from accum.runtime import Heartbeat
from accum.simulations.params import ParamError, check_int, check_seed, float_option, integer_option, parse_assignments
from accum.simulations.results import NonFiniteError, check_output_path, jsonable, make_record, reserve_output

# the families and the checks (numpy, scipy.special) are imported by ``run``, so `accum check --help` answers at once


#: allowed ranges of the options (inclusive): the pair operator E[A (x) A] has d^4 entries and an SVD of size d^2
SAMPLES_RANGE, K_MAX_RANGE, PAIR_DIM_RANGE = (10, 10**7), (1, 1024), (1, 32)


def add_subparser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``check`` command to an ``add_subparsers()`` object; returns its parser."""
    p = subparsers.add_parser(
        "check", help="assumption checks for a family (spectral gap, non-lattice, orthogonality): which claims apply",
        description="Estimate, by Monte Carlo with standard errors, the conditions behind the claims -- orthogonality, "
                    "norm bound, first- and second-moment spectral gaps, coherent directions, non-lattice angles, "
                    "independence of consecutive steps -- print one line per condition and which claims C1-C6 then "
                    "apply.  Exit status 0 when the spectral-gap condition holds, 1 when it fails, 2 for bad input; "
                    "--json writes the report as a result record.  Guide: docs/theory.md.")
    p.add_argument("family", metavar="FAMILY", help="built-in name (see `accum families`) or package.module:ClassName")
    p.add_argument("--param", action="append", metavar="K=V", help="family parameter (repeatable)")
    p.add_argument("--seed", type=integer_option, default=0, help="seed of the Monte Carlo estimates (default 0)")
    p.add_argument("--json", metavar="PATH", help="write the report here (atomically)")
    p.add_argument("--samples", type=integer_option, default=None,
                   help="sampled steps per estimate (default 4000, at most 2.5e8 / d^2; for dense steps at most 2e9 / d^3 "
                        "but at least 200; any value at most 1e7 and 2.5e8 / d^2)")
    p.add_argument("--budget", type=float_option, default=1e-3,
                   help="false-failure probability of the whole report (default 1e-3)")
    p.add_argument("--k-max", type=integer_option, default=32, help="largest frequency k of the non-lattice test (default 32, at most 1024)")
    p.add_argument("--pair-dim", type=integer_option, default=24,
                   help="largest d for which E[A (x) A] (d^4 numbers) is formed for the coherent-direction test "
                        "(default 24, at most 32; skipped above it for dense steps; SO(2) and Householder steps need no such matrix)")
    p.set_defaults(run=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Run ``accum check``; returns the exit status (0 condition holds, 1 it fails)."""
    from accum.simulations.families import FAMILIES, family_name, make_family
    from accum.simulations.measure import set_params
    from accum.simulations.userfamily import check_sample

    from .checks import check, format_report
    from .sampled import MAX_STEP_NUMBERS, MIN_DENSE_SAMPLES

    for option, value, (lo, hi) in (("--samples", SAMPLES_RANGE[0] if args.samples is None else args.samples, SAMPLES_RANGE),
                                    ("--k-max", args.k_max, K_MAX_RANGE), ("--pair-dim", args.pair_dim, PAIR_DIM_RANGE)):
        check_int(option, value, lo, hi)
    if not (0.0 < args.budget < 1.0):
        raise ParamError(f"--budget must lie in (0, 1), got {args.budget}")
    check_seed(args.seed, "--seed")
    if args.json is not None:
        check_output_path(args.json, "--json")
    params = parse_assignments(args.param, "--param")
    family = make_family(args.family, **params)
    if family_name(family) not in FAMILIES:
        check_sample(family, args.family)  # a user family's first sample: a step form, asked shapes, real, finite
    cap = MAX_STEP_NUMBERS // family.dim**2
    if args.samples is not None and args.samples > cap:
        raise ParamError(f"--samples {args.samples} at d = {family.dim} would touch {args.samples * family.dim**2:.3g} "
                         f"numbers of step matrices; at most {cap} samples at this d")
    if args.samples is None and cap < MIN_DENSE_SAMPLES:
        raise ParamError(f"--samples: at d = {family.dim} the default ({MIN_DENSE_SAMPLES} or more samples) would touch "
                         f"more than {MAX_STEP_NUMBERS:.3g} numbers of step matrices; give --samples N with N <= {cap}")
    with reserve_output(args.json, "--json") if args.json is not None else contextlib.nullcontext() as out:
        start = time.perf_counter()
        try:
            with np.errstate(over="ignore", invalid="ignore"):  # refused below as one line
                report = check(family, np.random.default_rng(args.seed), samples=args.samples, budget=args.budget,
                               k_max=args.k_max, pair_dim=args.pair_dim, progress=Heartbeat("accum check"))
            saved = jsonable(report.to_dict(), "report")
        except (OverflowError, FloatingPointError, NonFiniteError) as err:
            raise NonFiniteError(f"family {family_name(family)} ({set_params(family)}): the checks are not finite in "
                                 f"fp64 ({err}); use smaller parameter values") from None
        seconds = time.perf_counter() - start
        print(format_report(report))
        if out is not None:
            config = {"family": report.family, "params": report.params, "samples": report.samples,
                      "budget": args.budget, "k_max": args.k_max, "pair_dim": args.pair_dim}
            out.write_json(make_record("check", config, saved, args.seed, {"seconds": seconds}))
    return 0 if report.condition_holds else 1
