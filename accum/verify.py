"""``accum verify``: every claim C1-C6 held against its prediction, with verdicts that are calibrated and can fail.

The report is a plan of checks (``accum.claims``), each run on its own random stream seeded from a hash of
its identity (check, family, parameters, sizes) -- adding a check changes no other row.  The plan knows the
kind of every row before anything runs: R evidence rows (statistical and adversarial) share the
false-failure budget (Bonferroni, ``accum.verdict``); exact and bound rows form the "exact and sanity"
section, which fails the report when violated but is not evidence for a claim.

A claim passes when it has at least one evidence row and every row attributed to it passes; the report
passes when every claim and every sanity row passes.  ``--family F`` runs every check that applies to F
(``theory.checks.check`` says which claims do); ``--calibrate N`` runs the report at N fresh seeds and
measures its false-failure rate.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import pkgutil
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from tqdm import tqdm

from accum.runtime import Interrupted
from accum.simulations.families import FAMILIES, Family, family_name, family_params, make_family
from accum.simulations.params import ParamError, check_int, check_seed, integer_option, parse_assignments
from accum.simulations.userfamily import check_sample
from accum.simulations.results import (ResultError, atomic_write_json, check_output_path, jsonable, make_output_dir,
                                      make_record, read_record, reserve_output)
from accum.simulations.identity import code_identity, config_words, digest
from accum.simulations.runner import check_scheduler, check_workers, connect, default_workers, map_outcomes

from . import adversarial  # noqa: F401  (registers the adversarial Householder and orthogonal checks)
from .claims import CHECKS, deterministic, label
from .verdict import EVIDENCE, Measurement, Row, binomial_interval, binomial_tail, judge

CLAIMS = {
    "C1": "incoherence: ||E[A_n...A_1]|| decays to ~0 after finitely many steps",
    "C2": "finite mixing window, independent of context length T",
    "C3": "per-token suppression at train length transfers unchanged to any length",
    "C4": "score gap: far scores ~ N(0, |q|^2|k|^2/d) against the near signal",
    "C5": "near weight -> 0 with the far-set size N unless far mass is controlled (ALiBi)",
    "C6": "rotating values (SO(2)) makes far residuals add incoherently, |r|^2 ~ 1/N",
}


@dataclass(frozen=True)
class Preset:
    """Sample counts and sizes of one report size (the checks' keyword arguments; ``family_checks``, ``plan``).

    Samples are Monte Carlo paths or sequences per row unless a field says otherwise; every count scales a
    row's standard error as 1/sqrt(count)."""

    coherence_samples: int  #: C1 coherence curve: paths per curve
    steps: int  #: C1 coherence curve: its length n (a Haar curve runs 4 steps: incoherent after one)
    theory_samples: int  #: samples behind a prediction with no closed form (estimated moments, ``theory.moments``)
    window_samples: int  #: C2 mixing window W(T): paths per context length
    contexts: tuple[int, ...]  #: C2: the context lengths T whose windows must agree
    bias_context: int  #: C2 window-bias check: its context length
    bias_samples: int  #: C2 window-bias check: paths (few on purpose: uncorrected, noise would add width)
    transfer: tuple[int, int]  #: C3: (train length, evaluation length)
    transfer_samples: int  #: C3: paths per length
    gap_dims: tuple[int, ...]  #: C4 score gap: the head sizes d
    gap_samples: int  #: C4 score gap: draws per d
    haar_max_dim: int  #: C4 score gap: Haar rows only up to this d (a d x d QR per step)
    scores_length: int  #: C4 far-score variance: sequence length
    scores_offset: int  #: C4 far-score variance: pairs at least this far apart count as far
    scores_sequences: int  #: C4 far-score variance: sequences
    far_sizes: tuple[int, ...]  #: C5 far mass of the SO(2) family: far-set sizes N
    far_samples: int  #: C5 far mass: paths per N
    alibi_sizes: tuple[int, ...]  #: C5 near weight with and without ALiBi: far-set sizes N
    alibi_samples: int  #: C5 near weight: paths per N
    short_far_sizes: tuple[int, ...]  #: C5 far mass of every other family: far-set sizes N
    engines_far_size: int  #: C5 far mass, streaming against all-pairs ``scores()``: N
    engines_samples: int  #: C5 far mass, streaming against all-pairs: paths of each
    adversarial_sizes: tuple[int, ...]  #: C5 adversarial q, k for SO(2): far-set sizes N
    adversarial_iterations: int  #: C5 adversarial search: ascent steps per start
    residual_sizes: tuple[int, ...]  #: C6 value residual: far-set sizes N
    residual_samples: int  #: C6 value residual: paths per N
    se_replicates: int  #: standard-error checks: independent replicates per estimator
    fast_path_length: int  #: fast paths against the fp64 reference: sequence length (odd)
    #: (check, family key of ``default_families``, factor): that family's sample count for that check is the
    #: preset's times the factor, for families whose rows resolve their closed form far better (or worse) per sample
    family_factors: tuple[tuple[str, str, float], ...] = ()

    def samples(self, check: str, family_key: str | None, base: int) -> int:
        """``base`` samples scaled by the factor of (check, family_key), if any (a user family: none)."""
        factor = next((f for c, k, f in self.family_factors if (c, k) == (check, family_key)), 1.0)
        return max(1, round(base * factor))


QUICK = Preset(coherence_samples=40_000, steps=64, theory_samples=20_000, window_samples=6_000,
               contexts=(64, 256, 1024), bias_context=4096, bias_samples=256, transfer=(64, 1024),
               transfer_samples=6_000, gap_dims=(8, 32, 128), gap_samples=75_000, haar_max_dim=8,
               scores_length=256, scores_offset=16, scores_sequences=1400, far_sizes=(100, 1000, 10_000),
               far_samples=192, alibi_sizes=(10, 100, 1000), alibi_samples=6000, short_far_sizes=(10, 100, 1000),
               engines_far_size=600, engines_samples=64, adversarial_sizes=(10, 100, 1000), adversarial_iterations=150,
               residual_sizes=(10, 100, 1000), residual_samples=5000, se_replicates=40, fast_path_length=37,
               family_factors=(("coherence", "haar", 0.25), ("far-mass", "householder", 2.5),
                               ("far-mass", "householder-token", 4.0), ("far-mass", "givens", 9.0)))

PRESETS = {
    "quick": QUICK,
    # the quick plan with each claim's sample counts scaled by (its detectable error at quick / 0.45%)^2 -- the
    # best closed-form row of each family, worst family: C1 1.1% (von Mises), C2 0.15% (no change), C3 1.4%,
    # C4 1.9%, C5 1.1-1.6%, C6 1.35% -- so every claim detects 0.5%; the sizes (lengths, far sets, dimensions)
    # are the quick ones.  Families whose best closed-form row detects far less than 0.45% at these counts get
    # fewer samples, factor ~ (their detectable error / 0.45%)^2 with some margin: the detectable error also
    # depends on the random probe pair q != k a check draws (a check's stream is seeded from its identity, sample
    # count included), so the factors were set from two full runs at seed 0 (coherence of householder 0.09%,
    # so2 0.10-0.13%, givens 0.20-0.22%, uniform 0.20-0.21%, householder-token 0.23-0.24%, token 0.26-0.35%;
    # scores of haar 0.20-0.19%, so2 0.27-0.36%, token 0.29-0.24%; the residual of householder 0.38%)
    "full": replace(QUICK, coherence_samples=220_000, theory_samples=80_000, bias_samples=1024,
                    transfer_samples=60_000, gap_samples=1_350_000, scores_sequences=25_000, far_samples=1152,
                    alibi_samples=72_000, engines_samples=256, adversarial_iterations=300, residual_samples=45_000,
                    se_replicates=80, fast_path_length=61,
                    family_factors=(("coherence", "haar", 0.25), ("coherence", "householder", 0.06),
                                    ("coherence", "so2", 0.1), ("coherence", "givens", 0.3),
                                    ("coherence", "uniform", 0.3), ("coherence", "householder-token", 0.35),
                                    ("coherence", "token", 0.7), ("scores-far-variance", "haar", 0.25),
                                    ("scores-far-variance", "so2", 0.75), ("scores-far-variance", "token", 0.5),
                                    ("values", "householder", 0.8))),
}

EPS = 0.05
S0 = 4.0
SLOPE = 0.5


@dataclass(frozen=True)
class Check:
    """One check of the plan: its registered name, the family and its keyword arguments.

    Checks run on the sweep's runner (``sweep.map_outcomes``: this process, a pool or Dask), each seeded from
    its ``identity`` and cached under the sha256 of (identity, seed, code version) like a sweep job."""

    check: str
    family: Family
    kwargs: dict

    @property
    def identity(self) -> dict:
        """What the job's random stream is seeded from (never its position in the plan)."""
        return {"check": self.check, "family": family_name(self.family), "params": family_params(self.family),
                "kwargs": self.kwargs}

    @property
    def claim(self) -> str:
        """The claim this job's rows concern (``engine`` for the fast-path sanity rows)."""
        return CHECKS[self.check].claim(**self.kwargs)

    @property
    def label(self) -> str:
        return f"{self.check} {label(self.family)}"

    def kinds(self) -> tuple[str, ...]:
        return CHECKS[self.check].kinds(self.family, **self.kwargs)

    def run(self, seed: int) -> list[Measurement]:
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=config_words(self.identity)))
        return CHECKS[self.check].run(self.family, rng, **self.kwargs)


