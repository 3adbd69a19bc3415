"""The design of a probe sweep: ``SweepConfig`` (arms and their variants, seeds, looks, level, the training and
evaluation configs) and design.json, the record that keeps a sweep's design (``check_design``): written once,
with the claims the design judges, stated before any run; another design in the same folder is refused with one
line naming the first difference, unless ``redesign`` (finished runs are never rewritten: ``probes.sweep``).

Arms are labels: a built-in arm's name, or a variant's label with its ``TrainConfig`` overrides
(``SweepConfig.variants``: e.g. ``learned_key`` = {"arm": "learned", "learned_token": "key"}).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields, replace
from pathlib import Path

from accum.probes import paper, stats
from accum.probes.evaluate import MAX_MULTIPLIER, EvalConfig
from accum.probes.io import json_text, read_json, write_if_changed
from accum.probes.model import ARMS, FAMILY_ARMS, TOKEN_ARMS
from accum.probes.train import TrainConfig
from accum.simulations.params import ParamError, check_int, field_error
from accum.simulations.results import ResultError

DESIGN = "design.json"
MIN_SEEDS = 3
MIN_EVAL_WINDOWS = 2


@dataclass(frozen=True)
class SweepConfig:
    """train: shared training config (its ``arm`` and ``seed`` are replaced per run); arms: arm labels, each a
    built-in arm's name or a label of ``variants``; variants: (label, ((field, value), ...)) pairs, the
    ``TrainConfig`` overrides of each variant (``arm`` among them); seeds: at least ``MIN_SEEDS`` distinct
    training seeds; the multipliers include 1 (every ratio is to 1x); every length is evaluated on at least
    ``MIN_EVAL_WINDOWS`` windows (n_tokens >= 2 x seq_len x
    the largest multiplier); analysis windows are ``analysis_windows`` validation windows of
    ``analysis_multiplier`` * seq_len tokens.

    looks: the sequential design's paired-seed counts n_1 < ... < n_K (``stats`` module docstring), each in
    [MIN_SEEDS, len(seeds)]; empty means one look at every seed (the fixed design).  alpha: the error budget
    the looks share (each look's interval has level 1 - alpha / K).  Runs are added only where a look asks
    for them, so the seeds beyond the first look are candidates, run when a claim is still unresolved.

    paper_looks: the looks of the paper-form rows (``probes.paper``: one family-wise level alpha over all of them),
    empty for the same looks as the pre-registered rows; a later start where they were declared after a look."""

    train: TrainConfig = TrainConfig()
    eval: EvalConfig = EvalConfig()
    arms: tuple[str, ...] = tuple(arm for arm in ARMS if arm not in FAMILY_ARMS)
    seeds: tuple[int, ...] = (0, 1, 2)
    analysis_multiplier: int = 4
    analysis_windows: int = 4
    looks: tuple[int, ...] = ()
    alpha: float = 0.05
    variants: tuple[tuple[str, tuple[tuple[str, object], ...]], ...] = ()
    paper_looks: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        check_variants(self.variants)
        labels = (*ARMS, *(label for label, _ in self.variants))
        bad = [a for a in self.arms if a not in labels]
        if not self.arms or bad or len(set(self.arms)) < len(self.arms):
            raise field_error("arms", f"must be a non-empty list of distinct arms from {', '.join(labels)}, "
                              f"got {list(self.arms)!r}")
        ok = all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s < 2**63 for s in self.seeds)
        if not ok or len(self.seeds) < MIN_SEEDS or len(set(self.seeds)) < len(self.seeds):
            raise field_error("seeds", f"must be at least {MIN_SEEDS} distinct integers in [0, 2^63), got {list(self.seeds)!r}")
        if 1 not in self.eval.multipliers:
            raise field_error("multipliers", "must include 1: a sweep's ratios and claims compare every length with 1x "
                              f"L_train, got {list(self.eval.multipliers)!r}")
        longest = max(self.eval.multipliers) * self.train.seq_len
        if self.eval.n_tokens < MIN_EVAL_WINDOWS * longest:
            raise ParamError(f"{{n_tokens}} must be >= {MIN_EVAL_WINDOWS} x {{seq_len}} x the largest of {{multipliers}} = "
                             f"{MIN_EVAL_WINDOWS * longest} (>= {MIN_EVAL_WINDOWS} windows per length), got {self.eval.n_tokens}",
                             ("n_tokens", "seq_len", "multipliers"))
        mult = list(self.eval.multipliers)
        if mult[0] != 1 or mult != sorted(mult):
            raise field_error("multipliers", f"a sweep's multipliers must start at 1 and increase (its ratios divide by "
                              f"the 1x perplexity of the same tokens), got {mult}")
        check_analysis(self.analysis_multiplier, self.analysis_windows)
        for name, looks in (("looks", self.plan_looks), ("paper_looks", self.paper_plan_looks)):
            if any(not isinstance(n, int) or isinstance(n, bool) for n in looks) or looks[0] < MIN_SEEDS \
                    or looks[-1] > len(self.seeds) or any(a >= b for a, b in zip(looks, looks[1:])):
                raise field_error(name, f"must be increasing integers in [{MIN_SEEDS}, {len(self.seeds)}] (the number "
                                  f"of seeds), got {list(getattr(self, name))!r}")
        if not (isinstance(self.alpha, float) and 0.0 < self.alpha < 1.0):
            raise field_error("alpha", f"must be a number in (0, 1), got {self.alpha!r}")
        for arm in self.arms:
            self.run_config(arm, self.seeds[0])
        takers = [a for a in self.arms if self.arm_specs[a]["arm"] in FAMILY_ARMS and "family" not in self.arm_specs[a]]
        if self.train.family and not takers:
            raise field_error("family", f"is taken by the arms {', '.join(FAMILY_ARMS)} (without a family of their "
                              f"own) only, and none of the arms {', '.join(self.arms)} is one")

    @property
    def plan_looks(self) -> tuple[int, ...]:
        """The looks in force: ``looks``, or one look at every seed when it is empty."""
        return tuple(self.looks) or (len(self.seeds),)

    @property
    def paper_plan_looks(self) -> tuple[int, ...]:
        """The looks of the paper-form rows: ``paper_looks``, or the pre-registered rows' looks when it is empty."""
        return tuple(self.paper_looks) or self.plan_looks

    @property
    def arm_specs(self) -> dict[str, dict]:
        """{arm label: its overrides}, {"arm": name} for a built-in arm (``stats.claim_definitions``)."""
        variants = {label: dict(over) for label, over in self.variants}
        return {arm: variants.get(arm, {"arm": arm}) for arm in self.arms}

    def run_config(self, arm: str, seed: int) -> TrainConfig:
        """The training config of (arm label, seed): the shared config with the label's overrides.
        ``angle_lr_scale`` applies to the arms with angle tables (``TOKEN_ARMS``) only: every other arm runs at
        scale 1 (so its runs do not depend on it) unless its variant sets it; likewise the shared ``family`` and
        ``family_param`` (``--family``) apply to the family arms (``FAMILY_ARMS``) only."""
        over = self.arm_specs[arm]
        scale = self.train.angle_lr_scale if over["arm"] in TOKEN_ARMS else 1.0
        family = {} if over["arm"] in FAMILY_ARMS else {"family": "", "family_param": ()}
        return replace(self.train, seed=seed, **{"angle_lr_scale": scale, **family, **over})

    def to_dict(self) -> dict:
        return {"train": self.train.to_dict(), "eval": self.eval.to_dict(), "arms": list(self.arms),
                "variants": {label: {k: list(v) if isinstance(v, tuple) else v for k, v in over}
                             for label, over in self.variants},
                "seeds": list(self.seeds), "analysis_multiplier": self.analysis_multiplier,
                "analysis_windows": self.analysis_windows, "looks": list(self.plan_looks), "alpha": self.alpha,
                "paper_looks": list(self.paper_plan_looks)}

    def claims(self) -> list[dict]:
        """The claims this design judges: the pre-registered ones (``stats.claim_definitions``), then the paper-form
        ones (``paper.paper_claims``) of its arms."""
        return stats.claim_definitions(self.arm_specs) + paper.paper_claims(self.arm_specs)

    def verdicts(self, runs: dict) -> list[dict]:
        """The pre-registered rows (``stats.verdicts`` under this sweep's looks and alpha per claim), then the
        paper-form rows (``paper.verdicts`` under ``paper_plan_looks`` and one family-wise alpha)."""
        seeds = list(self.seeds)
        return (stats.verdicts(runs, self.arm_specs, seeds, list(self.plan_looks), self.alpha)
                + paper.verdicts(runs, self.arm_specs, seeds, list(self.paper_plan_looks), self.alpha))

    def needed(self, runs: dict) -> set[tuple[str, int]]:
        """The (arm, seed) runs the sequential rule asks for, given the finished ``runs``: those of the
        pre-registered rows and those of the paper-form rows."""
        rows, seeds = self.verdicts(runs), list(self.seeds)
        pre = [r for r in rows if r.get("form") != "paper"]
        return (stats.needed_runs(pre, self.arm_specs, seeds, list(self.plan_looks))
                | paper.needed_runs([r for r in rows if r.get("form") == "paper"], self.arm_specs, seeds))

    @classmethod
    def from_dict(cls, d: dict) -> "SweepConfig":
        """The inverse of ``to_dict`` (sweep.json's "config"); the analysis sizes default to 4, the looks to one
        look, alpha to 0.05, the variants to none and the paper looks to the looks where absent."""
        variants = tuple((label, variant_items(over)) for label, over in d.get("variants", {}).items())
        return cls(train=TrainConfig.from_dict(d["train"]),
                   eval=EvalConfig(**{**d["eval"], "multipliers": tuple(d["eval"]["multipliers"])}),
                   arms=tuple(d["arms"]), seeds=tuple(d["seeds"]),
                   analysis_multiplier=d.get("analysis_multiplier", 4), analysis_windows=d.get("analysis_windows", 4),
                   looks=tuple(d.get("looks", ())), alpha=d.get("alpha", 0.05), variants=variants,
                   paper_looks=tuple(d.get("paper_looks", ())))


def variant_items(overrides: dict) -> tuple[tuple[str, object], ...]:
    """A variant's overrides as sorted (field, value) pairs (lists made tuples), the form ``SweepConfig`` keeps."""
    if not isinstance(overrides, dict):
        raise field_error("variants", f"each variant must map TrainConfig fields to values, got {overrides!r}")
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in overrides.items()))


