"""What ``accum verify`` runs: the claims C1-C6, the report sizes (``PRESETS``: quick and full), the default
families and the plan -- the list of ``Check`` jobs (registered check, family, keyword arguments) of the
default report (``plan``), of one family (``plan_for_family``) or of some of its checks (``plan_part``).

The plan knows the kind of every row before anything runs (``Check.kinds``): R = ``evidence_rows`` of them
share the false-failure budget.  Running and judging the plan is ``accum.report``'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np

from accum.simulations.families import Family, family_name, family_params, make_family
from accum.simulations.identity import config_words
from accum.theory import NoClosedForm
from accum.theory.forms import closed_forms, has_closed_forms

from . import adversarial, assumptionchecks, farchecks, quantitychecks, routechecks, stderrs  # noqa: F401  (register the C5/C6, adversarial, quantity, route and standard-error checks)
from .claims import CHECKS, deterministic, label
from .verdict import EVIDENCE, Measurement

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

    coherence_samples: int  #: C1 coherence curve: paths per curve (its first points: 8x, ``claims.short_paths``)
    steps: int  #: C1 coherence curve: its length n (a Haar curve runs 4 steps: incoherent after one)
    theory_samples: int  #: samples behind a prediction with no closed form (estimated moments, ``theory.moments``)
    #: C5: paths behind an estimated far mass's transient (``theory.farmass``: controlled, each worth ~15 plain paths)
    far_theory_samples: int
    window_samples: int  #: C2 mixing window W(T): paths per context length
    contexts: tuple[int, ...]  #: C2: the context lengths T whose windows must agree
    bias_context: int  #: C2 window-bias check: its context length
    bias_samples: int  #: C2 window-bias check: paths (few on purpose: uncorrected, noise would add width)
    transfer: tuple[int, int]  #: C3: (train length, evaluation length)
    transfer_samples: int  #: C3: paths at the evaluation length (the train length: ``claims.window_samples`` of them)
    gap_dims: tuple[int, ...]  #: C4 score gap: the head sizes d
    gap_samples: int  #: C4 score gap: draws per d
    haar_max_dim: int  #: C4 score gap: Haar rows only up to this d (a d x d QR per step)
    scores_length: int  #: C4 far-score variance: sequence length
    scores_offsets: tuple[int, ...]  #: C4 far-score variance: the lags Delta it is measured at (short ones see the one-step law)
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
    se_replicates: int  #: standard-error checks: independent small replicates per estimator (``accum.stderrs``)
    transport_lags: tuple[int, ...]  #: route check: E[P_n k] and E[P_n' q] at these n (``accum.routechecks``)
    transport_samples: int  #: route check: sequences behind E[P_n k]
    pair_samples: int  #: route check: single steps behind the step form's pair operator
    step_mean_samples: int  #: route check: single steps behind the sampler's E[A] (Hotelling's T^2)
    fast_path_length: int  #: fast paths against the fp64 reference: sequence length (odd)
    product_steps: int  #: C1 product norm ||E[A_n..A_1]||_F^2 / d: its length n (``PRODUCT_STEPS`` for fast decays)
    product_samples: int  #: C1 product norm: paths (the U-statistic's M)
    onset_samples: int  #: C1 onset: paths per probe pair
    drift_steps: int  #: orthogonality drift: steps of the one product (fp64 and fp32)
    check_samples: int  #: ``accum check``'s estimators: steps (split in halves) or two-step samples
    #: the window held to theory on families with no C2 claim (``quantity_checks``): context lengths T (shorter than
    #: the claim's: these families mix within a few steps, or never, and W(T) resolves better at short T)
    quantity_contexts: tuple[int, ...]
    quantity_far_sizes: tuple[int, ...]  #: the far residual held to theory on families with no C6 claim: sizes N
    quantity_residual_samples: int  #: the far residual held to theory: paths per N (as ``residual_runs``)
    gap_theory_samples: int  #: the score-gap estimator held to its family's theory at lag 1: draws
    #: (check, family key of ``default_families``, factor): that family's sample count for that check is the
    #: preset's times the factor, for families whose rows resolve their closed form far better (or worse) per sample
    family_factors: tuple[tuple[str, str, float], ...] = ()

    def samples(self, check: str, family_key: str | None, base: int) -> int:
        """``base`` samples scaled by the factor of (check, family_key), if any (a user family: none)."""
        factor = next((f for c, k, f in self.family_factors if (c, k) == (check, family_key)), 1.0)
        return max(1, round(base * factor))


#: sample factors of the rows that hold a quantity to theory on families with no claim about it (``quantity_checks``):
#: the Haar and Lie-walk steps are dense (a QR or a matrix exponential per step: ``REDUCED_POWER``), von Mises draws
#: by rejection; 1.5x (givens' window 3x) where the seed-0 report's best row fell short of the 1% target
QUANTITY_FACTORS = (("window", "vonmises", 0.4), ("window", "haar", 0.05), ("window", "lie-walk", 0.1),
                    ("window", "givens", 3.0), ("window", "householder-token", 1.5), ("window", "rope-uniform", 1.5),
                    ("values", "haar", 0.05), ("values", "lie-walk", 0.05), ("values", "token", 1.5),
                    ("values", "lattice", 1.5))
#: (claim, default family key) pairs held by quantity rows whose power falls short of the 1% every other pair's best
#: row detects; each detects a few percent (quick, seed 0: the Lie walk's window 2.4% and far residual 2.8%, Haar's
#: far residual 4.0%, at reduced sizes: 1% would cost 15-35 s of CPU each, a fifth of the whole quick report; the
#: Householder token table's far residual 1.9%, limited by its estimated prediction's own error, from 20,000 steps)
REDUCED_POWER = {("C2", "lie-walk"), ("C6", "lie-walk"), ("C6", "haar"), ("C6", "householder-token")}

QUICK = Preset(coherence_samples=10_000, steps=64, theory_samples=20_000, far_theory_samples=2500,
               window_samples=6_000, contexts=(64, 256, 1024), bias_context=4096, bias_samples=256, transfer=(64, 1024),
               transfer_samples=18_000, gap_dims=(8, 32, 128), gap_samples=350_000, haar_max_dim=8,
               scores_length=256, scores_offsets=(1, 4, 16), scores_sequences=1400, far_sizes=(100, 1000, 10_000),
               far_samples=192, alibi_sizes=(10, 100, 1000), alibi_samples=6000, short_far_sizes=(10, 100, 1000),
               engines_far_size=600, engines_samples=64, adversarial_sizes=(10, 100, 1000), adversarial_iterations=100,
               residual_sizes=(10, 100, 1000), residual_samples=6000, se_replicates=8000, fast_path_length=37,
               transport_lags=(1, 3), transport_samples=20_000, pair_samples=20_000, step_mean_samples=20_000,
               product_steps=12, product_samples=4000, onset_samples=16_000, drift_steps=1000,
               check_samples=4000, quantity_contexts=(16, 64, 256), quantity_far_sizes=(10, 100),
               quantity_residual_samples=24_000, gap_theory_samples=40_000,
               family_factors=(("onset", "householder", 0.5), ("onset", "householder-token", 0.25),
                               ("onset", "lie-walk", 0.25),
                               ("coherence", "haar", 2.0), ("coherence", "vonmises", 1.15), ("coherence", "lie-walk", 0.45),
                               ("coherence", "cauchy", 1.5),
                               ("transfer", "rope-uniform", 0.2), ("far-mass", "haar", 0.5),
                               ("far-mass", "householder-token", 2.0), ("far-mass", "givens", 5.0),
                               ("values", "householder", 0.5), ("values", "givens", 0.5),
                               ("scores-far-variance", "so2", 0.25), ("scores-far-variance", "token", 0.5),
                               ("scores-far-variance", "householder", 0.25),
                               ("scores-far-variance", "householder-token", 0.25), ("scores-far-variance", "givens", 0.25),
                               *QUANTITY_FACTORS))

PRESETS = {
    "quick": QUICK,
    # the quick plan with each claim's sample counts scaled by (its pair's detectable error at quick / 0.22%)^2, so
    # every (claim, family) pair's best row detects 0.3% with some margin (the detectable error also depends on the
    # random probe pair q != k a check draws from its identity, sample count included); the sizes (lengths, far sets,
    # dimensions) are the quick ones.  Quick at seed 0 (after the control variates): C1 cauchy 0.69%, haar 0.74%,
    # vonmises 0.63%, lie-walk 0.63%, token 0.49%, givens 0.38%, householder-token 0.33%, uniform 0.29%; C2 so2 0.54%
    # (paired growth); C3 token 0.49%; C4 lattice 0.73% (the others 0.03-0.15% with the mean score as control; Haar's
    # scores row 0.9%: no control, its coherence is 0); C5 givens 0.63%, householder-token 0.55%,
    # haar 0.49%, token 0.44%, householder 0.39%; C6 so2 0.45%, givens 0.37%, householder 0.22%.  The base counts
    # follow the worst family of each check; ``family_factors`` give the others fewer, the factor being the quick
    # factor times (quick error / 0.22%)^2 over the base's multiplier.
    "full": replace(QUICK, coherence_samples=60_000, theory_samples=80_000, far_theory_samples=10_000,
                    window_samples=36_000, bias_samples=1024, transfer_samples=88_000, gap_samples=1_350_000, scores_sequences=15_400,
                    far_samples=768, alibi_samples=24_000, engines_samples=256, adversarial_iterations=300,
                    residual_samples=24_600, se_replicates=24_000, fast_path_length=61, transport_samples=200_000,
                    pair_samples=200_000, step_mean_samples=80_000, product_samples=16_000, onset_samples=64_000,
                    check_samples=16_000, quantity_residual_samples=98_400, gap_theory_samples=160_000,
                    family_factors=(("onset", "householder", 0.5), ("onset", "householder-token", 0.25),
                                    ("onset", "lie-walk", 0.25),
                                    ("coherence", "cauchy", 2.45), ("coherence", "haar", 3.8),
                                    ("coherence", "vonmises", 1.55), ("coherence", "lie-walk", 0.61),
                                    ("coherence", "token", 0.82), ("coherence", "givens", 0.5),
                                    ("coherence", "householder-token", 0.37), ("coherence", "uniform", 0.29),
                                    ("coherence", "householder", 0.15), ("coherence", "so2", 0.1),
                                    ("window", "householder", 0.17), ("transfer", "rope-uniform", 0.04),
                                    ("scores-far-variance", "so2", 0.023), ("scores-far-variance", "token", 0.05),
                                    ("scores-far-variance", "householder", 0.023),
                                    ("scores-far-variance", "householder-token", 0.023),
                                    ("scores-far-variance", "givens", 0.023), ("scores-far-variance", "haar", 1.0),
                                    ("far-mass", "givens", 10.4), ("far-mass", "householder-token", 3.2),
                                    ("far-mass", "haar", 0.63), ("far-mass", "householder", 0.8),
                                    ("values", "givens", 0.35), ("values", "householder", 0.12), *QUANTITY_FACTORS)),
}

EPS = 0.05
S0 = 4.0
SLOPE = 0.5


@dataclass(frozen=True)
class Check:
    """One check of the plan: its registered name, the family and its keyword arguments.

    Checks run on the job runner (``simulations.runner.map_outcomes``: this process, a pool or Dask), each seeded from
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
        # beta = 1.3, not 1: at beta = 1 every power of beta is beta, so a beta where beta^2 belongs cannot show
        "householder": make_family("householder", dim=16, beta=1.3),
        # 256 token directions in d = 16: E[A] = I - 2 W^T W / V has its slowest rate near 0.93 (with V = 32 it was
        # 0.99, and |c(64)| > 0.05 for some random probe pairs: a calibration run caught that row failing 3/40)
        "householder-token": make_family("householder", dim=16, beta=2.0, w="token", vocab=256),
        "haar": make_family("haar", dim=16),
        "givens": make_family("givens", dim=8, sigma=1.0),
        "lie-walk": make_family("lie-walk", dim=8, sigma=0.3),
        # every angle law: the lattice (no spectral gap: its far second moment never decays) and RoPE's frequencies
        # drawn at random (base 10, so every plane turns by at least 0.13)
        "lattice": _so2(law="lattice", m=2, offset=0.4),
        "rope-uniform": _so2(law="rope-uniform", base=10.0),
        "rope": make_family("rope", dim=16),
        "nope": make_family("nope", dim=16),
    }


