"""A finished run is evidence: every `accum probe` command, run on a copy of a results folder, leaves every file of it
byte for byte as it was -- unless it is given the flag that names the overwrite (``--overwrite``; ``--redesign``
for a sweep's design) -- and a refused command writes nothing at all.  Damaged run files (weights, checkpoints) are
one line naming the file, exit 2, before any work.

Two folders are used: the ``tiny`` preset's sweep with its weights (so that the commands that read weights get past
that check), trained once for the module, and a copy of the committed ``probes/results/cpu`` sweep (JSON only)."""

from __future__ import annotations

import argparse
import json
import shutil
import struct
from pathlib import Path

import pytest
import torch

from accum.cli import main
from accum.probes import cli as probe_cli
from accum.probes.cliargs import REPOSITORY
from accum.probes.presets import PRESETS
from accum.probes.train import TrainConfig, train

torch.set_num_threads(1)

TINY = ["--preset", "tiny", "--threads", "1", "--no-progress"]
COMMITTED = REPOSITORY / "probes" / "results" / "cpu"


def probe_commands() -> set[str]:
    """Every `accum probe` sub-command, from the parser itself (a new command must be added to ``CASES``)."""
    parser = argparse.ArgumentParser()
    probe = probe_cli.add_subparser(parser.add_subparsers())
    return set(next(a for a in probe._actions if isinstance(a, argparse._SubParsersAction)).choices)


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder``, by relative path, with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    """The tiny sweep (rope, random, alibi x seeds 0-2) with weights, a theory.json for rope/seed0, and a finished
    ``learned`` run (for `probe tables`) beside it."""
    root = tmp_path_factory.mktemp("evidence")
    assert main(["probe", "sweep", "--out", str(root / "sweep"), *TINY]) == 0
    assert main(["probe", "theory", "--run", str(root / "sweep" / "rope" / "seed0"), "--windows", "2", "--streams", "8",
                 "--threads", "1"]) == 0
    assert main(["probe", "train", "--arm", "learned", "--out", str(root / "learned"), *TINY]) == 0
    return root


@pytest.fixture()
def copy(results, tmp_path) -> Path:
    """A fresh copy of ``results`` (so each case starts from the same bytes)."""
    shutil.copytree(results, tmp_path / "r")
    return tmp_path / "r"


def run0(copy: Path) -> Path:
    return copy / "sweep" / "rope" / "seed0"


#: (command, argv after `accum probe` with {r} the copy's root, exit status): each leaves the copy byte-identical
UNCHANGED = [
    ("train", ["train", "--arm", "rope", "--seed", "0", "--out", "{r}/sweep/rope/seed0", *TINY], 2),
    ("train", ["train", "--arm", "rope", "--seed", "0", "--steps", "41", "--out", "{r}/sweep/rope/seed0", *TINY], 2),
    ("train", ["train", "--arm", "learned", "--out", "{r}/learned", *TINY], 2),
    ("eval", ["eval", "--run", "{r}/sweep/rope/seed0", "--threads", "1"], 2),
    ("eval", ["eval", "--run", "{r}/learned", "--json", "{r}/sweep/alibi/seed1/eval.json", "--threads", "1"], 2),
    ("theory", ["theory", "--run", "{r}/sweep/rope/seed0", "--windows", "2", "--streams", "8", "--threads", "1"], 0),
    ("theory", ["theory", "--run", "{r}/sweep/rope/seed0", "{r}/sweep/rope/seed1", "--windows", "2", "--threads", "1"],
     2),  # rope/seed1 is fine, rope/seed0's theory.json is made stale below: refused before any work
    ("tables", ["tables", "--runs", "{r}/learned", "--json", "{r}/sweep/rope/seed0/eval.json", "--windows", "2",
                "--top", "8", "--threads", "1"], 2),
    ("sweep", ["sweep", "--out", "{r}/sweep", "--threads", "1", "--no-progress"], 0),  # complete: redoes nothing
    ("sweep", ["sweep", "--out", "{r}/sweep", *TINY, "--steps", "41"], 2),
    ("sweep", ["sweep", "--out", "{r}/sweep", *TINY, "--steps", "41", "--redesign"], 2),  # runs of another config
    ("report", ["report", "--sweep", "{r}/sweep/sweep.json"], 0),
    ("report", ["report", "--sweep", "{r}/sweep/sweep.json", "--summary"], 0),
]


