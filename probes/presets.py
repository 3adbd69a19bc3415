"""Named designs of the C7 probe experiment; ``accum probe train|sweep --preset NAME`` starts from one and any
option given on the command line overrides it.  A preset has three parts: "train" (``TrainConfig`` fields),
"eval" (``EvalConfig`` fields) and "sweep" (``SweepConfig`` fields: arms, variants, seeds, looks, alpha,
analysis sizes); a field a preset leaves out takes the dataclass default.

* ``cpu`` (default): byte-level BPE (4096) on the Shakespeare corpus with the last 10% of the text held out
  (168k validation tokens: 2 windows of 65,536), L_train 128 tokens, 3 layers of width 128 with 4 heads, batch 32,
  300 steps; evaluation at 1x .. 512x (128 .. 65,536 tokens, the paper's longest length) on 131,072 tokens per
  length (2 windows at 512x).  The sweep: the eleven built-in arms, the independent value walk
  (``random_qkv_indep``), the learned arms with the author's key-side token (``learned_key``, ``learned_qkv_key``)
  and with the author's table optimiser (one rate, weight decay 0.1: ``learned_author``, ``learned_qkv_author``),
  seeds 0..14 judged at 3, 6, 10, 15 paired seeds.  Sized from measured single-thread cost (probes/REPORT.md).
* ``cpu-families``: the ``cpu`` sizes, two angle families that no built-in arm is, trained as ``family`` arms at
  seeds 0, 1, 2 (one look): the user family ``accum.simulations.examples:TwoPointAngles`` (theta = +-0.3) and
  ``so2-accumulated`` with a von Mises law (mu = 0.3, kappa = 20); and NoPE, the control of the paper-form
  "rotation-only degrades" rows (the same runs as the ``cpu`` sweep's NoPE at seeds 0, 1, 2: same configs).
* ``cpu-author``: the ``cpu`` sizes, one arm with the author's whole learned setup (``AUTHOR_SETUP``: key-side
  token, one AdamW group with weight decay 0.1 on every parameter, PyTorch's initialisation with an N(0, 1)
  embedding, an untied output layer), seeds 0..5 (one look at 6 seeds).
* ``tiny``: a seconds-long design for tests and a first try (char tokens, 2 layers of width 32, 40 steps).
* ``gpu``: paper-like, L_train 512 tokens, 6 layers of width 384 (6 heads), 250 steps of 32 x 512 tokens,
  evaluation at 1x .. 128x (65,536 tokens, the paper's setting).  NOT RUN yet (no GPU was available).

``angle_lr_scale`` (the learned arms' angle tables only; ``train.make_optimizer``): Adam moves a parameter by
at most about its rate per step, so in a run a table entry can move by at most scale x sum_t lr_t (0.329 for
the cpu schedule, 0.137 for the gpu one).  The scale is the one that lets an entry reach |E| = 3 (pi tanh 3 =
0.995 pi: the arm's whole angle range) within the run: 10 for cpu, 22 for gpu.  At scale 1 (the author's single
AdamW rate) the cpu run's tables reach 0.33 at most; the ``*_author`` variants run that way, with the author's
weight decay 0.1 on the tables.
"""

from __future__ import annotations

from accum.simulations.params import field_error

#: the author's departures from accum's learned arms, as sweep variants (probes/REPORT.md, "Departures")
AUTHOR_VARIANTS = {
    "learned_key": {"arm": "learned", "learned_token": "key"},
    "learned_qkv_key": {"arm": "learned_qkv", "learned_token": "key"},
    "learned_author": {"arm": "learned", "angle_lr_scale": 1.0, "angle_weight_decay": 0.1},
    "learned_qkv_author": {"arm": "learned_qkv", "angle_lr_scale": 1.0, "angle_weight_decay": 0.1},
}
BUILTIN_ARMS = ("nope", "rope", "alibi", "random", "random_drift", "random_qkv", "random_drift_qkv", "learned",
                "learned_qkv", "gain", "path")
