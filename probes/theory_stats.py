"""Seed-level agreement of accum's theory with the trained probes (the runs' ``theory.json``, ``probes.bridge``), held
to the evidence rule stated before the cpu sweep's second look (probes/REPORT.md).

The unit of replication is the training seed, as in ``probes.stats``.

* Far mass, law-based (C1, C4, C5 from the family's law) and C3 transfer (from the head's own 2x attention): per run
  and multiplier, the log-odds error d = mean over heads of logit(F_pred) - logit(F_meas) (far masses clipped to
  [``bridge.FLOOR``, 1 - FLOOR]): the far mass's ratio where F is small, the near mass's where F saturates, so the
  row can fail at every length.  Claim "the prediction equals the measured far mass": equivalence with margin
  ``FAR_MARGIN`` = log 1.25, ``stats.flat_verdict`` on the t interval over seeds.
* Baselines (``BASELINES``): predictors that know nothing of the rotation law -- uniform attention with the arm's
  bias and the head's 2x far mass carried forward (``probes.baselines``), and the same head's law with A = I (in
  theory.json from ``bridge.VERSION`` 3 on).  Per run, a predictor's error is e = mean over heads of |logit(F_pred) -
  logit(F_meas)|.  A CONFIRMED row is evidence only if, for every baseline, the t interval over the seeds having it
  (at least ``MIN_BASELINE_RUNS``) of e_baseline - e_law lies above 0; else it is a sanity row, with the baselines
  it does not beat.  CONTRADICTED stands as it is.
* Family-wise level: the rows at ``JUDGED`` multipliers (both predictions, every arm) and the degradation-order rows
  are judged, each at the two-sided level 1 - ``ALPHA`` / m, m the number of judged rows of the sweep (Bonferroni:
  at most ``ALPHA`` chance of any wrong verdict); every other row is printed with a 95% interval and no verdict.
  Each judged row states its power: the smallest |d| it would call CONTRADICTED, log 1.25 + its half-width.
* Window (C2): printed, not judged (the predicted window is how fast the transport forgets, the measured one where
  the head attends, which the keys' content decides: not one quantity, probes/REPORT.md).
* Degradation order (C5 -> C7): Spearman over arms of the law-based D = mean_h -log(1 - F_law,h(M)) (mean over seeds)
  against the measured log ppl(M)/ppl(1x), over the arms with at least ``MIN_ORDER_SEEDS`` seeds (at least
  ``MIN_ORDER_ARMS``), with and without ALiBi.  Verdict from a permutation test over arms (``PERMUTATIONS`` random
  relabellings, one-sided p at half the row's alpha on each side); interval from a bootstrap over arms and, within
  each, seeds (``BOOTSTRAP`` resamples, percentile, at the row's level).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from scipy import stats as sps

from accum.probes import baselines, stats
from accum.probes.bridge import FLOOR, READABLE_VERSIONS, THEORY_RESULTS
from accum.probes.io import read_json
from accum.probes.transforms import alibi_slopes

FAR_MARGIN = math.log(1.25)
ALPHA = 0.05
#: the multipliers whose far-mass rows are judged (short, middle, the paper's longest); the others are printed only
JUDGED = (8, 64, 512)
BOOTSTRAP = 20000
PERMUTATIONS = 20000
MIN_ORDER_ARMS = 6
MIN_ORDER_SEEDS = 3
MIN_BASELINE_RUNS = 3
#: the two far-mass predictions: key in theory.json -> what the report calls it
PREDICTIONS = {"law": "law-based (family's law + 1x statistics)", "c3": "C3 transfer (own 2x attention, unbiased)"}
#: the baselines that know nothing of the rotation law: name -> what the report calls it
BASELINES = {"uniform": "uniform attention with the arm's bias", "carried": "the head's 2x far mass carried forward",
             "identity": "the head's law with A = I"}


def load_theories(out_dir: Path) -> dict:
    """{arm folder: {seed (str): theory.json}} of every readable-version ``<out_dir>/<arm>/seed<k>/theory.json``."""
    found: dict = {}
    for path in sorted(Path(out_dir).glob(f"*/seed*/{THEORY_RESULTS}")):
        seed = path.parent.name.removeprefix("seed")
        run = read_json(path)
        if seed.isdigit() and run.get("version") in READABLE_VERSIONS:
            found.setdefault(path.parent.parent.name, {})[seed] = run
    return found


def head_matrix(run: dict, key: str) -> np.ndarray:
    """(heads, multipliers) of layer[key][h][i] over the run's layers and heads."""
    return np.array([h for la in run["layers"] for h in la[key]], dtype=float)


