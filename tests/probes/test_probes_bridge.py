"""probes.bridge, probes.steplaw and probes.theory_stats: accum's theory of tiny trained probes of every arm, its\naggregation, the `accum probe theory` command and figure 7."""

import dataclasses
import json
import math
import os
import shutil
import time

import numpy as np
import pytest
import torch

from accum.cli import main
from accum.figures.make import theory_figure
from accum.figures.specs import theory_spec
from accum.probes import analysis, bridge, farlaw, stats, steplaw, theory_stats
from accum.probes.data import char_data
from accum.probes.evaluate import EvalConfig
from accum.probes.io import write_json
from accum.probes.model import ModelConfig, ProbeModel
from accum.probes.sweep import EVAL_RESULTS, evaluate_run
from accum.probes.train import TrainConfig, train
from accum.simulations.steps import AngleSteps, HouseholderSteps

torch.set_num_threads(1)

TEXT = "".join(f"{w} " for w in ("It was the best of times, it was the worst of times, it was the age of wisdom, "
                                 "it was the age of foolishness.\n" * 200).split())
DATA = char_data(TEXT, 0.3)
L = 16
SMALL = {"windows": 8, "streams": 32, "queries": 32}


def tiny(arm: str, seed: int = 0) -> TrainConfig:
    return TrainConfig(arm=arm, seq_len=L, batch_size=4, steps=20, warmup=1, d_model=16, n_heads=2, n_layers=2,
                       seed=seed, data_source="stdlib", tokenizer="char", log_every=1)


ARMS = ("nope", "rope", "alibi", "random", "random_drift", "learned", "gain", "path")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Trained (20 steps) and evaluated tiny runs of every built-in kind of step law at seed 0, with their theory.json."""
    root = tmp_path_factory.mktemp("runs")
    out = {}
    for arm in ARMS:
        folder = root / arm / "seed0"
        train(tiny(arm), folder, data=DATA, progress=False, threads=1)
        eres = evaluate_run(folder, DATA, EvalConfig(multipliers=(1, 2, 4), n_tokens=4 * 4 * L, chunk=L,
                                                     tokens_per_batch=4 * L), 2, 2, "cpu", 1)
        write_json(folder / EVAL_RESULTS, eres)
        out[arm] = bridge.theory_result(folder, DATA, cfg=bridge.BridgeConfig(**SMALL))
        write_json(folder / bridge.THEORY_RESULTS, out[arm])
    return root, out


def test_every_arm_gets_a_law_based_prediction(runs):
    """Each arm's theory.json has the law-based and C3 far mass per head and length, the premise per head (RoPE and
    NoPE never incoherent: C(L) = 1), and the comparison with the measured far mass."""
    _, res = runs
    for arm, r in res.items():
        assert r["multipliers"] == [2, 4] and len(r["layers"]) == 2, arm
        for layer in r["layers"]:
            assert np.array(layer["far_mass_law"]).shape == (2, 2) and np.array(layer["far_mass_c3"]).shape == (2, 2)
            assert np.all((0 < np.array(layer["far_mass_law"])) & (np.array(layer["far_mass_law"]) < 1)), arm
        assert len(r["law_log_ratio"]) == 2 and len(r["c3_log_ratio_layers"]) == 2, arm
    for arm in ("rope", "nope", "alibi"):
        assert all(c == pytest.approx(1.0, abs=1e-9) for la in res[arm]["layers"] for c in la["coherent_at_L"]), arm
        assert res[arm]["applies_share"] == 0.0
    assert res["learned"]["layers"][0]["law_source"].startswith("trained token table")
    assert res["path"]["layers"][0]["law_source"].startswith("realised Householder")


@pytest.mark.parametrize("arm", ["alibi", "path", "random"])
def test_law_prediction_follows_the_tiny_model(arm, runs):
    """On these near-uniform tiny models the law-based far mass at 4x is within 3% of the measured one for ALiBi's
    bias, PaTH's realised Householder steps and the random rotations (a wrong bias sign, near partition function or
    transport would move it by far more: ALiBi's far mass is half the dilution's here)."""
    _, res = runs
    law = np.array([h[-1] for la in res[arm]["layers"] for h in la["far_mass_law"]])
    meas = np.array([h[-1] for la in res[arm]["layers"] for h in la["far_mass_measured"]])
    assert np.all(np.abs(law / meas - 1) < 0.03), (law, meas)


def test_realised_law_reproduces_the_models_scores():
    """The step law read from a model gives its attention scores: for a random arm (its drawn angles) and path (its
    realised w_t, beta_t), q_i^T (step 1) ... (step n) k_{i-n} / sqrt(d) with the steps of tokens i, i-1, ..., i-n+1
    equals log a_{i,i-n} - log a_ii + s_ii of the model's own attention (fp64)."""
    for arm in ("random", "path"):
        model = ProbeModel(ModelConfig(arm=arm, vocab_size=DATA.vocab_size, d_model=16, n_heads=2, n_layers=2),
                           torch.Generator().manual_seed(0)).double()
        x = DATA.val[:2 * 13].view(2, 13)
        u = model.draw_noise(2, 13, torch.Generator().manual_seed(1))
        with torch.no_grad():
            out = model(x, None, u, need_weights=True)
            inputs = analysis.layer_inputs(model, x, u)
            q, k, _ = model.blocks[1].attn.heads(inputs[1])
        head, i, d = 1, 12, model.cfg.head_dim
        if arm == "random":
            steps = AngleSteps(out.step_angles[1][0, head].numpy()[i:0:-1][None])  # tokens i, i-1, ..., 1
        else:
            w, beta = steplaw.path_factors(model, 1, inputs[1])
            steps = HouseholderSteps(w[0, head, i:0:-1][None], beta[0, head, i:0:-1][None])
        keys = k[0, head].numpy()[i - 1::-1][None]  # key of lag n at index n - 1
        scores, _ = farlaw.path_scores(steps, q[0, head, i].numpy()[None], keys, np.arange(i))
        logw = torch.log(out.weights[1][0, head, i, : i + 1]).numpy()
        s_ii = float(q[0, head, i] @ k[0, head, i]) / math.sqrt(d)
        want = logw[i - 1::-1] - logw[i] + s_ii
        np.testing.assert_allclose(scores[0] / math.sqrt(d), want, rtol=0, atol=2e-5)


