"""`accum probe`: every bad command line is one line naming its flag, exit 2, before any data, training or file."""

from pathlib import Path

import pytest
import torch

from accum.cli import main
from accum.probes import cli as probe_cli
from accum.probes import sweep as probe_sweep
from accum.probes.data import char_data, eval_windows, window_count
from accum.probes.evaluate import EvalConfig
from accum.probes.sweepconfig import SweepConfig
from accum.probes.train import TrainConfig, train

torch.set_num_threads(1)

TEXT = "It was the best of times, it was the worst of times, it was the age of wisdom.\n" * 120
DATA = char_data(TEXT, 0.2)
TINY = ["--seq-len", "16", "--batch-size", "4", "--d-model", "16", "--n-heads", "2", "--n-layers", "1",
        "--steps", "2", "--data-source", "stdlib", "--tokenizer", "char", "--threads", "1", "--no-progress"]

# argv (after `accum probe`) and fragments of the one error line; {tmp} is the test's folder.
REFUSED = {
    "train seq-len too short": (["train", "--out", "{tmp}/r", "--seq-len", "1"], ["--seq-len", "[2, 65536]", "got 1"]),
    "train batch too large": (["train", "--out", "{tmp}/r", "--batch-size", "65537"], ["--batch-size", "65537"]),
    "train steps zero": (["train", "--out", "{tmp}/r", "--steps", "0"], ["--steps", "got 0"]),
    "train negative seed": (["train", "--out", "{tmp}/r", "--seed", "-1"], ["--seed", "got -1"]),
    "train unknown data source": (["train", "--out", "{tmp}/r", "--data-source", "web"], ["--data-source", "'web'"]),
    "train val fraction 1": (["train", "--out", "{tmp}/r", "--val-fraction", "1.0"], ["--val-fraction", "(0, 1)"]),
    "train odd head size": (["train", "--out", "{tmp}/r", "--d-model", "30", "--n-heads", "2"],
                            ["--d-model / --n-heads", "even"]),
    "train too many layers": (["train", "--out", "{tmp}/r", "--n-layers", "1025"], ["--n-layers", "[1, 1024]"]),
    "train unknown arm": (["train", "--out", "{tmp}/r", "--arm", "bogus"], ["--arm", "'bogus'"]),
    "train threads zero": (["train", "--out", "{tmp}/r", "--threads", "0"], ["--threads", "[1, 256]"]),
    "train threads too many": (["train", "--out", "{tmp}/r", "--threads", "257"], ["--threads", "257"]),
    "train bad device": (["train", "--out", "{tmp}/r", "--device", "tpu"], ["--device", "'tpu'"]),
    "train out is a file": (["train", "--out", "{tmp}/afile"], ["--out {tmp}/afile", "not a directory"]),
    "train data-dir is a file": (["train", "--out", "{tmp}/r", "--data-dir", "{tmp}/afile"], ["--data-dir {tmp}/afile"]),
    "eval analysis multiplier 1": (["eval", "--run", "{tmp}/run", "--analysis-multiplier", "1"],
                                   ["--analysis-multiplier", "[2, 65536]", "got 1"]),
    "eval analysis windows 0": (["eval", "--run", "{tmp}/run", "--analysis-windows", "0"],
                                ["--analysis-windows", "got 0"]),
    "eval repeated multiplier": (["eval", "--run", "{tmp}/run", "--multipliers", "1", "2", "2"],
                                 ["--multipliers", "distinct", "[1, 2, 2]"]),
    "eval multiplier too large": (["eval", "--run", "{tmp}/run", "--multipliers", "65537"], ["--multipliers", "65537"]),
    "eval n-tokens zero": (["eval", "--run", "{tmp}/run", "--n-tokens", "0"], ["--n-tokens", "got 0"]),
    "eval chunk too large": (["eval", "--run", "{tmp}/run", "--chunk", str(2**20 + 1)], ["--chunk"]),
    "eval seed too large": (["eval", "--run", "{tmp}/run", "--seed", str(2**63 - 1)], ["--seed", str(2**63 - 1)]),
    "eval no run": (["eval", "--run", "{tmp}/nowhere"], ["--run {tmp}/nowhere", "no train.json"]),
    "eval json is a directory": (["eval", "--run", "{tmp}/run", "--json", "{tmp}"], ["--json {tmp}"]),
    "sweep repeated arm": (["sweep", "--out", "{tmp}/s", "--arms", "nope", "rope", "nope"],
                           ["--arms", "distinct", "['nope', 'rope', 'nope']"]),
    "sweep unknown arm": (["sweep", "--out", "{tmp}/s", "--arms", "nope", "spiral"], ["--arms", "'spiral'"]),
    "sweep negative eval seed": (["sweep", "--out", "{tmp}/s", "--eval-seed", "-1"], ["--eval-seed", "got -1"]),
    "sweep negative train seed": (["sweep", "--out", "{tmp}/s", "--seeds", "0", "1", "-1"], ["--seeds must", "[0, 1, -1]"]),
    "sweep two seeds": (["sweep", "--out", "{tmp}/s", "--seeds", "0", "1"], ["--seeds must", "at least 3"]),
    "sweep seeds fewer than the preset's looks": (["sweep", "--out", "{tmp}/s", "--seeds", "0", "1", "2", "3"],
                                                  ["--seeds gives 4 seeds", "cpu preset", "at least 15 --seeds",
                                                   "--looks none"]),
    "sweep looks none with a number": (["sweep", "--out", "{tmp}/s", "--looks", "none", "3"], ["--looks", "none alone"]),
    "sweep too few windows": (["sweep", "--out", "{tmp}/s", "--n-tokens", "1000"],
                              ["--n-tokens must be >= 2 x --seq-len", "131072", "got 1000"]),
    "sweep workers zero": (["sweep", "--out", "{tmp}/s", "--workers", "0"], ["--workers", "got 0"]),
    "sweep bad scheduler": (["sweep", "--out", "{tmp}/s", "--scheduler", "http://x:1"], ["--scheduler", "scheme"]),
    "sweep variant unknown field": (["sweep", "--out", "{tmp}/s", "--variant", "v", "arm=rope", "colour=red"],
                                    ["--variant v", "'colour'"]),
    "sweep variant without arm": (["sweep", "--out", "{tmp}/s", "--variant", "v", "learned_token=key", "--arms", "v"],
                                  ["--variant", "must set arm"]),
    "sweep variant named as an arm": (["sweep", "--out", "{tmp}/s", "--variant", "rope", "arm=learned"],
                                      ["--variant", "'rope'"]),
    "sweep family arm without family": (["sweep", "--out", "{tmp}/s", "--arms", "family"], ["--family", "required"]),
    "sweep empty out": (["sweep", "--out", ""], ["--out", "empty path"]),
    "sweep unknown preset": (["sweep", "--out", "{tmp}/s", "--preset", "tpu"], ["--preset", "'tpu'"]),
    "train empty out": (["train", "--out", ""], ["--out", "empty path"]),
    "train seq-len beyond memory": (["train", "--out", "{tmp}/r", "--seq-len", "65536"],
                                    ["--seq-len 65536 with --batch-size 32", "GiB", "--max-memory-gb"]),
    "train memory limit tiny": (["train", "--out", "{tmp}/r", "--max-memory-gb", "0.001"], ["--seq-len 128", "0.0 GiB"]),
    "train bad memory limit": (["train", "--out", "{tmp}/r", "--max-memory-gb", "0"], ["--max-memory-gb", "got 0.0"]),
    "train unknown tokenizer": (["train", "--out", "{tmp}/r", "--tokenizer", "word"], ["--tokenizer", "'word'"]),
    "train bpe vocab too small": (["train", "--out", "{tmp}/r", "--bpe-vocab", "100"], ["--bpe-vocab", "[257, 65536]"]),
    "report no file": (["report", "--sweep", "{tmp}/none.json"], ["--sweep {tmp}/none.json", "no such file"]),
    "report not a sweep": (["report", "--sweep", "{tmp}/afile"], ["--sweep {tmp}/afile", "not a multi-seed probe sweep"]),
    "sweep analysis multiplier 1": (["sweep", "--out", "{tmp}/s", "--analysis-multiplier", "1"],
                                    ["--analysis-multiplier"]),
    "sweep tokens per batch zero": (["sweep", "--out", "{tmp}/s", "--tokens-per-batch", "0"], ["--tokens-per-batch"]),
    "sweep out below a file": (["sweep", "--out", "{tmp}/afile/s"], ["--out {tmp}/afile/s", "not a directory"]),
    "train out not writable": (["train", "--out", "/proc/accum-r", "--steps", "1"], ["--out /proc/accum-r"]),
    "sweep out not writable": (["sweep", "--out", "/proc/accum-s"], ["--out /proc/accum-s"]),
    "eval json not writable": (["eval", "--run", "{tmp}/run", "--json", "/proc/accum-e.json"], ["--json /proc/accum-e.json"]),
    "train data-dir not writable": (["train", "--out", "{tmp}/r", "--data-dir", "/proc/accum-d"], ["--data-dir /proc/accum-d"]),
    "eval data-dir not writable": (["eval", "--run", "{tmp}/run", "--data-dir", "/proc/accum-d"], ["--data-dir /proc/accum-d"]),
}