def logit(f: np.ndarray) -> np.ndarray:
    """log(F / (1 - F)) of far masses clipped to [FLOOR, 1 - FLOOR]."""
    f = np.clip(f, FLOOR, 1 - FLOOR)
    return np.log(f) - np.log1p(-f)


def head_slopes(run: dict) -> list[float]:
    """Every head's ALiBi slope in the run's layer-major head order (0 for every arm but ALiBi)."""
    cfg = run["train_config"]
    per_layer = alibi_slopes(cfg["n_heads"]).tolist() if cfg["arm"] == "alibi" else [0.0] * cfg["n_heads"]
    return per_layer * len(run["layers"])


def baseline_predictions(run: dict) -> dict[str, np.ndarray]:
    """(heads, multipliers) far mass of each baseline the run allows: uniform (always), carried (when 2x was
    evaluated), identity (theory.json of version 3 on)."""
    seq_len, mult = run["seq_len"], run["multipliers"]
    slopes = head_slopes(run)
    out = {"uniform": np.array([baselines.uniform_far_mass(m, seq_len, mult) for m in slopes])}
    if 2 in mult:
        at2 = head_matrix(run, "far_mass_measured")[:, mult.index(2)]
        out["carried"] = np.array([baselines.carried_far_mass(f, m, seq_len, mult) for f, m in zip(at2, slopes)])
    if "far_mass_identity" in run["layers"][0]:
        out["identity"] = head_matrix(run, "far_mass_identity")
    return out


def run_errors(run: dict, kind: str) -> dict:
    """One run's per-multiplier numbers for the ``kind`` prediction: "d" (mean over heads of the log-odds error),
    "d_premise" (over the heads where the law's premise holds; None without one), "d_layers" (per layer), "abs" (mean
    over heads of the absolute log-odds error) and "baselines" {name: the same for each baseline}, "pred" and
    "measured" (mean over heads of F)."""
    meas = head_matrix(run, "far_mass_measured")
    pred = head_matrix(run, f"far_mass_{kind}")
    err = logit(pred) - logit(meas)
    applies = np.array([a for la in run["layers"] for a in la["applies"]], dtype=bool)
    per_layer = len(run["layers"][0]["applies"])
    return {"d": err.mean(0), "d_premise": err[applies].mean(0) if applies.any() else None,
            "d_layers": err.reshape(len(run["layers"]), per_layer, -1).mean(1), "abs": np.abs(err).mean(0),
            "baselines": {name: np.abs(logit(b) - logit(meas)).mean(0) for name, b in baseline_predictions(run).items()},
            "pred": pred.mean(0), "measured": meas.mean(0)}


def judged_count(theories: dict) -> int:
    """m: the judged rows of a sweep (far-mass rows at ``JUDGED`` multipliers of both predictions, every arm, and
    the two degradation-order rows)."""
    far = sum(len(PREDICTIONS) * len(set(JUDGED) & set(next(iter(runs.values()))["multipliers"]))
              for runs in theories.values())
    return far + 2


def row_level(theories: dict) -> float:
    """The two-sided level of every judged row: 1 - ALPHA / m (``judged_count``)."""
    return 1 - ALPHA / judged_count(theories)


def beats(law_abs: list[float], base_abs: list[float | None], level: float) -> dict:
    """Whether the law's per-seed absolute error is below a baseline's: the t interval (``level``) of
    e_baseline - e_law over the seeds that have the baseline; "beats" None with fewer than ``MIN_BASELINE_RUNS``."""
    diffs = [b - a for a, b in zip(law_abs, base_abs) if b is not None]
    if len(diffs) < MIN_BASELINE_RUNS:
        return {"n": len(diffs), "mean": None, "ci": None, "beats": None}
    iv = stats.t_interval(diffs, level)
    return {"n": iv["n"], "mean": iv["mean"], "ci": iv["ci"], "beats": iv["ci"][0] > 0}