def check_variants(variants: tuple) -> None:
    """Each variant: a new label (not a built-in arm's name, not repeated) whose overrides name ``arm`` and only
    ``TrainConfig`` fields other than ``seed``; ``ParamError`` naming variants otherwise."""
    allowed = {f.name for f in fields(TrainConfig)} - {"seed"}
    labels = [label for label, _ in variants]
    for label, over in variants:
        keys = [k for k, _ in over]
        if not isinstance(label, str) or not label.isidentifier() or label in ARMS or labels.count(label) > 1:
            raise field_error("variants", f"a variant needs a new name (letters, digits, _; not an arm's name, "
                              f"given once), got {label!r}")
        if "arm" not in keys or set(keys) - allowed:
            raise field_error("variants", f"{label}: overrides must set arm and only TrainConfig fields but seed "
                              f"({', '.join(sorted(allowed))}), got {keys}")


def check_analysis(multiplier: int, windows: int) -> None:
    """The attention analysis runs ``windows`` validation windows of ``multiplier`` * seq_len tokens:
    multiplier in [2, MAX_MULTIPLIER] (far tokens need a context beyond L_train), windows in [1, 2^16]."""
    check_int("analysis_multiplier", multiplier, 2, MAX_MULTIPLIER)
    check_int("analysis_windows", windows, 1, 2**16)



