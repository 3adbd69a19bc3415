"""The sequential stopping rule of the probe sweep, the angle-table learning rate and the table tests."""

from dataclasses import replace

import numpy as np
import pytest
import torch
from scipy import stats as sps

from accum.cli import main
from accum.probes import stats as S
from accum.probes import tables as T
from accum.probes.sweep import run_sweep
from accum.probes.sweepconfig import SweepConfig, missing_runs
from accum.probes.train import TrainConfig, build_model, make_optimizer, train
from accum.simulations.params import ParamError
from test_probes_train import DATA, TINY

torch.set_num_threads(1)

BEATS = S.claim_definitions(S.plain_specs(["rope", "random"]))[0]


def run(ppl_1x: float, ppl_far: float) -> dict:
    return {"ppl": [ppl_1x, ppl_far], "ppl_last_segment": [ppl_1x, ppl_far], "ppl_last_segment_1x": [ppl_1x, ppl_1x]}


def beats_runs(d: list[float]) -> dict:
    """rope / random runs whose paired d = log ppl_rope(M) - log ppl_random(M) is ``d`` seed by seed."""
    return {"rope": {str(s): run(10, 20 * np.exp(v)) for s, v in enumerate(d)},
            "random": {str(s): run(10, 20) for s in range(len(d))}}


def test_a_claim_stops_at_the_first_look_that_resolves_it_with_the_bonferroni_level():
    d = [0.30, 0.32, 0.28, 0.31, 0.29, 0.30, -5.0, -5.0]  # seeds 6, 7 would reverse it: never looked at
    row = S.sequential_verdict(BEATS, beats_runs(d), "ppl", list(range(8)), [3, 6, 8], 0.05)
    assert row["stopped"] == "resolved" and row["look"] == 3 and row["seeds"] == [0, 1, 2]
    assert row["level"] == pytest.approx(1 - 0.05 / 3) and row["verdict"] == S.CONFIRMED
    x = np.array(d[:3])
    half = sps.t.ppf(1 - 0.05 / 6, 2) * x.std(ddof=1) / np.sqrt(3)
    assert row["ci"] == pytest.approx([x.mean() - half, x.mean() + half])


def test_an_unresolved_claim_waits_for_its_next_look_then_reports_the_cap():
    d = [0.1, -0.1, 0.05, -0.05, 0.02, -0.02]
    runs = beats_runs(d[:4])
    row = S.sequential_verdict(BEATS, runs, "ppl", list(range(6)), [3, 6], 0.05)
    assert row["stopped"] == "pending" and row["look"] == 6 and row["seeds"] == [0, 1, 2]
    need = S.needed_runs([row], S.plain_specs(["rope", "random"]), list(range(6)), [3, 6])
    assert need == {(a, s) for a in ("rope", "random") for s in range(6)}
    row = S.sequential_verdict(BEATS, beats_runs(d), "ppl", list(range(6)), [3, 6], 0.05)
    assert row["stopped"] == "cap" and row["verdict"] == S.NOT_RESOLVED and row["ci"][0] < 0 < row["ci"][1]
    assert S.needed_runs([row], S.plain_specs(["rope", "random"]), list(range(6)), [3, 6]) == {
        (a, s) for a in ("rope", "random") for s in range(3)}


def test_the_sequential_rule_keeps_its_error_budget_under_no_effect():
    """d ~ N(0, 1) i.i.d.: over looks 3, 6, 10, 15 the rule wrongly CONFIRMS at most alpha / 2 = 2.5% of claims.
    2000 simulated claims: the count is held to the binomial 99.9% quantile at 2.5% (false-failure budget 1e-3)."""
    rng = np.random.default_rng(20261204)
    wrong = 0
    for _ in range(2000):
        row = S.sequential_verdict(BEATS, beats_runs(rng.standard_normal(15).tolist()), "ppl", list(range(15)),
                                   [3, 6, 10, 15], 0.05)
        wrong += row["verdict"] == S.CONFIRMED
    assert wrong <= sps.binom.ppf(0.999, 2000, 0.025)
    # the rule is not vacuous: one look at 95% on the same kind of data confirms about 2.5%
    fixed = sum(S.sequential_verdict(BEATS, beats_runs(rng.standard_normal(15).tolist()), "ppl", list(range(15)),
                                     [15], 0.05)["verdict"] == S.CONFIRMED for _ in range(2000))
    assert sps.binom.ppf(0.0005, 2000, 0.025) <= fixed <= sps.binom.ppf(0.9995, 2000, 0.025)


def test_a_real_effect_is_confirmed_early_under_the_rule():
    rng = np.random.default_rng(7)
    looks = [S.sequential_verdict(BEATS, beats_runs((0.2 + 0.1 * rng.standard_normal(15)).tolist()), "ppl",
                                  list(range(15)), [3, 6, 10, 15], 0.05)["look"] for _ in range(50)]
    assert np.mean(looks) <= 6.5


