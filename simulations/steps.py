"""Batches of step transforms A_t and the accumulation engine on them.

A ``Steps`` object holds ``batch`` independent sequences of ``n_steps`` transforms of size d x d in a
structured form, and knows three accumulations (fast paths), each with a plain fp64 reference in
``simulations.reference``:

* ``transport(x)``:  x_t = A_t ... A_1 x for t = 0..n (x_0 = x), shape (batch, n+1, d).
* ``scores(q, k)``:  s_ij = q_i^T A_i ... A_{j+1} k_j for j <= i (fla / PaTH convention, token t carries
  step index t), shape (batch, T, T), NaN above the diagonal.
* ``dense()``:       the step matrices themselves, shape (batch, n, d, d) (the reference representation).

Forms: ``AngleSteps`` (block-diagonal SO(2), interleaved planes, see ``conventions``),
``HouseholderSteps`` (I - beta w w^T) and ``DenseSteps`` (anything else, e.g. a user family).  Each form owns its
algebra -- one step applied to a block of vectors (``apply``), the sandwich A X A^T, its second-moment operator
(``pair_operator``, ``simulations.pairs``), the value recurrence, orthogonality, storage sizes and the shapes of its
arrays -- so callers ask the form and never test its type.  The base ``StepShape`` gives the dense route, which
every form supports through ``dense()``; a list of chunks of mixed forms takes it (``common_form``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import numpy as np

from .pairs import AnglePair, DensePair, HouseholderPair
from .params import MAX_DENSE_DIM
from .scans import as_batch_sequence, mask_upper, chunked_scores, householder_scores


def _as_batch_vectors(x: np.ndarray, batch: int, dim: int, name: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.shape == (dim,):
        x = np.broadcast_to(x, (batch, dim))
    if x.shape != (batch, dim):
        raise ValueError(f"{name} must have shape ({dim},) or ({batch}, {dim}), got {x.shape}")
    return x


def to_complex_planes(x: np.ndarray) -> np.ndarray:
    """(..., d) real -> (..., d/2) complex, z_b = x_{2b} + i x_{2b+1} (interleaved pairing)."""
    return x[..., 0::2] + 1j * x[..., 1::2]


def from_complex_planes(z: np.ndarray) -> np.ndarray:
    """Inverse of ``to_complex_planes``: (..., d/2) complex -> (..., d) real."""
    out = np.empty(z.shape[:-1] + (2 * z.shape[-1],), dtype=np.float64)
    out[..., 0::2] = z.real
    out[..., 1::2] = z.imag
    return out


@functools.cache
def leading_field(form: type) -> str:
    """The name of a step form's first data field (its leading array; ClassVar settings are not fields), looked up
    once per form (``dataclasses.fields`` is slow on a hot path)."""
    return fields(form)[0].name


class StepShape:
    """The shape of a step form: ``batch`` sequences of ``n_steps`` steps, each d x d with d = ``dim``, read from
    the form's first field, an array (batch, n_steps, d / DIMS_PER_ENTRY, ...).

    The methods below are the dense route (through ``dense()``, O(d^2) or O(d^3) per step); a structured form
    overrides those it does faster.  ``form_name`` is the form's short name (records, memory model)."""

    DIMS_PER_ENTRY: ClassVar[int] = 1
    form_name: ClassVar[str] = "dense"
    #: the largest d this form is drawn at (None: no bound beyond memory); ``userfamily`` refuses larger draws
    MAX_DIM: ClassVar[int | None] = None

    def _leading(self) -> np.ndarray:
        return getattr(self, leading_field(type(self)))

    @property
    def batch(self) -> int:
        return self._leading().shape[0]

    @property
    def n_steps(self) -> int:
        return self._leading().shape[1]

    @property
    def dim(self) -> int:
        return self.DIMS_PER_ENTRY * self._leading().shape[2]

    # --- sizes (float64 numbers), asked of the form class before any step is drawn ---------------------------

    @classmethod
    def floats_per_step(cls, d: int) -> int:
        """float64 numbers one step stores: a d x d matrix."""
        return d * d

    @classmethod
    def product_floats(cls, d: int, n_steps: int) -> int:
        """Memory of one sample in ``estimators.mean_product_sq``: the transport of d basis vectors, (n+1) d^2."""
        return (n_steps + 1) * d * d

    # --- the steps' arrays --------------------------------------------------------------------------------

    def array_shapes(self, lead: tuple[int, int], d: int) -> dict[str, tuple[int, ...]]:
        """The shape each array field must have for ``lead`` = (batch, n_steps) and dim d, by field name."""
        return {"a": lead + (d, d)}

    def take(self, index: slice) -> Any:
        """The sequences ``index`` (a slice of the batch axis), in the same form."""
        return type(self)(*(getattr(self, f.name)[index] for f in fields(self)))

    def during(self, index: slice) -> Any:
        """The steps ``index`` (a slice of the step axis) of every sequence, in the same form: every field's axes are
        (batch, n_steps, ...) (``array_shapes``)."""
        return type(self)(*(getattr(self, f.name)[:, index] for f in fields(self)))

    def angles(self) -> np.ndarray | None:
        """The angles theta (batch, n_steps, d/2) of a block-SO(2) form; None for the other forms (their matrices
        may still be block rotations: ``theory.lattice`` reads angles from them)."""
        return None

    # --- one step at a time ----------------------------------------------------------------------------------

    def apply(self, t: int, m: np.ndarray) -> np.ndarray:
        """A_t m for m of shape (batch, d, r), the dense product (O(d^2 r) per sequence)."""
        return np.asarray(self.dense(), dtype=np.float64)[:, t] @ m

    def sandwich(self, x: np.ndarray, adjoint: bool = False) -> np.ndarray:
        """A_1 X A_1^T per sequence (or A_1^T X A_1 with ``adjoint``), x (d, d) or (batch, d, d) -> (batch, d, d).

        A X A^T = (A (A X)^T)^T, two products by ``apply``."""
        s = self.transposed() if adjoint else self
        x = np.broadcast_to(x, (s.batch,) + x.shape[-2:])
        y = s.apply(0, x)
        return np.swapaxes(s.apply(0, np.swapaxes(y, 1, 2)), 1, 2)

    def orthogonality_drift(self) -> np.ndarray:
        """||A_t^T A_t - I||_F per sequence and step, (batch, n_steps): the matrix itself."""
        a = np.asarray(self.dense(), dtype=np.float64)
        return np.linalg.norm(np.swapaxes(a, -1, -2) @ a - np.eye(self.dim), axis=(-2, -1))

    def sample_report(self, exact_dim: int) -> tuple[float, float]:
        """(max_ij |(A^T A - I)_ij|, max ||A||_2) over every step: ||A||_2 from eigvalsh(A^T A) for d <= exact_dim,
        above it the bound ||A||_2^2 = lambda_max(A^T A) <= 1 + ||A^T A - I||_2 <= 1 + d max|A^T A - I|."""
        d = self.dim
        a = np.asarray(self.dense()).astype(np.float64)
        gram = np.swapaxes(a, -1, -2) @ a
        ortho = float(np.max(np.abs(gram - np.eye(d))))
        if d <= exact_dim:
            return ortho, float(np.sqrt(np.max(np.linalg.eigvalsh(gram))))
        return ortho, float(np.sqrt(1.0 + d * ortho))

    def accumulate_values(self, u: np.ndarray, m: np.ndarray) -> np.ndarray:
        """U_t = A_t (U_{t-1} + m) over the steps, from U_0 = u (batch, d); returns the last U, (batch, d).
        Dense: a loop of matrix-vector products."""
        mats = self.dense()
        for t in range(self.n_steps):
            u = np.einsum("bij,bj->bi", mats[:, t], u + m)
        return u

    # --- sampled single steps (chunks of sequences of one step) ------------------------------------------

    @classmethod
    def pair_operator(cls, chunks: list) -> DensePair | AnglePair | HouseholderPair:
        """The sample operator X -> mean_i A_i X A_i^T of the single steps in ``chunks`` (``simulations.pairs``),
        in the cheapest form this form allows: dense here (any chunks, through ``dense()``)."""
        return DensePair(chunks)


