"""Train and evaluate every arm at several seeds with one design; write the seed-level table and verdicts.

Layout under ``out_dir``: ``design.json`` (the sweep's design, written once: ``SweepConfig`` and the claims it
judges, stated before any run), ``<arm>/seed<k>/`` (checkpoint.pt, model.safetensors, train.json, eval.json) for
every arm label and seed, then ``sweep.json`` and ``sweep.md``.  A finished run (train.json finished with the
same config, eval.json with the same eval config) is reused from those two JSON files alone, without weights, so
a sweep can be finished across sessions (or machines) after committing the JSON of the runs done so far; a
partially trained run resumes from its checkpoint.  A run folder holding finished results of another config is
never overwritten.

A sweep keeps its design (``probes.sweepconfig.check_design``); arms are labels, built-in arms or variants
(``probes.sweepconfig``).

sweep.json (read by figure 6 and ``accum probe report``): {"config" (``SweepConfig.to_dict``), "seq_len",
"multipliers", "lengths", "data", "runs": {arm: {seed: run summary}}, "arms": {arm: ``stats.arm_statistics``},
"verdicts": ``stats.verdicts``, "complete", "missing": [[arm, seed]], "table_markdown", "hosts", "run_seconds"},
a function of the design and the finished runs' JSON only (rewritten only when it changes).  Runs go through
the one job runner (``accum.simulations.runner.map_outcomes``: in this process, a local pool of ``workers``
processes, or a Dask cluster), batch by batch: each batch is what the sequential rule asks for now.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from accum.probes import paper, stats
from accum.probes.analysis import analyse
from accum.probes.data import TokenData, eval_windows, window_count
from accum.probes.evaluate import EvalConfig, evaluate_lengths, last_segment_reference
from accum.probes.io import json_text, provenance, read_json, write_if_changed, write_json
from accum.probes.sweepconfig import SweepConfig, check_design, missing_runs, record_design
from accum.probes.sweeptable import markdown_table
from accum.probes.train import (CHECKPOINT, RESULTS, WEIGHTS, TrainConfig, check_train_split, load_data, load_trained,
                                resume_state, train)
from accum.simulations.params import ParamError
from accum.simulations.runner import map_outcomes

EVAL_RESULTS = "eval.json"


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


def evaluation_key(eval_cfg: EvalConfig, analysis_multiplier: int, analysis_windows: int) -> dict:
    """What a run's eval.json was computed with besides its training config: the evaluation config and the attention
    analysis' sizes, {"eval_config", "analysis_config"}; a stored evaluation is reused only under the same key."""
    return {"eval_config": eval_cfg.to_dict(),
            "analysis_config": {"multiplier": analysis_multiplier, "windows": analysis_windows}}


def sweep_evaluation_key(cfg: SweepConfig) -> dict:
    """``evaluation_key`` of the sweep's evaluation config and analysis sizes."""
    return evaluation_key(cfg.eval, cfg.analysis_multiplier, cfg.analysis_windows)


def evaluate_run(run_dir: Path, data: TokenData, eval_cfg: EvalConfig, analysis_multiplier: int,
                 analysis_windows: int, device: str, threads: int) -> dict:
    """Perplexity per length and the attention analysis of the finished run in ``run_dir``; the lengths draw their
    noise from a generator seeded ``eval_cfg.seed``, the analysis from one seeded ``eval_cfg.seed + 1`` (apart)."""
    torch.set_num_threads(threads)
    model, tcfg = load_trained(run_dir, data.vocab_size, device)
    check_split_sizes(data, tcfg.seq_len, eval_cfg, analysis_multiplier, analysis_windows)
    t0 = time.perf_counter()
    lengths = evaluate_lengths(model, data.val, tcfg.seq_len, eval_cfg, device)
    x, _ = eval_windows(data.val, analysis_multiplier * tcfg.seq_len, analysis_windows * analysis_multiplier * tcfg.seq_len)
    gen = torch.Generator().manual_seed(eval_cfg.seed + 1)
    analysis = analyse(model, x.to(device), tcfg.seq_len, gen)
    return {"train_config": tcfg.to_dict(), **evaluation_key(eval_cfg, analysis_multiplier, analysis_windows),
            "lengths": lengths, "analysis": analysis, "seconds": time.perf_counter() - t0,
            "provenance": provenance(threads, device)}


def run_dir(out_dir: Path, arm: str, seed: int) -> Path:
    return Path(out_dir) / arm / f"seed{seed}"


