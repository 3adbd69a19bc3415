"""Decoder-only transformer whose positional scheme is one constructor switch (``ModelConfig.arm``).

Arms (all share ``Attention``; q, k, v have shape (B, H, T, d) with d = d_model / H):

* ``nope``        no positional information.
* ``rope``        A_t = R(omega) for every token: Theta_t = (t+1) omega (RoFormer, interleaved planes).
* ``alibi``       no transform; score bias -m_h (i - j) (Press et al. 2022).
* ``random``      accumulated SO(2) with theta_tb ~ U(-omega_b, +omega_b), independent per layer, head,
                  token and plane, drawn fresh every forward pass (training and evaluation) from
                  caller-supplied uniforms.
* ``random_drift`` the same with theta_tb ~ U(0, 2 omega_b) (mean step omega_b, as RoPE).
* ``learned``     the paper's token-dependent angles: per layer and head a token table E (vocab x planes),
                  zero at init, theta_tb = omega_b - pi tanh(E[x_t])_b (accum's sign; the arm equals RoPE
                  at init and any angle is reachable; see ``transforms.token_step_angles``).  QK-only.
* ``gain``        a different method (the earlier ``learned``): theta_tb = omega_b (1 + (W_l h_t)_b) from the
                  hidden state h_t, shared by the heads of a layer, W_l = 0 at init.  QK-only.
* ``*_qkv``       (``random_qkv``, ``random_drift_qkv``, ``learned_qkv``) the same angles, values rotated too:
                  v_j -> R(-Theta_j) v_j before mixing and the output rotated back by R(Theta_i), so v_j
                  reaches i transported by A_i ... A_{j+1}.
* ``path``        PaTH Householder steps A_t = I - beta_t w_t w_t^T per head, beta_t = 2 sigmoid(a . x_t + c),
                  w_t = normalise(U V x_t) with V: d_model -> rank, U: rank -> H d.

Scores follow s_ij = q_i^T A_i ... A_{j+1} k_j / sqrt(d) for j <= i (``accum.simulations.conventions``).

Every forward pass continues from per-layer ``LayerState`` (keys already rotated / transported to the
last processed token, values, accumulated angle, position), so the same code is the parallel pass
(empty state, all tokens), chunked evaluation (memory linear in length) and one-token cached decoding.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import NamedTuple

import torch
from torch import nn
from torch.nn import functional as F

from accum.probes import transforms as tf
from accum.simulations.params import ParamError, check_int, field_error

RANDOM_ARMS = ("random", "random_drift", "random_qkv", "random_drift_qkv")
TOKEN_ARMS = ("learned", "learned_qkv")
VALUE_ROTATING_ARMS = ("random_qkv", "random_drift_qkv", "learned_qkv")
ARMS = ("nope", "rope", "alibi", *RANDOM_ARMS, *TOKEN_ARMS, "gain", "path")
ANGLE_ARMS = ("rope", *RANDOM_ARMS, *TOKEN_ARMS, "gain")


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of one probe model.

    arm: one of ``ARMS``.  d_model / n_heads must be even (SO(2) planes).  path_rank: rank of the PaTH
    w projection.  path_block: PaTH UT-transform block length (bounds the triangular solves' size).
    """

    arm: str = "rope"
    vocab_size: int = 128
    d_model: int = 128
    n_heads: int = 4
    n_layers: int = 4
    mlp_ratio: int = 4
    rope_base: float = 10000.0
    path_rank: int = 16
    path_block: int = 32

    def __post_init__(self) -> None:
        if self.arm not in ARMS:
            raise field_error("arm", f"must be one of {', '.join(ARMS)}, got {self.arm!r}")
        check_int("vocab_size", self.vocab_size, 2, 2**20)
        check_int("d_model", self.d_model, 2, 2**16)
        check_int("n_heads", self.n_heads, 1, self.d_model)
        check_int("n_layers", self.n_layers, 1, 1024)
        check_int("mlp_ratio", self.mlp_ratio, 1, 64)
        check_int("path_rank", self.path_rank, 1, 2**16)
        check_int("path_block", self.path_block, 1, 2**16)
        if self.d_model % self.n_heads or (self.d_model // self.n_heads) % 2:
            raise ParamError(
                f"{{d_model}} / {{n_heads}} must be an even integer (SO(2) planes), got {{d_model}} = {self.d_model}, "
                f"{{n_heads}} = {self.n_heads}", ("d_model", "n_heads"))
        if not (isinstance(self.rope_base, (int, float)) and math.isfinite(self.rope_base) and self.rope_base > 1):
            raise field_error("rope_base", f"must be a finite number > 1, got {self.rope_base!r}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def n_planes(self) -> int:
        return self.head_dim // 2

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class LayerState:
    """What one attention layer carries between forward calls (its KV cache).

    keys: (B, H, N, d) keys rotated by R(-Theta_j) (angle arms) or transported to token N-1 (PaTH);
    values: (B, H, N, d) (rotated by R(-Theta_j) for the ``*_qkv`` arms); theta: float64 (B, H, P)
    accumulated angle Theta_{N-1} (zeros before any token); n: number of tokens seen.
    """

    keys: torch.Tensor
    values: torch.Tensor
    theta: torch.Tensor
    n: int


class AttentionOutput(NamedTuple):
    y: torch.Tensor
    state: LayerState
    weights: torch.Tensor | None
    step_angles: torch.Tensor | None


class ModelOutput(NamedTuple):
    logits: torch.Tensor
    states: list[LayerState]
    weights: list[torch.Tensor | None]
    step_angles: list[torch.Tensor | None]


def empty_state(batch: int, cfg: ModelConfig, like: torch.Tensor) -> LayerState:
    """State before any token, matching the dtype/device of ``like``."""
    kv = like.new_zeros(batch, cfg.n_heads, 0, cfg.head_dim)
    theta = torch.zeros(batch, cfg.n_heads, cfg.n_planes, dtype=torch.float64, device=like.device)
    return LayerState(kv, kv, theta, 0)


class Attention(nn.Module):
    """Causal multi-head attention with the arm's transform; the only module that differs between arms."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d, h = cfg.d_model, cfg.n_heads
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.out = nn.Linear(d, d, bias=False)
        self.register_buffer("omega", tf.rope_omega(cfg.head_dim, cfg.rope_base, torch.float64), persistent=False)
        if cfg.arm == "alibi":
            self.register_buffer("slopes", tf.alibi_slopes(h), persistent=False)
        if cfg.arm in TOKEN_ARMS:
            self.angle_table = nn.Embedding(cfg.vocab_size, h * cfg.n_planes)
        if cfg.arm == "gain":
            self.angle_gain = nn.Linear(d, cfg.n_planes, bias=False)
        if cfg.arm == "path":
            self.w_down = nn.Linear(d, cfg.path_rank, bias=False)
            self.w_up = nn.Linear(cfg.path_rank, d, bias=False)
            self.beta = nn.Linear(d, h)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, H d) -> (B, H, T, d)."""
        b, t, _ = x.shape
        return x.view(b, t, self.cfg.n_heads, self.cfg.head_dim).transpose(1, 2)

    def heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Untransformed q, k, v of normalised hidden states x (B, T, D): each (B, H, T, d)."""
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return self._split(q), self._split(k), self._split(v)

    def uniforms_shape(self, batch: int, length: int) -> tuple[int, int, int, int]:
        """Shape (B, T, H, P) of the U[0, 1) draws a random arm's layer takes."""
        return (batch, length, self.cfg.n_heads, self.cfg.n_planes)

    def _step_angles(self, x: torch.Tensor, idx: torch.Tensor, uniforms: torch.Tensor | None) -> torch.Tensor:
        """Step angles theta (B, H, T, P) of the angle arms (float64 except the learned ones)."""
        cfg, omega = self.cfg, self.omega
        b, t = idx.shape
        if cfg.arm == "rope":
            return omega.expand(b, cfg.n_heads, t, -1)
        if cfg.arm in RANDOM_ARMS:
            want = self.uniforms_shape(b, t)
            if uniforms is None or tuple(uniforms.shape) != want:
                got = None if uniforms is None else tuple(uniforms.shape)
                raise ValueError(f"arm {cfg.arm!r} needs uniforms of shape {want} in [0, 1), got {got}")
            low, high = (torch.zeros_like(omega), 2 * omega) if "drift" in cfg.arm else (-omega, omega)
            return tf.uniform_step_angles(uniforms.to(torch.float64), low, high).transpose(1, 2)
        if cfg.arm in TOKEN_ARMS:
            rows = self.angle_table(idx).view(b, t, cfg.n_heads, cfg.n_planes).transpose(1, 2)
            return tf.token_step_angles(rows, omega)
        return tf.gain_step_angles(self.angle_gain(x), omega)[:, None].expand(-1, cfg.n_heads, -1, -1)

    def forward(self, x: torch.Tensor, idx: torch.Tensor, state: LayerState, uniforms: torch.Tensor | None = None,
                need_weights: bool = False) -> AttentionOutput:
        """x: (B, T, D) normalised hidden states of the T new tokens idx (B, T) following ``state``.

        uniforms: (B, T, H, P) draws for the random arms.  Returns y (B, T, D), the updated state,
        optionally the weights (B, H, T, N+T), and the step angles (B, H, T, P) of the angle arms.
        """
        cfg = self.cfg
        q, k, v = self.heads(x)
        theta_steps, big_theta = None, None
        if cfg.arm in ANGLE_ARMS:
            theta_steps = self._step_angles(x, idx, uniforms)
            big_theta = tf.accumulate_angles(theta_steps, state.theta)
            q, k = tf.rotate_planes(q, -big_theta), tf.rotate_planes(k, -big_theta)
            if cfg.arm in VALUE_ROTATING_ARMS:
                v = tf.rotate_planes(v, -big_theta)
        values = torch.cat((state.values, v), dim=2)
        if cfg.arm == "path":
            y, keys, weights = self._path_mix(x, q, k, values, state, need_weights)
        else:
            keys = torch.cat((state.keys, k), dim=2)
            y, weights = self._plain_mix(q, keys, values, state.n, need_weights)
        if cfg.arm in VALUE_ROTATING_ARMS:
            y = tf.rotate_planes(y, big_theta)
        new_theta = state.theta if big_theta is None else big_theta[:, :, -1]
        new_state = LayerState(keys, values, new_theta, state.n + x.shape[1])
        b, _, t, _ = y.shape
        return AttentionOutput(self.out(y.transpose(1, 2).reshape(b, t, cfg.d_model)), new_state, weights, theta_steps)

    def _plain_mix(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, n_prior: int,
                   need_weights: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """softmax(q keys^T / sqrt(d) + bias, causal) values for token positions n_prior .. n_prior+T-1.

        Without weights this is ``F.scaled_dot_product_attention`` (the same formula, fused kernels; ALiBi's
        bias passed as a float mask); with weights the explicit softmax, whose probabilities are returned.
        """
        t, n_all = q.shape[2], keys.shape[2]
        qpos = torch.arange(n_prior, n_prior + t, device=q.device)[:, None]
        kpos = torch.arange(n_all, device=q.device)[None, :]
        future = kpos > qpos
        bias = None
        if self.cfg.arm == "alibi":
            bias = (-(self.slopes[:, None, None] * (qpos - kpos))).to(q.dtype).masked_fill(future, float("-inf"))
        if not need_weights:
            if bias is None and n_prior == 0:
                return F.scaled_dot_product_attention(q, keys, values, is_causal=True), None
            mask = ~future if bias is None else bias
            return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask), None
        scores = (q @ keys.transpose(-1, -2)) / math.sqrt(self.cfg.head_dim)
        scores = scores.masked_fill(future, float("-inf")) if bias is None else scores + bias
        probs = torch.softmax(scores, dim=-1)
        return probs @ values, probs

    def _path_mix(self, x: torch.Tensor, q: torch.Tensor, k: torch.Tensor, values: torch.Tensor,
                  state: LayerState, need_weights: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """PaTH attention over blocks of ``path_block`` tokens; returns (y, transported keys, weights)."""
        cfg = self.cfg
        w = F.normalize(self._split(self.w_up(self.w_down(x))), dim=-1)
        beta = 2.0 * torch.sigmoid(self.beta(x)).transpose(1, 2)
        keys, outs, rows = state.keys, [], []
        n0, t = state.n, x.shape[1]
        for a in range(0, t, cfg.path_block):
            sl = slice(a, min(a + cfg.path_block, t))
            scores, keys = tf.path_block(q[:, :, sl], k[:, :, sl], w[:, :, sl], beta[:, :, sl], keys)
            c, n_seen = sl.stop - a, n0 + sl.stop
            future = torch.ones(c, n_seen, dtype=torch.bool, device=x.device).triu(n_seen - c + 1)
            probs = torch.softmax(scores.masked_fill(future, float("-inf")) / math.sqrt(cfg.head_dim), dim=-1)
            outs.append(probs @ values[:, :, :n_seen])
            if need_weights:
                rows.append(F.pad(probs, (0, n0 + t - n_seen)))
        weights = torch.cat(rows, dim=2) if need_weights else None
        return torch.cat(outs, dim=2), keys, weights


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(LN x), then x + MLP(LN x)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = Attention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, cfg.mlp_ratio * cfg.d_model), nn.GELU(),
                                 nn.Linear(cfg.mlp_ratio * cfg.d_model, cfg.d_model))

    def forward(self, x: torch.Tensor, idx: torch.Tensor, state: LayerState, uniforms: torch.Tensor | None,
                need_weights: bool) -> tuple[torch.Tensor, AttentionOutput]:
        a = self.attn(self.ln1(x), idx, state, uniforms, need_weights)
        x = x + a.y
        return x + self.mlp(self.ln2(x)), a


class ProbeModel(nn.Module):
    """Token embedding, ``n_layers`` blocks, final LayerNorm, tied output projection."""

    def __init__(self, cfg: ModelConfig, generator: torch.Generator) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self._init_weights(generator)

    def _init_weights(self, generator: torch.Generator) -> None:
        """N(0, 0.02) weights, N(0, 0.02 / sqrt(2 L)) on residual outputs, zero biases, zero angle gains and
        tables (so every learned-angle arm starts as RoPE)."""
        resid_std = 0.02 / math.sqrt(2 * self.cfg.n_layers)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith(("angle_gain.weight", "angle_table.weight", "bias")):
                    p.zero_()
                elif "ln" in name.split(".")[-2]:
                    p.fill_(1.0)
                else:
                    std = resid_std if name.endswith(("attn.out.weight", "mlp.2.weight")) else 0.02
                    p.copy_(torch.randn(p.shape, generator=generator, dtype=p.dtype) * std)

    def draw_uniforms(self, batch: int, length: int, generator: torch.Generator) -> torch.Tensor | None:
        """Fresh U[0,1) draws (B, T, n_layers, H, P) for the random arms (None for the other arms)."""
        if self.cfg.arm not in RANDOM_ARMS:
            return None
        cfg = self.cfg
        return torch.rand(batch, length, cfg.n_layers, cfg.n_heads, cfg.n_planes, generator=generator,
                          dtype=torch.float64)

    def empty_states(self, batch: int) -> list[LayerState]:
        like = self.embed.weight
        return [empty_state(batch, self.cfg, like) for _ in self.blocks]

    def forward(self, idx: torch.Tensor, states: list[LayerState] | None = None,
                uniforms: torch.Tensor | None = None, need_weights: bool = False) -> ModelOutput:
        """idx: (B, T) token ids following ``states`` (None: start of sequence); uniforms: (B, T, L, H, P)
        from ``draw_uniforms`` for the random arms.  logits: (B, T, V)."""
        if idx.dim() != 2:
            raise ValueError(f"idx must have shape (batch, tokens), got {tuple(idx.shape)}")
        states = self.empty_states(idx.shape[0]) if states is None else states
        x = self.embed(idx)
        new_states, weights, angles = [], [], []
        for layer, (block, st) in enumerate(zip(self.blocks, states)):
            x, a = block(x, idx, st, None if uniforms is None else uniforms[:, :, layer], need_weights)
            new_states.append(a.state)
            weights.append(a.weights)
            angles.append(a.step_angles)
        logits = self.ln_f(x) @ self.embed.weight.T
        return ModelOutput(logits, new_states, weights, angles)
