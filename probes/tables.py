"""Did the learned arms learn a token-dependent angle law, or only step noise?  Three tests on trained tables.

A learned arm's step angle in plane b is omega_b - pi tanh(E_{l,h}[x_t])_b, with E zero at init.  Adam moves
every parameter by about its learning rate per step whatever the gradient says, so a table that has moved
(a spread sd_v pi tanh(E[v])_b > 0) need not hold any structure.  Structure shows as:

* shuffle effect: Delta_shuffle = NLL(rows of E permuted over token ids) - NLL(E), over the same validation
  windows (the permutation keeps the angles' marginal law and destroys which token has which angle);
  > 0 when the assignment matters.  Reported with Delta_zero = NLL(E = 0, i.e. RoPE) - NLL(E), and both
  with the paired standard error over windows, se = sd_w(delta_w) / sqrt(W).
* cross-seed agreement: the Pearson correlation, over the ``top`` most frequent validation tokens and the
  planes, of the head-mean deviation pi tanh(E)_b (mean over heads: heads are exchangeable across seeds)
  of two runs with different seeds, per layer; noise gives ~ 0 +- 1 / sqrt(top * planes).
* growth with steps and difference between planes: the spread per plane and its history in train.json.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from accum.probes.data import eval_windows
from accum.probes.model import TOKEN_ARMS, ProbeModel
from accum.simulations.params import check_int, field_error


def check_token_arm(arm: str) -> None:
    """``ParamError`` naming arm unless ``arm`` has angle tables (``TOKEN_ARMS``)."""
    if arm not in TOKEN_ARMS:
        raise field_error("arm", f"must be one of {', '.join(TOKEN_ARMS)} (an arm with angle tables), got {arm!r}")


@torch.no_grad()
def window_nll(model: ProbeModel, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean next-token NLL (nats) per window: x, y (W, T) -> (W,)."""
    logits = model(x).logits
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), y, reduction="none")
    return nll.double().mean(dim=1)


@torch.no_grad()
def with_tables(model: ProbeModel, tables: list[torch.Tensor]) -> None:
    """Set every layer's angle table (in place) to ``tables`` (one (V, H * P) tensor per layer)."""
    for block, table in zip(model.blocks, tables):
        block.attn.angle_table.weight.copy_(table)


def paired(delta: torch.Tensor) -> dict:
    """{"mean", "se", "windows"} of per-window differences: mean and sd(ddof=1) / sqrt(W)."""
    w = delta.numel()
    return {"mean": float(delta.mean()), "se": float(delta.std(unbiased=True)) / math.sqrt(w) if w > 1 else None,
            "windows": w}


@torch.no_grad()
def shuffle_effect(model: ProbeModel, val_ids: torch.Tensor, seq_len: int, windows: int,
                   generator: torch.Generator) -> dict:
    """Delta_shuffle and Delta_zero (module docstring) over ``windows`` validation windows of ``seq_len``:
    {"nll", "shuffled": paired(...), "zero": paired(...), "permutation_seed"}.  The model is restored."""
    check_token_arm(model.cfg.arm)
    check_int("windows", windows, 2, 2**16)
    x, y = eval_windows(val_ids, seq_len, windows * seq_len)
    model.eval()
    original = [b.attn.angle_table.weight.detach().clone() for b in model.blocks]
    base = window_nll(model, x, y)
    perm = torch.randperm(original[0].shape[0], generator=generator)
    try:
        with_tables(model, [t[perm] for t in original])
        shuffled = window_nll(model, x, y)
        with_tables(model, [torch.zeros_like(t) for t in original])
        zero = window_nll(model, x, y)
    finally:
        with_tables(model, original)
    return {"nll": float(base.mean()), "shuffled": paired(shuffled - base), "zero": paired(zero - base)}


def head_mean_deviation(model: ProbeModel, token_ids: torch.Tensor) -> np.ndarray:
    """pi tanh(E_l[v])_b averaged over heads, for the tokens ``token_ids``: (L, len(token_ids), P), float64."""
    check_token_arm(model.cfg.arm)
    cfg = model.cfg
    rows = [torch.pi * torch.tanh(b.attn.angle_table.weight.detach().double()[token_ids]) for b in model.blocks]
    return torch.stack(rows).view(cfg.n_layers, len(token_ids), cfg.n_heads, cfg.n_planes).mean(dim=2).numpy()


def frequent_tokens(val_ids: torch.Tensor, top: int) -> torch.Tensor:
    """The ``top`` most frequent ids of ``val_ids`` (ties by id), most frequent first."""
    check_int("top", top, 2, 2**20)
    counts = torch.bincount(val_ids)
    order = sorted(range(counts.numel()), key=lambda v: (-int(counts[v]), v))
    return torch.tensor(order[:min(top, int((counts > 0).sum()))])


def cross_seed_agreement(deviations: list[np.ndarray]) -> dict:
    """Pearson correlation per layer between every pair of runs' ``head_mean_deviation`` (same tokens):
    {"per_layer_mean": [L], "pairs": [[i, j, [L correlations]]], "noise_sd": 1/sqrt(tokens * planes)}."""
    if len(deviations) < 2:
        raise field_error("runs", f"must be at least 2 runs of different seeds, got {len(deviations)}")
    n_layers, tokens, planes = deviations[0].shape
    pairs = []
    for i in range(len(deviations)):
        for j in range(i + 1, len(deviations)):
            pairs.append([i, j, [float(np.corrcoef(deviations[i][layer].ravel(), deviations[j][layer].ravel())[0, 1])
                                 for layer in range(n_layers)]])
    per_layer = np.mean([p[2] for p in pairs], axis=0).tolist()
    return {"per_layer_mean": per_layer, "pairs": pairs, "noise_sd": 1 / math.sqrt(tokens * planes)}
