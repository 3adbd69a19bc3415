"""``accum verify``: every claim C1-C6 held against its prediction, with a verdict that can fail.

Each check measures one quantity by Monte Carlo (``simulations.estimators``), asks ``theory`` for the
prediction, and turns the difference into a z-score.  Thresholds come from one false-failure budget for
the whole report (default 1%): with R rows, row r covering m_r points passes when max |z| <= k_r,
k_r = Phi^{-1}(1 - budget / (2 R m_r)) (Bonferroni), so a correct implementation fails the report with
probability at most ``budget``.  One-sided rows (a bound, a decay, a floor) use the same k on one side.

Rows are grouped by claim; a claim passes when it has at least one row and all its rows pass (a claim with
no rows is not verified, so it fails), and the report passes when every claim does.  R is declared by the
plan before anything runs (each job states how many rows it returns); a job that returns another number is
an error.  Negative controls (tests/verify) feed deliberately broken inputs to the same check functions and
show each one fails.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
from tqdm import tqdm

from accum.simulations import estimators as est
from accum.simulations.families import Family, family_name, family_params, make_family
from accum.simulations.results import atomic_write_json, atomic_write_text, check_output_path, make_record
from accum.simulations.params import ParamError, check_seed
from accum.simulations.stats import z_threshold
from accum.theory import far, predict

CLAIMS = {
    "C1": "incoherence: ||E[A_n...A_1]|| decays to ~0 after finitely many steps",
    "C2": "finite mixing window, independent of context length T",
    "C3": "per-token suppression at train length transfers unchanged to any length",
    "C4": "score gap: far scores ~ N(0, |q|^2|k|^2/d) against the near signal",
    "C5": "near weight -> 0 with the far-set size N unless far mass is controlled (ALiBi)",
    "C6": "rotating values (SO(2)) makes far residuals add incoherently, |r|^2 ~ 1/N",
}


@dataclass(frozen=True)
class Measurement:
    """One row's numbers before the verdict: points of a curve (or one point) and their prediction.

    side: "two" (|z| <= k), "upper" (z <= k: measured must not exceed the prediction / bound) or
    "lower" (z >= -k: measured must not fall below it).
    """

    claim: str
    family: str
    what: str
    measured: np.ndarray
    stderr: np.ndarray
    predicted: np.ndarray
    n: int
    side: str = "two"
    floor: float = 1e-9
    params: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Row:
    claim: str
    family: str
    what: str
    predicted: float
    measured: float
    stderr: float
    z: float
    k: float
    points: int
    n: int
    passed: bool
    params: dict


def judge(m: Measurement, k: float) -> Row:
    """Worst z over the row's points against threshold k, on the row's side; reports the worst point."""
    meas, se, pred = (np.atleast_1d(np.asarray(x, dtype=float)) for x in (m.measured, m.stderr, m.predicted))
    meas, se, pred = np.broadcast_arrays(meas, se, pred)
    z = (meas - pred) / np.sqrt(se**2 + m.floor**2)
    if m.side == "two":
        worst = int(np.argmax(np.abs(z)))
        ok = bool(np.all(np.abs(z) <= k))
    elif m.side == "upper":
        worst = int(np.argmax(z))
        ok = bool(np.all(z <= k))
    else:
        worst = int(np.argmin(z))
        ok = bool(np.all(z >= -k))
    ok = ok and bool(np.all(np.isfinite(z)))
    return Row(m.claim, m.family, m.what, float(pred[worst]), float(meas[worst]), float(se[worst]), float(z[worst]),
               k, int(z.size), m.n, ok, m.params)


LAW_KEYS = {"gaussian": ("sigma",), "uniform": ("a",), "vonmises": ("kappa",), "wrapped-cauchy": ("gamma",),
            "lattice": ("m", "offset"), "rope-uniform": ("base",), "token": ("source", "stay", "vocab")}


def _label(family: Family) -> str:
    """Short name with the parameters that matter for this family (e.g. the angle law's own)."""
    p = family_params(family)
    keys = ("law", *LAW_KEYS[p["law"]]) if "law" in p else [k for k in ("beta", "w", "group", "sigma") if k in p]
    inner = ", ".join(f"{k}={p[k]}" for k in keys)
    return f"{family_name(family)}(d={family.dim}{', ' + inner if inner else ''})"


def _m(claim: str, family: Family, what: str, e_mean, e_se, pred, n: int, **kw) -> Measurement:
    return Measurement(claim, _label(family), what, np.asarray(e_mean, float), np.asarray(e_se, float),
                       np.asarray(pred, float), n, params={"family": family_name(family), **family_params(family)}, **kw)


# --- the checks: each returns Measurements; all randomness from the rng passed in -------------------------
# ``family`` is what is measured; ``claimed`` (default: the same) is the family whose theory it is held to.
# The negative controls measure a deliberately broken implementation while claiming the intended family.


def check_incoherence(family: Family, n_steps: int, n_samples: int, eps: float, rng: np.random.Generator,
        claimed: Family | None = None) -> list[Measurement]:
    """C1: the coherence curve c(n) matches theory, and |c(n_steps)| <= eps (decayed within n_steps)."""
    e = est.coherence(family, n_steps, n_samples, rng)
    pred = predict("coherence", claimed or family, steps=n_steps)
    return [_m("C1", family, f"coherence c(n), n=0..{n_steps}", e.mean, e.stderr, pred, e.n),
            _m("C1", family, f"|c({n_steps})| <= {eps}", abs(e.mean[-1]), e.stderr[-1], eps, e.n, side="upper")]


def check_window(family: Family, contexts: Sequence[int], n_samples: int, rng: np.random.Generator,
        claimed: Family | None = None) -> list[Measurement]:
    """C2: W(T) matches theory at each T, and W(T_max) - W(T_min) matches the predicted growth (which
    vanishes for accumulated transforms and is large for RoPE, the contrast)."""
    ests = [est.window(family, t, n_samples, rng) for t in contexts]
    pred = np.array([predict("window", claimed or family, context=t) for t in contexts])
    w, se = np.array([e.mean for e in ests]), np.array([e.stderr for e in ests])
    growth_se = math.hypot(se[0], se[-1])
    return [_m("C2", family, f"window W(T), T={list(contexts)}", w, se, pred, ests[0].n),
            _m("C2", family, f"W({contexts[-1]}) - W({contexts[0]}) (finite window)", w[-1] - w[0], growth_se,
               pred[-1] - pred[0], ests[0].n)]


def check_transfer(family: Family, train: int, evaluate: int, n_samples: int, rng: np.random.Generator,
        claimed: Family | None = None) -> list[Measurement]:
    """C3: the suppression profile c_T(Delta), Delta < train, is the same at T = train and T = evaluate."""
    short = est.offset_profile(family, train, n_samples, rng)
    long = est.offset_profile(family, evaluate, n_samples, rng)
    pred = predict("coherence", claimed or family, steps=train - 1)
    diff_se = np.hypot(short.stderr, long.stderr[:train])
    return [_m("C3", family, f"profile at T={train} vs theory", short.mean, short.stderr, pred, short.n),
            _m("C3", family, f"profile at T={evaluate} minus T={train}, Delta<{train}", long.mean[:train] - short.mean,
               diff_se, 0.0, short.n)]


def check_score_gap(family: Family, offset: int, n_samples: int, rng: np.random.Generator) -> list[Measurement]:
    """C4: far-score second moment d E[s^2] equals |q|^2 |k|^2 = 1, the concentration scale 1/d.

    The prediction is the claim's (the Haar value), not the law's own exact moment: a law that does not
    mix (a lattice) matches its own moment but not the claim, and must fail here."""
    e = est.score_gap(family, offset, n_samples, rng)
    pred = predict("far-variance", make_family("haar", dim=family.dim), offset=1)  # the claim: |q|^2 |k|^2
    return [_m("C4", family, f"d E[s_far^2] at Delta={offset} (gap {e.extra['gap_sd']:.1f} sd)", e.mean, e.stderr, pred, e.n)]


def check_far_mass(family: Family, far_sizes: Sequence[int], s0: float, n_samples: int, rng: np.random.Generator,
                   with_mass: bool = True,
        claimed: Family | None = None) -> list[Measurement]:
    """C5, rotation only: near weight obeys the norm bound 1/(1 + N e^{-2 s0}) (-> 0 with N) at every N, and
    the far mass E sum_Delta e^{s_Delta - s0} matches theory (where theory has it: ``with_mass``)."""
    e = est.near_weight(family, far_sizes, s0, n_samples, rng)
    rows = [_m("C5", family, f"near weight <= 1/(1+N e^(-2 s0)), s0={s0}", e.mean, e.stderr,
               far.lower_bound(np.asarray(far_sizes), s0), e.n, side="upper")]
    if with_mass:
        mass = predict("far-mass", claimed or family, far_sizes=far_sizes, s0=s0)
        rows.append(_m("C5", family, f"far mass sum e^(s-s0), N={list(far_sizes)}", e.extra["far_mass"],
                       e.extra["far_mass_stderr"], mass, e.n))
        rows.append(_m("C5", family, f"near weight >= 1/(1 + E far mass) (Jensen), N={far_sizes[-1]}", e.mean[-1],
                       e.stderr[-1], 1.0 / (1.0 + mass[-1]), e.n, side="lower"))
    return rows


def check_alibi(family: Family, far_sizes: Sequence[int], s0: float, slope: float, n_samples: int,
                rng: np.random.Generator) -> list[Measurement]:
    """C5, ALiBi: near weight stays above the floor 1/(1 + sum_Delta e^{-slope Delta}) for every N."""
    e = est.near_weight(family, far_sizes, s0, n_samples, rng, alibi_slope=slope)
    floor = far.alibi_floor(np.asarray(far_sizes), slope)
    return [_m("C5", family, f"ALiBi slope {slope}: near weight >= floor, N={list(far_sizes)}", e.mean, e.stderr,
               floor, e.n, side="lower")]


def check_values(family: Family, far_sizes: Sequence[int], n_samples: int, rng: np.random.Generator,
                 value_rotation: bool = True,
        claimed: Family | None = None) -> list[Measurement]:
    """C6: with value rotation |r(N)|^2 follows the incoherent sum (-> (1+rho)/((1-rho) N)), not the constant 1."""
    e = est.far_residual(family, far_sizes, n_samples, rng, value_rotation=value_rotation)
    pred = predict("far-residual", claimed or family, far_sizes=far_sizes)
    return [_m("C6", family, f"|r(N)|^2/|m|^2 with value rotation, N={list(far_sizes)}", e.mean, e.stderr, pred, e.n)]


# --- the report -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Preset:
    samples: int
    steps: int
    contexts: tuple[int, ...]
    transfer: tuple[int, int]
    dims: tuple[int, ...]
    far_sizes: tuple[int, ...]
    far_samples: int
    residual_sizes: tuple[int, ...]
    residual_samples: int
    haar_max_dim: int
    haar_far_sizes: tuple[int, ...]


PRESETS = {
    "quick": Preset(samples=2000, steps=64, contexts=(64, 256, 1024), transfer=(64, 1024), dims=(8, 32, 128),
                    far_sizes=(100, 1000, 10_000, 100_000), far_samples=24, residual_sizes=(10, 100, 1000, 10_000),
                    residual_samples=200, haar_max_dim=32, haar_far_sizes=(10, 100, 1000)),
    "full": Preset(samples=20000, steps=128, contexts=(64, 512, 4096), transfer=(128, 8192), dims=(8, 32, 128, 512),
                   far_sizes=(100, 10_000, 1_000_000), far_samples=48, residual_sizes=(10, 1000, 100_000),
                   residual_samples=400, haar_max_dim=64, haar_far_sizes=(10, 100, 1000, 10_000)),
}

EPS = 0.05
S0 = 4.0
SLOPE = 0.5


@dataclass(frozen=True)
class Job:
    """One check of the report: its label, how many rows it returns, and the function of an rng that runs it."""

    label: str
    rows: int
    run: Callable[[np.random.Generator], list[Measurement]]


def planned_rows(jobs: Sequence[Job]) -> int:
    """R, the number of rows the report will have: the sum of the rows each job declares."""
    return sum(job.rows for job in jobs)


def plan(preset: Preset) -> list[Job]:
    """The report's checks, in order."""
    p = preset
    so2 = make_family("so2-accumulated", dim=16, law="gaussian", sigma=0.5)
    c1 = [(so2, p.steps), (make_family("so2-accumulated", dim=16, law="vonmises", kappa=2.0), p.steps),
          (make_family("so2-accumulated", dim=16, law="token", source="markov", stay=0.5), p.steps),
          (make_family("householder", dim=16, beta=1.0), p.steps),
          (make_family("householder", dim=16, beta=2.0, w="token", vocab=32), p.steps),
          (make_family("haar", dim=16), 4), (make_family("givens", dim=8, sigma=1.0), p.steps)]
    jobs: list[Job] = []
    for f, steps in c1:
        jobs.append(Job(f"C1 {_label(f)}", 2, lambda rng, f=f, n=steps: check_incoherence(f, n, p.samples, EPS, rng)))
    for f in (so2, make_family("householder", dim=16, beta=1.0), make_family("rope", dim=16)):
        jobs.append(Job(f"C2 {_label(f)}", 2, lambda rng, f=f: check_window(f, p.contexts, max(p.samples // 5, 4), rng)))
    token = make_family("so2-accumulated", dim=16, law="token", source="markov", stay=0.5)
    jobs.append(Job(f"C3 {_label(token)}", 2, lambda rng: check_transfer(token, *p.transfer, max(p.samples // 5, 4), rng)))
    for d in p.dims:
        gap = [(make_family("so2-accumulated", dim=d, law="uniform", a=math.pi), 1),
               (make_family("so2-accumulated", dim=d, law="gaussian", sigma=1.0), 32)]
        gap += [(make_family("haar", dim=d), 1)] if d <= p.haar_max_dim else []
        for f, offset in gap:
            jobs.append(Job(f"C4 {_label(f)}", 1, lambda rng, f=f, o=offset: check_score_gap(f, o, 2 * p.samples, rng)))
    haar = make_family("haar", dim=16)
    jobs.append(Job(f"C5 {_label(haar)}", 3, lambda rng: check_far_mass(haar, p.haar_far_sizes, S0, p.far_samples, rng)))
    jobs.append(Job(f"C5 {_label(so2)}", 3, lambda rng: check_far_mass(so2, p.far_sizes, S0, p.far_samples, rng)))
    reflect = make_family("householder", dim=16, beta=2.0)
    jobs.append(Job(f"C5 {_label(reflect)}", 1,
                    lambda rng: check_far_mass(reflect, p.far_sizes[:-1], S0, p.far_samples, rng, with_mass=False)))
    for f in (make_family("nope", dim=16), so2):
        jobs.append(Job(f"C5 ALiBi {_label(f)}", 1,
                        lambda rng, f=f: check_alibi(f, p.far_sizes, S0, SLOPE, p.far_samples, rng)))
    jobs.append(Job(f"C6 {_label(so2)}", 1, lambda rng: check_values(so2, p.residual_sizes, p.residual_samples, rng)))
    return jobs


def run_jobs(jobs: Sequence[Job], seed: int, progress: bool) -> tuple[list[Measurement], dict]:
    """Every job's measurements, each job on its own stream (SeedSequence(seed).spawn), and seconds per job.

    Raises RuntimeError when a job returns another number of rows than it declares: the thresholds were
    set for the declared count."""
    streams = np.random.SeedSequence(seed).spawn(len(jobs))
    measurements: list[Measurement] = []
    timings = {}
    for job, ss in tqdm(list(zip(jobs, streams)), desc="accum verify", disable=not progress, unit="check"):
        start = time.perf_counter()
        got = job.run(np.random.default_rng(ss))
        timings[job.label] = time.perf_counter() - start
        if len(got) != job.rows:
            raise RuntimeError(f"accum verify: check {job.label!r} returned {len(got)} rows, declared {job.rows}")
        measurements.extend(got)
    return measurements, timings


def claim_verdicts(rows: Sequence[Row]) -> dict[str, bool]:
    """Per claim in CLAIMS: True when the claim has at least one row and every one of its rows passed."""
    verdicts = {}
    for c in CLAIMS:
        mine = [r.passed for r in rows if r.claim == c]
        verdicts[c] = len(mine) > 0 and all(mine)
    return verdicts


def run_report(preset_name: str, seed: int, budget: float, progress: bool = True) -> dict:
    """Run every job of the plan and judge each row at k = z_threshold(budget / R, points), R the planned rows.

    The report passes when every claim passes (``claim_verdicts``)."""
    jobs = plan(PRESETS[preset_name])
    n_rows = planned_rows(jobs)
    measurements, timings = run_jobs(jobs, seed, progress)
    rows = [judge(m, z_threshold(budget / n_rows, np.size(m.measured))) for m in measurements]
    claims = claim_verdicts(rows)
    return {"preset": preset_name, "seed": seed, "budget": budget, "rows": [asdict(r) for r in rows],
            "claims": claims, "passed": all(claims.values()), "timings": timings,
            "config": asdict(PRESETS[preset_name])}


def format_table(report: dict) -> str:
    """Fixed-width text table, one line per row, then one verdict line per claim."""
    head = f"{'claim':<5} {'family':<48} {'check':<52} {'predicted':>11} {'measured':>11} {'se':>9} {'z':>7} {'k':>5}  verdict"
    lines = [head, "-" * len(head)]
    for r in report["rows"]:
        lines.append(f"{r['claim']:<5} {r['family'][:48]:<48} {r['what'][:52]:<52} {r['predicted']:>11.4g} "
                     f"{r['measured']:>11.4g} {r['stderr']:>9.2g} {r['z']:>7.2f} {r['k']:>5.2f}  {'PASS' if r['passed'] else 'FAIL'}")
    lines.append("")
    for c, ok in report["claims"].items():
        lines.append(f"{c} {'PASS' if ok else 'FAIL'}  {CLAIMS[c]}")
    lines.append(f"report {'PASS' if report['passed'] else 'FAIL'} (preset {report['preset']}, seed {report['seed']}, "
                 f"false-failure budget {report['budget']:g} for the whole report)")
    return "\n".join(lines)


def format_markdown(report: dict) -> str:
    out = [f"# accum verify ({report['preset']}, seed {report['seed']}, budget {report['budget']:g})", "",
           "| claim | family | check | predicted | measured | se | z | k | verdict |", "|---|---|---|---:|---:|---:|---:|---:|---|"]
    for r in report["rows"]:
        out.append(f"| {r['claim']} | {r['family']} | {r['what']} | {r['predicted']:.4g} | {r['measured']:.4g} | "
                   f"{r['stderr']:.2g} | {r['z']:.2f} | {r['k']:.2f} | {'PASS' if r['passed'] else '**FAIL**'} |")
    out += ["", "| claim | statement | verdict |", "|---|---|---|"]
    out += [f"| {c} | {CLAIMS[c]} | {'PASS' if ok else '**FAIL**'} |" for c, ok in report["claims"].items()]
    return "\n".join(out) + "\n"


def add_verify(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", help="check every claim C1-C6; exit 1 if any fails")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", dest="preset", action="store_const", const="quick", help="under 2 minutes (default)")
    size.add_argument("--full", dest="preset", action="store_const", const="full", help="tighter, larger (< 20 min)")
    p.set_defaults(preset="quick", run=run_verify)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--budget", type=float, default=0.01, help="false-failure probability for the whole report, in [1e-12, 1) (default 0.01)")
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--markdown", metavar="PATH")


def run_verify(args: argparse.Namespace) -> int:
    check_seed(args.seed, "--seed")
    if not 1e-12 <= args.budget < 1.0:
        raise ParamError(f"--budget must lie in [1e-12, 1), got {args.budget!r}")
    for option, path in (("--json", args.json), ("--markdown", args.markdown)):
        if path is not None:
            check_output_path(path, option)
    if args.json is not None and args.markdown is not None and Path(args.json).resolve() == Path(args.markdown).resolve():
        raise ParamError(f"--json and --markdown name the same file {args.json}; give two paths")
    start = time.perf_counter()
    report = run_report(args.preset, args.seed, args.budget, progress=True)
    print(format_table(report))
    if args.json is not None:
        atomic_write_json(args.json, make_record("verify", {"preset": args.preset, "budget": args.budget, **report["config"]},
                                                 report, args.seed, {"seconds": time.perf_counter() - start, **report["timings"]}))
    if args.markdown is not None:
        atomic_write_text(args.markdown, format_markdown(report))
    return 0 if report["passed"] else 1
