"""probes.baselines: the far-mass predictors that know nothing of the rotation law, against explicit attention
weights written out query by query."""

import math

import numpy as np
import pytest

from accum.probes import baselines


def explicit_far_mass(weight_of_lag, seq_len: int, length: int) -> float:
    """Mean over queries i in [L, T) of sum_{n >= L} w(n) / sum_{n >= 0} w(n) over the keys j = i - n >= 0."""
    out = []
    for i in range(seq_len, length):
        w = np.array([weight_of_lag(n) for n in range(i + 1)])
        out.append(w[seq_len:].sum() / w.sum())
    return float(np.mean(out))


@pytest.mark.parametrize("slope", [0.0, 0.03, 0.25])
def test_uniform_far_mass_is_the_biased_softmax_of_equal_scores(slope):
    seq_len, mult = 7, [2, 3, 5]
    got = baselines.uniform_far_mass(slope, seq_len, mult)
    want = [explicit_far_mass(lambda n: math.exp(-slope * n), seq_len, m * seq_len) for m in mult]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_uniform_far_mass_of_a_steep_bias_is_zero_not_nan():
    assert baselines.uniform_far_mass(40.0, 128, [2, 512]) == [0.0, 0.0]


@pytest.mark.parametrize("slope", [0.0, 0.1])
def test_carried_far_mass_fits_2x_and_extends_with_a_constant_weight_per_key(slope):
    """In-sample at 2x it returns the measured far mass; beyond, it is the far mass of near keys of total weight 1 and
    far keys of weight r e^{-m (n - L)} each, with the fitted r."""
    seq_len, mult = 6, [2, 4, 9]
    got = baselines.carried_far_mass(0.37, slope, seq_len, mult)
    assert got[0] == pytest.approx(0.37, abs=1e-10)
    # recover r by bisection on the explicit 2x far mass, then check the longer lengths
    def far(r, length):
        out = []
        for i in range(seq_len, length):
            far_w = sum(r * math.exp(-slope * (n - seq_len)) for n in range(seq_len, i + 1))
            out.append(far_w / (1 + far_w))
        return float(np.mean(out))
    lo, hi = 1e-9, 1e3
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if far(mid, 2 * seq_len) < 0.37 else (lo, mid)
    np.testing.assert_allclose(got[1:], [far(lo, m * seq_len) for m in mult[1:]], rtol=1e-6)
    assert baselines.carried_far_mass(0.0, slope, seq_len, mult) == [0.0] * 3
    # a 2x far mass below what any weight in [e^-80, e^80] gives stays at the smallest weight, not the largest
    assert max(baselines.carried_far_mass(1e-40, slope, seq_len, mult)) < 1e-30
    assert min(baselines.carried_far_mass(1.0 - 1e-15, slope, seq_len, mult)) > 0.99
