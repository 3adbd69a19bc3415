"""``accum probe train|eval|sweep|report``: the C7 probes on the command line.

``accum/cli.py`` registers this module lazily: it calls ``add_subparser(subparsers)`` and dispatches the
parsed namespace to ``run(args)``; ``python -m accum.probes.cli ...`` runs the same commands standalone.

    accum probe train  --arm learned --out results/probes/learned [--preset cpu|gpu] [--steps 600 ...]
    accum probe eval   --run results/probes/learned [--multipliers 1 2 4 ...] [--json PATH]
    accum probe sweep  --out probes/results/cpu [--preset cpu|cpu-families|tiny|gpu] [--workers 2] [--arms ...]
    accum probe report [--sweep probes/results/cpu/sweep.json]      (no training: prints table and verdicts)

Every TrainConfig / EvalConfig field is an option (``--batch-size`` for ``batch_size``); an option not
given takes its value from ``--preset`` (``probes.presets``).  ``--threads`` (``accum.runtime.DEFAULT_THREADS``),
``--device`` (cpu, cuda, cuda:N) and ``--max-memory-gb`` (train/sweep: refuse a config whose estimated peak
training memory exceeds it; default 80% of this machine's memory) are common.
"""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import nullcontext
from dataclasses import fields
from pathlib import Path

import numpy as np
import torch

from accum.interrupts import holding_interrupts
from accum.probes import stats, tables
from accum.probes.evaluate import EvalConfig
from accum.probes.io import json_text, read_json
from accum.probes.model import FAMILY_ARMS
from accum.probes.cliargs import MAX_THREADS, REPOSITORY, probe_parser
from accum.probes.bridge import THEORY_RESULTS, BridgeConfig, is_current, summary_line, theory_result
from accum.probes.presets import PRESETS, preset
from accum.probes.sweep import EVAL_RESULTS, evaluate_run, finished_runs, run_sweep
from accum.probes.sweepconfig import SweepConfig, check_analysis, load_design, variant_items
from accum.probes.sweeptable import check_summary, markdown_table, stopped_text
from accum.probes.theory_stats import agreement, theory_section
from accum.probes.runfolder import check_new_output, check_train_out, describe, finished_run_config, run_preset
from accum.probes.train import TrainConfig, angle_spread, check_train_memory, load_data, load_trained, train
from accum.runtime import Interrupted
from accum.simulations.params import ParamError, check_int, parse_assignments
from accum.simulations.results import ResultError, prove_writable_dirs, reserve_output
from accum.simulations.runner import check_scheduler, check_workers, connect


def _from_args(cls, args: argparse.Namespace, base: dict, **override):
    """``cls`` from ``base`` (a preset's values) updated by the options given (not None) and ``override``."""
    given = {f.name: getattr(args, f.name) for f in fields(cls) if getattr(args, f.name, None) is not None}
    names = {f.name for f in fields(cls)}
    values = {k: v for k, v in base.items() if k in names}
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in {**values, **given, **override}.items()}
    return cls(**values)


def add_subparser(subparsers) -> argparse.ArgumentParser:
    """Add ``probe`` and its sub-commands (``probes.cliargs``) to an argparse ``subparsers`` object; ``run`` runs them."""
    probe = probe_parser(subparsers)
    probe.set_defaults(run=run)
    return probe


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
        return {"windows": "--windows", "streams": "--streams"}
    if command == "tables":
        return {"windows": "--windows", "top": "--top", "runs": "--runs", "arm": "--runs (its arm)"}
    train_flags = {f.name: flag(f.name) for f in fields(TrainConfig) if f.name != "seed"}
    return {**train_flags, **evaluation, "seed": "--eval-seed", "seeds": "--seeds", "arms": "--arms",
            "variants": "--variant", "looks": "--looks", "alpha": "--alpha", "out": "--out", "redesign": "--redesign",
            **ANALYSIS_FLAGS}


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
    if (getattr(args, "preset", None) or "cpu") not in PRESETS:
        raise ParamError(f"--preset must be one of {', '.join(PRESETS)}, got {args.preset!r}")
    limit = getattr(args, "max_memory_gb", None)
    if limit is not None and not (limit == limit and 0 < limit <= 2**20):
        raise ParamError(f"--max-memory-gb must be a number in (0, {2**20}], got {limit!r}")
    if args.data_dir is not None:
        prove_writable_dirs({"--data-dir": args.data_dir})
    return check_device(args.device)


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
    for path in check_train_out(out, cfg, args.overwrite):  # --overwrite: the old run's files go first
        path.unlink()
    res = train(cfg, out, cache_dir=args.data_dir, device=device, threads=args.threads,
                progress=not args.no_progress, preset=args.preset)
    print(f"{out}: {res['step']} steps, {res['tokens_seen']} tokens, loss {res['final_train_loss']:.4f}")