@pytest.mark.parametrize("looks", [(2,), (3, 3), (6, 3), (3, 20), (3.5,)])
def test_bad_looks_are_refused_naming_looks(looks):
    with pytest.raises(ParamError, match="looks"):
        SweepConfig(seeds=tuple(range(10)), looks=looks)


def test_bad_alpha_is_refused():
    with pytest.raises(ParamError, match="alpha"):
        SweepConfig(alpha=1.5)


def test_sequential_sweep_runs_only_what_the_rule_asks_for(tmp_path, monkeypatch):
    """Seeds 0..3, looks 3 and 4: nope is in no claim (3 seeds); alibi's flatness, judged on near-identical tiny
    runs, either resolves at 3 or asks for seed 3; missing is always what the rule asks minus what is done."""
    cfg = SweepConfig(train=TrainConfig(steps=2, **TINY), arms=("nope", "alibi"), seeds=(0, 1, 2, 3), looks=(3, 4),
                      eval=replace(SweepConfig().eval, multipliers=(1, 2), n_tokens=4 * 2 * 16, chunk=16),
                      analysis_multiplier=2, analysis_windows=1)
    monkeypatch.setattr("accum.probes.sweep.load_data", lambda c, d: (DATA, {"source": "test"}))
    res = run_sweep(cfg, tmp_path, threads=1)
    assert res["complete"] and res["missing"] == []
    assert sorted(res["runs"]["nope"], key=int) == ["0", "1", "2"]
    flat = next(r for r in res["verdicts"] if r["claim"] == "alibi_flat" and r["metric"] == "ppl")
    assert len(res["runs"]["alibi"]) == (3 if flat["look"] == 3 and flat["stopped"] == "resolved" else 4)
    assert missing_runs(cfg, {"nope": {}, "alibi": {}}) == [[a, s] for s in (0, 1, 2) for a in ("nope", "alibi")]


def test_angle_lr_scale_moves_the_tables_only():
    """Adam's first step moves each parameter with a gradient by its group's rate: the tables by scale x lr,
    everything else exactly as at scale 1."""
    moved = {}
    for scale in (1.0, 3.0):
        cfg = TrainConfig(arm="learned", angle_lr_scale=scale, **TINY)
        model = build_model(cfg, DATA.vocab_size)
        opt = make_optimizer(model, cfg)
        for g in opt.param_groups:
            g["lr"] = 1e-3 * g["lr_scale"]
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        x = DATA.train[: 17 * 4].view(4, 17)
        logits = model(x[:, :-1]).logits
        torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1)).backward()
        opt.step()
        moved[scale] = {n: (p.detach() - before[n]) for n, p in model.named_parameters()}
    for name, step in moved[1.0].items():
        if "angle_table" in name:
            assert step.abs().max() == pytest.approx(1e-3, rel=1e-3)
            assert moved[3.0][name].abs().max() == pytest.approx(3e-3, rel=1e-3)
        else:
            assert torch.equal(step, moved[3.0][name]), name
    with pytest.raises(ParamError, match="angle_lr_scale"):
        TrainConfig(angle_lr_scale=0.0)


def test_a_config_saved_before_a_field_existed_reads_as_its_default():
    saved = TrainConfig(arm="rope").to_dict()
    del saved["angle_lr_scale"]
    assert TrainConfig.normalised(saved) == TrainConfig(arm="rope").to_dict()
    assert SweepConfig(train=TrainConfig(angle_lr_scale=10.0)).run_config("rope", 3).angle_lr_scale == 1.0
    assert SweepConfig(train=TrainConfig(angle_lr_scale=10.0)).run_config("learned_qkv", 3).angle_lr_scale == 10.0


def test_table_tests_on_a_tiny_trained_learned_arm(tmp_path):
    train(TrainConfig(arm="learned", steps=30, angle_lr_scale=10.0, **TINY), tmp_path, data=DATA, progress=False,
          threads=1)
    from accum.probes.train import load_trained
    model, _ = load_trained(tmp_path, DATA.vocab_size)
    table = model.blocks[0].attn.angle_table.weight.detach().clone()
    effect = T.shuffle_effect(model, DATA.val, 16, 8, torch.Generator().manual_seed(0))
    assert torch.equal(model.blocks[0].attn.angle_table.weight, table)  # restored
    assert effect["shuffled"]["windows"] == 8 and effect["shuffled"]["se"] > 0
    # zeroing the tables is exactly rope: the zero effect is rope's NLL minus the learned NLL
    rope = build_model(TrainConfig(arm="learned", **TINY), DATA.vocab_size)
    rope.load_state_dict(model.state_dict())
    T.with_tables(rope, [torch.zeros_like(b.attn.angle_table.weight) for b in rope.blocks])
    x, y = DATA.val[: 8 * 16].view(8, 16), DATA.val[1: 8 * 16 + 1].view(8, 16)
    assert effect["zero"]["mean"] == pytest.approx(float((T.window_nll(rope, x, y) - T.window_nll(model, x, y)).mean()))
    # a table of zeros has nothing to shuffle: exactly 0
    zero_model = build_model(TrainConfig(arm="learned", **TINY), DATA.vocab_size)
    flat = T.shuffle_effect(zero_model, DATA.val, 16, 8, torch.Generator().manual_seed(0))
    assert flat["shuffled"]["mean"] == 0.0 and flat["zero"]["mean"] == 0.0
    tokens = T.frequent_tokens(DATA.val, 5)
    counts = torch.bincount(DATA.val)
    assert counts[tokens[0]] == counts.max() and len(tokens) == 5
    dev = T.head_mean_deviation(model, tokens)
    assert dev.shape == (2, 5, model.cfg.n_planes)
    agree = T.cross_seed_agreement([dev, dev, -dev])
    assert agree["per_layer_mean"] == pytest.approx([-1 / 3, -1 / 3])
    with pytest.raises(ParamError, match="runs"):
        T.cross_seed_agreement([dev])
    with pytest.raises(ParamError, match="arm"):
        T.shuffle_effect(build_model(TrainConfig(arm="rope", **TINY), DATA.vocab_size), DATA.val, 16, 8,
                         torch.Generator())


