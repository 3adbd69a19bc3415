"""theory.prediction: closed forms for built-ins, the generic moment-operator theory for any i.i.d. family.

The estimated theory is held to the built-in closed forms at random q != k (asymmetric probes) with its own
jackknife standard error: |estimate - exact| <= t_{G-1}^{-1}(1 - alpha/2) se, Bonferroni over every point of
a test, false-failure budget 1e-4 per test.
"""

import functools

import numpy as np
import pytest
from scipy.stats import chi2, t as student

from accum.simulations.examples import SignedPermutation
from accum.simulations.families import make_family
from accum.simulations.params import ParamError
from accum.theory import NoClosedForm, Prediction, moments, predict, prediction
from accum.theory import householder

BUDGET = 1e-4


def t_threshold(points: int, dof: int) -> float:
    return float(student.isf(BUDGET / (2 * points), dof))


def probes(d, seed):
    rng = np.random.default_rng(seed)
    return rng.normal(size=d), rng.normal(size=d)


def test_builtins_return_their_closed_form_with_zero_stderr():
    fam = make_family("householder", dim=8, beta=1.0)
    q, k = probes(8, 0)
    p = prediction("coherence", fam, steps=5, q=q, k=k)
    assert isinstance(p, Prediction) and p.source == "closed form" and p.samples == 0 and p.dof == 0
    np.testing.assert_array_equal(p.value, predict("coherence", fam, steps=5, q=q, k=k))
    np.testing.assert_array_equal(p.stderr, np.zeros(6))
    assert prediction("window", "haar", context=4).value == pytest.approx(1.0)  # name accepted, float out


@pytest.mark.parametrize("name,params", [("householder", dict(dim=5, beta=1.3)), ("givens", dict(dim=5, sigma=0.9)),
                                         ("so2-accumulated", dict(dim=6, law="gaussian", mu=0.4, sigma=0.6))])
def test_estimated_theory_matches_the_closed_forms_within_its_stderr(name, params):
    fam = make_family(name, **params)
    d = fam.dim
    q, k = probes(d, 1)
    first, second, sizes = moments.group_moment_sums(fam, 20_000, np.random.default_rng(2))
    cases = [("coherence", dict(steps=6, q=q, k=k)), ("far-variance", dict(offset=3, q=q, k=k)),
             ("far-residual", dict(far_sizes=[1, 4, 17], m=q)), ("norm-sq", dict(steps=4)),
             ("window", dict(context=12, q=q, k=k)), ("mean-product-sq", dict(steps=4))]
    z = []
    for quantity, opts in cases:
        exact = np.atleast_1d(predict(quantity, fam, **opts))
        est, se = moments.jackknife_prediction(functools.partial(moments.GENERIC[quantity], **opts), first, second, sizes)
        est, se = np.atleast_1d(est), np.atleast_1d(se)
        keep = se > 1e-12  # n = 0 points are exact (se = 0): they must agree to rounding
        np.testing.assert_allclose(est[~keep], exact[~keep], rtol=1e-9, atol=1e-12)
        z.extend(np.abs(est[keep] - exact[keep]) / se[keep])
    assert max(z) <= t_threshold(len(z), sizes.size - 1), max(z)


def test_user_family_gets_an_estimated_prediction_and_the_jackknife_se_is_calibrated():
    """Replicate estimates of c(1) for SignedPermutation(signed=0): E[A] = 11^T/d, so c(1) = (1.q)(1.k)/d exactly.
    The standardised errors (est - exact)/se over R = 200 replicates must have mean square consistent with t_{15}
    (variance 15/13): a chi-square-like two-sided test on sum z^2 catches an se off by a factor 1.5 either way."""
    d = 6
    fam = SignedPermutation(dim=d, signed=0)
    q, k = probes(d, 3)
    exact = q.sum() * k.sum() / d
    zs = []
    for seed in range(200):
        p = prediction("coherence", fam, rng=np.random.default_rng(100 + seed), samples=400, steps=1, q=q, k=k)
        assert p.source == "estimated from moment operators (400 samples)" and p.samples == 400 and p.dof == 15
        zs.append((p.value[1] - exact) / p.stderr[1])
    zs = np.array(zs)
    ratio = np.mean(zs**2) / (15 / 13)
    # sum z^2 / var is approximately chi-square with R dof; two-sided at the budget
    lo, hi = chi2.ppf(BUDGET / 2, zs.size) / zs.size, chi2.isf(BUDGET / 2, zs.size) / zs.size
    assert lo <= ratio <= hi, ratio
    assert not (lo <= ratio * 1.5**2 <= hi) and not (lo <= ratio / 1.5**2 <= hi)  # the test has power at 1.5x


class ExactHouseholder:
    """A user family that states its exact moments: the generic theory then is a closed form."""

    def __init__(self, dim, beta):
        self.dim, self.beta, self._fam = dim, beta, make_family("householder", dim=dim, beta=beta)

    def sample(self, rng, n_steps, batch):
        return self._fam.sample(rng, n_steps, batch)

    def moments(self):
        d = self.dim
        pair = householder.pair_operator(self.beta, d).reshape(d, d, d, d).transpose(0, 2, 1, 3)
        return householder.mean_rate(self.beta, d) * np.eye(d), pair


