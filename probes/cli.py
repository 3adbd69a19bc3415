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
import sys
from dataclasses import fields
from pathlib import Path

import torch

from accum.probes.evaluate import EvalConfig
from accum.probes.io import read_json, write_json
from accum.probes.model import ARMS
from accum.probes.sweep import EVAL_RESULTS, SweepConfig, evaluate_run, run_sweep
from accum.probes.train import TrainConfig, load_data, train
from accum.simulations.results import check_output_path


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


def check_device(device: str) -> str:
    """Validate --device: 'cpu', or 'cuda' / 'cuda:N' with a visible GPU."""
    if device == "cpu":
        return device
    if device == "cuda" or (device.startswith("cuda:") and device[5:].isdigit()):
        if not torch.cuda.is_available():
            raise ValueError(f"--device {device}: no CUDA device is visible to torch {torch.__version__}")
        return device
    raise ValueError(f"--device must be cpu, cuda or cuda:N, got {device!r}")


def run(args: argparse.Namespace) -> int:
    """Execute a parsed ``probe`` command; 0 on success, 2 on bad input (message on stderr)."""
    try:
        if not isinstance(args.threads, int) or args.threads < 1:
            raise ValueError(f"--threads must be an integer >= 1, got {args.threads!r}")
        device = check_device(args.device)
        if args.probe_command == "eval":
            if not (args.run_dir / "train.json").is_file():
                raise ValueError(f"--run {args.run_dir}: no train.json there; give the folder of an `accum probe train`")
            if args.json:
                check_output_path(args.json, "--json")
        else:
            check_output_path(args.out, "--out", directory=True)
        torch.set_num_threads(args.threads)
        progress = not args.no_progress
        if args.probe_command == "train":
            res = train(_from_args(TrainConfig, args), args.out, cache_dir=args.data_dir, device=device,
                        threads=args.threads, progress=progress)
            print(f"{args.out}: {res['step']} steps, {res['tokens_seen']} tokens, loss {res['final_train_loss']:.4f}")
        elif args.probe_command == "eval":
            tcfg = TrainConfig.from_dict(read_json(args.run_dir / "train.json")["config"])
            data, _ = load_data(tcfg, args.data_dir)
            res = evaluate_run(args.run_dir, data, _from_args(EvalConfig, args), args.analysis_multiplier,
                               args.analysis_windows, device, args.threads)
            write_json(args.json or args.run_dir / EVAL_RESULTS, res)
            for r in res["lengths"]:
                print(f"L={r['length']:6d}  ppl {r['ppl']:.3f}")
        else:
            cfg = SweepConfig(train=_from_args(TrainConfig, args, arm="rope"),
                              eval=_from_args(EvalConfig, args, seed=args.eval_seed), arms=tuple(args.arms),
                              analysis_multiplier=args.analysis_multiplier, analysis_windows=args.analysis_windows)
            res = run_sweep(cfg, args.out, cache_dir=args.data_dir, device=device, threads=args.threads,
                            progress=progress)
            print(res["table_markdown"], end="")
    except (ValueError, RuntimeError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="accum")
    add_subparser(parser.add_subparsers(dest="command", required=True))
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main(["probe", *sys.argv[1:]]))