def run_summary(tres: dict, eres: dict) -> dict:
    """What sweep.json keeps of one (arm, seed) run: per-multiplier perplexities and far mass, the text blocks of
    the longest length (``paper.text_blocks``, from its segments and the 1x windows), throughput, and the machine it
    was trained on (``host`` of train.json's provenance; None where it does not say): a rerun on another machine
    differs by its training, its evaluation only by roundoff."""
    lengths = eres["lengths"]
    longest = lengths[-1]
    analysis = eres["analysis"]
    heads_far = [f for layer in analysis["layers"] for f in layer["far_mass"]]
    return {"host": tres.get("provenance", {}).get("host"),
            "ppl": [r["ppl"] for r in lengths], "ppl_last_segment": [r["ppl_last_segment"] for r in lengths],
            "ppl_last_segment_1x": last_segment_reference(lengths),
            "far_mass": [r.get("far_mass_mean") for r in lengths], "final_train_loss": tres["final_train_loss"],
            "text_blocks": paper.text_blocks(longest["segment_nll"], lengths[0]["window_nll"], longest["windows"]),
            "tokens_seen": tres["tokens_seen"], "train_seconds": tres["timings"]["train_seconds"],
            "tokens_per_second": tres["timings"]["tokens_per_second"],
            "eval_seconds": eres["seconds"], "n_params": tres["n_params"], "angle_spread": tres.get("angle_spread"),
            "analysis": {"length": analysis["length"], "far_mass_heads_mean": sum(heads_far) / len(heads_far),
                         "spearman_far_coherence_vs_far_mass": analysis["spearman_far_coherence_vs_far_mass"]}}


def finished_run(cfg: SweepConfig, out_dir: Path, arm: str, seed: int) -> dict | None:
    """The summary of a finished run of ``cfg`` from its train.json and eval.json (no weights), else None: reused
    only when both hold the run's training config and eval.json its ``sweep_evaluation_key`` (evaluation config and
    analysis sizes)."""
    folder = run_dir(out_dir, arm, seed)
    tcfg = cfg.run_config(arm, seed).to_dict()
    tres = _finished(folder / RESULTS, "config", tcfg, TrainConfig.normalised)
    eres = _finished(folder / EVAL_RESULTS, "train_config", tcfg, TrainConfig.normalised)
    key = sweep_evaluation_key(cfg)
    if tres is None or eres is None or any(eres.get(k) != v for k, v in key.items()):
        return None
    return run_summary(tres, eres)


def check_run_folder(cfg: SweepConfig, out_dir: Path, arm: str, seed: int) -> None:
    """Refuse (``ParamError`` naming the folder) to run (arm, seed) over finished results of another config, or
    over a finished training kept without its weights and without its evaluation (evaluating it would mean training
    it again, rewriting its train.json): a committed run is never rewritten (use another --out).  A checkpoint an
    unfinished run would resume from must be readable and of this config (``resume_state``: ``ResultError``)."""
    folder = run_dir(out_dir, arm, seed)
    tcfg = cfg.run_config(arm, seed).to_dict()
    if finished_run(cfg, out_dir, arm, seed) is not None:
        return
    evaluated = sweep_evaluation_key(cfg)
    for name, key, want in ((RESULTS, "config", tcfg), *((EVAL_RESULTS, k, v) for k, v in evaluated.items())):
        path = folder / name
        if not path.exists():
            continue
        res = read_json(path)
        saved = res.get(key)
        saved = TrainConfig.normalised(saved) if key == "config" and isinstance(saved, dict) else saved
        if res.get("finished", True) and saved != want:
            raise ParamError(f"{path} holds a finished run of another {key.replace('_', ' ')}; a sweep never "
                             "rewrites a finished run: use another {out} (or move that folder away)", ("out",))
    resume_state(folder / CHECKPOINT, cfg.run_config(arm, seed))  # a damaged one, or of another config: ResultError
    if _finished(folder / RESULTS, "config", tcfg, TrainConfig.normalised) is not None and not (folder / WEIGHTS).exists():
        raise ParamError(f"{folder} holds a finished training without its weights ({WEIGHTS}) or its evaluation: "
                         "evaluating it would mean training it again, and a sweep never rewrites a finished run; move "
                         f"its {RESULTS} away to train it afresh, or use another {{out}}", ("out",))


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
    """Train (or resume) and evaluate one run unless it is finished; returns its folder.  A finished training (with
    its weights: ``check_run_folder`` refuses one without) is evaluated without training again.  Module level: the
    job runner pickles it for its pool and Dask workers."""
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
    if tres is None:
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


def run_sweep(cfg: SweepConfig, out_dir: Path, *, cache_dir: Path | None = None, device: str = "cpu",
              threads: int = 1, workers: int = 1, client=None, redesign: bool = False,
              on_run: Callable[[str, object], None] = lambda item, outcome: None) -> dict:
    """Train, evaluate and analyse the runs the sequential rule asks for (``missing_runs``; every arm at every
    seed for the fixed design) under ``out_dir`` until it asks for none; returns the sweep.json dict.

    The design is checked against design.json and every run folder against the design before anything is written
    (``check_design``, ``check_run_folder``), then recorded (``record_design``).  Each batch -- the runs
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
    record_design(cfg, out_dir, redesign)  # every check passed: the first write
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