#: the claims each default family is checked for (``family_checks``): every family and every angle law (its sampler
#: and characteristic function); NoPE has no claim of its own (``quantity_checks`` and the ALiBi contrast hold it)
CLAIMS_OF = {"so2": {"C1", "C2", "C4", "C6"}, "vonmises": {"C1"}, "uniform": {"C1"}, "cauchy": {"C1"},
             "token": {"C1", "C3", "C4", "C5"}, "householder": {"C1", "C2", "C4", "C5", "C6"},
             "householder-token": {"C1", "C4", "C5"}, "haar": {"C1", "C4", "C5"}, "givens": {"C1", "C4", "C5", "C6"},
             "lie-walk": {"C1"}, "lattice": {"C4"}, "rope-uniform": {"C3"}, "rope": {"C2"}}


#: coherence curve length of families that decay fast: Haar is incoherent after one step; the Lie walk's rate is
#: e^{-(d-1) sigma^2 / 2} = 0.73 (a matrix exponential per step)
COHERENCE_STEPS = {"haar": 4, "lie-walk": 16}


def family_checks(f: Family, p: Preset, claims: set[str], key: str | None = None) -> list[Check]:
    """The checks of one family for the claims in ``claims`` (C1 coherence ... C6 residual, plus its fast
    paths against the reference and one standard-error check); ``key`` names a default family (its sample
    factors, ``Preset.samples``; Haar is incoherent after one step, so its coherence runs a few steps)."""
    ts = p.theory_samples
    jobs = [Check("fast-paths", f, {"length": p.fast_path_length})]
    if "C1" in claims:
        jobs.append(Check("coherence", f, {"steps": COHERENCE_STEPS.get(key, p.steps), "eps": EPS, "theory_samples": ts,
                                         "samples": p.samples("coherence", key, p.coherence_samples)}))
    if "C2" in claims:  # a deterministic family's window is exact from a handful of paths
        jobs.append(Check("window", f, {"contexts": p.contexts, "theory_samples": ts,
                                      "samples": 4 if deterministic(f) else p.samples("window", key, p.window_samples)}))
    if "C3" in claims:
        jobs.append(Check("transfer", f, {"train": p.transfer[0], "evaluate": p.transfer[1],
                                        "samples": p.samples("transfer", key, p.transfer_samples), "theory_samples": ts}))
    if "C4" in claims:
        jobs.append(Check("scores-far-variance", f, {"length": p.scores_length, "offsets": p.scores_offsets,
                                                   "sequences": p.samples("scores-far-variance", key, p.scores_sequences),
                                                   "theory_samples": ts}))
    if "C5" in claims:
        jobs.append(Check("far-mass", f, {"far_sizes": p.short_far_sizes, "s0": S0, "theory_samples": p.far_theory_samples,
                                          "samples": p.samples("far-mass", key, p.far_samples)}))
        jobs.append(Check("far-mass-engines", f, {"far_size": p.engines_far_size, "s0": S0, "samples": p.engines_samples}))
    if "C6" in claims:
        jobs.append(Check("values", f, {"far_sizes": p.residual_sizes, "theory_samples": ts,
                                      "samples": p.samples("values", key, p.residual_samples)}))
    return jobs


