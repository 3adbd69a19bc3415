"""A sweep keeps its design: design.json, refusals of another design, --redesign, the documented commands
reproducing sweep.json byte for byte, finished runs never rewritten, and the one job runner (pool, Dask)."""

import json

import pytest
import torch

from accum.cli import main
from accum.probes.presets import PRESETS
from accum.probes.sweepconfig import DESIGN, SweepConfig, design_difference

torch.set_num_threads(1)

TINY_DESIGN = ["--preset", "tiny", "--threads", "1", "--no-progress"]


TIMINGS = ("train_seconds", "eval_seconds", "tokens_per_second", "run_seconds", "table_markdown")


def sweep(out, *options) -> int:
    return main(["probe", "sweep", "--out", str(out), *options])


def without_timings(value):
    """A sweep.json's content less what measures wall time (and the Markdown table, which prints a throughput)."""
    if isinstance(value, dict):
        return {k: without_timings(v) for k, v in value.items() if k not in TIMINGS}
    if isinstance(value, list):
        return [without_timings(v) for v in value]
    return value


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The ``tiny`` preset's sweep, run once by its documented command (real stdlib text, char tokens)."""
    out = tmp_path_factory.mktemp("tiny") / "sweep"
    assert sweep(out, *TINY_DESIGN) == 0
    return out


def test_the_documented_commands_reproduce_sweep_json_byte_for_byte(tiny, tmp_path, capsys):
    """Rerunning the command (or resuming with no design option) trains nothing and leaves sweep.json, sweep.md and
    design.json as they were, byte for byte; a fresh folder gives the same numbers and verdicts (everything but the
    wall times)."""
    before = {name: (tiny / name).read_bytes() for name in ("sweep.json", "sweep.md", DESIGN)}
    stamps = {name: (tiny / name).stat().st_mtime_ns for name in before}
    assert sweep(tiny, *TINY_DESIGN) == 0 and sweep(tiny, "--threads", "1") == 0
    assert {name: (tiny / name).read_bytes() for name in before} == before
    assert {name: (tiny / name).stat().st_mtime_ns for name in before} == stamps
    fresh = tmp_path / "again"
    assert sweep(fresh, *TINY_DESIGN) == 0
    assert without_timings(json.loads((fresh / "sweep.json").read_text())) == without_timings(json.loads(before["sweep.json"]))
    assert (fresh / DESIGN).read_bytes() == before[DESIGN]
    record = json.loads(before[DESIGN])
    assert SweepConfig.from_dict(record["design"]).to_dict() == record["design"]
    assert [c["id"] for c in record["claims"]] == [c["id"] for c in SweepConfig.from_dict(record["design"]).claims()]


@pytest.mark.parametrize("options, named", [
    (["--seeds", "0", "1", "2", "3"], "seeds: [0, 1, 2] recorded, [0, 1, 2, 3] asked"),
    (["--steps", "41"], "train.steps: 40 recorded, 41 asked"),
    (["--arms", "rope", "random"], "arms"),
    (["--looks", "3"], None),  # one look at every seed is the recorded design: no difference
    (["--lr", "0.003"], "train.lr: 0.002 recorded, 0.003 asked"),
])
def test_another_design_is_refused_naming_the_difference(tiny, options, named, capsys):
    record = (tiny / DESIGN).read_bytes()
    sweep_json = (tiny / "sweep.json").read_bytes()
    status = sweep(tiny, *TINY_DESIGN, *options)
    err = capsys.readouterr().err
    if named is None:
        assert status == 0
    else:
        assert status == 2 and err.count("\n") == 1 and named in err and "--redesign" in err and "--out" in err, err
    assert (tiny / DESIGN).read_bytes() == record and (tiny / "sweep.json").read_bytes() == sweep_json


