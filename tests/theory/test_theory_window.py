"""theory.window: onset and window width against brute-force sums, sympy, and the predicted curves."""

import math

import numpy as np
import pytest

from accum.simulations.families import make_family
from accum.theory import predict, window


@pytest.mark.parametrize("rho", [0.1, 0.5, 0.9, 0.999, -0.7, 0.6 * np.exp(0.4j)])
def test_onset_matches_brute_force_first_crossing(rho):
    for eps in (0.5, 0.037, 2.3e-3):  # not exact powers of rho (float ties)
        n_eps = window.onset(rho, eps)
        first = next(n for n in range(10**6) if abs(rho) ** n <= eps)
        assert math.ceil(n_eps - 1e-12) == first
        curve = np.abs(rho) ** np.arange(first + 2)
        assert window.crossing(curve, eps) == pytest.approx(n_eps, rel=1e-12)
    assert window.onset(0.0, 0.1) == 0.0 and window.onset(1.0, 0.1) == math.inf


@pytest.mark.parametrize("rho", [0.0, 0.3, 0.95])
def test_width_and_context_dependence_match_direct_sums(rho):
    for t in (1, 2, 17, 300):
        direct = sum(rho ** (2 * n) for n in range(t))
        assert window.width(rho, t) == pytest.approx(direct, rel=1e-12)
        assert window.width_from_curve(rho ** np.arange(t)) == pytest.approx(direct, rel=1e-12)
        assert window.width(rho) - direct == pytest.approx(window.context_dependence(rho, t), abs=1e-12)
    assert window.width(1.0, 50) == 50 and window.width(1.0) == math.inf


def test_sympy_window_and_onset_agree_with_evaluators():
    r = window.derive_window()
    for rho, t, eps in ((0.3, 5, 0.1), (0.9, 40, 0.01)):
        sub = {r["rho"]: rho, r["T"]: t, r["eps"]: eps}
        assert float(r["width"].subs(sub)) == pytest.approx(window.width(rho, t), rel=1e-12)
        assert float(r["width_limit"].subs(sub)) == pytest.approx(window.width(rho), rel=1e-12)
        assert float(r["onset"].subs(sub)) == pytest.approx(window.onset(rho, eps), rel=1e-12)


def test_window_is_independent_of_context_for_accumulated_steps_but_not_rope():
    so2 = make_family("so2-accumulated", dim=16, law="gaussian", sigma=0.5)
    rho = math.exp(-0.5**2 / 2)
    contexts = (64, 1024, 8192)
    widths = [predict("window", so2, context=t) for t in contexts]
    np.testing.assert_allclose(widths, window.width(rho, contexts), rtol=1e-12)
    assert window.context_dependence(rho, 1024) < 1e-100  # W(T) = W_inf to double precision from T ~ 300 on
    assert predict("onset", so2, eps=0.05) == pytest.approx(math.log(0.05) / math.log(rho), rel=1e-12)
    # several planes with different rates: onset from the predicted curve, checked by brute force
    ru = make_family("so2-accumulated", dim=8, law="rope-uniform", base=10.0)
    curve = predict("coherence", ru, steps=5000)
    first = int(np.flatnonzero(np.abs(curve) <= 0.05)[0])
    assert first - 1 < predict("onset", ru, eps=0.05, max_steps=5000) <= first
    rope = [predict("window", make_family("rope", dim=16), context=t) for t in (64, 1024, 8192)]
    assert rope[0] < rope[1] < rope[2]