def run_eval(args: argparse.Namespace, device: str) -> None:
    """Evaluate a finished run with the options given, the others from --preset or the run's preset (``run_preset``,
    named in its output); an existing eval.json (or --json file) is replaced only with --overwrite.  The options given
    are checked (against the class defaults) before the run folder is read, so a malformed value is named first."""
    build(EvalConfig, args, command_flags("eval"), {})
    train_cfg = finished_run_config(args.run_dir)
    name, why = (args.preset, "--preset") if args.preset else run_preset(args.run_dir, train_cfg)
    design = preset(name)
    eval_cfg = build(EvalConfig, args, command_flags("eval"), design["eval"])
    analysis = {k: getattr(args, k) if getattr(args, k) is not None else design["sweep"].get(k, getattr(SweepConfig, k))
                for k in ("analysis_multiplier", "analysis_windows")}
    check_analysis(**{k.removeprefix("analysis_"): v for k, v in analysis.items()})  # run() names the flag
    target, option = (args.run_dir / EVAL_RESULTS, "--run") if args.json is None else (args.json, "--json")
    check_new_output(target, option, args.overwrite)
    with reserve_output(target, option) as out:  # refused before any data is read
        data, _ = load_data(train_cfg, args.data_dir)
        res = evaluate_run(args.run_dir, data, eval_cfg, analysis["analysis_multiplier"], analysis["analysis_windows"],
                           device, args.threads)
        out.write_text(json_text(res))
    print(f"{args.run_dir}: the {name} preset's evaluation ({why}), {eval_cfg.n_tokens} tokens per length:")
    for r in res["lengths"]:
        print(f"L={r['length']:6d}  ppl {r['ppl']:.3f}")


def run_tables(args: argparse.Namespace, device: str) -> None:
    """Per run: the angle spread (final and its history), the shuffle effect; over runs: cross-seed agreement."""
    check_int("windows", args.windows, 2, 2**16)
    check_int("top", args.top, 2, 2**20)
    cfgs = [finished_run_config(d, "--runs") for d in args.run_dirs]
    for cfg in cfgs:
        tables.check_token_arm(cfg.arm)
    if args.json is not None:
        check_new_output(args.json, "--json", args.overwrite)
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
    """theory.json of every finished run given (``bridge.theory_result``).  Without --overwrite a current one is
    skipped and any other existing one refused; every folder and target is checked before any work."""
    if args.out is not None and len(args.run_dirs) != 1:
        raise ParamError(f"--out names one file: give one --run, got {len(args.run_dirs)}")
    configs = [finished_run_config(run_dir) for run_dir in args.run_dirs]
    given = {k: getattr(args, k) for k in ("windows", "streams") if getattr(args, k) is not None}
    # a current theory.json was computed with these values: the ones given, the defaults of the others (windows
    # without --windows depends on the data's size, see bridge.theory_result)
    wanted = {**{k: v for k, v in BridgeConfig().to_dict().items() if k != "windows"}, **given}
    targets = [run_dir / THEORY_RESULTS if args.out is None else args.out for run_dir in args.run_dirs]
    current = [not args.overwrite and is_current(run_dir, target, wanted)
               for run_dir, target in zip(args.run_dirs, targets)]
    for target, skip in zip(targets, current):
        if not skip and Path(target).is_file() and not args.overwrite:
            raise ParamError(f"{'--out' if args.out else '--run'} {target}: a theory.json that is not current (another "
                             "bridge version or bridge settings, or older than the run's weights, train.json or "
                             "eval.json); results are never rewritten: pass --overwrite to recompute it")
    cfg = BridgeConfig(**given) if given else None
    for run_dir, tcfg, target, skip in zip(args.run_dirs, configs, targets, current):
        if skip:
            print(f"{run_dir}: theory.json is current, skipped")
            continue
        with reserve_output(target, "--out") as out:  # proven writable before any work
            data, _ = load_data(tcfg, args.data_dir)
            res = theory_result(run_dir, data, device, args.threads, cfg)
            out.write_text(json_text(res))
        print(summary_line(run_dir, res))


SWEEP_DESIGN_OPTIONS = ("eval_seed", "arms", "variant", "seeds", "looks", "alpha", "analysis_multiplier",
                        "analysis_windows", "preset")


def design_options_given(args: argparse.Namespace) -> bool:
    """Whether any option that sets the sweep's design (a preset, a training / evaluation field, arms, seeds, ...)
    was given on the command line."""
    names = [f.name for f in fields(TrainConfig)] + [f.name for f in fields(EvalConfig)] + list(SWEEP_DESIGN_OPTIONS)
    return any(getattr(args, name, None) is not None for name in names)