#: product-norm curve length of families that decay fast (Haar: 0 after one step; the Lie walk: rate^2 = 0.53)
PRODUCT_STEPS = {"haar": 2, "lie-walk": 6}

#: onset: (level crossed on the first descent, steps searched) per default family (``quantitychecks.check_onset``).
#: Left out: Haar and the m = 2 lattice (c(1) = 0 exactly: the log-linear onset is below one step and carries no
#: statistics), NoPE (never decays), rope-uniform (about 1% decay a step: consecutive steps lie within noise of each
#: other, the onset sits on the kinks of its interpolation at any affordable sample count).
ONSET = {"so2": (0.2, 12), "vonmises": (0.2, 8), "uniform": (0.2, 12), "cauchy": (0.3, 8), "token": (0.3, 8),
         "householder": (0.2, 28), "householder-token": (0.2, 24), "givens": (0.2, 24), "lie-walk": (0.2, 8),
         "rope": (0.3, 2048)}


#: the families whose ``accum check`` estimators a report holds to their exact targets: one of each step form, with
#: closed-form E[A] and E[A (x) A] and i.i.d. steps
ASSUMPTION_FAMILIES = ("so2", "householder", "givens", "haar")


#: the checks whose rows hold each ``accum measure`` quantity (``simulations.measure.QUANTITIES``) to theory
QUANTITY_CHECKS = {"coherence": frozenset({"coherence"}), "product-norm": frozenset({"product-norm"}),
                   "onset": frozenset({"onset"}), "window": frozenset({"window", "window-bias"}),
                   "score-gap": frozenset({"score-gap"}), "near-weight": frozenset({"far-mass", "far-mass-engines", "alibi"}),
                   "far-residual": frozenset({"values"}), "drift": frozenset({"drift"})}