def test_theory_json_is_current_until_its_inputs_change(runs, tmp_path):
    root, _ = runs
    run = tmp_path / "run"
    shutil.copytree(root / "random" / "seed0", run)
    assert bridge.is_current(run)
    saved = json.loads((run / bridge.THEORY_RESULTS).read_text())["bridge_config"]
    assert set(saved) == {f.name for f in dataclasses.fields(bridge.BridgeConfig)}
    assert bridge.is_current(run, wanted=saved)
    for name, value in saved.items():  # computed with another value of any BridgeConfig field: not current
        other = (value + 1) if isinstance(value, int) else value / 2
        assert not bridge.is_current(run, wanted={**saved, name: other}), name
    (run / EVAL_RESULTS).touch()
    os.utime(run / EVAL_RESULTS, (time.time() + 10, time.time() + 10))
    assert not bridge.is_current(run)


@pytest.mark.parametrize("argv, fragment", [
    (["--run", "{tmp}/nowhere"], "--run {tmp}/nowhere: no train.json"),
    (["--run", "{root}/rope/seed0", "--windows", "1"], "--windows must be an integer in [2, 4096], got 1"),
    (["--run", "{root}/rope/seed0", "{root}/nope/seed0", "--out", "{tmp}/out.json"], "--out names one file"),
])
def test_bad_input_is_one_line_and_writes_nothing(argv, fragment, runs, tmp_path, capsys):
    root, _ = runs
    fmt = {"tmp": tmp_path, "root": root}
    out = tmp_path / "out.json"
    argv = [a.format(**fmt) for a in argv]
    status = main(["probe", "theory", *argv, *([] if "--out" in argv else ["--out", str(out)]), "--threads", "1"])
    err = capsys.readouterr().err
    assert status == 2 and err.startswith("accum probe theory: error: ") and err.count("\n") == 1, err
    assert fragment.format(**fmt) in err, err
    assert not out.exists()