def parse_variants(given: list[list[str]] | None, default: dict) -> tuple:
    """--variant NAME KEY=VALUE ... (repeatable) as ``SweepConfig.variants``; the preset's when none is given.
    Values are read as ``TrainConfig`` fields read them (numbers for numeric fields, lists for tuples)."""
    if given is None:
        return tuple((label, variant_items(over)) for label, over in default.items())
    types = {f.name: f for f in fields(TrainConfig)}
    out = []
    for name, *items in given:
        over = {}
        for key, value in parse_assignments(items, f"--variant {name}").items():
            if key not in types:
                raise ParamError(f"--variant {name}: {key!r} is not a training field; allowed: {', '.join(sorted(types))}")
            default_value = types[key].default
            over[key] = tuple(value.split(",")) if isinstance(default_value, tuple) else (
                type(default_value)(value) if not isinstance(default_value, str) else str(value))
        out.append((name, variant_items(over)))
    return tuple(out)


def sweep_config(args: argparse.Namespace, flags: dict[str, str]) -> SweepConfig:
    """The design from --preset (default cpu) and the options given."""
    design = preset(args.preset or "cpu")
    # the shared config's arm is replaced per run (``SweepConfig.run_config``); a --family makes it a family arm's
    train_cfg = build(TrainConfig, args, flags, design["train"], arm=FAMILY_ARMS[0] if args.family else "rope")
    eval_seed = 0 if args.eval_seed is None else args.eval_seed
    eval_cfg = build(EvalConfig, args, {**flags, "seed": "--eval-seed"}, design["eval"], seed=eval_seed)
    plan = {k: v for k, v in design["sweep"].items() if k != "variants"}
    given = {"arms": args.arms, "seeds": args.seeds, "looks": sweep_looks(args.looks), "alpha": args.alpha,
             "analysis_multiplier": args.analysis_multiplier, "analysis_windows": args.analysis_windows}
    plan.update({k: v for k, v in given.items() if v is not None})
    if args.looks is not None:  # the paper-form rows are judged at the looks given (SweepConfig.paper_plan_looks)
        plan["paper_looks"] = ()
    plan = {k: tuple(v) if isinstance(v, list) else v for k, v in plan.items()}
    try:
        return SweepConfig(train=train_cfg, eval=eval_cfg, variants=parse_variants(args.variant,
                                                                                      design["sweep"].get("variants", {})),
                           **plan)
    except ParamError as err:
        if err.names in (("looks",), ("paper_looks",)) and args.seeds is not None and args.looks is None:
            raise looks_misfit(len(args.seeds), plan, args.preset or "cpu") from None
        raise ParamError(err.message(flags)) from None


def sweep_looks(given: list | None) -> tuple | list | None:
    """--looks as ``SweepConfig.looks``: the numbers given, () for ``none`` (one look at every seed), None when not
    given (the preset's)."""
    if given is None or "none" not in given:
        return given
    if given != ["none"]:
        raise ParamError(f"--looks takes increasing integers, or none alone (one look at every seed), got {given}")
    return ()


def looks_misfit(n: int, plan: dict, name: str) -> ParamError:
    """The refusal of ``n`` --seeds (valid ones) that the preset's looks (``plan``'s looks and paper_looks) do not
    fit, when --looks was not given: what to give instead, in the options the user gave."""
    looks, paper = tuple(plan.get("looks", ())), tuple(plan.get("paper_looks", ()))
    said = ", ".join(map(str, looks)) + (f" (its paper-form claims at {', '.join(map(str, paper))})" if paper else "")
    return ParamError(f"--seeds gives {n} seeds, but the {name} preset judges its claims at {said} paired seeds: give "
                      f"at least {max(looks + paper)} --seeds, or --looks with at most {n} (e.g. --looks {n}, or --looks "
                      "none: one look at every seed)")


def run_probe_sweep(args: argparse.Namespace, device: str) -> None:
    flags = command_flags("sweep")
    workers = check_workers(args.workers, "--workers")
    out = prove_writable_dirs({"--out": args.out})[0]
    saved = load_design(out)
    cfg = saved if saved is not None and not design_options_given(args) else sweep_config(args, flags)
    check_memory(cfg.train, args, flags)
    client = None if args.scheduler is None else connect(check_scheduler(args.scheduler, "--scheduler"))

    def on_run(label: str, outcome: object) -> None:
        failed = isinstance(outcome, BaseException)
        print(f"{label}: {'failed: ' + str(outcome) if failed else 'done'}", file=sys.stderr, flush=True)

    try:
        with holding_interrupts():  # an interrupt reports what was kept (accum.interrupts)
            res = run_sweep(cfg, out, cache_dir=args.data_dir, device=device, threads=args.threads, workers=workers,
                            client=client, redesign=args.redesign, on_run=on_run)
    except KeyboardInterrupt:  # every finished run is on disk already; the ones in flight resume from checkpoints
        kept = sum(len(r) for r in finished_runs(cfg, out).values())
        raise Interrupted(f"interrupted; {kept} finished runs kept in {out}") from None
    finally:
        if client is not None:
            client.close()
    print(res["table_markdown"], end="")


