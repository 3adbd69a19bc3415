"""Seed-level agreement of accum's theory with the trained probes (the runs' ``theory.json``, ``probes.bridge``).

The unit of replication is the training seed, as in ``probes.stats``; every interval is a 95% interval, and the
verdicts use the rules of ``probes.stats``:

* far mass, law-based (C1, C4, C5 from the family's law) and C3 transfer (from the head's own 2x attention): per run
  and multiplier d = mean over heads of log(F_pred / F_meas), and the same for the near mass 1 - F (more sensitive
  where F nears 1).  Claim "the prediction equals the measured far mass": equivalence with margin ``FAR_MARGIN`` =
  log 1.25 (a prediction within 25% of the measured far mass, fixed before any run was read; at 64x the seeds' own
  far mass varies by a few per cent, so 25% separates a prediction from a miss), ``stats.flat_verdict`` on the t
  interval: CONFIRMED inside (-margin, margin), CONTRADICTED wholly outside, else NOT RESOLVED (each wrong verdict
  has probability <= 2.5% at the margin).  The law row is also given over the heads where its incoherence premise
  holds, with the share of such heads; the C3 row is given per layer (A2 can fail above the first layer).  The C3
  row at 2x is in-sample.
* window (C2): per run rho = Spearman over its heads of W_pred vs the measured window; directional verdict on the
  mean over seeds.  NOT RESOLVED without a prediction to rank: W_pred the same for every head (range < 1 lag; RoPE
  and NoPE: W_pred = L, never mixing; learned tables whose spread mixes every plane within a few lags).
* degradation order (C5 -> C7): Spearman over arms of the law-based D = mean_h -log(1 - F_law,h(M)) (mean over seeds)
  vs the measured log ppl(M)/ppl(1x), with a percentile bootstrap over seeds within each arm (``BOOTSTRAP``
  resamples, fixed seed); directional verdict on that interval (approximate: few seeds, a discrete statistic).
  Only arms with at least ``MIN_ORDER_SEEDS`` seeds take part (a bootstrap over one seed has no spread, and its
  zero-width interval would pass for certainty); fewer than ``MIN_ORDER_ARMS`` such arms give NOT RESOLVED.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from accum.probes import stats
from accum.probes.analysis import spearman
from accum.probes.bridge import THEORY_RESULTS, VERSION
from accum.probes.io import read_json

FAR_MARGIN = math.log(1.25)
BOOTSTRAP = 2000
MIN_ORDER_ARMS = 6
MIN_ORDER_SEEDS = 3
#: the two far-mass predictions: key in theory.json -> what the report calls it
PREDICTIONS = {"law": "law-based (family's law + 1x statistics)", "c3": "C3 transfer (own 2x attention, unbiased)"}


def load_theories(out_dir: Path) -> dict:
    """{arm folder: {seed (str): theory.json}} of every current-version ``<out_dir>/<arm>/seed<k>/theory.json``."""
    found: dict = {}
    for path in sorted(Path(out_dir).glob(f"*/seed*/{THEORY_RESULTS}")):
        seed = path.parent.name.removeprefix("seed")
        run = read_json(path)
        if seed.isdigit() and run.get("version") == VERSION:
            found.setdefault(path.parent.parent.name, {})[seed] = run
    return found


def head_mean(run: dict, key: str, i: int, mask: str | None = None) -> float:
    """Mean over the run's heads of layer[key][h][i] (only heads with layer[mask][h] when given)."""
    vals = [h[i] for la in run["layers"] for j, h in enumerate(la[key]) if mask is None or la[mask][j]]
    return float(np.mean(vals)) if vals else math.nan


