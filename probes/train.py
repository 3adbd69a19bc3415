"""Training one probe arm at L_train with checkpoints that resume to the same result.

Optimiser: AdamW(beta = (0.9, 0.95)), linear warm-up over ``warmup`` steps to ``lr`` then cosine decay to
``lr * min_lr_ratio`` at ``steps``; gradient norm clipped at ``grad_clip``.  Randomness comes from three
torch Generators seeded from ``numpy.random.SeedSequence(seed).spawn(3)`` (init, batches, random-arm
angles); their states are checkpointed, so an interrupted run resumed from its checkpoint replays the
uninterrupted run exactly (same device and thread count).
"""

from __future__ import annotations

import io
import math
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file as safetensors_load
from safetensors.torch import save as safetensors_save
from tqdm import tqdm

from accum.probes.data import (SOURCES, TOKENIZERS, TokenData, bpe_data, char_data, check_bpe_vocab,
                               check_val_fraction, default_cache_dir, load_corpus, sample_batch)
from accum.probes.io import provenance, read_json, write_atomic, write_json
from accum.probes.model import TOKEN_ARMS, ModelConfig, ProbeModel
from accum.simulations.params import ParamError, check_int, field_error
from accum.simulations.results import ResultError

#: which parameters AdamW decays (``make_optimizer``)
DECAYS = ("matrices", "all")

CHECKPOINT = "checkpoint.pt"
WEIGHTS = "model.safetensors"
RESULTS = "train.json"


@dataclass(frozen=True)
class TrainConfig:
    """Everything that defines a training run; the defaults are the CPU preset (``presets.PRESETS['cpu']``).

    Flat on purpose (one command-line flag per field): it repeats every ``ModelConfig`` field but
    ``vocab_size``, which comes from the data, and ``model_config`` reads them by name.
    """

    arm: str = "rope"
    seq_len: int = 128
    batch_size: int = 32
    steps: int = 300
    lr: float = 2e-3
    angle_lr_scale: float = 1.0
    min_lr_ratio: float = 0.1
    warmup: int = 30
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    seed: int = 0
    d_model: int = 128
    n_heads: int = 4
    n_layers: int = 3
    mlp_ratio: int = 4
    rope_base: float = 10000.0
    path_rank: int = 16
    path_block: int = 32
    learned_token: str = "query"
    family: str = ""
    family_param: tuple[str, ...] = ()
    angle_weight_decay: float = 0.0
    init: str = "small"
    output: str = "tied"
    decay: str = "matrices"
    data_source: str = "auto"
    tokenizer: str = "bpe"
    bpe_vocab: int = 4096
    val_fraction: float = 0.05
    checkpoint_every: int = 50
    log_every: int = 25

    def __post_init__(self) -> None:
        """The training fields here; the architecture (arm included) by ``ModelConfig`` (``model_config``)."""
        object.__setattr__(self, "family_param", tuple(self.family_param))
        for name, low, high in (("seq_len", 2, 2**16), ("batch_size", 1, 2**16), ("steps", 1, 10**8),
                                ("warmup", 0, 10**8), ("seed", 0, 2**63 - 1), ("checkpoint_every", 1, 10**8),
                                ("log_every", 1, 10**8)):
            check_int(name, getattr(self, name), low, high)
        if self.data_source not in SOURCES:
            raise field_error("data_source", f"must be one of {', '.join(SOURCES)}, got {self.data_source!r}")
        if self.decay not in DECAYS:
            raise field_error("decay", f"must be one of {', '.join(DECAYS)}, got {self.decay!r}")
        if self.tokenizer not in TOKENIZERS:
            raise field_error("tokenizer", f"must be one of {', '.join(TOKENIZERS)}, got {self.tokenizer!r}")
        check_bpe_vocab(self.bpe_vocab)
        check_val_fraction(self.val_fraction)
        for name, low, high in (("lr", 0.0, 1.0), ("angle_lr_scale", 0.0, 1e4), ("min_lr_ratio", 0.0, 1.0),
                                ("weight_decay", 0.0, 10.0), ("angle_weight_decay", 0.0, 10.0), ("grad_clip", 0.0, 1e6)):
            v = getattr(self, name)
            closed = name in ("min_lr_ratio", "angle_weight_decay")
            if not (isinstance(v, (int, float)) and low <= v <= high and (closed or v > low)):
                raise field_error(name, f"must be a number in ({low}, {high}], got {v!r}")
        self.model_config(2)

    def model_config(self, vocab_size: int) -> ModelConfig:
        """The architecture: every ``ModelConfig`` field is taken from this config, except the data's vocab size."""
        arch = {f.name: getattr(self, f.name) for f in fields(ModelConfig) if f.name != "vocab_size"}
        return ModelConfig(vocab_size=vocab_size, **arch)

    def to_dict(self) -> dict:
        return {**asdict(self), "family_param": list(self.family_param)}

    @classmethod
    def normalised(cls, d: dict) -> dict:
        """``d`` (a saved config, perhaps written before a field existed) with every missing field at its
        default, so that a run saved before a field was added compares equal to the same run today."""
        return cls.from_dict(d).to_dict()

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ParamError(f"unknown TrainConfig fields {unknown}; allowed: {sorted(names)}")
        return cls(**d)


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Learning rate for optimiser step ``step`` (0-based): warm-up, then cosine to lr * min_lr_ratio."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    frac = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))


