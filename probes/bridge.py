"""From a trained probe to accum's theory: the accumulated family each angle head realises on the validation
text, and what ``accum.theory`` predicts from it, set against what the model does (probes/REPORT.md,
"Theory vs trained probes").  One ``theory.json`` per run (``write_theory``), aggregated over seeds by
``probes.theory_stats``.

Realised family per arm (P = d/2 planes, omega_b = base^(-2b/d)); its path characteristic
psi_hb(n) = E exp(i (Theta_{t+n} - Theta_t))_b comes from ``accum.theory.so2``:

* ``rope``                      the built-in ``rope`` family: psi_b(n) = exp(i n omega_b), |psi| = 1 (no mixing).
* ``random``, ``random_qkv``    ``so2-accumulated`` with law ``rope-uniform`` (theta_b ~ U(-omega_b, omega_b),
                                redrawn each pass; exactly the arm's law): |psi_b(n)| = (sin omega_b / omega_b)^n.
* ``random_drift*``             theta_b = omega_b + U(-omega_b, omega_b): the product of the two characteristics
                                above (independent sum of RoPE's step and the uniform one).
* ``learned``, ``learned_qkv``  the token law of the head's trained table theta_xb = omega_b - pi tanh(E_{l,h}[x])_b
                                with the token source a first-order Markov chain fitted on the validation text
                                (``fitted_chain``): psi = pi^T D (P D)^{n-1} 1 (``so2.chain_characteristic``).
* ``gain``                      the angles the model produces on the text, theta = omega (1 + W h_t), taken as
                                an i.i.d. law with their empirical marginal: |psi_b(n)| = |phi_b|^n
                                (``analysis.iid_coherence``; the premise, not the text's sequence).

Coherence and window (C1, C2).  With plane weights c_hb = E|q_b| E|k_b| (the share of plane b in the head's
scores), the predicted coherent score fraction is C_h(n) = sum_b c_hb |psi_hb(n)| / sum_b c_hb
(``analysis.coherent_fraction``), the predicted window W_h^pred = sum_{n < L} C_h(n)^2
(``theory.window.width_from_curve``: effectively coherent offsets within the train context L) and the onset
n_eps = first n with C_h(n) <= eps (``theory.window.crossing``).  Measured: the attention window
W_h = mean over queries i in [L/2, L) of the fewest recent lags holding ``level`` of the mass
(``analysis.mixing_window``) at train length, and the text's own coherence |mean_t exp(i (Theta_{t+n} -
Theta_t))| (``analysis.empirical_coherence``).  The two windows are different units (coherent offsets against
lags holding 90% of attention), so agreement is the rank correlation over heads (Spearman), per run.

Far mass (C3, C5) from the score statistics at 2 L only.  Query i of a window of length T attends keys j <= i
with a_ij = e^{s_ij} / (Z_i^near + S_i^far), Z^near = sum_{i - j < L} e^{s_ij}, S^far = sum_{i - j >= L} e^{s_ij}.
Assume (A1) incoherent far scores: e^{s_ij} for i - j >= L has a mean m_i that does not depend on the lag (the
rotation has mixed, so a far key's score does not know how far it is), and (A2) stationarity: the joint law of
(Z^near_i, m_i) does not depend on the position i or the context length (the suppression learned at L
transfers unchanged, C3).  Then for N = i - L + 1 far keys S^far ~ N m_i (law of large numbers over the far
keys), the far mass of query i is

    F_i = N r_i / (1 + N r_i) = 1 - w(N r_i),   r_i = m_i / Z^near_i,   w(M) = 1 / (1 + M)
    (``theory.far.near_weight_from_mass``: the near weight of a far mass M, C5),

and the far mass at length T (the mean over queries i in [L, T) that ``evaluate`` measures) is
F(T) = mean_{N=1}^{T-L} E_r[1 - w(N r)].  r is measured on 2L windows: for query i in [L, 2L),
r_i = (mean of a_ij over its i - L + 1 far keys) / (sum of a_ij over its L near keys) (the partition Z_i
cancels), and E_r is the mean over those queries.  Interval: percentile bootstrap over validation windows.
A1 fails when far scores drift with lag (RoPE's deterministic rotations; slow planes of every arm), A2 when
the layer's inputs change with context length (layers above the first see the diluted attention of the layer
below), and the prediction at 2L is in-sample (the same queries).

Degradation (C5 -> C7): the predicted loss of near attention at the longest length M, D = mean over heads of
-log(1 - F_pred(M)) = mean log(1 + M r)-type dilution, to be ranked against log ppl(M)/ppl(1x) over arms.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sparse
import torch

from accum.probes import analysis
from accum.probes.data import TokenData, eval_windows
from accum.probes.io import provenance, read_json, write_json
from accum.probes.model import ANGLE_ARMS, RANDOM_ARMS, TOKEN_ARMS, ProbeModel
from accum.probes.train import RESULTS, load_trained
from accum.probes.transforms import token_step_angles
from accum.simulations.families import make_family
from accum.simulations.params import ParamError, check_int, field_error
from accum.theory import far, so2, window
from accum.theory.forms import plane_angles

THEORY_RESULTS = "theory.json"
EVAL_RESULTS = "eval.json"
#: lags at which per-plane coherences are stored (0, 1, 2, 3, 4, 6, 8, ... up to L)
STORED_LAGS = 24


@dataclass(frozen=True)
class BridgeConfig:
    """windows: validation windows of 2 L tokens (the score statistics and the measured window); level: mass held
    by the measured window; eps: onset threshold of C_h(n); bootstrap: resamples of the windows; seed: the
    random arms' angle draws and the bootstrap."""

    windows: int = 16
    level: float = 0.9
    eps: float = 0.1
    bootstrap: int = 200
    seed: int = 0

    def __post_init__(self) -> None:
        check_int("windows", self.windows, 2, 4096)
        check_int("bootstrap", self.bootstrap, 20, 100_000)
        check_int("seed", self.seed, 0, 2**63 - 2)
        for name in ("level", "eps"):
            v = getattr(self, name)
            if not (isinstance(v, float) and 0.0 < v < 1.0):
                raise field_error(name, f"must be a number in (0, 1), got {v!r}")

    def to_dict(self) -> dict:
        return asdict(self)


