"""Perplexity at 1x, 2x, 4x ... L_train with memory linear in the length.

Each length L = m * L_train scores the same first ``n_tokens`` validation targets, cut into
floor(n_tokens / L) consecutive windows (at least one).  A window is run through the model's state-carrying pass in
chunks of ``chunk`` tokens, carrying the per-layer KV state, so the largest tensors are the state
(O(L d)) and one chunk's scores (O(chunk L)): linear in L.  Besides the perplexity over all positions
(exp of the mean NLL) the mean NLL of every L_train-long segment of the window is kept, so one can see
where in a long window a model breaks, and the far attention mass of every layer and head: the mean over
queries i >= L_train of sum_{j <= i - L_train} a_ij (mass on keys farther back than any training context),
computed from the same chunked pass without weights: one minus the softmax mass of the L_train nearest keys, from
log-sum-exps (``probes.attention``), so memory is linear in L and no (chunk x L) matrix is formed.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import torch
from torch.nn import functional as F

from accum.probes.data import eval_windows
from accum.probes.model import ProbeModel
from accum.simulations.params import check_int, field_error

DEFAULT_MULTIPLIERS = (1, 2, 4, 8, 16, 32, 64)
MAX_MULTIPLIER = 2**16


@dataclass(frozen=True)
class EvalConfig:
    """multipliers: lengths in units of L_train (by default doubling from 1x to 64x); n_tokens: validation targets
    per length; chunk: tokens per forward call; tokens_per_batch: windows batched per call = max(1,
    tokens_per_batch // L); seed: seeds the random arm's angle draws."""

    multipliers: tuple[int, ...] = DEFAULT_MULTIPLIERS
    n_tokens: int = 32768
    chunk: int = 128
    tokens_per_batch: int = 8192
    seed: int = 0

    def __post_init__(self) -> None:
        ok = all(isinstance(m, int) and not isinstance(m, bool) and 1 <= m <= MAX_MULTIPLIER for m in self.multipliers)
        if not self.multipliers or not ok or len(set(self.multipliers)) < len(self.multipliers):
            raise field_error("multipliers", f"must be a non-empty list of distinct integers in [1, {MAX_MULTIPLIER}], "
                              f"got {list(self.multipliers)!r}")
        check_int("n_tokens", self.n_tokens, 1, 2**40)
        check_int("chunk", self.chunk, 1, 2**20)
        check_int("tokens_per_batch", self.tokens_per_batch, 1, 2**40)
        check_int("seed", self.seed, 0, 2**63 - 2)  # seed + 1 seeds the analysis (torch takes < 2^64)

    def to_dict(self) -> dict:
        return {**asdict(self), "multipliers": list(self.multipliers)}


@torch.no_grad()
def position_nll(model: ProbeModel, x: torch.Tensor, y: torch.Tensor, chunk: int, noise: torch.Tensor | None,
                 far: int | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Next-token NLL (nats) at every position, (B, L), from the chunked (state-carrying) pass, and, when
    ``far`` is given, the far attention mass per layer and head (n_layers, H): the mean over the queries i >= far
    of sum_{j <= i - far} a_ij (NaN where there is none), from the model's per-query far mass (``far`` pass)."""
    check_int("chunk", chunk, 1)
    out = torch.empty(y.shape, dtype=torch.float64, device=y.device)
    sums = torch.zeros(model.cfg.n_layers, model.cfg.n_heads, dtype=torch.float64)
    states = None
    for a in range(0, x.shape[1], chunk):
        u = None if noise is None else noise[:, a:a + chunk]
        res = model(x[:, a:a + chunk], states, u, far=far)
        states, logits, c = res.states, res.logits, min(chunk, x.shape[1] - a)
        nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y[:, a:a + c].reshape(-1), reduction="none")
        out[:, a:a + c] = nll.view(y.shape[0], c).to(torch.float64)
        if far is not None:
            sums += torch.stack([f.sum(dim=(0, 2)).cpu() for f in res.far_mass])
    if far is None:
        return out, None
    count = x.shape[0] * max(0, x.shape[1] - far)
    return out, (sums / count if count else torch.full_like(sums, float("nan")))


def window_noise(model: ProbeModel, windows: int, length: int, generator: torch.Generator) -> torch.Tensor | None:
    """The model's draws for ``windows`` consecutive windows of ``length`` tokens, (windows, length, ...), drawn one
    window at a time (``ProbeModel.draw_noise(1, length)``): window w gets the w-th draw from ``generator`` however
    the windows are batched, so an evaluation does not depend on ``tokens_per_batch`` (the random arms' U[0, 1)
    stream is the same either way; the family arms seed one path set per call).  None for arms without draws."""
    draws = [model.draw_noise(1, length, generator) for _ in range(windows)]
    return None if draws[0] is None else torch.cat(draws)


def evaluate_length(model: ProbeModel, val_ids: torch.Tensor, seq_len: int, multiplier: int, cfg: EvalConfig,
                    generator: torch.Generator, device: str = "cpu") -> dict:
    """Perplexity and far attention mass of ``model`` on windows of length multiplier * seq_len.

    Returns {"multiplier", "length", "windows", "tokens", "nll", "ppl", "ppl_last_segment",
    "segment_nll" (mean NLL per seq_len-long segment), "window_nll" (mean NLL of each window, in order),
    "far_mass" ([layer][head], None at 1x), "far_mass_mean" (over layers and heads; None at 1x), "seconds" (wall),
    "cpu_seconds" (this process's CPU time)}.  Windows go ``tokens_per_batch // length`` (at least one) to a
    forward call, each drawn its own noise (``window_noise``), in calls of ``chunk`` tokens: neither size changes a
    number (tests/probes/test_probes_evaluate.py).
    """
    length = multiplier * seq_len
    x, y = eval_windows(val_ids, length, cfg.n_tokens)
    per_call = max(1, cfg.tokens_per_batch // length)
    sums = torch.zeros(length, dtype=torch.float64)
    far_sum = torch.zeros(model.cfg.n_layers, model.cfg.n_heads, dtype=torch.float64)
    windows = []
    t0, c0 = time.perf_counter(), time.process_time()
    for b in range(0, x.shape[0], per_call):
        xb, yb = x[b:b + per_call].to(device), y[b:b + per_call].to(device)
        noise = window_noise(model, xb.shape[0], length, generator)
        noise = None if noise is None else noise.to(device)
        nll, far = position_nll(model, xb, yb, cfg.chunk, noise, seq_len)
        sums += nll.sum(0).cpu()
        windows += nll.mean(1).cpu().tolist()
        far_sum += far * xb.shape[0]
    per_pos = sums / x.shape[0]
    segments = per_pos.view(multiplier, seq_len).mean(1)
    nll = per_pos.mean().item()
    far_mass = None if multiplier == 1 else (far_sum / x.shape[0]).tolist()
    return {"multiplier": multiplier, "length": length, "windows": x.shape[0], "tokens": x.numel(),
            "nll": nll, "ppl": math.exp(nll), "ppl_last_segment": math.exp(segments[-1].item()),
            "segment_nll": segments.tolist(), "window_nll": windows, "far_mass": far_mass,
            "far_mass_mean": None if far_mass is None else float((far_sum / x.shape[0]).mean()),
            "seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0}


def last_segment_reference(lengths: list[dict]) -> list[float | None]:
    """Per length m x L, the 1x perplexity of the very tokens its last segments score: window w's last segment at m
    is 1x window w m + m - 1 (every length scores the same first targets), so the reference is
    exp(mean_w window_nll_1x[w m + m - 1]); ppl_last_segment(m) / reference is the cost of the long context on the
    same tokens.  None for every length when 1x was not evaluated (or has no window NLLs)."""
    one = next((r for r in lengths if r["multiplier"] == 1 and "window_nll" in r), None)
    if one is None:
        return [None] * len(lengths)
    ref = one["window_nll"]
    return [math.exp(sum(ref[w * r["multiplier"] + r["multiplier"] - 1] for w in range(r["windows"])) / r["windows"])
            for r in lengths]


def evaluate_lengths(model: ProbeModel, val_ids: torch.Tensor, seq_len: int, cfg: EvalConfig,
                     device: str = "cpu") -> list[dict]:
    """``evaluate_length`` for every multiplier (model put in eval mode; random-arm draws seeded by cfg.seed)."""
    check_int("seq_len", seq_len, 1)
    model.eval()
    gen = torch.Generator().manual_seed(cfg.seed)
    return [evaluate_length(model, val_ids, seq_len, m, cfg, gen, device) for m in cfg.multipliers]