def test_theory_command_skips_current_runs(runs, tmp_path, monkeypatch, capsys):
    """A run whose theory.json is current -- newer than its inputs and computed with the values asked for (those
    given, the defaults of the others but windows) -- is skipped (``bridge.is_current``), one line per run; one
    computed with other values is refused (results are never rewritten) and computed again with --overwrite
    (``theory_result`` stubbed here: the fixture's runs are trained on the tests' text, which the command does not
    load)."""
    root, _ = runs
    runs_given = [tmp_path / arm for arm in ("alibi", "path")]
    wanted = {**bridge.BridgeConfig().to_dict(), "windows": 8, "streams": 32}
    for arm, run in zip(("alibi", "path"), runs_given):
        shutil.copytree(root / arm / "seed0", run)
        saved = json.loads((run / bridge.THEORY_RESULTS).read_text())
        write_json(run / bridge.THEORY_RESULTS, {**saved, "bridge_config": wanted})
    computed = []
    monkeypatch.setattr("accum.probes.cli.load_data", lambda cfg, data_dir: (None, {}))
    monkeypatch.setattr("accum.probes.cli.theory_result", lambda run, data, device, threads, cfg: computed.append(
        (run, cfg)) or {"arm": "x", "applies_share": 1.0, "seconds": 0.0})
    command = ["probe", "theory", "--run", *map(str, runs_given), "--windows", "8", "--streams", "32", "--threads", "1"]
    assert main(command) == 0 and computed == []
    assert capsys.readouterr().out.splitlines() == [f"{r}: theory.json is current, skipped" for r in runs_given]
    assert main([*command[:-3], "16", "--threads", "1"]) == 2 and computed == []
    assert "pass --overwrite to recompute it" in capsys.readouterr().err
    assert main([*command[:-3], "16", "--threads", "1", "--overwrite"]) == 0
    assert [run for run, _ in computed] == runs_given and computed[0][1].streams == 16
    assert "skipped" not in capsys.readouterr().out


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def seeded_copies(root, tmp_path, far_shift: float):
    """Three seeds per arm from the fixture's theory.json: every head's law-based far mass set to the measured one
    moved by far_shift +- 0.01 in log-odds, and the log ppl ratios to the predicted degradation (so the order is
    exact)."""
    for arm in ARMS:
        base = json.loads((root / arm / "seed0" / bridge.THEORY_RESULTS).read_text())
        for seed, jitter in enumerate((-0.01, 0.0, 0.01)):
            layers = [dict(la, far_mass_law=sigmoid(theory_stats.logit(np.array(la["far_mass_measured"]))
                                                    + far_shift + jitter).tolist()) for la in base["layers"]]
            run = dict(base, layers=layers, log_ppl_ratio=base["degradation_pred"] + jitter / 10)
            write_json(tmp_path / arm / f"seed{seed}" / bridge.THEORY_RESULTS, run)


@pytest.mark.parametrize("shift, verdict", [(0.02, stats.CONFIRMED), (0.8, stats.CONTRADICTED), (0.2, stats.NOT_RESOLVED)])
def test_far_mass_verdicts_follow_the_equivalence_margin(shift, verdict, runs, tmp_path, monkeypatch):
    """Log-odds d inside +-log 1.25 with a tight interval: CONFIRMED; wholly outside: CONTRADICTED; straddling: NOT
    RESOLVED (at the family-wise level of the judged rows); a CONTRADICTED row is printed under "where the theory
    fails"; lengths outside JUDGED are printed without a verdict."""
    monkeypatch.setattr(theory_stats, "JUDGED", (4,))
    seeded_copies(runs[0], tmp_path, shift)
    result = theory_stats.agreement(tmp_path)
    assert result["judged_rows"] == 2 * len(ARMS) + 2 and result["level"] == pytest.approx(1 - 0.05 / result["judged_rows"])
    law = [r for r in result["far"] if r["kind"] == "law"]
    assert {r["verdict"] for r in law if r["multiplier"] == 4} == {verdict}
    assert {r["verdict"] for r in law if r["multiplier"] == 2} == {"not judged"}
    assert all(r["mean"] == pytest.approx(shift, abs=1e-9) for r in law)
    text = theory_stats.theory_section(result)
    assert "Theory vs trained probes" in text and verdict in text
    failed = text.split("Where the theory fails")[1].split("Not resolved")[0]
    assert ("law-based far mass CONTRADICTED" in failed) == (verdict == stats.CONTRADICTED)
    assert "rope: incoherence premise fails in 100% of heads" in failed
    assert result["order"]["arms"] == sorted(ARMS) and result["order"]["ci"] is not None