def common_form(chunks: list) -> type:
    """The form class shared by every chunk, or ``DenseSteps`` (the route every form supports) when they differ."""
    form = type(chunks[0])
    return form if all(type(c) is form for c in chunks) else DenseSteps


@dataclass(frozen=True)
class AngleSteps(StepShape):
    """Block-diagonal SO(2) steps: plane b of step t rotates by theta[:, t, b].

    theta: float64 (batch, n_steps, d/2).  A_t = diag_b R(theta_tb); products are rotations by
    cumulative angles, so every accumulation costs O(n d) like plain RoPE.
    """

    theta: np.ndarray

    DIMS_PER_ENTRY: ClassVar[int] = 2  # theta[..., b] rotates the plane (2b, 2b+1)
    form_name: ClassVar[str] = "angle"

    @classmethod
    def floats_per_step(cls, d: int) -> int:
        """d/2 angles (at least 1)."""
        return max(1, d // 2)

    @classmethod
    def product_floats(cls, d: int, n_steps: int) -> int:
        """The angles with their cumulative sums and sines, 3 n d/2 per sample (``estimators.mean_product_sq``)."""
        return max(3 * n_steps * d // 2, 1)

    def array_shapes(self, lead: tuple[int, int], d: int) -> dict[str, tuple[int, ...]]:
        if d % 2:
            raise ValueError(f"AngleSteps need an even dim (SO(2) planes), got dim = {d}")
        return {"theta": lead + (d // 2,)}

    def angles(self) -> np.ndarray:
        return self.theta

    def apply(self, t: int, m: np.ndarray) -> np.ndarray:
        """A_t m for m (batch, d, r): rows (2b, 2b+1) of m rotated by theta_tb, O(d r) per sequence."""
        rot = np.exp(1j * self.theta[:, t])[:, :, None]
        z = rot * (m[:, 0::2, :] + 1j * m[:, 1::2, :])
        out = np.empty_like(m, dtype=float)
        out[:, 0::2, :], out[:, 1::2, :] = z.real, z.imag
        return out

    def orthogonality_drift(self) -> np.ndarray:
        """A^T A - I = diag_b (cos^2 + sin^2 - 1) I_2, so sqrt(2 sum_b (c_b^2 + s_b^2 - 1)^2) as evaluated in floating
        point, (batch, n_steps)."""
        err = np.cos(self.theta) ** 2 + np.sin(self.theta) ** 2 - 1.0
        return np.sqrt(2.0 * np.sum(err**2, axis=-1))

    def sample_report(self, exact_dim: int) -> tuple[float, float]:
        """Rotations by construction: (0, 1)."""
        return 0.0, 1.0

    def accumulate_values(self, u: np.ndarray, m: np.ndarray) -> np.ndarray:
        """Planewise in closed form (``accumulate_angle_values``)."""
        from .backend_torch import as_tensor  # torch on first use

        return accumulate_angle_values(as_tensor(self.theta), u, m)

    @classmethod
    def pair_operator(cls, chunks: list) -> AnglePair:
        return AnglePair(chunks)

    def dense(self) -> np.ndarray:
        c, s = np.cos(self.theta), np.sin(self.theta)
        out = np.zeros(self.theta.shape[:2] + (self.dim, self.dim))
        ev, od = np.arange(0, self.dim, 2), np.arange(1, self.dim, 2)
        out[..., ev, ev], out[..., ev, od] = c, -s
        out[..., od, ev], out[..., od, od] = s, c
        return out

    def transposed(self) -> "AngleSteps":
        return AngleSteps(-self.theta)

    def transport(self, x: np.ndarray) -> np.ndarray:
        """x_t = R(Theta_t) x with Theta_t = theta_1 + ... + theta_t (planewise)."""
        x = _as_batch_vectors(x, self.batch, self.dim, "x")
        cum = np.concatenate([np.zeros((self.batch, 1, self.dim // 2)), np.cumsum(self.theta, axis=1)], axis=1)
        return from_complex_planes(np.exp(1j * cum) * to_complex_planes(x)[:, None, :])

    def bilinear(self, q: np.ndarray, k: np.ndarray) -> np.ndarray:
        """q^T A_t ... A_1 k for t = 0..n, shape (batch, n+1), one cosine per plane and step.

        With c_b = conj(z_qb) z_kb (the planes of q and k as complex numbers) and Theta_t = theta_1 + .. + theta_t,
            q^T A_t ... A_1 k = sum_b Re(c_b e^{i Theta_tb}) = sum_b |c_b| cos(Theta_tb + arg c_b).
        The cumulative sum and the cosine run in torch's float64 kernels (``backend_torch.plane_cos_sum``:
        ~1 ns per cosine with full-range argument reduction, against ~11 ns for numpy's libm cosine), so the
        coherence estimator costs little more than drawing its angles.  This is its integrand.
        """
        from .backend_torch import as_tensor, cumulative_angles, phase_offset, plane_cos_sum, probe_coefficients  # torch on first use

        qb = _as_batch_vectors(q, self.batch, self.dim, "q")
        kb = _as_batch_vectors(k, self.batch, self.dim, "k")
        shared = np.ndim(q) == 1 and np.ndim(k) == 1
        coef_abs, coef_arg = probe_coefficients(qb[0], kb[0]) if shared else probe_coefficients(qb, kb)
        body = plane_cos_sum(cumulative_angles(as_tensor(self.theta), phase_offset(coef_arg)), coef_abs).numpy()
        first = np.sum(qb * kb, axis=1)
        return np.concatenate([first[:, None], body], axis=1)

    def scores(self, q: np.ndarray, k: np.ndarray) -> np.ndarray:
        """s_ij = (R(-Theta_i) q_i) . (R(-Theta_j) k_j): R(Theta_i - Theta_j) = R(Theta_i) R(Theta_j)^T."""
        q = as_batch_sequence(q, self.batch, self.n_steps, self.dim, "q")
        k = as_batch_sequence(k, self.batch, self.n_steps, self.dim, "k")
        back = np.exp(-1j * np.cumsum(self.theta, axis=1))
        qr = from_complex_planes(back * to_complex_planes(q))
        kr = from_complex_planes(back * to_complex_planes(k))
        return mask_upper(qr @ kr.transpose(0, 2, 1))


@dataclass(frozen=True)
class HouseholderSteps(StepShape):
    """PaTH steps A_t = I - beta_t w_t w_t^T with unit w_t.

    w: float64 (batch, n_steps, d) unit rows; beta: float64 (batch, n_steps) in [0, 2].
    Orthogonal only for beta in {0, 2}; for beta in (0, 2) A_t contracts along w_t by |1 - beta|.
    """

    w: np.ndarray
    beta: np.ndarray

    form_name: ClassVar[str] = "householder"

    @classmethod
    def floats_per_step(cls, d: int) -> int:
        """A direction w, d numbers."""
        return d

    def array_shapes(self, lead: tuple[int, int], d: int) -> dict[str, tuple[int, ...]]:
        return {"w": lead + (d,), "beta": lead}

    def orthogonality_drift(self) -> np.ndarray:
        """A^T A - I = (beta^2 |w|^2 - 2 beta) w w^T, Frobenius norm |beta^2 |w|^2 - 2 beta| |w|^2, (batch, n_steps)."""
        w2 = np.sum(self.w**2, axis=-1)
        return np.abs(self.beta**2 * w2 - 2.0 * self.beta) * w2

    def sample_report(self, exact_dim: int) -> tuple[float, float]:
        """A = I - b w w^T: singular values 1 (d - 1 times) and |1 - b |w|^2|; A^T A - I = b (b |w|^2 - 2) w w^T."""
        w, beta = self.w.astype(np.float64), self.beta.astype(np.float64)
        sq = np.sum(w * w, axis=-1)
        ortho = float(np.max(np.abs(beta * (beta * sq - 2.0)) * np.max(w * w, axis=-1)))
        top = float(max(1.0, np.max(np.abs(1.0 - beta * sq)))) if self.dim > 1 else float(np.max(np.abs(1.0 - beta * sq)))
        return ortho, top

    def accumulate_values(self, u: np.ndarray, m: np.ndarray) -> np.ndarray:
        """A_t x = x - beta_t w_t (w_t . x): O(d) per step, no dense matrix; steps read step-major."""
        w, beta = self.step_major()
        u = u + 0.0  # a fresh array, updated in place below
        for t in range(self.n_steps):
            u += m
            u -= (beta[t] * np.einsum("bd,bd->b", w[t], u))[:, None] * w[t]
        return u

    @classmethod
    def pair_operator(cls, chunks: list) -> HouseholderPair:
        return HouseholderPair(chunks)

    def dense(self) -> np.ndarray:
        eye = np.eye(self.dim)
        return eye - self.beta[..., None, None] * self.w[..., :, None] * self.w[..., None, :]

    def transposed(self) -> "HouseholderSteps":
        return self

    def apply(self, t: int, m: np.ndarray) -> np.ndarray:
        """A_t m for m of shape (batch, d, r): m - beta w (w^T m), O(d r) per sequence."""
        w = self.w[:, t, :]
        return m - (self.beta[:, t, None, None] * w[:, :, None]) * np.einsum("bd,bdr->br", w, m)[:, None, :]

    def step_major(self) -> tuple[np.ndarray, np.ndarray]:
        """Contiguous step-major copies (w (n_steps, batch, d), beta (n_steps, batch)), so a recursion over steps
        reads contiguous rows at each step."""
        return np.ascontiguousarray(self.w.transpose(1, 0, 2)), np.ascontiguousarray(self.beta.T)

    def transport(self, x: np.ndarray) -> np.ndarray:
        x = _as_batch_vectors(x, self.batch, self.dim, "x")
        out = np.empty((self.batch, self.n_steps + 1, self.dim))
        out[:, 0] = x
        cur = x.copy()
        for t in range(self.n_steps):
            w = self.w[:, t]
            cur = cur - (self.beta[:, t] * np.einsum("bd,bd->b", w, cur))[:, None] * w
            out[:, t + 1] = cur
        return out

    def bilinear(self, q: np.ndarray, k: np.ndarray) -> np.ndarray:
        """q^T A_t ... A_1 k for t = 0..n, shape (batch, n+1), by the rank-one recursion
            x_0 = k,   x_t = x_{t-1} - beta_t w_t (w_t^T x_{t-1}),   y_t = q^T x_t,
        O(n d) per sequence, keeping only x (batch, d): no (batch, n+1, d) path is written.  The steps are
        read step-major (``step_major``), so each step touches contiguous memory."""
        qb = _as_batch_vectors(q, self.batch, self.dim, "q")
        cur = _as_batch_vectors(k, self.batch, self.dim, "k").copy()
        w, beta = self.step_major()
        shared = np.ndim(q) == 1
        y = np.empty((self.n_steps + 1, self.batch))
        y[0] = np.einsum("bd,bd->b", qb, cur)
        for t in range(self.n_steps):
            cur -= (beta[t] * np.einsum("bd,bd->b", w[t], cur))[:, None] * w[t]
            if shared:
                np.matmul(cur, qb[0], out=y[t + 1])
            else:
                y[t + 1] = np.einsum("bd,bd->b", qb, cur)
        return y.T

    def scores(self, q: np.ndarray, k: np.ndarray, chunk: int | None = None) -> np.ndarray:
        return householder_scores(self, q, k, chunk)


@dataclass(frozen=True)
class DenseSteps(StepShape):
    """Arbitrary d x d steps given as matrices: a (batch, n_steps, d, d) float64; d <= ``params.MAX_DENSE_DIM``
    (its products are single numpy calls of d^3 work)."""

    MAX_DIM: ClassVar[int | None] = MAX_DENSE_DIM
    a: np.ndarray

    def dense(self) -> np.ndarray:
        return self.a

    def transposed(self) -> "DenseSteps":
        return DenseSteps(np.swapaxes(self.a, -1, -2))

    def transport(self, x: np.ndarray) -> np.ndarray:
        x = _as_batch_vectors(x, self.batch, self.dim, "x")
        out = np.empty((self.batch, self.n_steps + 1, self.dim))
        out[:, 0] = x
        cur = x[:, :, None]
        for t in range(self.n_steps):
            cur = self.a[:, t] @ cur
            out[:, t + 1] = cur[:, :, 0]
        return out

    def bilinear(self, q: np.ndarray, k: np.ndarray) -> np.ndarray:
        """q^T A_t ... A_1 k for t = 0..n, shape (batch, n+1), through ``transport(k)``."""
        q = _as_batch_vectors(q, self.batch, self.dim, "q")
        return np.einsum("btd,bd->bt", self.transport(k), q)

    def scores(self, q: np.ndarray, k: np.ndarray, chunk: int | None = None) -> np.ndarray:
        return chunked_scores(self, q, k, chunk)


def accumulate_angle_values(theta: Any, u: np.ndarray, m: np.ndarray) -> np.ndarray:
    """The recurrence U_t = A_t (U_{t-1} + m) for block-SO(2) steps with angles theta (batch, n, p) (a tensor).

    Planewise U_n = e^{i Theta_n} (u + m sum_{t<n} e^{-i Theta_t}), Theta_t = theta_1 + .. + theta_t, Theta_0 = 0;
    the sums C = sum cos Theta_t, S = sum sin Theta_t come from ``backend_torch.value_sums`` (on theta's device)
    and sum e^{-i Theta_t} = C - i S.
    """
    from .backend_torch import value_sums

    c_sum, s_sum, end = (t.cpu().numpy() for t in value_sums(theta))
    total = to_complex_planes(u) + to_complex_planes(m) * (c_sum - 1j * s_sum)
    return from_complex_planes(np.exp(1j * end) * total)