def run_report(args: argparse.Namespace, device: str) -> None:
    """Print, for each sweep.json, its table, verdicts and theory section (recomputed from its per-run numbers, no
    training); with --summary only the verdict lines (``verdict_summary``).  Every sweep is read and checked first."""
    sweeps = [(path, *load_sweep(path)) for path in args.sweep]
    parts = [verdict_summary(sweep, config, sweep_label(path)) if args.summary else
             report_text(sweep, config, sweep_label(path)) + theory_section(agreement(path.parent))
             for path, sweep, config in sweeps]
    print("\n".join(parts), end="")


def sweep_label(path: Path) -> str:
    """A sweep.json's path as the report names it: relative to the repository for the committed sweeps (no machine
    path in the quoted output), as given otherwise."""
    try:
        return str(path.resolve().relative_to(REPOSITORY))
    except ValueError:
        return str(path)


def verdict_summary(sweep: dict, config: SweepConfig, label: str) -> str:
    """The verdict lines of one sweep, headed by the sweep (``label``) and the runs finished and asked for: first
    the paper-form claims (``probes.paper``; d over all positions, its seed-and-text interval at the family-wise
    level, where the rule stopped; the group headlines first), then the pre-registered claims (all positions / last
    L_train segment)."""
    rows = config.verdicts(sweep["runs"])
    done = sum(len(r) for r in sweep["runs"].values())
    m = config.eval.multipliers[-1]
    lines = [f"{label}: {done} runs finished, {len(sweep['missing'])} more asked for by the stopping rule."]
    paper_rows = [r for r in rows if r.get("form") == "paper"]
    if paper_rows:
        level = next(r["level"] for r in paper_rows if "level" in r)
        lines += [f"Paper-form claims at {m}x (as the paper states them; one family-wise level over "
                  f"{sum('level' in r for r in paper_rows)} rows, each interval at {100 * level:.4g}% over seeds and "
                  "text; d, its interval, where the rule stopped):", ""]
        lines += [f"- {r['claim']} ({r['statement']}): **{r['verdict']}**" for r in paper_rows if "level" not in r]
        lines += [f"- {r['claim']}: **{r['verdict']}**{verdict_detail(r)}" for r in paper_rows if "level" in r]
        lines.append("")
    lines += [f"Pre-registered claims at {m}x (all positions / last L_train segment; d, its interval, where the rule "
              "stopped):", ""]
    pre = [r for r in rows if r.get("form") != "paper"]
    for claim in dict.fromkeys(r["claim"] for r in pre):
        cells = [f"**{r['verdict']}**{verdict_detail(r)}" for r in pre if r["claim"] == claim]
        lines.append(f"- {claim}: " + " / ".join(cells))
    return "\n".join(lines) + "\n"


def verdict_detail(row: dict) -> str:
    """" (d = ..., [lo, hi], where the rule stopped)" of a judged row; " (where it stopped)" without an interval."""
    if row.get("ci"):
        return f" (d = {row['mean']:.3f}, [{row['ci'][0]:.3f}, {row['ci'][1]:.3f}], {stopped_text(row)})"
    return f" ({stopped_text(row)})" if "stopped" in row else ""


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


def report_text(sweep: dict, config: SweepConfig, label: str) -> str:
    """Header (the sweep's ``label``, config, data, completeness, stopping rule), the table and verdicts recomputed
    from the per-run numbers under ``config`` (the sweep's own, as ``load_sweep`` reads it)."""
    cfg, data = sweep["config"], sweep.get("data", {})
    t = cfg["train"]
    runs = sweep["runs"]
    arms = {arm: stats.arm_statistics(runs.get(arm, {})) for arm in cfg["arms"]}
    rows = config.verdicts(runs)
    done = sum(len(r) for r in runs.values())
    looks = list(config.plan_looks)
    head = [f"C7 probe sweep: {done} (arm, seed) runs finished, {len(sweep['missing'])} more asked for by the "
            f"stopping rule; complete: {str(not sweep['missing']).lower()}", f"sweep: {label}",
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
    return "\n".join(head) + "\n" + markdown_table(t["seq_len"], cfg["eval"]["multipliers"], arms, rows,
                                                   sweep.get("hosts", ["?"]))


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