def design_record(cfg: SweepConfig) -> dict:
    """What design.json holds: the design (``SweepConfig.to_dict``) and the claims it judges, with their rules."""
    return {"design": cfg.to_dict(), "claims": [{k: c[k] for k in ("id", "statement", "rule", "test")}
                                                for c in cfg.claims()]}


def design_difference(saved: dict, wanted: dict, path: str = "") -> str | None:
    """The first field (dotted path, in the designs' own key order) where two designs differ, with both values as
    compact JSON; None when they are equal."""
    if isinstance(saved, dict) and isinstance(wanted, dict):
        for key in [*saved, *(k for k in wanted if k not in saved)]:
            diff = design_difference(saved.get(key), wanted.get(key), f"{path}.{key}" if path else key)
            if diff:
                return diff
        return None
    return None if saved == wanted else f"{path}: {json.dumps(saved)} recorded, {json.dumps(wanted)} asked"


def load_design(out_dir: Path) -> SweepConfig | None:
    """The design recorded in ``out_dir/design.json`` (None when there is none); ``ResultError`` naming the file
    when it is not one."""
    path = Path(out_dir) / DESIGN
    if not path.exists():
        return None
    try:
        return SweepConfig.from_dict(read_json(path)["design"])
    except (ValueError, KeyError, TypeError, ParamError) as err:
        raise ResultError(f"{path} is not a sweep design ({type(err).__name__}: {err}); move it away to start over") \
            from None


def check_design(cfg: SweepConfig, out_dir: Path, redesign: bool = False) -> None:
    """A sweep keeps its design: refuse (``ParamError``, one line naming the first difference) a ``cfg`` that
    differs from the one recorded in ``out_dir/design.json``, unless ``redesign``.  Writes nothing: ``record_design``
    does, once every other check of the sweep has passed (finished runs of other configs are never rewritten:
    ``check_run_folder``)."""
    path = Path(out_dir) / DESIGN
    saved = load_design(out_dir)
    if saved is not None and not redesign:
        diff = design_difference(saved.to_dict(), cfg.to_dict())
        if diff:
            raise ParamError(f"{path} records another design ({diff}); rerun without design options to resume it, "
                             "use a new {out}, or pass {redesign} to record this one", ("out", "redesign"))


def record_design(cfg: SweepConfig, out_dir: Path, redesign: bool = False) -> None:
    """Write ``out_dir/design.json`` when there is none, or (``redesign``) when it records another design; after
    ``check_design`` and the run folders' checks, so that a refused sweep leaves the recorded design as it was."""
    if redesign or load_design(out_dir) is None:
        write_if_changed(Path(out_dir) / DESIGN, json_text(design_record(cfg)))


def missing_runs(cfg: SweepConfig, runs: dict) -> list[list]:
    """[[arm, seed]] the sequential rule asks for (``SweepConfig.needed``) and ``runs`` lacks, seed by seed."""
    need = cfg.needed(runs)
    return [[arm, seed] for seed in cfg.seeds for arm in cfg.arms
            if (arm, seed) in need and str(seed) not in runs.get(arm, {})]
