"""Torch kernels for block-SO(2) accumulations, on the CPU or a GPU, always in float64.

Why torch: on x86 CPUs numpy evaluates float64 cos/sin through libm at ~11 ns per number, while torch's
vectorised (SLEEF, 1-ulp) kernels take ~1 ns with full-range argument reduction, and its cumulative sum
along the step axis is faster too.  The SO(2) fast paths (``AngleSteps.bilinear``, the streaming
estimators) therefore do their arithmetic here whatever draws the angles.

Two sources of angles, one set of kernels:

* ``device=None`` (the default): angles are drawn by the family's numpy ``rng`` exactly as before and
  wrapped without a copy (``torch.from_numpy``); results agree with the plain numpy/complex forms to
  rounding (~1e-15 relative).
* ``device="cpu"|"cuda"`` (the torch backend): angles are drawn by a ``torch.Generator`` on that device,
  seeded once from the estimator's numpy ``rng`` (``torch_generator``), so a run is reproducible from its
  seed, but the random stream differs from the numpy one: results agree within standard errors, and
  bit-for-bit when the same angles are fed to both (tests/simulations/test_backend_torch.py).

Plane convention as everywhere (``conventions``): plane b holds coordinates (2b, 2b+1), z_b = x_2b + i x_2b+1.
"""

from __future__ import annotations

import math
import re
from typing import Callable

import numpy as np
import torch

from .params import ParamError

def check_device(device: str | None) -> torch.device | None:
    """None (numpy draws) or a torch device named 'cpu', 'cuda' or 'cuda:i' that exists here."""
    if device is None:
        return None
    if not isinstance(device, str) or not re.fullmatch(r"cpu|cuda(:\d+)?", device):
        raise ParamError(f"device must be one of cpu, cuda, cuda:INDEX (or omitted for numpy draws), got {device!r}")
    if device.startswith("cuda"):
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        index = int(device.split(":")[1]) if ":" in device else 0
        if index >= count:
            raise ParamError(f"device must be cpu here: {count} CUDA device(s) available (got {device!r})")
    return torch.device(device)


def torch_generator(rng: np.random.Generator, device: torch.device) -> torch.Generator:
    """A torch Generator on ``device`` seeded by one 63-bit draw from ``rng`` (reproducible from the seed)."""
    gen = torch.Generator(device=device)
    gen.manual_seed(int(rng.integers(2**63 - 1)))
    return gen


def angle_sampler(family, device: torch.device, gen: torch.Generator) -> Callable[[int, int], torch.Tensor]:
    """draw(n_steps, batch) -> theta (batch, n_steps, d/2) float64 on ``device``: the family's own torch sampler.

    A family whose steps are angles drawn on a device says how with ``torch_angle_sampler(device, gen)`` (``rope``:
    theta = omega, no randomness; ``so2-accumulated``: its angle law's ``torch_sampler``, which refuses a law
    without one); any other family is refused (ParamError): use device=None for numpy draws.
    """
    sampler = getattr(family, "torch_angle_sampler", None)
    if sampler is None:
        raise ParamError(f"the torch backend draws rope and so2-accumulated only (families with a torch_angle_sampler), "
                         f"got {getattr(family, 'name', type(family).__name__)}; use numpy draws for it")
    return sampler(device, gen)


def as_tensor(x: np.ndarray | torch.Tensor, device: torch.device | None = None) -> torch.Tensor:
    """float64 tensor view of a numpy array (no copy on the CPU) or the tensor itself, on ``device``."""
    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64)) if isinstance(x, np.ndarray) else x
    return t if device is None else t.to(device)


def wrap_angle(theta: torch.Tensor) -> torch.Tensor:
    """theta - 2 pi rint(theta / 2 pi), in [-pi, pi]: carried angles stay small over any number of chunks."""
    return theta - (2 * math.pi) * torch.round(theta / (2 * math.pi))


def cumulative_angles(theta: torch.Tensor, offset: torch.Tensor | None = None) -> torch.Tensor:
    """offset + theta_1 + ... + theta_t, t = 1..n: (batch, n, p) from theta (batch, n, p), offset (p,) or (batch, p).

    The offset is one pass over the result, skipped when None (e.g. an all-zero probe phase).
    """
    cum = torch.cumsum(theta, dim=1)
    if offset is not None:
        cum += offset if offset.dim() == 1 else offset[:, None, :]
    return cum


def plane_cos_sum(cum: torch.Tensor, coef_abs: torch.Tensor) -> torch.Tensor:
    """y_t = sum_b |c_b| cos(phi_tb), (batch, n) from phases phi = cum (batch, n, p), which it overwrites.

    With phi_tb = Theta_tb + arg c_b and c_b = conj(z_qb) z_kb this is q^T R(Theta_t) k (R block-diagonal,
    plane b rotated by Theta_tb): pass arg c as the offset of ``cumulative_angles``.  coef_abs: (p,) or (batch, p).
    """
    torch.cos(cum, out=cum)
    if coef_abs.dim() == 1:
        return cum @ coef_abs
    return torch.einsum("bnp,bp->bn", cum, coef_abs)


def phase_offset(coef_arg: torch.Tensor) -> torch.Tensor | None:
    """arg c_b as an angle offset, or None when every phase is zero (q = k): saves a pass over the angles."""
    return None if not bool(torch.any(coef_arg != 0)) else coef_arg


def probe_coefficients(q: np.ndarray, k: np.ndarray, device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """|c_b| and arg c_b of c_b = conj(z_qb) z_kb for q, k of shape (..., d): the planes' bilinear weights."""
    zq = q[..., 0::2] + 1j * q[..., 1::2]
    zk = k[..., 0::2] + 1j * k[..., 1::2]
    coef = np.conj(zq) * zk
    return as_tensor(np.abs(coef), device), as_tensor(np.angle(coef), device)


def far_logits(theta: torch.Tensor, start: torch.Tensor, coef_abs: torch.Tensor, coef_arg: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """Far scores of one chunk and the carried angle: (q^T R(Theta_Delta) k for the chunk's Delta, Theta_end).

    theta (batch, n, p) are the chunk's step angles, start (batch, p) the angle carried in (reduced to
    [-pi, pi]).  Returns y (batch, n) and wrap(Theta_n) (batch, p).  One cos per plane and step.
    """
    cum = cumulative_angles(theta, start + coef_arg)
    end = wrap_angle(cum[:, -1] - coef_arg)
    return plane_cos_sum(cum, coef_abs), end


def value_sums(theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For U_n = e^{i Theta_n} (u + m sum_{t<n} e^{-i Theta_t}) (``AngleSteps.accumulate_values``):
    returns (sum_{t=0}^{n-1} cos Theta_t, sum_{t=0}^{n-1} sin Theta_t, Theta_n), each (batch, p), Theta_0 = 0.
    """
    cum = torch.cumsum(theta, dim=1)
    end = cum[:, -1].clone()
    before = cum[:, :-1]
    cos_sum = 1.0 + torch.cos(before).sum(dim=1)
    sin_sum = torch.sin(before).sum(dim=1)
    return cos_sum, sin_sum, end
