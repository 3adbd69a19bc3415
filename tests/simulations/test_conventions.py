"""The conventions of ``accum.simulations.conventions`` pinned to values that do not come from accum's helpers:
RoPE frequencies typed from the RoFormer paper and in the form the common libraries compute them, the interleaved
plane pairing and the rotation sign from hand-derived 2x2 products, and the theory reading the same sign.

Engine and theory both call ``rope_frequencies`` and both rotate by +omega, so comparing them with each other
cannot see a wrong frequency or a flipped sign; every expected value here is written out in the test."""

import math

import numpy as np
import pytest

from accum.simulations.conventions import rope_frequencies
from accum.simulations.families import make_family
from accum.simulations.steps import AngleSteps
from accum.theory import prediction


def roformer_frequencies(d: int, base: float) -> list[float]:
    """RoFormer (Su et al. 2021), eq. 15: Theta = {theta_i = base^(-2(i-1)/d), i = 1, ..., d/2}, typed plainly."""
    return [base ** (-2.0 * (i - 1) / d) for i in range(1, d // 2 + 1)]


def library_frequencies(d: int, base: float) -> list[float]:
    """The common libraries' form: inv_freq = 1 / base^(arange(0, d, 2) / d)."""
    return [1.0 / base ** (j / d) for j in range(0, d, 2)]


@pytest.mark.parametrize("d,base", [(2, 10000.0), (8, 10000.0), (6, 100.0), (64, 10000.0), (10, 500000.0)])
def test_rope_frequencies_are_the_papers(d, base):
    want = roformer_frequencies(d, base)
    np.testing.assert_allclose(rope_frequencies(d, base), want, rtol=1e-14, atol=0)
    np.testing.assert_allclose(library_frequencies(d, base), want, rtol=1e-14, atol=0)
    np.testing.assert_allclose(make_family("rope", dim=d, base=base).sample(np.random.default_rng(0), 3, 2).theta,
                               np.broadcast_to(want, (2, 3, d // 2)), rtol=1e-14, atol=0)


def test_rope_frequencies_hand_values():
    """d = 8, base 10^4: 10^(-2b/8 * 4) = 1, 0.1, 0.01, 0.001; d = 4, base 100: 1, 0.1; the first plane always
    turns by one radian per token."""
    np.testing.assert_allclose(rope_frequencies(8, 10000.0), [1.0, 0.1, 0.01, 0.001], rtol=1e-15)
    np.testing.assert_allclose(rope_frequencies(4, 100.0), [1.0, 0.1], rtol=1e-15)
    assert rope_frequencies(2, 7.0).tolist() == [1.0]


def test_one_rope_step_is_interleaved_plane_rotations_by_plus_omega():
    """d = 4, base 100 (omega = 1, 0.1): the step matrix written out by hand, planes (x0, x1) and (x2, x3), each
    [[cos, -sin], [sin, cos]] -- not the half-split pairing (x0, x2), (x1, x3)."""
    c1, s1, c2, s2 = math.cos(1.0), math.sin(1.0), math.cos(0.1), math.sin(0.1)
    hand = np.array([[c1, -s1, 0, 0],
                     [s1, c1, 0, 0],
                     [0, 0, c2, -s2],
                     [0, 0, s2, c2]])
    step = make_family("rope", dim=4, base=100.0).sample(np.random.default_rng(0), 1, 1).dense()[0, 0]
    np.testing.assert_allclose(step, hand, atol=1e-15)
    half_split = hand[np.ix_([0, 2, 1, 3], [0, 2, 1, 3])]
    assert not np.allclose(step, half_split)


def test_rope_score_sign_by_hand():
    """d = 2 (omega = 1), q = e_2, k = e_1: accum's s_ij = q^T R((i - j) omega) k = sin(i - j); the libraries'
    (R(i omega) q)^T (R(j omega) k) = q^T R((j - i) omega) k = -sin(i - j).  q = k = e_1 gives cos(i - j) both ways."""
    t = 4
    e1, e2 = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    steps = make_family("rope", dim=2).sample(np.random.default_rng(0), t, 1)
    scores = steps.scores(np.tile(e2, (1, t, 1)), np.tile(e1, (1, t, 1)))[0]
    even = steps.scores(np.tile(e1, (1, t, 1)), np.tile(e1, (1, t, 1)))[0]
    for i in range(t):
        for j in range(i + 1):
            assert scores[i, j] == pytest.approx(math.sin(i - j), abs=1e-14)
            assert even[i, j] == pytest.approx(math.cos(i - j), abs=1e-14)
    assert scores[1, 0] == pytest.approx(0.8414709848078965, abs=1e-14)  # sin(1), not the libraries' -sin(1)
    flipped = AngleSteps(-steps.theta).scores(np.tile(e2, (1, t, 1)), np.tile(e1, (1, t, 1)))[0]
    assert flipped[1, 0] == pytest.approx(-0.8414709848078965, abs=1e-14)


def test_theory_reads_the_same_frequencies_and_sign():
    """The theory of rope, against formulas typed here: with q = k = 1/sqrt(d), c(n) = (2/d) sum_b cos(n omega_b);
    with q = e_2, k = e_1 (d = 4, base 100: plane 0 turns by 1 rad) the far mass
    M(N) = sum_{Delta<=N} exp(s0 sin(Delta) - s0) -- with the libraries' sign it would be exp(-s0 sin(Delta) - s0)."""
    d, base, n = 6, 100.0, 9
    omega = roformer_frequencies(d, base)
    want = [sum(math.cos(k * w) for w in omega) * 2 / d for k in range(n + 1)]
    np.testing.assert_allclose(prediction("coherence", make_family("rope", dim=d, base=base), steps=n).value, want,
                               rtol=0, atol=1e-14)
    q, k, s0 = np.array([0.0, 1.0, 0.0, 0.0]), np.array([1.0, 0.0, 0.0, 0.0]), 2.0
    sizes = [1, 2, 5]
    got = prediction("far-mass", make_family("rope", dim=4, base=100.0), far_sizes=sizes, s0=s0, q=q, k=k).value
    np.testing.assert_allclose(got, [sum(math.exp(s0 * math.sin(t) - s0) for t in range(1, n_far + 1))
                                     for n_far in sizes], rtol=1e-12)
    mirrored = [sum(math.exp(-s0 * math.sin(t) - s0) for t in range(1, n_far + 1)) for n_far in sizes]
    assert not np.allclose(got, mirrored, rtol=1e-3)