#: default families whose near weight no row holds: the Lie walk's far mass has no closed form, and its estimate
#: (``theory.farmass``) left the row a 6.7% detectable error at a quarter of the quick paths (31 s of CPU at all of
#: them, a matrix exponential per step), short of the 1% every (claim, family) pair is held to
NEAR_WEIGHT_LEFT_OUT = {"lie-walk"}
#: the window's contexts on the families of dense steps that mix at once (Haar) or fast (the Lie walk's rate 0.73):
#: short contexts hold the same estimator at a fraction of the cost
QUANTITY_CONTEXTS = {"haar": (4, 16, 64), "lie-walk": (8, 32, 128)}


def near_weight_check(p: Preset, f: Family, key: str) -> Check:
    """The job that holds a default family's near weight to theory: the C5 far-mass rows; for a deterministic family,
    whose far mass is one number (statistical rows would have no spread), the exact ALiBi row, as NoPE's contrast."""
    if deterministic(f):
        return Check("alibi", f, {"far_sizes": p.alibi_sizes, "s0": S0, "slope": SLOPE, "samples": 2})
    return Check("far-mass", f, {"far_sizes": p.short_far_sizes, "s0": S0, "theory_samples": p.far_theory_samples,
                                 "samples": p.samples("far-mass", key, p.far_samples)})


