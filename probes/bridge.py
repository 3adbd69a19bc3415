"""From a trained probe to accum's theory: what each head's step law predicts at lengths the model never saw, set
against what the model does (probes/REPORT.md, "Theory vs trained probes").  One ``theory.json`` per run
(``write_theory``; ``accum probe theory --run DIR ...``), aggregated over seeds by ``probes.theory_stats``.

Every arm, built-in or a family arm, is reduced to its heads' realised step laws (``probes.steplaw``: an accum
``Family`` per head, plus ALiBi's slope).  From one forward pass over ``windows`` validation windows of 2L tokens
(L = L_train) the bridge computes per layer and head:

* the A = I baseline: the same far-mass simulation with the head's law replaced by no rotation (its ALiBi bias
  kept; ``steplaw.without_rotation``): what the head's own statistics give without the transport;
* the law-based prediction (``probes.farlaw``, derivation there): far mass F_law(T) at every evaluated length from
  the step law, the head's queries and near partition functions and its key pool -- no far weight of the model is
  read; the coherent fraction C(L) and the premise C(L) <= 0.5 (incoherent far keys: C1, C4); the predicted window
  W_pred = sum_{n<L} C(n)^2 (C2); the simulated far-score sd against C4's sqrt(E|q|^2 E|k|^2 / d) / sqrt(d);
* the C3 transfer row (``probes.transfer``): F_C3(T) extrapolated from the head's own far attention at 2L, with the
  location/shape estimator whose bias is under 1% of F at 8x and 64x (tests);
* the measured window W (``analysis.mixing_window``: fewest lags holding ``level`` of the mass, queries in [L/2, L));
* with the run's eval.json: the measured far mass per length (``probes.evaluate``: mean over queries i >= L of the
  mass on keys j <= i - L) and the perplexities.

Run summaries (``run_summary``): per multiplier the mean over heads of log(F_pred / F_meas) and of
log((1 - F_pred) / (1 - F_meas)) (far masses clipped to [1e-4, 1 - 1e-4], ``FLOOR``) for the law and the C3 rows (all heads, per layer, and the law over the heads where
its premise holds), the share of heads where it holds, the Spearman correlation over heads of W_pred and W and the
range of W_pred, and the predicted degradation D = mean_h -log(1 - F_law,h(M)) at the longest length M beside the
measured log ppl(M)/ppl(1x).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from accum.probes import analysis, farlaw, steplaw, transfer
from accum.probes.data import TokenData, eval_windows
from accum.probes.io import provenance, read_json, write_json
from accum.probes.model import ProbeModel
from accum.probes.train import RESULTS, WEIGHTS, load_trained
from accum.simulations.params import check_int, field_error

THEORY_RESULTS = "theory.json"
EVAL_RESULTS = "eval.json"
#: the version of theory.json's contents: a file of another version is not current (``is_current``); version 3 adds
#: the A = I baseline per head (``far_mass_identity``)
VERSION = 3
#: the versions the report reads (``probes.theory_stats``): version 2 lacks only the A = I baseline
READABLE_VERSIONS = (2, 3)
#: lengths predicted when a run has no eval.json (multiples of L_train)
DEFAULT_MULTIPLIERS = (2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class BridgeConfig:
    """windows: validation windows of 2L tokens; level: mass held by the measured window; streams: simulated queries
    per head of the law-based far mass (``farlaw.far_curve``); queries: queries per head of the C3 extrapolation;
    seed: the random arms' angle draws, the law's paths and the resampling."""

    windows: int = 16
    level: float = 0.9
    streams: int = 128
    queries: int = 256
    seed: int = 0

    def __post_init__(self) -> None:
        check_int("windows", self.windows, 2, 4096)
        check_int("streams", self.streams, 8, 1_000_000)
        check_int("queries", self.queries, 8, 1_000_000)
        check_int("seed", self.seed, 0, 2**63 - 2)
        if not (isinstance(self.level, float) and 0.0 < self.level < 1.0):
            raise field_error("level", f"must be a number in (0, 1), got {self.level!r}")

    def to_dict(self) -> dict:
        return asdict(self)


def eval_multipliers(measured: dict | None) -> list[int]:
    """The evaluated multipliers >= 2 of an eval.json, or ``DEFAULT_MULTIPLIERS`` without one."""
    if measured is None:
        return list(DEFAULT_MULTIPLIERS)
    return [r["multiplier"] for r in measured["lengths"] if r["multiplier"] >= 2]


@torch.no_grad()
def layer_theory(model: ProbeModel, real: steplaw.Realised, layer: int, weights: torch.Tensor, seq_len: int,
                 multipliers: list[int], cfg: BridgeConfig, rng: np.random.Generator) -> dict:
    """Predictions and the measured window of one layer (module docstring); weights (B, H, 2L, 2L)."""
    q, k, _ = model.blocks[layer].attn.heads(real.inputs[layer])
    stats = farlaw.near_statistics(q, k, weights, seq_len)
    laws = [steplaw.head_law(model, real, layer, h) for h in range(model.cfg.n_heads)]
    heads = [farlaw.predict_head(law, stats[h], seq_len, multipliers, cfg.streams, rng) for h, law in enumerate(laws)]
    # the A = I baseline draws from its own stream, so the law's numbers are those of a bridge without it
    plain = np.random.default_rng([cfg.seed, 1, layer])
    identity = [farlaw.far_curve(steplaw.without_rotation(law), stats[h], seq_len, (max(multipliers) - 1) * seq_len,
                                 cfg.streams, plain).at(multipliers, seq_len) for h, law in enumerate(laws)]
    c3 = transfer.extrapolate(weights, seq_len, multipliers, cfg.queries, rng)
    measured_window = analysis.mixing_window(weights[:, :, :seq_len, :seq_len], cfg.level)
    return {"far_mass_law": [h["far_mass"] for h in heads], "far_mass_law_se": [h["far_mass_se"] for h in heads],
            "far_mass_c3": c3.tolist(), "far_mass_identity": identity,
            "coherent_at_L": [h["coherent_at_L"] for h in heads], "applies": [h["applies"] for h in heads],
            "window_pred": [h["window"] for h in heads], "window_measured": measured_window.tolist(),
            "far_score_sd": [h["far_score_sd"] for h in heads], "c4_sd": [h["c4_sd"] for h in heads],
            "law_source": heads[0]["source"]}


@torch.no_grad()
def run_theory(model: ProbeModel, seq_len: int, val_ids: torch.Tensor, cfg: BridgeConfig,
               measured: dict | None = None) -> dict:
    """Predictions and measurements of one trained model (module docstring).

    val_ids: the validation token ids; measured: the run's eval.json, or None (predictions at
    ``DEFAULT_MULTIPLIERS`` only).  Returns the ``theory.json`` body without configs and provenance."""
    check_int("seq_len", seq_len, 2)
    length = 2 * seq_len
    if val_ids.numel() < cfg.windows * length + 1:
        raise field_error("windows", f"{cfg.windows} windows of 2 x {seq_len} tokens need {cfg.windows * length + 1} "
                                     f"validation ids, the split has {val_ids.numel()}")
    multipliers = eval_multipliers(measured)
    model.eval()
    x, _ = eval_windows(val_ids, length, cfg.windows * length)
    uniforms = model.draw_noise(x.shape[0], length, torch.Generator().manual_seed(cfg.seed))
    out = model(x, None, uniforms, need_weights=True)
    real = steplaw.Realised(analysis.layer_inputs(model, x, uniforms), out.step_angles, val_ids.numpy())
    rng = np.random.default_rng(cfg.seed)
    layers = [layer_theory(model, real, index, w.cpu(), seq_len, multipliers, cfg, rng)
              for index, w in enumerate(out.weights)]
    if measured is not None:
        by_mult = {r["multiplier"]: r["far_mass"] for r in measured["lengths"]}
        for index, layer in enumerate(layers):
            layer["far_mass_measured"] = [[by_mult[m][index][h] for m in multipliers] for h in range(model.cfg.n_heads)]
    return {"arm": model.cfg.arm, "seq_len": seq_len, "multipliers": multipliers, "bridge_config": cfg.to_dict(),
            "layers": layers, **run_summary(layers, measured)}


#: far masses are compared within [FLOOR, 1 - FLOOR]: a head whose far mass is below 1e-4 on both sides (ALiBi's
#: steep heads: e^{-m L} underflows, and the measured value is a rounding residue that can be 0 or negative) agrees
FLOOR = 1e-4


def log_ratios(pred: np.ndarray, meas: np.ndarray) -> tuple[list[float], list[float]]:
    """Mean over heads (rows) of log(F_pred / F_meas) and log((1 - F_pred) / (1 - F_meas)), per multiplier, with both
    far masses clipped to [FLOOR, 1 - FLOOR]."""
    pred, meas = np.clip(pred, FLOOR, 1 - FLOOR), np.clip(meas, FLOOR, 1 - FLOOR)
    return (np.mean(np.log(pred / meas), axis=0).tolist(), np.mean(np.log((1 - pred) / (1 - meas)), axis=0).tolist())


def run_summary(layers: list[dict], measured: dict | None) -> dict:
    """The run's summary numbers (module docstring)."""
    law = np.array([h for la in layers for h in la["far_mass_law"]])  # (heads, M)
    applies = np.array([a for la in layers for a in la["applies"]])
    pred_w = np.array([w for la in layers for w in la["window_pred"]])
    meas_w = np.array([w for la in layers for w in la["window_measured"]])
    rho = analysis.spearman(np.round(pred_w, 9), np.round(meas_w, 9))
    out = {"applies_share": float(applies.mean()), "spearman_window": None if math.isnan(rho) else rho,
           "window_pred_range": float(pred_w.max() - pred_w.min()),
           "degradation_pred": float(np.mean(-np.log1p(-law[:, -1])))}
    if measured is None:
        return out
    meas = np.array([h for la in layers for h in la["far_mass_measured"]])
    c3 = np.array([h for la in layers for h in la["far_mass_c3"]])
    out["law_log_ratio"], out["law_near_log_ratio"] = log_ratios(law, meas)
    out["law_log_ratio_applies"] = log_ratios(law[applies], meas[applies])[0] if applies.any() else None
    out["c3_log_ratio"], out["c3_near_log_ratio"] = log_ratios(c3, meas)
    for name in ("law", "c3"):
        out[f"{name}_log_ratio_layers"] = [log_ratios(np.array(la[f"far_mass_{name}"]), np.array(la["far_mass_measured"]))[0]
                                           for la in layers]
    ppl = {r["multiplier"]: r["ppl"] for r in measured["lengths"]}
    out["log_ppl_ratio"] = math.log(ppl[max(ppl)] / ppl[min(ppl)])
    return out


