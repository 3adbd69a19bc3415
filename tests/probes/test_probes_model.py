"""Parity of the probe model: cached decoding, chunking, causality, and the transforms' definitions."""

import math

import numpy as np
import pytest
import torch

from accum.probes import transforms as tf
from accum.probes.model import (ARMS, INDEPENDENT_VALUE_ARMS, RANDOM_ARMS, TOKEN_ARMS, VALUE_ROTATING_ARMS, Attention,
                                ModelConfig, ProbeModel, empty_state)
from accum.probes.model import family_angles, family_of
from accum.simulations import reference
from accum.simulations.steps import HouseholderSteps

torch.set_num_threads(1)

VOCAB = 13
# (d_model, n_heads, path_rank, path_block): powers of two, and head size 12 / rank 3 / block 5, which do not
# divide the test lengths (17, 19, 23) or each other.
SHAPES = [(32, 2, 4, 4), (36, 3, 3, 5)]


#: every arm, the learned arms also with the key-side token, the family arms with a von Mises law (nonzero mean
#: angle) and with a user family (module:Class)
FAMILY = {"family": "so2-accumulated", "family_param": ("law=vonmises", "mu=0.4", "kappa=3")}
USER_FAMILY = {"family": "accum.simulations.examples:TwoPointAngles", "family_param": ("a=0.7",)}
ARM_CASES = [(arm, FAMILY if arm == "family" else USER_FAMILY if arm == "family_qkv" else {}) for arm in ARMS] + [
    ("learned", {"learned_token": "key"}), ("learned_qkv", {"learned_token": "key"})]
ARM_IDS = [arm + "-" + "-".join(str(v) for v in extra.values()) if extra else arm for arm, extra in ARM_CASES]


def arm_options(arm: str) -> dict:
    """The extra ``ModelConfig`` fields an arm needs (the family arms' family)."""
    return FAMILY if arm == "family" else USER_FAMILY if arm == "family_qkv" else {}


def layer_noise(attn: Attention, batch: int, length: int, gen: torch.Generator) -> torch.Tensor | None:
    """One layer's draws (B, T, walks, H, P) as ``ProbeModel.draw_noise`` makes them."""
    shape = attn.noise_shape(batch, length)
    if shape is None:
        return None
    if attn.cfg.family:
        return family_angles(family_of(attn.cfg), (batch, length, 1, *shape[2:]), gen)[:, :, 0]
    return torch.rand(shape, generator=gen, dtype=torch.float64)