def seeded_generators(seed: int, n: int = 3) -> list[torch.Generator]:
    """Independent torch Generators from ``SeedSequence(seed).spawn(n)``."""
    seqs = np.random.SeedSequence(seed).spawn(n)
    return [torch.Generator().manual_seed(int(s.generate_state(1, dtype=np.uint64)[0] >> 1)) for s in seqs]


def check_train_split(data: TokenData, seq_len: int) -> None:
    """Training windows need seq_len + 1 consecutive training ids; ``ParamError`` naming seq_len otherwise."""
    if data.train.numel() < seq_len + 1:
        raise field_error("seq_len", f"{seq_len} needs {seq_len + 1} training tokens; the training split has "
                                     f"{data.train.numel()}")


def build_model(cfg: TrainConfig, vocab_size: int) -> ProbeModel:
    init_gen = seeded_generators(cfg.seed)[0]
    return ProbeModel(cfg.model_config(vocab_size), init_gen)


def make_optimizer(model: ProbeModel, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay ``weight_decay`` on matrices, none on LayerNorm and biases (``decay`` "matrices"),
    or on every parameter (``decay`` "all": the author's one group, LayerNorm, biases and embedding included).

    The learned arms' angle tables form their own group: rate ``angle_lr_scale`` times the schedule's (each group's
    ``lr_scale``; ``lr_at`` gives the schedule), weight decay ``angle_weight_decay`` (decay pulls every token's
    angle back towards RoPE's).  The author's public code trains the tables in the one AdamW group: scale 1 and
    decay 0.1; probes/REPORT.md gives the measurements behind the scale and decay the sweep's arms use."""
    def is_table(name: str) -> bool:
        return "angle_table" in name
    named = list(model.named_parameters())
    decayed = (lambda p: True) if cfg.decay == "all" else (lambda p: p.dim() >= 2)
    decay = [p for n, p in named if decayed(p) and not is_table(n)]
    rest = [p for n, p in named if not decayed(p) and not is_table(n)]
    tables = [p for n, p in named if is_table(n)]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay, "lr_scale": 1.0},
              {"params": rest, "weight_decay": 0.0, "lr_scale": 1.0}]
    if tables:
        groups.append({"params": tables, "weight_decay": cfg.angle_weight_decay, "lr_scale": cfg.angle_lr_scale})
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95))