def quantity_checks(p: Preset, fam: dict[str, Family], held: set[tuple[str, str]]) -> list[Check]:
    """The ``accum measure`` quantities no claim's own row computes (``accum.quantitychecks``), on every default family
    they apply to: the product norm on all, the onset where ``ONSET`` has it, the drift on every family of orthogonal
    steps (householder beta = 1.3 contracts: its drift is not rounding), the score-gap estimator at lag 1 against
    the family's own theory; and, on the families no job in ``held`` (check, family label) holds them on, the
    coherence curve (without C1's decay row, which RoPE, NoPE, the lattice law and RoPE's random frequencies do not
    claim), the far mass (the near weight), the window (at ``Preset.quantity_contexts``) and the far residual (at
    ``Preset.quantity_far_sizes``), each against the family's theory, not the claim."""
    jobs = []
    for key, f in fam.items():
        checked = {check for check, family in held if family == label(f)}
        det = deterministic(f)
        if not checked & QUANTITY_CHECKS["coherence"]:
            jobs.append(Check("coherence", f, {"steps": COHERENCE_STEPS.get(key, p.steps), "eps": EPS,
                                               "theory_samples": p.theory_samples, "decayed": False,
                                               "samples": 4 if det else p.samples("coherence", key,
                                                                                  p.coherence_samples)}))
        if not (checked & QUANTITY_CHECKS["near-weight"] or key in NEAR_WEIGHT_LEFT_OUT):
            jobs.append(near_weight_check(p, f, key))
        if not checked & QUANTITY_CHECKS["window"]:
            jobs.append(Check("window", f, {"contexts": QUANTITY_CONTEXTS.get(key, p.quantity_contexts),
                                            "theory_samples": p.theory_samples,
                                            "samples": 4 if det else p.samples("window", key, p.window_samples)}))
        if not checked & QUANTITY_CHECKS["far-residual"]:
            jobs.append(Check("values", f, {"far_sizes": p.quantity_far_sizes, "theory_samples": p.theory_samples,
                                            "samples": 4 if det else p.samples("values", key,
                                                                               p.quantity_residual_samples)}))
        jobs.append(Check("score-gap", f, {"offset": 1, "samples": 4 if det else p.gap_theory_samples,
                                           "theory_samples": p.theory_samples}))
        jobs.append(Check("product-norm", f, {"steps": PRODUCT_STEPS.get(key, p.product_steps),
                                              "samples": 4 if det else p.product_samples,
                                              "theory_samples": p.theory_samples}))
        if key in ONSET:
            level, steps = ONSET[key]
            jobs.append(Check("onset", f, {"level": level, "steps": steps, "theory_samples": p.theory_samples,
                                           "samples": 4 if det else p.samples("onset", key, p.onset_samples)}))
        if quantitychecks.orthogonal_steps(f):
            jobs.append(Check("drift", f, {"steps": p.drift_steps}))
    return jobs


