"""``accum probe train|eval|sweep|report``: the C7 probes on the command line.

``accum/cli.py`` registers this module lazily: it calls ``add_subparser(subparsers)`` and dispatches the
parsed namespace to ``run(args)``; ``python -m accum.probes.cli ...`` runs the same commands standalone.

    accum probe train  --arm learned --out results/probes/learned [--preset cpu|gpu] [--steps 600 ...]
    accum probe eval   --run results/probes/learned [--multipliers 1 2 4 ...] [--json PATH]
    accum probe sweep  --out probes/results/cpu [--preset cpu|gpu] [--arms nope rope ...] [--seeds 0 1 2]
    accum probe report [--sweep probes/results/cpu/sweep.json]      (no training: prints table and verdicts)

Every TrainConfig / EvalConfig field is an option (``--batch-size`` for ``batch_size``); an option not
given takes its value from ``--preset`` (default cpu = the dataclass defaults but angle_lr_scale 10).  ``--threads`` (default
2), ``--device`` (cpu, cuda, cuda:N) and ``--max-memory-gb`` (train/sweep: refuse a config whose
estimated peak training memory exceeds it; default 80% of this machine's memory) are common.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from contextlib import nullcontext
from dataclasses import fields
from pathlib import Path

import numpy as np
import torch

from accum.probes import stats, tables
from accum.probes.evaluate import EvalConfig
from accum.probes.io import json_text, read_json
from accum.probes.bridge import THEORY_RESULTS, BridgeConfig, theory_result
from accum.probes.model import ANGLE_ARMS, ARMS
from accum.probes.presets import PRESETS, preset
from accum.probes.sweep import (EVAL_RESULTS, SweepConfig, check_analysis, check_summary, evaluate_run, finished_run,
                                markdown_table, run_order, run_sweep)
from accum.probes.theory_stats import agreement, theory_section
from accum.probes.train import WEIGHTS, TrainConfig, angle_spread, check_train_memory, load_data, load_trained, train
from accum.runtime import DEFAULT_THREADS, Interrupted
from accum.simulations.params import ParamError, check_int, float_option, integer_option
from accum.simulations.results import ResultError, prove_writable_dirs, reserve_output


#: what each TrainConfig / EvalConfig field means, shown by --help beside the presets' values
FIELD_HELP = {
    "arm": "attention arm (one switch of the attention module)", "seq_len": "training length L_train in tokens",
    "batch_size": "sequences per training step", "steps": "training steps", "lr": "peak learning rate (AdamW)",
    "angle_lr_scale": "learned arms: the angle tables' rate, in units of --lr",
    "min_lr_ratio": "final learning rate / peak (cosine schedule)", "warmup": "linear warm-up steps",
    "weight_decay": "AdamW weight decay", "grad_clip": "gradient norm clip", "seed": "training seed",
    "d_model": "model width", "n_heads": "attention heads", "n_layers": "transformer layers",
    "mlp_ratio": "MLP width / model width", "rope_base": "RoPE frequency base",
    "path_rank": "PaTH arm: rank of its Householder factors", "path_block": "PaTH arm: block length of its scan",
    "data_source": "training text (auto: the Shakespeare corpus, else the stdlib's text)",
    "tokenizer": "byte-level BPE or characters", "bpe_vocab": "BPE vocabulary size",
    "val_fraction": "share of the text held out for validation", "checkpoint_every": "steps between checkpoints",
    "log_every": "steps between logged losses", "multipliers": "evaluation lengths, in units of L_train",
    "n_tokens": "validation targets per evaluation length", "chunk": "evaluation tokens per forward call",
    "tokens_per_batch": "evaluation windows batched per call = max(1, this // length)",
}


def field_choices(name: str) -> tuple[str, ...] | None:
    """The allowed values of a text field (listed by --help and checked by argparse), or None."""
    from accum.probes.data import SOURCES, TOKENIZERS

    return {"arm": tuple(ARMS), "data_source": SOURCES, "tokenizer": TOKENIZERS}.get(name)


def preset_values(name: str, default) -> str:
    """"cpu preset 128, gpu preset 512": the field's value in each preset (a list as its items)."""
    values = [{**s["train"], **s["eval"]}.get(name, default) for s in PRESETS.values()]
    return ", ".join(f"{p} preset {' '.join(map(str, v)) if isinstance(v, (tuple, list)) else repr(v)}"
                     for p, v in zip(PRESETS, values))


