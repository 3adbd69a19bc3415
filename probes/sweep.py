"""Train and evaluate every arm with one config; write one table (JSON + markdown).

Layout under ``out_dir``: ``<arm>/`` (checkpoint.pt, model.safetensors, train.json, eval.json) for each
arm, then ``sweep.json`` and ``sweep.md``.  A finished arm (train.json finished with the same config,
eval.json with the same eval config) is reused, so an interrupted sweep restarted with the same
arguments loses nothing and redoes nothing; a partially trained arm resumes from its checkpoint.

sweep.json (read by figure 6): {"config": {"train", "eval", "arms", "analysis_multiplier"},
"seq_len", "multipliers", "lengths", "arms": {arm: {"ppl": [per length], "ppl_last_segment": [...],
"train": {tokens_seen, seconds, final_train_loss, n_params}, "eval": [evaluate_length dicts],
"analysis": analyse dict}}, "complete" (false while arms are missing), "table_markdown",
"provenance", "timings": {"this_invocation_seconds", "arms_seconds" (train + eval of every arm, over all
resumed invocations)}}; rewritten after every arm.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from accum.probes.analysis import analyse
from accum.probes.data import CharData, eval_windows, window_count
from accum.probes.evaluate import MAX_MULTIPLIER, EvalConfig, evaluate_lengths
from accum.probes.io import provenance, read_json, write_atomic, write_json
from accum.probes.model import ARMS, check_int
from accum.probes.train import RESULTS, TrainConfig, check_train_split, load_data, load_trained, train

EVAL_RESULTS = "eval.json"


@dataclass(frozen=True)
class SweepConfig:
    """train: shared training config (its ``arm`` is replaced per arm); analysis windows are
    ``analysis_windows`` validation windows of ``analysis_multiplier`` * seq_len tokens."""

    train: TrainConfig = TrainConfig()
    eval: EvalConfig = EvalConfig()
    arms: tuple[str, ...] = ARMS
    analysis_multiplier: int = 4
    analysis_windows: int = 4

    def __post_init__(self) -> None:
        bad = [a for a in self.arms if a not in ARMS]
        if not self.arms or bad or len(set(self.arms)) < len(self.arms):
            raise ValueError(f"arms must be a non-empty list of distinct arms from {', '.join(ARMS)}, "
                             f"got {list(self.arms)!r}")
        check_analysis(self.analysis_multiplier, self.analysis_windows)

    def to_dict(self) -> dict:
        return {"train": self.train.to_dict(), "eval": self.eval.to_dict(), "arms": list(self.arms),
                "analysis_multiplier": self.analysis_multiplier, "analysis_windows": self.analysis_windows}


def check_analysis(multiplier: int, windows: int) -> None:
    """The attention analysis runs ``windows`` validation windows of ``multiplier`` * seq_len tokens:
    multiplier in [2, MAX_MULTIPLIER] (far tokens need a context beyond L_train), windows in [1, 2^16]."""
    check_int("analysis_multiplier", multiplier, 2, MAX_MULTIPLIER)
    check_int("analysis_windows", windows, 1, 2**16)


def check_split_sizes(data: CharData, seq_len: int, eval_cfg: EvalConfig, analysis_multiplier: int,
                      analysis_windows: int) -> None:
    """Refuse, before any training, lengths the data cannot hold; the ``ValueError`` names the parameters.

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
            raise ValueError(f"multipliers: {m} x seq_len {seq_len} = {length} tokens (n_tokens {eval_cfg.n_tokens}) "
                             f"needs {need} validation tokens; the validation split has {have} "
                             "(use smaller multipliers or n_tokens, or a larger val_fraction)")
    need = analysis_windows * analysis_multiplier * seq_len + 1
    if need > have:
        raise ValueError(f"analysis_windows {analysis_windows} x analysis_multiplier {analysis_multiplier} x "
                         f"seq_len {seq_len} needs {need} validation tokens; the validation split has {have} "
                         "(use fewer analysis_windows, or a larger val_fraction)")


def _finished(path: Path, key: str, expected: dict) -> dict | None:
    if not path.exists():
        return None
    res = read_json(path)
    return res if res.get(key) == expected and res.get("finished", True) else None


