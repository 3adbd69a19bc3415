"""``accum probe train|eval|sweep``: the C7 probes on the command line.

``accum/cli.py`` registers this module lazily: it calls ``add_subparser(subparsers)`` and dispatches the
parsed namespace to ``run(args)``; ``python -m accum.probes.cli ...`` runs the same commands standalone.

    accum probe train --arm learned --out results/probes/learned [--steps 600 ...]
    accum probe eval  --run results/probes/learned [--multipliers 1 2 4 ...] [--json PATH]
    accum probe sweep --out results/probes [--arms nope rope ...] [--steps 600 ...]

Every TrainConfig / EvalConfig field is an option (``--batch-size`` for ``batch_size``), defaults as in
the dataclasses; ``--threads`` (default 2) and ``--device`` (cpu, cuda, cuda:N) are common to all.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import fields
from pathlib import Path

import torch

from accum.probes.evaluate import EvalConfig
from accum.probes.io import read_json, write_json
from accum.probes.model import ARMS, check_int
from accum.probes.sweep import EVAL_RESULTS, SweepConfig, check_analysis, evaluate_run, run_sweep
from accum.probes.train import WEIGHTS, TrainConfig, load_data, train
from accum.simulations.params import ParamError
from accum.simulations.results import ResultError, check_output_path


def _add_dataclass_options(parser: argparse.ArgumentParser, cls, skip: tuple[str, ...] = ()) -> None:
    for f in fields(cls):
        if f.name in skip:
            continue
        flag = "--" + f.name.replace("_", "-")
        if isinstance(f.default, tuple):
            parser.add_argument(flag, type=int, nargs="+", default=list(f.default), help=f"default {list(f.default)}")
        else:
            parser.add_argument(flag, type=type(f.default), default=f.default, help=f"default {f.default!r}")


def _from_args(cls, args: argparse.Namespace, **override):
    values = {f.name: getattr(args, f.name) for f in fields(cls) if hasattr(args, f.name)}
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in {**values, **override}.items()}
    return cls(**values)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    parser.add_argument("--data-dir", type=Path, default=None, help="data cache (default data/ in the repository)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def add_subparser(subparsers) -> argparse.ArgumentParser:
    """Add ``probe`` with sub-commands train, eval, sweep to an argparse ``subparsers`` object."""
    probe = subparsers.add_parser("probe", help="C7 probes: train / evaluate small transformers per arm",
                                  description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = probe.add_subparsers(dest="probe_command", required=True)
    p_train = sub.add_parser("train", help="train one arm at L_train (resumes from OUT/checkpoint.pt)")
    _add_dataclass_options(p_train, TrainConfig)
    p_train.add_argument("--out", type=Path, required=True, help="run folder")
    _common(p_train)
    p_eval = sub.add_parser("eval", help="perplexity at multiples of L_train + attention analysis of a run")
    p_eval.add_argument("--run", dest="run_dir", type=Path, required=True, help="folder of a finished `probe train`")
    _add_dataclass_options(p_eval, EvalConfig)
    p_eval.add_argument("--analysis-multiplier", type=int, default=4)
    p_eval.add_argument("--analysis-windows", type=int, default=4)
    p_eval.add_argument("--json", type=Path, default=None, help=f"output (default RUN/{EVAL_RESULTS})")
    _common(p_eval)
    p_sweep = sub.add_parser("sweep", help="train + evaluate every arm, write sweep.json and sweep.md")
    _add_dataclass_options(p_sweep, TrainConfig, skip=("arm",))
    _add_dataclass_options(p_sweep, EvalConfig, skip=("seed",))
    p_sweep.add_argument("--eval-seed", type=int, default=0)
    p_sweep.add_argument("--arms", nargs="+", default=list(ARMS), help=f"subset of {' '.join(ARMS)}")
    p_sweep.add_argument("--analysis-multiplier", type=int, default=4)
    p_sweep.add_argument("--analysis-windows", type=int, default=4)
    p_sweep.add_argument("--out", type=Path, default=Path("results/probes"))
    _common(p_sweep)
    probe.set_defaults(run=run)
    return probe


MAX_THREADS = 256
ANALYSIS_FLAGS = {"analysis_multiplier": "--analysis-multiplier", "analysis_windows": "--analysis-windows"}


def flag(name: str) -> str:
    """The command-line flag of a config field: ``batch_size`` -> ``--batch-size``."""
    return "--" + name.replace("_", "-")


def flag_message(err: Exception, flags: dict[str, str]) -> str:
    """``err``'s message with config field names written as the flags that set them.

    A field name with an underscore is replaced wherever it stands as a word; a plain one (arm, seed, steps)
    only as the message's first word, where the config checks put the name of the field they refuse.
    """
    text = str(err)
    first = re.match(r"\w+", text)
    if first and first.group() in flags:
        text = flags[first.group()] + text[first.end():]
    for name, option in flags.items():
        if "_" in name:
            text = re.sub(rf"(?<![\w-]){name}\b", option, text)
    return text


def command_flags(command: str) -> dict[str, str]:
    """Field name -> flag for the errors of ``accum probe COMMAND`` (eval: its own options only; the
    training config of ``--run`` is not a flag there)."""
    evaluation = {f.name: flag(f.name) for f in fields(EvalConfig)}
    if command == "train":
        return {f.name: flag(f.name) for f in fields(TrainConfig)}
    if command == "eval":
        return {**evaluation, **ANALYSIS_FLAGS}
    return {**{f.name: flag(f.name) for f in fields(TrainConfig)}, **evaluation, "seed": "--seed",
            "arms": "--arms", **ANALYSIS_FLAGS}


def build(cls, args: argparse.Namespace, flags: dict[str, str], **override):
    """``cls`` from the parsed options; a refused value is a ``ParamError`` naming its flag."""
    try:
        return _from_args(cls, args, **override)
    except ValueError as err:
        raise ParamError(flag_message(err, flags)) from None


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
    """--threads in [1, MAX_THREADS], --device, --data-dir (a writable cache folder); returns the device."""
    check_int("--threads", args.threads, 1, MAX_THREADS)
    if args.data_dir is not None:
        check_output_path(args.data_dir, "--data-dir", directory=True)
    return check_device(args.device)


def finished_run_config(run_dir: Path) -> TrainConfig:
    """The training config of the finished ``accum probe train`` in ``run_dir``; ``ParamError`` naming --run."""
    record = run_dir / "train.json"
    if not record.is_file():
        raise ParamError(f"--run {run_dir}: no train.json there; give the folder of an `accum probe train`")
    try:
        saved = read_json(record)
        cfg = TrainConfig.from_dict(saved["config"])
    except (ValueError, KeyError, TypeError) as err:
        raise ParamError(f"--run {run_dir}: train.json is not an `accum probe train` record ({err})") from None
    if not saved.get("finished") or not (run_dir / WEIGHTS).is_file():
        raise ParamError(f"--run {run_dir}: training is not finished (step {saved.get('step')} of {cfg.steps}); "
                         "rerun `accum probe train` with the same options to resume it")
    return cfg


def run_train(args: argparse.Namespace, device: str) -> None:
    cfg = build(TrainConfig, args, command_flags("train"))
    check_output_path(args.out, "--out", directory=True)
    res = train(cfg, args.out, cache_dir=args.data_dir, device=device, threads=args.threads,
                progress=not args.no_progress)
    print(f"{args.out}: {res['step']} steps, {res['tokens_seen']} tokens, loss {res['final_train_loss']:.4f}")


def run_eval(args: argparse.Namespace, device: str) -> None:
    eval_cfg = build(EvalConfig, args, command_flags("eval"))
    check_analysis(args.analysis_multiplier, args.analysis_windows)  # a ValueError; run() names the flag
    train_cfg = finished_run_config(args.run_dir)
    if args.json is not None:
        check_output_path(args.json, "--json")
    data, _ = load_data(train_cfg, args.data_dir)
    res = evaluate_run(args.run_dir, data, eval_cfg, args.analysis_multiplier, args.analysis_windows, device,
                       args.threads)
    write_json(args.json or args.run_dir / EVAL_RESULTS, res)
    for r in res["lengths"]:
        print(f"L={r['length']:6d}  ppl {r['ppl']:.3f}")


def run_probe_sweep(args: argparse.Namespace, device: str) -> None:
    flags = command_flags("sweep")
    train_cfg = build(TrainConfig, args, flags, arm="rope")
    eval_cfg = build(EvalConfig, args, {**flags, "seed": "--eval-seed"}, seed=args.eval_seed)
    cfg = SweepConfig(train=train_cfg, eval=eval_cfg, arms=tuple(args.arms),
                      analysis_multiplier=args.analysis_multiplier, analysis_windows=args.analysis_windows)
    check_output_path(args.out, "--out", directory=True)
    res = run_sweep(cfg, args.out, cache_dir=args.data_dir, device=device, threads=args.threads,
                    progress=not args.no_progress)
    print(res["table_markdown"], end="")


RUNNERS = {"train": run_train, "eval": run_eval, "sweep": run_probe_sweep}


def run(args: argparse.Namespace) -> int:
    """Execute a parsed ``probe`` command: 0 on success; 2 on bad input, 1 if the run itself failed
    (one line on stderr, ``accum probe COMMAND: error: ...``, naming the flag where there is one)."""
    command = args.probe_command
    try:
        device = check_common(args)
        torch.set_num_threads(args.threads)
        RUNNERS[command](args, device)
    except (ParamError, ResultError) as err:  # already phrased with flags
        return report(command, str(err), 2)
    except ValueError as err:  # a check below the command line, phrased with field names
        return report(command, flag_message(err, command_flags(command)), 2)
    except (RuntimeError, OSError) as err:
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