def synthetic_run(meas, law, identity=None, slope_arm="rope", seq_len=16, mult=(2, 8)):
    """A theory.json body of one layer whose heads have the given measured and law far masses (heads x multipliers)."""
    layer = {"far_mass_measured": meas, "far_mass_law": law, "far_mass_c3": meas, "applies": [True] * len(meas),
             "window_pred": [1.0] * len(meas), "window_measured": [1.0] * len(meas)}
    if identity is not None:
        layer["far_mass_identity"] = identity
    return {"seq_len": seq_len, "multipliers": list(mult), "layers": [layer],
            "train_config": {"arm": slope_arm, "n_heads": len(meas)}}


def test_a_confirmed_row_is_evidence_only_where_it_beats_every_baseline():
    """Heads whose far mass at 8x is far from uniform and from the 2x-carried constant: the exact law beats both and
    a distant A = I baseline (evidence); where the A = I prediction is exact too the row is a sanity row; a run set
    without the A = I baseline cannot be evidence."""
    from accum.probes import baselines
    level = 0.95
    runs = {}
    for s in range(4):
        at8 = [0.2 + 0.01 * s, 0.1 + 0.01 * s]  # far below what uniform (0.82) or a constant weight gives at 8x
        meas = [[0.15, at8[0]], [0.08, at8[1]]]
        runs[str(s)] = synthetic_run(meas, meas, identity=[[0.5, 0.9], [0.5, 0.9]])
    uniform = baselines.uniform_far_mass(0.0, 16, [2, 8])
    assert uniform[1] > 0.6  # the uniform baseline misses by far
    rows = theory_stats.far_rows({"arm": runs}, "law", level)
    row8 = next(r for r in rows if r["multiplier"] == 8)
    assert row8["verdict"] == stats.CONFIRMED and row8["evidence"] == "evidence"
    assert all(v["beats"] for v in row8["baselines"].values())
    tied = {s: dict(r, layers=[dict(r["layers"][0], far_mass_identity=r["layers"][0]["far_mass_measured"])])
            for s, r in runs.items()}
    row8 = next(r for r in theory_stats.far_rows({"arm": tied}, "law", level) if r["multiplier"] == 8)
    assert row8["evidence"] == "sanity: not better than identity"
    bare = {s: dict(r, layers=[{k: v for k, v in r["layers"][0].items() if k != "far_mass_identity"}])
            for s, r in runs.items()}
    row8 = next(r for r in theory_stats.far_rows({"arm": bare}, "law", level) if r["multiplier"] == 8)
    assert row8["evidence"] == "sanity: identity not at hand"


def synthetic_theories(n_arms: int, seeds: int, sign: float) -> dict:
    """Arms whose measured log ppl ratio is sign * their predicted degradation (plus a seed jitter smaller than the
    gaps between arms)."""
    return {f"arm{a}": {str(s): {"degradation_pred": float(a), "log_ppl_ratio": sign * a + 0.01 * (s - 1)}
                        for s in range(seeds)} for a in range(n_arms)}


@pytest.mark.parametrize("seeds, sign, verdict", [(1, 1.0, stats.NOT_RESOLVED), (2, 1.0, stats.NOT_RESOLVED),
                                                  (3, 1.0, stats.CONFIRMED), (3, -1.0, stats.CONTRADICTED)])
def test_degradation_order_needs_seeds_to_judge(seeds, sign, verdict):
    """Fewer than three seeds per arm: NOT RESOLVED with no interval, however well the single seeds are ordered; with
    three seeds the exact order of 6 arms is CONFIRMED by the permutation test (p = 1/720 < 0.025) and the reversed
    one CONTRADICTED."""
    row = theory_stats.order_row(synthetic_theories(theory_stats.MIN_ORDER_ARMS, seeds, sign), 0.95)
    assert row["verdict"] == verdict
    assert (row["ci"] is None) == (verdict == stats.NOT_RESOLVED)
    if row["p"] is not None:
        assert row["p" if sign > 0 else "p_down"] == pytest.approx(1 / 720, abs=0.001)