def _add_dataclass_options(parser: argparse.ArgumentParser, cls, skip: tuple[str, ...] = ()) -> None:
    for f in fields(cls):
        if f.name in skip:
            continue
        flag = "--" + f.name.replace("_", "-")
        about = f"{FIELD_HELP.get(f.name, f'the {cls.__name__} field {f.name}')} ({preset_values(f.name, f.default)})"
        if isinstance(f.default, tuple):
            parser.add_argument(flag, type=integer_option, nargs="+", default=None, metavar="N", help=about)
        else:
            kind = integer_option if isinstance(f.default, int) else float_option if isinstance(f.default, float) else str
            parser.add_argument(flag, type=kind, default=None, choices=field_choices(f.name), help=about)


def _from_args(cls, args: argparse.Namespace, base: dict, **override):
    """``cls`` from ``base`` (a preset's values) updated by the options given (not None) and ``override``."""
    given = {f.name: getattr(args, f.name) for f in fields(cls) if getattr(args, f.name, None) is not None}
    names = {f.name for f in fields(cls)}
    values = {k: v for k, v in base.items() if k in names}
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in {**values, **given, **override}.items()}
    return cls(**values)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threads", type=integer_option, default=DEFAULT_THREADS,
                        help=f"torch CPU threads (default {DEFAULT_THREADS}, as for every accum command)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    parser.add_argument("--data-dir", type=Path, default=None, help="data cache (default data/ in the repository)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def _sizing(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default="cpu", choices=tuple(PRESETS),
                        help="starting sizes, overridden by any option given: cpu (default; 3 layers of width 128, "
                             "L_train 128, minutes a run on one core) or gpu (6 layers of width 384, L_train 512; "
                             "not run yet); each option's help shows both values")
    parser.add_argument("--max-memory-gb", type=float_option, default=None,
                        help="refuse configs whose estimated peak training memory exceeds this (default 80%% of RAM)")


PROBE_DESCRIPTION = """The C7 probes: small decoder-only transformers trained at L_train on Shakespeare, one per
attention arm (NoPE, RoPE, ALiBi, random and learned accumulated SO(2) rotations, PaTH), evaluated at 1x to 64x
L_train.  `accum probe report` prints the committed sweep's table and verdicts without training.  Each command's
--help lists its options; the guide is docs/probes.md."""


