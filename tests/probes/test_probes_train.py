"""Training, resume, chunked evaluation, attention analysis, sweep and command line on tiny runs."""

import json
import math
from dataclasses import replace

import pytest
import torch

from accum.probes import analysis as A
from accum.cli import main
from accum.probes.data import char_data
from accum.probes.evaluate import EvalConfig, evaluate_lengths, last_segment_reference, position_nll
from accum.probes.model import ARMS, ProbeModel
from accum.probes.presets import PRESETS
from accum.probes.sweep import run_sweep, summarise
from accum.probes.sweepconfig import SweepConfig
from accum.probes.train import TrainConfig, build_model, load_checkpoint, lr_at, make_optimizer, train
from accum.simulations.params import ParamError
from accum.simulations.results import ResultError

from test_probes_model import arm_options

torch.set_num_threads(1)

TEXT = ("Shall I compare thee to a summer's day?\nThou art more lovely and more temperate:\n"
        "Rough winds do shake the darling buds of May,\nAnd summer's lease hath all too short a date.\n") * 60
DATA = char_data(TEXT, 0.2)
TINY = dict(seq_len=16, batch_size=8, d_model=32, n_heads=2, n_layers=2, warmup=5, lr=3e-3, log_every=1,
            checkpoint_every=4, data_source="stdlib", tokenizer="char")


def test_loss_decreases_on_a_tiny_run(tmp_path):
    res = train(TrainConfig(arm="rope", steps=60, **TINY), tmp_path, data=DATA, progress=False, threads=1)
    losses = [h["loss"] for h in res["history"]]
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 1.0
    assert res["tokens_seen"] == 60 * 8 * 16 and res["finished"]
    saved = json.loads((tmp_path / "train.json").read_text())
    assert saved["seed"] == 0 and saved["lr"]["peak"] == 3e-3 and math.isfinite(saved["timings"]["train_seconds"])
    assert saved["provenance"]["accum_version"]
    assert (tmp_path / "model.safetensors").exists()