# --- the realised family: per-plane coherence |psi_hb(n)| ---------------------------------------------------


def so2_family(arm: str, head_dim: int, base: float):
    """The built-in accum family of a rope or random arm's head: ``rope`` or ``so2-accumulated`` with law
    ``rope-uniform`` (theta_b ~ U(-omega_b, omega_b)); ``ParamError`` for the other arms."""
    if arm == "rope":
        return make_family("rope", dim=head_dim, base=base)
    if arm in RANDOM_ARMS:
        return make_family("so2-accumulated", dim=head_dim, law="rope-uniform", base=base)
    raise field_error("arm", f"{arm!r} has no built-in law (rope and random arms only)")


def law_coherence(arm: str, head_dim: int, base: float, n: int) -> np.ndarray:
    """|psi_b(t)| for t = 0..n of a rope or random arm, (n+1, P), from ``so2.path_characteristic``; the drift
    arms' step omega_b + U(-omega_b, omega_b) multiplies RoPE's and the uniform law's characteristics."""
    psi = so2.path_characteristic(plane_angles(so2_family(arm, head_dim, base)), n)
    if "drift" in arm:
        psi = psi * so2.path_characteristic(plane_angles(so2_family("rope", head_dim, base)), n)
    return np.abs(psi)


def fitted_chain(ids: np.ndarray, vocab: int) -> tuple[np.ndarray, sparse.csr_matrix]:
    """First-order Markov chain (pi, P) of a token sequence, made cyclic (the pair (x_N, x_1) added) so that the
    empirical pi is exactly stationary: P[x, y] = #(x -> y) / #x, pi[x] = #x / N.  P is sparse (V, V), rows of
    unseen tokens empty (pi = 0 there, so they never contribute)."""
    ids = np.asarray(ids, dtype=np.int64)
    if ids.ndim != 1 or ids.size < 2 or ids.min() < 0 or ids.max() >= vocab:
        raise field_error("ids", f"must be >= 2 token ids in [0, {vocab}), got {ids.size} ids")
    src, dst = ids, np.roll(ids, -1)
    counts = sparse.csr_matrix((np.ones(ids.size), (src, dst)), shape=(vocab, vocab))
    row = np.asarray(counts.sum(axis=1)).ravel()
    scale = sparse.diags(np.divide(1.0, row, out=np.zeros(vocab), where=row > 0))
    return row / ids.size, (scale @ counts).tocsr()


def token_angles(model: ProbeModel) -> np.ndarray:
    """theta_{l,h,x,b} = omega_b - pi tanh(E_{l,h}[x])_b of a learned arm, float64 (L, H, V, P)."""
    cfg = model.cfg
    omega = model.blocks[0].attn.omega
    rows = [b.attn.angle_table.weight.detach().double().view(cfg.vocab_size, cfg.n_heads, cfg.n_planes) for b in model.blocks]
    return torch.stack([token_step_angles(r, omega).permute(1, 0, 2) for r in rows]).numpy()