def evidence_rows(jobs: Sequence[Check]) -> int:
    """R: the number of evidence rows the plan's jobs declare (they share the budget)."""
    return sum(kind in EVIDENCE for job in jobs for kind in job.kinds())


def _so2(**params: Any) -> Family:
    return make_family("so2-accumulated", **{"dim": 16, **params})


def default_families() -> dict[str, Family]:
    """The report's families: asymmetric on purpose (nonzero mean angles, stay != 1/2, token tables)."""
    return {
        "so2": _so2(law="gaussian", mu=0.3, sigma=0.5),
        "vonmises": _so2(law="vonmises", mu=0.5, kappa=2.0),
        "uniform": _so2(law="uniform", a=1.3),
        "cauchy": _so2(law="wrapped-cauchy", mu=0.5, gamma=0.3),
        "token": _so2(law="token", source="markov", stay=0.7),
        "householder": make_family("householder", dim=16, beta=1.0),
        # 256 token directions in d = 16: E[A] = I - 2 W^T W / V has its slowest rate near 0.93 (with V = 32 it was
        # 0.99, and |c(64)| > 0.05 for some random probe pairs: a calibration run caught that row failing 3/40)
        "householder-token": make_family("householder", dim=16, beta=2.0, w="token", vocab=256),
        "haar": make_family("haar", dim=16),
        "givens": make_family("givens", dim=8, sigma=1.0),
        "rope": make_family("rope", dim=16),
        "nope": make_family("nope", dim=16),
    }