def test_probe_tables_refuses_a_run_without_tables(tmp_path, capsys):
    train(TrainConfig(arm="rope", steps=2, **TINY), tmp_path / "r", data=DATA, progress=False, threads=1)
    assert main(["probe", "tables", "--runs", str(tmp_path / "r"), "--threads", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("accum probe tables: error:") and "learned" in err and err.count("\n") == 1
    assert main(["probe", "tables", "--runs", str(tmp_path / "r"), "--windows", "1"]) == 2
    assert "--windows" in capsys.readouterr().err
    assert not (tmp_path / "out.json").exists()


def test_host_robustness_bounds_a_rerun_on_another_machine():
    """A verdict whose interval clears 0 by less than the host shift is flagged when its runs span machines; one
    far from it is not; moving every run's log perplexity by the tolerance (worst case for the mean) never flips a
    robust verdict; runs all from one machine carry no host shift (None)."""
    def on_hosts(runs: dict, hosts: tuple[str, str]) -> dict:
        for arm, host in zip(("rope", "random"), hosts):
            for r in runs[arm].values():
                r["host"] = host
        return runs
    far_runs = on_hosts(beats_runs([0.30, 0.32, 0.28]), ("a", "b"))
    near_runs = on_hosts(beats_runs([0.010, 0.011, 0.012]), ("a", "b"))
    far = S.sequential_verdict(BEATS, far_runs, "ppl", [0, 1, 2], [3], 0.05)
    near = S.sequential_verdict(BEATS, near_runs, "ppl", [0, 1, 2], [3], 0.05)
    assert far["verdict"] == near["verdict"] == S.CONFIRMED
    assert S.host_robust(BEATS, far, far_runs) is True and S.host_robust(BEATS, near, near_runs) is False
    one_host = on_hosts(beats_runs([0.010, 0.011, 0.012]), ("a", "a"))
    assert S.host_robust(BEATS, near, one_host) is None
    unknown = beats_runs([0.010, 0.011, 0.012])  # runs that do not say where they ran count as other machines
    assert S.host_robust(BEATS, near, unknown) is False
    tol = S.HOST_LOG_TOLERANCE["ppl"]
    shift = S.host_shift(BEATS, 3, 0.95, tol)
    assert shift == pytest.approx(2 * tol * (1 + sps.t.ppf(0.975, 2) / np.sqrt(2)))  # two runs per d
    moved = beats_runs([0.30, 0.32, 0.28])
    for s in moved["rope"]:
        moved["rope"][s]["ppl"][-1] *= np.exp(-tol)
    assert S.sequential_verdict(BEATS, moved, "ppl", [0, 1, 2], [3], 0.05)["verdict"] == S.CONFIRMED


def test_host_robustness_moves_both_ends_of_a_flat_claim():
    """A flat claim (ALiBi's +-log 1.05) is decided by both ends: an interval well inside the margin survives the
    host shift on either end; one whose upper end lies within the shift of the margin does not."""
    flat = next(c for c in S.claim_definitions(S.plain_specs(["rope", "random", "alibi"])) if c["id"] == "alibi_flat")
    runs = {arm: {str(s): {"host": "ab"[s % 2]} for s in range(10)} for _, arm, _ in flat["terms"]}
    shift = S.host_shift(flat, 10, 0.95, S.HOST_LOG_TOLERANCE["ppl"])  # a ratio: two logs, 0.028 at 10 seeds
    assert 0.01 < shift < S.FLAT_MARGIN - 0.01
    row = {"verdict": S.CONFIRMED, "n": 10, "level": 0.95, "metric": "ppl", "seeds": list(range(10))}
    assert S.host_robust(flat, {**row, "ci": [-0.005, 0.005]}, runs) is True
    assert S.host_robust(flat, {**row, "ci": [-0.005, S.FLAT_MARGIN - shift / 2]}, runs) is False
    assert S.host_robust(flat, {**row, "ci": [-S.FLAT_MARGIN + shift / 2, 0.005]}, runs) is False
