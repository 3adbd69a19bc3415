"""Sample second-moment operators of single steps, one per step form: X -> mean_i A_i X A_i^T (``left``), its adjoint
X -> mean_i A_i^T X A_i (``right``), the per-sample values <U, A_i V A_i^T> (``values``), the flops of one
application (``cost``), and the coherent direction kappa = max_{|q|=1} ||Pi_F vec(q q^T)||^2 read from the form's
fixed space F where the form allows it at any d (``coherent_direction``: None sends the caller to the explicit
fixed space, ``theory.fixedspace``).  Built by ``Steps.pair_operator(chunks)`` from chunks of single steps
(``family.sample(rng, 1, M)``); ``theory.gaps`` and ``theory.checks`` use them.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from .params import pieces

#: a vector is fixed (A X A^T = X) to this tolerance
FIXED_TOL = 1e-9
#: flops of one piece of a long matrix product (``row_blocks``): about 0.1 s on one core at 15-20 GFLOP/s, and
#: still a block of rows big enough for BLAS to run near full speed (64 rows at d = 4096)
PRODUCT_PIECE_FLOPS = 2e9
#: elements of one piece of a d x d result (8 MB of float64): memory-bound work on a 4096 x 4096 matrix, ~1 s on
#: one core, goes in pieces of well under 0.1 s
PIECE_ELEMENTS = 2**20


def row_blocks(rows: int, row_flops: float, row_elements: int) -> list[slice]:
    """Slices of ``range(rows)``, in order, of at most ``PRODUCT_PIECE_FLOPS`` flops and ``PIECE_ELEMENTS`` result
    elements each (at least one row): a d x d result computed a block of rows at a time, so Ctrl-C is acted on
    between blocks (one d x d product at d = 4096 is ~137 GFLOP, seconds of a single BLAS call that no signal
    handler can interrupt)."""
    step = max(1, int(min(PRODUCT_PIECE_FLOPS // max(row_flops, 1.0), PIECE_ELEMENTS // max(row_elements, 1))))
    return [slice(start, min(start + step, rows)) for start in range(0, rows, step)]


def sandwiches(a: np.ndarray, x: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a_i x b_i for every i, (m, d, d): the products in pieces of ``params.PIECE_FLOPS`` (each matrix's product is the
    one a single stacked call gives, so the result is too), so Ctrl-C is acted on between them."""
    d = x.shape[-1]
    return np.concatenate([a[part] @ x @ b[part] for part in pieces(a.shape[0], 4.0 * float(d) ** 3)])


