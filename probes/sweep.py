"""Train and evaluate every arm at several seeds with one design; write the seed-level table and verdicts.

Layout under ``out_dir``: ``design.json`` (the sweep's design, written once: ``SweepConfig`` and the claims it
judges, stated before any run), ``<arm>/seed<k>/`` (checkpoint.pt, model.safetensors, train.json, eval.json) for
every arm label and seed, then ``sweep.json`` and ``sweep.md``.  A finished run (train.json finished with the
same config, eval.json with the same eval config) is reused from those two JSON files alone, without weights, so
a sweep can be finished across sessions (or machines) after committing the JSON of the runs done so far; a
partially trained run resumes from its checkpoint.  A run folder holding finished results of another config is
never overwritten.

A sweep keeps its design: ``check_design`` refuses, with one line naming the first difference, a rerun in a
folder whose design.json records another design; ``redesign`` accepts a new design of the same runs (other
seeds, looks, level, arms), never other run configs for runs already done.

Arms are labels: a built-in arm's name, or a variant's label with its ``TrainConfig`` overrides
(``SweepConfig.variants``: e.g. ``learned_key`` = {"arm": "learned", "learned_token": "key"}).

sweep.json (read by figure 6 and ``accum probe report``): {"config" (``SweepConfig.to_dict``), "seq_len",
"multipliers", "lengths", "data", "runs": {arm: {seed: run summary}}, "arms": {arm: ``stats.arm_statistics``},
"verdicts": ``stats.verdicts``, "complete", "missing": [[arm, seed]], "table_markdown", "hosts", "run_seconds"},
a function of the design and the finished runs' JSON only (rewritten only when it changes).  Runs go through
the one job runner (``accum.simulations.runner.map_outcomes``: in this process, a local pool of ``workers``
processes, or a Dask cluster), batch by batch: each batch is what the sequential rule asks for now.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Callable

import torch

from accum.probes import stats
from accum.probes.analysis import analyse
from accum.probes.data import TokenData, eval_windows, window_count
from accum.probes.evaluate import MAX_MULTIPLIER, EvalConfig, evaluate_lengths
from accum.probes.io import json_text, provenance, read_json, write_atomic, write_json
from accum.probes.model import ARMS, FAMILY_ARMS, TOKEN_ARMS
from accum.probes.train import RESULTS, WEIGHTS, TrainConfig, check_train_split, load_data, load_trained, train
from accum.simulations.params import ParamError, check_int, field_error
from accum.simulations.results import ResultError
from accum.simulations.runner import map_outcomes

EVAL_RESULTS = "eval.json"
DESIGN = "design.json"
MIN_SEEDS = 3
MIN_EVAL_WINDOWS = 2


@dataclass(frozen=True)
class SweepConfig:
    """train: shared training config (its ``arm`` and ``seed`` are replaced per run); arms: arm labels, each a
    built-in arm's name or a label of ``variants``; variants: (label, ((field, value), ...)) pairs, the
    ``TrainConfig`` overrides of each variant (``arm`` among them); seeds: at least ``MIN_SEEDS`` distinct
    training seeds; every length is evaluated on at least ``MIN_EVAL_WINDOWS`` windows (n_tokens >= 2 x seq_len x
    the largest multiplier); analysis windows are ``analysis_windows`` validation windows of
    ``analysis_multiplier`` * seq_len tokens.

    looks: the sequential design's paired-seed counts n_1 < ... < n_K (``stats`` module docstring), each in
    [MIN_SEEDS, len(seeds)]; empty means one look at every seed (the fixed design).  alpha: the error budget
    the looks share (each look's interval has level 1 - alpha / K).  Runs are added only where a look asks
    for them, so the seeds beyond the first look are candidates, run when a claim is still unresolved."""

    train: TrainConfig = TrainConfig()
    eval: EvalConfig = EvalConfig()
    arms: tuple[str, ...] = tuple(arm for arm in ARMS if arm not in FAMILY_ARMS)
    seeds: tuple[int, ...] = (0, 1, 2)
    analysis_multiplier: int = 4
    analysis_windows: int = 4
    looks: tuple[int, ...] = ()
    alpha: float = 0.05
    variants: tuple[tuple[str, tuple[tuple[str, object], ...]], ...] = ()

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
        longest = max(self.eval.multipliers) * self.train.seq_len
        if self.eval.n_tokens < MIN_EVAL_WINDOWS * longest:
            raise ParamError(f"{{n_tokens}} must be >= {MIN_EVAL_WINDOWS} x {{seq_len}} x the largest of {{multipliers}} = "
                             f"{MIN_EVAL_WINDOWS * longest} (>= {MIN_EVAL_WINDOWS} windows per length), got {self.eval.n_tokens}",
                             ("n_tokens", "seq_len", "multipliers"))
        check_analysis(self.analysis_multiplier, self.analysis_windows)
        looks = self.plan_looks
        if any(not isinstance(n, int) or isinstance(n, bool) for n in looks) or looks[0] < MIN_SEEDS \
                or looks[-1] > len(self.seeds) or any(a >= b for a, b in zip(looks, looks[1:])):
            raise field_error("looks", f"must be increasing integers in [{MIN_SEEDS}, {len(self.seeds)}] (the number of "
                              f"seeds), got {list(self.looks)!r}")
        if not (isinstance(self.alpha, float) and 0.0 < self.alpha < 1.0):
            raise field_error("alpha", f"must be a number in (0, 1), got {self.alpha!r}")
        for arm in self.arms:
            self.run_config(arm, self.seeds[0])

    @property
    def plan_looks(self) -> tuple[int, ...]:
        """The looks in force: ``looks``, or one look at every seed when it is empty."""
        return tuple(self.looks) or (len(self.seeds),)

    @property
    def arm_specs(self) -> dict[str, dict]:
        """{arm label: its overrides}, {"arm": name} for a built-in arm (``stats.claim_definitions``)."""
        variants = {label: dict(over) for label, over in self.variants}
        return {arm: variants.get(arm, {"arm": arm}) for arm in self.arms}

    def run_config(self, arm: str, seed: int) -> TrainConfig:
        """The training config of (arm label, seed): the shared config with the label's overrides.
        ``angle_lr_scale`` applies to the arms with angle tables (``TOKEN_ARMS``) only: every other arm runs at
        scale 1 (so its runs do not depend on it) unless its variant sets it."""
        over = self.arm_specs[arm]
        scale = self.train.angle_lr_scale if over["arm"] in TOKEN_ARMS else 1.0
        return replace(self.train, seed=seed, **{"angle_lr_scale": scale, **over})

    def to_dict(self) -> dict:
        return {"train": self.train.to_dict(), "eval": self.eval.to_dict(), "arms": list(self.arms),
                "variants": {label: {k: list(v) if isinstance(v, tuple) else v for k, v in over}
                             for label, over in self.variants},
                "seeds": list(self.seeds), "analysis_multiplier": self.analysis_multiplier,
                "analysis_windows": self.analysis_windows, "looks": list(self.plan_looks), "alpha": self.alpha}

    def claims(self) -> list[dict]:
        """The claims this design judges (``stats.claim_definitions`` of its arms)."""
        return stats.claim_definitions(self.arm_specs)

    def verdicts(self, runs: dict) -> list[dict]:
        """``stats.verdicts`` of ``runs`` under this sweep's arms, seed order and looks."""
        return stats.verdicts(runs, self.arm_specs, list(self.seeds), list(self.plan_looks), self.alpha)

    def needed(self, runs: dict) -> set[tuple[str, int]]:
        """The (arm, seed) runs the sequential rule asks for, given the finished ``runs``."""
        return stats.needed_runs(self.verdicts(runs), self.arm_specs, list(self.seeds), list(self.plan_looks))

    @classmethod
    def from_dict(cls, d: dict) -> "SweepConfig":
        """The inverse of ``to_dict`` (sweep.json's "config"); the analysis sizes default to 4, the looks to one
        look, alpha to 0.05 and the variants to none where absent."""
        variants = tuple((label, variant_items(over)) for label, over in d.get("variants", {}).items())
        return cls(train=TrainConfig.from_dict(d["train"]),
                   eval=EvalConfig(**{**d["eval"], "multipliers": tuple(d["eval"]["multipliers"])}),
                   arms=tuple(d["arms"]), seeds=tuple(d["seeds"]),
                   analysis_multiplier=d.get("analysis_multiplier", 4), analysis_windows=d.get("analysis_windows", 4),
                   looks=tuple(d.get("looks", ())), alpha=d.get("alpha", 0.05), variants=variants)


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


def check_split_sizes(data: TokenData, seq_len: int, eval_cfg: EvalConfig, analysis_multiplier: int,
                      analysis_windows: int) -> None:
    """Refuse, before any training, lengths the data cannot hold; the ``ParamError`` names the parameters.

    Training windows need seq_len + 1 training ids; evaluating m * seq_len needs
    window_count(m * seq_len, n_tokens) * m * seq_len + 1 validation ids for every multiplier m, and the
    analysis analysis_windows * analysis_multiplier * seq_len + 1.
    """
    check_train_split(data, seq_len)
    have = data.val.numel()
    for m in sorted(eval_cfg.multipliers, reverse=True):
        length = m * seq_len
        need = window_count(length, eval_cfg.n_tokens) * length + 1
        if need > have:
            raise ParamError(f"{{multipliers}}: {m} x {{seq_len}} {seq_len} = {length} tokens ({{n_tokens}} "
                             f"{eval_cfg.n_tokens}) needs {need} validation tokens; the validation split has {have} "
                             "(use smaller {multipliers} or {n_tokens}, or a larger {val_fraction})",
                             ("multipliers", "seq_len", "n_tokens", "val_fraction"))
    need = analysis_windows * analysis_multiplier * seq_len + 1
    if need > have:
        raise ParamError(f"{{analysis_windows}} {analysis_windows} x {{analysis_multiplier}} {analysis_multiplier} x "
                         f"{{seq_len}} {seq_len} needs {need} validation tokens; the validation split has {have} "
                         "(use fewer {analysis_windows}, or a larger {val_fraction})",
                         ("analysis_windows", "analysis_multiplier", "seq_len", "val_fraction"))


def _finished(path: Path, key: str, expected: dict, normalise=lambda d: d) -> dict | None:
    """The JSON at ``path`` if it is finished and its ``key`` (passed through ``normalise``) equals ``expected``."""
    if not path.exists():
        return None
    res = read_json(path)
    saved = res.get(key)
    return res if isinstance(saved, dict) and normalise(saved) == expected and res.get("finished", True) else None


def evaluate_run(run_dir: Path, data: TokenData, eval_cfg: EvalConfig, analysis_multiplier: int,
                 analysis_windows: int, device: str, threads: int) -> dict:
    """Perplexity per length and the attention analysis of the finished run in ``run_dir``."""
    torch.set_num_threads(threads)
    model, tcfg = load_trained(run_dir, data.vocab_size, device)
    check_split_sizes(data, tcfg.seq_len, eval_cfg, analysis_multiplier, analysis_windows)
    t0 = time.perf_counter()
    lengths = evaluate_lengths(model, data.val, tcfg.seq_len, eval_cfg, device)
    x, _ = eval_windows(data.val, analysis_multiplier * tcfg.seq_len, analysis_windows * analysis_multiplier * tcfg.seq_len)
    gen = torch.Generator().manual_seed(eval_cfg.seed + 1)
    analysis = analyse(model, x.to(device), tcfg.seq_len, gen)
    return {"train_config": tcfg.to_dict(), "eval_config": eval_cfg.to_dict(),
            "analysis_config": {"multiplier": analysis_multiplier, "windows": analysis_windows},
            "lengths": lengths, "analysis": analysis, "seconds": time.perf_counter() - t0,
            "provenance": provenance(threads, device)}


def run_dir(out_dir: Path, arm: str, seed: int) -> Path:
    return Path(out_dir) / arm / f"seed{seed}"


def run_summary(tres: dict, eres: dict) -> dict:
    """What sweep.json keeps of one (arm, seed) run: per-multiplier perplexities and far mass, throughput, and the
    machine it ran on (``host``: the training's; None if the train and eval records name different machines or
    none)."""
    lengths = eres["lengths"]
    analysis = eres["analysis"]
    heads_far = [f for layer in analysis["layers"] for f in layer["far_mass"]]
    hosts = {tres.get("provenance", {}).get("host"), eres.get("provenance", {}).get("host")}
    return {"host": hosts.pop() if len(hosts) == 1 else None,
            "ppl": [r["ppl"] for r in lengths], "ppl_last_segment": [r["ppl_last_segment"] for r in lengths],
            "far_mass": [r.get("far_mass_mean") for r in lengths], "final_train_loss": tres["final_train_loss"],
            "tokens_seen": tres["tokens_seen"], "train_seconds": tres["timings"]["train_seconds"],
            "tokens_per_second": tres["timings"]["tokens_per_second"],
            "eval_seconds": eres["seconds"], "n_params": tres["n_params"], "angle_spread": tres.get("angle_spread"),
            "analysis": {"length": analysis["length"], "far_mass_heads_mean": sum(heads_far) / len(heads_far),
                         "spearman_far_coherence_vs_far_mass": analysis["spearman_far_coherence_vs_far_mass"]}}


def finished_run(cfg: SweepConfig, out_dir: Path, arm: str, seed: int) -> dict | None:
    """The summary of a finished run of ``cfg`` from its train.json and eval.json (no weights), else None."""
    folder = run_dir(out_dir, arm, seed)
    tcfg = cfg.run_config(arm, seed).to_dict()
    tres = _finished(folder / RESULTS, "config", tcfg, TrainConfig.normalised)
    eres = _finished(folder / EVAL_RESULTS, "train_config", tcfg, TrainConfig.normalised)
    if tres is None or eres is None or eres.get("eval_config") != cfg.eval.to_dict():
        return None
    return run_summary(tres, eres)


def _fmt(x: float | None, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _ci(ci: list[float] | None, digits: int = 2) -> str:
    return "n/a" if ci is None else f"[{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


def markdown_table(seq_len: int, multipliers: list[int], arms: dict, verdict_rows: list[dict], hosts: list[str]) -> str:
    """Perplexity mean +- sd over seeds per length; the longest length with its 95% interval, ratios to 1x
    (all positions and last L_train segment) and far mass; the ratios at 64x and beyond beside the paper's one
    number; then the verdicts and what the machines the runs ran on (``hosts``) mean for them."""
    m = multipliers[-1]
    head = "| arm | seeds | " + " | ".join(f"{k}x ({k * seq_len})" for k in multipliers) + " |"
    lines = [f"Perplexity over all positions, mean +- sd over seeds (L_train = {seq_len} tokens):", "", head,
             "|---|---:|" + "---:|" * len(multipliers)]
    for arm, st in arms.items():
        if not st["n_seeds"]:
            continue
        cells = [f"{_fmt(mu)} +- {_fmt(sd)}" for mu, sd in zip(st["ppl"]["mean"], st["ppl"]["sd"])]
        lines.append(f"| {arm} | {st['n_seeds']} | " + " | ".join(cells) + " |")
    lines += ["", f"At {m}x: means with 95% t intervals over seeds; ratio = ppl({m}x) / ppl(1x); far mass = attention "
              f"on keys >= {seq_len} back (mean over layers and heads):", "",
              f"| arm | ppl {m}x | ratio | last-segment ppl {m}x | last-segment ratio | far mass 2x | far mass {m}x | train tokens/s |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for arm, st in arms.items():
        if not st["n_seeds"]:
            continue
        cell = lambda key, i=-1: f"{_fmt(st[key]['mean'][i])} {_ci(st[key]['ci95'][i])}"
        far2 = cell("far_mass", 1) if len(multipliers) > 1 else "n/a"
        lines.append(f"| {arm} | {cell('ppl')} | {cell('ratio')} | {cell('ppl_last_segment')} | "
                     f"{cell('ratio_last_segment')} | {far2} | {cell('far_mass')} | {st['tokens_per_second']['mean']:.0f} |")
    lines += ratio_table(multipliers, arms)
    spreads = {arm: st["angle_spread"] for arm, st in arms.items() if st.get("angle_spread")}
    if spreads:
        lines += ["", "Learned angle spread per plane b = 0, 1, ... (radians: sd over token ids of pi tanh E[v]_b, "
                  "mean over layers, heads and seeds; 0 at init):", ""]
        lines += [f"- {arm}: " + ", ".join(f"{v:.3f}" for v in spread) for arm, spread in spreads.items()]
    looks = next((r["looks"] for r in verdict_rows if "looks" in r), [])
    level = next((r["level"] for r in verdict_rows if "level" in r), 0.95)
    lines += ["", f"Verdicts (t interval of level {100 * level:.4g}% over paired seeds of d, judged at "
              f"{len(looks)} look(s) of {', '.join(map(str, looks))} seeds; rule in each row):", "",
              "| claim | metric | rule | seeds | d mean | interval | stopped | verdict |",
              "|---|---|---|---:|---:|---:|---|---|"]
    fragile = [f"{r['claim']} ({r['metric']})" for r in verdict_rows if r.get("host_robust") is False]
    for r in verdict_rows:
        if "seeds" in r:
            lines.append(f"| {r['claim']} | {r['metric']} | {r['rule']} | {len(r['seeds'])} | {_fmt(r['mean'], 3)} | "
                         f"{_ci(r['ci'], 3)} | {stopped_text(r)} | {r['verdict']} |")
        else:
            lines.append(f"| **{r['claim']}** | {r['metric']} | {r['rule']} | | | | | **{r['verdict']}** |")
    lines += ["", host_note(hosts, fragile)]
    return "\n".join(lines) + "\n"


#: the paper's one quoted number (its digest): random accumulated QKV rotations' perplexity rises 1.59x at 65,536
#: tokens, 128x its training length of 512 (other data and scale than these probes)
PAPER_RATIO = {"multiplier": 128, "ratio": 1.59, "arm": "random_qkv"}


def ratio_table(multipliers: list[int], arms: dict) -> list[str]:
    """Lines of a table of ppl(m)/ppl(1x) (mean and 95% interval over seeds) at every m >= 64, beside the paper's
    1.59x for random QKV at 128x (``PAPER_RATIO``)."""
    cols = [i for i, m in enumerate(multipliers) if m >= 64]
    if not cols:
        return []
    p = PAPER_RATIO
    lines = ["", f"ppl(m x) / ppl(1x), mean and 95% interval over seeds; the paper reports {p['ratio']}x for "
             f"random QKV rotations at {p['multiplier']}x its training length (other data, model and scale):", "",
             "| arm | " + " | ".join(f"{multipliers[i]}x" for i in cols) + " |", "|---|" + "---:|" * len(cols)]
    for arm, st in arms.items():
        if st["n_seeds"]:
            lines.append(f"| {arm} | " + " | ".join(f"{_fmt(st['ratio']['mean'][i])} {_ci(st['ratio']['ci95'][i])}"
                                                   for i in cols) + " |")
    return lines


def host_note(hosts: list[str], fragile: list[str]) -> str:
    """What the machines the runs ran on mean for the verdicts (``stats.host_robust``)."""
    if len(hosts) == 1 and hosts != ["?"]:
        return (f"Every run ran on one machine ({hosts[0]}, from the runs' own records): no cross-machine shift is "
                "in these verdicts.")
    tol = ", ".join(f"{100 * (math.exp(v) - 1):.1f}% ({k})" for k, v in stats.HOST_LOG_TOLERANCE.items())
    if not fragile:
        return (f"The runs come from {len(hosts)} machines ({', '.join(hosts)}); every CONFIRMED or CONTRADICTED verdict "
                f"above whose runs span machines is unchanged if every run's perplexity moves by up to {tol} "
                "(stats.host_shift).")
    return (f"The runs come from {len(hosts)} machines ({', '.join(hosts)}); these verdicts could change if every run's "
            f"perplexity moved by up to {tol} (stats.host_shift): " + ", ".join(fragile) + ".")


def stopped_text(row: dict) -> str:
    """Where the sequential rule stands for one verdict row: resolved at a look, waiting for one, or at the
    cap with the effects its interval rules out (d below its low end or above its high end)."""
    if row["stopped"] == "resolved":
        return f"resolved at {row['look']} seeds"
    if row["stopped"] == "pending":
        return f"waits for {row['look']} seeds"
    lo, hi = row["ci"] if row["ci"] is not None else (None, None)
    if lo is None:
        return f"cap {row['look']} seeds"
    return f"cap {row['look']} seeds: rules out d < {lo:.3f} and d > {hi:.3f}"


def check_run_folder(cfg: SweepConfig, out_dir: Path, arm: str, seed: int) -> None:
    """Refuse (``ParamError`` naming the folder) to run (arm, seed) over finished results of another config:
    a committed run is never rewritten (use another --out)."""
    folder = run_dir(out_dir, arm, seed)
    tcfg = cfg.run_config(arm, seed).to_dict()
    for name, key, want in ((RESULTS, "config", tcfg), (EVAL_RESULTS, "eval_config", cfg.eval.to_dict())):
        path = folder / name
        if not path.exists():
            continue
        res = read_json(path)
        saved = res.get(key)
        saved = TrainConfig.normalised(saved) if key == "config" and isinstance(saved, dict) else saved
        if res.get("finished", True) and saved != want:
            raise ParamError(f"{path} holds a finished run of another {key.replace('_', ' ')}; a sweep never "
                             "rewrites a finished run: use another {out} (or move that folder away)", ("out",))


@dataclass(frozen=True)
class RunJob:
    """One (arm, seed) run of a sweep, as the job runner ships it to a worker (plain data, picklable)."""

    config: dict
    arm: str
    seed: int
    out_dir: str
    cache_dir: str | None
    device: str
    threads: int


def run_job(job: RunJob) -> str:
    """Train (or resume) and evaluate one run unless it is finished; returns its folder.  A run whose train.json
    is finished but whose weights are gone (they are not committed) and that has no matching eval.json is
    trained again (from its checkpoint if there is one): same seed, same run.  Module level: the job runner
    pickles it for its pool and Dask workers."""
    cfg = SweepConfig.from_dict(job.config)
    out_dir = Path(job.out_dir)
    folder = run_dir(out_dir, job.arm, job.seed)
    if finished_run(cfg, out_dir, job.arm, job.seed) is not None:
        return str(folder)
    check_run_folder(cfg, out_dir, job.arm, job.seed)
    torch.set_num_threads(job.threads)
    tcfg = cfg.run_config(job.arm, job.seed)
    data, data_meta = load_data(tcfg, None if job.cache_dir is None else Path(job.cache_dir))
    tres = _finished(folder / RESULTS, "config", tcfg.to_dict(), TrainConfig.normalised)
    if tres is None or not tres["finished"] or not (folder / WEIGHTS).exists():
        train(tcfg, folder, data=data, data_meta=data_meta, device=job.device, threads=job.threads, progress=False)
    eres = evaluate_run(folder, data, cfg.eval, cfg.analysis_multiplier, cfg.analysis_windows, job.device, job.threads)
    write_json(folder / EVAL_RESULTS, eres)
    return str(folder)


def finished_runs(cfg: SweepConfig, out_dir: Path) -> dict:
    """{arm: {seed (str): run summary}} of every finished run of ``cfg`` under ``out_dir`` (JSON files only)."""
    runs: dict = {arm: {} for arm in cfg.arms}
    for seed in cfg.seeds:
        for arm in cfg.arms:
            got = finished_run(cfg, out_dir, arm, seed)
            if got is not None:
                runs[arm][str(seed)] = got
    return runs


def missing_runs(cfg: SweepConfig, runs: dict) -> list[list]:
    """[[arm, seed]] the sequential rule asks for (``SweepConfig.needed``) and ``runs`` lacks, seed by seed."""
    need = cfg.needed(runs)
    return [[arm, seed] for seed in cfg.seeds for arm in cfg.arms
            if (arm, seed) in need and str(seed) not in runs.get(arm, {})]


def summarise(cfg: SweepConfig, out_dir: Path, data_meta: dict) -> dict:
    """sweep.json and sweep.md from every finished run of ``cfg`` under ``out_dir`` (JSON files only), written
    only when they change; "missing" lists the runs the sequential rule still asks for, "complete" says there are
    none.  Nothing in it depends on when or where the summary is made: the same runs give the same file."""
    runs = finished_runs(cfg, out_dir)
    missing = missing_runs(cfg, runs)
    mult = list(cfg.eval.multipliers)
    seq_len = cfg.train.seq_len
    arms = {arm: stats.arm_statistics(r) for arm, r in runs.items()}
    rows = cfg.verdicts(runs)
    done = [r for a in runs.values() for r in a.values()]
    hosts = sorted({r.get("host") or "?" for r in done})
    table = markdown_table(seq_len, mult, arms, rows, hosts)
    result = {"config": cfg.to_dict(), "seq_len": seq_len, "multipliers": mult, "lengths": [k * seq_len for k in mult],
              "data": data_meta, "runs": runs, "arms": arms, "verdicts": rows, "complete": not missing,
              "missing": missing, "table_markdown": table, "hosts": hosts,
              "run_seconds": sum(r["train_seconds"] + r["eval_seconds"] for r in done)}
    write_if_changed(Path(out_dir) / "sweep.json", json_text(result))
    write_if_changed(Path(out_dir) / "sweep.md", table)
    return result


def write_if_changed(path: Path, text: str) -> None:
    """``text`` into ``path`` atomically, unless the file already holds exactly that."""
    if not (path.is_file() and path.read_text() == text):
        write_atomic(path, text.encode())


def check_summary(sweep: dict, cfg: SweepConfig) -> None:
    """Refuse a sweep.json (read back, perhaps edited by hand) whose numbers do not fit its config ``cfg``:
    ``ResultError`` naming the field (``runs.rope.0.ppl[3]``).  Checked: ``seq_len`` and ``multipliers`` as in
    the config; ``runs`` keyed by the config's arms and seeds, each run summary with ``ppl`` and
    ``ppl_last_segment`` (one finite number > 0 per multiplier), ``far_mass`` (one number in [0, 1] or null
    per multiplier), ``tokens_per_second`` (finite, > 0) and ``angle_spread`` (null or finite numbers, one
    length per arm); ``missing`` exactly the [arm, seed] pairs of the config that ``runs`` lacks."""
    if sweep.get("seq_len") != cfg.train.seq_len:
        raise ResultError(f"seq_len must be config.train.seq_len = {cfg.train.seq_len}, got {sweep.get('seq_len')!r}")
    if sweep.get("multipliers") != list(cfg.eval.multipliers):
        raise ResultError(f"multipliers must be config.eval.multipliers = {list(cfg.eval.multipliers)}, "
                          f"got {sweep.get('multipliers')!r}")
    runs = _keyed(sweep["runs"], "runs", list(cfg.arms))
    for arm, arm_runs in runs.items():
        for seed, run in _keyed(arm_runs, f"runs.{arm}", [str(s) for s in cfg.seeds]).items():
            _check_run(run, f"runs.{arm}.{seed}", len(cfg.eval.multipliers))
        if len({len(r["angle_spread"]) for r in arm_runs.values() if r.get("angle_spread") is not None}) > 1:
            raise ResultError(f"runs.{arm}: angle_spread has different lengths across seeds")
    want = missing_runs(cfg, runs)
    missing = sweep["missing"]
    if not isinstance(missing, list) or len(missing) != len(want) or any(w not in missing for w in want):
        raise ResultError(f"missing must list the {len(want)} [arm, seed] pairs the config's sequential rule asks for "
                          f"and runs lacks, got {str(missing)[:80]}")


def _keyed(value: object, field: str, allowed: list[str]) -> dict:
    """``value`` as a dict whose keys are among ``allowed``; ``ResultError`` naming ``field`` otherwise."""
    if not isinstance(value, dict) or any(key not in allowed for key in value):
        raise ResultError(f"{field} must be an object keyed by some of {', '.join(allowed)}, got {str(value)[:80]}")
    return value


def _check_run(run: object, field: str, n_mult: int) -> None:
    """One run summary of sweep.json (see ``check_summary``); ``ResultError`` naming the field at fault."""
    if not isinstance(run, dict):
        raise ResultError(f"{field} must be a run summary (an object), got {str(run)[:80]}")
    for key in stats.METRICS:
        _check_numbers(run.get(key), f"{field}.{key}", n_mult, "a finite number > 0", lambda x: x > 0)
    _check_numbers(run.get("far_mass"), f"{field}.far_mass", n_mult, "null or a number in [0, 1]",
                   lambda x: 0 <= x <= 1, nullable=True)
    _check_numbers([run.get("tokens_per_second")], f"{field}.tokens_per_second", 1, "a finite number > 0",
                   lambda x: x > 0)
    spread = run.get("angle_spread")
    if spread is not None:
        _check_numbers(spread, f"{field}.angle_spread", None, "a finite number", lambda x: True)


def _check_numbers(values: object, field: str, length: int | None, allowed: str, ok, nullable: bool = False) -> None:
    """``values`` is a list of ``length`` (None: any number but 0 of) finite numbers for which ``ok`` holds (or
    nulls, if ``nullable``); ``ResultError`` naming ``field`` and ``allowed`` otherwise."""
    def fits(x: object) -> bool:
        if x is None:
            return nullable
        return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and ok(x)

    if not isinstance(values, list) or not values or len(values) != (length or len(values)):
        raise ResultError(f"{field} must be a list of {length or 'one or more'} entries, each {allowed}, "
                          f"got {str(values)[:80]}")
    bad = next((i for i, x in enumerate(values) if not fits(x)), None)
    if bad is not None:
        raise ResultError(f"{field}[{bad}] must be {allowed}, got {values[bad]!r}")


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
    """A sweep keeps its design: write ``out_dir/design.json`` when there is none; refuse (``ParamError``, one line
    naming the first difference) a ``cfg`` that differs from the recorded one, unless ``redesign``, which records
    ``cfg`` instead (finished runs of other configs are still never rewritten: ``check_run_folder``)."""
    path = Path(out_dir) / DESIGN
    saved = load_design(out_dir)
    if saved is not None and not redesign:
        diff = design_difference(saved.to_dict(), cfg.to_dict())
        if diff:
            raise ParamError(f"{path} records another design ({diff}); rerun without design options to resume it, "
                             "use a new {out}, or pass {redesign} to record this one", ("out", "redesign"))
    if saved is None or redesign:
        write_if_changed(path, json_text(design_record(cfg)))


def run_sweep(cfg: SweepConfig, out_dir: Path, *, cache_dir: Path | None = None, device: str = "cpu",
              threads: int = 1, workers: int = 1, client=None, redesign: bool = False,
              on_run: Callable[[str, object], None] = lambda item, outcome: None) -> dict:
    """Train, evaluate and analyse the runs the sequential rule asks for (``missing_runs``; every arm at every
    seed for the fixed design) under ``out_dir`` until it asks for none; returns the sweep.json dict.

    The design is checked against (or recorded in) design.json first (``check_design``).  Each batch -- the runs
    missing now, seed by seed -- goes through the job runner (``map_outcomes``: this process, ``workers`` local
    processes of ``threads`` threads each, or the Dask ``client``); the summary is rewritten after every run, and
    the next batch is what the rule asks for then.  ``on_run(label, outcome)`` hears of each finished run (its
    folder, or the exception it raised); a run that failed stops the sweep after its batch (``RuntimeError``)."""
    out_dir = Path(out_dir)
    data, data_meta = load_data(cfg.train, cache_dir)
    check_split_sizes(data, cfg.train.seq_len, cfg.eval, cfg.analysis_multiplier, cfg.analysis_windows)
    check_design(cfg, out_dir, redesign)
    for arm in cfg.arms:
        for seed in cfg.seeds:
            check_run_folder(cfg, out_dir, arm, seed)
    result = summarise(cfg, out_dir, data_meta)
    while result["missing"]:
        jobs = [RunJob(cfg.to_dict(), arm, seed, str(out_dir), None if cache_dir is None else str(cache_dir), device,
                       threads) for arm, seed in result["missing"]]
        failed = []
        for job, outcome in map_outcomes(run_job, jobs, workers, client):
            on_run(f"{job.arm}/seed{job.seed}", outcome)
            if isinstance(outcome, BaseException):
                failed.append(f"{job.arm}/seed{job.seed}: {type(outcome).__name__}: {outcome}")
            result = summarise(cfg, out_dir, data_meta)
        if failed:
            raise RuntimeError(f"{len(failed)} run(s) failed (the others are saved; rerun to retry): {failed[0]}")
    return result