def add_subparser(subparsers) -> argparse.ArgumentParser:
    """Add ``probe`` with sub-commands train, eval, sweep to an argparse ``subparsers`` object."""
    probe = subparsers.add_parser("probe", help="C7 probes: train / evaluate small transformers per arm, report",
                                  description=PROBE_DESCRIPTION)
    sub = probe.add_subparsers(dest="probe_command", required=True, metavar="COMMAND")
    p_train = sub.add_parser("train", help="train one arm at L_train (resumes from OUT/checkpoint.pt)")
    _add_dataclass_options(p_train, TrainConfig)
    p_train.add_argument("--out", required=True, help="run folder")
    _common(p_train)
    _sizing(p_train)
    p_eval = sub.add_parser("eval", help="perplexity at multiples of L_train + attention analysis of a run")
    p_eval.add_argument("--run", dest="run_dir", type=Path, required=True, help="folder of a finished `probe train`")
    _add_dataclass_options(p_eval, EvalConfig)
    p_eval.add_argument("--analysis-multiplier", type=integer_option, default=4, metavar="M",
                        help="attention analysis on windows of M x the training length (M >= 2; default 4)")
    p_eval.add_argument("--analysis-windows", type=integer_option, default=4, metavar="N",
                        help="validation windows the attention analysis averages (default 4)")
    p_eval.add_argument("--json", type=Path, default=None, help=f"output (default RUN/{EVAL_RESULTS})")
    _common(p_eval)
    p_sweep = sub.add_parser("sweep", help="train + evaluate every arm at every seed, write sweep.json and sweep.md")
    _add_dataclass_options(p_sweep, TrainConfig, skip=("arm", "seed"))
    _add_dataclass_options(p_sweep, EvalConfig, skip=("seed",))
    p_sweep.add_argument("--eval-seed", type=integer_option, default=0,
                         help="seed of the evaluation (the random arms' angle draws; default 0)")
    p_sweep.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS, metavar="ARM",
                         help=f"arms to run (default all): {' '.join(ARMS)}")
    p_sweep.add_argument("--seeds", type=integer_option, nargs="+", default=[0, 1, 2], help="training seeds (>= 3; default 0 1 2)")
    p_sweep.add_argument("--looks", type=integer_option, nargs="+", default=None,
                         help="sequential design: judge each claim at these numbers of paired seeds (increasing, "
                              "the last the cap, at most the number of --seeds); each look's interval has level "
                              "1 - alpha/K; seeds beyond the first look run only for unresolved claims "
                              "(default: one look at every seed)")
    p_sweep.add_argument("--alpha", type=float_option, default=0.05, help="error budget shared by the looks (default 0.05)")
    p_sweep.add_argument("--shard", default="0/1", help="K/N: run every N-th (arm, seed) run from the K-th, so N "
                         "processes share one --out (default 0/1)")
    p_sweep.add_argument("--order", default="seed", help="run order: seed (every arm at seed 0 first, default) or arm "
                         "(every seed of the first arm first)")
    p_sweep.add_argument("--analysis-multiplier", type=integer_option, default=None, metavar="M",
                         help="attention analysis on windows of M x the training length (default: the preset's)")
    p_sweep.add_argument("--analysis-windows", type=integer_option, default=None, metavar="N",
                         help="validation windows the attention analysis averages (default: the preset's)")
    p_sweep.add_argument("--out", default=str(DEFAULT_SWEEP.parent), help=f"default {DEFAULT_SWEEP.parent}")
    _common(p_sweep)
    _sizing(p_sweep)
    p_tables = sub.add_parser("tables", help="learned arms: did the angle tables learn structure? (shuffle test, "
                              "cross-seed agreement, spread growth)")
    p_tables.add_argument("--runs", dest="run_dirs", type=Path, nargs="+", required=True,
                          help="folders of finished learned / learned_qkv runs (2 or more seeds for the agreement)")
    p_tables.add_argument("--windows", type=integer_option, default=64, help="validation windows of L_train (default 64)")
    p_tables.add_argument("--top", type=integer_option, default=256, help="most frequent tokens compared across seeds")
    p_tables.add_argument("--json", type=Path, default=None, help="write the results here")
    _common(p_tables)
    p_theory = sub.add_parser("theory", help="accum's theory for one trained angle-arm run: theory.json (coherence, "
                              "window, far mass extrapolated from 2x; read by `probe report`)")
    p_theory.add_argument("--run", dest="run_dir", type=Path, required=True, help="folder of a finished angle-arm run")
    p_theory.add_argument("--out", type=Path, default=None, help="output (default RUN/theory.json)")
    p_theory.add_argument("--windows", type=integer_option, default=None, help="validation windows of 2 L_train tokens")
    _common(p_theory)
    p_report = sub.add_parser("report", help="print a finished (or partial) sweep's table and C7 verdicts; no training",
                              description="Print the table (perplexity per arm and length, mean +- sd over seeds), "
                                          "the C7 verdicts recomputed from the per-run numbers, and the theory vs "
                                          "trained probes section, from a sweep.json of `accum probe sweep`.  No "
                                          "training; the default is the committed CPU sweep.")
    p_report.add_argument("--sweep", type=Path, default=DEFAULT_SWEEP,
                          help=f"sweep.json (default: the committed CPU sweep, {DEFAULT_SWEEP})")
    for choice in sub._choices_actions:  # each command's --help starts with what it does
        sub.choices[choice.dest].description = sub.choices[choice.dest].description or choice.help[0].upper() + choice.help[1:]
    probe.set_defaults(run=run)
    return probe


MAX_THREADS = 256
#: the committed CPU sweep, found from this file (not the current folder), so the default works anywhere
DEFAULT_SWEEP = Path(__file__).resolve().parent / "results" / "cpu" / "sweep.json"
ANALYSIS_FLAGS = {"analysis_multiplier": "--analysis-multiplier", "analysis_windows": "--analysis-windows"}


def flag(name: str) -> str:
    """The command-line flag of a config field: ``batch_size`` -> ``--batch-size``."""
    return "--" + name.replace("_", "-")


