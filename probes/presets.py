"""Named sizes of the C7 probe experiment; ``accum probe train|sweep --preset NAME`` starts from one and any
option given on the command line overrides it.

* ``cpu`` (default; the ``TrainConfig`` / ``EvalConfig`` defaults but ``angle_lr_scale``): byte-level BPE (4096), L_train 128
  tokens, 3 layers of width 128 with 4 heads, batch 32, evaluation at 1x..64x on 4 windows per length.
  Sized from measured single-thread throughput so every arm x 3 seeds fits about 2 hours on 2 cores
  (see probes/REPORT.md for the measured tokens/s per arm).
* ``gpu``: paper-like, L_train 512 tokens, 6 layers of width 384 (6 heads), 250 steps of 32 x 512 tokens,
  evaluation at 1x..64x (4 windows of 32768 tokens at 64x, so the validation share is 10%).  Intended for
  one H200 within about 8 minutes for every arm x 3 seeds: a step is about 6 x 12.2M parameters x 16384
  tokens + attention ~ 1.4 TFLOP, so 33 runs x 250 steps ~ 11.5 PFLOP, ~6.5 min at an assumed 30 TFLOP/s
  in fp32, plus ~20 TFLOP of evaluation per run.  NOT RUN yet (no GPU was available): an estimate only.

``angle_lr_scale`` (the learned arms' angle tables only; ``train.make_optimizer``): Adam moves a parameter by
at most about its rate per step, so in a run a table entry can move by at most scale x sum_t lr_t (0.329 for
the cpu schedule, 0.137 for the gpu one).  The scale is the one that lets an entry reach |E| = 3 (pi tanh 3 =
0.995 pi: the arm's whole angle range) within the run: 10 for cpu, 22 for gpu.  At scale 1 (the paper's single
AdamW rate) the cpu run's tables reach 0.33 at most, and measured they spread by 0.066 rad (probes/REPORT.md).
"""

from __future__ import annotations

from accum.simulations.params import field_error

PRESETS: dict[str, dict[str, dict]] = {
    "cpu": {"train": {"angle_lr_scale": 10.0}, "eval": {}, "sweep": {}},
    "gpu": {
        "train": {"seq_len": 512, "batch_size": 32, "steps": 250, "warmup": 25, "lr": 1e-3, "d_model": 384,
                  "n_heads": 6, "n_layers": 6, "path_rank": 32, "path_block": 64, "val_fraction": 0.1, "angle_lr_scale": 22.0,
                  "checkpoint_every": 100},
        "eval": {"multipliers": (1, 2, 4, 8, 16, 32, 64), "n_tokens": 4 * 64 * 512, "chunk": 1024,
                 "tokens_per_batch": 65536},
        "sweep": {"analysis_multiplier": 4, "analysis_windows": 4},
    },
}


def preset(name: str) -> dict[str, dict]:
    """The overrides of preset ``name`` ({"train", "eval", "sweep"}); ``ParamError`` naming preset otherwise."""
    if name not in PRESETS:
        raise field_error("preset", f"must be one of {', '.join(PRESETS)}, got {name!r}")
    return PRESETS[name]