def evaluate_run(run_dir: Path, data: CharData, eval_cfg: EvalConfig, analysis_multiplier: int,
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


def markdown_table(seq_len: int, multipliers: list[int], arms: dict) -> str:
    """Perplexity (all positions of each window) per arm and evaluation length."""
    head = "| arm | " + " | ".join(f"{m}x ({m * seq_len})" for m in multipliers) + " | train s |"
    sep = "|---|" + "---:|" * (len(multipliers) + 1)
    rows = [f"| {arm} | " + " | ".join(f"{p:.2f}" for p in r["ppl"]) + f" | {r['train']['seconds']:.0f} |"
            for arm, r in arms.items()]
    return "\n".join([head, sep, *rows]) + "\n"


def _sweep_arm(cfg: SweepConfig, arm: str, run_dir: Path, data: CharData, data_meta: dict, device: str,
               threads: int, progress: bool) -> dict:
    """Train (or reuse / resume) and evaluate (or reuse) one arm; its summary for sweep.json."""
    tcfg = replace(cfg.train, arm=arm)
    tres = _finished(run_dir / RESULTS, "config", tcfg.to_dict())
    if tres is None or not tres["finished"]:
        tres = train(tcfg, run_dir, data=data, data_meta=data_meta, device=device, threads=threads, progress=progress)
    eres = _finished(run_dir / EVAL_RESULTS, "eval_config", cfg.eval.to_dict())
    if eres is None or eres["train_config"] != tcfg.to_dict():
        eres = evaluate_run(run_dir, data, cfg.eval, cfg.analysis_multiplier, cfg.analysis_windows, device, threads)
        write_json(run_dir / EVAL_RESULTS, eres)
    return {"ppl": [r["ppl"] for r in eres["lengths"]],
            "ppl_last_segment": [r["ppl_last_segment"] for r in eres["lengths"]],
            "train": {"tokens_seen": tres["tokens_seen"], "seconds": tres["timings"]["train_seconds"],
                      "final_train_loss": tres["final_train_loss"], "n_params": tres["n_params"]},
            "eval": eres["lengths"], "analysis": eres["analysis"], "eval_seconds": eres["seconds"]}


def _write_summary(cfg: SweepConfig, out_dir: Path, arms: dict, data_meta: dict, threads: int, device: str,
                   seconds: float) -> dict:
    """sweep.json and sweep.md for the arms done so far ("complete" once every arm of cfg is in)."""
    mult = list(cfg.eval.multipliers)
    seq_len = cfg.train.seq_len
    table = markdown_table(seq_len, mult, arms)
    result = {"config": cfg.to_dict(), "seq_len": seq_len, "multipliers": mult, "lengths": [m * seq_len for m in mult],
              "data": data_meta, "arms": arms, "complete": list(arms) == list(cfg.arms), "table_markdown": table,
              "provenance": provenance(threads, device),
              "timings": {"this_invocation_seconds": seconds,
                          "arms_seconds": sum(a["train"]["seconds"] + a["eval_seconds"] for a in arms.values())}}
    write_json(out_dir / "sweep.json", result)
    write_atomic(out_dir / "sweep.md", table.encode())
    return result


def run_sweep(cfg: SweepConfig, out_dir: Path, *, cache_dir: Path | None = None, device: str = "cpu",
              threads: int = 2, progress: bool = True) -> dict:
    """Train, evaluate and analyse every arm of ``cfg`` under ``out_dir``; returns the sweep.json dict."""
    out_dir = Path(out_dir)
    t0 = time.perf_counter()
    data, data_meta = load_data(cfg.train, cache_dir)
    check_split_sizes(data, cfg.train.seq_len, cfg.eval, cfg.analysis_multiplier, cfg.analysis_windows)
    arms: dict = {}
    for arm in cfg.arms:
        arms[arm] = _sweep_arm(cfg, arm, out_dir / arm, data, data_meta, device, threads, progress)
        result = _write_summary(cfg, out_dir, arms, data_meta, threads, device, time.perf_counter() - t0)
    return result
