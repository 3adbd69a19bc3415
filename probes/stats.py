"""Seed-level statistics of a probe sweep and the C7 verdicts.

The unit of replication is the training seed: each (arm, seed) run gives one number per evaluation
length (perplexity over >= 4 windows).  For n seeds with values x_1..x_n,

    mean +- t_{0.975, n-1} sd / sqrt(n)        (95% Student t interval, sd with n - 1 degrees of freedom).

A claim is a linear combination of per-seed log quantities, d_s = sum_k c_k log Q_k(arm_k, seed s), taken
over the seeds every arm of the claim has (paired by seed: the same seed gives the same data order and
evaluation windows to every arm).  Verdict from the 95% interval of mean(d):

* directional claim (d > 0 claimed): CONFIRMED when the interval lies above 0, CONTRADICTED when it lies
  below 0, otherwise NOT RESOLVED (fewer than 2 paired seeds: NOT RESOLVED).
* flatness claim (|d| small claimed, margin m = log 1.05): CONFIRMED when the interval lies inside
  (-m, m), CONTRADICTED when it lies wholly outside it, otherwise NOT RESOLVED.

Sequential design (``looks``): seeds are added in batches and a claim is judged at the planned numbers of
paired seeds n_1 < n_2 < ... < n_K (its first n_k seeds of the sweep's seed order).  At each look the
interval is the two-sided level 1 - alpha / K t interval; the claim's verdict is the first look's that
resolves it, and its seeds stop being added for it; a claim unresolved at n_K (the cap) is NOT RESOLVED,
reported with the interval at the cap (the effects it rules out).  Under d = 0 a directional claim is
wrongly CONFIRMED at a look with probability alpha / (2K), so at most alpha / 2 over all K looks (union
bound, whatever the dependence between looks); a flatness claim whose true |d| is at the margin is wrongly
CONFIRMED with at most alpha / 2 too.  A single look (K = 1, n_1 = every seed) is the fixed design with
the 95% interval (alpha = 0.05).

Q is the perplexity at the longest length M ("log ppl") or its ratio to the 1x perplexity
("log ratio" = log ppl(M) - log ppl(1x)); both for the perplexity over all positions and over the last
L_train-long segment of each window.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as sps

FLAT_MARGIN = math.log(1.05)
METRICS = ("ppl", "ppl_last_segment")
CONFIRMED, CONTRADICTED, NOT_RESOLVED = "CONFIRMED", "CONTRADICTED", "NOT RESOLVED"


def t_interval(values: list[float], level: float = 0.95) -> dict:
    """{"n", "mean", "sd", "ci", "level"} of ``values``: mean +- t_{(1+level)/2, n-1} sd / sqrt(n) (sd and ci None
    when n < 2; all None when n = 0)."""
    x = np.asarray([v for v in values if v is not None], dtype=float)
    n = int(x.size)
    if n == 0:
        return {"n": 0, "mean": None, "sd": None, "ci": None, "level": level}
    mean = float(x.mean())
    if n < 2:
        return {"n": 1, "mean": mean, "sd": None, "ci": None, "level": level}
    sd = float(x.std(ddof=1))
    half = float(sps.t.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n)
    return {"n": n, "mean": mean, "sd": sd, "ci": [mean - half, mean + half], "level": level}


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


#: the QK-only arm each value-rotating arm is compared with ("QKV beats QK")
QK_OF = {"learned_qkv": "learned", "random_qkv": "random", "random_drift_qkv": "random_drift",
         "random_qkv_indep": "random", "family_qkv": "family"}
#: arms with something besides rotation: no positions (nope), a far-mass bias (alibi), contractions (path)
NOT_ROTATION_ONLY = ("nope", "alibi", "path")


def plain_specs(arms: list[str]) -> dict[str, dict]:
    """The specs of built-in arms without overrides: {arm: {"arm": arm}}."""
    return {arm: {"arm": arm} for arm in arms}


def claim_definitions(specs: dict[str, dict]) -> list[dict]:
    """The C7 claims a sweep's arms allow: id, statement, rule, terms [(coef, arm label, kind)], test.

    specs: {arm label: its run overrides, "arm" the model arm} (``SweepConfig.arm_specs``; a built-in arm's label
    is its name with {"arm": name}).  Claims, each judged at the longest length M:

    * random_beats_rope (the plain rope and random arms);
    * learned_stays_near_1x[:label] for every label whose model arm is ``learned`` (against plain rope);
    * qkv_beats_qk[:label] for every value-rotating label whose QK arm (``QK_OF``, the same other overrides) is
      in the sweep (the plain learned / learned_qkv pair is the unlabelled headline claim);
    * alibi_flat (the plain alibi arm);
    * rotation_only_degrades:label for every label whose model arm is rotation-only (not ``NOT_ROTATION_ONLY``).
    """
    plain = {label for label, spec in specs.items() if spec == {"arm": label}}
    claims = []
    if {"rope", "random"} <= plain:
        claims.append({"id": "random_beats_rope", "statement": "random accumulated rotations beat RoPE past train length",
                       "rule": "d = log ppl_rope(M) - log ppl_random(M) > 0", "test": "directional",
                       "terms": [(1, "rope", "ppl"), (-1, "random", "ppl")]})
    for label, spec in specs.items():
        if spec["arm"] == "learned" and "rope" in plain:
            claims.append({"id": "learned_stays_near_1x" + ("" if label == "learned" else f":{label}"),
                           "statement": f"learned token angles ({label}) stay near their 1x perplexity far beyond it "
                                        "(degrade less than RoPE)",
                           "rule": f"d = log[ppl_rope(M)/ppl_rope(1x)] - log[ppl_{label}(M)/ppl_{label}(1x)] > 0",
                           "test": "directional", "terms": [(1, "rope", "ratio"), (-1, label, "ratio")]})
    for label, spec in specs.items():
        qk = next((other for other, o in specs.items() if spec["arm"] in QK_OF
                   and o == {**spec, "arm": QK_OF[spec["arm"]]}), None)
        if qk is not None:
            claims.append({"id": "qkv_beats_qk" + ("" if label == "learned_qkv" else f":{label}"),
                           "statement": f"rotating values too ({label}) beats queries and keys only ({qk})",
                           "rule": f"d = log ppl_{qk}(M) - log ppl_{label}(M) > 0", "test": "directional",
                           "terms": [(1, qk, "ppl"), (-1, label, "ppl")]})
    if "alibi" in plain:
        claims.append({"id": "alibi_flat", "statement": "ALiBi stays flat",
                       "rule": "d = log[ppl_alibi(M)/ppl_alibi(1x)] inside +-log 1.05", "test": "flat",
                       "terms": [(1, "alibi", "ratio")]})
    for label, spec in specs.items():
        if spec["arm"] not in NOT_ROTATION_ONLY:
            claims.append({"id": f"rotation_only_degrades:{label}",
                           "statement": f"rotation-only arm {label} degrades at extreme length",
                           "rule": f"d = log[ppl_{label}(M)/ppl_{label}(1x)] > 0", "test": "directional",
                           "terms": [(1, label, "ratio")]})
    return claims


def claim_values(claim: dict, runs: dict, metric: str, seeds: list[int]) -> list[float] | None:
    """Paired per-seed d_s of ``claim`` at ``seeds``, or None unless every arm of the claim has them all."""
    arms = [arm for _, arm, _ in claim["terms"]]
    if any(str(s) not in runs.get(arm, {}) for arm in arms for s in seeds):
        return None
    return [sum(c * log_quantity(runs[arm][str(s)], metric, kind) for c, arm, kind in claim["terms"]) for s in seeds]


def sequential_verdict(claim: dict, runs: dict, metric: str, seed_order: list[int], looks: list[int],
                       alpha: float) -> dict:
    """The claim's verdict under the sequential rule (module docstring): looks n_1 < ... < n_K over the first
    n_k seeds of ``seed_order``, each judged with the level 1 - alpha / K interval.

    Returns the row {"claim", "statement", "rule", "metric", "seeds", "values", "n", "mean", "sd", "ci",
    "level", "look", "looks", "stopped", "verdict"}: ``stopped`` is "resolved" (at look ``look``), "cap"
    (unresolved after the last look) or "pending" (look ``look`` still lacks runs; seeds/values are those
    of the last look done, empty if none)."""
    level = 1 - alpha / len(looks)
    decide = directional_verdict if claim["test"] == "directional" else flat_verdict
    base = {"claim": claim["id"], "statement": claim["statement"], "rule": claim["rule"], "metric": metric,
            "looks": list(looks)}
    row = {**base, "seeds": [], "values": [], **t_interval([], level), "look": looks[0], "stopped": "pending",
           "verdict": NOT_RESOLVED}
    for look in looks:
        seeds = list(seed_order[:look])
        values = claim_values(claim, runs, metric, seeds)
        if values is None:
            return {**row, "look": look, "stopped": "pending"}
        iv = t_interval(values, level)
        verdict = decide(iv["ci"])
        row = {**base, "seeds": seeds, "values": values, **iv, "look": look, "verdict": verdict,
               "stopped": "resolved" if verdict != NOT_RESOLVED else "cap"}
        if verdict != NOT_RESOLVED:
            return row
    return row


#: how far one run's log perplexity moved when the same seed was rerun on another machine, per metric: the one
#: cross-host pair measured (random seed 0 of the 64x sweep, stop 26) differed by 0.53% over all positions and
#: 1.51% on the last segment; the tolerances round those up
HOST_LOG_TOLERANCE = {"ppl": math.log(1.008), "ppl_last_segment": math.log(1.016)}


def host_shift(claim: dict, n: int, level: float, tolerance: float) -> float:
    """The most either end of a claim's interval can move if every run's log perplexity moves by at most
    ``tolerance`` (a seed rerun on another machine: ``HOST_LOG_TOLERANCE`` of the metric).

    d_s = sum_k c_k log Q_k moves by at most b = tolerance sum_k |c_k| (1 for "ppl", 2 for "ratio": two logs);
    the mean by <= b and sd(d + delta) <= sd(d) + sd(delta) <= sd(d) + b sqrt(n / (n - 1)), so each end moves
    by <= b (1 + t_{(1+level)/2, n-1} / sqrt(n - 1))."""
    b = tolerance * sum(abs(c) * (2 if kind == "ratio" else 1) for c, _, kind in claim["terms"])
    return b * (1 + float(sps.t.ppf(0.5 + level / 2, n - 1)) / math.sqrt(n - 1))


def claim_hosts(claim: dict, row: dict, runs: dict) -> set[str]:
    """The machines (``host`` of each run summary; "?" where a run does not say) of the runs a row was judged on."""
    return {runs[arm][str(s)].get("host") or "?" for _, arm, _ in claim["terms"] for s in row["seeds"]}


def host_robust(claim: dict, row: dict, runs: dict) -> bool | None:
    """Whether ``row``'s verdict survives every run moving by the metric's ``HOST_LOG_TOLERANCE`` (``host_shift``):
    the verdict of each corner of the box of reachable intervals [lo +- B] x [hi +- B] is the row's.  None for a
    NOT RESOLVED row (it claims nothing a rerun could overturn) and for a row whose runs all ran on one machine
    (``claim_hosts``: no cross-machine shift is in it)."""
    hosts = claim_hosts(claim, row, runs) if row["verdict"] != NOT_RESOLVED else set()
    if row["verdict"] == NOT_RESOLVED or (len(hosts) == 1 and "?" not in hosts):
        return None
    shift = host_shift(claim, row["n"], row["level"], HOST_LOG_TOLERANCE[row["metric"]])
    decide = directional_verdict if claim["test"] == "directional" else flat_verdict
    lo, hi = row["ci"]
    corners = [[lo + a, hi + b] for a in (-shift, shift) for b in (-shift, shift) if lo + a <= hi + b]
    return all(decide(c) == row["verdict"] for c in corners)


def verdicts(runs: dict, specs: dict[str, dict], seed_order: list[int], looks: list[int],
             alpha: float = 0.05) -> list[dict]:
    """One row per claim and metric (``sequential_verdict``), plus an overall row for the rotation-only claim
    (CONFIRMED if every arm's is, CONTRADICTED if any arm's is, else NOT RESOLVED).

    runs: {arm label: {seed (str): run summary with "ppl" and "ppl_last_segment" lists over multipliers}};
    specs: the arms (``claim_definitions``); seed_order: the sweep's seeds in the order looks take them; looks:
    increasing paired-seed counts."""
    rows = []
    for claim in claim_definitions(specs):
        for metric in METRICS:
            row = sequential_verdict(claim, runs, metric, seed_order, looks, alpha)
            rows.append({**row, "host_robust": host_robust(claim, row, runs)})
    for metric in METRICS:
        parts = [r for r in rows if r["claim"].startswith("rotation_only_degrades:") and r["metric"] == metric]
        if parts:
            found = {r["verdict"] for r in parts}
            overall = CONTRADICTED if CONTRADICTED in found else CONFIRMED if found == {CONFIRMED} else NOT_RESOLVED
            rows.append({"claim": "rotation_only_degrades", "statement": "rotation-only arms degrade at extreme length",
                         "rule": "every rotation-only arm's row CONFIRMED (CONTRADICTED if any is)", "metric": metric,
                         "arms": [r["claim"].split(":")[1] for r in parts], "verdict": overall})
    return rows


def needed_runs(rows: list[dict], specs: dict[str, dict], seed_order: list[int], looks: list[int],
                ) -> set[tuple[str, int]]:
    """(arm, seed) runs the sequential rule asks for now: every arm at the first look's seeds, and for each
    pending claim row every arm of its claim at the seeds of the look it waits for."""
    need = {(arm, s) for arm in specs for s in seed_order[:looks[0]]}
    by_id = {c["id"]: c for c in claim_definitions(specs)}
    for r in rows:
        if r.get("stopped") == "pending":
            need |= {(arm, s) for _, arm, _ in by_id[r["claim"]]["terms"] for s in seed_order[:r["look"]]}
    return need


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
        out[name] = {"values": rows, "mean": [iv["mean"] for iv in per_mult], "sd": [iv["sd"] for iv in per_mult],
                     "ci95": [iv["ci"] for iv in per_mult]}
    out["tokens_per_second"] = t_interval([r["tokens_per_second"] for r in runs])
    spreads = [r["angle_spread"] for r in runs if r.get("angle_spread") is not None]
    out["angle_spread"] = np.mean(spreads, axis=0).tolist() if spreads else None
    return out
