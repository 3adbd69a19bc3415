"""The C7 claims in the form the paper states them, under one family-wise error level, with intervals that cover
the evaluation text as well as the training seed.

Declared in the cpu sweep's design after its first look (3 seeds) and before its second was read; the
pre-registered rows of ``probes.stats`` stay beside them unchanged.  Each row is judged at the longest length M on
the perplexity over all positions:

* ``paper:random_beats_rope``: d = log ppl_rope(M) - log ppl_random(M) > 0;
* ``paper:learned_near_1x:<label>`` for every learned arm (queries and keys, or values too): the paper says the
  learned angles stay *near* their train-length perplexity, so the row is ALiBi's flatness test with ALiBi's margin,
  d = log[ppl(M)/ppl(1x)] inside +-log 1.05 (``stats.FLAT_MARGIN``; not "degrades less than RoPE");
* ``paper:qkv_beats_qk:<label>`` for every value-rotating arm beside its QK arm, d = log ppl_qk(M) - log ppl_qkv(M) > 0;
  the headline is the random pairs (the paper's random rotations), every one of them;
* ``paper:alibi_flat``: d = log[ppl_alibi(M)/ppl_alibi(1x)] inside +-log 1.05;
* ``paper:rotation_degrades_beyond_nope:<label>`` for every rotation-only arm, when the sweep has NoPE: the arm's
  degradation beyond the control's, d = log[ppl(M)/ppl(1x)] - log[ppl_nope(M)/ppl_nope(1x)] > 0 (NoPE degrades too,
  so "degrades" alone is passed by a model with no positions at all).

Interval (seed and text).  Each run's longest length is scored on windows of the same validation text for every
seed, so a seed interval leaves the text out.  The M segments of length L_train (``evaluate.evaluate_length``'s
segment_nll, mean over the windows) are cut into B contiguous text blocks (``text_block_count``), and per seed s and
block b the claim gives d_sb (the 1x reference of a ratio is the 1x NLL of exactly those tokens).  With
d_s = mean_b d_sb and e_b = mean_s d_sb,

    V = var_s(d_s) / S + var_b(e_b) / B,    df = V^2 / [(var_s/S)^2 / (S - 1) + (var_b/B)^2 / (B - 1)]  (Satterthwaite),

and the interval is mean(d) +- t_{1 - a/2, df} sqrt(V).  The text term is the batch-means variance of the seeds'
mean series; it also holds the blocks' position trend and the seeds' own noise, so it errs wide (conservative).

Level.  A sweep's paper rows share one family-wise level alpha (``SweepConfig.alpha``): with m rows judged at K
looks (``SweepConfig.paper_plan_looks``), every row's interval at every look has two-sided level 1 - alpha / (K m),
so the chance of any wrong verdict (a CONFIRMED or a CONTRADICTED on the wrong side) over all rows and looks is at
most alpha by the union bound, whatever the dependence between rows (Holm's step-down is not used: its control of
errors in the sign is proven for independent statistics only).  A row stops at the first look that resolves it.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as sps

from accum.probes import stats

PREFIX = "paper:"
#: the most text blocks of the longest length the interval uses (``text_block_count``)
MAX_TEXT_BLOCKS = 16
#: the value-rotating arms whose pairs make the headline "QKV beats QK" (the paper's random rotations)
RANDOM_QKV = ("random_qkv", "random_drift_qkv", "random_qkv_indep", "family_qkv")
#: the headlines some rows make up together (``group_rows``): group -> what it states
GROUPS = {"qkv_beats_qk": "rotating values too beats queries and keys only, for every pair of random rotations",
          "rotation_degrades_beyond_nope": "every rotation-only arm degrades more than NoPE at the longest length"}


def text_block_count(multiplier: int) -> int:
    """B: the largest divisor of the longest multiplier M (its number of L_train segments) that is at most
    ``MAX_TEXT_BLOCKS``, so every block holds M / B segments."""
    return max(b for b in range(1, min(MAX_TEXT_BLOCKS, multiplier) + 1) if multiplier % b == 0)


def text_blocks(segment_nll: list[float], window_nll_1x: list[float], windows: int) -> dict:
    """{"nll": [B], "ref": [B]}: the mean NLL of each text block of the longest length (its M segments, each the mean
    over ``windows`` windows, cut into B = ``text_block_count(M)`` equal blocks) and the mean 1x NLL of the same
    tokens (segment k of window w is 1x window w M + k)."""
    m = len(segment_nll)
    ref = [sum(window_nll_1x[w * m + k] for w in range(windows)) / windows for k in range(m)]
    b = text_block_count(m)
    return {"nll": np.asarray(segment_nll).reshape(b, -1).mean(1).tolist(),
            "ref": np.asarray(ref).reshape(b, -1).mean(1).tolist()}


def paper_claims(specs: dict[str, dict]) -> list[dict]:
    """The paper-form claims a sweep's arms allow (module docstring): id, statement, rule, terms [(coef, arm label,
    kind)], test ("directional" or "flat"), group (the headline they make up, or None)."""
    plain = {label for label, spec in specs.items() if spec == {"arm": label}}
    claims = []
    if {"rope", "random"} <= plain:
        claims.append({"id": PREFIX + "random_beats_rope", "group": None, "test": "directional",
                       "statement": "random accumulated rotations beat RoPE at the longest length",
                       "rule": "d = log ppl_rope(M) - log ppl_random(M) > 0",
                       "terms": [(1, "rope", "ppl"), (-1, "random", "ppl")]})
    for label, spec in specs.items():
        if spec["arm"] in ("learned", "learned_qkv"):
            claims.append({"id": f"{PREFIX}learned_near_1x:{label}", "group": None, "test": "flat",
                           "statement": f"learned token angles ({label}) stay near their 1x perplexity (ALiBi's margin)",
                           "rule": f"d = log[ppl_{label}(M)/ppl_{label}(1x)] inside +-log 1.05",
                           "terms": [(1, label, "ratio")]})
    for label, spec in specs.items():
        qk = next((other for other, o in specs.items() if spec["arm"] in stats.QK_OF
                   and o == {**spec, "arm": stats.QK_OF[spec["arm"]]}), None)
        if qk is not None:
            claims.append({"id": f"{PREFIX}qkv_beats_qk:{label}", "test": "directional",
                           "group": "qkv_beats_qk" if spec["arm"] in RANDOM_QKV else None,
                           "statement": f"rotating values too ({label}) beats queries and keys only ({qk})",
                           "rule": f"d = log ppl_{qk}(M) - log ppl_{label}(M) > 0",
                           "terms": [(1, qk, "ppl"), (-1, label, "ppl")]})
    if "alibi" in plain:
        claims.append({"id": PREFIX + "alibi_flat", "group": None, "test": "flat", "statement": "ALiBi stays flat",
                       "rule": "d = log[ppl_alibi(M)/ppl_alibi(1x)] inside +-log 1.05", "terms": [(1, "alibi", "ratio")]})
    if "nope" in plain:
        for label, spec in specs.items():
            if spec["arm"] not in stats.NOT_ROTATION_ONLY:
                claims.append({"id": f"{PREFIX}rotation_degrades_beyond_nope:{label}", "test": "directional",
                               "group": "rotation_degrades_beyond_nope",
                               "statement": f"rotation-only arm {label} degrades more than NoPE at the longest length",
                               "rule": f"d = log[ppl_{label}(M)/ppl_{label}(1x)] - log[ppl_nope(M)/ppl_nope(1x)] > 0",
                               "terms": [(1, label, "ratio"), (-1, "nope", "ratio")]})
    return claims


def block_values(claim: dict, runs: dict, seeds: list[int]) -> np.ndarray | None:
    """(S, B) paired d_sb of ``claim`` (module docstring) at ``seeds``, or None unless every arm of the claim has them
    all: per block, the kind "ppl" contributes its NLL, "ratio" its NLL less the 1x NLL of the same tokens."""
    arms = [arm for _, arm, _ in claim["terms"]]
    if any(str(s) not in runs.get(arm, {}) for arm in arms for s in seeds):
        return None

    def block(run: dict, kind: str) -> np.ndarray:
        tb = run["text_blocks"]
        return np.asarray(tb["nll"]) - (np.asarray(tb["ref"]) if kind == "ratio" else 0.0)

    return np.array([sum(c * block(runs[arm][str(s)], kind) for c, arm, kind in claim["terms"]) for s in seeds])


def seed_text_interval(d: np.ndarray, level: float) -> dict:
    """{"n", "blocks", "mean", "se_seed", "se_text", "df", "ci", "level"} of the (S, B) matrix ``d`` (module docstring:
    seed and text variance, Satterthwaite df; the text term is left out when B = 1).  ci None when S < 2."""
    s, b = d.shape
    mean = float(d.mean())
    if s < 2:
        return {"n": s, "blocks": b, "mean": mean, "se_seed": None, "se_text": None, "df": None, "ci": None,
                "level": level}
    v_seed = float(d.mean(1).var(ddof=1)) / s
    v_text = float(d.mean(0).var(ddof=1)) / b if b > 1 else 0.0
    v = v_seed + v_text
    denom = v_seed**2 / (s - 1) + (v_text**2 / (b - 1) if b > 1 else 0.0)
    df = v**2 / denom if denom > 0 else float(s - 1)
    half = float(sps.t.ppf(0.5 + level / 2, df)) * math.sqrt(v)
    return {"n": s, "blocks": b, "mean": mean, "se_seed": math.sqrt(v_seed), "se_text": math.sqrt(v_text), "df": df,
            "ci": [mean - half, mean + half], "level": level}


def row_level(alpha: float, n_rows: int, n_looks: int) -> float:
    """The two-sided level of every paper row's interval: 1 - alpha / (K m) (module docstring, "Level")."""
    return 1.0 - alpha / (n_looks * n_rows)


