"""The paper-form C7 claims (probes/paper.py): the claims a sweep's arms make, the text blocks of a run, the
seed-and-text interval (against a plain formula, and its coverage under a known two-way null), the family-wise
level and the sequential rule."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from accum.probes import paper, stats
from accum.probes.sweepconfig import SweepConfig
from accum.probes.train import TrainConfig
from accum.probes.evaluate import EvalConfig


def test_text_block_count_divides_the_longest_multiplier():
    assert [paper.text_block_count(m) for m in (1, 2, 4, 12, 16, 48, 512)] == [1, 2, 4, 12, 16, 16, 16]
    assert paper.text_block_count(7) == 7 and paper.text_block_count(17) == 1


def test_text_blocks_pair_each_segment_with_the_1x_nll_of_its_own_tokens():
    # M = 4 segments, 2 windows: segment k of window w is 1x window 4 w + k; 1x NLL of window j is 10 + j
    one_x = [10.0 + j for j in range(8)]
    got = paper.text_blocks([1.0, 2.0, 3.0, 4.0], one_x, windows=2)
    # 4 blocks of one segment: ref_k = mean(10 + k, 14 + k) = 12 + k
    assert got == {"nll": [1.0, 2.0, 3.0, 4.0], "ref": [12.0, 13.0, 14.0, 15.0]}
    two = paper.text_blocks([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [float(j) for j in range(12)], windows=2)
    # M = 6: 6 blocks of one segment each; ref_k = mean(k, 6 + k) = 3 + k
    assert two["ref"] == [3.0, 4.0, 5.0, 6.0, 7.0, 8.0]


def plain_interval(d: np.ndarray, level: float) -> tuple[float, float]:
    """The seed-and-text interval written out with explicit loops (the module docstring's formula)."""
    s, b = d.shape
    seed_means = [sum(d[i, j] for j in range(b)) / b for i in range(s)]
    block_means = [sum(d[i, j] for i in range(s)) / s for j in range(b)]
    grand = sum(seed_means) / s
    var_s = sum((x - grand) ** 2 for x in seed_means) / (s - 1) / s
    var_b = sum((x - grand) ** 2 for x in block_means) / (b - 1) / b
    df = (var_s + var_b) ** 2 / (var_s**2 / (s - 1) + var_b**2 / (b - 1))
    half = sps.t.ppf(0.5 + level / 2, df) * math.sqrt(var_s + var_b)
    return grand - half, grand + half


def test_seed_text_interval_equals_the_plain_formula_on_an_asymmetric_matrix():
    rng = np.random.default_rng(3)
    d = rng.normal(0.2, 0.1, size=(5, 7)) + np.linspace(0, 0.3, 7)  # a position trend across blocks
    iv = paper.seed_text_interval(d, 0.99)
    assert iv["ci"] == pytest.approx(plain_interval(d, 0.99), rel=1e-12)
    assert iv["n"] == 5 and iv["blocks"] == 7 and iv["mean"] == pytest.approx(d.mean())


def test_seed_text_interval_without_text_blocks_is_the_seed_t_interval():
    d = np.array([[0.1], [0.3], [0.25], [0.05]])
    iv = paper.seed_text_interval(d, 0.95)
    assert iv["ci"] == pytest.approx(stats.t_interval(d[:, 0].tolist(), 0.95)["ci"], rel=1e-12)
    assert paper.seed_text_interval(d[:1], 0.95)["ci"] is None
    # no spread at all (identical seeds, one block): df falls back to S - 1 and the interval is the point
    flat = paper.seed_text_interval(np.full((4, 1), 0.2), 0.95)
    assert flat["df"] == 3.0 and flat["ci"] == pytest.approx([0.2, 0.2], abs=1e-15)


@pytest.mark.parametrize("text_sd", [0.0, 0.05, 0.2])
def test_seed_text_interval_covers_under_a_two_way_null(text_sd):
    """d_sb = mu + a_s + t_b + e_sb with a shared text effect t_b: the interval covers mu at least at its level (the
    text term errs wide), while the seed-only t interval falls short once the text varies."""
    rng = np.random.default_rng(11)
    level, reps, s, b = 0.9, 3000, 6, 16
    a = rng.normal(0, 0.1, size=(reps, s, 1))
    t = rng.normal(0, text_sd, size=(reps, 1, b))
    e = rng.normal(0, 0.05, size=(reps, s, b))
    d = a + t + e
    cover = [(lambda ci: ci[0] <= 0 <= ci[1])(paper.seed_text_interval(x, level)["ci"]) for x in d]
    seed_only = [(lambda ci: ci[0] <= 0 <= ci[1])(stats.t_interval(x.mean(1).tolist(), level)["ci"]) for x in d]
    rate, se = np.mean(cover), math.sqrt(level * (1 - level) / reps)
    assert rate >= level - 3.5 * se
    if text_sd >= 0.2:
        assert np.mean(seed_only) < level - 5 * se  # the interval over seeds alone misses the text


def test_row_level_splits_alpha_over_rows_and_looks():
    assert paper.row_level(0.05, 27, 3) == pytest.approx(1 - 0.05 / 81)


SPECS = {**stats.plain_specs(["nope", "rope", "alibi", "random", "random_qkv", "learned", "learned_qkv", "path"]),
         "learned_key": {"arm": "learned", "learned_token": "key"},
         "learned_qkv_key": {"arm": "learned_qkv", "learned_token": "key"}}


def test_paper_claims_of_the_arms():
    ids = [c["id"] for c in paper.paper_claims(SPECS)]
    assert ids == ["paper:random_beats_rope", "paper:learned_near_1x:learned", "paper:learned_near_1x:learned_qkv",
                   "paper:learned_near_1x:learned_key", "paper:learned_near_1x:learned_qkv_key",
                   "paper:qkv_beats_qk:random_qkv", "paper:qkv_beats_qk:learned_qkv",
                   "paper:qkv_beats_qk:learned_qkv_key", "paper:alibi_flat",
                   *(f"paper:rotation_degrades_beyond_nope:{a}" for a in
                     ("rope", "random", "random_qkv", "learned", "learned_qkv", "learned_key", "learned_qkv_key"))]
    by_id = {c["id"]: c for c in paper.paper_claims(SPECS)}
    assert by_id["paper:qkv_beats_qk:random_qkv"]["group"] == "qkv_beats_qk"
    assert by_id["paper:qkv_beats_qk:learned_qkv"]["group"] is None  # the headline is the random pairs
    assert by_id["paper:learned_near_1x:learned"]["test"] == "flat"
    assert by_id["paper:rotation_degrades_beyond_nope:rope"]["terms"] == [(1, "rope", "ratio"), (-1, "nope", "ratio")]
    # without NoPE there is no control, so no rotation-only row
    no_nope = {k: v for k, v in SPECS.items() if k != "nope"}
    assert not any("beyond_nope" in c["id"] for c in paper.paper_claims(no_nope))


def run(nll: float, ref: float, blocks: int = 4, tilt: float = 0.0) -> dict:
    """A run summary holding only what the paper rows read: its text blocks."""
    return {"text_blocks": {"nll": [nll + tilt * b for b in range(blocks)], "ref": [ref] * blocks}}


def test_block_values_and_the_verdicts_of_a_directional_and_a_flat_row():
    seeds = list(range(6))
    rng = np.random.default_rng(0)
    runs = {"rope": {str(s): run(5.0 + 0.01 * rng.normal(), 4.6, tilt=0.02) for s in seeds},
            "random": {str(s): run(4.8 + 0.01 * rng.normal(), 4.7, tilt=0.02) for s in seeds},
            "alibi": {str(s): run(4.70 + 0.002 * rng.normal(), 4.70) for s in seeds}}
    beats, flat = (c for c in paper.paper_claims(stats.plain_specs(["rope", "random", "alibi"]))
                   if c["id"] in ("paper:random_beats_rope", "paper:alibi_flat"))
    d = paper.block_values(beats, runs, seeds)
    assert d.shape == (6, 4) and d.mean() == pytest.approx(np.mean([
        runs["rope"][str(s)]["text_blocks"]["nll"][b] - runs["random"][str(s)]["text_blocks"]["nll"][b]
        for s in seeds for b in range(4)]))
    row = paper.paper_verdict(beats, runs, seeds, [3, 6], 0.99)
    assert row["verdict"] == stats.CONFIRMED and row["look"] == 3 and row["stopped"] == "resolved"
    assert paper.paper_verdict(flat, runs, seeds, [3, 6], 0.99)["verdict"] == stats.CONFIRMED
    far = {**runs, "alibi": {str(s): run(5.0 + 0.002 * rng.normal(), 4.7) for s in seeds}}
    assert paper.paper_verdict(flat, far, seeds, [3, 6], 0.99)["verdict"] == stats.CONTRADICTED
    # a look that lacks a run waits for it, and the rule asks for exactly the claim's arms at that look's seeds
    partial = {arm: {k: v for k, v in r.items() if int(k) < 4} for arm, r in runs.items()}
    pending = paper.paper_verdict(beats, partial, seeds, [6], 0.99)
    assert pending["stopped"] == "pending" and pending["look"] == 6
    assert paper.needed_runs([pending], stats.plain_specs(["rope", "random", "alibi"]), seeds) == \
        {(arm, s) for arm in ("rope", "random") for s in seeds}


def test_group_rows_contradicted_if_any_confirmed_if_all():
    rows = [{"group": "qkv_beats_qk", "claim": "paper:qkv_beats_qk:random_qkv", "verdict": stats.CONFIRMED},
            {"group": "qkv_beats_qk", "claim": "paper:qkv_beats_qk:random_qkv_indep", "verdict": stats.CONTRADICTED},
            {"group": None, "claim": "paper:alibi_flat", "verdict": stats.CONFIRMED}]
    (head,) = paper.group_rows(rows)
    assert head["verdict"] == stats.CONTRADICTED and head["arms"] == ["random_qkv", "random_qkv_indep"]
    rows[1]["verdict"] = stats.CONFIRMED
    assert paper.group_rows(rows)[0]["verdict"] == stats.CONFIRMED
    rows[1]["verdict"] = stats.NOT_RESOLVED
    assert paper.group_rows(rows)[0]["verdict"] == stats.NOT_RESOLVED


def test_sweep_config_paper_looks_and_multipliers():
    base = dict(train=TrainConfig(), eval=EvalConfig(multipliers=(1, 2, 4), n_tokens=2 * 4 * 128),
                arms=("rope", "random"), seeds=tuple(range(10)), looks=(3, 6, 10))
    cfg = SweepConfig(**base, paper_looks=(6, 10))
    assert cfg.paper_plan_looks == (6, 10) and SweepConfig(**base).paper_plan_looks == (3, 6, 10)
    assert SweepConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(Exception, match="paper_looks"):
        SweepConfig(**base, paper_looks=(6, 4))
    with pytest.raises(Exception, match="multipliers"):
        SweepConfig(**{**base, "eval": EvalConfig(multipliers=(2, 4), n_tokens=2 * 4 * 128)})


def test_text_blocks_average_the_segments_of_each_block():
    """M = 48 segments in 16 blocks of 3 consecutive segments: block j's NLL is the mean of segments 3j..3j+2."""
    segments = [float(k * k) for k in range(48)]
    got = paper.text_blocks(segments, [0.0] * 48, windows=1)
    assert got["nll"] == pytest.approx([sum(segments[3 * j:3 * j + 3]) / 3 for j in range(16)])
    assert got["ref"] == [0.0] * 16