def far_rows(theories: dict, kind: str) -> list[dict]:
    """Per arm and multiplier, the ``kind`` prediction ("law" or "c3") against the measured far mass (module
    docstring): d per seed, its t interval and equivalence verdict, the near-mass d, per-layer d, the mean F."""
    rows = []
    for arm, runs in theories.items():
        runs = [r for r in runs.values() if f"{kind}_log_ratio" in r]
        if not runs:
            continue
        for i, m in enumerate(runs[0]["multipliers"]):
            values = [r[f"{kind}_log_ratio"][i] for r in runs]
            near = [r[f"{kind}_near_log_ratio"][i] for r in runs]
            iv, near_iv = stats.t_interval(values), stats.t_interval(near)
            layers = np.mean([[la[i] for la in r[f"{kind}_log_ratio_layers"]] for r in runs], axis=0).tolist()
            row = {"arm": arm, "kind": kind, "multiplier": m, "seeds": len(runs), "values": values, **iv,
                   "verdict": stats.flat_verdict(iv["ci"], FAR_MARGIN),
                   "near": {**near_iv, "verdict": stats.flat_verdict(near_iv["ci"], FAR_MARGIN)},
                   "layers": layers, "pred": stats.t_interval([head_mean(r, f"far_mass_{kind}", i) for r in runs]),
                   "measured": stats.t_interval([head_mean(r, "far_mass_measured", i) for r in runs]),
                   "in_sample": kind == "c3" and m == 2}
            if kind == "law":
                applies = [r["law_log_ratio_applies"][i] for r in runs if r["law_log_ratio_applies"] is not None]
                a_iv = stats.t_interval(applies)
                row["applies_share"] = float(np.mean([r["applies_share"] for r in runs]))
                row["applies"] = {**a_iv, "verdict": stats.flat_verdict(a_iv["ci"], FAR_MARGIN)}
            rows.append(row)
    return rows


def window_rows(theories: dict) -> list[dict]:
    """Per arm: rho per seed, its t interval and directional verdict; NOT RESOLVED with the reason when the law gives
    every head the same window in every run (nothing to rank)."""
    rows = []
    for arm, runs in theories.items():
        ranked = [r for r in runs.values() if r["window_pred_range"] >= 1.0 and r["spearman_window"] is not None]
        values = [r["spearman_window"] for r in ranked]
        iv = stats.t_interval(values)
        pred = [w for r in runs.values() for la in r["layers"] for w in la["window_pred"]]
        note = "" if values else (f"W_pred is the same for every head ({min(pred):.1f}-{max(pred):.1f} lags): "
                                  "the law has no window order to rank")
        rows.append({"arm": arm, "seeds": len(runs), "values": values, **iv, "note": note,
                     "window_pred": [min(pred), max(pred)],
                     "window_measured": [min(w for r in runs.values() for la in r["layers"] for w in la["window_measured"]),
                                         max(w for r in runs.values() for la in r["layers"] for w in la["window_measured"])],
                     "verdict": stats.directional_verdict(iv["ci"]) if values else stats.NOT_RESOLVED})
    return rows


def order_row(theories: dict, seed: int = 0) -> dict:
    """Spearman over arms of mean D (law-based predicted degradation) vs mean log ppl ratio, seed bootstrap."""
    arms = {arm: np.array([(r["degradation_pred"], r["log_ppl_ratio"]) for r in runs.values() if "log_ppl_ratio" in r])
            for arm, runs in theories.items()}
    arms = {a: v for a, v in arms.items() if v.size}
    out = {"arms": list(arms), "pred": {a: float(v[:, 0].mean()) for a, v in arms.items()},
           "measured": {a: float(v[:, 1].mean()) for a, v in arms.items()}}
    arms = {a: v for a, v in arms.items() if len(v) >= MIN_ORDER_SEEDS}
    if len(arms) < MIN_ORDER_ARMS:
        return {**out, "rho": None, "ci": None, "verdict": stats.NOT_RESOLVED,
                "note": f"{len(arms)} arms with >= {MIN_ORDER_SEEDS} seeds, fewer than {MIN_ORDER_ARMS}"}
    rho = spearman(np.array([out["pred"][a] for a in arms]), np.array([out["measured"][a] for a in arms]))
    rng = np.random.default_rng(seed)
    boot = []
    for _ in range(BOOTSTRAP):
        means = np.array([v[rng.integers(len(v), size=len(v))].mean(0) for v in arms.values()])
        boot.append(spearman(means[:, 0], means[:, 1]))
    boot = np.array(boot)
    boot = boot[~np.isnan(boot)]
    ci = np.percentile(boot, [2.5, 97.5]).tolist() if boot.size else None
    return {**out, "ranked": list(arms), "rho": None if math.isnan(rho) else rho, "ci": ci,
            "verdict": stats.directional_verdict(ci), "note": f"ranked over {len(arms)} arms"}