def family_checks(f: Family, p: Preset, claims: set[str], key: str | None = None) -> list[Check]:
    """The checks of one family for the claims in ``claims`` (C1 coherence ... C6 residual, plus its fast
    paths against the reference and one standard-error check); ``key`` names a default family (its sample
    factors, ``Preset.samples``; Haar is incoherent after one step, so its coherence runs a few steps)."""
    ts = p.theory_samples
    jobs = [Check("fast-paths", f, {"length": p.fast_path_length})]
    if "C1" in claims:
        jobs.append(Check("coherence", f, {"steps": 4 if key == "haar" else p.steps, "eps": EPS, "theory_samples": ts,
                                         "samples": p.samples("coherence", key, p.coherence_samples)}))
    if "C2" in claims:  # a deterministic family's window is exact from a handful of paths
        jobs.append(Check("window", f, {"contexts": p.contexts, "samples": 4 if deterministic(f) else p.window_samples,
                                      "theory_samples": ts}))
    if "C3" in claims:
        jobs.append(Check("transfer", f, {"train": p.transfer[0], "evaluate": p.transfer[1],
                                        "samples": p.transfer_samples, "theory_samples": ts}))
    if "C4" in claims:
        jobs.append(Check("scores-far-variance", f, {"length": p.scores_length, "offset": p.scores_offset,
                                                   "sequences": p.samples("scores-far-variance", key, p.scores_sequences),
                                                   "theory_samples": ts}))
    if "C5" in claims:
        jobs.append(Check("far-mass", f, {"far_sizes": p.short_far_sizes, "s0": S0, "theory_samples": ts,
                                          "samples": p.samples("far-mass", key, p.far_samples)}))
        jobs.append(Check("far-mass-engines", f, {"far_size": p.engines_far_size, "s0": S0, "samples": p.engines_samples}))
    if "C6" in claims:
        jobs.append(Check("values", f, {"far_sizes": p.residual_sizes, "theory_samples": ts,
                                      "samples": p.samples("values", key, p.residual_samples)}))
    return jobs