def test_redesign_records_a_new_design_of_the_same_runs_and_never_rewrites_a_finished_run(tiny, tmp_path, capsys):
    """--redesign with another alpha: recorded, no run redone; --redesign with another training config: refused,
    because the finished runs of the old config would be rewritten."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(tiny, copy)
    stamp = (copy / "rope" / "seed0" / "train.json").stat().st_mtime_ns
    assert sweep(copy, *TINY_DESIGN, "--alpha", "0.1", "--redesign") == 0
    assert json.loads((copy / DESIGN).read_text())["design"]["alpha"] == 0.1
    assert (copy / "rope" / "seed0" / "train.json").stat().st_mtime_ns == stamp
    capsys.readouterr()
    assert sweep(copy, *TINY_DESIGN, "--alpha", "0.1", "--steps", "41", "--redesign") == 2
    err = capsys.readouterr().err
    assert "holds a finished run of another config" in err and "--out" in err and err.count("\n") == 1, err
    assert (copy / "rope" / "seed0" / "train.json").stat().st_mtime_ns == stamp


def test_a_corrupt_design_record_is_named(tmp_path, capsys):
    (tmp_path / DESIGN).write_text("[]")
    assert sweep(tmp_path, *TINY_DESIGN) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / DESIGN} is not a sweep design" in err and err.count("\n") == 1


def test_design_difference_names_the_first_differing_field():
    assert design_difference({"a": {"b": 1, "c": 2}}, {"a": {"b": 1, "c": 3}}) == "a.c: 2 recorded, 3 asked"
    assert design_difference({"a": [1, 2]}, {"a": [1, 2]}) is None
    assert design_difference({"a": 1}, {"a": 1, "b": 2}) == "b: null recorded, 2 asked"


def test_pool_and_dask_workers_give_the_same_sweep_as_one_process(tiny, tmp_path):
    """The one job runner: two local worker processes, and a two-worker Dask cluster, give the same sweep.json as one
    process (every number and verdict; wall times aside)."""
    import distributed

    want = without_timings(json.loads((tiny / "sweep.json").read_text()))
    assert sweep(tmp_path / "pool", *TINY_DESIGN, "--workers", "2") == 0
    assert without_timings(json.loads((tmp_path / "pool" / "sweep.json").read_text())) == want
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None) as cluster:
        assert sweep(tmp_path / "dask", *TINY_DESIGN, "--scheduler", cluster.scheduler_address) == 0
    assert without_timings(json.loads((tmp_path / "dask" / "sweep.json").read_text())) == want


def test_the_presets_are_valid_designs():
    """Every preset builds a SweepConfig, and the cpu design judges the claims REPORT.md states."""
    from accum.probes.cli import sweep_config
    import argparse

    for name in PRESETS:
        args = argparse.Namespace(**{k: None for k in ("eval_seed", "arms", "variant", "seeds", "looks", "alpha",
                                                       "analysis_multiplier", "analysis_windows")}, preset=name)
        for field in ("arm", "seed"):
            setattr(args, field, None)
        from dataclasses import fields as dc_fields

        from accum.probes.evaluate import EvalConfig
        from accum.probes.train import TrainConfig
        for f in (*dc_fields(TrainConfig), *dc_fields(EvalConfig)):
            setattr(args, f.name, None)
        cfg = sweep_config(args, {})
        assert cfg.arms and cfg.claims() is not None
        if name == "cpu":
            ids = {c["id"] for c in cfg.claims()}
            assert {"random_beats_rope", "learned_stays_near_1x", "qkv_beats_qk", "qkv_beats_qk:random_qkv",
                    "qkv_beats_qk:random_qkv_indep", "learned_stays_near_1x:learned_key", "alibi_flat",
                    "qkv_beats_qk:learned_qkv_author"} <= ids
            assert max(cfg.eval.multipliers) * cfg.train.seq_len == 65536 and cfg.eval.n_tokens == 2 * 65536
            assert cfg.paper_plan_looks == (6, 10, 15)
            assert {"paper:random_beats_rope", "paper:learned_near_1x:learned", "paper:alibi_flat",
                    "paper:rotation_degrades_beyond_nope:rope", "paper:qkv_beats_qk:random_qkv_indep"} <= ids
        if name == "cpu-author":
            (arm,) = cfg.arms
            run = cfg.run_config(arm, 0)
            assert (run.arm, run.learned_token, run.decay, run.init, run.output) == ("learned", "key", "all", "torch",
                                                                                     "untied")
            assert (run.angle_lr_scale, run.angle_weight_decay, run.weight_decay) == (1.0, 0.1, 0.1)
            assert len(cfg.seeds) >= 6 and {c["id"] for c in cfg.claims()} == {
                f"rotation_only_degrades:{arm}", f"paper:learned_near_1x:{arm}"}