def test_every_probe_command_is_covered():
    assert {command for command, _, _ in UNCHANGED} == probe_commands()
    assert {command for command, _ in OVERWRITTEN} == probe_commands() - {"report", "sweep"}  # they never overwrite


@pytest.mark.parametrize("case", range(len(UNCHANGED)), ids=[" ".join(c[1][:4]) for c in UNCHANGED])
def test_a_command_leaves_finished_runs_as_they_were(case, copy, capsys):
    command, argv, status = UNCHANGED[case]
    if "{r}/sweep/rope/seed1" in argv:  # a stale theory.json: its run's eval.json is newer
        stale = run0(copy) / "eval.json"
        stale.touch()
    before = snapshot(copy)
    got = main(["probe", *(a.format(r=copy) for a in argv)])
    err = capsys.readouterr().err
    assert got == status, err
    if status == 2:
        assert err.startswith(f"accum probe {command}: error: ") and err.count("\n") == 1, err
        assert "--overwrite" in err or "--out" in err or "--redesign" in err, err
    assert snapshot(copy) == before


#: (command, argv) with the flag that names the overwrite, and the file it replaces
OVERWRITTEN = [
    ("train", ["train", "--arm", "rope", "--seed", "0", "--steps", "41", "--out", "{r}/sweep/rope/seed0", *TINY,
               "--overwrite"]),
    ("eval", ["eval", "--run", "{r}/sweep/rope/seed0", "--threads", "1", "--overwrite"]),
    ("theory", ["theory", "--run", "{r}/sweep/rope/seed0", "--windows", "2", "--streams", "8", "--threads", "1",
                "--overwrite"]),
    ("tables", ["tables", "--runs", "{r}/learned", "--json", "{r}/sweep/rope/seed0/eval.json", "--windows", "2",
                "--top", "8", "--threads", "1", "--overwrite"]),
]


@pytest.mark.parametrize("case", range(len(OVERWRITTEN)), ids=[c[0] for c in OVERWRITTEN])
def test_the_overwrite_flag_is_what_replaces_a_finished_run(case, copy, capsys):
    command, argv = OVERWRITTEN[case]
    before = snapshot(copy)
    assert main(["probe", *(a.format(r=copy) for a in argv)]) == 0, capsys.readouterr().err
    after = snapshot(copy)
    changed = {k for k in before if after.get(k) != before[k]}
    outside = {k for k in changed | set(after) - set(before) if not k.startswith("sweep/rope/seed0/")}
    assert changed and not outside, (changed, outside)
    if command == "train":  # the old run's evaluation and theory are gone with it: nothing describes another model
        folder = "sweep/rope/seed0/"
        assert json.loads(after[folder + "train.json"])["config"]["steps"] == 41
        assert folder + "eval.json" not in after and folder + "theory.json" not in after


def test_the_committed_results_are_never_rewritten(tmp_path, capsys):
    """A copy of the committed cpu sweep (JSON only): the tiny design with --redesign (which rewrote design.json
    before it was refused), training into a finished run's folder, evaluating it and its theory are all refused,
    and the report reads it; every file stays as it was."""
    copy = tmp_path / "cpu"
    shutil.copytree(COMMITTED, copy)
    before = snapshot(copy)
    run = copy / "rope" / "seed0"
    refused = [
        ["sweep", "--out", copy, *TINY, "--redesign"],
        ["sweep", "--out", copy, *TINY],
        ["train", "--arm", "rope", "--out", run, *TINY],
        ["train", "--arm", "rope", "--out", run, "--threads", "1", "--no-progress"],
        ["eval", "--run", run, "--threads", "1"],
        ["eval", "--run", run, "--threads", "1", "--overwrite"],  # no weights are committed: nothing to evaluate
        ["theory", "--run", run, "--threads", "1"],
        ["tables", "--runs", copy / "learned" / "seed0", "--threads", "1"],
    ]
    for argv in refused:
        assert main(["probe", *map(str, argv)]) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(copy) in err, err
    assert main(["probe", "report", "--sweep", str(copy / "sweep.json")]) == 0
    assert snapshot(copy) == before