def chain_coherence(angles: np.ndarray, chain: tuple[np.ndarray, sparse.csr_matrix], n: int) -> np.ndarray:
    """|psi(t)| for t = 0..n of token angles (..., V, P) along a Markov chain, (..., n+1, P), all heads and planes
    at once through ``so2.chain_characteristic`` (phases (..., P, V))."""
    pi, p = chain
    lead, (v, planes) = angles.shape[:-2], angles.shape[-2:]
    phases = np.swapaxes(angles, -1, -2).reshape(-1, v)  # (... P, V) as rows: one function g per row
    psi = so2.chain_characteristic(pi, p, phases, n).reshape(*lead, planes, n + 1)
    return np.swapaxes(np.abs(psi), -1, -2)


def realised_coherence(model: ProbeModel, step_angles: list[torch.Tensor], val_ids: torch.Tensor, n: int) -> tuple[np.ndarray, str]:
    """Predicted |psi_{l,h,b}(t)|, t = 0..n, (L, H, n+1, P) for the model's arm, and the law's description.

    step_angles: per layer the (B, H, T, P) step angles of the model on validation windows (used by ``gain``)."""
    cfg = model.cfg
    shape = (cfg.n_layers, cfg.n_heads, n + 1, cfg.n_planes)
    if cfg.arm == "rope" or cfg.arm in RANDOM_ARMS:
        coh = law_coherence(cfg.arm, cfg.head_dim, cfg.rope_base, n)
        law = ("rope: deterministic omega" if cfg.arm == "rope" else
               "so2-accumulated rope-uniform" + (" times rope (drift)" if "drift" in cfg.arm else ""))
        return np.broadcast_to(coh, shape).copy(), law
    if cfg.arm in TOKEN_ARMS:
        chain = fitted_chain(val_ids.numpy(), cfg.vocab_size)
        return chain_coherence(token_angles(model), chain, n), "token table x Markov chain fitted on the validation text"
    lags = torch.arange(n + 1)
    coh = torch.stack([analysis.iid_coherence(a.cpu(), lags) for a in step_angles]).numpy()
    return coh, "empirical angles as an i.i.d. law (their marginal)"


# --- measurements on the 2 L windows ---------------------------------------------------------------------


def plane_norms(z: torch.Tensor) -> np.ndarray:
    """Per window the mean plane norm E_t |z_b| of queries or keys (B, H, T, d) -> (B, H, P) float64."""
    return z.unflatten(-1, (-1, 2)).norm(dim=-1).mean(dim=2).double().numpy()


def far_ratios(weights: torch.Tensor, far_lag: int) -> np.ndarray:
    """r_i = (mean far weight) / (near mass) for queries i in [far_lag, T): weights (B, H, T, T) -> (B, H, T - far_lag).

    Far keys of query i: j <= i - far_lag (i - far_lag + 1 of them); near keys: i - far_lag < j <= i.
    """
    t = weights.shape[-1]
    if t <= far_lag:
        raise field_error("weights", f"need windows longer than the far lag {far_lag}, got {t}")
    cum = weights.double().cumsum(-1)[:, :, far_lag:]  # (B, H, Q, T)
    i = torch.arange(far_lag, t)
    far_sum = cum[..., torch.arange(t - far_lag), i - far_lag]
    total = cum[..., torch.arange(t - far_lag), i]
    count = (i - far_lag + 1).double()
    return ((far_sum / count) / (total - far_sum)).numpy()


def extrapolated_far_mass(ratios: np.ndarray, far_lag: int, multipliers: list[int]) -> np.ndarray:
    """Per window the predicted far mass F(T) = mean_{N=1}^{T-L} mean_i [1 - w(N r_i)] at T = m L for each
    multiplier m >= 2: ratios (B, H, Q) -> (B, H, len(multipliers)); w = ``far.near_weight_from_mass``."""
    sizes = [m * far_lag - far_lag for m in multipliers]
    if not sizes or min(sizes) < 1:
        raise field_error("multipliers", f"must be integers >= 2, got {multipliers!r}")
    n_far = np.arange(1, max(sizes) + 1, dtype=float)
    out = np.empty(ratios.shape[:2] + (len(sizes),))
    for b in range(ratios.shape[0]):
        mass = 1.0 - far.near_weight_from_mass(ratios[b][..., None] * n_far)  # (H, Q, N)
        cum = np.cumsum(mass.mean(axis=1), axis=-1)  # (H, N): sum over N of the mean over queries
        out[b] = np.stack([cum[:, s - 1] / s for s in sizes], axis=-1)
    return out


