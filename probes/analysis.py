"""Inside a trained probe: far attention mass and mixing window per head, against the angle-law prediction.

Measured (any arm), from the attention weights a_ij of validation windows of length T:

* far mass      F_h = mean over queries i >= D of sum_{j <= i - D} a_ij, with D = L_train (mass the head
                puts on keys farther back than anything seen in training).
* window        W_h = mean over queries i >= T/2 of min{n : sum_{0 <= l < n} a_{i, i-l} >= level}
                (effective mixing window: lags holding ``level`` of the mass).

Predicted (angle arms: rope, the random, learned and gain arms) from the angle law of each head.  If
the step angles theta_tb of a head were i.i.d. with characteristic function phi_b = E exp(i theta_b), the expected relative
rotation over lag n is E exp(i (Theta_i - Theta_{i-n})) = phi_b^n (the SO(2) case of the incoherence
claim C1: ||E A_n ... A_1|| = max_b |phi_b|^n).  A head's query/key content in plane b enters the
score with weight c_hb = E|q_b| E|k_b| (plane norms), so its coherent score fraction at lag n is

    C_h(n) = sum_b c_hb |phi_b|^n / sum_b c_hb,

the predicted mixing window is W_h^pred = min{n : C_h(n) <= eps} (T when never reached; planes with
omega_b -> 0 keep |phi_b| ~ 1, which is why rotation alone cannot bound the window) and the predicted
coherent fraction at the far lag D is C_h(D), to be set against the measured far mass F_h.  The same
with phi_b^n replaced by the empirical |mean_i exp(i (Theta_i - Theta_{i-n}))| (actual text, not
i.i.d.) gives W_h^emp and shows how far the i.i.d. law is from the sequence.  Agreement is summarised
by Spearman rank correlations over all heads: W^pred vs W and C_h(D) vs F_h.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from accum.probes.model import ANGLE_ARMS, ProbeModel
from accum.probes.transforms import accumulate_angles
from accum.simulations.params import ParamError, check_int, field_error


def far_mass(weights: torch.Tensor, far: int) -> torch.Tensor:
    """F_h for weights (B, H, T, T) (rows sum to one, causal): (H,); NaN when T <= far."""
    t = weights.shape[-1]
    i = torch.arange(t)[:, None]
    j = torch.arange(t)[None, :]
    mass = (weights * (j <= i - far)).sum(-1)[:, :, far:]
    return mass.mean(dim=(0, 2)) if t > far else torch.full((weights.shape[1],), float("nan"))


def lag_profile(weights: torch.Tensor) -> torch.Tensor:
    """p[b, h, i, n] = a_{i, i-n} (zero for n > i): (B, H, T, T)."""
    t = weights.shape[-1]
    i = torch.arange(t)[:, None]
    n = torch.arange(t)[None, :]
    src = (i - n).clamp(min=0).expand(weights.shape[:2] + (t, t))
    return torch.gather(weights, -1, src) * (n <= i)


def mixing_window(weights: torch.Tensor, level: float = 0.9) -> torch.Tensor:
    """W_h: mean over queries i >= T/2 of the fewest recent lags holding ``level`` of the mass, (H,)."""
    if not 0.0 < level < 1.0:
        raise field_error("level", f"must be in (0, 1), got {level!r}")
    t = weights.shape[-1]
    cum = lag_profile(weights)[:, :, t // 2:].cumsum(-1)
    width = (cum < level).sum(-1) + 1
    return width.double().mean(dim=(0, 2))


def plane_weights(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """c_hb = E|q_b| E|k_b| over batch and tokens; q, k: (B, H, T, d) -> (H, d/2)."""
    qn = q.unflatten(-1, (-1, 2)).norm(dim=-1).mean(dim=(0, 2))
    kn = k.unflatten(-1, (-1, 2)).norm(dim=-1).mean(dim=(0, 2))
    return (qn * kn).double()


def iid_coherence(step_angles: torch.Tensor, lags: torch.Tensor) -> torch.Tensor:
    """|phi_hb|^n with phi_hb = mean_{batch, t} exp(i theta_thb): (B, H, T, P) -> (H, N_lags, P)."""
    th = step_angles.double()
    phi = torch.complex(torch.cos(th), torch.sin(th)).mean(dim=(0, 2)).abs()
    return phi[:, None, :] ** lags[None, :, None].double()


def empirical_coherence(step_angles: torch.Tensor, lags: torch.Tensor) -> torch.Tensor:
    """|mean_{batch, i >= n} exp(i (Theta_i - Theta_{i-n}))| per head and plane: (B, H, T, P) -> (H, N_lags, P)."""
    cum = accumulate_angles(step_angles)
    t = cum.shape[2]
    rows = []
    for n in lags.tolist():
        diff = cum[:, :, n:] - cum[:, :, : t - n]
        rows.append(torch.complex(torch.cos(diff), torch.sin(diff)).mean(dim=(0, 2)).abs())
    return torch.stack(rows, dim=1)


def coherent_fraction(weights_hb: torch.Tensor, coherence: torch.Tensor) -> torch.Tensor:
    """C_h(n) = sum_b c_hb coh_hb(n) / sum_b c_hb for weights (H, P), coherence (H, N_lags, P): (H, N_lags)."""
    return (coherence * weights_hb[:, None, :]).sum(-1) / weights_hb.sum(-1, keepdim=True)


def predicted_window(weights_hb: torch.Tensor, coherence: torch.Tensor, lags: torch.Tensor, eps: float) -> torch.Tensor:
    """W_h = first lag with C_h(n) <= eps (last lag + 1 if none), coherence (H, N_lags, P): (H,)."""
    below = coherent_fraction(weights_hb, coherence) <= eps
    first = torch.where(below.any(-1), below.double().argmax(-1), torch.full_like(below[:, 0], lags.numel(),
                                                                               dtype=torch.long))
    ext = torch.cat((lags, lags[-1:] + 1))
    return ext[first].double()


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation (average ranks for ties); NaN when either side is constant."""
    def ranks(x):
        order = np.argsort(x, kind="stable")
        r = np.empty(len(x))
        r[order] = np.arange(len(x))
        for v in np.unique(x):
            r[x == v] = r[x == v].mean()
        return r
    ra, rb = ranks(np.asarray(a, float)), ranks(np.asarray(b, float))
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