def test_exact_moments_method_gives_a_closed_form_equal_to_the_builtin():
    user, builtin = ExactHouseholder(5, 0.7), make_family("householder", dim=5, beta=0.7)
    q, k = probes(5, 4)
    for quantity, opts in (("far-variance", dict(offset=4, q=q, k=k)), ("far-residual", dict(far_sizes=[3, 9], m=k)),
                           ("onset", dict(eps=0.2, q=q, k=k))):
        p = prediction(quantity, user, **opts)
        assert p.source == "closed form (exact moment operators)" and np.all(np.asarray(p.stderr) == 0)
        np.testing.assert_allclose(p.value, predict(quantity, builtin, **opts), rtol=1e-9)


def test_builtin_without_closed_form_is_estimated():
    p = prediction("far-mass", make_family("lie-walk", dim=4, sigma=0.3), rng=np.random.default_rng(5), samples=200,
                   far_sizes=[3], s0=1.0)
    assert p.source.startswith("estimated") and np.all(p.stderr > 0) and np.all(np.isfinite(p.value))


def test_errors():
    user = SignedPermutation(dim=4)
    with pytest.raises(ParamError, match="rng"):
        prediction("coherence", user, steps=3)
    with pytest.raises(NoClosedForm, match="whole law"):
        prediction("far-mass", user, rng=np.random.default_rng(0), far_sizes=[3], s0=1.0)
    markov = make_family("so2-accumulated", dim=4, law="token", source="markov", stay=0.7)
    assert not markov.iid_steps and make_family("so2-accumulated", dim=4, law="token").iid_steps
    dependent = SignedPermutation(dim=4)
    object.__setattr__(dependent, "iid_steps", False)  # a user family that declares dependent steps
    with pytest.raises(NoClosedForm, match="not i.i.d."):
        prediction("coherence", dependent, rng=np.random.default_rng(0), steps=2)
    with pytest.raises(ParamError, match=r"samples must be an integer in \[32, "):
        prediction("coherence", user, rng=np.random.default_rng(0), samples=5, steps=2)
    with pytest.raises(ParamError, match="d <= 32"):
        prediction("coherence", SignedPermutation(dim=40), rng=np.random.default_rng(0), steps=2)
    with pytest.raises(ParamError, match="quantity 'nope' is unknown"):
        prediction("nope", user)
    with pytest.raises(ParamError, match="bad options"):
        prediction("coherence", user, stepz=3)


def test_jackknife_removes_the_bias_of_a_squared_norm():
    """||E[A]||_F^2 / d = 0 for SignedPermutation (E[A] = 0): the plug-in of a squared noisy mean sits about 3 se
    high; the bias-corrected estimate's mean z over R = 100 replicates is within 4 / sqrt(R) = 0.4 of 0 (z ~ t_15 of
    variance 15/13, so the mean has sd 0.107 and 0.4 is 3.7 sd: false failure ~2e-4), the plug-in's is above 2."""
    fam = SignedPermutation(dim=6)
    fn = functools.partial(moments.mean_product_sq, steps=1)
    z_corrected, z_plug = [], []
    for seed in range(100):
        first, second, sizes = moments.group_moment_sums(fam, 400, np.random.default_rng(seed))
        value, se = moments.jackknife_prediction(fn, first, second, sizes)
        plug = fn(moments.StepMoments(first.sum(0) / sizes.sum(), second.sum(0) / sizes.sum()))
        z_corrected.append(value[1] / se[1])
        z_plug.append(plug[1] / se[1])
    assert abs(np.mean(z_corrected)) <= 4 / np.sqrt(100) and np.mean(z_plug) > 2.0


def test_jackknife_gives_the_plug_in_with_infinite_se_when_a_leave_one_out_value_is_not_finite():
    """An onset that crosses on the whole sample but never on one leave-one-out sample (mean entry 0.5 overall,
    above 0.6 without group 0): that component is the plug-in with se = inf; a component finite everywhere is the
    usual bias-corrected value (here linear in the mean, so exactly the plug-in) with its jackknife se."""
    sizes = np.full(4, 10.0)
    entries = np.array([0.05, 0.65, 0.65, 0.65])          # group means of E[A]_00; overall 0.5
    first = np.zeros((4, 2, 2))
    first[:, 0, 0] = sizes * entries
    second = np.zeros((4, 2, 2, 2, 2))

    def fn(m):
        return np.array([m.mean[0, 0], 1.0 if m.mean[0, 0] <= 0.6 else np.inf])

    value, se = moments.jackknife_prediction(fn, first, second, sizes)
    leave = (entries.sum() - entries) / 3
    se_linear = np.sqrt(3 / 4 * np.sum((leave - leave.mean()) ** 2))
    np.testing.assert_allclose(value, [0.5, 1.0], rtol=1e-12)
    assert se[0] == pytest.approx(se_linear, rel=1e-12) and se[1] == np.inf


def test_onset_from_moments_searches_past_its_first_block():
    """E[A] = 0.99 I: c(n) = 0.99^n q.k, so the onset at eps = 0.01 is log(0.01) / log(0.99) = 458.2 steps, past
    the first block of 64 (the search grows the block until it finds the crossing or reaches max_steps)."""
    d = 3
    mom = moments.StepMoments(0.99 * np.eye(d), 0.99**2 * np.einsum("ij,kl->ijkl", np.eye(d), np.eye(d)))
    q, k = np.array([1.0, 2.0, 0.5]), np.array([0.3, 1.0, -1.0])
    assert moments.onset(mom, 0.01, q=q, k=k) == pytest.approx(np.log(0.01) / np.log(0.99), rel=1e-9)
    assert moments.onset(mom, 0.01, max_steps=100, q=q, k=k) == float("inf")