def tiny_model(arm: str, dtype=torch.float64, shape: tuple[int, int, int, int] = SHAPES[0], **extra) -> ProbeModel:
    """2 layers of the given shape; angle gains and PaTH beta perturbed away from their init."""
    d_model, n_heads, path_rank, path_block = shape
    cfg = ModelConfig(arm=arm, vocab_size=VOCAB, d_model=d_model, n_heads=n_heads, n_layers=2, path_rank=path_rank,
                      path_block=path_block, **extra)
    gen = torch.Generator().manual_seed(7)
    model = ProbeModel(cfg, gen).to(dtype)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "angle_gain" in name or "angle_table" in name or "beta" in name:
                p.add_(0.5 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    return model.eval()


def tokens(batch: int, length: int, seed: int = 3) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def model_and_inputs(arm: str, shape, batch: int, length: int, seed: int, dtype=torch.float64, **extra):
    """``tiny_model`` with ``batch`` token sequences of ``length`` and the model's noise drawn at ``seed``."""
    model = tiny_model(arm, dtype, shape=shape, **extra)
    return model, tokens(batch, length), model.draw_noise(batch, length, torch.Generator().manual_seed(seed))


def logits_by_chunks(model, idx, chunk, uniforms):
    """Logits of idx fed ``chunk`` tokens at a time, each call carrying the previous calls' KV state."""
    states, parts = None, []
    for a in range(0, idx.shape[1], chunk):
        out = model(idx[:, a:a + chunk], states, None if uniforms is None else uniforms[:, a:a + chunk])
        states = out.states
        parts.append(out.logits)
    return torch.cat(parts, dim=1)


@pytest.mark.parametrize("dtype, length, atol", [(torch.float64, 19, 1e-10), (torch.float32, 17, 2e-5)])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("arm, extra", ARM_CASES, ids=ARM_IDS)
def test_cached_one_token_decoding_equals_parallel_pass(arm, extra, shape, dtype, length, atol):
    model, idx, u = model_and_inputs(arm, shape, 2, length, seed=0, dtype=dtype, **extra)
    with torch.no_grad():
        assert torch.allclose(logits_by_chunks(model, idx, 1, u), model(idx, None, u).logits, rtol=0, atol=atol)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("arm, extra", ARM_CASES, ids=ARM_IDS)
def test_chunked_pass_equals_full_attention(arm, extra, shape):
    model, idx, u = model_and_inputs(arm, shape, 3, 23, seed=1, **extra)
    with torch.no_grad():
        full = model(idx, None, u).logits
        for chunk in (5, 8):
            assert torch.allclose(logits_by_chunks(model, idx, chunk, u), full, rtol=0, atol=1e-10)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("arm, extra", ARM_CASES, ids=ARM_IDS)
def test_no_future_token_leakage(arm, extra, shape):
    model, idx, u = model_and_inputs(arm, shape, 2, 16, seed=2, **extra)
    changed = idx.clone()
    changed[:, 9] = (changed[:, 9] + 1) % VOCAB
    with torch.no_grad():
        a, b = model(idx, None, u).logits, model(changed, None, u).logits
    assert torch.equal(a[:, :9], b[:, :9])
    assert not torch.allclose(a[:, 9:], b[:, 9:])


def dense_householder(w, beta):
    """A_t = I - beta_t w_t w_t^T, (T, d, d) float64."""
    eye = torch.eye(w.shape[-1], dtype=torch.float64)
    return eye - beta[:, None, None] * w[:, :, None] * w[:, None, :]


def loop_scores(mats, q, k):
    """s_ij = q_i^T A_i ... A_{j+1} k_j by explicit products (j <= i), NaN above the diagonal."""
    t = q.shape[0]
    out = torch.full((t, t), float("nan"), dtype=torch.float64)
    for i in range(t):
        for j in range(i + 1):
            prod = torch.eye(q.shape[1], dtype=torch.float64)
            for s in range(j + 1, i + 1):
                prod = mats[s] @ prod
            out[i, j] = q[i] @ prod @ k[j]
    return out


def random_path_inputs(t, d, seed):
    g = torch.Generator().manual_seed(seed)
    q, k, w = (torch.randn(t, d, generator=g, dtype=torch.float64) for _ in range(3))
    w = w / w.norm(dim=-1, keepdim=True)
    beta = 2 * torch.sigmoid(2 * torch.randn(t, generator=g, dtype=torch.float64))
    return q, k, w, beta


def blocked_path_scores(q, k, w, beta, block):
    """Scores from chaining ``tf.path_block`` over blocks, as the model does; NaN above the diagonal."""
    t, d = q.shape
    out = torch.full((t, t), float("nan"), dtype=torch.float64)
    keys = torch.zeros(0, d, dtype=torch.float64)
    for a in range(0, t, block):
        b = min(a + block, t)
        scores, keys = tf.path_block(q[a:b], k[a:b], w[a:b], beta[a:b], keys)
        for r in range(b - a):
            out[a + r, : a + r + 1] = scores[r, : a + r + 1]
    return out, keys


@pytest.mark.parametrize("t,d,block", [(13, 6, 13), (13, 6, 4), (11, 5 * 2, 1), (9, 3, 5)])
def test_path_scores_match_fp64_loop(t, d, block):
    q, k, w, beta = random_path_inputs(t, d, seed=t * d + block)
    ref = loop_scores(dense_householder(w, beta), q, k)
    got, keys = blocked_path_scores(q, k, w, beta, block)
    mask = ~torch.isnan(ref)
    assert torch.equal(mask, ~torch.isnan(got))
    assert torch.allclose(got[mask], ref[mask], rtol=0, atol=1e-11)
    mats = dense_householder(w, beta)
    for j in range(t):
        carried = k[j]
        for s in range(j + 1, t):
            carried = mats[s] @ carried
        assert torch.allclose(keys[j], carried, rtol=0, atol=1e-11)


def transported(mats, vec, start, stop):
    """A_{stop-1} ... A_start vec by explicit products."""
    for s in range(start, stop):
        vec = mats[s] @ vec
    return vec


@pytest.mark.parametrize("t,d,block,a", [(13, 6, 4, 4), (9, 3, 5, 7), (7, 5, 7, 1), (6, 4, 1, 3)])
def test_path_chunk_matches_fp64_products(t, d, block, a):
    """``tf.path_chunk`` on tokens a .. a+t-1 after a earlier tokens: the chunk's scores, its carried keys, and
    q_hat . k~_j and k~_j^T V for the earlier keys, against explicit products of the dense steps."""
    q, k, w, beta = random_path_inputs(a + t, d, seed=100 * t + 10 * d + block + a)
    mats = dense_householder(w, beta)
    ref = loop_scores(mats, q, k)
    end = a + t
    prior = torch.stack([transported(mats, k[j], j + 1, a) for j in range(a)])  # k~_j at token a - 1
    scores, carried, q_hat, carry = tf.path_chunk(q[a:], k[a:], w[a:], beta[a:], block, True)
    lower = torch.ones(t, t, dtype=torch.bool).tril()
    assert torch.allclose(scores[lower], ref[a:, a:][lower], rtol=0, atol=1e-11)
    assert torch.allclose(q_hat @ prior.T, ref[a:, :a], rtol=0, atol=1e-11)
    want = torch.stack([transported(mats, k[j], j + 1, end) for j in range(end)])
    assert torch.allclose(prior @ carry, want[:a], rtol=0, atol=1e-11)
    assert torch.allclose(carried, want[a:], rtol=0, atol=1e-11)
    plain = tf.path_chunk(q[a:], k[a:], w[a:], beta[a:], block, False)
    assert plain[2] is None and plain[3] is None
    assert torch.allclose(plain[0][lower], scores[lower], rtol=0, atol=1e-11)
    assert torch.allclose(plain[1], carried, rtol=0, atol=1e-11)


def test_path_scores_match_simulations_reference():
    q, k, w, beta = random_path_inputs(7, 5, seed=11)
    mats = HouseholderSteps(w[None].numpy(), beta[None].numpy()).dense()
    ref = torch.from_numpy(reference.scores(mats, q[None].numpy(), k[None].numpy())[0])
    got, _ = blocked_path_scores(q, k, w, beta, 3)
    mask = ~torch.isnan(ref)
    assert torch.allclose(got[mask], ref[mask], rtol=0, atol=1e-11)


def test_path_block_runs_the_products_in_score_order_by_hand():
    """d = 2, beta = 2 (reflections), w_1 = e_1, w_2 at angle pi/8: A_2 A_1 = R(pi/4), so with q = e_2, k = e_1 the
    PaTH block gives s_20 = sin(pi/4) (the other order would give -sin(pi/4)), s_21 = e_2^T A_2 e_1 = -sin(pi/4) and
    s_10 = e_2^T diag(-1, 1) e_1 = 0 (hand-derived; tests/simulations/test_families.py holds the engine to the same)."""
    a = math.pi / 8
    w = torch.tensor([[1.0, 0.0], [1.0, 0.0], [math.cos(a), math.sin(a)]], dtype=torch.float64)
    q = torch.tensor([[0.0, 1.0]] * 3, dtype=torch.float64)
    k = torch.tensor([[1.0, 0.0]] * 3, dtype=torch.float64)
    scores, _ = tf.path_block(q, k, w, torch.full((3,), 2.0, dtype=torch.float64), torch.zeros(0, 2, dtype=torch.float64))
    assert scores[2, 0].item() == pytest.approx(math.sqrt(0.5), abs=1e-14)
    assert scores[2, 1].item() == pytest.approx(-math.sqrt(0.5), abs=1e-14)
    assert scores[1, 0].item() == pytest.approx(0.0, abs=1e-14)


def dense_rotation(theta):
    """Block-diagonal interleaved SO(2) matrix for angles (P,): (2P, 2P)."""
    p = theta.shape[0]
    out = torch.zeros(2 * p, 2 * p, dtype=torch.float64)
    for b in range(p):
        c, s = torch.cos(theta[b]), torch.sin(theta[b])
        out[2 * b: 2 * b + 2, 2 * b: 2 * b + 2] = torch.stack((torch.stack((c, -s)), torch.stack((s, c))))
    return out


def test_rotation_scores_follow_the_score_convention():
    g = torch.Generator().manual_seed(5)
    t, d = 9, 6
    theta = torch.randn(1, 1, t, d // 2, generator=g, dtype=torch.float64)
    q, k = (torch.randn(t, d, generator=g, dtype=torch.float64) for _ in range(2))
    big = tf.accumulate_angles(theta)[0, 0]
    fast = tf.rotate_planes(q, -big) @ tf.rotate_planes(k, -big).T
    ref = loop_scores(torch.stack([dense_rotation(th) for th in theta[0, 0]]), q, k)
    mask = ~torch.isnan(ref)
    assert torch.allclose(fast[mask], ref[mask], rtol=0, atol=1e-12)


def test_rotate_planes_is_interleaved_complex_multiplication():
    g = torch.Generator().manual_seed(6)
    x = torch.randn(4, 8, generator=g, dtype=torch.float64)
    ang = torch.randn(4, 4, generator=g, dtype=torch.float64)
    z = torch.complex(x[:, 0::2], x[:, 1::2]) * torch.exp(1j * ang)
    y = tf.rotate_planes(x, ang)
    assert torch.allclose(y[:, 0::2], z.real, atol=1e-14) and torch.allclose(y[:, 1::2], z.imag, atol=1e-14)


@pytest.mark.parametrize("arm", VALUE_ROTATING_ARMS)
def test_value_rotation_transports_values_by_the_step_products(arm):
    """*_qkv arms: output_i = sum_j a_ij A_i ... A_{j+1} v_j (before the output projection), per head."""
    cfg = ModelConfig(arm=arm, vocab_size=VOCAB, d_model=8, n_heads=2, n_layers=1, **arm_options(arm))
    attn = Attention(cfg).double()
    g = torch.Generator().manual_seed(9)
    with torch.no_grad():
        for p in attn.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype))
        attn.out.weight.copy_(torch.eye(8, dtype=torch.float64))
    x = torch.randn(1, 7, 8, generator=g, dtype=torch.float64)
    idx = tokens(1, 7)
    u = layer_noise(attn, 1, 7, g)
    with torch.no_grad():
        res = attn(x, idx, empty_state(1, cfg, x), u, need_weights=True)
        _, _, v = attn.heads(x)
    value_steps = res.step_angles
    if arm in INDEPENDENT_VALUE_ARMS:  # the values' own walk: U(-omega, omega) from the second walk's draws
        value_steps = tf.uniform_step_angles(u[:, :, 1], -attn.omega, attn.omega).transpose(1, 2)
        assert not torch.allclose(value_steps, res.step_angles)
    for h in range(2):
        mats = torch.stack([dense_rotation(th) for th in value_steps[0, h]])
        for i in range(7):
            ref = torch.zeros(4, dtype=torch.float64)
            for j in range(i + 1):
                prod = torch.eye(4, dtype=torch.float64)
                for s in range(j + 1, i + 1):
                    prod = mats[s] @ prod
                ref += res.weights[0, h, i, j] * (prod @ v[0, h, j])
            assert torch.allclose(res.y[0, i, 4 * h: 4 * h + 4], ref, atol=1e-12)


