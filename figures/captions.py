"""Caption text saved beside each figure: what it shows, the configuration of every curve, the seeds.

The first line is the whole caption in one line (summary, size, root seed); the lines after it list each
curve's job (quantity, family parameters, resolved options, its own seed and data file), the theory
evaluators used and any theory curve that is missing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from .data import Measured
from .overlays import Theory
from .specs import FigureSpec

SEED_RULE = ("each curve's seed is simulations.identity.job_seed(root seed, its config, 0), stored in its record, "
             "so a curve's numbers do not depend on the other curves")


def _assignments(values: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())


def job_line(m: Measured) -> str:
    """One curve's job: series, quantity, family and given parameters, resolved options, seed, file."""
    config = m.record["config"]
    stamp = m.record.get("sweep", {})
    return (f"- {m.job.series}: {config['quantity']} of {config['family']}({_assignments(m.job.params)}); "
            f"options {_assignments(config['options'])}; seed {m.record['seed']}; "
            f"file {stamp.get('hash', '?')}.json")


def caption(spec: FigureSpec, measured: Sequence[Measured], theory: Theory, root_seed: int, size: str,
            results_dir: Path) -> str:
    """Caption of a measured figure (figures 1-5)."""
    version = measured[0].record.get("version", "?") if measured else "?"
    head = (f"{spec.name}: {spec.summary} Size: {size}; {len(measured)} Monte Carlo jobs; root seed {root_seed}; "
            f"bands and error bars are +-2 standard errors; theory from {theory.source or 'none'}.")
    notes = [f"Note: {n}" for n in theory.notes] or ["Every theory curve is drawn."]
    return "\n".join([head, f"Seeds: root seed {root_seed} (accum figures --seed); {SEED_RULE}.",
                      f"Data: {results_dir} (accum {version}). Curves:", *(job_line(m) for m in measured),
                      *notes]) + "\n"


def probes_caption(spec: FigureSpec, sweep: dict, path: Path) -> str:
    """Caption of figure 6 from the probes' multi-seed sweep.json: config, seeds per arm, what is missing."""
    train, evaluation = sweep["config"]["train"], sweep["config"]["eval"]
    keys = ("d_model", "n_heads", "n_layers", "seq_len", "batch_size", "steps", "lr", "tokenizer", "bpe_vocab")
    model = ", ".join(f"{k}={train[k]}" for k in keys if k in train)
    seeds = ", ".join(f"{arm} {st.get('seeds', [])}" for arm, st in sweep["arms"].items())
    head = (f"{spec.name}: {spec.summary} Train length L={sweep['seq_len']} tokens; training seeds per arm: {seeds}; "
            f"evaluation seed {evaluation.get('seed', '?')}. Lines: mean over training seeds; bands: 95% Student t "
            "interval over seeds (none with one seed).")
    missing = sweep.get("missing", [])
    partial = [f"Partial sweep: {len(missing)} (arm, seed) runs not finished: "
               + ", ".join(f"{a}/seed{s}" for a, s in missing) + "."] if missing else []
    return "\n".join([head, *partial, f"Training: {model}.",
                      f"Evaluation: multipliers {sweep['multipliers']}, {evaluation.get('n_tokens', '?')} validation "
                      f"targets per length (the same targets at every length, >= 2 windows).",
                      f"Data: {path}."]) + "\n"


def theory_caption(spec: FigureSpec, result: dict, path: Path) -> str:
    """Caption of figure 7 from ``probes.theory_stats.agreement``: runs per arm, the rules, where it fails."""
    runs = ", ".join(f"{arm} seeds {seeds}" for arm, seeds in result["runs"].items())
    premise = ", ".join(f"{arm} {share:.0%}" for arm, share in result["applies_share"].items())
    return "\n".join([f"{spec.name}: {spec.summary}", f"Runs (theory.json under {path}): {runs}.",
                      "Prediction of (a): F(T) = mean over N = 1..T-L of E[S_N / (Z_near + S_N)], S_N simulated from the "
                      "head's step law with keys from its 2x key pool and Z_near from its near scores (probes/farlaw.py); "
                      "no far attention of the model is read. Heads whose coherent fraction at lag L exceeds 0.5 are "
                      f"outside the incoherence premise (share of heads inside it: {premise}); their curve shows what the "
                      "coherent law does. (b): the head's own far attention at 2L extrapolated under C3 (probes/transfer.py; "
                      "2x is in-sample). Bands: 95% Student t interval over seeds.",
                      f"Judged far-mass rows (dotted verticals): {judged_line(result)}.",
                      "In (c) the two windows are different quantities (how fast the transport forgets; where the head "
                      "attends), drawn and not judged. (d): Spearman over arms with its permutation verdict at the "
                      "bridge's family-wise level (probes/theory_stats.py): "
                      + "; ".join(f"{'every arm' if not o['without'] else 'without ' + ', '.join(o['without'])} "
                                  f"{o['verdict']} ({o['note']})" for o in result["orders"]) + "."]) + "\n"


def judged_line(result: dict) -> str:
    """Per prediction kind of figure 7's far rows: the judged rows, their verdicts counted, and how many count as
    evidence (CONFIRMED and better than every baseline; probes/theory_stats.py)."""
    parts = []
    for kind, name in (("law", "step law (a)"), ("c3", "C3 transfer (b)")):
        rows = [r for r in result["far"] if r["kind"] == kind and r["judged"]]
        verdicts = sorted({r["verdict"] for r in rows})
        counted = ", ".join(f"{sum(r['verdict'] == v for r in rows)} {v}" for v in verdicts)
        evidence = sum(r["evidence"] == "evidence" for r in rows)
        lengths = ", ".join(f"{m}x" for m in sorted({r["multiplier"] for r in rows}))
        parts.append(f"{name} at {lengths or 'no length'}: {len(rows)} rows, {counted or 'none'}; {evidence} evidence")
    return "; ".join(parts)