def paper_verdict(claim: dict, runs: dict, seed_order: list[int], looks: list[int], level: float) -> dict:
    """One paper row under the sequential rule: judged at each look n_k on the first n_k seeds of ``seed_order``
    with the ``seed_text_interval`` of ``level``; stops at the first look that resolves it.  The row's keys are those
    of ``stats.sequential_verdict`` (``stopped``: resolved, cap or pending) plus se_seed, se_text, df, blocks."""
    decide = stats.directional_verdict if claim["test"] == "directional" else stats.flat_verdict
    base = {"claim": claim["id"], "statement": claim["statement"], "rule": claim["rule"], "metric": "ppl",
            "group": claim["group"], "looks": list(looks), "form": "paper"}
    row = {**base, "seeds": [], "values": [], "n": 0, "mean": None, "ci": None, "level": level, "look": looks[0],
           "stopped": "pending", "verdict": stats.NOT_RESOLVED}
    for look in looks:
        seeds = list(seed_order[:look])
        d = block_values(claim, runs, seeds)
        if d is None:
            return {**row, "look": look, "stopped": "pending"}
        iv = seed_text_interval(d, level)
        verdict = decide(iv["ci"])
        row = {**base, "seeds": seeds, "values": d.mean(1).tolist(), **iv, "look": look, "verdict": verdict,
               "stopped": "resolved" if verdict != stats.NOT_RESOLVED else "cap"}
        if verdict != stats.NOT_RESOLVED:
            return row
    return row