def evidence_label(verdict: str, vs: dict) -> str:
    """"evidence" for a CONFIRMED row that beats every baseline; "sanity: ..." naming the baselines it does not
    beat (or that were not at hand) for any other CONFIRMED row; "" otherwise."""
    if verdict != stats.CONFIRMED:
        return ""
    missing = [name for name, v in vs.items() if v["beats"] is None]
    tied = [name for name, v in vs.items() if v["beats"] is False]
    if not missing and not tied:
        return "evidence"
    parts = ([f"not better than {', '.join(tied)}"] if tied else []) + \
            ([f"{', '.join(missing)} not at hand"] if missing else [])
    return "sanity: " + "; ".join(parts)


def far_rows(theories: dict, kind: str, level: float) -> list[dict]:
    """Per arm and multiplier, the ``kind`` prediction ("law" or "c3") against the measured far mass (module
    docstring): d per seed, its interval and equivalence verdict (judged multipliers) with its power, the baselines'
    comparison and the evidence label; descriptive numbers (premise heads, per layer, mean F)."""
    rows = []
    for arm, runs in theories.items():
        errs = [run_errors(r, kind) for r in runs.values()]
        for i, m in enumerate(next(iter(runs.values()))["multipliers"]):
            judged = m in JUDGED
            values = [float(e["d"][i]) for e in errs]
            iv = stats.t_interval(values, level if judged else 0.95)
            verdict = stats.flat_verdict(iv["ci"], FAR_MARGIN) if judged else "not judged"
            law_abs = [float(e["abs"][i]) for e in errs]
            vs = {name: beats(law_abs, [float(e["baselines"][name][i]) if name in e["baselines"] else None
                                        for e in errs], level if judged else 0.95) for name in BASELINES}
            premise = [float(e["d_premise"][i]) for e in errs if e["d_premise"] is not None]
            rows.append({"arm": arm, "kind": kind, "multiplier": m, "seeds": len(errs), "values": values, **iv,
                         "judged": judged, "verdict": verdict, "baselines": vs,
                         "evidence": evidence_label(verdict, vs) if judged else "",
                         "power": FAR_MARGIN + (iv["ci"][1] - iv["mean"]) if judged and iv["ci"] else None,
                         "premise": stats.t_interval(premise), "layers": np.mean([e["d_layers"][:, i] for e in errs],
                                                                                 axis=0).tolist(),
                         "pred": stats.t_interval([float(e["pred"][i]) for e in errs]),
                         "measured": stats.t_interval([float(e["measured"][i]) for e in errs]),
                         "in_sample": kind == "c3" and m == 2})
    return rows


def window_rows(theories: dict) -> list[dict]:
    """Per arm: the ranges of the predicted and measured windows and the mean Spearman rho over heads (printed, not
    judged: module docstring)."""
    rows = []
    for arm, runs in theories.items():
        values = [r["spearman_window"] for r in runs.values()
                  if r["window_pred_range"] >= 1.0 and r["spearman_window"] is not None]
        pred = [w for r in runs.values() for la in r["layers"] for w in la["window_pred"]]
        meas = [w for r in runs.values() for la in r["layers"] for w in la["window_measured"]]
        rows.append({"arm": arm, "seeds": len(runs), "values": values, **stats.t_interval(values),
                     "window_pred": [min(pred), max(pred)], "window_measured": [min(meas), max(meas)]})
    return rows


def rank_rows(x: np.ndarray) -> np.ndarray:
    """Average ranks of each row of x (R, n) (``scipy.stats.rankdata``)."""
    return sps.rankdata(x, axis=1)