@torch.no_grad()
def head_inputs(model: ProbeModel, x: torch.Tensor, uniforms: torch.Tensor | None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer, the untransformed queries and keys (B, H, T, d) of windows x (B, T) on the CPU, from the
    layer's normalised input (the same pass as ``model(x, None, uniforms)``)."""
    hidden, out = model.embed(x), []
    for index, block in enumerate(model.blocks):
        q, k, _ = block.attn.heads(block.ln1(hidden))
        out.append((q.cpu(), k.cpu()))
        u_layer = None if uniforms is None else uniforms[:, :, index]
        hidden, _ = block(hidden, x, model.empty_states(x.shape[0])[0], u_layer, False)
    return out


@torch.no_grad()
def analyse(model: ProbeModel, x: torch.Tensor, seq_len: int, generator: torch.Generator,
            level: float = 0.9, eps: float = 0.1) -> dict:
    """Per layer and head: far mass, measured window, and (angle arms) predicted windows.

    x: (B, T) validation windows, T > seq_len.  Returns {"length", "far_lag", "level", "eps",
    "layers": [{"far_mass": [H], "window": [H], "window_pred_iid": [H], "window_pred_empirical": [H],
    "coherent_fraction_far_iid": [H], "coherent_fraction_far_empirical": [H]}],
    "spearman_window_pred_vs_measured", "spearman_far_coherence_vs_far_mass"}.
    """
    check_int("seq_len", seq_len, 1)
    if x.shape[1] <= seq_len:
        raise ParamError(f"analysis windows must be longer than {{seq_len}} = {seq_len}, got {x.shape[1]}", ("seq_len",))
    model.eval()
    uniforms = model.draw_noise(x.shape[0], x.shape[1], generator)
    uniforms = None if uniforms is None else uniforms.to(x.device)
    out = model(x, None, uniforms, need_weights=True)
    lags = torch.arange(x.shape[1])
    layers, pred_all, meas_all, coh_all, far_all = [], [], [], [], []
    for (q, k), weights, angles in zip(head_inputs(model, x, uniforms), out.weights, out.step_angles):
        weights, angles = weights.cpu(), None if angles is None else angles.cpu()
        layer = {"far_mass": far_mass(weights, seq_len).tolist(), "window": mixing_window(weights, level).tolist()}
        if model.cfg.arm in ANGLE_ARMS:
            c = plane_weights(q, k)
            iid, emp = iid_coherence(angles, lags), empirical_coherence(angles, lags)
            layer["window_pred_iid"] = predicted_window(c, iid, lags, eps).tolist()
            layer["window_pred_empirical"] = predicted_window(c, emp, lags, eps).tolist()
            layer["coherent_fraction_far_iid"] = coherent_fraction(c, iid[:, seq_len:seq_len + 1])[:, 0].tolist()
            layer["coherent_fraction_far_empirical"] = coherent_fraction(c, emp[:, seq_len:seq_len + 1])[:, 0].tolist()
            pred_all += layer["window_pred_iid"]
            meas_all += layer["window"]
            coh_all += layer["coherent_fraction_far_iid"]
            far_all += layer["far_mass"]
        layers.append(layer)
    return {"length": x.shape[1], "far_lag": seq_len, "level": level, "eps": eps, "layers": layers,
            "spearman_window_pred_vs_measured": _rho(pred_all, meas_all),
            "spearman_far_coherence_vs_far_mass": _rho(coh_all, far_all)}


def _rho(a: list[float], b: list[float]) -> float | None:
    """Spearman correlation, None when undefined (no angle arm, or a side constant to 9 decimals: RoPE's
    |phi_b| = 1 differs from 1 only by rounding, which must not be ranked)."""
    rho = spearman(np.round(a, 9), np.round(b, 9)) if a else float("nan")
    return None if math.isnan(rho) else rho