@pytest.mark.parametrize("arm", ("learned", "gain"))
def test_learned_arms_equal_rope_exactly_at_init(arm):
    """Zero-initialised tables / gains give accum's RoPE step +omega_b exactly: equal logits (bitwise in fp64
    up to the identical computation order) and equal step angles."""
    idx = tokens(2, 12)
    rope = ProbeModel(ModelConfig(arm="rope", vocab_size=VOCAB, d_model=32, n_heads=2, n_layers=2),
                      torch.Generator().manual_seed(1)).double()
    learned = ProbeModel(ModelConfig(arm=arm, vocab_size=VOCAB, d_model=32, n_heads=2, n_layers=2),
                         torch.Generator().manual_seed(1)).double()
    with torch.no_grad():
        a, b = rope(idx), learned(idx)
    assert torch.allclose(a.logits, b.logits, rtol=0, atol=1e-12)
    for ra, la in zip(a.step_angles, b.step_angles):
        assert torch.equal(ra.double(), la.double())


def test_learned_qkv_at_init_equals_random_drift_qkv_at_the_midpoint():
    """learned_qkv at init steps by omega_b; random_drift_qkv with every u = 1/2 steps by 0 + 2 omega_b / 2 =
    omega_b: with the same other weights (same init stream) the two models give the same logits."""
    idx = tokens(2, 11)
    cfg = dict(vocab_size=VOCAB, d_model=32, n_heads=2, n_layers=2)
    learned = ProbeModel(ModelConfig(arm="learned_qkv", **cfg), torch.Generator().manual_seed(1)).double()
    drift = ProbeModel(ModelConfig(arm="random_drift_qkv", **cfg), torch.Generator().manual_seed(1)).double()
    half = torch.full(drift.draw_noise(2, 11, torch.Generator()).shape, 0.5, dtype=torch.float64)
    with torch.no_grad():
        assert torch.allclose(learned(idx).logits, drift(idx, None, half).logits, rtol=0, atol=1e-12)
        assert not torch.allclose(learned(idx).logits, drift(idx, None, 0.9 * half).logits, rtol=0, atol=1e-6)


