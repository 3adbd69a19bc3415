"""Seed-level agreement of accum's theory with the trained probes (the runs' ``theory.json``, ``probes.bridge``).

The unit of replication is the training seed, as in ``probes.stats``; every interval below is a 95% interval
and every verdict uses the rules of ``probes.stats``:

* window (C1, C2): per run rho = Spearman over its heads of W^pred vs the measured attention window.  Claim
  "the theory orders the heads' windows": directional on mean(rho) over seeds (t interval; CONFIRMED above 0,
  CONTRADICTED below 0; a wrong CONFIRMED has probability 2.5% when the mean is 0).  A run whose W^pred is
  the same for every head (RoPE: no mixing, W^pred = L) has no rho: the theory makes no prediction there.
* far mass (C3): per run and multiplier m, d = mean over heads of log(F_pred(m) / F_meas(m)), and the same for
  the near mass 1 - F (more sensitive where F nears 1: a log ratio of F cannot exceed -log F_meas).  Claim "the far
  mass extrapolated from 2x equals the measured one": equivalence with margin ``FAR_MARGIN`` = log 1.25 (a
  prediction within 25%), ``stats.flat_verdict`` on the t interval: CONFIRMED inside (-margin, margin),
  CONTRADICTED wholly outside, else NOT RESOLVED (each wrong verdict has probability <= 2.5% at the margin).
  The 2x row is in-sample (a check of the concentration step only).
* degradation order (C5 -> C7): Spearman over arms of the predicted degradation D (mean over seeds) vs the
  measured log ppl(M)/ppl(1x) (mean over seeds), with a percentile bootstrap over seeds within each arm
  (``BOOTSTRAP`` resamples, fixed seed); directional verdict on that interval.  The bootstrap interval is
  approximate (few seeds, a discrete statistic): its 2.5% error rate is nominal, not exact; fewer than 3 arms
  give NOT RESOLVED.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from accum.probes import stats
from accum.probes.analysis import spearman
from accum.probes.bridge import THEORY_RESULTS
from accum.probes.io import read_json

FAR_MARGIN = math.log(1.25)
BOOTSTRAP = 2000


def load_theories(out_dir: Path) -> dict:
    """{arm: {seed (str): theory.json}} of every ``<out_dir>/<arm>/seed<k>/theory.json``."""
    found: dict = {}
    for path in sorted(Path(out_dir).glob(f"*/seed*/{THEORY_RESULTS}")):
        seed = path.parent.name.removeprefix("seed")
        if seed.isdigit():
            found.setdefault(path.parent.parent.name, {})[seed] = read_json(path)
    return found


def window_rows(theories: dict) -> list[dict]:
    """Per arm: rho per seed, its t interval and directional verdict (NOT RESOLVED, with the reason, when no run
    of the arm has a rho)."""
    rows = []
    for arm, runs in theories.items():
        values = [r["spearman_window"] for r in runs.values() if r.get("spearman_window") is not None]
        iv = stats.t_interval(values)
        note = "" if values else "W_pred constant over heads (no mixing): the theory predicts no window"
        rows.append({"arm": arm, "seeds": len(runs), "values": values, **iv,
                     "verdict": stats.directional_verdict(iv["ci"]), "note": note})
    return rows


def far_rows(theories: dict) -> list[dict]:
    """Per arm and multiplier: d = mean log(F_pred / F_meas) over heads, per seed; t interval; equivalence verdict.
    Also the mean predicted and measured far mass over heads and seeds (figure 7)."""
    rows = []
    for arm, runs in theories.items():
        runs = [r for r in runs.values() if "far_log_ratio" in r]
        if not runs:
            continue
        for i, m in enumerate(runs[0]["multipliers"]):
            values = [r["far_log_ratio"][i] for r in runs]
            pred = [np.mean([h[i] for la in r["layers"] for h in la["far_mass_pred"]]) for r in runs]
            meas = [np.mean([h[i] for la in r["layers"] for h in la["far_mass_measured"]]) for r in runs]
            layer0 = [r["far_log_ratio_layers"][0][i] for r in runs]
            near = [np.mean([math.log((1 - p[i]) / (1 - q[i])) for la in r["layers"]
                             for p, q in zip(la["far_mass_pred"], la["far_mass_measured"])]) for r in runs]
            iv, near_iv = stats.t_interval(values), stats.t_interval(near)
            rows.append({"arm": arm, "multiplier": m, "seeds": len(runs), "values": values, **iv,
                         "near": {**near_iv, "verdict": stats.flat_verdict(near_iv["ci"], FAR_MARGIN)},
                         "layer0_mean": float(np.mean(layer0)), "pred": stats.t_interval(pred),
                         "measured": stats.t_interval(meas), "in_sample": m == 2,
                         "verdict": stats.flat_verdict(iv["ci"], FAR_MARGIN)})
    return rows


def order_row(theories: dict, seed: int = 0) -> dict:
    """Spearman over arms of mean D (predicted degradation) vs mean log ppl ratio, with its seed bootstrap."""
    arms = {arm: [(r["degradation_pred"], r["log_ppl_ratio"]) for r in runs.values() if "log_ppl_ratio" in r]
            for arm, runs in theories.items()}
    arms = {a: np.array(v) for a, v in arms.items() if v}
    out = {"arms": list(arms), "pred": {a: float(v[:, 0].mean()) for a, v in arms.items()},
           "measured": {a: float(v[:, 1].mean()) for a, v in arms.items()}}
    if len(arms) < 3:
        return {**out, "rho": None, "ci": None, "verdict": stats.NOT_RESOLVED, "note": "fewer than 3 arms"}
    rho = spearman(np.array(list(out["pred"].values())), np.array(list(out["measured"].values())))
    rng = np.random.default_rng(seed)
    boot = []
    for _ in range(BOOTSTRAP):
        means = np.array([v[rng.integers(len(v), size=len(v))].mean(0) for v in arms.values()])
        boot.append(spearman(means[:, 0], means[:, 1]))
    boot = np.array(boot)
    boot = boot[~np.isnan(boot)]
    ci = np.percentile(boot, [2.5, 97.5]).tolist() if boot.size else None
    return {**out, "rho": None if math.isnan(rho) else rho, "ci": ci, "verdict": stats.directional_verdict(ci),
            "note": ""}


def agreement(out_dir: Path) -> dict | None:
    """Everything the report and figure 7 show, from the theory.json files under ``out_dir``; None if none."""
    theories = load_theories(out_dir)
    if not theories:
        return None
    points = [{"arm": arm, "seed": int(seed), "window_pred": w, "window_measured": m}
              for arm, runs in theories.items() for seed, r in runs.items()
              for la in r["layers"] for w, m in zip(la["window_pred"], la["window_measured"])]
    premise = {arm: float(np.mean([r["incoherent_fraction"] for r in runs.values()])) for arm, runs in theories.items()}
    seq_len = next(iter(next(iter(theories.values())).values()))["seq_len"]
    return {"seq_len": seq_len, "window": window_rows(theories), "far": far_rows(theories), "order": order_row(theories),
            "window_points": points, "incoherent_fraction": premise,
            "runs": {arm: sorted(int(s) for s in runs) for arm, runs in theories.items()}}


def _ci(ci: list | None) -> str:
    return "n/a" if ci is None else f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def _mean(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def theory_section(result: dict | None) -> str:
    """The "Theory vs trained probes" section of ``accum probe report`` (text, ends with a newline)."""
    lines = ["", "Theory vs trained probes (probes/bridge.py, probes/theory_stats.py; 95% intervals over seeds):"]
    if result is None:
        return "\n".join(lines + ["no theory.json in the run folders yet (written after each run's evaluation)", ""]) + "\n"
    lines += ["", "Runs with a theory.json: " + ", ".join(f"{a} {s}" for a, s in result["runs"].items()),
              "Incoherence premise (share of heads whose predicted coherent fraction at lag L_train is <= 0.5): "
              + ", ".join(f"{a} {v:.2f}" for a, v in result["incoherent_fraction"].items()), "",
              "Window: Spearman over heads of W_pred (sum_{n<L} C_h(n)^2) vs the measured 90% attention window:", "",
              "| arm | runs | rho mean | 95% interval | verdict |", "|---|---:|---:|---:|---|"]
    for r in result["window"]:
        lines.append(f"| {r['arm']} | {r['seeds']} | {_mean(r['mean'])} | {_ci(r['ci'])} | {r['verdict']}"
                     + (f" ({r['note']})" if r["note"] else "") + " |")
    lines += ["", f"Far mass extrapolated from 2x score statistics vs measured: d = mean over heads of "
              f"log(F_pred / F_meas); CONFIRMED when the interval lies inside +-log 1.25 (2x is in-sample):", "",
              "| arm | length | runs | F_pred | F_meas | d mean | 95% interval | d layer 0 | verdict | near-mass d "
              "| 95% interval | verdict |", "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|"]
    for r in result["far"]:
        lines.append(f"| {r['arm']} | {r['multiplier']}x{' (in-sample)' if r['in_sample'] else ''} | {r['seeds']} | "
                     f"{_mean(r['pred']['mean'])} | {_mean(r['measured']['mean'])} | {_mean(r['mean'])} | "
                     f"{_ci(r['ci'])} | {r['layer0_mean']:.3f} | {r['verdict']} | {_mean(r['near']['mean'])} | "
                     f"{_ci(r['near']['ci'])} | {r['near']['verdict']} |")
    o = result["order"]
    lines += ["", "Degradation order: Spearman over arms of the predicted near-weight loss D = mean_h -log(1 - F_pred(M)) "
              "vs the measured log ppl(M)/ppl(1x) (seed bootstrap):",
              "- " + ", ".join(f"{a}: D {o['pred'][a]:.3f} / log ratio {o['measured'][a]:.3f}" for a in o["arms"]),
              f"- rho {_mean(o['rho'])}, 95% interval {_ci(o['ci'])}: {o['verdict']}"
              + (f" ({o['note']})" if o["note"] else ""), "",
              "Where the theory fails to predict the trained model here: " + ("; ".join(failures(result)) or "nowhere"),
              "(Why, where it fails: RoPE never mixes, |psi| = 1, so W_pred = L for every head; U(+-omega) leaves the slow "
              "planes coherent, sin(omega_b)/omega_b ~ 1, so the incoherence premise holds in part of each head only; "
              "the far-mass extrapolation assumes inputs whose statistics do not change with length, which layers "
              "above the first do not have: compare d at layer 0.)", ""]
    return "\n".join(lines) + "\n"


def failures(result: dict) -> list[str]:
    """One phrase per failed prediction: no window prediction, a CONTRADICTED row, a premise that fails in more
    than half of an arm's heads."""
    out = [f"{r['arm']}: no window prediction (W_pred constant)" for r in result["window"] if r["note"]]
    out += [f"{r['arm']}: window order CONTRADICTED" for r in result["window"] if r["verdict"] == stats.CONTRADICTED]
    out += [f"{r['arm']} {r['multiplier']}x: {what} CONTRADICTED (d = {row['mean']:.3f})" for r in result["far"]
            for what, row in (("far mass", r), ("near mass", r["near"])) if row["verdict"] == stats.CONTRADICTED]
    out += [f"{arm}: incoherence premise fails in {1 - v:.0%} of heads" for arm, v in result["incoherent_fraction"].items()
            if v < 0.5]
    if result["order"]["verdict"] == stats.CONTRADICTED:
        out.append("degradation order CONTRADICTED")
    return out
