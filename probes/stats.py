"""Seed-level statistics of a probe sweep and the C7 verdicts.

The unit of replication is the training seed: each (arm, seed) run gives one number per evaluation
length (perplexity over >= 4 windows).  For n seeds with values x_1..x_n,

    mean +- t_{0.975, n-1} sd / sqrt(n)        (95% Student t interval, sd with n - 1 degrees of freedom).

A claim is a linear combination of per-seed log quantities, d_s = sum_k c_k log Q_k(arm_k, seed s), taken
over the seeds every arm of the claim has (paired by seed: the same seed gives the same data order and
evaluation windows to every arm).  Verdict from the 95% interval of mean(d):

* directional claim (d > 0 claimed): CONFIRMED when the interval lies above 0, CONTRADICTED when it lies
  below 0, otherwise NOT RESOLVED (fewer than 2 paired seeds: NOT RESOLVED).  Under d = 0 each verdict
  is wrongly CONFIRMED with probability 2.5%.
* flatness claim (|d| small claimed, margin m = log 1.05): CONFIRMED when the interval lies inside
  (-m, m), CONTRADICTED when it lies wholly outside it, otherwise NOT RESOLVED.

Q is the perplexity at the longest length M ("log ppl") or its ratio to the 1x perplexity
("log ratio" = log ppl(M) - log ppl(1x)); both for the perplexity over all positions and over the last
L_train-long segment of each window.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as sps

FLAT_MARGIN = math.log(1.05)
ROTATION_ONLY = ("rope", "random", "random_drift", "random_qkv", "random_drift_qkv", "learned", "learned_qkv", "gain")
METRICS = ("ppl", "ppl_last_segment")
CONFIRMED, CONTRADICTED, NOT_RESOLVED = "CONFIRMED", "CONTRADICTED", "NOT RESOLVED"


def t_interval(values: list[float]) -> dict:
    """{"n", "mean", "sd", "ci95": [lo, hi]} of ``values`` (sd and ci95 None when n < 2; all None when n = 0)."""
    x = np.asarray([v for v in values if v is not None], dtype=float)
    n = int(x.size)
    if n == 0:
        return {"n": 0, "mean": None, "sd": None, "ci95": None}
    mean = float(x.mean())
    if n < 2:
        return {"n": 1, "mean": mean, "sd": None, "ci95": None}
    sd = float(x.std(ddof=1))
    half = float(sps.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    return {"n": n, "mean": mean, "sd": sd, "ci95": [mean - half, mean + half]}


def directional_verdict(ci: list[float] | None) -> str:
    """CONFIRMED if the interval is above 0, CONTRADICTED if below, NOT RESOLVED otherwise or without one."""
    if ci is None:
        return NOT_RESOLVED
    return CONFIRMED if ci[0] > 0 else CONTRADICTED if ci[1] < 0 else NOT_RESOLVED


def flat_verdict(ci: list[float] | None, margin: float = FLAT_MARGIN) -> str:
    """CONFIRMED if the interval is inside (-margin, margin), CONTRADICTED if wholly outside, else NOT RESOLVED."""
    if ci is None:
        return NOT_RESOLVED
    if -margin < ci[0] and ci[1] < margin:
        return CONFIRMED
    return CONTRADICTED if ci[0] >= margin or ci[1] <= -margin else NOT_RESOLVED


def log_quantity(run: dict, metric: str, kind: str) -> float:
    """log ppl at the longest length ("ppl") or log(ppl(M) / ppl(1x)) ("ratio") of one run summary."""
    values = run[metric]
    return math.log(values[-1]) if kind == "ppl" else math.log(values[-1]) - math.log(values[0])


def claim_definitions(arms: list[str]) -> list[dict]:
    """The C7 claims that the sweep's arms allow: id, statement, rule, terms [(coef, arm, kind)], test."""
    claims = [
        {"id": "random_beats_rope", "statement": "random accumulated rotations beat RoPE past train length",
         "rule": "d = log ppl_rope(M) - log ppl_random(M) > 0", "test": "directional",
         "terms": [(1, "rope", "ppl"), (-1, "random", "ppl")]},
        {"id": "learned_stays_near_1x",
         "statement": "learned token angles stay near their 1x perplexity far beyond it (degrade less than RoPE)",
         "rule": "d = log[ppl_rope(M)/ppl_rope(1x)] - log[ppl_learned(M)/ppl_learned(1x)] > 0", "test": "directional",
         "terms": [(1, "rope", "ratio"), (-1, "learned", "ratio")]},
        {"id": "qkv_beats_qk", "statement": "rotating values too (learned_qkv) beats queries and keys only (learned)",
         "rule": "d = log ppl_learned(M) - log ppl_learned_qkv(M) > 0", "test": "directional",
         "terms": [(1, "learned", "ppl"), (-1, "learned_qkv", "ppl")]},
        {"id": "alibi_flat", "statement": "ALiBi stays flat",
         "rule": "d = log[ppl_alibi(M)/ppl_alibi(1x)] inside +-log 1.05", "test": "flat",
         "terms": [(1, "alibi", "ratio")]},
    ]
    for arm in ROTATION_ONLY:
        claims.append({"id": f"rotation_only_degrades:{arm}", "statement": f"rotation-only arm {arm} degrades at extreme length",
                       "rule": f"d = log[ppl_{arm}(M)/ppl_{arm}(1x)] > 0", "test": "directional",
                       "terms": [(1, arm, "ratio")]})
    return [c for c in claims if all(arm in arms for _, arm, _ in c["terms"])]