def theory_result(run_dir: Path, data: TokenData, device: str = "cpu", threads: int = 1,
                  cfg: BridgeConfig | None = None) -> dict:
    """``run_theory`` for the finished run in ``run_dir`` (weights, train.json, and eval.json when there is one) with
    its configs.  cfg None: ``BridgeConfig()`` with at most the windows the validation split holds."""
    torch.set_num_threads(threads)
    res = read_json(Path(run_dir) / RESULTS)
    if cfg is None:
        fits = (data.val.numel() - 1) // (2 * res["config"]["seq_len"])
        cfg = BridgeConfig(windows=max(2, min(BridgeConfig.windows, fits)))
    t0 = time.perf_counter()
    model, tcfg = load_trained(run_dir, data.vocab_size, device)
    evaluation = Path(run_dir) / EVAL_RESULTS
    measured = read_json(evaluation) if evaluation.is_file() else None
    body = run_theory(model.cpu(), tcfg.seq_len, data.val, cfg, measured)
    return {**body, "version": VERSION, "train_config": tcfg.to_dict(),
            "eval_config": None if measured is None else measured["eval_config"],
            "seconds": time.perf_counter() - t0, "provenance": provenance(threads, "cpu")}


def is_current(run_dir: Path, target: Path | None = None, wanted: dict | None = None) -> bool:
    """Whether ``target`` (default run_dir/theory.json) is of this ``VERSION``, newer than the run's weights and
    eval.json and computed with the ``BridgeConfig`` values in ``wanted`` (field: value; its saved "bridge_config"),
    so that ``accum probe theory`` may skip the run."""
    target = Path(run_dir) / THEORY_RESULTS if target is None else Path(target)
    if not target.is_file():
        return False
    inputs = [Path(run_dir) / name for name in (WEIGHTS, EVAL_RESULTS, RESULTS)]
    newest = max((p.stat().st_mtime for p in inputs if p.is_file()), default=0.0)
    try:
        saved = read_json(target)
    except (ValueError, OSError):
        return False
    config = saved.get("bridge_config")
    same = all(isinstance(config, dict) and config.get(k) == v for k, v in (wanted or {}).items())
    return saved.get("version") == VERSION and same and target.stat().st_mtime >= newest


def summary_line(run_dir: Path, res: dict) -> str:
    """One line for ``accum probe theory``: the premise share and the law and C3 log ratios per length."""
    def rounded(values: list[float] | None) -> str:
        return "n/a (no eval.json)" if values is None else "[" + ", ".join(f"{v:+.3f}" for v in values) + "]"
    return (f"{run_dir}: {res['arm']}, premise holds in {res['applies_share']:.0%} of heads, law log ratio "
            f"{rounded(res.get('law_log_ratio'))}, C3 log ratio {rounded(res.get('c3_log_ratio'))}, {res['seconds']:.1f} s")


def write_theory(run_dir: Path, data: TokenData, device: str = "cpu", threads: int = 1) -> dict:
    """``theory_result`` written atomically to run_dir/theory.json.  The sweep calls this after evaluating each run."""
    result = theory_result(run_dir, data, device, threads)
    write_json(Path(run_dir) / THEORY_RESULTS, result)
    return result