def test_degradation_order_permutation_p_is_uniform_without_an_order():
    """With no relation between D and the degradation, the one-sided permutation p-value is uniform: over 200 random
    sets of 8 arms, about 5% fall at or below 0.05; and each verdict other than NOT RESOLVED is as rare as its side's
    alpha / 2 = 2.5% at level 0.95."""
    rng = np.random.default_rng(2)
    rows = []
    for _ in range(200):
        theories = {f"a{i}": {str(s): {"degradation_pred": float(rng.normal()), "log_ppl_ratio": float(rng.normal())}
                              for s in range(3)} for i in range(8)}
        rows.append(theory_stats.order_row(theories, 0.95))
    share = np.mean(np.array([r["p"] for r in rows]) <= 0.05)
    assert abs(share - 0.05) < 3.5 * math.sqrt(0.05 * 0.95 / 200)
    for verdict in (stats.CONFIRMED, stats.CONTRADICTED):
        share = np.mean([r["verdict"] == verdict for r in rows])
        assert abs(share - 0.025) < 3.5 * math.sqrt(0.025 * 0.975 / 200), (verdict, share)


def test_degradation_order_ranks_only_arms_with_enough_seeds():
    theories = synthetic_theories(theory_stats.MIN_ORDER_ARMS, 3, 1.0)
    theories["late"] = {"0": {"degradation_pred": 100.0, "log_ppl_ratio": -100.0}}
    row = theory_stats.order_row(theories, 0.95)
    assert "late" in row["arms"] and "late" not in row["ranked"]
    assert row["verdict"] == stats.CONFIRMED and row["rho"] == pytest.approx(1.0)
    without = theory_stats.order_row(theories, 0.95, without=("arm0",))
    assert "arm0" not in without["arms"] and without["ranked"] == [f"arm{a}" for a in range(1, 6)]


def test_report_section_without_theory_says_so(tmp_path):
    assert theory_stats.agreement(tmp_path) is None
    assert "no theory.json" in theory_stats.theory_section(None)


def test_figure7_renders_from_saved_theory(runs, tmp_path):
    seeded_copies(runs[0], tmp_path / "cpu", 0.02)
    outcome = theory_figure(theory_spec(), None, tmp_path / "cpu" / "sweep.json", tmp_path / "out")
    png, pdf, txt = outcome.files
    assert png.stat().st_size > 20_000 and pdf.stat().st_size > 5_000
    assert "rope seeds [0, 1, 2]" in txt.read_text() and outcome.message == "24 probe runs with a theory.json"
    empty = theory_figure(theory_spec(), None, tmp_path / "none" / "sweep.json", tmp_path / "out2")
    assert empty.files == () and "no theory.json" in empty.message


def test_a_users_family_trains_and_is_predicted_from_its_own_law(tmp_path, capsys):
    """`accum probe train --arm family --family module:Class` (the README's TwoPointAngles, theta = +-a), then eval and
    theory from the command line: the bridge's law is the family's own sampler, its coherent fraction at lag L is the
    family's closed form |cos a|^L (phi(1) = cos a) within the estimate's noise floor, and the premise follows it."""
    run = tmp_path / "twopoint"
    common = ["--threads", "1", "--no-progress"]
    assert main(["probe", "train", "--arm", "family", "--family", "accum.simulations.examples:TwoPointAngles",
                 "--family-param", "a=0.5", "--steps", "10", "--d-model", "16", "--n-heads", "2", "--n-layers", "2",
                 "--seq-len", str(L), "--batch-size", "4", "--tokenizer", "char", "--data-source", "stdlib",
                 "--out", str(run), *common]) == 0
    assert main(["probe", "eval", "--run", str(run), "--multipliers", "1", "2", "4", "--n-tokens", str(16 * L),
                 "--chunk", str(L), *common]) == 0
    assert main(["probe", "theory", "--run", str(run), "--windows", "8", "--threads", "1"]) == 0
    res = json.loads((run / bridge.THEORY_RESULTS).read_text())
    assert res["arm"] == "family" and "TwoPointAngles" in res["layers"][0]["law_source"]
    want = abs(math.cos(0.5)) ** L
    got = np.array([c for la in res["layers"] for c in la["coherent_at_L"]])
    assert np.all(np.abs(got - want) < 5.0 / math.sqrt(farlaw.COHERENCE_PATHS)), (got, want)
    assert res["applies_share"] == 1.0 and len(res["law_log_ratio"]) == 2
    assert "premise holds in 100% of heads" in capsys.readouterr().out