def row_spearman(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Spearman rho of each row pair of a, b (R, n): the Pearson correlation of their average ranks (NaN where
    either row is constant)."""
    ra, rb = rank_rows(a), rank_rows(b)
    ra, rb = ra - ra.mean(1, keepdims=True), rb - rb.mean(1, keepdims=True)
    denom = np.sqrt((ra**2).sum(1) * (rb**2).sum(1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denom > 0, (ra * rb).sum(1) / denom, np.nan)


def order_row(theories: dict, level: float, without: tuple[str, ...] = (), seed: int = 0) -> dict:
    """Spearman over arms (those in ``without`` left out) of mean D vs mean measured log ppl ratio, its permutation
    verdict and arms-and-seeds bootstrap interval (module docstring)."""
    arms = {arm: np.array([(r["degradation_pred"], r["log_ppl_ratio"]) for r in runs.values() if "log_ppl_ratio" in r])
            for arm, runs in theories.items() if arm not in without}
    arms = {a: v for a, v in arms.items() if v.size}
    out = {"arms": list(arms), "without": list(without), "level": level,
           "pred": {a: float(v[:, 0].mean()) for a, v in arms.items()},
           "measured": {a: float(v[:, 1].mean()) for a, v in arms.items()}}
    ranked = {a: v for a, v in arms.items() if len(v) >= MIN_ORDER_SEEDS}
    if len(ranked) < MIN_ORDER_ARMS:
        return {**out, "ranked": list(ranked), "rho": None, "p": None, "ci": None, "verdict": stats.NOT_RESOLVED,
                "note": f"{len(ranked)} arms with >= {MIN_ORDER_SEEDS} seeds, fewer than {MIN_ORDER_ARMS}"}
    pred = np.array([out["pred"][a] for a in ranked])
    meas = np.array([out["measured"][a] for a in ranked])
    rho = float(row_spearman(pred[None], meas[None])[0])
    rng = np.random.default_rng(seed)
    perm = row_spearman(np.broadcast_to(pred, (PERMUTATIONS, pred.size)),
                        rng.permuted(np.tile(meas, (PERMUTATIONS, 1)), axis=1))
    p_up = (1 + np.sum(perm >= rho - 1e-12)) / (1 + PERMUTATIONS)
    p_down = (1 + np.sum(perm <= rho + 1e-12)) / (1 + PERMUTATIONS)
    # per arm, its (D, log ratio) mean over a seed resample, one per bootstrap draw: (arms, BOOTSTRAP, 2)
    seed_means = np.stack([v[rng.integers(len(v), size=(BOOTSTRAP, len(v)))].mean(1) for v in ranked.values()])
    pick = rng.integers(len(ranked), size=(BOOTSTRAP, len(ranked)))  # the arms each draw takes
    means = seed_means[pick, np.arange(BOOTSTRAP)[:, None]]  # (BOOTSTRAP, arms, 2)
    boot = row_spearman(means[..., 0], means[..., 1])
    boot = boot[~np.isnan(boot)]
    tail = 50 * (1 - level)
    ci = np.percentile(boot, [tail, 100 - tail]).tolist() if boot.size else None
    alpha = 1 - level
    verdict = stats.CONFIRMED if p_up <= alpha / 2 else stats.CONTRADICTED if p_down <= alpha / 2 else stats.NOT_RESOLVED
    return {**out, "ranked": list(ranked), "rho": rho, "p": float(p_up), "p_down": float(p_down), "ci": ci,
            "verdict": verdict, "note": f"ranked over {len(ranked)} arms"}


def agreement(out_dir: Path) -> dict | None:
    """Everything the report and figure 7 show, from the theory.json files under ``out_dir``; None if none."""
    theories = load_theories(out_dir)
    if not theories:
        return None
    level = row_level(theories)
    points = [{"arm": arm, "seed": int(seed), "window_pred": w, "window_measured": m}
              for arm, runs in theories.items() for seed, r in runs.items()
              for la in r["layers"] for w, m in zip(la["window_pred"], la["window_measured"])]
    premise = {arm: float(np.mean([r["applies_share"] for r in runs.values()])) for arm, runs in theories.items()}
    c4 = {arm: c4_ratio(runs.values()) for arm, runs in theories.items()}
    sources = {arm: next(iter(runs.values()))["layers"][0]["law_source"] for arm, runs in theories.items()}
    seq_len = next(iter(next(iter(theories.values())).values()))["seq_len"]
    orders = [order_row(theories, level), order_row(theories, level, without=("alibi",))]
    return {"seq_len": seq_len, "level": level, "judged_rows": judged_count(theories),
            "far": [row for kind in PREDICTIONS for row in far_rows(theories, kind, level)],
            "window": window_rows(theories), "order": orders[0], "orders": orders, "window_points": points,
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


def baseline_cell(v: dict) -> str:
    """One baseline's comparison: the mean excess of its error over the law's, and whether the law beats it."""
    if v["beats"] is None:
        return f"n/a ({v['n']} runs)"
    return f"{v['mean']:+.3f} {_ci(v['ci'])} {'beaten' if v['beats'] else 'not beaten'}"


def far_table(result: dict, kind: str) -> list[str]:
    """The markdown rows of one prediction kind."""
    names = list(BASELINES)
    lines = ["| arm | length | runs | F_pred | F_meas | log-odds d | interval | verdict | catches | "
             + " | ".join(f"vs {n}" for n in names) + " | label | d, premise heads | d per layer |",
             "|---|---:|---:|---:|---:|---:|---:|---|---:|" + "---|" * len(names) + "---|---:|---|"]
    for r in (r for r in result["far"] if r["kind"] == kind):
        length = f"{r['multiplier']}x" + (" (in-sample)" if r["in_sample"] else "")
        base = " | ".join(baseline_cell(r["baselines"][n]) if r["judged"] else "" for n in names)
        lines.append(f"| {r['arm']} | {length} | {r['seeds']} | {_num(r['pred']['mean'])} | {_num(r['measured']['mean'])} | "
                     f"{_num(r['mean'])} | {_ci(r['ci'])} | {r['verdict']} | "
                     f"{'|d| >= ' + _num(r['power']) if r['power'] is not None else ''} | {base} | {r['evidence']} | "
                     f"{_num(r['premise']['mean'])} | " + ", ".join(f"{v:+.3f}" for v in r["layers"]) + " |")
    return lines


def order_line(o: dict) -> str:
    """One degradation-order row as text."""
    what = "every arm" if not o["without"] else f"without {', '.join(o['without'])}"
    if o["rho"] is None:
        return f"- {what}: {o['verdict']} ({o['note']})"
    return (f"- {what}: rho {o['rho']:.3f}, permutation p {o['p']:.4f} (one-sided; rho < 0: {o['p_down']:.4f}), "
            f"arms-and-seeds bootstrap interval {_ci(o['ci'])} at {100 * o['level']:.3f}%: **{o['verdict']}** "
            f"({o['note']})")


def theory_section(result: dict | None) -> str:
    """The "Theory vs trained probes" section of ``accum probe report`` (text, ends with a newline)."""
    lines = ["", "Theory vs trained probes (probes/bridge.py, probes/theory_stats.py):"]
    if result is None:
        return "\n".join(lines + ["no theory.json in the run folders yet (`accum probe theory --run DIR ...`)", ""]) + "\n"
    level = result["level"]
    lines += ["", "Runs with a theory.json: " + ", ".join(f"{a} {s}" for a, s in result["runs"].items()),
              "Step law per arm: " + "; ".join(f"{a}: {s}" for a, s in result["law_sources"].items()),
              "Incoherence premise (share of heads with coherent fraction C(L) <= 0.5): "
              + ", ".join(f"{a} {v:.0%}" for a, v in result["applies_share"].items()),
              f"Judged rows: the far-mass rows at {', '.join(f'{m}x' for m in JUDGED)} and the degradation-order rows, "
              f"{result['judged_rows']} in all, each at {100 * level:.3f}% (family-wise level {ALPHA}); the other rows "
              "are printed with a 95% interval and no verdict. A CONFIRMED row is evidence only where it beats every "
              "baseline (" + "; ".join(f"{k}: {v}" for k, v in BASELINES.items()) + "): the interval of the baseline's "
              "mean absolute log-odds error minus the law's lies above 0; otherwise it is a sanity row."]
    if result["c4_ratio"]:
        lines.append("C4 check (premise heads): simulated far-score sd / C4's sqrt(E|q|^2 E|k|^2 / d) / sqrt(d): "
                     + ", ".join(f"{a} {v:.2f}" for a, v in result["c4_ratio"].items()))
    for kind, title in PREDICTIONS.items():
        lines += ["", f"Far mass, {title}, against the measured far mass: d = mean over heads of logit(F_pred) - "
                  "logit(F_meas); CONFIRMED when the interval lies inside +-log 1.25; \"catches\": the smallest |d| the "
                  "row would call CONTRADICTED:", "", *far_table(result, kind), "",
                  f"Per layer at each arm's longest length, mean over arms of d: {layer_line(result, kind)}"]
    lines += ["", "Window (C2), printed and not judged: W_pred = sum_{n<L} C(n)^2 is how fast the transport forgets, the "
              "measured 90% window is where the head attends (the keys' content decides it):", "",
              "| arm | runs | W_pred range | W measured range | Spearman over heads, mean |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {r['arm']} | {r['seeds']} | {r['window_pred'][0]:.1f}-{r['window_pred'][1]:.1f} | "
              f"{r['window_measured'][0]:.1f}-{r['window_measured'][1]:.1f} | {_num(r['mean'])} |" for r in result["window"]]
    o = result["orders"][0]
    lines += ["", "Degradation order: Spearman over arms of the law-based D = mean_h -log(1 - F_law(M)) vs the measured "
              "log ppl(M)/ppl(1x):",
              "- " + ", ".join(f"{a}: D {o['pred'][a]:.3f} / log ratio {o['measured'][a]:.3f}" for a in o["arms"])]
    lines += [order_line(row) for row in result["orders"]]
    lines += ["", "Evidence for the theory (judged rows CONFIRMED that beat every baseline):"]
    lines += [f"- {f}" for f in evidence(result)] or ["- none"]
    lines += ["", "Where the theory fails to predict the trained model here:"]
    lines += [f"- {f}" for f in failures(result)] or ["- nowhere"]
    lines += ["", "Not resolved (neither confirmed nor contradicted at this number of seeds):"]
    lines += [f"- {f}" for f in unresolved(result)] or ["- nothing"]
    return "\n".join(lines + [""]) + "\n"


def _what(r: dict) -> str:
    return f"{r['arm']} {r['multiplier']}x: {PREDICTIONS[r['kind']].split(' (')[0]} far mass"


def evidence(result: dict) -> list[str]:
    """One line per judged row that counts as evidence, then a count of the CONFIRMED rows that are sanity rows."""
    out = [f"{_what(r)} (d = {r['mean']:+.3f}, catches |d| >= {r['power']:.3f})" for r in result["far"]
           if r["evidence"] == "evidence"]
    sanity = [r for r in result["far"] if r["evidence"].startswith("sanity")]
    if sanity:
        out.append(f"{len(sanity)} more rows agree within the margin but are sanity rows (a baseline does as well, or "
                   "is not at hand): " + ", ".join(f"{r['arm']} {r['multiplier']}x {r['kind']}" for r in sanity))
    return out


def failures(result: dict) -> list[str]:
    """One line per failed prediction, with the share of heads it concerns."""
    out = [f"{a}: incoherence premise fails in {1 - v:.0%} of heads (C(L) > 0.5): the law's far mass there is what the "
           "coherent law does, not a test of C1/C4" for a, v in result["applies_share"].items() if v < 1.0]
    out += [f"{_what(r)} CONTRADICTED (log-odds d = {r['mean']:+.3f})" for r in result["far"]
            if r["verdict"] == stats.CONTRADICTED]
    out += [f"degradation order ({'every arm' if not o['without'] else 'without ' + ', '.join(o['without'])}) "
            "CONTRADICTED" for o in result["orders"] if o["verdict"] == stats.CONTRADICTED]
    return out


def unresolved(result: dict) -> list[str]:
    """One line per judged NOT RESOLVED row (the reason where there is one)."""
    out = [f"{_what(r)} (d = {_num(r['mean'])} {_ci(r['ci'])})" for r in result["far"]
           if r["verdict"] == stats.NOT_RESOLVED]
    out += [f"degradation order ({'every arm' if not o['without'] else 'without ' + ', '.join(o['without'])})"
            + (f" ({o['note']})" if o.get("note") else "") for o in result["orders"] if o["verdict"] == stats.NOT_RESOLVED]
    return out
