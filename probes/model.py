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
                  ``learned_token`` says which token sets the step between key j and query i: "query" (tokens
                  j+1 .. i, the step at t is theta(x_t); the default) or "key" (tokens j .. i-1, the step at t is
                  theta(x_{t-1}), zero at the first token; the author's public code).
* ``gain``        a different method (the earlier ``learned``): theta_tb = omega_b (1 + (W_l h_t)_b) from the
                  hidden state h_t, shared by the heads of a layer, W_l = 0 at init.  QK-only.
* ``family``      any angle family of ``accum.simulations`` (``family``: a built-in name or ``module:Class``,
                  ``family_param``: its "key=value" parameters; dim = the head size): its own ``sample`` draws the
                  step angles, independently per layer, head and batch row, fresh every forward pass.
* ``*_qkv``       (``random_qkv``, ``random_drift_qkv``, ``learned_qkv``, ``family_qkv``) the same angles, values
                  rotated too: v_j -> R(-Theta_j) v_j before mixing and the output rotated back by R(Theta_i), so
                  v_j reaches i transported by A_i ... A_{j+1}.
* ``random_qkv_indep`` the ``random`` arm's scores, values rotated by their own, independent walk Phi_t with
                  steps ~ U(-omega_b, omega_b) (v_j -> R(-Phi_j) v_j, output rotated by R(Phi_i); the author's
                  final-run configuration).
* ``path``        PaTH Householder steps A_t = I - beta_t w_t w_t^T per head, beta_t = 2 sigmoid(a . x_t + c),
                  w_t = normalise(U V x_t) with V: d_model -> rank, U: rank -> H d.

Scores follow s_ij = q_i^T A_i ... A_{j+1} k_j / sqrt(d) for j <= i (``accum.simulations.conventions``).

The arms that draw fresh steps every pass (random, random_drift*, random_qkv*, family*) take them from the caller
as ``noise`` (``ProbeModel.draw_noise``): (B, T, n_layers, walks, H, P) float64, walk 0 for the scores, walk 1
for an independent value walk; U[0, 1) draws for the random arms, the step angles themselves for the family arms.

Every forward pass continues from per-layer ``LayerState`` (keys already rotated / transported to the
last processed token, values, accumulated angles, position, last token), so the same code is the parallel pass
(empty state, all tokens), chunked evaluation (memory linear in length) and one-token cached decoding.
Evaluation asks for the far attention mass per query (``far``) instead of the weights: then every arm attends
through ``probes.attention`` (fused kernel over the cached keys, log-sum-exps, no weight matrix over them).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import NamedTuple

import torch
from torch import nn
from torch.nn import functional as F

import numpy as np

from accum.probes import attention
from accum.probes import transforms as tf
from accum.simulations.families import Family, make_family
from accum.simulations.params import ParamError, check_int, field_error, parse_assignments

RANDOM_ARMS = ("random", "random_drift", "random_qkv", "random_drift_qkv", "random_qkv_indep")
TOKEN_ARMS = ("learned", "learned_qkv")
FAMILY_ARMS = ("family", "family_qkv")
VALUE_ROTATING_ARMS = ("random_qkv", "random_drift_qkv", "learned_qkv", "family_qkv", "random_qkv_indep")
INDEPENDENT_VALUE_ARMS = ("random_qkv_indep",)
NOISE_ARMS = (*RANDOM_ARMS, *FAMILY_ARMS)
ARMS = ("nope", "rope", "alibi", *RANDOM_ARMS, *TOKEN_ARMS, "gain", *FAMILY_ARMS, "path")
ANGLE_ARMS = ("rope", *RANDOM_ARMS, *TOKEN_ARMS, "gain", *FAMILY_ARMS)
LEARNED_TOKENS = ("query", "key")
#: weight initialisations (``ProbeModel.init_weights``): accum's small one, or PyTorch's defaults (the author's code)
INITS = ("small", "torch")
#: output layers: tied to the token embedding, or a separate linear map (the author's code)
OUTPUTS = ("tied", "untied")


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of one probe model.

    arm: one of ``ARMS``.  d_model / n_heads must be even (SO(2) planes).  path_rank: rank of the PaTH
    w projection.  path_block: PaTH UT-transform block length (bounds the triangular solves' size).
    learned_token: "query" or "key" (module docstring; the learned arms).  family, family_param: the family
    arms' family and its "key=value" parameters (``family_of``); empty for every other arm.  init: "small" or
    "torch" (``ProbeModel.init_weights``).  output: "tied" (logits h E^T) or "untied" (a separate V x d_model map).
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
    learned_token: str = "query"
    family: str = ""
    family_param: tuple[str, ...] = ()
    init: str = "small"
    output: str = "tied"

    def __post_init__(self) -> None:
        object.__setattr__(self, "family_param", tuple(self.family_param))
        for name, allowed in (("init", INITS), ("output", OUTPUTS)):
            if getattr(self, name) not in allowed:
                raise field_error(name, f"must be one of {', '.join(allowed)}, got {getattr(self, name)!r}")
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
        if self.learned_token not in LEARNED_TOKENS:
            raise field_error("learned_token", f"must be one of {', '.join(LEARNED_TOKENS)}, got {self.learned_token!r}")
        if (self.arm in FAMILY_ARMS) != bool(self.family):
            raise field_error("family", f"is required by the arms {', '.join(FAMILY_ARMS)} and taken by no other; "
                              f"got family = {self.family!r} with arm {self.arm!r}")
        if self.family_param and not self.family:
            raise field_error("family_param", f"needs a family, got {list(self.family_param)!r} without one")
        if self.family:
            check_family_draw(family_of(self))

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def n_planes(self) -> int:
        return self.head_dim // 2

    def to_dict(self) -> dict:
        return {**asdict(self), "family_param": list(self.family_param)}


def family_of(cfg: ModelConfig) -> Family:
    """The family arm's family: ``make_family(cfg.family, dim=head size, **family_param)`` (validated; a dim in
    ``family_param`` is refused, the head size sets it)."""
    params = parse_assignments(cfg.family_param, "--family-param")
    if "dim" in params:
        raise field_error("family_param", f"may not set dim: the head size d_model / n_heads = {cfg.head_dim} does")
    return make_family(cfg.family, dim=cfg.head_dim, **params)


def check_family_draw(family: Family) -> None:
    """Refuse (``ParamError`` naming family) a family whose steps are not block-SO(2) angles: the family arms rotate
    SO(2) planes by the drawn angles (``Steps.angles``)."""
    if family.sample(np.random.default_rng(0), 2, 1).angles() is None:
        raise field_error("family", f"{family!r} draws steps that are not SO(2) angles; the family arms take angle "
                          "families (e.g. so2-accumulated, or a module:Class whose sample returns AngleSteps)")


def family_angles(family: Family, shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """Step angles of shape (B, T, n_layers, walks, H, P) float64, every (batch row, layer, walk, head) an independent
    path of T steps from ``family.sample`` with a numpy Generator seeded from ``generator`` (so a checkpointed
    torch Generator replays the same draws)."""
    b, t, n_layers, walks, h, p = shape
    seed = int(torch.randint(0, 2**62, (1,), generator=generator).item())
    theta = family.sample(np.random.default_rng(seed), t, b * n_layers * walks * h).angles()  # (b L W H, T, P)
    return torch.from_numpy(np.ascontiguousarray(theta.reshape(b, n_layers, walks, h, t, p).transpose(0, 4, 1, 2, 3, 5)))


@dataclass(frozen=True)
class LayerState:
    """What one attention layer carries between forward calls (its KV cache).

    keys: (B, H, N, d) keys rotated by R(-Theta_j) (angle arms) or transported to token N-1 (PaTH);
    values: (B, H, N, d) (rotated by R(-Theta_j), or R(-Phi_j) for ``random_qkv_indep``, for the value-rotating
    arms); theta, value_theta: float64 (B, H, P) accumulated angles Theta_{N-1}, Phi_{N-1} (zeros before any
    token); n: number of tokens seen; last_token: (B,) id of token N-1 (the key-side learned step), None at n = 0.
    """

    keys: torch.Tensor
    values: torch.Tensor
    theta: torch.Tensor
    value_theta: torch.Tensor
    n: int
    last_token: torch.Tensor | None = None


class AttentionOutput(NamedTuple):
    y: torch.Tensor
    state: LayerState
    weights: torch.Tensor | None
    step_angles: torch.Tensor | None
    far_mass: torch.Tensor | None = None


class ModelOutput(NamedTuple):
    logits: torch.Tensor
    states: list[LayerState]
    weights: list[torch.Tensor | None]
    step_angles: list[torch.Tensor | None]
    far_mass: list[torch.Tensor | None]


def empty_state(batch: int, cfg: ModelConfig, like: torch.Tensor) -> LayerState:
    """State before any token, matching the dtype/device of ``like``."""
    kv = like.new_zeros(batch, cfg.n_heads, 0, cfg.head_dim)
    theta = torch.zeros(batch, cfg.n_heads, cfg.n_planes, dtype=torch.float64, device=like.device)
    return LayerState(kv, kv, theta, theta, 0)


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

    def noise_walks(self) -> int:
        """Walks per layer in the drawn noise: 2 for an independent value walk, else 1 (0 for arms without noise)."""
        arm = self.cfg.arm
        return 0 if arm not in NOISE_ARMS else 2 if arm in INDEPENDENT_VALUE_ARMS else 1

    def noise_shape(self, batch: int, length: int) -> tuple[int, int, int, int, int] | None:
        """Shape (B, T, walks, H, P) of the draws this layer takes per pass (None for arms without any)."""
        walks = self.noise_walks()
        return (batch, length, walks, self.cfg.n_heads, self.cfg.n_planes) if walks else None

    def _check_noise(self, noise: torch.Tensor | None, batch: int, length: int) -> None:
        cfg = self.cfg
        want = self.noise_shape(batch, length)
        if noise is None or tuple(noise.shape) != want:
            got = None if noise is None else tuple(noise.shape)
            raise ValueError(f"arm {cfg.arm!r} needs noise of shape {want} (ProbeModel.draw_noise), got {got}")

    def _walk_steps(self, noise: torch.Tensor, walk: int) -> torch.Tensor:
        """Step angles (B, H, T, P) float64 of one drawn walk: the family arms' angles as drawn, the random arms'
        uniforms mapped to U(-omega, omega) (U(0, 2 omega) for random_drift*)."""
        if self.cfg.arm in FAMILY_ARMS:
            return noise[:, :, walk].to(torch.float64).transpose(1, 2)
        omega = self.omega
        low, high = (torch.zeros_like(omega), 2 * omega) if "drift" in self.cfg.arm else (-omega, omega)
        return tf.uniform_step_angles(noise[:, :, walk].to(torch.float64), low, high).transpose(1, 2)

    def _token_steps(self, idx: torch.Tensor, state: LayerState) -> torch.Tensor:
        """The learned arms' step angles (B, H, T, P): theta(x_t) (query side) or theta(x_{t-1}) (key side, zero at
        the sequence's first token, whose step cancels from every difference Theta_i - Theta_j)."""
        cfg = self.cfg
        b, t = idx.shape
        if cfg.learned_token == "key":
            before = idx[:, :1] if state.last_token is None else state.last_token[:, None]
            idx = torch.cat((before, idx[:, :-1]), dim=1)
        rows = self.angle_table(idx).view(b, t, cfg.n_heads, cfg.n_planes).transpose(1, 2)
        steps = tf.token_step_angles(rows, self.omega)
        if cfg.learned_token == "key" and state.last_token is None:
            steps = torch.cat((torch.zeros_like(steps[:, :, :1]), steps[:, :, 1:]), dim=2)
        return steps

    def _step_angles(self, x: torch.Tensor, idx: torch.Tensor, state: LayerState, noise: torch.Tensor | None,
                     ) -> torch.Tensor:
        """Step angles theta (B, H, T, P) of the angle arms (float64 except the learned ones)."""
        cfg, omega = self.cfg, self.omega
        b, t = idx.shape
        if cfg.arm == "rope":
            return omega.expand(b, cfg.n_heads, t, -1)
        if cfg.arm in NOISE_ARMS:
            self._check_noise(noise, b, t)
            return self._walk_steps(noise, 0)
        if cfg.arm in TOKEN_ARMS:
            return self._token_steps(idx, state)
        return tf.gain_step_angles(self.angle_gain(x), omega)[:, None].expand(-1, cfg.n_heads, -1, -1)

    def _value_angles(self, big_theta: torch.Tensor, state: LayerState, noise: torch.Tensor | None,
                      ) -> torch.Tensor | None:
        """Accumulated angles (B, H, T, P) the values are rotated by: the scores' Theta, an independent walk Phi
        (``random_qkv_indep``), or None (values not rotated)."""
        if self.cfg.arm not in VALUE_ROTATING_ARMS:
            return None
        if self.cfg.arm in INDEPENDENT_VALUE_ARMS:
            return tf.accumulate_angles(self._walk_steps(noise, 1), state.value_theta)
        return big_theta

    def forward(self, x: torch.Tensor, idx: torch.Tensor, state: LayerState, noise: torch.Tensor | None = None,
                need_weights: bool = False, far: int | None = None) -> AttentionOutput:
        """x: (B, T, D) normalised hidden states of the T new tokens idx (B, T) following ``state``.

        noise: (B, T, walks, H, P) draws of the noise arms (``ProbeModel.draw_noise``).  need_weights: return the
        weights (B, H, T, N+T) (explicit softmax).  far: return the far mass of every query, (B, H, T) float64,
        sum_{j <= i - far} a_ij (0 for i < far), without weights (evaluation; no autograd).  Returns y (B, T, D),
        the updated state, the weights, the step angles (B, H, T, P) of the angle arms and the far mass.
        """
        cfg = self.cfg
        q, k, v = self.heads(x)
        theta_steps, big_theta, value_theta = None, None, None
        if cfg.arm in ANGLE_ARMS:
            theta_steps = self._step_angles(x, idx, state, noise)
            big_theta = tf.accumulate_angles(theta_steps, state.theta)
            q, k = tf.rotate_planes(q, -big_theta), tf.rotate_planes(k, -big_theta)
            value_theta = self._value_angles(big_theta, state, noise)
            if value_theta is not None:
                v = tf.rotate_planes(v, -value_theta)
        values = torch.cat((state.values, v), dim=2)
        if cfg.arm == "path":
            y, keys, weights, far_mass = self._path_mix(x, q, k, values, state, need_weights, far)
        else:
            keys = torch.cat((state.keys, k), dim=2)
            y, weights, far_mass = self._plain_mix(q, keys, values, state.n, need_weights, far)
        if value_theta is not None:
            y = tf.rotate_planes(y, value_theta)
        new_state = LayerState(keys, values, state.theta if big_theta is None else big_theta[:, :, -1],
                               state.value_theta if value_theta is None else value_theta[:, :, -1],
                               state.n + x.shape[1], idx[:, -1])
        b, _, t, _ = y.shape
        return AttentionOutput(self.out(y.transpose(1, 2).reshape(b, t, cfg.d_model)), new_state, weights, theta_steps,
                               far_mass)

    def _plain_mix(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, n_prior: int,
                   need_weights: bool, far: int | None) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """softmax(q keys^T / sqrt(d) + bias, causal) values for token positions n_prior .. n_prior+T-1.

        need_weights: the explicit softmax, whose probabilities are returned (the reference).  Otherwise, with
        no cached keys and no far mass asked for (training), ``F.scaled_dot_product_attention`` (ALiBi's bias as
        a float mask); else ``attention.block_attention`` (fused kernel over the cached keys and the chunk) and,
        when ``far`` is given, the far mass per query from ``attention.near_logsumexp``.
        """
        slopes = self.slopes if self.cfg.arm == "alibi" else None
        if need_weights:
            probs = torch.softmax(self._scores(q, keys, n_prior), dim=-1)
            return probs @ values, probs, None
        if n_prior == 0 and far is None:
            if slopes is None:
                return F.scaled_dot_product_attention(q, keys, values, is_causal=True), None, None
            return F.scaled_dot_product_attention(q, keys, values, attn_mask=self._scores_bias(q, keys, 0)), None, None
        y, lse = attention.block_attention(q, keys, values, n_prior, slopes)
        if far is None:
            return y, None, None
        lse_near = attention.near_logsumexp(q, keys, n_prior, far, slopes)
        return y, None, attention.far_mass_from_lse(lse_near, lse, n_prior, far)

    def _scores_bias(self, q: torch.Tensor, keys: torch.Tensor, n_prior: int) -> torch.Tensor:
        """The causal mask as an additive bias (T, N+T) (-inf on future keys), plus ALiBi's -m_h (i - j): (H, T, N+T)."""
        t, n_all = q.shape[2], keys.shape[2]
        qpos = torch.arange(n_prior, n_prior + t, device=q.device)[:, None]
        kpos = torch.arange(n_all, device=q.device)[None, :]
        bias = torch.zeros(t, n_all, dtype=q.dtype, device=q.device).masked_fill(kpos > qpos, float("-inf"))
        if self.cfg.arm == "alibi":
            bias = bias - (self.slopes[:, None, None] * (qpos - kpos)).to(q.dtype)
        return bias

    def _scores(self, q: torch.Tensor, keys: torch.Tensor, n_prior: int) -> torch.Tensor:
        """Scores q keys^T / sqrt(d) plus ``_scores_bias``: (B, H, T, N+T)."""
        return (q @ keys.transpose(-1, -2)) / math.sqrt(self.cfg.head_dim) + self._scores_bias(q, keys, n_prior)

    def _path_mix(self, x: torch.Tensor, q: torch.Tensor, k: torch.Tensor, values: torch.Tensor, state: LayerState,
                  need_weights: bool, far: int | None,
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """PaTH attention of the T new tokens (``transforms.path_chunk`` over blocks of ``path_block`` tokens, then
        ``attention.path_attention``); returns (y, every key transported to the last token, weights, far mass
        per query (B, H, T) float64 when ``far`` is given: sum_{j <= i - far} a_ij)."""
        w = F.normalize(self._split(self.w_up(self.w_down(x))), dim=-1)
        beta = 2.0 * torch.sigmoid(self.beta(x)).transpose(1, 2)
        scores, carried, q_hat, carry = tf.path_chunk(q, k, w, beta, self.cfg.path_block, state.n > 0)
        keys = carried if carry is None else torch.cat((state.keys @ carry, carried), dim=2)
        y, weights, far_mass = attention.path_attention(scores, q_hat, state.keys, values, need_weights, far)
        return y, keys, weights, far_mass


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(LN x), then x + MLP(LN x)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = Attention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, cfg.mlp_ratio * cfg.d_model), nn.GELU(),
                                 nn.Linear(cfg.mlp_ratio * cfg.d_model, cfg.d_model))

    def forward(self, x: torch.Tensor, idx: torch.Tensor, state: LayerState, noise: torch.Tensor | None,
                need_weights: bool, far: int | None = None) -> tuple[torch.Tensor, AttentionOutput]:
        a = self.attn(self.ln1(x), idx, state, noise, need_weights, far)
        x = x + a.y
        return x + self.mlp(self.ln2(x)), a


class ProbeModel(nn.Module):
    """Token embedding, ``n_layers`` blocks, final LayerNorm, output projection (tied to the embedding, or its
    own ``head`` when ``cfg.output`` is "untied")."""

    def __init__(self, cfg: ModelConfig, generator: torch.Generator) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False) if cfg.output == "untied" else None
        self.init_weights(generator)

    def init_weights(self, generator: torch.Generator) -> None:
        """Every parameter drawn from ``generator``.  Both schemes: LayerNorm gains 1 and biases 0; angle gains and
        tables 0 (every learned-angle arm starts as RoPE).  "small" (GPT-2's): other biases 0, weights N(0, 0.02),
        N(0, 0.02 / sqrt(2 n_layers)) on the residual outputs.  "torch" (PyTorch's defaults, the author's code): the
        embedding N(0, 1), every other weight and bias of a layer with fan-in f U(-1/sqrt(f), 1/sqrt(f)) (nn.Linear's
        kaiming_uniform with a = sqrt(5), and its bias rule)."""
        resid_std = 0.02 / math.sqrt(2 * self.cfg.n_layers)
        modules = dict(self.named_modules())
        with torch.no_grad():
            for name, p in self.named_parameters():
                owner = modules[name.rpartition(".")[0]]
                if name.endswith(("angle_gain.weight", "angle_table.weight")) or (
                        isinstance(owner, nn.LayerNorm) and name.endswith("bias")):
                    p.zero_()
                elif isinstance(owner, nn.LayerNorm):
                    p.fill_(1.0)
                elif self.cfg.init == "torch" and isinstance(owner, nn.Embedding):
                    p.copy_(torch.randn(p.shape, generator=generator, dtype=p.dtype))
                elif self.cfg.init == "torch":
                    bound = 1.0 / math.sqrt(owner.weight.shape[1])
                    p.copy_((torch.rand(p.shape, generator=generator, dtype=p.dtype) * 2 - 1) * bound)
                elif name.endswith("bias"):
                    p.zero_()
                else:
                    std = resid_std if name.endswith(("attn.out.weight", "mlp.2.weight")) else 0.02
                    p.copy_(torch.randn(p.shape, generator=generator, dtype=p.dtype) * std)

    def noise_shape(self, batch: int, length: int) -> tuple[int, ...] | None:
        """Shape (B, T, n_layers, walks, H, P) of the per-pass draws (``draw_noise``); None for arms without any."""
        layer = self.blocks[0].attn.noise_shape(batch, length)
        return None if layer is None else (batch, length, self.cfg.n_layers, *layer[2:])

    def draw_noise(self, batch: int, length: int, generator: torch.Generator) -> torch.Tensor | None:
        """Fresh draws (B, T, n_layers, walks, H, P) float64 for one pass: U[0, 1) for the random arms, the family's
        step angles for the family arms (``family_angles``); None for the other arms."""
        shape = self.noise_shape(batch, length)
        if shape is None:
            return None
        if self.cfg.arm in FAMILY_ARMS:
            return family_angles(family_of(self.cfg), shape, generator)
        return torch.rand(shape, generator=generator, dtype=torch.float64)

    def empty_states(self, batch: int) -> list[LayerState]:
        like = self.embed.weight
        return [empty_state(batch, self.cfg, like) for _ in self.blocks]

    def forward(self, idx: torch.Tensor, states: list[LayerState] | None = None, noise: torch.Tensor | None = None,
                need_weights: bool = False, far: int | None = None) -> ModelOutput:
        """idx: (B, T) token ids following ``states`` (None: start of sequence); noise: (B, T, L, walks, H, P)
        from ``draw_noise``; far: also return each layer's far mass per query (``Attention.forward``).
        logits: (B, T, V)."""
        if idx.dim() != 2:
            raise ValueError(f"idx must have shape (batch, tokens), got {tuple(idx.shape)}")
        states = self.empty_states(idx.shape[0]) if states is None else states
        x = self.embed(idx)
        new_states, weights, angles, fars = [], [], [], []
        for layer, (block, st) in enumerate(zip(self.blocks, states)):
            x, a = block(x, idx, st, None if noise is None else noise[:, :, layer], need_weights, far)
            new_states.append(a.state)
            weights.append(a.weights)
            angles.append(a.step_angles)
            fars.append(a.far_mass)
        h = self.ln_f(x)
        logits = h @ self.embed.weight.T if self.head is None else self.head(h)
        return ModelOutput(logits, new_states, weights, angles, fars)