@pytest.mark.parametrize("arm", ["random", "path"])
def test_resume_gives_the_uninterrupted_result(tmp_path, arm):
    cfg = TrainConfig(arm=arm, steps=10, **TINY)
    whole = train(cfg, tmp_path / "whole", data=DATA, progress=False, threads=1)
    part = train(cfg, tmp_path / "split", data=DATA, progress=False, threads=1, stop_after=6)
    assert not part["finished"] and part["step"] == 6
    resumed = train(cfg, tmp_path / "split", data=DATA, progress=False, threads=1)
    assert resumed["history"] == whole["history"] and resumed["tokens_seen"] == whole["tokens_seen"]
    a = load_checkpoint(tmp_path / "whole" / "checkpoint.pt")["model"]
    b = load_checkpoint(tmp_path / "split" / "checkpoint.pt")["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_resume_refuses_a_different_config(tmp_path):
    train(TrainConfig(arm="nope", steps=4, **TINY), tmp_path, data=DATA, progress=False, threads=1)
    with pytest.raises(ResultError, match=r"checkpoint.pt was written with another config \(steps: 4 there, 5 asked\)"):
        train(TrainConfig(arm="nope", steps=5, **TINY), tmp_path, data=DATA, progress=False, threads=1)


def test_learning_rate_schedule():
    cfg = TrainConfig(steps=100, warmup=10, lr=1e-3, min_lr_ratio=0.1)
    assert lr_at(0, cfg) == pytest.approx(1e-4) and lr_at(9, cfg) == pytest.approx(1e-3)
    assert lr_at(100, cfg) == pytest.approx(1e-4)
    with pytest.raises(ValueError, match="lr"):
        TrainConfig(lr=-1.0)
    with pytest.raises(ValueError, match="steps"):
        TrainConfig(steps=0)


@pytest.mark.parametrize("arm", ARMS)
def test_chunked_evaluation_equals_full_attention(arm):
    model = build_model(TrainConfig(arm=arm, **TINY, **arm_options(arm)), DATA.vocab_size).double().eval()
    x = DATA.val[:3 * 40].view(3, 40)
    y = DATA.val[1:3 * 40 + 1].view(3, 40)
    u = model.draw_noise(3, 40, torch.Generator().manual_seed(0))
    full, _ = position_nll(model, x, y, 40, u)
    chunked, far = position_nll(model, x, y, 7, u, far=16)
    assert torch.allclose(chunked, full, rtol=0, atol=1e-10)
    with torch.no_grad():
        weights = model(x, None, u, need_weights=True).weights
    expect = torch.stack([A.far_mass(w, 16) for w in weights])
    assert torch.allclose(far, expect, rtol=0, atol=1e-10)


def test_evaluate_lengths_reports_every_multiplier():
    model = build_model(TrainConfig(arm="alibi", **TINY), DATA.vocab_size)
    res = evaluate_lengths(model, DATA.val, 16, EvalConfig(multipliers=(1, 2, 4), n_tokens=128, chunk=16))
    assert [r["length"] for r in res] == [16, 32, 64]
    assert [len(r["segment_nll"]) for r in res] == [1, 2, 4]
    assert all(r["tokens"] == 128 and math.isclose(math.log(r["ppl"]), r["nll"]) for r in res)
    with pytest.raises(ValueError, match="multipliers"):
        EvalConfig(multipliers=(0,))


def test_last_segment_reference_is_the_1x_perplexity_of_the_same_tokens():
    """At 4x with windows w = 0, 1 of 64 tokens, the last segments are 1x windows 3 and 7: the reference is the 1x
    perplexity of exactly those windows, and at 1x it is the 1x perplexity itself."""
    model = build_model(TrainConfig(arm="rope", **TINY), DATA.vocab_size)
    res = evaluate_lengths(model, DATA.val, 16, EvalConfig(multipliers=(1, 2, 4), n_tokens=128, chunk=16))
    one = res[0]["window_nll"]
    assert len(one) == 8 and math.isclose(sum(one) / 8, res[0]["nll"], rel_tol=1e-12)
    ref = last_segment_reference(res)
    assert ref[2] == pytest.approx(math.exp((one[3] + one[7]) / 2), rel=1e-12)
    assert ref[1] == pytest.approx(math.exp((one[1] + one[3] + one[5] + one[7]) / 4), rel=1e-12)
    assert ref[0] == pytest.approx(res[0]["ppl_last_segment"], rel=1e-12)
    assert last_segment_reference(res[1:]) == [None, None]


def test_far_mass_and_window_on_known_weights():
    t = 8
    uniform = torch.tril(torch.ones(t, t)) / torch.arange(1, t + 1)[:, None]
    diag = torch.eye(t)
    w = torch.stack((uniform, diag))[None]
    far = A.far_mass(w, 3)
    expect = sum((i - 3 + 1) / (i + 1) for i in range(3, t)) / (t - 3)
    assert far[0].item() == pytest.approx(expect) and far[1].item() == 0.0
    window = A.mixing_window(w, 0.5)
    assert window[1].item() == 1.0
    assert window[0].item() == pytest.approx(sum(math.ceil(0.5 * (i + 1)) for i in range(4, 8)) / 4)


def test_predicted_window_follows_the_iid_law():
    lags = torch.arange(200)
    angles = torch.tensor([0.0, 1.0]).repeat(1, 2, 50, 1).double()  # (B=1, H=2, T=50, P=2)
    angles[0, :, ::2, 1] = -1.0
    coh = A.iid_coherence(angles, lags)
    assert coh.shape == (2, 200, 2)
    assert torch.allclose(coh[:, :, 0], torch.ones(2, 200, dtype=torch.float64))
    phi = math.cos(1.0)
    assert coh[0, 3, 1].item() == pytest.approx(phi ** 3)
    c = torch.tensor([[0.0, 1.0], [1.0, 1.0]], dtype=torch.float64)
    win = A.predicted_window(c, coh, lags, 0.1)
    assert win[0].item() == math.ceil(math.log(0.1) / math.log(phi))
    assert win[1].item() == 200
    assert A.spearman([1, 2, 3], [10, 30, 20]) == pytest.approx(0.5)
    assert A._rho([1.0, 1.0 - 1e-15, 1.0 + 1e-15], [1.0, 2.0, 3.0]) is None


def test_analysis_of_uniform_attention_has_the_closed_form():
    """q = k = 0 makes every causal row uniform, a_ij = 1/(i+1), in every layer: far mass at lag >= 16 is
    mean_{i=16..63} (i-15)/(i+1); the 91% window is mean_{i=32..63} ceil(0.91 (i+1)) (0.91 (i+1) is never
    an integer here, so float rounding cannot move it)."""
    model = build_model(TrainConfig(arm="nope", **TINY), DATA.vocab_size)
    d = model.cfg.d_model
    with torch.no_grad():
        for block in model.blocks:
            block.attn.qkv.weight[: 2 * d] = 0.0
    res = A.analyse(model, DATA.val[:128].view(2, 64), 16, torch.Generator().manual_seed(0), level=0.91)
    far = sum((i - 15) / (i + 1) for i in range(16, 64)) / 48
    window = sum(math.ceil(0.91 * (i + 1)) for i in range(32, 64)) / 32
    assert len(res["layers"]) == TINY["n_layers"]
    for layer in res["layers"]:
        assert layer["far_mass"] == pytest.approx([far, far], rel=1e-6)
        assert layer["window"] == [window, window]


def test_analysis_of_a_learned_angle_model_at_init():
    """At init the learned arm's step angles are RoPE's constant frequencies, so |phi_b| = 1 for every plane:
    no plane decorrelates, the predicted window is the whole 64-token window and the coherent fraction is 1."""
    model = build_model(TrainConfig(arm="learned", **TINY), DATA.vocab_size)
    res = A.analyse(model, DATA.val[:128].view(2, 64), 16, torch.Generator().manual_seed(0))
    for layer in res["layers"]:
        assert layer["window_pred_iid"] == layer["window_pred_empirical"] == [64.0, 64.0]
        assert layer["coherent_fraction_far_iid"] == pytest.approx([1.0, 1.0], abs=1e-6)
        assert layer["coherent_fraction_far_empirical"] == pytest.approx([1.0, 1.0], abs=1e-6)


SWEEP = SweepConfig(train=TrainConfig(steps=3, **TINY), eval=EvalConfig(multipliers=(1, 2), n_tokens=128, chunk=8),
                    arms=("nope", "learned_qkv"), analysis_windows=1)


def test_sweep_writes_seed_level_tables_and_reuses_finished_runs(tmp_path, monkeypatch):
    monkeypatch.setattr("accum.probes.sweep.load_data", lambda cfg, cache: (DATA, {"source": "test"}))
    res = run_sweep(SWEEP, tmp_path, threads=1)
    table = (tmp_path / "sweep.md").read_text()
    assert "| learned_qkv | 3 |" in table and "2x (32)" in table and "NOT RESOLVED" in table
    saved = json.loads((tmp_path / "sweep.json").read_text())
    assert saved["lengths"] == [16, 32] and saved["complete"] and saved["missing"] == []
    assert sorted(saved["runs"]["nope"]) == ["0", "1", "2"] and saved["arms"]["nope"]["n_seeds"] == 3
    per_seed = [saved["runs"]["nope"][s]["ppl"][1] for s in ("0", "1", "2")]
    assert saved["arms"]["nope"]["ppl"]["mean"][1] == pytest.approx(sum(per_seed) / 3)
    assert len({round(p, 9) for p in per_seed}) == 3  # seeds give different models
    assert saved["runs"]["nope"]["0"]["far_mass"][0] is None and 0 < saved["runs"]["nope"]["0"]["far_mass"][1] < 1
    stamp = (tmp_path / "nope" / "seed0" / "train.json").stat().st_mtime_ns
    # a finished run is reused from its JSON alone: no weights, no checkpoint, no training, no evaluation
    for path in [*tmp_path.rglob("*.safetensors"), *tmp_path.rglob("*.pt")]:
        path.unlink()

    def forbidden(*args, **kwargs):
        raise AssertionError("a finished run was redone")
    monkeypatch.setattr("accum.probes.sweep.train", forbidden)
    monkeypatch.setattr("accum.probes.sweep.evaluate_run", forbidden)
    again = run_sweep(SWEEP, tmp_path, threads=1)
    assert (tmp_path / "nope" / "seed0" / "train.json").stat().st_mtime_ns == stamp
    assert again["runs"] == res["runs"] and again["verdicts"] == res["verdicts"]


def test_sweep_never_retrains_a_finished_run_whose_weights_are_gone(tmp_path, monkeypatch):
    """train.json finished, no eval.json, weights not committed (a fresh clone of a sweep stopped between
    training and evaluation): evaluating it means training it again, which would rewrite its train.json, so the
    sweep is refused before anything is written; once its train.json is moved away, the same seed trains the same
    run again."""
    monkeypatch.setattr("accum.probes.sweep.load_data", lambda cfg, cache: (DATA, {"source": "test"}))
    one = replace(SWEEP, arms=("nope",))
    first = run_sweep(one, tmp_path, threads=1)
    folder = tmp_path / "nope" / "seed0"
    for name in ("eval.json", "model.safetensors", "checkpoint.pt"):
        (folder / name).unlink()
    kept = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(ParamError, match="holds a finished training without its weights"):
        run_sweep(one, tmp_path, threads=1)
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == kept
    (folder / "train.json").rename(tmp_path / "moved-train.json")
    again = run_sweep(one, tmp_path, threads=1)
    assert (folder / "model.safetensors").exists() and (folder / "eval.json").exists()
    assert again["runs"]["nope"]["0"]["ppl"] == pytest.approx(first["runs"]["nope"]["0"]["ppl"], rel=1e-9)


def test_partial_sweep_is_reported_incomplete(tmp_path, monkeypatch, capsys):
    """A sweep whose learned_qkv runs have no evaluation (a sweep stopped part-way): the summary lists them as
    missing, seed by seed, and ``accum probe report`` prints that without training."""
    monkeypatch.setattr("accum.probes.sweep.load_data", lambda cfg, cache: (DATA, {"source": "test"}))
    run_sweep(SWEEP, tmp_path, threads=1)
    for seed in range(3):
        (tmp_path / "learned_qkv" / f"seed{seed}" / "eval.json").unlink()
    res = summarise(SWEEP, tmp_path, {"source": "test"})
    assert not res["complete"] and res["missing"] == [["learned_qkv", 0], ["learned_qkv", 1], ["learned_qkv", 2]]
    assert res["arms"]["learned_qkv"]["n_seeds"] == 0 and res["arms"]["nope"]["n_seeds"] == 3
    assert main(["probe", "report", "--sweep", str(tmp_path / "sweep.json")]) == 0
    out = capsys.readouterr().out
    assert "3 (arm, seed) runs finished, 3 more asked for by the stopping rule; complete: false" in out
    assert "missing: learned_qkv/seed0, learned_qkv/seed1, learned_qkv/seed2" in out


def test_command_line_train_and_eval(tmp_path, capsys):
    opts = ["--seq-len", "16", "--batch-size", "4", "--d-model", "16", "--n-heads", "2", "--n-layers", "1",
            "--steps", "3", "--data-source", "stdlib", "--tokenizer", "char", "--threads", "1", "--no-progress"]
    assert main(["probe", "train", "--arm", "path", "--out", str(tmp_path / "run"), *opts]) == 0
    assert main(["probe", "eval", "--run", str(tmp_path / "run"), "--multipliers", "1", "2", "--n-tokens", "64",
                 "--chunk", "8", "--analysis-windows", "1", "--threads", "1"]) == 0
    assert json.loads((tmp_path / "run" / "eval.json").read_text())["lengths"][1]["length"] == 32
    assert main(["probe", "train", "--arm", "bogus", "--out", str(tmp_path / "x"), *opts]) == 2
    assert "--arm" in capsys.readouterr().err
    assert main(["probe", "train", "--out", str(tmp_path / "y"), *opts[:-3], "--threads", "0"]) == 2
    assert "--threads" in capsys.readouterr().err
    assert main(["probe", "train", "--out", str(tmp_path / "y"), "--device", "tpu", *opts]) == 2
    assert "--device" in capsys.readouterr().err
    assert main(["probe", "train", "--out", str(tmp_path / "run" / "eval.json" / "z"), *opts]) == 2
    assert "--out" in capsys.readouterr().err
    assert main(["probe", "eval", "--run", str(tmp_path / "y")]) == 2
    assert "--run" in capsys.readouterr().err


def test_training_memory_estimate_refuses_what_cannot_fit():
    """Issue 14: seq_len 65536 at batch 32 must be refused up front (explicit T x T scores alone are
    3 x 32 x 4 x 65536^2 x 4 bytes = 6 TiB per layer), while the CPU preset fits in well under 1 GiB."""
    from accum.probes.train import check_train_memory, estimate_train_bytes
    big = TrainConfig(seq_len=65536)
    assert estimate_train_bytes(big, 4096) > 3 * 32 * 4 * 65536**2 * 4
    with pytest.raises(ValueError, match="seq_len 65536 with batch_size 32 needs an estimated"):
        check_train_memory(big, 4096, 100 * 2**30)
    assert estimate_train_bytes(TrainConfig(), 4096) < 2**30
    check_train_memory(TrainConfig(), 4096, 2**30)


def test_gpu_script_runs_the_gpu_preset_at_tiny_size_on_cpu(tmp_path):
    """`make probes-gpu` runs probes/run_gpu.sh; here the same script and preset, shrunk by its overrides,
    on the CPU: every arm at 3 seeds, a complete sweep.json and the report."""
    import subprocess
    import sys
    from pathlib import Path
    script = Path(__file__).resolve().parents[2] / "probes" / "run_gpu.sh"
    env = {"ACCUM": f"{sys.executable} -m accum.cli", "DEVICE": "cpu", "SWEEP_DIR": str(tmp_path / "gpu"), "THREADS": "1",
           "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    tiny = ["--seq-len", "8", "--batch-size", "2", "--d-model", "8", "--n-heads", "2", "--n-layers", "1", "--steps", "2",
            "--warmup", "1", "--data-source", "stdlib", "--tokenizer", "char", "--multipliers", "1", "2",
            "--n-tokens", "64", "--chunk", "8", "--analysis-windows", "1", "--data-dir", str(tmp_path / "data")]
    proc = subprocess.run(["sh", str(script), *tiny], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    saved = json.loads((tmp_path / "gpu" / "sweep.json").read_text())
    assert saved["complete"] and set(saved["runs"]) == set(PRESETS["gpu"]["sweep"]["arms"])
    assert saved["config"]["train"]["val_fraction"] == 0.1 and saved["config"]["train"]["path_block"] == 64  # from the preset
    assert saved["config"]["train"]["d_model"] == 8  # overridden
    assert "complete: true" in proc.stdout and "| claim | metric |" in proc.stdout


def test_decay_all_puts_every_parameter_but_the_tables_in_the_decayed_group():
    cfg = TrainConfig(arm="learned", d_model=16, n_heads=2, n_layers=1, decay="all", weight_decay=0.1,
                      angle_lr_scale=1.0, angle_weight_decay=0.1)
    model = ProbeModel(cfg.model_config(50), torch.Generator().manual_seed(0))
    groups = make_optimizer(model, cfg).param_groups
    decayed = {id(p) for g in groups if g["weight_decay"] == 0.1 and g["lr_scale"] == 1.0 for p in g["params"]}
    assert decayed == {id(p) for p in model.parameters()}  # one group in effect: LayerNorm, biases, embedding, tables
    plain = make_optimizer(model, TrainConfig(arm="learned", d_model=16, n_heads=2, n_layers=1)).param_groups
    assert {id(p) for p in plain[1]["params"]} == {id(p) for n, p in model.named_parameters() if p.dim() < 2}
    assert plain[1]["weight_decay"] == 0.0
