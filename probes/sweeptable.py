"""The Markdown of a probe sweep (``markdown_table``: perplexities, ratios beside the paper's one number, verdicts,
machines) and the check of a sweep.json read back (``check_summary``)."""

from __future__ import annotations

import math

from accum.probes import stats
from accum.probes.sweepconfig import SweepConfig, missing_runs
from accum.simulations.results import ResultError

def _fmt(x: float | None, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _ci(ci: list[float] | None, digits: int = 2) -> str:
    return "n/a" if ci is None else f"[{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


def markdown_table(seq_len: int, multipliers: list[int], arms: dict, verdict_rows: list[dict], hosts: list[str]) -> str:
    """Perplexity mean +- sd over seeds per length; the longest length with its 95% interval, ratios to 1x
    (all positions and last L_train segment) and far mass; the ratios at 64x and beyond beside the paper's one
    number; then the verdicts and what the machines the runs ran on (``hosts``) mean for them."""
    m = multipliers[-1]
    head = "| arm | seeds | " + " | ".join(f"{k}x ({k * seq_len})" for k in multipliers) + " |"
    lines = [f"Perplexity over all positions, mean +- sd over seeds (L_train = {seq_len} tokens):", "", head,
             "|---|---:|" + "---:|" * len(multipliers)]
    for arm, st in arms.items():
        if not st["n_seeds"]:
            continue
        cells = [f"{_fmt(mu)} +- {_fmt(sd)}" for mu, sd in zip(st["ppl"]["mean"], st["ppl"]["sd"])]
        lines.append(f"| {arm} | {st['n_seeds']} | " + " | ".join(cells) + " |")
    lines += ["", f"At {m}x: means with 95% t intervals over seeds; ratio = ppl({m}x) / ppl(1x); far mass = attention "
              f"on keys >= {seq_len} back (mean over layers and heads):", "",
              f"| arm | ppl {m}x | ratio | last-segment ppl {m}x | last-segment ratio | far mass 2x | far mass {m}x | train tokens/s |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for arm, st in arms.items():
        if not st["n_seeds"]:
            continue
        cell = lambda key, i=-1: f"{_fmt(st[key]['mean'][i])} {_ci(st[key]['ci95'][i])}"
        far2 = cell("far_mass", 1) if len(multipliers) > 1 else "n/a"
        lines.append(f"| {arm} | {cell('ppl')} | {cell('ratio')} | {cell('ppl_last_segment')} | "
                     f"{cell('ratio_last_segment')} | {far2} | {cell('far_mass')} | {st['tokens_per_second']['mean']:.0f} |")
    lines += ratio_table(multipliers, arms)
    spreads = {arm: st["angle_spread"] for arm, st in arms.items() if st.get("angle_spread")}
    if spreads:
        lines += ["", "Learned angle spread per plane b = 0, 1, ... (radians: sd over token ids of pi tanh E[v]_b, "
                  "mean over layers, heads and seeds; 0 at init):", ""]
        lines += [f"- {arm}: " + ", ".join(f"{v:.3f}" for v in spread) for arm, spread in spreads.items()]
    paper_rows = [r for r in verdict_rows if r.get("form") == "paper"]
    verdict_rows = [r for r in verdict_rows if r.get("form") != "paper"]
    looks = next((r["looks"] for r in verdict_rows if "looks" in r), [])
    level = next((r["level"] for r in verdict_rows if "level" in r), 0.95)
    lines += ["", f"Pre-registered verdicts (t interval of level {100 * level:.4g}% over paired seeds of d, judged at "
              f"{len(looks)} look(s) of {', '.join(map(str, looks))} seeds; rule in each row):", "",
              "| claim | metric | rule | seeds | d mean | interval | stopped | verdict |",
              "|---|---|---|---:|---:|---:|---|---|"]
    fragile = [f"{r['claim']} ({r['metric']})" for r in verdict_rows if r.get("host_robust") is False]
    for r in verdict_rows:
        if "seeds" in r:
            lines.append(f"| {r['claim']} | {r['metric']} | {r['rule']} | {len(r['seeds'])} | {_fmt(r['mean'], 3)} | "
                         f"{_ci(r['ci'], 3)} | {stopped_text(r)} | {r['verdict']} |")
        else:
            lines.append(f"| **{r['claim']}** | {r['metric']} | {r['rule']} | | | | | **{r['verdict']}** |")
    lines += ["", host_note(hosts, fragile)] + paper_table(paper_rows)
    return "\n".join(lines) + "\n"


def paper_table(rows: list[dict]) -> list[str]:
    """Lines of the paper-form verdicts (``probes.paper``): each row's d, its seed and text standard errors, the
    interval at the rows' family-wise level, where the rule stands; then the group headlines."""
    judged = [r for r in rows if "seeds" in r]
    if not judged:
        return []
    r0 = judged[0]
    alpha = len(judged) * len(r0["looks"]) * (1 - r0["level"])
    lines = ["", f"Paper-form claims (as the paper states them; {len(judged)} rows, one family-wise level "
             f"{alpha:.3g} split over rows and looks: each interval at {100 * r0['level']:.4g}%, judged at "
             f"{', '.join(map(str, r0['looks']))} seeds; d over all positions at the longest length; interval over "
             "seeds and text blocks, Satterthwaite df):", "",
             "| claim | rule | seeds | d mean | se seed | se text | df | interval | stopped | verdict |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|---|"]
    for r in judged:
        lines.append(f"| {r['claim']} | {r['rule']} | {len(r['seeds'])} | {_fmt(r['mean'], 3)} | "
                     f"{_fmt(r.get('se_seed'), 3)} | {_fmt(r.get('se_text'), 3)} | {_fmt(r.get('df'), 1)} | "
                     f"{_ci(r['ci'], 3)} | {stopped_text(r)} | {r['verdict']} |")
    lines += [f"| **{r['claim']}** | {r['rule']} ({', '.join(r['arms'])}) | | | | | | | | **{r['verdict']}** |"
              for r in rows if "seeds" not in r]
    return lines


#: the paper's one quoted number (its digest): random accumulated QKV rotations' perplexity rises 1.59x at 65,536
#: tokens, 128x its training length of 512 (other data and scale than these probes)
PAPER_RATIO = {"multiplier": 128, "ratio": 1.59, "arm": "random_qkv"}


def ratio_table(multipliers: list[int], arms: dict) -> list[str]:
    """Lines of a table of ppl(m)/ppl(1x) (mean and 95% interval over seeds) at every m >= 64, beside the paper's
    1.59x for random QKV at 128x (``PAPER_RATIO``)."""
    cols = [i for i, m in enumerate(multipliers) if m >= 64]
    if not cols:
        return []
    p = PAPER_RATIO
    lines = ["", f"ppl(m x) / ppl(1x), mean and 95% interval over seeds; the paper reports {p['ratio']}x for "
             f"random QKV rotations at {p['multiplier']}x its training length (other data, model and scale):", "",
             "| arm | " + " | ".join(f"{multipliers[i]}x" for i in cols) + " |", "|---|" + "---:|" * len(cols)]
    for arm, st in arms.items():
        if st["n_seeds"]:
            lines.append(f"| {arm} | " + " | ".join(f"{_fmt(st['ratio']['mean'][i])} {_ci(st['ratio']['ci95'][i])}"
                                                   for i in cols) + " |")
    return lines


def host_note(hosts: list[str], fragile: list[str]) -> str:
    """What the machines the runs ran on mean for the verdicts (``stats.host_robust``); "?" stands for runs that do
    not record their machine (any machine, so they count as another one)."""
    if len(hosts) == 1 and hosts != ["?"]:
        return (f"Every run ran on one machine ({hosts[0]}, from the runs' own records): no cross-machine shift is "
                "in these verdicts.")
    tol = ", ".join(f"{100 * (math.exp(v) - 1):.1f}% ({k})" for k, v in stats.HOST_LOG_TOLERANCE.items())
    unknown = " ('?': runs that do not record their machine)" if "?" in hosts else ""
    machines = f"{len(hosts)} machine{'s' if len(hosts) > 1 else ''} ({', '.join(hosts)}){unknown}"
    if not fragile:
        return (f"The runs come from {machines}; every CONFIRMED or CONTRADICTED verdict above whose runs span machines "
                f"is unchanged if every run's perplexity moves by up to {tol} (stats.host_shift).")
    return (f"The runs come from {machines}; these verdicts could change if every run's perplexity moved by up to "
            f"{tol} (stats.host_shift): " + ", ".join(fragile) + ".")


def stopped_text(row: dict) -> str:
    """Where the sequential rule stands for one verdict row: resolved at a look, waiting for one, or at the
    cap with the effects its interval rules out (d below its low end or above its high end)."""
    if row["stopped"] == "resolved":
        return f"resolved at {row['look']} seeds"
    if row["stopped"] == "pending":
        return f"waits for {row['look']} seeds"
    lo, hi = row["ci"] if row["ci"] is not None else (None, None)
    if lo is None:
        return f"cap {row['look']} seeds"
    return f"cap {row['look']} seeds: rules out d < {lo:.3f} and d > {hi:.3f}"


def check_summary(sweep: dict, cfg: SweepConfig) -> None:
    """Refuse a sweep.json (read back, perhaps edited by hand) whose numbers do not fit its config ``cfg``:
    ``ResultError`` naming the field (``runs.rope.0.ppl[3]``).  Checked: ``seq_len`` and ``multipliers`` as in
    the config; ``runs`` keyed by the config's arms and seeds, each run summary with ``ppl`` and
    ``ppl_last_segment`` (one finite number > 0 per multiplier), ``far_mass`` (one number in [0, 1] or null
    per multiplier), ``text_blocks`` (nll and ref: equally long lists of finite numbers > 0), ``tokens_per_second`` (finite, > 0) and ``angle_spread`` (null or finite numbers, one
    length per arm); ``missing`` exactly the [arm, seed] pairs of the config that ``runs`` lacks."""
    if sweep.get("seq_len") != cfg.train.seq_len:
        raise ResultError(f"seq_len must be config.train.seq_len = {cfg.train.seq_len}, got {sweep.get('seq_len')!r}")
    if sweep.get("multipliers") != list(cfg.eval.multipliers):
        raise ResultError(f"multipliers must be config.eval.multipliers = {list(cfg.eval.multipliers)}, "
                          f"got {sweep.get('multipliers')!r}")
    runs = _keyed(sweep["runs"], "runs", list(cfg.arms))
    for arm, arm_runs in runs.items():
        for seed, run in _keyed(arm_runs, f"runs.{arm}", [str(s) for s in cfg.seeds]).items():
            _check_run(run, f"runs.{arm}.{seed}", len(cfg.eval.multipliers))
        if len({len(r["angle_spread"]) for r in arm_runs.values() if r.get("angle_spread") is not None}) > 1:
            raise ResultError(f"runs.{arm}: angle_spread has different lengths across seeds")
    want = missing_runs(cfg, runs)
    missing = sweep["missing"]
    if not isinstance(missing, list) or len(missing) != len(want) or any(w not in missing for w in want):
        raise ResultError(f"missing must list the {len(want)} [arm, seed] pairs the config's sequential rule asks for "
                          f"and runs lacks, got {str(missing)[:80]}")


def _keyed(value: object, field: str, allowed: list[str]) -> dict:
    """``value`` as a dict whose keys are among ``allowed``; ``ResultError`` naming ``field`` otherwise."""
    if not isinstance(value, dict) or any(key not in allowed for key in value):
        raise ResultError(f"{field} must be an object keyed by some of {', '.join(allowed)}, got {str(value)[:80]}")
    return value


def _check_run(run: object, field: str, n_mult: int) -> None:
    """One run summary of sweep.json (see ``check_summary``); ``ResultError`` naming the field at fault."""
    if not isinstance(run, dict):
        raise ResultError(f"{field} must be a run summary (an object), got {str(run)[:80]}")
    for key in (*stats.METRICS, "ppl_last_segment_1x"):
        _check_numbers(run.get(key), f"{field}.{key}", n_mult, "a finite number > 0", lambda x: x > 0)
    _check_numbers(run.get("far_mass"), f"{field}.far_mass", n_mult, "null or a number in [0, 1]",
                   lambda x: 0 <= x <= 1, nullable=True)
    _check_numbers([run.get("tokens_per_second")], f"{field}.tokens_per_second", 1, "a finite number > 0",
                   lambda x: x > 0)
    blocks = run.get("text_blocks")
    if not isinstance(blocks, dict):
        raise ResultError(f"{field}.text_blocks must be an object with nll and ref lists, got {str(blocks)[:80]}")
    _check_numbers(blocks.get("nll"), f"{field}.text_blocks.nll", None, "a finite number > 0", lambda x: x > 0)
    _check_numbers(blocks.get("ref"), f"{field}.text_blocks.ref", len(blocks["nll"]), "a finite number > 0",
                   lambda x: x > 0)
    spread = run.get("angle_spread")
    if spread is not None:
        _check_numbers(spread, f"{field}.angle_spread", None, "a finite number", lambda x: True)


def _check_numbers(values: object, field: str, length: int | None, allowed: str, ok, nullable: bool = False) -> None:
    """``values`` is a list of ``length`` (None: any number but 0 of) finite numbers for which ``ok`` holds (or
    nulls, if ``nullable``); ``ResultError`` naming ``field`` and ``allowed`` otherwise."""
    def fits(x: object) -> bool:
        if x is None:
            return nullable
        return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and ok(x)

    if not isinstance(values, list) or not values or len(values) != (length or len(values)):
        raise ResultError(f"{field} must be a list of {length or 'one or more'} entries, each {allowed}, "
                          f"got {str(values)[:80]}")
    bad = next((i for i, x in enumerate(values) if not fits(x)), None)
    if bad is not None:
        raise ResultError(f"{field}[{bad}] must be {allowed}, got {values[bad]!r}")