def command_flags(command: str) -> dict[str, str]:
    """Field name -> flag for the errors of ``accum probe COMMAND`` (eval: its own options only; the
    training config of ``--run`` is not a flag there)."""
    evaluation = {f.name: flag(f.name) for f in fields(EvalConfig)}
    if command == "train":
        return {f.name: flag(f.name) for f in fields(TrainConfig)}
    if command == "eval":
        return {**evaluation, **ANALYSIS_FLAGS}
    if command == "theory":
        return {"windows": "--windows"}
    if command == "tables":
        return {"windows": "--windows", "top": "--top", "runs": "--runs", "arm": "--runs (its arm)"}
    train_flags = {f.name: flag(f.name) for f in fields(TrainConfig) if f.name != "seed"}
    return {**train_flags, **evaluation, "seed": "--eval-seed", "seeds": "--seeds", "arms": "--arms", "order": "--order",
            "looks": "--looks", "alpha": "--alpha", **ANALYSIS_FLAGS}


def build(cls, args: argparse.Namespace, flags: dict[str, str], base: dict, **override):
    """``cls`` from a preset's values ``base`` and the parsed options; a refused value is a ``ParamError``
    naming its flag."""
    try:
        return _from_args(cls, args, base, **override)
    except ParamError as err:
        raise ParamError(err.message(flags)) from None


def check_device(device: str) -> str:
    """Validate --device: 'cpu', or 'cuda' / 'cuda:N' with a visible GPU."""
    if device == "cpu":
        return device
    if device == "cuda" or (device.startswith("cuda:") and device[5:].isdigit()):
        if not torch.cuda.is_available():
            raise ParamError(f"--device {device}: no CUDA device is visible to torch {torch.__version__}")
        return device
    raise ParamError(f"--device must be cpu, cuda or cuda:N, got {device!r}")


def check_common(args: argparse.Namespace) -> str:
    """--threads in [1, MAX_THREADS], --device, --data-dir (a cache folder, proven writable); returns the device."""
    check_int("--threads", args.threads, 1, MAX_THREADS)
    if getattr(args, "preset", "cpu") not in PRESETS:
        raise ParamError(f"--preset must be one of {', '.join(PRESETS)}, got {args.preset!r}")
    limit = getattr(args, "max_memory_gb", None)
    if limit is not None and not (limit == limit and 0 < limit <= 2**20):
        raise ParamError(f"--max-memory-gb must be a number in (0, {2**20}], got {limit!r}")
    if args.data_dir is not None:
        prove_writable_dirs({"--data-dir": args.data_dir})
    return check_device(args.device)


def finished_run_config(run_dir: Path, option: str = "--run") -> TrainConfig:
    """The training config of the finished ``accum probe train`` in ``run_dir``; ``ParamError`` naming ``option``."""
    record = run_dir / "train.json"
    if not record.is_file():
        raise ParamError(f"{option} {run_dir}: no train.json there; give the folder of an `accum probe train`")
    try:
        saved = read_json(record)
        if not isinstance(saved, dict):
            raise ValueError(f"a JSON {type(saved).__name__}, not an object")
        cfg = TrainConfig.from_dict(saved["config"])
    except (ValueError, KeyError, TypeError) as err:
        raise ParamError(f"{option} {run_dir}: train.json is not an `accum probe train` record ({describe(err)})") from None
    if not saved.get("finished"):
        raise ParamError(f"{option} {run_dir}: training is not finished (step {saved.get('step')} of {cfg.steps}); "
                         "rerun `accum probe train` with the same options to resume it")
    if not (run_dir / WEIGHTS).is_file():
        raise ParamError(f"{option} {run_dir}: training finished (step {saved.get('step')} of {cfg.steps}) but its "
                         f"weights, {WEIGHTS}, are not there (committed runs keep train.json and eval.json only); "
                         f"train it again with `accum probe train --arm {cfg.arm} --seed {cfg.seed} --out DIR` to get them")
    return cfg