def plan(preset: Preset) -> list[Check]:
    """The default report: every claim on the families it is about (module docstring of ``accum.claims``)."""
    p, fam = preset, default_families()
    ts = p.theory_samples
    jobs: list[Check] = []
    claims_of = {"so2": {"C1", "C2", "C4", "C6"}, "vonmises": {"C1"}, "uniform": {"C1"}, "cauchy": {"C1"},
                 "token": {"C1", "C3", "C4", "C5"}, "householder": {"C1", "C2", "C4", "C5", "C6"},
                 "householder-token": {"C1", "C4", "C5"}, "haar": {"C1", "C4", "C5"}, "givens": {"C1", "C4", "C5"},
                 "rope": {"C2"}}  # every angle law (its sampler and characteristic function) on C1
    for key, claims in claims_of.items():
        jobs += family_checks(fam[key], p, claims, key)
    jobs.append(Check("window-bias", fam["so2"], {"context": p.bias_context, "samples": p.bias_samples, "theory_samples": ts}))
    for d in p.gap_dims:
        gap = [(_so2(dim=d, law="uniform", a=math.pi), 1), (_so2(dim=d, law="gaussian", sigma=1.0), 16)]
        gap += [(make_family("haar", dim=d), 1)] if d <= p.haar_max_dim else []
        for f, offset in gap:
            jobs.append(Check("score-gap", f, {"offset": offset, "samples": p.gap_samples}))
    jobs.append(Check("far-mass", fam["so2"], {"far_sizes": p.far_sizes, "s0": S0, "samples": p.far_samples}))
    for f in (fam["so2"], fam["nope"]):
        jobs.append(Check("alibi", f, {"far_sizes": p.alibi_sizes, "s0": S0, "slope": SLOPE,
                                     "samples": 2 if deterministic(f) else p.alibi_samples}))
    jobs.append(Check("adversarial-so2", fam["so2"], {"far_sizes": p.adversarial_sizes, "s0": S0,
                                                    "iterations": p.adversarial_iterations, "starts": 2}))
    for check, f in (("adversarial-householder", fam["householder"]), ("adversarial-orthogonal", fam["haar"])):
        jobs.append(Check(check, f, {"far_sizes": p.adversarial_sizes, "s0": S0, "iterations": p.adversarial_iterations,
                                     "starts": 2}))
    for estimator, f in (("coherence", fam["so2"]), ("window", fam["so2"]), ("score-gap", fam["householder"]),
                         ("near-weight", fam["so2"]), ("far-residual", fam["so2"])):
        jobs.append(Check("stderr", f, {"estimator": estimator, "replicates": p.se_replicates,
                                      "samples": 40 if estimator in ("near-weight",) else 200}))
    return jobs


def plan_for_family(preset: Preset, family: Family, claims: set[str]) -> list[Check]:
    """The report for one (e.g. user-defined) family: its checks for the claims that apply to it, and the
    standard error of the coherence estimator on it."""
    jobs = family_checks(family, preset, claims)
    if "C1" in claims:
        jobs.append(Check("stderr", family, {"estimator": "coherence", "replicates": preset.se_replicates, "samples": 200}))
    return jobs


