"""The step law each attention head of a trained probe realises, as an accum ``Family`` (``dim``, ``sample``).

The bridge (``probes.bridge``) predicts a head's far attention from the law of its steps alone, so every arm is
reduced here to one object with the family protocol of ``accum.simulations.families``: ``sample(rng, n_steps,
batch)`` returns ``batch`` independent paths of ``n_steps`` steps in one of accum's step forms (``AngleSteps``,
``HouseholderSteps``, ``DenseSteps``), each path ordered backwards from a query: step 1 is A_i, step n is
A_{i-n+1}, so the score of the key n back is q^T (step 1) ... (step n) k.  What is drawn per arm (``ARM_LAWS``;
d = head dim, P = d/2 planes, omega_b = base^(-2b/d)):

* rope                         accum's ``rope`` family (theta_b = omega_b, deterministic: |psi| = 1).
* random, random_qkv(_indep)   ``so2-accumulated`` with law ``rope-uniform``: theta_b ~ U(-omega_b, omega_b),
                               exactly the arm's law.
* random_drift(_qkv)           ``DriftUniform``: theta_b = omega_b + U(-omega_b, omega_b), the arm's U(0, 2 omega_b).
* learned, learned_qkv         ``TextTokenAngles``: theta_t = table_{l,h}[x_t] (the trained table, omega_b - pi
                               tanh E) along segments of the validation text read backwards -- the token chain of
                               the text itself, no Markov fit.
* gain                         ``PooledAngles``: i.i.d. draws of the angle vectors the head produced on the
                               validation windows (its empirical marginal; the hidden state's sequence is not kept).
* path                         ``PooledHouseholder``: i.i.d. draws of the (w_t, beta_t) pairs the trained layer
                               produced on the validation windows (the realised Householder family; beta in (0, 2)
                               contracts).
* nope, alibi                  accum's ``nope`` family (A = I); alibi adds the head's bias -m_h n (``HeadLaw.slope``).
* family, family_qkv           the arm's own family (``accum.probes.model.family_of``: a built-in name or a user's
                               ``module:Class``), drawn by its own sampler.

The learned arms' ``learned_token = "key"`` (the step between key j and query i from tokens j .. i-1) draws the same
law: a segment of the text, shifted by one token.

A law that is a sequence (the text) is drawn in independent chunks by the caller: its correlations are cut once per
chunk (``probes.farlaw.CHUNK`` steps), which changes the sum of thousands of angles by a boundary term only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from accum.probes.model import ProbeModel, family_of
from accum.probes.transforms import token_step_angles
from accum.simulations.conventions import rope_frequencies
from accum.simulations.families import Family, family_name, make_family
from accum.simulations.params import check_int, field_error
from accum.simulations.steps import AngleSteps, HouseholderSteps


@dataclass(frozen=True)
class HeadLaw:
    """A head's realised step law: ``family`` (the ``Family`` protocol), ``slope`` (ALiBi bias m_h per lag, 0 for
    the other arms) and ``source`` (what the law was read from, for the report)."""

    family: Any
    slope: float
    source: str


@dataclass(frozen=True, eq=False)
class DriftUniform:
    """theta_b = omega_b (1 + U), U ~ U(-1, 1): the random_drift arm's U(0, 2 omega_b)."""

    dim: int
    base: float

    def sample(self, rng: np.random.Generator, n_steps: int, batch: int) -> AngleSteps:
        omega = rope_frequencies(self.dim, self.base)
        return AngleSteps(omega * (1.0 + rng.uniform(-1.0, 1.0, (batch, n_steps, self.dim // 2))))


@dataclass(frozen=True, eq=False)
class TextTokenAngles:
    """theta_t = table[x_t] (table (V, P)) along segments of the token sequence ``ids`` read backwards from a uniform
    start (cyclically): the text's own token chain."""

    table: np.ndarray
    ids: np.ndarray

    @property
    def dim(self) -> int:
        return 2 * self.table.shape[1]

    def sample(self, rng: np.random.Generator, n_steps: int, batch: int) -> AngleSteps:
        start = rng.integers(self.ids.size, size=(batch, 1))
        return AngleSteps(self.table[self.ids[(start - np.arange(n_steps)) % self.ids.size]])


@dataclass(frozen=True, eq=False)
class PooledAngles:
    """i.i.d. steps drawn from a pool of realised angle vectors ``pool`` (K, P)."""

    pool: np.ndarray

    @property
    def dim(self) -> int:
        return 2 * self.pool.shape[1]

    def sample(self, rng: np.random.Generator, n_steps: int, batch: int) -> AngleSteps:
        return AngleSteps(self.pool[rng.integers(self.pool.shape[0], size=(batch, n_steps))])


@dataclass(frozen=True, eq=False)
class PooledHouseholder:
    """i.i.d. Householder steps I - beta w w^T drawn from a pool of realised pairs: w (K, d) unit rows, beta (K,)."""

    w: np.ndarray
    beta: np.ndarray

    @property
    def dim(self) -> int:
        return self.w.shape[1]

    def sample(self, rng: np.random.Generator, n_steps: int, batch: int) -> HouseholderSteps:
        pick = rng.integers(self.beta.size, size=(batch, n_steps))
        return HouseholderSteps(self.w[pick], self.beta[pick])


@dataclass(frozen=True)
class Realised:
    """What a law builder may read besides the model: per layer the normalised layer input on the validation
    windows (B, T, D) and the step angles the forward pass produced ((B, H, T, P) or None), and the validation ids."""

    inputs: list[torch.Tensor]
    step_angles: list[torch.Tensor | None]
    val_ids: np.ndarray


Builder = Callable[[ProbeModel, Realised, int, int], HeadLaw]


def _rope(model: ProbeModel, real: Realised, layer: int, head: int) -> HeadLaw:
    cfg = model.cfg
    return HeadLaw(make_family("rope", dim=cfg.head_dim, base=cfg.rope_base), 0.0, "closed form: rope")


def _uniform(model: ProbeModel, real: Realised, layer: int, head: int) -> HeadLaw:
    cfg = model.cfg
    family = make_family("so2-accumulated", dim=cfg.head_dim, law="rope-uniform", base=cfg.rope_base)
    return HeadLaw(family, 0.0, "closed form: so2-accumulated rope-uniform")


def _drift(model: ProbeModel, real: Realised, layer: int, head: int) -> HeadLaw:
    cfg = model.cfg
    return HeadLaw(DriftUniform(cfg.head_dim, cfg.rope_base), 0.0, "closed form: omega + U(-omega, omega)")


def _nope(model: ProbeModel, real: Realised, layer: int, head: int) -> HeadLaw:
    return HeadLaw(make_family("nope", dim=model.cfg.head_dim), 0.0, "closed form: nope (A = I)")


def _alibi(model: ProbeModel, real: Realised, layer: int, head: int) -> HeadLaw:
    slope = float(model.blocks[layer].attn.slopes[head])
    return HeadLaw(make_family("nope", dim=model.cfg.head_dim), slope, f"nope with ALiBi bias -{slope:.4g} n")


def _learned(model: ProbeModel, real: Realised, layer: int, head: int) -> HeadLaw:
    cfg, attn = model.cfg, model.blocks[layer].attn
    rows = attn.angle_table.weight.detach().double().view(cfg.vocab_size, cfg.n_heads, cfg.n_planes)[:, head]
    table = token_step_angles(rows, attn.omega).numpy()
    return HeadLaw(TextTokenAngles(table, real.val_ids), 0.0, "trained token table along the validation text")


def _gain(model: ProbeModel, real: Realised, layer: int, head: int) -> HeadLaw:
    pool = real.step_angles[layer][:, head].reshape(-1, model.cfg.n_planes).double().cpu().numpy()
    return HeadLaw(PooledAngles(pool), 0.0, "realised angles on the text, i.i.d. (empirical marginal)")


def _path(model: ProbeModel, real: Realised, layer: int, head: int) -> HeadLaw:
    w, beta = path_factors(model, layer, real.inputs[layer])
    return HeadLaw(PooledHouseholder(w[:, head].reshape(-1, model.cfg.head_dim), beta[:, head].reshape(-1)), 0.0,
                   "realised Householder (w_t, beta_t) on the text, i.i.d.")


def _family(model: ProbeModel, real: Realised, layer: int, head: int) -> HeadLaw:
    family = family_of(model.cfg)
    return HeadLaw(family, 0.0, f"the arm's family {family_name(family)}, its own sampler")


#: the law builder of every arm (the one place the arms are told apart)
ARM_LAWS: dict[str, Builder] = {
    "rope": _rope, "random": _uniform, "random_qkv": _uniform, "random_qkv_indep": _uniform,
    "random_drift": _drift, "random_drift_qkv": _drift, "learned": _learned, "learned_qkv": _learned,
    "gain": _gain, "path": _path, "nope": _nope, "alibi": _alibi, "family": _family, "family_qkv": _family,
}


@torch.no_grad()
def path_factors(model: ProbeModel, layer: int, x: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """The PaTH layer's realised factors on normalised inputs x (B, T, D): unit w (B, H, T, d) and beta (B, H, T) in
    (0, 2), float64 numpy (the formulas of ``ProbeModel``'s PaTH attention)."""
    attn = model.blocks[layer].attn
    b, t, _ = x.shape
    w = attn.w_up(attn.w_down(x)).view(b, t, model.cfg.n_heads, model.cfg.head_dim).transpose(1, 2)
    w = torch.nn.functional.normalize(w.double(), dim=-1)
    beta = 2.0 * torch.sigmoid(attn.beta(x).double()).transpose(1, 2)
    return w.cpu().numpy(), beta.cpu().numpy()


def without_rotation(law: HeadLaw) -> HeadLaw:
    """The same head with A = I: no transport between query and key, the law's ALiBi slope kept (the bridge's A = I
    baseline)."""
    return HeadLaw(make_family("nope", dim=law.family.dim), law.slope, "A = I (no rotation)")


def head_law(model: ProbeModel, real: Realised, layer: int, head: int) -> HeadLaw:
    """The realised step law of one head (module docstring); ``ParamError`` naming arm for an arm without one."""
    check_int("layer", layer, 0, model.cfg.n_layers - 1)
    check_int("head", head, 0, model.cfg.n_heads - 1)
    builder = ARM_LAWS.get(model.cfg.arm)
    if builder is None:
        raise field_error("arm", f"{model.cfg.arm!r} has no step law here; known: {', '.join(ARM_LAWS)}")
    law = builder(model, real, layer, head)
    if not isinstance(law.family, Family) or law.family.dim != model.cfg.head_dim:
        raise field_error("arm", f"{model.cfg.arm!r}: its law must be a Family of dim {model.cfg.head_dim}")
    return law