def memory_limit_bytes(args: argparse.Namespace) -> int:
    """--max-memory-gb in bytes, or 80% of the machine's physical memory."""
    if args.max_memory_gb is not None:
        return int(args.max_memory_gb * 2**30)
    return int(0.8 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def check_memory(cfg: TrainConfig, args: argparse.Namespace, flags: dict[str, str]) -> None:
    """Refuse (``ParamError`` naming --seq-len and --batch-size) a config whose estimated training peak does
    not fit; the vocabulary is bounded by the BPE size (char vocabularies are far smaller)."""
    vocab = cfg.bpe_vocab if cfg.tokenizer == "bpe" else 1024
    try:
        check_train_memory(cfg, vocab, memory_limit_bytes(args))
    except ParamError as err:
        raise ParamError(err.message({**flags, "max_memory_gb": "--max-memory-gb"})) from None


def run_train(args: argparse.Namespace, device: str) -> None:
    flags = command_flags("train")
    cfg = build(TrainConfig, args, flags, preset(args.preset)["train"])
    check_memory(cfg, args, flags)
    out = prove_writable_dirs({"--out": args.out})[0]  # refused before any data is read
    res = train(cfg, out, cache_dir=args.data_dir, device=device, threads=args.threads,
                progress=not args.no_progress)
    print(f"{out}: {res['step']} steps, {res['tokens_seen']} tokens, loss {res['final_train_loss']:.4f}")


def run_eval(args: argparse.Namespace, device: str) -> None:
    eval_cfg = build(EvalConfig, args, command_flags("eval"), {})
    check_analysis(args.analysis_multiplier, args.analysis_windows)  # a ParamError; run() names the flag
    train_cfg = finished_run_config(args.run_dir)
    target, option = (args.run_dir / EVAL_RESULTS, "--run") if args.json is None else (args.json, "--json")
    with reserve_output(target, option) as out:  # refused before any data is read
        data, _ = load_data(train_cfg, args.data_dir)
        res = evaluate_run(args.run_dir, data, eval_cfg, args.analysis_multiplier, args.analysis_windows, device,
                           args.threads)
        out.write_text(json_text(res))
    for r in res["lengths"]:
        print(f"L={r['length']:6d}  ppl {r['ppl']:.3f}")


def run_tables(args: argparse.Namespace, device: str) -> None:
    """Per run: the angle spread (final and its history), the shuffle effect; over runs: cross-seed agreement."""
    check_int("windows", args.windows, 2, 2**16)
    check_int("top", args.top, 2, 2**20)
    cfgs = [finished_run_config(d, "--runs") for d in args.run_dirs]
    for cfg in cfgs:
        tables.check_token_arm(cfg.arm)
    with reserve_output(args.json, "--json") if args.json is not None else nullcontext() as out:
        data, _ = load_data(cfgs[0], args.data_dir)
        tokens = tables.frequent_tokens(data.val, args.top)
        per_run, deviations = [], []
        for run_dir, cfg in zip(args.run_dirs, cfgs):
            model, _ = load_trained(run_dir, data.vocab_size, device)
            effect = tables.shuffle_effect(model, data.val, cfg.seq_len, args.windows,
                                           torch.Generator().manual_seed(cfg.seed))
            history = read_json(run_dir / "train.json")["history"]
            growth = [[h["step"], float(np.mean(h["angle_spread"]))] for h in history if h.get("angle_spread")]
            per_run.append({"run": str(run_dir), "arm": cfg.arm, "seed": cfg.seed, "angle_lr_scale": cfg.angle_lr_scale,
                            "angle_spread": angle_spread(model), "spread_growth": growth, **effect})
            deviations.append(tables.head_mean_deviation(model, tokens))
            print(f"{run_dir}: {cfg.arm} seed {cfg.seed} scale {cfg.angle_lr_scale}: spread "
                  f"{np.mean(per_run[-1]['angle_spread']):.3f} rad; NLL {effect['nll']:.4f}; shuffled "
                  f"{effect['shuffled']['mean']:+.4f} +- {effect['shuffled']['se']:.4f}; zero (RoPE) "
                  f"{effect['zero']['mean']:+.4f} +- {effect['zero']['se']:.4f} nats")
        result = {"runs": per_run, "top_tokens": len(tokens), "windows": args.windows}
        if len(deviations) > 1:
            result["agreement"] = tables.cross_seed_agreement(deviations)
            print("cross-seed correlation of head-mean tables per layer: "
                  + ", ".join(f"{c:.3f}" for c in result["agreement"]["per_layer_mean"])
                  + f" (noise sd {result['agreement']['noise_sd']:.3f})")
        if out is not None:
            out.write_text(json_text(result))


def run_theory(args: argparse.Namespace, device: str) -> None:
    """theory.json of one finished run of an angle arm (``bridge.write_theory``)."""
    tcfg = finished_run_config(args.run_dir)
    if tcfg.arm not in ANGLE_ARMS:
        raise ParamError(f"--run {args.run_dir}: arm {tcfg.arm!r} has no accumulated angle law; allowed: "
                         f"{', '.join(ANGLE_ARMS)}")
    cfg = None if args.windows is None else BridgeConfig(windows=args.windows)
    target = args.run_dir / THEORY_RESULTS if args.out is None else args.out
    with reserve_output(target, "--out") as out:  # proven writable before any work
        data, _ = load_data(tcfg, args.data_dir)
        res = theory_result(args.run_dir, data, device, args.threads, cfg)
        out.write_text(json_text(res))
    print(f"{res['arm']}: spearman(window) {res['spearman_window']}, far log ratio {res.get('far_log_ratio')}, "
          f"{res['seconds']:.1f} s")


def run_probe_sweep(args: argparse.Namespace, device: str) -> None:
    flags = command_flags("sweep")
    sizes = preset(args.preset)
    train_cfg = build(TrainConfig, args, flags, sizes["train"], arm="rope")
    eval_cfg = build(EvalConfig, args, {**flags, "seed": "--eval-seed"}, sizes["eval"], seed=args.eval_seed)
    analysis = {k: getattr(args, k) if getattr(args, k) is not None else sizes["sweep"].get(k, default)
                for k, default in (("analysis_multiplier", 4), ("analysis_windows", 4))}
    cfg = SweepConfig(train=train_cfg, eval=eval_cfg, arms=tuple(args.arms), seeds=tuple(args.seeds), **analysis,
                      looks=tuple(args.looks or ()), alpha=args.alpha)
    check_memory(train_cfg, args, flags)
    shard = parse_shard(args.shard)
    run_order(cfg, args.order)  # a bad --order is refused before any work
    out = prove_writable_dirs({"--out": args.out})[0]
    try:
        res = run_sweep(cfg, out, cache_dir=args.data_dir, device=device, threads=args.threads,
                        progress=not args.no_progress, shard=shard, order=args.order)
    except KeyboardInterrupt:  # every finished run is on disk already; the one in flight resumes from its checkpoint
        kept = sum(finished_run(cfg, out, arm, seed) is not None for arm, seed in run_order(cfg, args.order))
        raise Interrupted(f"interrupted; {kept} of {len(cfg.arms) * len(cfg.seeds)} runs kept in {out}") from None
    print(res["table_markdown"], end="")


def parse_shard(text: str) -> tuple[int, int]:
    """--shard K/N with 0 <= K < N <= 1024."""
    match = re.fullmatch(r"(\d+)/(\d+)", text)
    if not match or not 0 <= int(match[1]) < int(match[2]) <= 1024:
        raise ParamError(f"--shard must be K/N with 0 <= K < N <= 1024, got {text!r}")
    return int(match[1]), int(match[2])


def run_report(args: argparse.Namespace, device: str) -> None:
    """Print the table and verdicts of a sweep.json (recomputed from its per-run numbers, no training)."""
    print(report_text(*load_sweep(args.sweep)) + theory_section(agreement(args.sweep.parent)), end="")


def load_sweep(path: Path) -> tuple[dict, SweepConfig]:
    """A sweep.json written by ``accum probe sweep``: ``ParamError`` naming --sweep if it is not one,
    ``ResultError`` naming --sweep and the field if its runs do not fit its config (``check_summary``)."""
    if not path.is_file():
        what = "not a regular file" if path.exists() else "no such file"
        raise ParamError(f"--sweep {path}: {what} (a sweep.json from `accum probe sweep`)")
    try:
        sweep = read_json(path)
        if not isinstance(sweep, dict):
            raise ValueError(f"a JSON {type(sweep).__name__}, not an object with config, runs, missing, verdicts")
        config = SweepConfig.from_dict(sweep["config"])
        absent = [key for key in ("runs", "missing", "verdicts") if key not in sweep]
        if absent:
            raise KeyError(", ".join(absent))
    except (ValueError, KeyError, TypeError) as err:
        raise ParamError(f"--sweep {path}: not a multi-seed probe sweep ({describe(err)})") from None
    try:
        check_summary(sweep, config)
    except ResultError as err:
        raise ResultError(f"--sweep {path}: {err}") from None
    return sweep, config


def describe(err: Exception) -> str:
    """What was wrong with a record, in words: a missing key by its name, a bound by the reader's message."""
    if isinstance(err, (KeyError, TypeError)):
        return f"no {err.args[0]!r} entry" if isinstance(err, KeyError) and err.args else "an entry missing or of the wrong type"
    return str(err)


def report_text(sweep: dict, config: SweepConfig) -> str:
    """Header (config, data, completeness, stopping rule), the table and verdicts recomputed from the per-run
    numbers under ``config`` (the sweep's own, as ``load_sweep`` reads it)."""
    cfg, data = sweep["config"], sweep.get("data", {})
    t = cfg["train"]
    runs = sweep["runs"]
    arms = {arm: stats.arm_statistics(runs.get(arm, {})) for arm in cfg["arms"]}
    rows = config.verdicts(runs)
    done = sum(len(r) for r in runs.values())
    looks = list(config.plan_looks)
    head = [f"C7 probe sweep: {done} (arm, seed) runs finished, {len(sweep['missing'])} more asked for by the "
            f"stopping rule; complete: {str(not sweep['missing']).lower()}",
            f"stopping rule: each claim judged at {', '.join(map(str, looks))} paired seeds (cap {looks[-1]}), "
            f"each look's t interval at level 1 - {config.alpha}/{len(looks)}; a claim stops at the first look that "
            f"resolves it (wrong CONFIRMED <= {config.alpha / 2:g} per claim over all looks)",
            f"time in these runs: {run_hours(runs):.2f} h of training and evaluation (each run's threads and "
            "machine: provenance in its train.json)",
            f"data: {data.get('source', '?')} ({data.get('tokenizer', 'char')}, vocab {data.get('vocab_size', '?')}, "
            f"{data.get('train_tokens', '?')} train / {data.get('val_tokens', '?')} validation tokens)",
            f"model: {t['n_layers']} layers, width {t['d_model']}, {t['n_heads']} heads; L_train {t['seq_len']} tokens, "
            f"batch {t['batch_size']}, {t['steps']} steps, lr {t['lr']}; seeds {cfg['seeds']}; "
            f"eval {cfg['eval']['n_tokens']} tokens per length at {cfg['eval']['multipliers']} x L_train", ""]
    if sweep["missing"]:
        head.insert(1, "missing: " + ", ".join(f"{a}/seed{s}" for a, s in sweep["missing"]))
    return "\n".join(head) + "\n" + markdown_table(t["seq_len"], cfg["eval"]["multipliers"], arms, rows)


def run_hours(runs: dict) -> float:
    """Hours of training plus evaluation summed over the finished runs of a sweep.json's ``runs``."""
    return sum(r["train_seconds"] + r["eval_seconds"] for a in runs.values() for r in a.values()) / 3600


RUNNERS = {"train": run_train, "eval": run_eval, "sweep": run_probe_sweep, "tables": run_tables, "theory": run_theory, "report": run_report}


def run(args: argparse.Namespace) -> int:
    """Execute a parsed ``probe`` command: 0 on success; 2 on bad input, 1 if the run itself failed
    (one line on stderr, ``accum probe COMMAND: error: ...``, naming the flag where there is one)."""
    command = args.probe_command
    try:
        device = "cpu" if command == "report" else check_common(args)
        torch.set_num_threads(getattr(args, "threads", 1))
        RUNNERS[command](args, device)
    except ParamError as err:  # its parameters written as the flags that set them
        return report(command, err.message(command_flags(command)), 2)
    except ResultError as err:
        return report(command, str(err), 2)
    except (RuntimeError, OSError, ValueError) as err:  # the run itself failed (e.g. a corrupt download)
        return report(command, str(err), 1)
    return 0


def report(command: str, message: str, status: int) -> int:
    """Print ``accum probe COMMAND: error: MESSAGE`` on stderr; return ``status``."""
    print(f"accum probe {command}: error: {message}", file=sys.stderr)
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="accum")
    add_subparser(parser.add_subparsers(dest="command", required=True))
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main(["probe", *sys.argv[1:]]))