def group_rows(rows: list[dict]) -> list[dict]:
    """One headline row per group of paper rows (``GROUPS``): CONFIRMED if every row of the group is, CONTRADICTED if
    any is, else NOT RESOLVED."""
    out = []
    for group in dict.fromkeys(r["group"] for r in rows if r["group"]):
        parts = [r for r in rows if r["group"] == group]
        found = {r["verdict"] for r in parts}
        verdict = stats.CONTRADICTED if stats.CONTRADICTED in found else \
            stats.CONFIRMED if found == {stats.CONFIRMED} else stats.NOT_RESOLVED
        out.append({"claim": PREFIX + group, "statement": GROUPS[group], "form": "paper", "metric": "ppl",
                    "rule": "every row of the group CONFIRMED (CONTRADICTED if any is)",
                    "arms": [r["claim"].split(":")[-1] for r in parts], "verdict": verdict})
    return out


def verdicts(runs: dict, specs: dict[str, dict], seed_order: list[int], looks: list[int], alpha: float) -> list[dict]:
    """Every paper row (``paper_verdict`` at the family-wise ``row_level``), then the group headlines."""
    claims = paper_claims(specs)
    if not claims:
        return []
    level = row_level(alpha, len(claims), len(looks))
    rows = [paper_verdict(c, runs, seed_order, looks, level) for c in claims]
    return rows + group_rows(rows)


def needed_runs(rows: list[dict], specs: dict[str, dict], seed_order: list[int]) -> set[tuple[str, int]]:
    """(arm, seed) runs the paper rows ask for now: for each pending row, every arm of its claim at the seeds of the
    look it waits for."""
    by_id = {c["id"]: c for c in paper_claims(specs)}
    return {(arm, s) for r in rows if r.get("stopped") == "pending"
            for _, arm, _ in by_id[r["claim"]]["terms"] for s in seed_order[:r["look"]]}