def product_in_pieces(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b for a (n, k), b (k, m), a block of rows of a at a time (``row_blocks``)."""
    blocks = row_blocks(a.shape[0], 2.0 * a.shape[1] * b.shape[1], b.shape[1])
    return a @ b if len(blocks) == 1 else np.concatenate([a[rows] @ b for rows in blocks])


class DensePair:
    """The sample second-moment operator of dense steps: S(X) = mean_i A_i X A_i^T, T(X) = mean_i A_i^T X A_i.

    O(M d^3) per application; ``values(U, V)`` = <U, A_i V A_i^T> per sample (Frobenius product)."""

    where: ClassVar[str] = "explicit fixed space"

    def __init__(self, chunks: list):
        self.mats = [np.asarray(c.dense(), dtype=np.float64)[:, 0] for c in chunks]
        self.size = sum(a.shape[0] for a in self.mats)
        d = self.mats[0].shape[1]
        self.cost = 4.0 * self.size * d**3  # flops of one application

    def left(self, x: np.ndarray) -> np.ndarray:
        return sum(np.sum(sandwiches(a, x, np.swapaxes(a, 1, 2)), axis=0) for a in self.mats) / self.size

    def right(self, x: np.ndarray) -> np.ndarray:
        return sum(np.sum(sandwiches(np.swapaxes(a, 1, 2), x, a), axis=0) for a in self.mats) / self.size

    def values(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        return np.concatenate([np.einsum("ij,bij->b", u, sandwiches(a, v, np.swapaxes(a, 1, 2))) for a in self.mats])

    def coherent_direction(self, rng: np.random.Generator) -> None:
        """None: dense steps need the explicit fixed space (``theory.fixedspace``, d^4 numbers)."""
        return None


class AnglePair:
    """The sample second-moment operator of block SO(2) steps, diagonal in the plane basis.

    A real 2 x 2 block Y = [[a, b], [c, e]] acts on w = x + i y as Y w = p w + r conj(w) with
    p = ((a + e) + i (c - b)) / 2, r = ((a - e) + i (c + b)) / 2, and R(alpha) Y R(beta)^T has
    (p, r) -> (e^{i(alpha - beta)} p, e^{i(alpha + beta)} r).  With z_ib = e^{i theta_ib}, block (b, b') of
    S(X) is therefore (p G-_bb', r G+_bb'), G-_bb' = mean_i z_ib conj(z_ib'), G+_bb' = mean_i z_ib z_ib', and T
    uses their conjugates: O(M d^2) once, O(d^2) per application.  <Y1, Y2> = 2 Re(conj(p1) p2 + conj(r1) r2).
    """

    where: ClassVar[str] = "fixed space in the plane basis"

    def __init__(self, chunks: list):
        self.z = np.exp(1j * np.concatenate([c.theta[:, 0] for c in chunks]))  # (M, d/2)
        m = self.z.shape[0]
        self.minus = self.z.T @ np.conj(self.z) / m
        self.plus = self.z.T @ self.z / m
        self.cost = 16.0 * self.minus.size  # flops of one application (elementwise in the plane basis)

    @staticmethod
    def to_planes(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        a, b, c, e = x[0::2, 0::2], x[0::2, 1::2], x[1::2, 0::2], x[1::2, 1::2]
        return ((a + e) + 1j * (c - b)) / 2, ((a - e) + 1j * (c + b)) / 2

    @staticmethod
    def from_planes(p: np.ndarray, r: np.ndarray) -> np.ndarray:
        h = p.shape[0]
        out = np.empty((2 * h, 2 * h))
        out[0::2, 0::2], out[1::2, 0::2] = (p + r).real, (p + r).imag
        out[1::2, 1::2], out[0::2, 1::2] = (p - r).real, -(p - r).imag
        return out

    def left(self, x: np.ndarray) -> np.ndarray:
        p, r = self.to_planes(x)
        return self.from_planes(p * self.minus, r * self.plus)

    def right(self, x: np.ndarray) -> np.ndarray:
        p, r = self.to_planes(x)
        return self.from_planes(p * np.conj(self.minus), r * np.conj(self.plus))

    def values(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        (pu, ru), (pv, rv) = self.to_planes(u), self.to_planes(v)
        z = self.z
        minus = np.einsum("mb,bc,mc->m", z, np.conj(pu) * pv, np.conj(z), optimize=True)
        plus = np.einsum("mb,bc,mc->m", z, np.conj(ru) * rv, z, optimize=True)
        return 2.0 * (minus + plus).real

    def coherent_direction(self, rng: np.random.Generator) -> float:
        """kappa = max_{|q|=1} ||Pi_F vec(q q^T)||^2 for block SO(2) steps, in the plane basis (any d, no d^4 matrix;
        rng unused).

        In the plane basis S is diagonal (this operator): the p-part of block (b, c) is multiplied by G-_bc, the r-part
        by G+_bc, so the fixed space F is coordinate-aligned: p_bc is fixed iff G-_bc = 1 (theta_b = theta_c mod 2 pi in
        every sample), r_bc iff G+_bc = 1 (theta_b = -theta_c).  Block (b, c) of q q^T has p = w_b conj(w_c) / 2,
        r = w_b w_c / 2 (w_b: plane b of q as a complex number) and <Y, Y> = 2 (|p|^2 + |r|^2), hence

            ||Pi_F vec(q q^T)||^2 = x^T G x / 2,   x_b = |w_b|^2 (a point of the simplex),  G = 1[G- = 1] + 1[G+ = 1].

        No entry of G exceeds the largest diagonal one: G-_bb = 1 always, and G_bc = 2 needs theta_b = theta_c =
        -theta_c, so theta_c in {0, pi} and G+_cc = 1, G_cc = 2.  So x^T G x <= max_b G_bb (sum x)^2, with equality at
        that plane's vertex: kappa = max_b G_bb / 2, 1/2 (every plane turns) or 1 (a plane whose angles are all in
        {0, pi}).
        """
        g = ((np.abs(self.minus - 1.0) <= FIXED_TOL).astype(float) + (np.abs(self.plus - 1.0) <= FIXED_TOL))
        return float(np.max(np.diag(g))) / 2.0


def householder_samples(chunks: list) -> tuple[np.ndarray, np.ndarray]:
    """The sampled single Householder steps of ``chunks`` as w (M, d) and beta (M,)."""
    return np.concatenate([c.w[:, 0] for c in chunks]), np.concatenate([c.beta[:, 0] for c in chunks])


class HouseholderPair:
    """The sample second-moment operator of steps A = I - beta w w^T (symmetric, so T = S):

        S(X) = X - C X - X C + W^T diag(beta_i^2 w_i^T X w_i) W / M,   C = W^T diag(beta) W / M,

    O(M d^2) per application (two products with the (M, d) matrix W), never a d^2 x d^2 matrix."""

    where: ClassVar[str] = "fixed space from the span of the w's"

    def __init__(self, chunks: list):
        self.w, self.beta = householder_samples(chunks)
        self.c = self.w.T @ (self.beta[:, None] * self.w) / self.w.shape[0]
        self.cost = 6.0 * self.w.size * self.w.shape[1]  # flops of one application

    def quad(self, x: np.ndarray) -> np.ndarray:
        """w_i^T X w_i per sample."""
        return np.einsum("md,md->m", product_in_pieces(self.w, x), self.w)

    def left(self, x: np.ndarray) -> np.ndarray:
        """S(X) a block of rows at a time (``row_blocks``): row r of C X, X C and W^T diag(.) W / M needs only rows
        r of X and of W^T.  C has rank <= M, so for M < d, C X = W^T diag(beta) (W X) / M and X C = (X W^T) diag(beta)
        W / M cost O(M d^2) instead of two d^3 products."""
        w, beta, (m, d) = self.w, self.beta, self.w.shape
        wx = product_in_pieces(w, x)                                     # (M, d): w_i^T X
        outer = (beta**2 * np.einsum("md,md->m", wx, w))[:, None] * w    # beta_i^2 (w_i^T X w_i) w_i^T
        low_rank, bwx = m < d, beta[:, None] * wx

        def block(rows: slice) -> np.ndarray:
            xr, wr = x[rows], w[:, rows].T
            if low_rank:
                cx, xc = wr @ bwx / m, ((xr @ w.T) * beta) @ w / m
            else:
                cx, xc = self.c[rows] @ x, xr @ self.c
            return xr - cx - xc + wr @ outer / m

        blocks = row_blocks(d, 6.0 * m * d if low_rank else 4.0 * d * d, d)
        return np.concatenate([block(rows) for rows in blocks])

    right = left

    def values(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """<U, A_i V A_i> per sample, O(M d^2) (no d x d x d product: at d = 4096 one took seconds, deaf to Ctrl-C):
        <U, V> - beta (w^T V U^T w + w^T U^T V w) + beta^2 (w^T V w)(w^T U w), with
        w^T V U^T w = (w^T V).(w^T U) and w^T U^T V w = (U w).(V w)."""
        w = self.w
        cross = (np.einsum("md,md->m", product_in_pieces(w, v), product_in_pieces(w, u))
                 + np.einsum("md,md->m", product_in_pieces(w, u.T), product_in_pieces(w, v.T)))
        return np.sum(u * v) - self.beta * cross + self.beta**2 * self.quad(v) * self.quad(u)

    def coherent_direction(self, rng: np.random.Generator) -> float | None:
        """kappa from the span of the w's (``householder_coherent_direction``); rng unused."""
        return householder_coherent_direction(self.w, self.beta)


