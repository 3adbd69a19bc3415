"""``probes.evaluate``: the perplexity and far attention mass of a length do not depend on how its windows are
batched (``tokens_per_batch``) or cut into forward calls (``chunk``), for every arm, and equal a plain reference:
one unchunked pass per window with explicit attention weights, aggregated in the test."""

import math
import time

import pytest
import torch
from torch.nn import functional as F

from accum.probes import analysis as A
from accum.probes import bridge
from accum.probes import evaluate as E
from accum.probes.data import eval_windows
from accum.probes.evaluate import DEFAULT_MULTIPLIERS, EvalConfig, evaluate_length, position_nll
from accum.probes.model import ARMS
from accum.probes.train import TrainConfig, build_model

from test_probes_model import arm_options
from test_probes_train import DATA, TINY

torch.set_num_threads(1)

SEQ_LEN, MULTIPLIER, N_TOKENS = 16, 4, 5 * 64   # five windows of 64 tokens: batches of 2 leave an odd one out
#: (chunk, tokens_per_batch): whole windows in one batch; one window per call in 5-token chunks; 2 windows per
#: call in chunks that do not divide the window
LAYOUTS = [(64, 4096), (5, 16), (24, 128)]
KEYS = ("nll", "ppl", "ppl_last_segment", "segment_nll", "window_nll", "far_mass", "far_mass_mean", "windows", "tokens")


def tiny_probe(arm: str):
    """The tiny preset's shape in float64, PaTH's beta and the learned tables moved off their init."""
    model = build_model(TrainConfig(arm=arm, **TINY, **arm_options(arm)), DATA.vocab_size).double().eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "angle_gain" in name or "angle_table" in name or "beta" in name:
                p.add_(0.5 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    return model


def close(a, b) -> bool:
    """Equal to fp64 roundoff, numbers or nested lists of them."""
    return torch.allclose(torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64), rtol=1e-10,
                          atol=1e-12)


def evaluate(model, chunk: int, tokens_per_batch: int) -> dict:
    cfg = EvalConfig(multipliers=(MULTIPLIER,), n_tokens=N_TOKENS, chunk=chunk, tokens_per_batch=tokens_per_batch)
    return evaluate_length(model, DATA.val, SEQ_LEN, MULTIPLIER, cfg, torch.Generator().manual_seed(9))


def plain_reference(model) -> dict:
    """Each window alone, in one forward pass with explicit weights (``need_weights``), its noise the generator's
    next draw for one window; NLL and far mass (``analysis.far_mass``: queries i >= L_train, keys j <= i - L_train)
    averaged over windows, layers and heads here."""
    length = MULTIPLIER * SEQ_LEN
    x, y = eval_windows(DATA.val, length, N_TOKENS)
    gen = torch.Generator().manual_seed(9)
    nll, far = [], []
    with torch.no_grad():
        for xw, yw in zip(x, y):
            noise = model.draw_noise(1, length, gen)
            out = model(xw[None], None, noise, need_weights=True)
            nll.append(F.cross_entropy(out.logits[0].float(), yw, reduction="none").double())
            far.append(torch.stack([A.far_mass(w, SEQ_LEN) for w in out.weights]))
    per_pos = torch.stack(nll).mean(0)
    far_mass = torch.stack(far).mean(0)
    return {"nll": per_pos.mean().item(), "window_nll": [v.mean().item() for v in nll],
            "segment_nll": per_pos.view(MULTIPLIER, SEQ_LEN).mean(1).tolist(),
            "far_mass": far_mass.tolist(), "far_mass_mean": far_mass.mean().item()}


@pytest.mark.parametrize("arm", ARMS)
def test_far_mass_and_nll_do_not_depend_on_batching_or_chunking(arm):
    model = tiny_probe(arm)
    start, cpu_start = time.perf_counter(), time.process_time()
    runs = [evaluate(model, chunk, per_batch) for chunk, per_batch in LAYOUTS]
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    first = runs[0]
    assert all(0 < r["seconds"] and 0 <= r["cpu_seconds"] for r in runs) and sum(r["seconds"] for r in runs) <= elapsed
    assert sum(r["cpu_seconds"] for r in runs) <= cpu
    assert first["windows"] == 5 and first["tokens"] == 5 * 64
    for other in runs[1:]:
        for key in KEYS:
            assert close(other[key], first[key]), key
    ref = plain_reference(model)
    for key, value in ref.items():
        assert close(first[key], value), key
    assert first["ppl"] == pytest.approx(math.exp(ref["nll"]), rel=1e-12)
    assert first["ppl_last_segment"] == pytest.approx(math.exp(ref["segment_nll"][-1]), rel=1e-12)


def test_a_forward_call_takes_tokens_per_batch_over_the_length_windows_and_at_least_one(monkeypatch):
    """The memory bound of an evaluation: max(1, tokens_per_batch // length) windows a call, the last call the rest
    (five windows of 64 tokens: 4096 -> one call of 5; 128 -> 2, 2, 1; 16, under one window -> 1 each)."""
    calls = []

    def recorded(model, x, *args):
        calls.append(x.shape[0])
        return position_nll(model, x, *args)

    monkeypatch.setattr(E, "position_nll", recorded)
    model = tiny_probe("nope")
    for tokens_per_batch, batches in ((4096, [5]), (128, [2, 2, 1]), (16, [1] * 5)):
        calls.clear()
        evaluate(model, 24, tokens_per_batch)
        assert calls == batches, tokens_per_batch


def test_chunk_range_is_1_to_2_to_the_20():
    """chunk (tokens a forward call) in [1, 2^20]: both ends accepted, one past either refused naming it."""
    assert EvalConfig(chunk=1).chunk == 1 and EvalConfig(chunk=2**20).chunk == 2**20
    for bad in (0, 2**20 + 1):
        with pytest.raises(ValueError, match="chunk"):
            EvalConfig(chunk=bad)


def test_tokens_per_batch_range_ends_at_2_to_the_40():
    """tokens_per_batch in [1, 2^40]: both ends accepted, one past either refused naming it."""
    assert EvalConfig(tokens_per_batch=2**40).tokens_per_batch == 2**40 and EvalConfig(tokens_per_batch=1)
    for bad in (0, 2**40 + 1):
        with pytest.raises(ValueError, match="tokens_per_batch"):
            EvalConfig(tokens_per_batch=bad)


def test_the_default_lengths_double_from_1x_to_64x_and_the_bridge_predicts_the_same_ones():
    """EvalConfig's documented default: 1x, 2x, 4x, ..., 64x L_train.  The bridge, for a run without eval.json,
    predicts the same lengths from 2x (1x is the training length, which it does not judge)."""
    assert EvalConfig().multipliers == DEFAULT_MULTIPLIERS == tuple(2**k for k in range(7))
    assert bridge.eval_multipliers(None) == [m for m in DEFAULT_MULTIPLIERS if m >= 2]