@pytest.mark.parametrize("token", ["query", "key"])
def test_learned_law_steps_are_the_models_step_angles(token):
    """The learned arm's step law reads the trained table with the model's own sign and token side: along the text,
    the law's step of each token is the step angle the forward pass used there (a random, nonzero table)."""
    model = ProbeModel(ModelConfig(arm="learned", vocab_size=DATA.vocab_size, d_model=16, n_heads=2, n_layers=2,
                                   learned_token=token), torch.Generator().manual_seed(0)).double()
    with torch.no_grad():
        for block in model.blocks:
            block.attn.angle_table.weight.normal_(0.0, 0.7, generator=torch.Generator().manual_seed(1))
    x = DATA.val[:40].view(1, 40)
    with torch.no_grad():
        out = model(x)
    real = steplaw.Realised([], out.step_angles, DATA.val.numpy())
    shift = 1 if token == "key" else 0  # the key side steps by the token before
    for layer in range(2):
        for head in range(2):
            table = steplaw.head_law(model, real, layer, head).family.table
            got = table[x[0, shift:].numpy() if shift == 0 else x[0, :-1].numpy()]
            want = out.step_angles[layer][0, head, shift:].numpy()
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_each_layer_reads_its_own_queries_and_keys():
    """The bridge's statistics of layer l come from layer l's queries and keys: C4's sd in theory.json equals the one
    computed from that layer's own q, k and attention (a two-layer model whose layers differ)."""
    model = ProbeModel(ModelConfig(arm="random", vocab_size=DATA.vocab_size, d_model=16, n_heads=2, n_layers=2),
                       torch.Generator().manual_seed(3))
    with torch.no_grad():
        model.blocks[1].attn.qkv.weight.mul_(7.0)  # layer 1's scores far larger than layer 0's
    cfg = bridge.BridgeConfig(windows=2, streams=8, queries=8)
    res = bridge.run_theory(model, L, DATA.val, cfg)
    x, _ = bridge.eval_windows(DATA.val, 2 * L, cfg.windows * 2 * L)
    uniforms = model.draw_noise(x.shape[0], 2 * L, torch.Generator().manual_seed(cfg.seed))
    with torch.no_grad():
        out = model(x, None, uniforms, need_weights=True)
        inputs = analysis.layer_inputs(model, x, uniforms)
        for layer in range(2):
            q, k, _ = model.blocks[layer].attn.heads(inputs[layer])
            own = farlaw.near_statistics(q, k, out.weights[layer], L)
            assert res["layers"][layer]["c4_sd"] == pytest.approx([farlaw.c4_sd(s) for s in own], rel=1e-12), layer


def test_without_rotation_keeps_the_bias_and_drops_the_transport():
    law = steplaw.HeadLaw(steplaw.DriftUniform(8, 100.0), 0.25, "drift")
    plain = steplaw.without_rotation(law)
    assert plain.slope == 0.25 and plain.family.dim == 8
    steps = plain.family.sample(np.random.default_rng(0), 5, 3)
    x = np.random.default_rng(1).normal(size=(3, 8))
    np.testing.assert_array_equal(steps.transposed().transport(x)[:, -1], x)  # A = I: the query is not moved