def run_job(item: tuple[int, Check, int]) -> tuple[list[Measurement], float]:
    """Check ``item = (position, job, seed)`` at the report's seed: its measurements and its seconds
    (module-level, so a pool can pickle it)."""
    _, job, seed = item
    start = time.perf_counter()
    got = job.run(seed)
    return got, time.perf_counter() - start


def verify_modules() -> tuple[str, ...]:
    """The modules a check's numbers depend on: ``accum.claims``, ``accum.adversarial`` and every module of the
    engine and the theory (their sources fingerprint a cached check, ``sweep.code_identity``)."""
    import accum.simulations
    import accum.theory

    names = [f"{pkg.__name__}.{m.name}" for pkg in (accum.simulations, accum.theory)
             for m in pkgutil.iter_modules(pkg.__path__)]
    return ("accum.claims", "accum.adversarial", *sorted(names))


ARRAY_FIELDS = ("measured", "stderr", "predicted", "pred_stderr")


def cache_key(job: Check, seed: int, code: dict) -> dict:
    return {"identity": job.identity, "seed": seed, "code": code}


def load_cached(cache: Path, key: dict) -> list[Measurement] | None:
    """A finished check's measurements from ``cache`` (None when missing, corrupt or of another key)."""
    try:
        record = read_record(cache / f"{digest(key)}.json")
    except ResultError:
        return None
    if record["config"] != jsonable(key):
        return None
    return [Measurement(**{**m, **{f: np.asarray(m[f], float) for f in ARRAY_FIELDS}})
            for m in record["result"]["measurements"]]


def run_plan(jobs: Sequence[Check], seed: int, progress: bool, workers: int = 1, client: Any = None,
             cache: Path | None = None) -> tuple[list[Measurement], dict]:
    """Every job's measurements in plan order (each on its own hashed stream, so the executor -- this process,
    a local pool of ``workers`` or a Dask ``client`` -- does not change them) and seconds per job.

    With ``cache`` (a directory) each finished check is saved as ``<sha256 of its key>.json``, the key being its
    identity, the seed and the code version (``verify_modules``), and a re-run reuses it.  Raises RuntimeError
    when a job fails or returns other row kinds than it declares: the thresholds were set for the declared rows.
    """
    code = code_identity(verify_modules()) if cache is not None else {}
    results: dict[int, list[Measurement]] = {}
    timings = {}
    if cache is not None:
        for i, job in enumerate(jobs):
            found = load_cached(cache, cache_key(job, seed, code))
            if found is not None and tuple(m.kind for m in found) == job.kinds():
                results[i], timings[job.label] = found, 0.0
    items = [(i, job, seed) for i, job in enumerate(jobs) if i not in results]
    with tqdm(total=len(jobs), initial=len(results), desc="accum verify", disable=None if progress else True, unit="check") as bar:
        for item, outcome in map_outcomes(run_job, items, workers, client):
            position, job, _ = item
            if isinstance(outcome, Exception):
                raise RuntimeError(f"accum verify: check {job.label!r} failed: {type(outcome).__name__}: {outcome}") from outcome
            got, seconds = outcome
            if tuple(m.kind for m in got) != job.kinds():
                raise RuntimeError(f"accum verify: check {job.label!r} returned rows {[m.kind for m in got]}, "
                                   f"declared {list(job.kinds())}")
            results[position] = got
            timings[job.label] = seconds
            if cache is not None:
                key = cache_key(job, seed, code)
                atomic_write_json(cache / f"{digest(key)}.json", make_record(
                    "verify-check", key, {"measurements": [asdict(m) for m in got]}, seed, {"seconds": seconds}))
            bar.update()
    return [m for i in range(len(jobs)) for m in results[i]], timings


def claim_verdicts(rows: Sequence[Row], claims: Sequence[str]) -> dict[str, bool]:
    """A claim passes when it has at least one evidence row and every row attributed to it passed."""
    return {c: any(r.claim == c and r.counts_as_evidence for r in rows) and all(r.passed for r in rows if r.claim == c)
            for c in claims}


