"""The files of a probe run folder and the rule that guards them: a finished run is evidence.

A run folder holds ``train.json``, ``model.safetensors`` and ``checkpoint.pt`` (``accum probe train``), then
``eval.json`` (``probe eval``, or the sweep) and ``theory.json`` (``probe theory``).  No command replaces a finished
run's file unless it is given ``--overwrite`` (``check_new_output``, ``check_train_out``); every check here runs
before any data is read or anything is written, and a damaged file is one error naming it.  ``run_preset`` says which
preset a finished run was trained from (``probe eval``'s defaults).
"""

from __future__ import annotations

from pathlib import Path

from accum.probes.bridge import THEORY_RESULTS
from accum.probes.io import read_json
from accum.probes.presets import PRESETS
from accum.probes.sweep import EVAL_RESULTS
from accum.probes.train import CHECKPOINT, RESULTS, WEIGHTS, TrainConfig, check_weights, resume_state
from accum.simulations.params import ParamError
from accum.simulations.results import ResultError


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
    check_weights(run_dir / WEIGHTS)  # a damaged file is named before any data is read
    return cfg


#: the files of a run folder (``probe train`` writes the first three, ``probe eval`` and ``probe theory`` the others)
RUN_FILES = (RESULTS, WEIGHTS, CHECKPOINT, EVAL_RESULTS, THEORY_RESULTS)


def check_new_output(path: Path, option: str, overwrite: bool) -> None:
    """Refuse (``ParamError`` naming ``option``) to replace the result file ``path`` unless ``overwrite``
    (--overwrite): a finished run's files are evidence."""
    if Path(path).is_file() and not overwrite:
        raise ParamError(f"{option} {path}: the file exists; results are never rewritten: give another path, or pass "
                         "--overwrite to replace it")


def check_train_out(out: Path, cfg: TrainConfig, overwrite: bool) -> list[Path]:
    """Before any work: what training ``cfg`` into ``out`` may do.  Without ``overwrite`` a folder holding a finished
    run (train.json finished, weights, eval.json or theory.json) is refused, and so is a checkpoint that cannot
    resume ``cfg`` (damaged, or of another config): ``ParamError`` naming --out, and [] (an unfinished run resumes).
    With it, the run files there (``RUN_FILES``), which the caller removes before training."""
    present = [out / name for name in RUN_FILES if (out / name).exists()]
    if overwrite:
        return present
    finished = [p.name for p in present if p.name in (WEIGHTS, EVAL_RESULTS, THEORY_RESULTS)]
    if (out / RESULTS).exists():
        try:
            saved = read_json(out / RESULTS)
            if not isinstance(saved, dict):
                raise ValueError("not an object")
            if saved.get("finished"):
                finished.insert(0, f"{RESULTS} finished at step {saved.get('step')}")
        except (ValueError, OSError):
            finished.insert(0, f"a {RESULTS} that is not a training record")
    if finished:
        raise ParamError(f"--out {out} holds a finished run ({', '.join(finished)}); a finished run is never "
                         "rewritten: give another --out, or pass --overwrite to replace it")
    try:
        resume_state(out / CHECKPOINT, cfg)
    except ResultError as err:
        raise ParamError(f"--out {out}: {err}; give another --out, or pass --overwrite to start over") from None
    return []


def run_preset(run_dir: Path, cfg: TrainConfig) -> tuple[str, str]:
    """(name, why) of the preset a finished run was trained from: the one its train.json records, else the first
    whose training values (every field the preset sets) the run's config has, else cpu."""
    recorded = read_json(run_dir / RESULTS).get("preset")
    if recorded in PRESETS:
        return recorded, "recorded in its train.json"
    for name, design in PRESETS.items():
        if all(getattr(cfg, k) == (tuple(v) if isinstance(v, list) else v) for k, v in design["train"].items()):
            return name, "the preset whose training values the run has"
    return "cpu", "the default: the run matches no preset"


def describe(err: Exception) -> str:
    """What was wrong with a record, in words: a missing key by its name, a bound by the reader's message."""
    if isinstance(err, (KeyError, TypeError)):
        return f"no {err.args[0]!r} entry" if isinstance(err, KeyError) and err.args else "an entry missing or of the wrong type"
    return str(err)