def agreement(out_dir: Path) -> dict | None:
    """Everything the report and figure 7 show, from the theory.json files under ``out_dir``; None if none."""
    theories = load_theories(out_dir)
    if not theories:
        return None
    points = [{"arm": arm, "seed": int(seed), "window_pred": w, "window_measured": m}
              for arm, runs in theories.items() for seed, r in runs.items()
              for la in r["layers"] for w, m in zip(la["window_pred"], la["window_measured"])]
    premise = {arm: float(np.mean([r["applies_share"] for r in runs.values()])) for arm, runs in theories.items()}
    c4 = {arm: c4_ratio(runs.values()) for arm, runs in theories.items()}
    sources = {arm: next(iter(runs.values()))["layers"][0]["law_source"] for arm, runs in theories.items()}
    seq_len = next(iter(next(iter(theories.values())).values()))["seq_len"]
    return {"seq_len": seq_len, "far": [row for kind in PREDICTIONS for row in far_rows(theories, kind)],
            "window": window_rows(theories), "order": order_row(theories), "window_points": points,
            "applies_share": premise, "law_sources": sources, "c4_ratio": {a: v for a, v in c4.items() if v is not None},
            "runs": {arm: sorted(int(s) for s in runs) for arm, runs in theories.items()}}


def c4_ratio(runs) -> float | None:
    """Mean over the runs' premise heads of simulated far-score sd / C4's sd (1 when C4's Gaussian law holds in
    scale); None without a premise head."""
    ratios = [sd / c4 for r in runs for la in r["layers"]
              for sd, c4, ok in zip(la["far_score_sd"], la["c4_sd"], la["applies"]) if ok and c4 > 0]
    return float(np.mean(ratios)) if ratios else None


def layer_line(result: dict, kind: str) -> str:
    """Mean over arms of the per-layer d at each arm's longest length (does the prediction miss more above layer 0?)."""
    rows = [r for r in result["far"] if r["kind"] == kind]
    longest = {}
    for r in rows:
        if r["multiplier"] >= longest.get(r["arm"], r)["multiplier"]:
            longest[r["arm"]] = r
    per_layer = np.mean([r["layers"] for r in longest.values()], axis=0) if longest else []
    return ", ".join(f"layer {i} {v:+.3f}" for i, v in enumerate(per_layer))


def _ci(ci: list | None) -> str:
    return "n/a" if ci is None else f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def _num(x: float | None) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def far_table(result: dict, kind: str) -> list[str]:
    """The markdown rows of one prediction kind."""
    lines = ["| arm | length | runs | F_pred | F_meas | d mean | 95% interval | verdict | near-mass d | verdict | "
             "d per layer |" + (" heads with premise | d (premise heads) | verdict |" if kind == "law" else ""),
             "|---|---:|---:|---:|---:|---:|---:|---|---:|---|---|" + ("---:|---:|---|" if kind == "law" else "")]
    for r in (r for r in result["far"] if r["kind"] == kind):
        line = (f"| {r['arm']} | {r['multiplier']}x{' (in-sample)' if r['in_sample'] else ''} | {r['seeds']} | "
                f"{_num(r['pred']['mean'])} | {_num(r['measured']['mean'])} | {_num(r['mean'])} | {_ci(r['ci'])} | "
                f"{r['verdict']} | {_num(r['near']['mean'])} | {r['near']['verdict']} | "
                + ", ".join(f"{v:+.3f}" for v in r["layers"]) + " |")
        if kind == "law":
            a = r["applies"]
            line += f" {r['applies_share']:.0%} | {_num(a['mean'])} {_ci(a['ci'])} | {a['verdict']} |"
        lines.append(line)
    return lines