def test_log_odds_error_is_the_far_and_near_mass_log_ratios_together():
    """logit(F) = log F - log(1 - F), far masses clipped to [FLOOR, 1 - FLOOR]: the log-odds error of a prediction is
    its far-mass log ratio minus its near-mass log ratio."""
    f = np.array([0.2, 0.9, 0.0, 1.0])
    np.testing.assert_allclose(theory_stats.logit(f)[:2], [math.log(0.2 / 0.8), math.log(0.9 / 0.1)], rtol=1e-12)
    assert theory_stats.logit(f)[2] == pytest.approx(-theory_stats.logit(f)[3]) == pytest.approx(math.log(bridge.FLOOR / (1 - bridge.FLOOR)))
    pred, meas = np.array([0.97, 0.3]), np.array([0.95, 0.25])
    np.testing.assert_allclose(theory_stats.logit(pred) - theory_stats.logit(meas),
                               np.log(pred / meas) - np.log((1 - pred) / (1 - meas)), rtol=1e-12)


def test_judged_rows_share_one_family_wise_level():
    """m = 2 predictions x the judged multipliers each arm evaluated + 2 order rows; every judged row at 1 - 0.05/m."""
    run = synthetic_run([[0.1, 0.2]], [[0.1, 0.2]], mult=(2, 8))
    theories = {"a": {"0": run}, "b": {"0": dict(run, multipliers=[8, 64])}}
    assert theory_stats.judged_count(theories) == 2 * 1 + 2 * 2 + 2
    assert theory_stats.row_level(theories) == pytest.approx(1 - 0.05 / 8)


