"""Prepared GPU benchmark (issue 16): stream ~1e9 far tokens for d = 64 through the torch backend.

    python -m accum.simulations.gpu_bench --device cuda --json gpu_bench.json           # 64 x 2^24 = 1.07e9 tokens
    python -m accum.simulations.gpu_bench --device cpu --far 65536 --samples 4           # a small dry run here

Times ``near_weight`` (far mass) and ``far_residual`` with angles drawn on the device
(so2-accumulated, Gaussian law, d = 64), and the bare draw of the same angles on the same device as their
floor; prints far tokens per second and the ratios, and writes them as JSON.  Until it has been run on a
GPU, docs/benchmarks.md says so: no figure here comes from a GPU.  Ctrl-C, SIGTERM (or ``timeout -s INT``) stops it
with one line, exit status 130 (143 for SIGTERM), and no JSON written (``accum.interrupts``, as for ``accum``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time

import numpy as np
import torch

from accum.interrupts import SignalPolicy

from . import backend_torch as bt
from . import estimators as est
from . import montecarlo as mc
from .families import make_family
from .params import ParamError, check_int, integer_option
from .results import reserve_output


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device: torch.device) -> float:
    """Wall-clock seconds of fn(), the device synchronised before and after."""
    synchronize(device)
    start = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - start


def draw_floor(family, far: int, samples: int, chunk: int, device: torch.device, seed: int) -> None:
    """The angle draws ``near_weight`` makes on ``device`` for one far size, and nothing else."""
    draw = bt.angle_sampler(family, device, bt.torch_generator(np.random.default_rng(seed), device))
    for b in mc.batches(samples, mc.stream_floats(mc.step_form(family), family.dim, chunk, far)):
        for start in range(0, far, chunk):
            draw(min(chunk, far - start), b)


def run(device_name: str, dim: int, far: int, samples: int, chunk: int, seed: int = 0) -> dict:
    device = bt.check_device(device_name)
    family = make_family("so2-accumulated", dim=dim)
    tokens = far * samples
    out = {"device": device_name, "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
           "dim": dim, "far": far, "samples": samples, "chunk": chunk, "far_tokens": tokens}
    out["draw_s"] = timed(lambda: draw_floor(family, far, samples, chunk, device, seed), device)
    result = {}

    def near():
        result["near"] = est.near_weight(family, [far], 4.0, samples, np.random.default_rng(seed), chunk=chunk, device=device_name)

    def resid():
        result["resid"] = est.far_residual(family, [far], samples, np.random.default_rng(seed), chunk=chunk, device=device_name)

    out["near_weight_s"] = timed(near, device)
    out["far_residual_s"] = timed(resid, device)
    for name in ("near_weight", "far_residual"):
        out[f"{name}_ratio"] = out[f"{name}_s"] / out["draw_s"]
        out[f"{name}_tokens_per_s"] = tokens / out[f"{name}_s"]
    out["near_weight"] = float(result["near"].mean[0])
    out["far_mass"] = float(result["near"].far_mass[0])
    out["far_residual"] = float(result["resid"].mean[0])
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m accum.simulations.gpu_bench", description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--dim", type=integer_option, default=64)
    p.add_argument("--far", type=integer_option, default=2**24, help="far tokens per sample (default 2^24)")
    p.add_argument("--samples", type=integer_option, default=64, help="samples (default 64: 1.07e9 far tokens)")
    p.add_argument("--chunk", type=integer_option, default=2**16, help="far tokens per kernel launch")
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    policy = SignalPolicy().install()
    try:
        for name in ("--dim", "--far", "--samples", "--chunk"):
            check_int(name, getattr(args, name[2:]), 1)
        if args.dim % 2 or args.samples < 2:
            raise ParamError(f"--dim must be even and --samples >= 2, got {args.dim} and {args.samples}")
        output = reserve_output(args.json, "--json") if args.json else contextlib.nullcontext()
        with output as saved:
            out = run(args.device, args.dim, args.far, args.samples, args.chunk)
            print(json.dumps(out, indent=1))
            if saved is not None:
                saved.write_json(out)
    except ParamError as err:
        print(f"gpu_bench: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gpu_bench: interrupted", file=sys.stderr)
        return policy.status
    finally:
        policy.uninstall()
    return 0


if __name__ == "__main__":
    sys.exit(main())