def theory_section(result: dict | None) -> str:
    """The "Theory vs trained probes" section of ``accum probe report`` (text, ends with a newline)."""
    lines = ["", "Theory vs trained probes (probes/bridge.py, probes/theory_stats.py; 95% intervals over seeds):"]
    if result is None:
        return "\n".join(lines + ["no theory.json in the run folders yet (`accum probe theory --run DIR ...`)", ""]) + "\n"
    lines += ["", "Runs with a theory.json: " + ", ".join(f"{a} {s}" for a, s in result["runs"].items()),
              "Step law per arm: " + "; ".join(f"{a}: {s}" for a, s in result["law_sources"].items()),
              "Incoherence premise (share of heads with coherent fraction C(L) <= 0.5): "
              + ", ".join(f"{a} {v:.0%}" for a, v in result["applies_share"].items())]
    if result["c4_ratio"]:
        lines.append("C4 check (premise heads): simulated far-score sd / C4's sqrt(E|q|^2 E|k|^2 / d) / sqrt(d): "
                     + ", ".join(f"{a} {v:.2f}" for a, v in result["c4_ratio"].items()))
    for kind, title in PREDICTIONS.items():
        lines += ["", f"Far mass, {title}, against the measured far mass: d = mean over heads of log(F_pred / F_meas); "
                  "CONFIRMED when the interval lies inside +-log 1.25:", "", *far_table(result, kind), "",
                  f"Per layer at each arm's longest length, mean over arms of d: {layer_line(result, kind)}"]
    lines += ["", "Window (C2): Spearman over heads of W_pred = sum_{n<L} C(n)^2 vs the measured 90% attention window:",
              "", "| arm | runs | W_pred range | W measured range | rho mean | 95% interval | verdict |",
              "|---|---:|---:|---:|---:|---:|---|"]
    for r in result["window"]:
        lines.append(f"| {r['arm']} | {r['seeds']} | {r['window_pred'][0]:.1f}-{r['window_pred'][1]:.1f} | "
                     f"{r['window_measured'][0]:.1f}-{r['window_measured'][1]:.1f} | {_num(r['mean'])} | {_ci(r['ci'])} | "
                     f"{r['verdict']}" + (f" ({r['note']})" if r["note"] else "") + " |")
    o = result["order"]
    lines += ["", "Degradation order: Spearman over arms of the law-based D = mean_h -log(1 - F_law(M)) vs the measured "
              "log ppl(M)/ppl(1x) (seed bootstrap):",
              "- " + ", ".join(f"{a}: D {o['pred'][a]:.3f} / log ratio {o['measured'][a]:.3f}" for a in o["arms"]),
              f"- rho {_num(o['rho'])}, 95% interval {_ci(o['ci'])}: {o['verdict']}" + (f" ({o['note']})" if o["note"] else ""),
              "", "Where the theory fails to predict the trained model here:"]
    lines += [f"- {f}" for f in failures(result)] or ["- nowhere"]
    lines += ["", "Not resolved (neither confirmed nor contradicted at this number of seeds):"]
    lines += [f"- {f}" for f in unresolved(result)] or ["- nothing"]
    return "\n".join(lines + [""]) + "\n"


def failures(result: dict) -> list[str]:
    """One line per failed prediction, with the share of heads it concerns."""
    out = [f"{a}: incoherence premise fails in {1 - v:.0%} of heads (C(L) > 0.5): the law's far mass there is what the "
           "coherent law does, not a test of C1/C4" for a, v in result["applies_share"].items() if v < 1.0]
    for r in result["far"]:
        for what, row in (("far mass", r), ("near mass", r["near"])):
            if row["verdict"] == stats.CONTRADICTED:
                out.append(f"{r['arm']} {r['multiplier']}x: {PREDICTIONS[r['kind']].split(' (')[0]} {what} CONTRADICTED "
                           f"(d = {row['mean']:+.3f}, all heads" + (f"; premise holds in {r['applies_share']:.0%}" if
                                                                   r["kind"] == "law" else "") + ")")
    out += [f"{r['arm']}: window order CONTRADICTED (rho {r['mean']:.3f})" for r in result["window"]
            if r["verdict"] == stats.CONTRADICTED]
    if result["order"]["verdict"] == stats.CONTRADICTED:
        out.append(f"degradation order over {len(result['order']['ranked'])} arms CONTRADICTED")
    return out


def unresolved(result: dict) -> list[str]:
    """One line per NOT RESOLVED row (the reason where there is one)."""
    out = [f"{r['arm']} {r['multiplier']}x: {PREDICTIONS[r['kind']].split(' (')[0]} far mass (d = {_num(r['mean'])} "
           f"{_ci(r['ci'])})" for r in result["far"] if r["verdict"] == stats.NOT_RESOLVED and not r["in_sample"]]
    out += [f"{r['arm']}: window order" + (f" ({r['note']})" if r["note"] else f" (rho {_num(r['mean'])} {_ci(r['ci'])})")
            for r in result["window"] if r["verdict"] == stats.NOT_RESOLVED]
    if result["order"]["verdict"] == stats.NOT_RESOLVED:
        out.append("degradation order" + (f" ({result['order']['note']})" if result["order"]["note"] else ""))
    return out