def claim_values(claim: dict, runs: dict, metric: str) -> tuple[list[int], list[float]]:
    """Paired per-seed d_s of ``claim`` over the seeds that every arm of the claim has finished."""
    arms = [arm for _, arm, _ in claim["terms"]]
    seeds = sorted(set.intersection(*(set(runs.get(arm, {})) for arm in arms)), key=int)
    values = [sum(c * log_quantity(runs[arm][seed], metric, kind) for c, arm, kind in claim["terms"]) for seed in seeds]
    return [int(s) for s in seeds], values


def verdicts(runs: dict, arms: list[str]) -> list[dict]:
    """One row per claim and metric: the seed-level interval of d and its verdict, plus an overall row for
    the rotation-only claim (CONFIRMED if every arm's is, CONTRADICTED if any arm's is, else NOT RESOLVED).

    runs: {arm: {seed (str): run summary with "ppl" and "ppl_last_segment" lists over multipliers}}.
    """
    rows = []
    for claim in claim_definitions(arms):
        for metric in METRICS:
            seeds, values = claim_values(claim, runs, metric)
            iv = t_interval(values)
            decide = directional_verdict if claim["test"] == "directional" else flat_verdict
            rows.append({"claim": claim["id"], "statement": claim["statement"], "rule": claim["rule"],
                         "metric": metric, "seeds": seeds, "values": values, **iv, "verdict": decide(iv["ci95"])})
    for metric in METRICS:
        parts = [r for r in rows if r["claim"].startswith("rotation_only_degrades:") and r["metric"] == metric]
        if parts:
            found = {r["verdict"] for r in parts}
            overall = CONTRADICTED if CONTRADICTED in found else CONFIRMED if found == {CONFIRMED} else NOT_RESOLVED
            rows.append({"claim": "rotation_only_degrades", "statement": "rotation-only arms degrade at extreme length",
                         "rule": "every rotation-only arm's row CONFIRMED (CONTRADICTED if any is)", "metric": metric,
                         "arms": [r["claim"].split(":")[1] for r in parts], "verdict": overall})
    return rows


def arm_statistics(arm_runs: dict) -> dict:
    """Per arm, over its finished seeds: t intervals per multiplier of ppl, ppl_last_segment, their ratios
    to 1x and the far attention mass; the mean training throughput and learned angle spread per plane."""
    seeds = sorted(arm_runs, key=int)
    runs = [arm_runs[s] for s in seeds]
    out: dict = {"seeds": [int(s) for s in seeds], "n_seeds": len(runs)}
    if not runs:
        return out
    n_mult = len(runs[0]["ppl"])
    series = {
        "ppl": [r["ppl"] for r in runs],
        "ppl_last_segment": [r["ppl_last_segment"] for r in runs],
        "ratio": [[p / r["ppl"][0] for p in r["ppl"]] for r in runs],
        "ratio_last_segment": [[p / r["ppl_last_segment"][0] for p in r["ppl_last_segment"]] for r in runs],
        "far_mass": [r["far_mass"] for r in runs],
    }
    for name, rows in series.items():
        per_mult = [t_interval([row[m] for row in rows]) for m in range(n_mult)]
        out[name] = {"values": rows, **{k: [iv[k] for iv in per_mult] for k in ("mean", "sd", "ci95")}}
    out["tokens_per_second"] = t_interval([r["tokens_per_second"] for r in runs])
    spreads = [r["angle_spread"] for r in runs if r.get("angle_spread") is not None]
    out["angle_spread"] = np.mean(spreads, axis=0).tolist() if spreads else None
    return out