@pytest.mark.parametrize("damage", ["truncated", "zeroed", "huge header", "other tensors"])
def test_damaged_weights_are_named(damage, copy, capsys):
    """`probe eval`, `probe theory` and `probe tables` on a run whose model.safetensors is damaged: one line naming
    the file, exit 2, nothing written."""
    weights = run0(copy) / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes({"truncated": data[:len(data) // 2], "zeroed": bytes(len(data)),
                         "huge header": struct.pack("<Q", 2**62) + data[8:],
                         "other tensors": (copy / "learned" / "model.safetensors").read_bytes()}[damage])
    (run0(copy) / "eval.json").unlink()
    before = snapshot(copy)
    for argv in (["eval", "--run", run0(copy), "--threads", "1"],
                 ["eval", "--run", run0(copy), "--json", copy / "e.json", "--threads", "1"],
                 ["theory", "--run", run0(copy), "--overwrite", "--threads", "1"]):
        assert main(["probe", *map(str, argv)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{weights}: not " in err, err
    assert snapshot(copy) == before


@pytest.mark.parametrize("damage", ["truncated", "zeroed", "junk"])
def test_a_damaged_checkpoint_is_named_before_resuming(damage, tmp_path, capsys):
    """An interrupted run whose checkpoint.pt is damaged: `probe train` (resuming it) and `probe sweep` (whose run it
    is) are one line naming the file, exit 2, and write nothing; --overwrite starts it over."""
    cfg = TrainConfig(**{**PRESETS["tiny"]["train"], "arm": "rope", "seed": 0})
    run = tmp_path / "sweep" / "rope" / "seed0"
    train(cfg, run, progress=False, threads=1, stop_after=20)
    checkpoint = run / "checkpoint.pt"
    data = checkpoint.read_bytes()
    checkpoint.write_bytes({"truncated": data[:len(data) // 3], "zeroed": bytes(len(data)),
                            "junk": b"PK\x03\x04" + bytes(range(256)) * 8}[damage])
    before = snapshot(tmp_path)
    for argv in (["train", "--arm", "rope", "--out", run, *TINY], ["sweep", "--out", tmp_path / "sweep", *TINY]):
        assert main(["probe", *map(str, argv)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{checkpoint}: not " in err, err
        assert snapshot(tmp_path) == before
    assert main(["probe", "train", "--arm", "rope", "--out", str(run), *TINY, "--overwrite"]) == 0
    assert json.loads((run / "train.json").read_text())["finished"]


def test_a_sweep_without_1x_is_refused_before_training(tmp_path, capsys):
    """--multipliers without 1 trained every run, then failed in the statistics (every ratio is to 1x)."""
    assert main(["probe", "sweep", "--out", str(tmp_path / "s"), *TINY, "--multipliers", "3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--multipliers must include 1" in err and "[3]" in err, err
    assert not (tmp_path / "s").exists()


def test_eval_defaults_are_the_runs_preset(results, tmp_path, capsys):
    """`probe eval --run` with no option evaluates as its --help says: the run's preset (tiny: 1x 2x 4x on 128
    tokens, analysis windows 2), recorded in train.json, or found from the run's training values when the record
    predates it; --preset chooses another."""
    run = tmp_path / "learned"
    shutil.copytree(results / "learned", run)
    assert json.loads((run / "train.json").read_text())["preset"] == "tiny"
    tiny = PRESETS["tiny"]
    for name in ("e1.json", "e2.json"):
        assert main(["probe", "eval", "--run", str(run), "--json", str(tmp_path / name), "--threads", "1"]) == 0
        assert "the tiny preset's evaluation" in capsys.readouterr().out
        saved = json.loads((tmp_path / name).read_text())
        assert saved["eval_config"]["multipliers"] == list(tiny["eval"]["multipliers"])
        assert saved["eval_config"]["n_tokens"] == tiny["eval"]["n_tokens"]
        assert saved["analysis_config"] == {"multiplier": 4, "windows": tiny["sweep"]["analysis_windows"]}
        record = json.loads((run / "train.json").read_text())
        record.pop("preset", None)  # a run trained before train.json recorded its preset
        (run / "train.json").write_text(json.dumps(record))
    config = TrainConfig.from_dict(json.loads((run / "train.json").read_text())["config"])
    assert probe_cli.run_preset(run, config) == ("tiny", "the preset whose training values the run has")
    parser = argparse.ArgumentParser()
    probe = probe_cli.add_subparser(parser.add_subparsers())
    eval_help = next(a for a in probe._actions if isinstance(a, argparse._SubParsersAction)).choices["eval"].format_help()
    assert "the run's own preset" in " ".join(eval_help.split()) and "tiny preset 1 2 4" in " ".join(eval_help.split())