def percentile_interval(samples: np.ndarray) -> list:
    """2.5% and 97.5% percentiles along axis 0 (bootstrap samples), as [lo, hi] lists over the other axes."""
    lo, hi = np.percentile(samples, [2.5, 97.5], axis=0)
    return np.stack([lo, hi], axis=-1).tolist()


def lag_grid(n: int) -> list[int]:
    """About ``STORED_LAGS`` lags 0, 1, 2, ... roughly geometric up to n (inclusive)."""
    grid = np.unique(np.round(np.geomspace(1, n, STORED_LAGS - 1)).astype(int))
    return [0, *grid.tolist()]


# --- one run ---------------------------------------------------------------------------------------------


@torch.no_grad()
def run_theory(model: ProbeModel, seq_len: int, val_ids: torch.Tensor, cfg: BridgeConfig,
               measured: dict | None = None) -> dict:
    """Predictions and measurements of one trained angle-arm model (module docstring).

    val_ids: the validation token ids; measured: the run's eval.json (its ``lengths``), or None (no far mass or
    perplexity measured: predictions at 2x..64x only).  Returns the ``theory.json`` body without provenance.
    """
    arm = model.cfg.arm
    if arm not in ANGLE_ARMS:
        raise field_error("arm", f"{arm!r} has no accumulated angle law; the bridge covers {', '.join(ANGLE_ARMS)}")
    check_int("seq_len", seq_len, 2)
    length = 2 * seq_len
    if val_ids.numel() < cfg.windows * length + 1:
        raise field_error("windows", f"{cfg.windows} windows of 2 x {seq_len} tokens need {cfg.windows * length + 1} "
                                     f"validation ids, the split has {val_ids.numel()}")
    multipliers = [2, 4, 8, 16, 32, 64] if measured is None else [r["multiplier"] for r in measured["lengths"]
                                                                     if r["multiplier"] >= 2]
    model.eval()
    x, _ = eval_windows(val_ids, length, cfg.windows * length)
    gen = torch.Generator().manual_seed(cfg.seed)
    uniforms = model.draw_noise(x.shape[0], length, gen)
    out = model(x, None, uniforms, need_weights=True)
    heads = analysis.head_inputs(model, x, uniforms)
    coh, law = realised_coherence(model, out.step_angles, val_ids, seq_len)
    grid = lag_grid(seq_len)
    rng = np.random.default_rng(cfg.seed)
    boot = rng.integers(cfg.windows, size=(cfg.bootstrap, cfg.windows))
    layers = []
    for layer, ((q, k), weights, angles) in enumerate(zip(heads, out.weights, out.step_angles)):
        qn, kn = plane_norms(q), plane_norms(k)
        c = torch.from_numpy(qn.mean(0) * kn.mean(0))
        c_boot = np.stack([qn[s].mean(0) * kn[s].mean(0) for s in boot])  # (boot, H, P)
        coh_l = torch.from_numpy(coh[layer])
        curve = analysis.coherent_fraction(c, coh_l).numpy()  # (H, L+1)
        w_pred = [window.width_from_curve(h[:seq_len]) for h in curve]
        w_pred_boot = np.array([[window.width_from_curve(h[:seq_len]) for h in
                                 analysis.coherent_fraction(torch.from_numpy(cb), coh_l).numpy()] for cb in c_boot])
        near = weights[:, :, :seq_len, :seq_len]
        w_meas = analysis.mixing_window(near, cfg.level).numpy()
        w_meas_boot = np.stack([analysis.mixing_window(near[s], cfg.level).numpy() for s in boot])
        ratios = far_ratios(weights, seq_len)
        f_win = extrapolated_far_mass(ratios, seq_len, multipliers)  # (B, H, M)
        f_boot = np.stack([f_win[s].mean(0) for s in boot])
        empirical = analysis.empirical_coherence(angles.cpu(), torch.tensor(grid)).numpy()  # (H, G, P)
        layer_out = {
            "plane_weights": c.tolist(),
            "coherence_pred": coh[layer][:, grid].tolist(), "coherence_empirical": empirical.tolist(),
            "coherent_fraction_pred": curve[:, grid].tolist(),
            "coherent_fraction_at_L": curve[:, seq_len].tolist(),
            "onset_pred": [None if math.isinf(v) else v for v in (window.crossing(h, cfg.eps) for h in curve)],
            "window_pred": w_pred, "window_pred_ci": percentile_interval(w_pred_boot),
            "window_measured": w_meas.tolist(), "window_measured_ci": percentile_interval(w_meas_boot),
            "far_mass_pred": f_win.mean(0).tolist(), "far_mass_pred_ci": percentile_interval(f_boot),
        }
        if measured is not None:
            by_mult = {r["multiplier"]: r["far_mass"] for r in measured["lengths"]}
            layer_out["far_mass_measured"] = [[by_mult[m][layer][h] for m in multipliers] for h in range(model.cfg.n_heads)]
        layers.append(layer_out)
    return {"arm": arm, "law": law, "seq_len": seq_len, "multipliers": multipliers, "lags": grid,
            "bridge_config": cfg.to_dict(), "layers": layers, **run_agreement(layers, multipliers, measured)}