@pytest.fixture()
def no_work(monkeypatch):
    """Any data loading or training fails the test: the refusals must come before them."""
    def forbidden(*args, **kwargs):
        raise AssertionError("data was loaded or a model trained")
    for target in ("accum.probes.cli.train", "accum.probes.cli.load_data", "accum.probes.cli.run_sweep",
                   "accum.probes.cli.evaluate_run"):
        monkeypatch.setattr(target, forbidden)


def refusal(argv: list[str], capsys) -> tuple[int, str]:
    status = main(["probe", *argv])
    return status, capsys.readouterr().err


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A finished 2-step run (for the eval cases that must get past --run)."""
    run = tmp_path_factory.mktemp("probe") / "run"
    train(TrainConfig(arm="nope", steps=2, seq_len=16, batch_size=4, d_model=16, n_heads=2, n_layers=1,
                      data_source="stdlib"), run, data=DATA, progress=False, threads=1)
    return run


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_bad_command_line_is_one_line_naming_the_flag(case, tmp_path, finished_run, no_work, capsys):
    argv, fragments = REFUSED[case]
    (tmp_path / "afile").write_text("keep")
    (tmp_path / "run").symlink_to(finished_run, target_is_directory=True)
    before = sorted(tmp_path.rglob("*"))
    status, err = refusal([a.format(tmp=tmp_path) for a in argv], capsys)
    command = argv[0]
    assert status == 2, err
    assert err.startswith(f"accum probe {command}: error: ") and err.count("\n") == 1, err
    assert all(f.format(tmp=tmp_path) in err for f in fragments), err
    assert sorted(tmp_path.rglob("*")) == before and (tmp_path / "afile").read_text() == "keep"


def test_param_errors_name_their_fields_as_flags_without_reading_the_text():
    """A ``ParamError`` declares the parameters it names; the command line writes each as its flag and leaves
    every other word alone (a field name inside prose or a value is not a declared name)."""
    from accum.simulations.params import ParamError, field_error

    flags = probe_cli.command_flags("sweep")
    err = field_error("seed", "must be >= 0; seeds the random arm (got 'seed')")
    assert str(err) == "seed must be >= 0; seeds the random arm (got 'seed')"
    assert err.message(flags) == "--eval-seed must be >= 0; seeds the random arm (got 'seed')"
    assert field_error("seed", "must be >= 0").message(probe_cli.command_flags("train")) == "--seed must be >= 0"
    both = ParamError("{d_model} / {n_heads} must be even, got d_model = 6", ("d_model", "n_heads"))
    assert both.message(flags) == "--d-model / --n-heads must be even, got d_model = 6"
    assert probe_cli.command_flags("eval")["seed"] == "--seed" and "seq_len" not in probe_cli.command_flags("eval")


def test_window_count_is_what_eval_windows_needs():
    for length, n_tokens in ((16, 64), (16, 70), (48, 16), (7, 7)):
        need = window_count(length, n_tokens) * length + 1
        x, _ = eval_windows(torch.arange(need), length, n_tokens)
        assert x.numel() == need - 1
        with pytest.raises(ValueError, match="validation split"):
            eval_windows(torch.arange(need - 1), length, n_tokens)


def test_split_sizes_are_checked_at_the_boundary():
    n_val, n_train = DATA.val.numel(), DATA.train.numel()
    fits = EvalConfig(multipliers=(1, n_val // 16 - 1), n_tokens=16)
    probe_sweep.check_split_sizes(DATA, 16, fits, 2, 1)
    largest = (n_val - 1) // 16                    # largest m with m * 16 + 1 <= n_val
    probe_sweep.check_split_sizes(DATA, 16, EvalConfig(multipliers=(largest,), n_tokens=16), 2, 1)
    with pytest.raises(ValueError, match=f"multipliers: {largest + 1} x seq_len 16"):
        probe_sweep.check_split_sizes(DATA, 16, EvalConfig(multipliers=(1, largest + 1), n_tokens=16), 2, 1)
    windows = (n_val - 1) // 32                    # analysis: windows * 2 * 16 + 1 <= n_val
    probe_sweep.check_split_sizes(DATA, 16, fits, 2, windows)
    with pytest.raises(ValueError, match="analysis_windows"):
        probe_sweep.check_split_sizes(DATA, 16, fits, 2, windows + 1)
    with pytest.raises(ValueError, match=f"seq_len {n_train} needs {n_train + 1} training tokens"):
        probe_sweep.check_split_sizes(DATA, n_train, fits, 2, 1)
    one_token = EvalConfig(multipliers=(1,), n_tokens=1)  # windows of 1 token: the analysis needs windows + 1 tokens
    probe_sweep.check_split_sizes(DATA, 1, one_token, 1, n_val - 1)
    with pytest.raises(ValueError, match=f"needs {n_val + 1} validation tokens"):
        probe_sweep.check_split_sizes(DATA, 1, one_token, 1, n_val)


def test_sweep_that_cannot_evaluate_is_refused_before_training(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("accum.probes.sweep.load_data", lambda cfg, cache: (DATA, {"source": "test"}))

    def forbidden(*args, **kwargs):
        raise AssertionError("an arm was trained")
    monkeypatch.setattr("accum.probes.sweep.train", forbidden)
    too_long = str(DATA.val.numel() // 16 + 1)
    status, err = refusal(["sweep", "--out", str(tmp_path / "s"), *TINY, "--multipliers", "1", too_long], capsys)
    assert status == 2 and err.startswith("accum probe sweep: error: --multipliers: ") and "--val-fraction" in err, err
    assert not (tmp_path / "s").exists()


def test_eval_refuses_an_unfinished_run(tmp_path, capsys):
    cfg = TrainConfig(arm="nope", steps=4, seq_len=16, batch_size=4, d_model=16, n_heads=2, n_layers=1,
                      data_source="stdlib")
    train(cfg, tmp_path / "run", data=DATA, progress=False, threads=1, stop_after=2)
    status, err = refusal(["eval", "--run", str(tmp_path / "run")], capsys)
    assert status == 2 and "training is not finished (step 2 of 4)" in err, err
    (tmp_path / "run" / "train.json").write_text("{not json")
    status, err = refusal(["eval", "--run", str(tmp_path / "run")], capsys)
    assert status == 2 and "train.json is not an `accum probe train` record" in err, err


def test_eval_on_too_short_a_split_names_the_flags(tmp_path, finished_run, monkeypatch, capsys):
    monkeypatch.setattr("accum.probes.cli.load_data", lambda cfg, cache: (DATA, {"source": "test"}))
    too_long = str(DATA.val.numel() // 16 + 1)
    status, err = refusal(["eval", "--run", str(finished_run), "--multipliers", too_long, "--threads", "1",
                           "--json", str(tmp_path / "e.json")], capsys)
    assert status == 2 and "--multipliers: " in err and "seq_len 16" in err and "--n-tokens" in err, err
    assert not (tmp_path / "e.json").exists()


SHIPPED_SWEEP = Path(__file__).resolve().parents[2] / "probes" / "results" / "cpu" / "sweep.json"
EDITED_SWEEPS = {  # a hand edit of a tiny sweep's sweep.json -> what the one error line names
    "string ppl": (lambda s: s["runs"]["rope"]["0"].update(ppl="abc"), "runs.rope.0.ppl must be a list of 3 entries"),
    "short ppl": (lambda s: s["runs"]["rope"]["1"].update(ppl=[1.0, 2.0]), "runs.rope.1.ppl must be a list of 3"),
    "nan ppl": (lambda s: s["runs"]["random"]["2"]["ppl"].__setitem__(2, float("nan")),
                "runs.random.2.ppl[2] must be a finite"),
    "negative ppl": (lambda s: s["runs"]["alibi"]["0"]["ppl_last_segment"].__setitem__(0, -5.0),
                     "runs.alibi.0.ppl_last_segment[0] must be a finite number > 0, got -5.0"),
    "far mass above 1": (lambda s: s["runs"]["rope"]["0"]["far_mass"].__setitem__(2, 1.5), "runs.rope.0.far_mass[2]"),
    "string multipliers": (lambda s: s.update(multipliers="abc"), "multipliers must be config.eval.multipliers"),
    "empty runs": (lambda s: s.update(runs={}), "missing must list the "),
    "unknown arm": (lambda s: s["runs"].update(spiral={}), "runs must be an object keyed by some of rope, random"),
    "unknown seed": (lambda s: s["runs"]["rope"].update({"999": s["runs"]["rope"]["0"]}), "runs.rope must be an object"),
    "run not an object": (lambda s: s["runs"]["rope"].update({"0": 3}), "runs.rope.0 must be a run summary"),
    "angle spread not a list": (lambda s: s["runs"]["rope"]["0"].update(angle_spread="x"),
                                "runs.rope.0.angle_spread must be a list of one or more entries"),
}


@pytest.fixture(scope="module")
def tiny_sweep(tmp_path_factory):
    """sweep.json of the ``tiny`` preset's design (rope, random, alibi x 3 seeds) on the test text."""
    out = tmp_path_factory.mktemp("sweep")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("accum.probes.sweep.load_data", lambda cfg, cache: (DATA, {"source": "test"}))
        assert main(["probe", "sweep", "--preset", "tiny", "--out", str(out), "--threads", "1", "--no-progress"]) == 0
    return out / "sweep.json"