def plan(preset: Preset) -> list[Check]:
    """The default report: every claim on the families it is about (module docstring of ``accum.claims``)."""
    p, fam = preset, default_families()
    ts = p.theory_samples
    jobs: list[Check] = []
    for key, claims in CLAIMS_OF.items():
        jobs += family_checks(fam[key], p, claims, key)
    jobs += route_checks(p, fam)
    for key in ASSUMPTION_FAMILIES:  # ``accum check``'s estimators at their exact targets (``accum.assumptionchecks``)
        jobs += [Check("check-gaps", fam[key], {"moment": m, "samples": p.check_samples}) for m in ("first", "second")]
        jobs.append(Check("check-independence", fam[key], {"samples": p.check_samples}))
    jobs.append(Check("window-bias", fam["so2"], {"context": p.bias_context, "samples": p.bias_samples, "theory_samples": ts}))
    for d in p.gap_dims:
        # both laws mix by their lag: theta ~ U(-pi, pi) at once, the Gaussian sum of 4 angles has variance 16
        gap = [(_so2(dim=d, law="uniform", a=math.pi), 1), (_so2(dim=d, law="gaussian", sigma=2.0), 4)]
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
        jobs.append(Check("stderr", f, {"estimator": estimator, "replicates": p.se_replicates}))
    return jobs + quantity_checks(p, fam, {(j.check, label(j.family)) for j in jobs})


#: largest dimension whose sampler a report holds to E[A] (Hotelling's T^2 over d^2 entries: a d^2 x d^2 covariance
#: and its eigendecomposition, ~d^6 flops)
STEP_MEAN_MAX_DIM = 32


