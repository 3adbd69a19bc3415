"""simulations.pairs: a long product cut into row blocks equals the plain fp64 product."""

import numpy as np
import pytest

from accum.simulations import pairs


@pytest.mark.parametrize("n, k, m", [(37, 11, 23), (5, 64, 3), (1, 9, 9)])
def test_product_in_pieces_equals_the_plain_product(n, k, m, monkeypatch):
    """Odd, asymmetric shapes; pieces of 2 rows (the piece size made small so the blocks are many) and of one."""
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(n, k)), rng.normal(size=(k, m))
    reference = np.einsum("ij,jl->il", a, b)
    for rows in (2, 1):
        monkeypatch.setattr(pairs, "PRODUCT_PIECE_FLOPS", 2.0 * k * m * rows)
        np.testing.assert_allclose(pairs.product_in_pieces(a, b), reference, rtol=0, atol=1e-12)
    monkeypatch.setattr(pairs, "PRODUCT_PIECE_FLOPS", 1.0)  # less than one row: still one row a piece
    np.testing.assert_allclose(pairs.product_in_pieces(a, b), reference, rtol=0, atol=1e-12)


@pytest.mark.parametrize("dim, samples", [(9, 5), (5, 13)], ids=["low-rank", "dense"])
def test_householder_pair_in_row_blocks_equals_the_dense_sums(dim, samples, monkeypatch):
    """S(X) = mean A X A^T and <U, A_i V A_i> of Householder steps, computed in blocks of 2 rows (both branches:
    M < d through W, M >= d through C), against plain fp64 sums over the dense matrices, asymmetric X, U, V."""
    rng = np.random.default_rng(11)
    w, beta = rng.normal(size=(samples, dim)), rng.uniform(0.2, 1.8, size=samples)
    w /= np.linalg.norm(w, axis=1, keepdims=True)
    op = pairs.HouseholderPair.__new__(pairs.HouseholderPair)
    op.w, op.beta, op.c = w, beta, w.T @ (beta[:, None] * w) / samples
    mats = [np.eye(dim) - b * np.outer(v, v) for v, b in zip(w, beta)]
    x, u, v = rng.normal(size=(3, dim, dim))
    monkeypatch.setattr(pairs, "PIECE_ELEMENTS", 2 * dim)
    assert len(pairs.row_blocks(dim, 1.0, dim)) == (dim + 1) // 2
    np.testing.assert_allclose(op.left(x), sum(a @ x @ a.T for a in mats) / samples, rtol=0, atol=1e-12)
    np.testing.assert_allclose(op.values(u, v), [np.sum(u * (a @ v @ a.T)) for a in mats], rtol=0, atol=1e-12)


def test_row_blocks_hold_the_stated_piece_sizes():
    """The defaults as their comments state them: a memory-bound 4096 x 4096 result in 16 pieces of 2^20 elements
    (8 MB), a 4096 x 4096 x 4096 product (2 * 4096^2 flops a row) in pieces of 59 rows (at most 2e9 flops); the slices
    cover the rows in order, without gaps."""
    blocks = pairs.row_blocks(4096, 1.0, 4096)
    assert [(b.start, b.stop) for b in blocks] == [(256 * i, 256 * (i + 1)) for i in range(16)]
    blocks = pairs.row_blocks(4096, 2.0 * 4096**2, 4096)
    assert {b.stop - b.start for b in blocks[:-1]} == {59} and blocks[-1].stop == 4096
    assert all(a.stop == b.start for a, b in zip(blocks, blocks[1:]))


def test_pair_operators_state_their_cost_in_flops():
    """The flops of one application that the second-moment gap's step cap divides by: dense 4 M d^3 (two d x d
    products a sample), angles 16 (d/2)^2 (elementwise in the plane basis), Householder 6 M d^2."""
    from accum.simulations.families import make_family
    from accum.theory import sampled

    rng = np.random.default_rng(17)
    dense = pairs.DensePair(sampled.draw_steps(make_family("haar", dim=5), 7, rng))
    angles = pairs.AnglePair(sampled.draw_steps(make_family("so2-accumulated", dim=6, sigma=0.5), 7, rng))
    householder = pairs.HouseholderPair(sampled.draw_steps(make_family("householder", dim=5, beta=1.2), 7, rng))
    assert (dense.cost, angles.cost, householder.cost) == (4.0 * 7 * 5**3, 16.0 * 3**2, 6.0 * 7 * 5**2)