@pytest.mark.parametrize("case", sorted(EDITED_SWEEPS))
def test_report_refuses_a_hand_edited_sweep_naming_the_field(case, tmp_path, tiny_sweep, capsys):
    import json

    edit, fragment = EDITED_SWEEPS[case]
    sweep = json.loads(tiny_sweep.read_text())
    edit(sweep)
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(sweep))
    status, err = refusal(["report", "--sweep", str(path)], capsys)
    assert status == 2 and err.startswith(f"accum probe report: error: --sweep {path}: ") and err.count("\n") == 1, err
    assert fragment in err, err


def test_report_reads_the_committed_sweep_without_training(monkeypatch, capsys):
    """`accum probe report` on the shipped probes/results/cpu/sweep.json: no data, no training; its stored
    verdicts are the ones recomputed from its per-run numbers, and the header says how complete it is."""
    import json
    from pathlib import Path

    from accum.probes import stats
    def forbidden(*args, **kwargs):
        raise AssertionError("data was loaded or a model trained")
    for target in ("accum.probes.cli.train", "accum.probes.cli.load_data", "accum.probes.cli.run_sweep"):
        monkeypatch.setattr(target, forbidden)
    path = SHIPPED_SWEEP
    shipped = json.loads(path.read_text())
    again = SweepConfig.from_dict(shipped["config"]).verdicts(shipped["runs"])
    assert shipped["verdicts"] == json.loads(json.dumps(again))
    assert main(["probe", "report", "--sweep", str(path)]) == 0
    out = capsys.readouterr().out
    done = sum(len(r) for r in shipped["runs"].values())
    assert (f"{done} (arm, seed) runs finished, {len(shipped['missing'])} more asked for by the stopping rule; "
            f"complete: {str(shipped['complete']).lower()}") in out
    assert out.count("| random_beats_rope |") == 2 and "learned_stays_near_1x" in out
    assert "| qkv_beats_qk:random_qkv_indep |" in out and "| learned_stays_near_1x:learned_key |" in out


def test_looks_none_is_one_look_at_every_seed():
    """--looks none, which the help offers, is the fixed design: one look at every seed given."""
    import argparse

    parser = argparse.ArgumentParser()
    probe_cli.add_subparser(parser.add_subparsers())
    for preset in ("tiny", "cpu"):
        args = parser.parse_args(["probe", "sweep", "--preset", preset, "--looks", "none", "--seeds", "0", "1", "2", "3"])
        cfg = probe_cli.sweep_config(args, probe_cli.command_flags("sweep"))
        assert cfg.looks == () and cfg.plan_looks == (4,)