def run_agreement(layers: list[dict], multipliers: list[int], measured: dict | None) -> dict:
    """The run's summary numbers: Spearman over heads of W^pred vs W (None when a side is constant), the
    fraction of heads whose coherent fraction at lag L is <= 0.5 (incoherence premise), the predicted
    degradation D = mean_h -log(1 - F_pred,h(M)) at the longest length, and with measurements the mean over
    heads of log(F_pred / F_meas) per multiplier and log ppl(M)/ppl(1x)."""
    pred = [w for la in layers for w in la["window_pred"]]
    meas = [w for la in layers for w in la["window_measured"]]
    rho = analysis.spearman(np.round(pred, 9), np.round(meas, 9))
    at_l = np.array([v for la in layers for v in la["coherent_fraction_at_L"]])
    f_pred = np.array([h for la in layers for h in la["far_mass_pred"]])  # (heads, M)
    out = {"spearman_window": None if math.isnan(rho) else rho, "incoherent_fraction": float(np.mean(at_l <= 0.5)),
           "degradation_pred": float(np.mean(-np.log1p(-f_pred[:, -1])))}
    if measured is not None:
        f_meas = np.array([h for la in layers for h in la["far_mass_measured"]])
        out["far_log_ratio"] = np.mean(np.log(f_pred / f_meas), axis=0).tolist()
        out["far_log_ratio_layers"] = [np.mean(np.log(np.array(la["far_mass_pred"]) / np.array(la["far_mass_measured"])),
                                               axis=0).tolist() for la in layers]
        ppl = {r["multiplier"]: r["ppl"] for r in measured["lengths"]}
        out["log_ppl_ratio"] = math.log(ppl[max(ppl)] / ppl[min(ppl)])
    return out


def theory_result(run_dir: Path, data: TokenData, device: str = "cpu", threads: int = 1,
                  cfg: BridgeConfig | None = None) -> dict | None:
    """``run_theory`` for the finished run in ``run_dir`` (weights, train.json, and eval.json when there is one)
    with its configs; None for an arm without an angle law.  cfg None: ``BridgeConfig()`` with at most the
    windows the validation split holds."""
    torch.set_num_threads(threads)
    res = read_json(Path(run_dir) / RESULTS)
    if res["config"]["arm"] not in ANGLE_ARMS:
        return None
    if cfg is None:
        fits = (data.val.numel() - 1) // (2 * res["config"]["seq_len"])
        cfg = BridgeConfig(windows=max(2, min(BridgeConfig.windows, fits)))
    t0 = time.perf_counter()
    model, tcfg = load_trained(run_dir, data.vocab_size, device)
    evaluation = Path(run_dir) / EVAL_RESULTS
    measured = read_json(evaluation) if evaluation.is_file() else None
    body = run_theory(model.cpu(), tcfg.seq_len, data.val, cfg, measured)
    return {**body, "train_config": tcfg.to_dict(), "eval_config": None if measured is None else measured["eval_config"],
            "seconds": time.perf_counter() - t0, "provenance": provenance(threads, "cpu")}


def write_theory(run_dir: Path, data: TokenData, device: str = "cpu", threads: int = 1) -> dict | None:
    """``theory_result`` written atomically to run_dir/theory.json (nothing for an arm without an angle law).
    The sweep calls this after evaluating each run."""
    result = theory_result(run_dir, data, device, threads)
    if result is not None:
        write_json(Path(run_dir) / THEORY_RESULTS, result)
    return result