def has_exact_step_mean(family: Family) -> bool:
    """Whether the step-mean check applies: random steps, an exact E[A] (the built-ins' closed forms; a user
    family has none) and d <= ``STEP_MEAN_MAX_DIM``."""
    return has_closed_forms(family) and not deterministic(family) and family.dim <= STEP_MEAN_MAX_DIM


def has_exact_step_pair(family: Family) -> bool:
    """Whether the step-pair check applies: ``has_exact_step_mean`` and a closed-form E[A (x) A]
    (``ClosedForms.pair_operator``: every random built-in)."""
    if not has_exact_step_mean(family):
        return False
    try:
        closed_forms(family).pair_operator()
    except NoClosedForm:
        return False
    return True


def route_checks(p: Preset, fam: dict[str, Family]) -> list[Check]:
    """The routes no claim's own row takes (``accum.routechecks``): every random family's sampler through E[A]
    (Hotelling's T^2 over all entries) and through E[A (x) A] (24 contractions), each step form's transport, transpose and pair operator (so2, householder,
    givens: the angle, Householder and dense forms) and the moment-operator theory held to the built-ins' closed
    forms."""
    jobs = [Check("step-mean", f, {"samples": p.step_mean_samples}) for f in fam.values() if has_exact_step_mean(f)]
    jobs += [Check("step-pair", f, {"samples": p.step_mean_samples}) for f in fam.values() if has_exact_step_pair(f)]
    for key in ("so2", "householder", "givens"):
        jobs.append(Check("transport", fam[key], {"lags": p.transport_lags, "samples": p.transport_samples}))
        jobs.append(Check("pair-operator", fam[key], {"samples": p.pair_samples, "theory_samples": p.theory_samples}))
    estimated = [("coherence", key, {"steps": 8}) for key in ("so2", "householder", "householder-token", "givens",
                                                                "lie-walk")]
    # Haar at lag 1: its sampled moment operator is the Haar projection up to noise that each lag squares, so at lag 4
    # the estimate is exact to ~1e-9 (a row of rounding, empty at full's theory samples: routechecks drops such points)
    estimated += [("far-variance", key, {"offset": 1 if key == "haar" else 4})
                  for key in ("so2", "householder", "haar", "givens")]
    estimated += [("far-residual", key, {"far_sizes": (1, 10)}) for key in ("so2", "householder")]
    for quantity, key, options in estimated:
        jobs.append(Check("estimated-theory", fam[key], {"quantity": quantity, "theory_samples": p.theory_samples,
                                                          **options}))
    return jobs


def plan_for_family(preset: Preset, family: Family, claims: set[str]) -> list[Check]:
    """The report for one (e.g. user-defined) family: its checks for the claims that apply to it, the standard
    error of the coherence estimator on it and, where ``has_exact_step_mean``, its sampler against the exact E[A]
    (``routechecks.check_step_mean``) and, for C4 where ``has_exact_step_pair``, against the exact E[A (x) A]
    (``routechecks.check_step_pair``)."""
    jobs = family_checks(family, preset, claims)
    if "C1" in claims:
        jobs.append(Check("stderr", family, {"estimator": "coherence", "replicates": preset.se_replicates}))
        if has_exact_step_mean(family):
            jobs.append(Check("step-mean", family, {"samples": preset.step_mean_samples}))
    if "C4" in claims and has_exact_step_pair(family):
        jobs.append(Check("step-pair", family, {"samples": preset.step_mean_samples}))
    return jobs


def plan_part(preset: str, only: Sequence[str] | None) -> tuple[list[Check], int]:
    """The checks of the default plan named in ``only`` (check names such as ``far-mass``; None: every check) and
    the whole plan's evidence rows R, at which each of their rows is judged."""
    jobs = plan(PRESETS[preset])
    return ([j for j in jobs if only is None or j.check in only], evidence_rows(jobs))