def batch_loss(model: ProbeModel, x: torch.Tensor, y: torch.Tensor, noise: torch.Tensor | None) -> torch.Tensor:
    """Mean next-token cross entropy (nats) over all positions."""
    logits = model(x, None, noise).logits
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def load_data(cfg: TrainConfig, cache_dir: Path | None) -> tuple[TokenData, dict]:
    """The corpus of ``cfg.data_source`` split by ``cfg.val_fraction`` and tokenised by ``cfg.tokenizer``;
    returns (data, provenance of the text and the tokenizer)."""
    corpus = load_corpus(cfg.data_source, cache_dir)
    meta = {"source": corpus.source, **corpus.meta}
    if cfg.tokenizer == "char":
        data = char_data(corpus.text, cfg.val_fraction)
        return data, {**meta, "tokenizer": "char", "vocab_size": data.vocab_size,
                      "train_tokens": data.train.numel(), "val_tokens": data.val.numel()}
    data = bpe_data(corpus.text, cfg.val_fraction, cfg.bpe_vocab, default_cache_dir() if cache_dir is None else cache_dir)
    return data, {**meta, **data.meta}


def estimate_train_bytes(cfg: TrainConfig, vocab_size: int) -> int:
    """Upper estimate of one training step's peak memory (bytes, fp32), assuming explicit T x T scores.

    Per layer, kept for the backward pass: B T d (12 + 2 mlp_ratio) activations and B H T^2 x 3 (scores,
    probabilities, their gradient); logits B T V x 3 (logits, softmax, gradient); parameters with AdamW
    state x 4.  SDPA kernels may need less; this is the bound used to refuse work that cannot fit.
    """
    b, t, d, h, n_layers = cfg.batch_size, cfg.seq_len, cfg.d_model, cfg.n_heads, cfg.n_layers
    per_layer = b * t * d * (12 + 2 * cfg.mlp_ratio) + 3 * b * h * t * t
    params = vocab_size * d + n_layers * (4 + 2 * cfg.mlp_ratio) * d * d
    return 4 * (n_layers * per_layer + 3 * b * t * vocab_size + 4 * params)


def check_train_memory(cfg: TrainConfig, vocab_size: int, limit_bytes: int) -> None:
    """``ParamError`` naming seq_len and batch_size when ``estimate_train_bytes`` exceeds ``limit_bytes``."""
    need = estimate_train_bytes(cfg, vocab_size)
    if need > limit_bytes:
        raise ParamError(f"{{seq_len}} {cfg.seq_len} with {{batch_size}} {cfg.batch_size} needs an estimated "
                         f"{need / 2**30:.1f} GiB per training step, more than the {limit_bytes / 2**30:.1f} GiB "
                         "allowed (lower {seq_len} or {batch_size}, or raise {max_memory_gb})",
                         ("seq_len", "batch_size", "max_memory_gb"))


@torch.no_grad()
def angle_spread(model: ProbeModel) -> list[float] | None:
    """Learned arms: per plane b, the standard deviation over token ids of the step angle's deviation from
    RoPE, pi tanh(E[v])_b, averaged over layers and heads: (P,) in radians (0 at init).  None otherwise."""
    if model.cfg.arm not in TOKEN_ARMS:
        return None
    cfg = model.cfg
    devs = [torch.pi * torch.tanh(b.attn.angle_table.weight.double()).view(cfg.vocab_size, cfg.n_heads, cfg.n_planes)
            for b in model.blocks]
    return torch.stack(devs).std(dim=1).mean(dim=(0, 1)).tolist()


def _save_checkpoint(path: Path, model, opt, gens, step: int, tokens: int, history: list, elapsed: float,
                     cfg: TrainConfig) -> None:
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                "generators": [g.get_state() for g in gens], "step": step, "tokens_seen": tokens,
                "history": history, "train_seconds": elapsed, "config": cfg.to_dict()}, buf)
    write_atomic(path, buf.getvalue())