def test_token_angles_depend_only_on_the_token_and_reach_any_angle():
    """learned: theta_t = omega - pi tanh(E[x_t]) per layer and head: equal tokens give equal angles, the map
    covers (omega - pi, omega + pi)."""
    cfg = ModelConfig(arm="learned", vocab_size=VOCAB, d_model=8, n_heads=2, n_layers=1)
    attn = Attention(cfg).double()
    with torch.no_grad():
        attn.angle_table.weight.copy_(torch.linspace(-20, 20, VOCAB * 4, dtype=torch.float64).view(VOCAB, 4))
    idx = torch.tensor([[0, 3, 0, VOCAB - 1]])
    x = torch.zeros(1, 4, 8, dtype=torch.float64)
    theta = attn(x, idx, empty_state(1, cfg, x)).step_angles[0]  # (H, T, P)
    assert torch.equal(theta[:, 0], theta[:, 2]) and not torch.equal(theta[:, 0], theta[:, 1])
    omega = tf.rope_omega(4, 10000.0, torch.float64)
    table = attn.angle_table.weight.view(VOCAB, 2, 2)
    assert torch.allclose(theta[:, 1], omega - torch.pi * torch.tanh(table[3]), rtol=0, atol=1e-15)
    assert (theta[:, 3] - omega).max() < -torch.pi + 1e-6 and (theta[:, 0] - omega).min() > torch.pi - 1e-6