def householder_coherent_direction(w: np.ndarray, beta: np.ndarray) -> float | None:
    """kappa for steps A_i = I - beta_i w_i w_i^T, w (M, d), beta (M,), from the span of the w's (any d, no d^4
    matrix); None when the steps mix reflections with other nonzero factors (the explicit fixed space decides).

    With b = beta |w|^2, u = w / |w| and P = u u^T, a fixed X (A X A^T = X) has b (P X + X P) = b^2 P X P, and
    sandwiching by P gives (2 - b) P X P = 0.  So for b not in {0, 2}: X u = 0 = X^T u; for b = 2 (a reflection):
    X commutes with P.  With V = span{u_i : b_i != 0}:
      no b = 2:    F = matrices on V_perp,                         kappa = 1 if V != R^d else 0;
      every b = 2: F = sum_c R I_(V_c) + matrices on V_perp,       kappa = max(max_c 1 / dim V_c, 1 if V != R^d),
    V_c the spans of the components of the graph u_i ~ u_j iff u_i^T u_j != 0 (found by growing a span: a vector
    joins a component iff it is not orthogonal to the component's span).  The algebra of a connected set of rank-one
    projections acts irreducibly on their span and commutes only with scalars there, so Pi_F(q q^T) has norm^2
    sum_c |P_c q|^4 / dim V_c + |P_perp q|^4, convex in the masses |P_c q|^2: its maximum is at a vertex.
    """
    norms = np.linalg.norm(w, axis=1)
    b = beta * norms**2
    active = np.abs(b) > FIXED_TOL
    u = w[active] / norms[active, None]
    d = w.shape[1]
    uncovered = 1.0 if span_basis(u).shape[1] < d else 0.0
    reflection = np.abs(b[active] - 2.0) <= FIXED_TOL
    if not reflection.any():
        return uncovered
    if not reflection.all():
        return None
    largest, left = uncovered, u
    while left.shape[0]:
        basis, members = left[:1].T, np.zeros(left.shape[0], dtype=bool)
        members[0] = True
        while True:
            joins = ~members & (np.abs(left @ basis).max(axis=1) > FIXED_TOL)
            if not joins.any():
                break
            members |= joins
            basis = span_basis(left[members])
        largest = max(largest, 1.0 / basis.shape[1])
        left = left[~members]
    return largest


def span_basis(vectors: np.ndarray) -> np.ndarray:
    """Orthonormal basis (d, r) of the span of the rows of ``vectors`` (m, d), r its numerical rank (singular values
    above numpy's ``matrix_rank`` tolerance, s_max max(m, d) eps), from one SVD."""
    if vectors.shape[0] == 0:
        return np.zeros((vectors.shape[1], 0))
    left, s, _ = np.linalg.svd(vectors.T, full_matrices=False)
    return left[:, : int(np.sum(s > s.max() * max(vectors.shape) * np.finfo(float).eps))]
