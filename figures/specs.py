"""What each figure needs: its measurement jobs (quantity, family, params, options), at two sizes.

A figure's jobs are plain data; ``figures.data`` turns them into saved records (the seed of each job comes
from the run's root seed and the job's config, see ``figures.data``) and ``figures.plots`` draws them.
``quick`` sizes are tiny (seconds in total, for tests and smoke runs); the default sizes give the figures
in the repository (a few CPU minutes in total).

Every family is built from the registry in ``simulations.families``; unit probes q = k = m = 1/sqrt(d)
throughout (the estimators' default).  An ``ExtraFamily`` (``accum figures --family F --param k=v``, built-in or
``module:Class``) adds one series, ``EXTRA_SERIES``, to figures 1-5 beside the built-ins, measured with the same
options (in figure 3, a sweep over d of one SO(2) law, it is one more point at the family's own dimension); in
figure 1 it goes to the panel of its step form, as every built-in does (``coherence_panel``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from accum.simulations.families import FAMILIES
from accum.simulations.steps import AngleSteps

#: head dimension shared by every figure except the score-gap sweep over d (and the Lie walk, d = 8)
DIM = 16


@dataclass(frozen=True)
class CurveSpec:
    """One curve of a figure: the measurement ``measure(quantity, family, params, options, seed)`` it draws.

    ``figures.data.plan`` turns it into the sweep's ``Job`` (the one job model: hash-keyed, seeded from its
    config, run by the sweep's runner), so a figure's data file is the file ``accum sweep`` would write.

    series: which curve of the figure it belongs to (its colour and legend entry, see ``figures.plots``);
    label: the legend text (mathtext allowed); panel: which panel of the figure draws it.
    """

    quantity: str
    family: str
    params: dict
    options: dict
    series: str
    label: str
    panel: int = 0


@dataclass(frozen=True)
class FigureSpec:
    """name: the file stem of the figure; summary: what it shows (first line of the caption)."""

    name: str
    summary: str
    jobs: tuple[CurveSpec, ...] = field(default_factory=tuple)


#: the series name of an extra family in every figure it is drawn in (its colour in ``figures.plots.COLORS``)
EXTRA_SERIES = "extra"


@dataclass(frozen=True)
class ExtraFamily:
    """A family drawn beside the built-ins: its name (built-in or ``module:Class``), given parameters, and the step
    form its first sample took (the class name, as a record's ``family_check["form"]``, e.g. ``"AngleSteps"``)."""

    name: str
    params: dict = field(default_factory=dict)
    form: str = field(kw_only=True)

    @property
    def label(self) -> str:
        """Legend text: the class (or built-in) name and the given parameters, e.g. ``SignedPermutation(dim=8)``."""
        given = ", ".join(f"{k}={v}" for k, v in self.params.items())
        return f"{self.name.rpartition(':')[2]}({given})".replace("$", r"\$")

    def job(self, quantity: str, options: dict, panel: int = 0) -> CurveSpec:
        return CurveSpec(quantity, self.name, dict(self.params), options, EXTRA_SERIES, self.label, panel)


def _so2(law: str, **params) -> dict:
    return {"dim": DIM, "law": law, **params}


#: families whose steps are not random: a handful of samples gives the exact value (standard error 0)
DETERMINISTIC = ("rope", "nope")


def _few_if_deterministic(family: str) -> dict:
    """Options overriding the sample count for deterministic families."""
    return {"samples": 4} if family in DETERMINISTIC else {}


#: figure 1's panels: (a) block SO(2) angle steps, (b) every matrix form (Householder, dense)
ANGLE_PANEL, MATRIX_PANEL = 0, 1


def coherence_panel(form: str) -> int:
    """Figure 1's panel of a family whose steps take the form named ``form`` (a step form's class name, e.g.
    ``"AngleSteps"``): ``ANGLE_PANEL`` for block SO(2) angles, ``MATRIX_PANEL`` for any other form."""
    return ANGLE_PANEL if form == AngleSteps.__name__ else MATRIX_PANEL


def builtin_form(family: str) -> str:
    """The step form of a built-in family's samples (its ``FORM``), by class name."""
    return FAMILIES[family].FORM.__name__


def coherence_spec(quick: bool, extra: ExtraFamily | None = None) -> FigureSpec:
    """Figure 1: |c(n)| = |E[q^T A_n ... A_1 k]| for every built-in family (NoPE is c = 1, left out), and the
    extra family, each in the panel of its step form (``coherence_panel``)."""
    steps, samples = (8, 64) if quick else (64, 20000)
    lie_steps, lie_samples = (4, 16) if quick else (24, 1000)
    haar_steps, haar_samples = (4, 64) if quick else (8, 8000)
    opts = {"steps": steps, "samples": samples}
    so2 = [
        ("so2-gaussian", r"SO(2) Gaussian $\sigma=0.5$", _so2("gaussian", sigma=0.5)),
        ("so2-uniform", r"SO(2) uniform $a=1$", _so2("uniform", a=1.0)),
        ("so2-vonmises", r"SO(2) von Mises $\kappa=4$", _so2("vonmises", kappa=4.0)),
        ("so2-cauchy", r"SO(2) wrapped Cauchy $\gamma=0.2$", _so2("wrapped-cauchy", gamma=0.2)),
        ("so2-token", r"SO(2) token angles ($V=8$)", _so2("token", vocab=8, table_sigma=1.0)),
    ]
    rows = [("so2-accumulated", p, opts, key, label) for key, label, p in so2] + [
        ("rope", {"dim": DIM}, {**opts, **_few_if_deterministic("rope")}, "rope", "RoPE (deterministic)"),
        ("householder", {"dim": DIM, "beta": 1.0}, opts, "householder-1", r"Householder $\beta=1$"),
        ("householder", {"dim": DIM, "beta": 2.0}, opts, "householder-2", r"Householder $\beta=2$ (reflection)"),
        ("givens", {"dim": DIM, "sigma": 1.0}, opts, "givens", r"Givens $\sigma=1$"),
        ("lie-walk", {"dim": 8, "sigma": 0.5}, {"steps": lie_steps, "samples": lie_samples}, "lie-walk",
         r"Lie walk $\sigma=0.5$, $d=8$"),
        ("haar", {"dim": DIM}, {"steps": haar_steps, "samples": haar_samples}, "haar",
         r"Haar O(d): $c(n) = 0$ for $n \geq 1$"),
    ]
    jobs = [CurveSpec("coherence", family, params, options, key, label, coherence_panel(builtin_form(family)))
            for family, params, options, key, label in rows]
    jobs += [extra.job("coherence", opts, coherence_panel(extra.form))] if extra else []
    return FigureSpec("fig1_coherence",
                      "Coherence |E[q^T A_n...A_1 k]| versus the number of accumulated steps n, Monte Carlo "
                      "(markers and +-2 se band, drawn until |c| first falls to 2 se, i.e. into the noise) against "
                      "theory (dashed); log y.", tuple(jobs))


#: (series, legend label, family, params) of the window figure
WINDOW_FAMILIES = (
    ("so2-gaussian", r"SO(2) Gaussian $\sigma=0.5$", "so2-accumulated", _so2("gaussian", sigma=0.5)),
    ("so2-token", r"SO(2) token angles ($V=8$)", "so2-accumulated", _so2("token", vocab=8, table_sigma=1.0)),
    ("householder-2", r"Householder $\beta=2$", "householder", {"dim": DIM, "beta": 2.0}),
    ("givens", r"Givens $\sigma=1$", "givens", {"dim": DIM, "sigma": 1.0}),
    ("rope", "RoPE (contrast)", "rope", {"dim": DIM}),
)


def window_spec(quick: bool, extra: ExtraFamily | None = None) -> FigureSpec:
    """Figure 2: mixing-window width W(T) at each context length T; flat for accumulated transforms."""
    contexts, samples = ((8, 16), 8) if quick else ((16, 32, 64, 128, 256, 512, 1024), 400)
    jobs = tuple(CurveSpec("window", fam, params, {"context": t, "samples": samples, **_few_if_deterministic(fam)},
                     key, label) for key, label, fam, params in WINDOW_FAMILIES for t in contexts)
    jobs += tuple(extra.job("window", {"context": t, "samples": samples}) for t in contexts) if extra else ()
    return FigureSpec("fig2_window",
                      "Mixing-window width W(T) = sum_Delta c_T(Delta)^2 versus context length T: flat for "
                      "accumulated transforms, growing for RoPE; Monte Carlo +-2 se against theory (dashed).", jobs)


def score_gap_spec(quick: bool, extra: ExtraFamily | None = None) -> FigureSpec:
    """Figure 3: far-score distribution at distance Delta for growing head dimension d (SO(2) Gaussian), with
    ``extra`` at its own dimension."""
    dims, offset, samples = ((4, 16), 4, 200) if quick else ((4, 16, 64, 256), 64, 20000)
    jobs = tuple(CurveSpec("score-gap", "so2-accumulated", {"dim": d, "law": "gaussian", "sigma": 1.0},
                           {"offset": offset, "samples": samples}, f"d{d}", f"$d={d}$") for d in dims)
    jobs += (extra.job("score-gap", {"offset": offset, "samples": samples}),) if extra else ()
    return FigureSpec("fig3_score_gap",
                      "Near score q.k = 1 against the far-score distribution s = q^T A_Delta...A_1 k for growing head "
                      "dimension d, each histogram with C4's Gaussian law N(0, |q|^2|k|^2/d) dashed (the limit of "
                      "many steps, not exact at a finite Delta): far scores concentrate at 0 with variance 1/d, so the "
                      "gap opens as sqrt(d).", jobs)


def near_weight_spec(quick: bool, extra: ExtraFamily | None = None) -> FigureSpec:
    """Figure 4: near-target attention weight among N far keys, rotation families against ALiBi."""
    opts = {"n_max": 100, "points": 3, "samples": 4} if quick else {"n_max": 100_000, "points": 11, "samples": 32}
    opts = {**opts, "s0": 4.0}
    rows = [
        ("so2-gaussian", r"SO(2) Gaussian $\sigma=0.5$", "so2-accumulated", _so2("gaussian", sigma=0.5), 0.0),
        ("so2-token", r"SO(2) token angles ($V=8$)", "so2-accumulated", _so2("token", vocab=8, table_sigma=1.0), 0.0),
        ("householder-2", r"Householder $\beta=2$", "householder", {"dim": DIM, "beta": 2.0}, 0.0),
        ("rope", "RoPE", "rope", {"dim": DIM}, 0.0),
        ("nope", "NoPE (no transport)", "nope", {"dim": DIM}, 0.0),
        ("alibi", r"ALiBi slope $m = 0.5$ (NoPE + bias)", "nope", {"dim": DIM}, 0.5),
    ]
    jobs = tuple(CurveSpec("near-weight", fam, params, {**opts, "alibi_slope": slope, **_few_if_deterministic(fam)},
                     key, label) for key, label, fam, params, slope in rows)
    jobs += (extra.job("near-weight", {**opts, "alibi_slope": 0.0}),) if extra else ()
    return FigureSpec("fig4_near_weight",
                      "Attention weight on one near target (logit s0) among N far copies of its key versus N: "
                      "rotations alone let it fall to 0 (below the upper bound 1/(1+N e^{-2 s0})); ALiBi's bias keeps "
                      "it above a floor. Dotted: 1/(1 + E far mass) per family, by Jensen a lower bound of the mean "
                      "weight E w (equal to it for deterministic steps: RoPE, NoPE, ALiBi), not its exact theory.", jobs)


def far_residual_spec(quick: bool, extra: ExtraFamily | None = None) -> FigureSpec:
    """Figure 5: far value residual |r(N)|^2 / |m|^2 with (QKV) and without (QK only) value rotation."""
    opts = {"n_max": 100, "points": 3, "samples": 8} if quick else {"n_max": 20_000, "points": 9, "samples": 400}
    rows = [
        ("qkv-0.5", r"QKV rotation, SO(2) $\sigma=0.5$", _so2("gaussian", sigma=0.5), 1),
        ("qkv-1", r"QKV rotation, SO(2) $\sigma=1$", _so2("gaussian", sigma=1.0), 1),
        ("qk-0.5", r"QK only (values not rotated), $\sigma=0.5$", _so2("gaussian", sigma=0.5), 0),
    ]
    jobs = tuple(CurveSpec("far-residual", "so2-accumulated", params, {**opts, "value_rotation": rot}, key, label)
                 for key, label, params, rot in rows)
    jobs += (extra.job("far-residual", {**opts, "value_rotation": 1}),) if extra else ()
    return FigureSpec("fig5_far_residual",
                      "Squared norm of the uniformly weighted far value residual r(N) = (1/N) sum_Delta P_Delta m "
                      "versus the far-set size N: rotated values add incoherently (|r|^2 ~ 1/N, i.e. |r| ~ 1/sqrt(N)), "
                      "unrotated values stay at |m|^2. Dashed: theory, exact in N; with rotation it tends to "
                      "(1 + rho) / ((1 - rho) N), where rho is the mean step's scale, E A = rho I (rho = "
                      "exp(-sigma^2/2) for the Gaussian angles drawn).", jobs)


PROBES_SUMMARY = ("Probe perplexity versus evaluation length / train length for every probe arm, mean and 95% band "
                  "over seeds, one row of panels per group of arms (baselines and other methods, random rotations, "
                  "learned token angles, the author's variants of them; RoPE, thin and without band, in every other "
                  "row for comparison), arms named as in probes/REPORT.md: (a) all positions of each window, (b) the "
                  "last train-length segment of each window against the 1x perplexity of the same tokens, (c) the far "
                  "attention mass.")


def probes_spec() -> FigureSpec:
    """Figure 6: read from the probes' sweep.json, no measurement jobs."""
    return FigureSpec("fig6_probes", PROBES_SUMMARY)


THEORY_SUMMARY = ("accum's theory against the trained probes (probes/bridge.py), one row of panels per group of arms "
                  "(as in figure 6): far attention mass versus evaluation length, measured (solid, mean and 95% band "
                  "over seeds) against (a) the prediction from each head's step law and 1x query/key statistics (dashed) "
                  "and (b) the C3 transfer row extrapolated from the head's own 2x attention (dashed), dotted verticals "
                  "at the judged lengths; (c) predicted mixing window W_pred = sum_{n<L} C(n)^2 against the measured 90% "
                  "attention window, one point per head and seed (descriptive, not judged); (d) the degradation order: "
                  "each arm's rank by the law-based degradation D against its rank by the measured perplexity growth, "
                  "with both orders' Spearman verdicts (every arm; without ALiBi).")


def theory_spec() -> FigureSpec:
    """Figure 7: read from the runs' theory.json beside the probes' sweep.json, no measurement jobs."""
    return FigureSpec("fig7_theory", THEORY_SUMMARY)


def figure_specs(quick: bool, extra: ExtraFamily | None = None) -> tuple[FigureSpec, ...]:
    """Figures 1-7 in order, with ``extra`` beside the built-ins in figures 1-5."""
    return (coherence_spec(quick, extra), window_spec(quick, extra), score_gap_spec(quick, extra), near_weight_spec(quick, extra),
            far_residual_spec(quick, extra), probes_spec(), theory_spec())