@pytest.mark.parametrize("arm,low,high", [("random", -1.0, 1.0), ("random_drift", 0.0, 2.0)])
def test_random_angles_are_uniform_on_their_interval_per_head(arm, low, high):
    """random: U(-omega_b, omega_b); random_drift: U(0, 2 omega_b); independent draws per head.  Over 40 000
    draws per head and plane the min / max sit within 1e-3 omega of the ends (miss probability
    (1 - 5e-4)^40000 ~ exp(-20) per end) and each of the 4 means within 5 standard errors of the centre
    (se = width / sqrt(12 n); two-sided normal tail 5.7e-7 each)."""
    cfg = ModelConfig(arm=arm, vocab_size=VOCAB, d_model=8, n_heads=2, n_layers=1)
    attn = Attention(cfg).double()
    n = 20000
    u = torch.rand(attn.noise_shape(2, n), generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    x = torch.zeros(2, n, 8, dtype=torch.float64)
    idx = torch.zeros(2, n, dtype=torch.long)
    with torch.no_grad():
        theta = attn._step_angles(x, idx, empty_state(2, cfg, x), u)  # (B, H, T, P)
    ratio = theta / attn.omega
    assert ratio.min() >= low and ratio.max() < high
    assert ratio.min() < low + 1e-3 and ratio.max() > high - 1e-3
    mean = ratio.mean(dim=(0, 2))
    se = (high - low) / math.sqrt(12 * 2 * n)
    assert (mean - (low + high) / 2).abs().max() < 5 * se
    assert not torch.equal(theta[:, 0], theta[:, 1])


def test_alibi_bias_is_linear_in_distance():
    cfg = ModelConfig(arm="alibi", vocab_size=VOCAB, d_model=8, n_heads=2, n_layers=1)
    attn = Attention(cfg).double()
    with torch.no_grad():
        attn.qkv.weight.zero_()
    x = torch.randn(1, 6, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    w = attn(x, tokens(1, 6), empty_state(1, cfg, x), None, need_weights=True).weights[0]
    for h, m in enumerate(tf.alibi_slopes(2).tolist()):
        ratio = w[h, 5, 1:6] / w[h, 5, 0:5]
        assert torch.allclose(ratio, torch.full_like(ratio, torch.exp(torch.tensor(m, dtype=torch.float64)).item()))


def test_alibi_slopes_follow_the_papers_rule_for_every_head_count():
    """Powers of two: 2^(-8 (h+1) / H).  Other H: the slopes of the power of two below, then every other slope of
    twice that (the released ALiBi code's rule, which BLOOM and others follow), written out by hand here."""
    for h in (1, 2, 4, 8, 16):
        want = [-8.0 * (i + 1) / h for i in range(h)]
        assert torch.equal(tf.alibi_slopes(h), 2.0 ** torch.tensor(want, dtype=torch.float64))
    exponents = {3: [-4, -8, -2], 6: [-2, -4, -6, -8, -1, -3],
                 12: [-1, -2, -3, -4, -5, -6, -7, -8, -0.5, -1.5, -2.5, -3.5]}
    for h, want in exponents.items():
        torch.testing.assert_close(tf.alibi_slopes(h), 2.0 ** torch.tensor(want, dtype=torch.float64), rtol=1e-15, atol=0)


def library_rope(x: torch.Tensor, base: float, sign: float = 1.0) -> torch.Tensor:
    """The common libraries' RoPE, typed here: x (..., T, d), interleaved pairs (x_2b, x_2b+1) read as a complex
    number and multiplied by exp(i m theta_b) at position m, inv_freq theta_b = 1 / base^(2b / d); ``sign`` = -1
    turns the other way."""
    t, d = x.shape[-2:]
    inv_freq = 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = sign * torch.arange(t, dtype=torch.float64)[:, None] * inv_freq
    z = torch.complex(x[..., 0::2], x[..., 1::2]) * torch.exp(1j * angle)
    return torch.stack((z.real, z.imag), dim=-1).flatten(-2)


def causal_log_softmax(scores: torch.Tensor) -> torch.Tensor:
    t = scores.shape[-1]
    return torch.log_softmax(scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf")), dim=-1)


def test_rope_arm_attention_is_the_libraries_rope_with_omega_negated():
    """The rope arm's attention weights against RoPE as the libraries write it (``library_rope``, no accum helper):
    equal to it with omega -> -omega (accum's s_ij = q^T R((i - j) omega) k, docs/theory.md), and not to it as is.
    Three planes per head (base 100: omega = 1, 100^(-1/3), 100^(-2/3)), asymmetric q and k."""
    cfg = ModelConfig(arm="rope", vocab_size=VOCAB, d_model=12, n_heads=2, n_layers=1, rope_base=100.0)
    attn = Attention(cfg).double()
    x = torch.randn(1, 7, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    weights = attn(x, tokens(1, 7), empty_state(1, cfg, x), None, need_weights=True).weights[0]
    q, k, _ = (a[0] for a in attn.heads(x))
    lower = torch.ones(7, 7, dtype=torch.bool).tril()
    for sign, same in ((-1.0, True), (1.0, False)):
        scores = library_rope(q, 100.0, sign) @ library_rope(k, 100.0, sign).transpose(-1, -2) / math.sqrt(6)
        want = causal_log_softmax(scores)
        assert torch.allclose(weights.log()[:, lower], want[:, lower], rtol=0, atol=1e-12) == same


def test_alibi_arm_attention_uses_the_papers_slopes_for_eight_heads():
    """Press et al. 2022, sec. 3: "For a model with 8 heads, m is 1/2^1, 1/2^2, ..., 1/2^8", the score of key j at
    query i biased by -m (i - j): the alibi arm's weights against softmax(q k^T / sqrt(d) - m_h (i - j)) with those
    numbers typed here."""
    cfg = ModelConfig(arm="alibi", vocab_size=VOCAB, d_model=16, n_heads=8, n_layers=1)
    attn = Attention(cfg).double()
    x = torch.randn(1, 6, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    weights = attn(x, tokens(1, 6), empty_state(1, cfg, x), None, need_weights=True).weights[0]
    q, k, _ = (a[0] for a in attn.heads(x))
    slopes = torch.tensor([1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 128, 1 / 256], dtype=torch.float64)
    distance = (torch.arange(6)[:, None] - torch.arange(6)[None, :]).to(torch.float64)
    want = causal_log_softmax(q @ k.transpose(-1, -2) / math.sqrt(2) - slopes[:, None, None] * distance)
    lower = torch.ones(6, 6, dtype=torch.bool).tril()
    assert torch.allclose(weights.log()[:, lower], want[:, lower], rtol=0, atol=1e-12)


@pytest.mark.parametrize("kwargs,name", [({"arm": "xpos"}, "arm"), ({"d_model": 30, "n_heads": 4}, "d_model"),
                                         ({"n_layers": 0}, "n_layers"), ({"rope_base": 1.0}, "rope_base")])
def test_bad_model_config_names_the_parameter(kwargs, name):
    with pytest.raises(ValueError, match=name):
        ModelConfig(**kwargs)


@pytest.mark.parametrize("arm", ["random", "random_qkv_indep", "family"])
def test_noise_arms_need_their_draws(arm):
    model = tiny_model(arm, **arm_options(arm))
    with pytest.raises(ValueError, match="needs noise of shape"):
        model(tokens(1, 4))


@pytest.mark.parametrize("dtype, atol", [(torch.float64, 1e-12), (torch.float32, 2e-6)])
@pytest.mark.parametrize("arm, extra", ARM_CASES, ids=ARM_IDS)
def test_far_mass_pass_equals_the_weights(arm, extra, dtype, atol):
    """The evaluation pass (fused kernel over the cache, far mass from the near log-sum-exp) against the explicit
    softmax of the whole window: logits, and per query sum_{j <= i - far} a_ij, on odd chunk sizes and a far
    lag (6) that divides neither the length (29) nor the chunks; float32 against the float64 reference."""
    model, idx, u = model_and_inputs(arm, SHAPES[1], 2, 29, seed=5, **extra)
    far = 6
    with torch.no_grad():
        ref = model(idx, None, u, need_weights=True)
        model32 = model.to(dtype)
        for chunk in (5, 29):
            states, logits, fars = None, [], []
            for a in range(0, 29, chunk):
                out = model32(idx[:, a:a + chunk], states, None if u is None else u[:, a:a + chunk], far=far)
                states = out.states
                logits.append(out.logits)
                fars.append(torch.stack(out.far_mass))
            fars = torch.cat(fars, dim=-1)  # (layers, B, H, T)
            assert torch.allclose(torch.cat(logits, 1).double(), ref.logits, rtol=0, atol=50 * atol)
            for layer, w in enumerate(ref.weights):
                i = torch.arange(29)[:, None]
                want = (w * (torch.arange(29)[None, :] <= i - far)).sum(-1)
                assert torch.allclose(fars[layer], want, rtol=0, atol=atol)
                assert torch.equal(fars[layer][..., :far], torch.zeros_like(fars[layer][..., :far]))
        model.double()


def test_random_arm_draws_differ_between_passes():
    model = tiny_model("random")
    g = torch.Generator().manual_seed(0)
    idx = tokens(1, 12)
    with torch.no_grad():
        a, b = (model(idx, None, model.draw_noise(1, 12, g)).logits for _ in range(2))
    assert not torch.allclose(a, b)
    assert tiny_model("rope").draw_noise(1, 3, g) is None


def test_key_side_learned_step_comes_from_the_tokens_before_the_query():
    """learned_token = key: Theta_i - Theta_j = sum_{s=j}^{i-1} theta(x_s) (the author's convention); query side:
    sum_{s=j+1}^{i} theta(x_s).  Checked on the step angles of one pass and across a chunk boundary."""
    idx = tokens(1, 9)
    cfg = dict(arm="learned", vocab_size=VOCAB, d_model=8, n_heads=2, n_layers=1)
    models = {side: ProbeModel(ModelConfig(**cfg, learned_token=side), torch.Generator().manual_seed(2)).double()
              for side in ("query", "key")}
    with torch.no_grad():
        table = models["query"].blocks[0].attn.angle_table.weight
        table.copy_(torch.randn(table.shape, generator=torch.Generator().manual_seed(3), dtype=table.dtype))
        models["key"].load_state_dict(models["query"].state_dict())
        per_token = tf.token_step_angles(table.view(VOCAB, 2, 2), models["query"].blocks[0].attn.omega)  # (V, H, P)
        steps = {side: m(idx).step_angles[0][0] for side, m in models.items()}  # (H, T, P)
        first = models["key"](idx[:, :4])
        rest = models["key"](idx[:, 4:], first.states).step_angles[0][0]
    theta = per_token[idx[0]].transpose(0, 1)  # (H, T, P): theta(x_t)
    assert torch.allclose(steps["query"], theta, rtol=0, atol=1e-14)
    assert torch.equal(steps["key"][:, 0], torch.zeros_like(steps["key"][:, 0]))
    assert torch.allclose(steps["key"][:, 1:], theta[:, :-1], rtol=0, atol=1e-14)
    assert torch.allclose(rest, theta[:, 3:-1], rtol=0, atol=1e-14)


def test_family_arm_draws_are_the_familys_own_samples():
    """family arms: the draws of (batch row, layer, walk, head) are independent paths of the family's ``sample``
    from one numpy Generator seeded by the torch Generator (so a restored Generator replays them)."""
    model = tiny_model("family", **FAMILY)
    g = torch.Generator().manual_seed(11)
    state = g.get_state()
    noise = model.draw_noise(3, 10, g)  # (B, T, L, W, H, P)
    g.set_state(state)
    assert torch.equal(noise, model.draw_noise(3, 10, g))
    g.set_state(state)
    seed = int(torch.randint(0, 2**62, (1,), generator=g).item())
    family = family_of(model.cfg)
    direct = family.sample(np.random.default_rng(seed), 10, 3 * 2 * 1 * 2).angles().reshape(3, 2, 1, 2, 10, 8)
    assert torch.equal(noise, torch.from_numpy(direct).permute(0, 4, 1, 2, 3, 5))


@pytest.mark.parametrize("kwargs, name", [
    (dict(arm="family"), "family"), (dict(arm="rope", family="so2-accumulated"), "family"),
    (dict(arm="rope", family_param=("law=uniform",)), "family_param"),
    (dict(arm="family", family="so2-accumulated", family_param=("dim=8",)), "family_param"),
    (dict(arm="family", family="householder"), "family"),
    (dict(arm="family", family="so2-accumulated", family_param=("law=uniform", "a=-1")), "a"),
    (dict(arm="learned", learned_token="middle"), "learned_token")])
def test_bad_family_or_token_option_names_the_parameter(kwargs, name):
    with pytest.raises(ValueError, match=name):
        ModelConfig(vocab_size=VOCAB, d_model=16, n_heads=2, **kwargs)


@pytest.mark.parametrize("arm", TOKEN_ARMS)
def test_token_tables_receive_gradients_only_for_seen_tokens(arm):
    """The zero-initialised table must still learn: d loss / d E[v] is nonzero for tokens in the batch (the
    derivative of pi tanh at 0 is pi) and exactly zero for the others."""
    model = ProbeModel(ModelConfig(arm=arm, vocab_size=VOCAB, d_model=16, n_heads=2, n_layers=1),
                       torch.Generator().manual_seed(2)).double()
    idx = torch.tensor([[0, 1, 2, 3, 1, 2, 0, 3]])
    model(idx).logits.square().mean().backward()
    grad = model.blocks[0].attn.angle_table.weight.grad
    assert grad[:4].abs().sum(-1).min() > 0 and torch.equal(grad[4:], torch.zeros_like(grad[4:]))


def small_init_reference(model: ProbeModel, seed: int) -> dict[str, torch.Tensor]:
    """accum's "small" initialisation written out by parameter name: zero biases, tables and gains, unit LayerNorm
    gains, N(0, 0.02) weights (N(0, 0.02 / sqrt(2 n_layers)) on residual outputs), drawn in parameter order."""
    gen, out = torch.Generator().manual_seed(seed), {}
    for name, p in model.named_parameters():
        if name.endswith(("bias", "angle_table.weight", "angle_gain.weight")):
            out[name] = torch.zeros_like(p)
        elif name.startswith("ln_f") or ".ln" in name:
            out[name] = torch.ones_like(p)
        else:
            std = 0.02 / math.sqrt(2 * model.cfg.n_layers) if name.endswith(("attn.out.weight", "mlp.2.weight")) else 0.02
            out[name] = torch.randn(p.shape, generator=gen, dtype=p.dtype) * std
    return out


@pytest.mark.parametrize("arm", ["learned", "path", "gain", "alibi"])
def test_small_initialisation_is_the_written_out_rule(arm):
    model = ProbeModel(ModelConfig(arm=arm, vocab_size=37, d_model=12, n_heads=2, n_layers=2), torch.Generator().manual_seed(5))
    want = small_init_reference(model, 5)
    for name, p in model.named_parameters():
        assert torch.equal(p.detach(), want[name]), name


def test_torch_initialisation_is_pytorchs_default_law_and_keeps_rope_at_init():
    """The author's initialisation: embedding N(0, 1), every linear weight and bias U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    (variance 1 / (3 fan_in)), LayerNorm (1, 0), zero angle tables; the untied head is its own matrix."""
    cfg = ModelConfig(arm="learned", vocab_size=4096, d_model=64, n_heads=2, n_layers=2, init="torch", output="untied")
    model = ProbeModel(cfg, torch.Generator().manual_seed(0))
    emb = model.embed.weight.detach()
    assert abs(emb.mean().item()) < 4 / math.sqrt(emb.numel()) and abs(emb.var().item() - 1) < 0.02
    for name, p in model.named_parameters():
        if name.endswith("angle_table.weight"):
            assert not p.any()
        elif ".ln" in name or name.startswith("ln_f"):
            assert torch.equal(p, torch.ones_like(p) if name.endswith("weight") else torch.zeros_like(p))
        elif name != "embed.weight":
            owner = dict(model.named_modules())[name.rpartition(".")[0]]
            bound = 1 / math.sqrt(owner.weight.shape[1])
            assert p.abs().max().item() <= bound and p.abs().max().item() > 0.9 * bound, name
            if p.numel() >= 4096:
                assert abs(p.var().item() * 3 * owner.weight.shape[1] - 1) < 0.1, name
    assert model.head is not None and not torch.equal(model.head.weight, model.embed.weight)
    x = torch.randint(0, 4096, (1, 5), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        saved = model.head.weight.clone()
        model.head.weight.zero_()
        assert not model(x).logits.any()  # the logits come from the head alone, not the embedding
        model.head.weight.copy_(saved)
    # the learned arm still equals RoPE at init under this initialisation
    rope = ProbeModel(ModelConfig(**{**cfg.to_dict(), "arm": "rope", "family_param": ()}), torch.Generator().manual_seed(0))
    rope.load_state_dict({k: v for k, v in model.state_dict().items() if "angle_table" not in k})
    assert torch.allclose(model(x).logits, rope(x).logits, atol=1e-5)
