"""theory.predict: the dispatcher's contract (shapes, errors, consistency between quantities)."""

import math

import numpy as np
import pytest

from accum.simulations.examples import SignedPermutation
from accum.simulations.families import make_family
from accum.simulations.params import ParamError
from accum.theory import NoClosedForm, QUANTITIES, predict, prediction
from accum.theory import groups, householder

BUILTINS = [("rope", {}), ("nope", {}), ("so2-accumulated", dict(law="gaussian")), ("so2-accumulated", dict(law="token", source="markov")),
            ("so2-accumulated", dict(law="lattice", m=2)), ("householder", dict(beta=1.0)), ("householder", dict(beta=2.0, w="token")),
            ("haar", {}), ("haar", dict(group="SO")), ("givens", dict(sigma=0.5)), ("lie-walk", dict(sigma=0.3))]
OPTIONS = {"coherence": dict(steps=6), "mean-product-sq": dict(steps=6), "norm-sq": dict(steps=6), "onset": dict(eps=0.1, max_steps=500),
           "window": dict(context=20), "far-variance": dict(offset=3), "far-mass": dict(far_sizes=[1, 10], s0=2.0),
           "near-weight": dict(far_sizes=[1, 10], s0=2.0), "near-weight-bound": dict(far_sizes=[1, 10], s0=2.0),
           "alibi-floor": dict(far_sizes=[1, 10], s0=2.0, slope=0.5), "far-residual": dict(far_sizes=[1, 10])}


def test_far_mass_of_the_trivial_group_is_the_alibi_sum():
    """SO(1) = {1}: s_Delta = s0 q k for every Delta, so E M(N) = e^{s0 q k - s0} sum_{Delta<=N} e^{-slope Delta}."""
    q, k = np.array([0.8]), np.array([-0.5])
    for slope in (0.0, 0.2):
        got = predict("far-mass", make_family("haar", dim=1, group="SO"), far_sizes=[1, 7], s0=3.0, slope=slope, q=q, k=k)
        want = [math.exp(3.0 * -0.4 - 3.0) * sum(math.exp(-slope * j) for j in range(1, n + 1)) for n in (1, 7)]
        np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("name,params", BUILTINS, ids=[f"{n}-{'-'.join(map(str, p.values()))}" for n, p in BUILTINS])
def test_every_quantity_is_finite_of_the_right_shape_or_says_no_closed_form(name, params):
    fam = make_family(name, dim=8, **params)
    assert set(OPTIONS) == set(QUANTITIES)
    answered = 0
    for quantity, opts in OPTIONS.items():
        try:
            value = np.asarray(predict(quantity, fam, **opts), dtype=float)
        except NoClosedForm:
            continue
        answered += 1
        if quantity in ("coherence", "mean-product-sq", "norm-sq"):
            assert value.shape == (7,) and value[0] == pytest.approx(1.0)
        elif "far_sizes" in opts:
            assert value.shape == (2,)
        if quantity != "onset":
            assert np.all(np.isfinite(value)), quantity
    assert answered >= 8


def test_quantities_are_mutually_consistent():
    fam = make_family("householder", dim=8, beta=1.0)
    c = predict("coherence", fam, steps=30)
    assert predict("window", fam, context=31) == pytest.approx(np.sum(c**2), rel=1e-12)
    np.testing.assert_allclose(predict("mean-product-sq", fam, steps=30), c**2, rtol=1e-12)
    np.testing.assert_allclose(predict("norm-sq", fam, steps=5), householder.norm_shrinkage(1.0, 8, np.arange(6)))
    assert predict("onset", fam, eps=0.05) == pytest.approx(math.log(0.05) / math.log(1 - 1 / 8))
    haar = make_family("haar", dim=8)
    assert predict("far-variance", haar, offset=4) == pytest.approx(1.0) and predict("far-variance", haar, offset=0) == pytest.approx(8.0)
    np.testing.assert_allclose(predict("near-weight", haar, far_sizes=[10], s0=2.0), 1 / (1 + predict("far-mass", haar, far_sizes=[10], s0=2.0)))
    assert predict("coherence", "givens", steps=2)[2] == pytest.approx(groups.givens_rate(16, 1.0) ** 2)  # name accepted


def test_errors_name_the_problem():
    user = SignedPermutation(dim=4)
    with pytest.raises(NoClosedForm, match="user-defined"):
        predict("coherence", user, steps=3)
    with pytest.raises(NotImplementedError):  # NoClosedForm is a NotImplementedError
        predict("far-mass", make_family("householder", w="token"), far_sizes=[3], s0=1.0)  # estimated only
    with pytest.raises(NoClosedForm):
        predict("far-mass", make_family("lie-walk", dim=4), far_sizes=[3], s0=1.0)
    with pytest.raises(ParamError, match="quantity .nonsense. is unknown; allowed: coherence"):
        predict("nonsense", make_family("haar"))
    with pytest.raises(ParamError, match="bad options"):
        predict("coherence", make_family("haar"), step=3)
    for not_a_family in (None, 42, object()):  # named as the family, not as a missing attribute or rng
        with pytest.raises(ParamError, match="family must be a Family object"):
            prediction("coherence", not_a_family, steps=3, rng=np.random.default_rng(0))


@pytest.mark.parametrize("quantity,options,needle", [
    ("coherence", dict(steps=-1), "'steps' = -1 is out of range; allowed: an integer in [0, 10000000]"),
    ("coherence", dict(steps=float("nan")), "'steps' = nan is not finite"),
    ("coherence", dict(steps=2.5), "'steps' = 2.5 is not an integer"),
    ("mean-product-sq", dict(steps=10**12), "'steps' = 1000000000000 is out of range"),
    ("window", dict(context=0), "'context' = 0 is out of range"),
    ("onset", dict(eps=1.5), "'eps' = 1.5 is out of range; allowed: a finite number in (0, 1)"),
    ("far-variance", dict(offset=-3), "'offset' = -3 is out of range"),
    ("far-mass", dict(far_sizes=[10], s0=float("inf")), "'s0' = inf is not finite"),
    ("alibi-floor", dict(far_sizes=[10], s0=1.0, slope=-1.0), "'slope' = -1.0 is out of range"),
    ("far-residual", dict(far_sizes=[10], value_rotation=2), "value_rotation must be True or False, got 2"),
])
def test_prediction_refuses_options_out_of_range(quantity, options, needle):
    """Found by a new-user sweep: steps=-1 gave an empty curve and steps=nan a numpy ValueError."""
    from accum.theory.predict import prediction

    with pytest.raises(ParamError) as err:
        prediction(quantity, make_family("so2-accumulated", dim=4), **options)
    assert needle in str(err.value)