def test_run_errors_per_layer_mean_the_heads_of_each_layer():
    """Two layers of three heads (layers != heads, so a mean over the wrong axis has another shape): d per layer is
    the mean over that layer's heads of logit(F_law) - logit(F_meas), by hand; d is the mean over all six."""
    meas = [[0.2, 0.5], [0.3, 0.6], [0.4, 0.7]]
    law = [[0.25, 0.5], [0.3, 0.65], [0.5, 0.7]]
    one = synthetic_run(meas, law)
    two = dict(one, layers=[one["layers"][0], dict(one["layers"][0], far_mass_law=meas)],
               train_config={"arm": "rope", "n_heads": 3})
    err = theory_stats.run_errors(two, "law")
    logodds = np.log(np.array(law) / (1 - np.array(law))) - np.log(np.array(meas) / (1 - np.array(meas)))
    first = logodds.mean(axis=0)
    np.testing.assert_allclose(err["d_layers"], [first, [0.0, 0.0]], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(err["d"], first / 2, rtol=1e-12)


def test_window_rows_give_each_arm_its_window_ranges_and_rho():
    """One printed row per arm: the range of the predicted and measured windows over its runs' heads, and the mean
    over seeds of the head rank correlation (seeds whose predicted windows do not vary are left out)."""
    def run(pred, meas, rho, spread):
        layer = {"window_pred": pred, "window_measured": meas}
        return {"layers": [layer], "spearman_window": rho, "window_pred_range": spread}

    theories = {"a": {"0": run([2.0, 5.0], [30.0, 40.0], 0.5, 3.0), "1": run([3.0, 9.0], [20.0, 41.0], 0.3, 6.0),
                      "2": run([4.0, 4.0], [25.0, 26.0], None, 0.0)},
                "b": {"0": run([1.0, 1.5], [10.0, 12.0], -0.2, 0.5)}}
    rows = {r["arm"]: r for r in theory_stats.window_rows(theories)}
    assert rows["a"]["window_pred"] == [2.0, 9.0] and rows["a"]["window_measured"] == [20.0, 41.0]
    assert rows["a"]["seeds"] == 3 and rows["a"]["values"] == [0.5, 0.3] and rows["a"]["mean"] == pytest.approx(0.4)
    assert rows["b"]["values"] == [] and rows["b"]["window_pred"] == [1.0, 1.5]


def test_degradation_order_verdicts_at_a_stricter_level():
    """At level 0.99 each side gets alpha / 2 = 0.005: the exact order of 6 arms (p = 1/720 = 0.0014) is CONFIRMED and
    the reversed one CONTRADICTED; at level 0.999 (0.0005 a side) neither is resolved."""
    for sign, verdict in ((1.0, stats.CONFIRMED), (-1.0, stats.CONTRADICTED)):
        assert theory_stats.order_row(synthetic_theories(6, 3, sign), 0.99)["verdict"] == verdict
        assert theory_stats.order_row(synthetic_theories(6, 3, sign), 0.999)["verdict"] == stats.NOT_RESOLVED


def test_failures_name_the_share_of_heads_outside_the_premise():
    """An arm whose premise holds in a quarter of its heads fails it in 75% of them; an arm where it holds everywhere
    is not listed; a CONTRADICTED row is listed with its log-odds d."""
    result = {"applies_share": {"a": 0.25, "b": 1.0},
              "far": [{"arm": "a", "multiplier": 8, "kind": "law", "verdict": stats.CONTRADICTED, "mean": 0.5}],
              "orders": []}
    lines = theory_stats.failures(result)
    assert lines[0].startswith("a: incoherence premise fails in 75% of heads") and not any(l.startswith("b:") for l in lines)
    assert lines[1].endswith("CONTRADICTED (log-odds d = +0.500)") and len(lines) == 2


@pytest.mark.parametrize("kind", ["law", "c3"])
def test_far_rows_are_judged_at_the_judged_lengths_only(kind):
    """Both predictions are judged at 8x, 64x and 512x; 2x (in-sample for C3) and 4x are printed, not judged."""
    meas = [[0.3, 0.5, 0.6, 0.8, 0.9], [0.2, 0.4, 0.5, 0.7, 0.95]]
    runs = {str(s): synthetic_run(meas, meas, mult=(2, 4, 8, 64, 512)) for s in range(3)}
    rows = theory_stats.far_rows({"rope": runs}, kind, 0.95)
    assert {r["multiplier"]: r["judged"] for r in rows} == {2: False, 4: False, 8: True, 64: True, 512: True}


def test_a_baseline_is_beaten_only_when_the_whole_interval_is_above_zero():
    """e_baseline - e_law per seed: all clearly positive beats the baseline; a mean above 0 whose interval reaches
    below 0 does not; too few seeds with the baseline give None."""
    law = [0.1, 0.1, 0.1, 0.1]
    assert theory_stats.beats(law, [0.5, 0.6, 0.55, 0.52], 0.95)["beats"] is True
    straddles = theory_stats.beats(law, [0.5, -0.2, 0.3, 0.0], 0.95)
    assert straddles["mean"] > 0 and straddles["ci"][0] < 0 < straddles["ci"][1] and straddles["beats"] is False
    assert theory_stats.beats(law, [0.5, None, None, None], 0.95)["beats"] is None


def test_degradation_order_p_values_are_one_on_the_far_side():
    """(1 + #{perm >= rho}) / (1 + P): every permutation's rho is >= -1, so a reversed order has p_up = 1 exactly, and
    an exact order p_down = 1 (the +1 counts the observed order among the permutations)."""
    reversed_row = theory_stats.order_row(synthetic_theories(theory_stats.MIN_ORDER_ARMS, 3, -1.0), 0.95)
    exact_row = theory_stats.order_row(synthetic_theories(theory_stats.MIN_ORDER_ARMS, 3, 1.0), 0.95)
    assert reversed_row["rho"] == pytest.approx(-1.0) and reversed_row["p"] == 1.0
    assert exact_row["rho"] == pytest.approx(1.0) and exact_row["p_down"] == 1.0


def test_an_unresolved_order_without_arms_names_them():
    """A NOT RESOLVED degradation order over a subset names the arms left out, with its note."""
    row = theory_stats.order_row(synthetic_theories(theory_stats.MIN_ORDER_ARMS, 1, 1.0), 0.95, without=("arm0",))
    lines = theory_stats.unresolved({"far": [], "orders": [row]})
    assert lines == [f"degradation order (without arm0) ({row['note']})"]


def test_window_rho_counts_runs_whose_predicted_windows_span_one_token():
    """The Spearman rho of a run enters when its predicted windows span at least 1.0 (the boundary included)."""
    layer = {"window_pred": [1.0, 2.0], "window_measured": [1.5, 2.5]}
    runs = {"0": {"window_pred_range": 1.0, "spearman_window": 0.5, "layers": [layer]},
            "1": {"window_pred_range": 0.5, "spearman_window": 0.9, "layers": [layer]}}
    (row,) = theory_stats.window_rows({"arm": runs})
    assert row["values"] == [0.5] and row["window_pred"] == [1.0, 2.0]