def judge_all(measurements: Sequence[Measurement], budget: float, n_evidence: int) -> list[Row]:
    """Each row judged at its share budget / R of the false-failure budget."""
    return [judge(m, budget / max(n_evidence, 1)) for m in measurements]


def report(jobs: Sequence[Check], claims: Sequence[str], preset: str, seed: int, budget: float,
           progress: bool = True, workers: int = 1, client: Any = None, cache: Path | None = None,
           n_evidence: int | None = None) -> dict:
    """Run ``jobs`` (``run_plan``) and judge them; the whole report as a dict (the JSON contract's ``result``).

    Each evidence row gets budget / R, R = ``n_evidence`` (default: the evidence rows of ``jobs``; a part of a plan
    passes the whole plan's R, so its rows are judged exactly as in the whole report)."""
    n_evidence = evidence_rows(jobs) if n_evidence is None else n_evidence
    measurements, timings = run_plan(jobs, seed, progress, workers, client, cache)
    rows = judge_all(measurements, budget, n_evidence)
    verdicts = claim_verdicts(rows, claims)
    sanity_ok = all(r.passed for r in rows if r.claim not in claims)
    return {"preset": preset, "seed": seed, "budget": budget, "evidence_rows": n_evidence,
            "rows": [asdict(r) for r in rows], "claims": verdicts, "sanity_passed": sanity_ok,
            "passed": all(verdicts.values()) and sanity_ok, "timings": timings}


def run_report(preset_name: str, seed: int, budget: float, progress: bool = True, workers: int = 1,
               client: Any = None, cache: Path | None = None) -> dict:
    """The default report at ``seed``."""
    return {**report(plan(PRESETS[preset_name]), list(CLAIMS), preset_name, seed, budget, progress, workers, client,
                     cache),
            "config": asdict(PRESETS[preset_name])}


# --- formatting ------------------------------------------------------------------------------------------

COLUMNS = (("claim", 6, "<"), ("family", 44, "<"), ("check", 62, "<"), ("kind", 11, "<"), ("predicted", 11, ">"),
           ("measured", 11, ">"), ("se", 9, ">"), ("z", 8, ">"), ("k", 6, ">"), ("ref", 7, "<"), ("mde", 8, ">"),
           ("verdict", 7, "<"))


def _cells(r: dict) -> list[str]:
    ref = r["reference"] + (f"{r['dof']:.0f}" if r["reference"] == "t" else "")
    mde = "" if r["mde"] is None else f"{100 * r['mde']:.2g}%"
    if r["mde_absolute"] is not None:  # a prediction of 0: the smallest departure from 0 detected
        mde = f"±{r['mde_absolute']:.2g}"
    z, k = (f"{r['z']:.3g}", f"{r['k']:.2f}") if r["counts_as_evidence"] else ("", "")  # sanity rows: a tolerance
    return [r["claim"], r["family"], r["what"], r["kind"], f"{r['predicted']:.4g}", f"{r['measured']:.4g}",
            f"{r['stderr']:.2g}", z, k, ref, mde, "PASS" if r["passed"] else "FAIL"]


def _line(cells: Sequence[str]) -> str:
    out = []
    for text, (_, width, align) in zip(cells, COLUMNS):
        text = text if len(text) <= width else text[: width - 1] + "~"
        out.append(f"{text:{align}{width}}")
    return " ".join(out).rstrip()


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
    head = _line([c[0] for c in COLUMNS])
    lines = []
    for title, rows in _sections(report_):
        lines += ["", title, head, "-" * len(head)] + [_line(_cells(r)) for r in rows]
    lines.append("")
    for c, ok in report_["claims"].items():
        lines.append(f"{c} {'PASS' if ok else 'FAIL'}  {CLAIMS.get(c, c)}{_detectable(report_['rows'], c)}")
    lines.append(f"sanity {'PASS' if report_['sanity_passed'] else 'FAIL'}  exact rows and bounds")
    if not report_["claims"]:
        lines.append("report: NOTHING VERIFIED (no claim applies to this family; the reasons follow)")
        return "\n".join(lines)
    lines.append(f"report {'PASS' if report_['passed'] else 'FAIL'} (preset {report_['preset']}, seed {report_['seed']}, "
                 f"false-failure budget {report_['budget']:g} over {report_['evidence_rows']} evidence rows)")
    return "\n".join(lines)


