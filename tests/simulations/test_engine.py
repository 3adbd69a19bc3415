"""Fast paths against the plain fp64 references, on odd sizes, T = 1 and long T."""

import numpy as np
import pytest

from accum.simulations import reference
from accum.simulations.families import make_family
from accum.simulations.scans import chunked_scores, householder_scores
from accum.simulations.steps import AngleSteps

CASES = [
    ("rope", {"dim": 6, "base": 7.0}),
    ("so2-accumulated", {"dim": 10, "law": "gaussian", "sigma": 0.7}),
    ("so2-accumulated", {"dim": 6, "law": "token", "source": "markov", "vocab": 5}),
    ("householder", {"dim": 5, "beta": 0.6}),
    ("householder", {"dim": 7, "beta": 2.0}),
    ("householder", {"dim": 3, "beta": 1.0, "w": "token", "vocab": 4}),
    ("haar", {"dim": 5, "group": "SO"}),
    ("givens", {"dim": 7, "sigma": 0.9}),
    ("lie-walk", {"dim": 5, "sigma": 0.4}),
    ("nope", {"dim": 4}),
    ("accum.simulations.examples:SignedPermutation", {"dim": 5}),
]


@pytest.mark.parametrize("name,params", CASES)
@pytest.mark.parametrize("t_len", [1, 2, 13])
def test_transport_bilinear_scores_match_reference(name, params, t_len):
    rng = np.random.default_rng(7)
    fam = make_family(name, **params)
    steps = fam.sample(rng, t_len, 3)
    mats = steps.dense()
    assert mats.shape == (3, t_len, fam.dim, fam.dim)
    x = rng.normal(size=(3, fam.dim))
    q, k = rng.normal(size=(3, t_len, fam.dim)), rng.normal(size=(3, t_len, fam.dim))
    np.testing.assert_allclose(steps.transport(x), reference.transport(mats, x), atol=1e-12)
    bil = np.einsum("btd,bd->bt", reference.transport(mats, x[::-1]), x)
    np.testing.assert_allclose(steps.bilinear(x, x[::-1]), bil, atol=1e-12)
    want = reference.scores(mats, q, k)
    np.testing.assert_allclose(steps.scores(q, k), want, atol=1e-11)
    np.testing.assert_allclose(reference.scores_dense_scan(mats, q, k), want, atol=1e-11)
    np.testing.assert_allclose(steps.transposed().dense(), np.swapaxes(mats, -1, -2), atol=1e-15)


@pytest.mark.parametrize("chunk", [1, 2, 5, 7, 64])
@pytest.mark.parametrize("beta", [0.0, 0.3, 1.0, 1.7, 2.0])
def test_householder_chunked_wy_any_chunk(chunk, beta):
    rng = np.random.default_rng(3)
    steps = make_family("householder", dim=5, beta=beta).sample(rng, 23, 2)
    q, k = rng.normal(size=(2, 23, 5)), rng.normal(size=(2, 23, 5))
    want = reference.scores(steps.dense(), q, k)
    np.testing.assert_allclose(householder_scores(steps, q, k, chunk), want, atol=1e-11)
    np.testing.assert_allclose(chunked_scores(steps, q, k, chunk), want, atol=1e-11)


def test_long_sequence_scores_match_reference():
    rng = np.random.default_rng(11)
    for name, params in (("householder", {"dim": 9, "beta": 1.3}), ("haar", {"dim": 7}), ("so2-accumulated", {"dim": 8})):
        steps = make_family(name, **params).sample(rng, 301, 1)
        d = steps.dim
        q, k = rng.normal(size=(1, 301, d)), rng.normal(size=(1, 301, d))
        want = reference.scores(steps.dense(), q, k)
        np.testing.assert_allclose(steps.scores(q, k), want, atol=1e-9)
        np.testing.assert_allclose(reference.scores_dense_scan(steps.dense(), q, k), want, atol=1e-9)


def test_so2_bilinear_with_large_accumulated_angles():
    """The sine's argument reduction holds at |Theta| ~ 1e6 rad (RoPE-like drift over long contexts).  The steps are
    built directly: the Gaussian law reduces its mean modulo 2 pi, so a family never draws 3000-rad steps."""
    rng = np.random.default_rng(5)
    steps = AngleSteps(rng.normal(3000.0, 0.3, size=(2, 301, 3)))
    q, k = rng.normal(size=(2, 6)), rng.normal(size=(2, 6))
    assert np.abs(np.cumsum(steps.theta, axis=1)).max() > 5e5
    want = np.einsum("btd,bd->bt", reference.transport(steps.dense(), k), q)
    np.testing.assert_allclose(steps.bilinear(q, k), want, atol=1e-9)


def test_scores_upper_triangle_is_nan_and_diagonal_is_qk():
    rng = np.random.default_rng(0)
    steps = make_family("haar", dim=5).sample(rng, 6, 1)
    q, k = rng.normal(size=(1, 6, 5)), rng.normal(size=(1, 6, 5))
    s = steps.scores(q, k)
    assert np.all(np.isnan(s[0][np.triu_indices(6, 1)]))
    np.testing.assert_allclose(np.diagonal(s[0]), np.sum(q[0] * k[0], axis=1), atol=1e-13)


def test_bad_shapes_are_named():
    steps = make_family("haar", dim=4).sample(np.random.default_rng(0), 3, 2)
    with pytest.raises(ValueError, match="q must have shape"):
        steps.scores(np.zeros((3, 5)), np.zeros((3, 4)))
    with pytest.raises(ValueError, match="x must have shape"):
        steps.transport(np.zeros(3))


def test_angle_steps_shapes_and_drift_per_step():
    """theta (batch, n_steps, d/2): the arrays an AngleSteps of dim d holds, an odd d refused, and the orthogonality
    drift one number per (sequence, step) -- summed over the planes, not the steps (3 steps, 4 planes here)."""
    steps = AngleSteps(np.random.default_rng(0).normal(size=(2, 3, 4)))
    assert steps.array_shapes((2, 3), 8) == {"theta": (2, 3, 4)}
    with pytest.raises(ValueError, match="even"):
        steps.array_shapes((2, 3), 7)
    drift = steps.orthogonality_drift()
    assert drift.shape == (2, 3) and np.all(drift < 1e-14)


def test_angle_bilinear_with_one_query_and_a_key_per_sequence():
    """q shared (d,), k one per sequence (batch, d): each row is that sequence's own q^T P_t k (not the first k's)."""
    rng = np.random.default_rng(1)
    steps = make_family("so2-accumulated", dim=6, mu=0.4).sample(rng, 5, 3)
    q, k = rng.normal(size=6), rng.normal(size=(3, 6))
    rows = steps.bilinear(q, k)
    for b in range(3):
        one = AngleSteps(steps.theta[b:b + 1])
        assert np.allclose(rows[b], one.bilinear(q, k[b])[0], atol=1e-12)


def test_householder_sample_report_in_one_dimension():
    """d = 1: A = 1 - beta (w = +-1), so its one singular value is |1 - beta| = 0.5 at beta = 0.5 (no unit singular
    value to take the max with, as d > 1 has), and |A^T A - 1| = |beta (beta - 2)| = 0.75."""
    steps = make_family("householder", dim=1, beta=0.5).sample(np.random.default_rng(0), 3, 2)
    assert steps.sample_report(1) == pytest.approx((0.75, 0.5), abs=1e-15)
