"""Seed-level intervals and the C7 verdict rules, on hand-made per-seed numbers with known answers."""

import math

import pytest
from scipy import stats as sps

from accum.probes import stats as S


def test_t_interval_is_the_student_interval():
    iv = S.t_interval([1.0, 2.0, 3.0])
    half = sps.t.ppf(0.975, 2) * 1.0 / math.sqrt(3)
    assert iv["n"] == 3 and iv["mean"] == 2.0 and iv["sd"] == pytest.approx(1.0)
    assert iv["ci"] == pytest.approx([2.0 - half, 2.0 + half]) and iv["level"] == 0.95
    assert half == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)
    assert S.t_interval([5.0]) == {"n": 1, "mean": 5.0, "sd": None, "ci": None, "level": 0.95}
    wide = S.t_interval([1.0, 2.0, 3.0], level=0.99)["ci"]
    assert wide == pytest.approx([2.0 - sps.t.ppf(0.995, 2) / math.sqrt(3), 2.0 + sps.t.ppf(0.995, 2) / math.sqrt(3)])
    assert S.t_interval([None, None])["n"] == 0


@pytest.mark.parametrize("ci,directional,flat", [
    ([0.01, 0.2], S.CONFIRMED, S.NOT_RESOLVED),
    ([-0.2, -0.01], S.CONTRADICTED, S.NOT_RESOLVED),
    ([-0.01, 0.02], S.NOT_RESOLVED, S.CONFIRMED),
    ([0.06, 0.3], S.CONFIRMED, S.CONTRADICTED),
    ([-0.3, -0.06], S.CONTRADICTED, S.CONTRADICTED),
    (None, S.NOT_RESOLVED, S.NOT_RESOLVED),
])
def test_verdict_rules(ci, directional, flat):
    assert S.directional_verdict(ci) == directional
    assert S.flat_verdict(ci) == flat  # margin log 1.05 = 0.0488


def run(ppl_1x: float, ppl_far: float) -> dict:
    return {"ppl": [ppl_1x, ppl_far], "ppl_last_segment": [ppl_1x, ppl_far], "ppl_last_segment_1x": [ppl_1x, ppl_1x]}


def test_claims_pair_seeds_and_decide_in_both_directions():
    """random is 10% +- a little better than rope at the far length on every seed (CONFIRMED); learned_qkv is
    worse than learned on every seed (qkv claim CONTRADICTED); learned degrades exactly like rope (d = 0 on every
    seed: NOT RESOLVED); alibi is flat within 1% (CONFIRMED)."""
    runs = {
        "rope": {"0": run(10, 20), "1": run(11, 23), "2": run(9, 18)},
        "random": {"0": run(20, 20 / 1.10), "1": run(25, 23 / 1.12), "2": run(19, 18 / 1.09)},
        "learned": {"0": run(10, 20), "1": run(11, 23), "2": run(9, 18)},
        "learned_qkv": {"0": run(10, 25), "1": run(10, 27), "2": run(9, 22)},
        "alibi": {"0": run(10, 10.05), "1": run(11, 11.0), "2": run(12, 11.95)},
    }
    rows = {(r["claim"], r["metric"]): r for r in S.verdicts(runs, S.plain_specs(list(runs)), [0, 1, 2], [3])}
    beat = rows[("random_beats_rope", "ppl")]
    assert beat["seeds"] == [0, 1, 2] and beat["values"] == pytest.approx([math.log(1.10), math.log(1.12), math.log(1.09)])
    assert beat["verdict"] == S.CONFIRMED
    assert rows[("qkv_beats_qk", "ppl")]["verdict"] == S.CONTRADICTED
    near = rows[("learned_stays_near_1x", "ppl")]
    assert near["seeds"] == [0, 1, 2] and near["values"] == pytest.approx([0.0, 0.0, 0.0])
    assert near["verdict"] == S.NOT_RESOLVED
    assert rows[("alibi_flat", "ppl_last_segment")]["verdict"] == S.CONFIRMED
    rot = rows[("rotation_only_degrades", "ppl")]
    assert rot["arms"] == ["rope", "random", "learned", "learned_qkv"]
    # random's ratio 20/1.1/12 etc. is < 1 on every seed: its row is CONTRADICTED, so the overall row is too
    assert rows[("rotation_only_degrades:random", "ppl")]["verdict"] == S.CONTRADICTED
    assert rot["verdict"] == S.CONTRADICTED
    assert ("rotation_only_degrades:gain", "ppl") not in rows  # no gain arm in this sweep: no claim row


def test_a_single_seed_never_resolves_a_claim():
    """One seed per arm however large the effect (3x): the look at 2 seeds waits, every claim NOT RESOLVED; rope's
    own degradation rows resolve once it has two seeds, while the paired rope-vs-random row still waits."""
    runs = {"rope": {"0": run(10, 30)}, "random": {"0": run(10, 12)}}
    rows = S.verdicts(runs, S.plain_specs(["rope", "random"]), [0, 1], [2])
    assert {r["verdict"] for r in rows} == {S.NOT_RESOLVED}
    assert {r["stopped"] for r in rows if "stopped" in r} == {"pending"}
    runs["rope"]["1"] = run(10, 31)
    rows = {(r["claim"], r["metric"]): r for r in S.verdicts(runs, S.plain_specs(["rope", "random"]), [0, 1], [2])}
    assert rows[("rotation_only_degrades:rope", "ppl")]["verdict"] == S.CONFIRMED
    assert rows[("random_beats_rope", "ppl")]["seeds"] == [] and rows[("random_beats_rope", "ppl")]["stopped"] == "pending"
    assert rows[("random_beats_rope", "ppl")]["verdict"] == S.NOT_RESOLVED


def test_arm_statistics_per_multiplier():
    arm = {"0": {**run(10, 20), "far_mass": [None, 0.2], "tokens_per_second": 100.0, "angle_spread": [0.1, 0.3]},
           "1": {**run(12, 30), "far_mass": [None, 0.4], "tokens_per_second": 120.0, "angle_spread": [0.3, 0.5]}}
    st = S.arm_statistics(arm)
    assert st["n_seeds"] == 2 and st["ppl"]["mean"] == [11.0, 25.0]
    assert st["ratio"]["mean"] == pytest.approx([1.0, 2.25])
    assert st["far_mass"]["mean"][0] is None and st["far_mass"]["mean"][1] == pytest.approx(0.3)
    assert st["angle_spread"] == pytest.approx([0.2, 0.4]) and st["tokens_per_second"]["mean"] == 110.0


@pytest.mark.parametrize("hosts, fragile, says", [
    (["vm-1"], [], "Every run ran on one machine (vm-1"),
    (["?"], [], "The runs come from 1 machine (?) ('?': runs that do not record their machine); every CONFIRMED"),
    (["vm-1", "vm-2"], ["alibi_flat (ppl)"], "The runs come from 2 machines (vm-1, vm-2); these verdicts could change"),
])
def test_host_note_says_where_the_runs_ran(hosts, fragile, says):
    from accum.probes.sweeptable import host_note

    note = host_note(hosts, fragile)
    assert note.startswith(says) and all(f in note for f in fragile)


def test_the_learned_claim_is_made_for_learned_arms_only():
    """Plain rope, random and learned arms: the random-vs-RoPE claim and one learned-vs-RoPE claim, none for rope or
    random themselves."""
    ids = [c["id"] for c in S.claim_definitions(S.plain_specs(["rope", "random", "learned"]))]
    assert ids.count("random_beats_rope") == 1
    assert [i for i in ids if i.startswith("learned_stays_near_1x")] == ["learned_stays_near_1x"]