def _md(text: str) -> str:
    return str(text).replace("|", "\\|")


def format_markdown(report_: dict) -> str:
    out = [f"# accum verify ({report_['preset']}, seed {report_['seed']}, budget {report_['budget']:g})"]
    for title, rows in _sections(report_):
        out += ["", f"## {_md(title)}", "", "| " + " | ".join(c[0] for c in COLUMNS) + " |",
                "|" + "|".join("---:" if c[2] == ">" else "---" for c in COLUMNS) + "|"]
        out += ["| " + " | ".join(_md(x) for x in _cells(r)) + " |" for r in rows]
    out += ["", "| claim | statement | verdict |", "|---|---|---|"]
    out += [f"| {c} | {_md(CLAIMS.get(c, c))} | {'PASS' if ok else '**FAIL**'} |" for c, ok in report_["claims"].items()]
    return "\n".join(out) + "\n"


# --- calibration -----------------------------------------------------------------------------------------


def plan_part(preset: str, only: Sequence[str] | None) -> tuple[list[Check], int]:
    """The checks of the default plan named in ``only`` (check names such as ``far-mass``; None: every check) and
    the whole plan's evidence rows R, at which each of their rows is judged."""
    jobs = plan(PRESETS[preset])
    return ([j for j in jobs if only is None or j.check in only], evidence_rows(jobs))


def _report_outcome(args: tuple[str, int, float, tuple[str, ...] | None]) -> dict:
    """One calibration run: the report at ``seed`` (or its checks in ``only``, judged at the whole plan's R),
    reduced to pass/fail per row (picklable, for the pool)."""
    preset, seed, budget, only = args
    jobs, n_evidence = plan_part(preset, only)
    r = report(jobs, list(CLAIMS), preset, seed, budget, progress=False, n_evidence=n_evidence)
    return {"seed": seed, "passed": r["passed"], "rows": [(x["claim"], x["family"], x["what"], x["passed"],
                                                           x["counts_as_evidence"]) for x in r["rows"]]}


def calibration_modules() -> tuple[str, ...]:
    """A calibration report's pass / fail depends on the checks' numbers (``verify_modules``) and on the plan
    and the thresholds (this module and ``accum.verdict``): all of them fingerprint a saved report."""
    return (*verify_modules(), "accum.verify", "accum.verdict")


def calibration_key(preset: str, seed: int, budget: float, code: dict, only: Sequence[str] | None = None) -> dict:
    """What a saved calibration report is reused for: the same preset, seed, budget, checks and code version."""
    key = {"calibration-report": preset, "seed": seed, "budget": budget, "code": code}
    return key if only is None else {**key, "only": sorted(only)}


def load_report_outcome(cache: Path, key: dict) -> dict | None:
    """A saved calibration report's outcome (None when missing, corrupt or of another key)."""
    try:
        record = read_record(cache / f"{digest(key)}.json")
    except ResultError:
        return None
    return record["result"] if record["config"] == jsonable(key) else None


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
            found = load_report_outcome(cache, calibration_key(preset, seed + 1 + i, budget, code, only))
            if found is not None:
                done[seed + 1 + i] = found
    items = [(preset, seed + 1 + i, budget, only) for i in range(runs) if seed + 1 + i not in done]
    outcomes = list(done.values())
    with tqdm(total=runs, initial=len(done), desc="accum verify --calibrate", unit="report", disable=None if progress else True) as bar:
        for (_, s, _, _), outcome in map_outcomes(_report_outcome, items, workers, client):
            if isinstance(outcome, Exception):
                raise outcome
            if cache is not None:
                key = calibration_key(preset, s, budget, code, only)
                atomic_write_json(cache / f"{digest(key)}.json",
                                  make_record("verify-calibration-report", key, outcome, s, {}))
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