CPU_TRAIN = {"angle_lr_scale": 10.0, "val_fraction": 0.1}
CPU_EVAL = {"multipliers": (1, 2, 4, 8, 16, 32, 64, 128, 256, 512), "n_tokens": 2 * 512 * 128, "chunk": 1024}
#: the author's whole learned setup in one arm (probes/REPORT.md, "Departures"): the key-side token, the tables in the
#: one AdamW group (the shared rate, weight decay 0.1 on every parameter), PyTorch's initialisation and an untied output
AUTHOR_SETUP = {"learned_author_setup": {"arm": "learned", "learned_token": "key", "angle_lr_scale": 1.0,
                                         "angle_weight_decay": 0.1, "decay": "all", "init": "torch", "output": "untied"}}
FAMILY_VARIANTS = {
    "twopoint": {"arm": "family", "family": "accum.simulations.examples:TwoPointAngles", "family_param": ("a=0.3",)},
    "vonmises": {"arm": "family", "family": "so2-accumulated", "family_param": ("law=vonmises", "mu=0.3", "kappa=20")},
}

PRESETS: dict[str, dict[str, dict]] = {
    "cpu": {
        "train": CPU_TRAIN,
        "eval": CPU_EVAL,
        "sweep": {"arms": (*BUILTIN_ARMS, "random_qkv_indep", *AUTHOR_VARIANTS), "variants": AUTHOR_VARIANTS,
                  "seeds": tuple(range(15)), "looks": (3, 6, 10, 15), "alpha": 0.05, "paper_looks": (6, 10, 15)},
    },
    "cpu-families": {
        "train": CPU_TRAIN,
        "eval": CPU_EVAL,
        "sweep": {"arms": (*FAMILY_VARIANTS, "nope"), "variants": FAMILY_VARIANTS, "seeds": (0, 1, 2)},
    },
    "cpu-author": {
        "train": CPU_TRAIN,
        "eval": CPU_EVAL,
        "sweep": {"arms": tuple(AUTHOR_SETUP), "variants": AUTHOR_SETUP, "seeds": tuple(range(6))},
    },
    "tiny": {
        "train": {"seq_len": 16, "batch_size": 4, "steps": 40, "warmup": 4, "d_model": 32, "n_heads": 2, "n_layers": 2,
                  "tokenizer": "char", "data_source": "stdlib", "checkpoint_every": 20, "log_every": 10,
                  "path_rank": 4, "path_block": 8, "val_fraction": 0.1},
        "eval": {"multipliers": (1, 2, 4), "n_tokens": 2 * 4 * 16, "chunk": 16},
        "sweep": {"arms": ("rope", "random", "alibi"), "seeds": (0, 1, 2), "analysis_windows": 2},
    },
    "gpu": {
        "train": {"seq_len": 512, "batch_size": 32, "steps": 250, "warmup": 25, "lr": 1e-3, "d_model": 384,
                  "n_heads": 6, "n_layers": 6, "path_rank": 32, "path_block": 64, "val_fraction": 0.1, "angle_lr_scale": 22.0,
                  "checkpoint_every": 100},
        "eval": {"multipliers": (1, 2, 4, 8, 16, 32, 64, 128), "n_tokens": 2 * 128 * 512, "chunk": 2048,
                 "tokens_per_batch": 65536},
        "sweep": {"analysis_multiplier": 4, "analysis_windows": 4,
                  "arms": (*BUILTIN_ARMS, "random_qkv_indep", "learned_key", "learned_qkv_key"),
                  "variants": {k: AUTHOR_VARIANTS[k] for k in ("learned_key", "learned_qkv_key")}},
    },
}


def preset(name: str) -> dict[str, dict]:
    """The overrides of preset ``name`` ({"train", "eval", "sweep"}); ``ParamError`` naming preset otherwise."""
    if name not in PRESETS:
        raise field_error("preset", f"must be one of {', '.join(PRESETS)}, got {name!r}")
    return PRESETS[name]