#: what a checkpoint holds (``_save_checkpoint``) and a resume reads
CHECKPOINT_KEYS = ("model", "optimizer", "generators", "step", "tokens_seen", "history", "train_seconds", "config")


def first_line(err: BaseException) -> str:
    """An exception's message cut to the first sentence of its first line (torch and safetensors write paragraphs)."""
    return (str(err).strip().splitlines() or [type(err).__name__])[0].split(". ")[0]


def load_checkpoint(path: Path) -> dict:
    """torch.load(weights_only=True) of a training checkpoint; ``ResultError`` naming the file when it is not one
    (truncated, zeroed, another format) or lacks a field a resume reads (``CHECKPOINT_KEYS``)."""
    try:
        ck = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises RuntimeError, UnpicklingError, EOFError, ... for a damaged file
        raise ResultError(f"{path}: not a readable training checkpoint ({first_line(err)})") from None
    missing = [k for k in CHECKPOINT_KEYS if not isinstance(ck, dict) or k not in ck]
    if missing:
        raise ResultError(f"{path}: not a training checkpoint of `accum probe train` (no {missing[0]!r} entry)")
    return ck


def resume_state(path: Path, cfg: TrainConfig) -> dict | None:
    """The checkpoint at ``path`` that training ``cfg`` resumes from, None when there is none; ``ResultError``
    naming the file when it is damaged or was written with another config (its first differing field)."""
    if not path.exists():
        return None
    ck = load_checkpoint(path)
    try:
        saved = TrainConfig.normalised(ck["config"])
    except (ParamError, TypeError, AttributeError) as err:
        raise ResultError(f"{path}: its config is not a training config ({first_line(err)})") from None
    wanted = cfg.to_dict()
    differ = next((k for k in wanted if saved.get(k) != wanted[k]), None)
    if differ is not None:
        raise ResultError(f"{path} was written with another config ({differ}: {saved.get(differ)!r} there, "
                          f"{wanted[differ]!r} asked)")
    return ck


def check_weights(path: Path) -> None:
    """``ResultError`` naming ``path`` unless it is a complete safetensors file: its header is read (safetensors
    bounds its size and checks that the tensors cover the file), no tensor is."""
    try:
        with safe_open(str(path), "pt") as f:
            f.keys()
    except (SafetensorError, OSError) as err:
        raise ResultError(f"{path}: not a safetensors weights file ({first_line(err)})") from None