# --- command line ----------------------------------------------------------------------------------------


def add_verify(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", help="check every claim C1-C6; exit 1 if any fails")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", dest="preset", action="store_const", const="quick", help="about a minute (default)")
    size.add_argument("--full", dest="preset", action="store_const", const="full", help="tighter, larger")
    p.set_defaults(preset="quick", run=run_verify)
    p.add_argument("--seed", type=integer_option, default=0)
    p.add_argument("--budget", type=float, default=0.01,
                   help="false-failure probability for the whole report, in [1e-12, 1) (default 0.01)")
    p.add_argument("--family", help="verify one family (built-in name or module:Class) on every claim that applies")
    p.add_argument("--param", action="append", metavar="K=V", help="parameter of --family (repeatable)")
    p.add_argument("--calibrate", type=integer_option, metavar="N", help="run the report at N fresh seeds; print its failure rate")
    p.add_argument("--only", nargs="+", metavar="CHECK", help="with --calibrate: only these checks of the report "
                   "(names as in its timings, e.g. far-mass), each row judged at the whole plan's share")
    p.add_argument("--workers", type=integer_option, metavar="K", help="local processes (default: usable CPUs; 1 = in this process)")
    p.add_argument("--scheduler", metavar="tcp://HOST:PORT", help="run the checks (or --calibrate's reports) on Dask")
    p.add_argument("--cache", metavar="DIR", help="save each finished check (with --calibrate: each finished report) "
                                                  "here; a re-run reuses it")
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--markdown", metavar="PATH")


def applicable_claims(family: Family, seed: int) -> tuple[set[str], dict]:
    """The claims ``accum check`` says apply to ``family`` (its report's ``claims`` dict)."""
    from accum.theory.checks import check

    found = check(family, rng=np.random.default_rng(seed))
    return {c for c, v in found.claims.items() if v["applies"]}, found.claims


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
        if args.calibrate is None:
            raise ParamError("--only goes with --calibrate")
        names = sorted({j.check for j in plan(PRESETS[args.preset])})
        unknown = [c for c in args.only if c not in names]
        if unknown:
            raise ParamError(f"--only: no check {unknown[0]!r} in the {args.preset} report; its checks: {', '.join(names)}")
    if args.cache is not None:
        check_output_path(args.cache, "--cache", directory=True)


def run_verify(args: argparse.Namespace) -> int:
    check_options(args)
    workers = default_workers() if args.workers is None else args.workers
    with contextlib.ExitStack() as stack:
        json_out, markdown_out = reserved_outputs(stack, args)
        if args.calibrate is not None:
            return run_calibrate(args, workers, json_out)
        family = None
        if args.family:
            family = make_family(args.family, **parse_assignments(args.param, "--param"))
            if family_name(family) not in FAMILIES:
                check_sample(family, args.family)  # a user family's first sample: a step form, asked shapes, finite
        cache = None if args.cache is None else make_output_dir(args.cache, "--cache")
        start = time.perf_counter()
        preset = PRESETS[args.preset]
        with connect(args.scheduler) if args.scheduler else contextlib.nullcontext() as client:
            if family is not None:
                claims, why = applicable_claims(family, args.seed)
                result = report(plan_for_family(preset, family, claims), sorted(claims), args.preset, args.seed,
                                args.budget, True, workers, client, cache)
                result["skipped_claims"] = {c: why[c]["why"] for c in CLAIMS if c not in claims}
                result["config"] = {"family": family_name(family), "params": family_params(family), **asdict(preset)}
            else:
                result = run_report(args.preset, args.seed, args.budget, True, workers, client, cache)
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
    start = time.perf_counter()
    with connect(args.scheduler) if args.scheduler else contextlib.nullcontext() as client:
        cache = None if args.cache is None else make_output_dir(args.cache, "--cache")
        try:
            result = calibrate(args.preset, args.calibrate, args.seed, args.budget, workers, client, progress=True,
                               cache=cache, only=args.only)
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