def train(cfg: TrainConfig, out_dir: Path, *, data: TokenData | None = None, data_meta: dict | None = None,
          cache_dir: Path | None = None, device: str = "cpu", threads: int = 2, stop_after: int | None = None,
          progress: bool = True, preset: str | None = None) -> dict:
    """Train (or resume) one arm into ``out_dir``; return the results dict also written to train.json.

    out_dir/checkpoint.pt is resumed when present (``resume_state``: its config must equal ``cfg``).  stop_after:
    stop once this many optimiser steps are done in total (simulates an interruption; the checkpoint is written).
    preset: the preset the config was built from, recorded for ``accum probe eval``'s defaults.
    Returns {"config", "model_config", "tokens_seen", "lr", "timings", "history", "final_train_loss", ...}.
    """
    torch.set_num_threads(threads)
    out_dir = Path(out_dir)
    if data is None:
        data, data_meta = load_data(cfg, cache_dir)
    check_train_split(data, cfg.seq_len)
    model = build_model(cfg, data.vocab_size).to(device)
    opt = make_optimizer(model, cfg)
    gens = seeded_generators(cfg.seed)
    step, tokens, history, elapsed_before = 0, 0, [], 0.0
    ckpt_path = out_dir / CHECKPOINT
    ck = resume_state(ckpt_path, cfg)
    if ck is not None:
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        for g, s in zip(gens, ck["generators"]):
            g.set_state(s)
        step, tokens, history, elapsed_before = ck["step"], ck["tokens_seen"], ck["history"], ck["train_seconds"]
    _, data_gen, noise_gen = gens
    last = cfg.steps if stop_after is None else min(cfg.steps, stop_after)
    start_time = time.perf_counter()
    bar = tqdm(total=cfg.steps, initial=step, desc=f"train {cfg.arm}", disable=not progress, unit="step")
    model.train()
    while step < last:
        lr = lr_at(step, cfg)
        for group in opt.param_groups:
            group["lr"] = lr * group["lr_scale"]
        x, y = sample_batch(data.train, cfg.batch_size, cfg.seq_len, data_gen)
        noise = model.draw_noise(cfg.batch_size, cfg.seq_len, noise_gen)
        loss = batch_loss(model, x.to(device), y.to(device), None if noise is None else noise.to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        step += 1
        tokens += x.numel()
        if step % cfg.log_every == 0 or step == cfg.steps:
            history.append({"step": step, "loss": loss.item(), "lr": lr, "angle_spread": angle_spread(model)})
        bar.update(1)
        bar.set_postfix(loss=f"{loss.item():.3f}")
        if step % cfg.checkpoint_every == 0 or step == last:
            elapsed = elapsed_before + time.perf_counter() - start_time
            _save_checkpoint(ckpt_path, model, opt, gens, step, tokens, history, elapsed, cfg)
    bar.close()
    elapsed = elapsed_before + time.perf_counter() - start_time
    results = {"config": cfg.to_dict(), "model_config": model.cfg.to_dict(), "seed": cfg.seed, "step": step,
               "finished": step >= cfg.steps, "tokens_seen": tokens,
               "lr": {"peak": cfg.lr, "final": lr_at(max(step - 1, 0), cfg), "schedule": "warmup+cosine"},
               "timings": {"train_seconds": elapsed, "seconds_per_step": elapsed / max(step, 1),
                           "tokens_per_second": tokens / max(elapsed, 1e-9)},
               "angle_spread": angle_spread(model),
               "history": history, "final_train_loss": history[-1]["loss"] if history else None,
               "n_params": sum(p.numel() for p in model.parameters()), "data": data_meta or {},
               "provenance": provenance(threads, device), **({} if preset is None else {"preset": preset})}
    if results["finished"]:
        write_atomic(out_dir / WEIGHTS, safetensors_save({k: v.contiguous().cpu() for k, v in model.state_dict().items()}))
    write_json(out_dir / RESULTS, results)
    return results


def load_trained(out_dir: Path, vocab_size: int, device: str = "cpu") -> tuple[ProbeModel, TrainConfig]:
    """Model and config of a finished run in ``out_dir`` (weights from model.safetensors); ``ResultError`` naming
    the weights file when it is damaged or holds another model's tensors."""
    res = read_json(Path(out_dir) / RESULTS)
    cfg = TrainConfig.from_dict(res["config"])
    model = build_model(cfg, vocab_size)
    path = Path(out_dir) / WEIGHTS
    check_weights(path)
    try:
        state = safetensors_load(str(path))
    except SafetensorError as err:
        raise ResultError(f"{path}: not a safetensors weights file ({first_line(err)})") from None
    mismatch = state_mismatch(state, model.state_dict())
    if mismatch:
        raise ResultError(f"{path}: not the weights of this run's model ({mismatch})")
    model.load_state_dict(state)
    return model.to(device).eval(), cfg


def state_mismatch(state: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> str | None:
    """The first way ``state`` is not a state dict of ``expected``'s names and shapes, in words; None if it is."""
    for name, tensor in expected.items():
        if name not in state:
            return f"no tensor {name!r}"
        if state[name].shape != tensor.shape:
            return f"tensor {name!r} of shape {list(state[name].shape)}, the model's is {list(tensor.shape)}"
    extra = sorted(set(state) - set(expected))
    return f"a tensor {extra[0]!r} the model does not have" if extra else None
