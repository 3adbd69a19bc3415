"""theory.checks and `accum check`: Monte Carlo step-law estimates against closed forms, fixed spaces against
their exact dimension, and the verdicts the issue requires (lattice {0, pi} and beta = 0 fail; beta = 1 on the
sphere and gaussian sigma = 0.5 pass), for built-in and user-defined families.

False-failure budget: 1e-4 per test (check reports run at budget 1e-4 too).
"""

import argparse
import json
import math
from dataclasses import dataclass

import numpy as np
import pytest
from scipy import stats as sps

from accum.simulations.examples import SignedPermutation
from accum.simulations.families import make_family
from accum.simulations.params import ParamError
from accum.simulations.results import read_record
from accum.simulations.stats import z_threshold
from accum.simulations.pairs import AnglePair, householder_coherent_direction, householder_samples
from accum.simulations.steps import AngleSteps, DenseSteps, HouseholderSteps, common_form
from accum.theory import checks, fixedspace, gaps, groups, householder, sampled
from accum.theory._common import NoClosedForm
from accum.theory.forms import plane_angles
from accum.theory.cli import add_subparser, run

BUDGET = 1e-4


def test_step_moments_match_closed_forms():
    rng = np.random.default_rng(0)
    d, m = 4, 20000
    for fam, mean, pair in ((make_family("householder", dim=d, beta=0.8), householder.mean_rate(0.8, d) * np.eye(d), householder.pair_operator(0.8, d)),
                            (make_family("givens", dim=d, sigma=0.7), groups.givens_rate(d, 0.7) * np.eye(d), groups.givens_pair_operator(d, 0.7))):
        chunks = sampled.draw_steps(fam, m, rng)
        mats = fixedspace.dense_steps(chunks)
        est, se = sampled.step_mean_with_se(chunks)
        kron = np.einsum("mij,mkl->mikjl", mats, mats).reshape(m, -1)
        z = np.r_[((est - mean) / se).ravel(), (fixedspace.pair_mean(mats).ravel() - pair.ravel()) / (kron.std(0, ddof=1) / math.sqrt(m) + 1e-15)]
        assert np.all(np.abs(z) <= z_threshold(BUDGET, z.size)), np.abs(z).max()
        np.testing.assert_allclose(checks.theory_mean(fam), mean, atol=1e-15)


@pytest.mark.parametrize("name,params", [("householder", dict(dim=5, beta=0.8)), ("haar", dict(dim=5)),
                                         ("so2-accumulated", dict(dim=6, law="gaussian", sigma=0.5, mu=0.3))])
def test_step_mean_in_column_blocks_equals_the_dense_mean(name, params, monkeypatch):
    """The column blocks (a few entries each here, so d = 5 splits unevenly) give the plain fp64 mean and standard
    error of the dense steps, for each step form (Householder, dense, angles)."""
    from accum.simulations import pairs
    monkeypatch.setattr(pairs, "PIECE_ELEMENTS", 7)
    chunks = sampled.draw_steps(make_family(name, **params), 37, np.random.default_rng(3))
    mats = fixedspace.dense_steps(chunks)
    est, se = sampled.step_mean_with_se(chunks)
    np.testing.assert_allclose(est, mats.mean(axis=0), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(se, mats.std(axis=0, ddof=1) / math.sqrt(len(mats)), rtol=1e-9, atol=1e-15)


@pytest.mark.parametrize("name,params,dim_fixed,kappa", [
    ("haar", dict(dim=5), 1, 1 / 5),
    ("so2-accumulated", dict(dim=6, law="gaussian", sigma=0.5), 6, 0.5),  # I_b and J_b per plane
    ("so2-accumulated", dict(dim=4, law="lattice", m=2), 8, 1.0),  # every within-plane 2x2 matrix
    ("householder", dict(dim=4, beta=0.0), 16, 1.0),
    ("householder", dict(dim=4, beta=1.0), 0, 0.0),
])
def test_fixed_space_dimension_and_coherent_direction(name, params, dim_fixed, kappa):
    rng = np.random.default_rng(1)
    mats = fixedspace.dense_steps(sampled.draw_steps(make_family(name, **params), 800, rng))
    fixed, comp = fixedspace.fixed_space(fixedspace.pair_mean(mats))
    d = params["dim"]
    assert fixed.shape[1] == dim_fixed and comp.shape[1] == d * d - dim_fixed
    assert fixedspace.coherent_direction(fixed, d, rng) == pytest.approx(kappa, abs=1e-6)


@dataclass(frozen=True)
class TiedPlanes:
    """User-defined block SO(2) steps with planes tied to plane 0: plane 1 turns with it, plane 2 against it, plane
    3 by an independent angle; ``flip`` adds a plane turning by 0 or pi (a within-plane coherent direction)."""

    flip: bool = False

    @property
    def dim(self):
        return 10 if self.flip else 8

    def sample(self, rng, n_steps, batch):
        a, b = rng.normal(0.3, 1.0, size=(2, batch, n_steps))
        planes = [a, a, -a, b] + ([np.pi * rng.integers(0, 2, size=(batch, n_steps))] if self.flip else [])
        return AngleSteps(np.stack(planes, axis=-1))


@pytest.mark.parametrize("family, kappa", [
    (make_family("so2-accumulated", dim=6, law="gaussian", sigma=0.5), 0.5),
    (make_family("so2-accumulated", dim=8, law="lattice", m=3), 0.5),
    (make_family("so2-accumulated", dim=4, law="lattice", m=2), 1.0),
    (make_family("nope", dim=6), 1.0),
    (make_family("rope", dim=8), 0.5),  # |G-| = |G+| = 1 off the diagonal, yet nothing there is fixed
    (TiedPlanes(), 0.5),  # tied planes enlarge F (p_01, r_02 fixed) but every probe still loses half its weight
    (TiedPlanes(flip=True), 1.0),
])
def test_coherent_direction_in_the_plane_basis_equals_the_explicit_fixed_space(family, kappa):
    """The plane-basis kappa (any d) against the explicit d^2 x d^2 fixed space and the dense ascent (small d)."""
    rng = np.random.default_rng(4)
    chunks = sampled.draw_steps(family, 600, rng)
    dense = fixedspace.coherent_direction(fixedspace.fixed_space(fixedspace.pair_mean(fixedspace.dense_steps(chunks)))[0], family.dim, rng)
    assert AnglePair(chunks).coherent_direction(rng) == pytest.approx(dense, abs=1e-9)
    assert dense == pytest.approx(kappa, abs=1e-9)


@dataclass(frozen=True)
class Reflections:
    """User-defined Householder steps: w drawn from the given spans (unit vectors, one span chosen per step),
    scaled by ``length``, and beta = 2 / length^2 (reflections) or, for every other step with ``mix``, beta = 1."""

    spans: tuple = ((0, 1, 2), (3, 4))
    dim: int = 5
    length: float = 1.0
    mix: bool = False

    def sample(self, rng, n_steps, batch):
        which = rng.integers(0, len(self.spans), size=(batch, n_steps))
        w = np.zeros((batch, n_steps, self.dim))
        for i, span in enumerate(self.spans):
            g = rng.normal(size=(batch, n_steps, len(span)))
            w[..., list(span)] += (which == i)[..., None] * g / np.linalg.norm(g, axis=-1, keepdims=True)
        beta = np.full((batch, n_steps), 2.0 / self.length**2)
        if self.mix:
            beta[::2] = 1.0
        return HouseholderSteps(self.length * w, beta)


@pytest.mark.parametrize("family, kappa", [
    (make_family("householder", dim=4, beta=1.0), 0.0),  # contractions along directions spanning R^4: F = 0
    (make_family("householder", dim=4, beta=2.0), 0.25),  # reflections, one component: F = R I
    (make_family("householder", dim=4, beta=0.0), 1.0),  # identity steps
    (make_family("householder", dim=6, beta=1.0, w="token", vocab=3), 1.0),  # w's span 3 of 6 dimensions
    (Reflections(), 0.5),  # two orthogonal components of dimensions 3 and 2: F = R I_3 + R I_2
    (Reflections(spans=((0,), (1, 2, 3)), dim=4, length=1.5), 1.0),  # a lone reflection axis flips q = e_0 for ever
    (Reflections(spans=((0, 1), (2, 3)), dim=5), 1.0),  # an untouched direction
])
def test_householder_coherent_direction_from_the_span_equals_the_explicit_fixed_space(family, kappa):
    """The span-based kappa (any d) against the explicit d^2 x d^2 fixed space and the dense ascent (small d)."""
    rng = np.random.default_rng(5)
    chunks = sampled.draw_steps(family, 600, rng)
    dense = fixedspace.coherent_direction(fixedspace.fixed_space(fixedspace.pair_mean(fixedspace.dense_steps(chunks)))[0], family.dim, rng)
    assert householder_coherent_direction(*householder_samples(chunks)) == pytest.approx(dense, abs=1e-9)
    assert dense == pytest.approx(kappa, abs=1e-9)


def test_householder_coherent_direction_leaves_mixed_reflections_to_the_explicit_fixed_space():
    rng = np.random.default_rng(6)
    chunks = sampled.draw_steps(Reflections(mix=True), 600, rng)
    assert householder_coherent_direction(*householder_samples(chunks)) is None
    r = report(Reflections(mix=True))
    assert "explicit fixed space" in r.conditions["coherent-direction"].detail


def report(family, samples=1500, seed=0):
    return checks.check(family, np.random.default_rng(seed), samples=samples, budget=BUDGET, k_max=16)


def test_lattice_law_and_beta_zero_fail_the_condition():
    lat = report(make_family("so2-accumulated", dim=8, law="lattice", m=2))
    assert not lat.condition_holds
    assert lat.conditions["non-lattice"].passed is False and lat.conditions["coherent-direction"].passed is False
    assert lat.conditions["first-moment-gap"].passed  # the mean vanishes, yet the law is lattice
    assert not lat.claims["C1"]["applies"] and not lat.claims["C4"]["applies"]
    assert "lattice of step 2 pi / 2" in lat.claims["C1"]["why"] and "lattice of step 2 pi / 2" in lat.claims["C4"]["why"]
    zero = report(make_family("householder", dim=8, beta=0.0))
    assert not zero.condition_holds and zero.conditions["first-moment-gap"].passed is False
    assert zero.conditions["second-moment-gap"].passed is False and zero.conditions["non-lattice"].passed is None
    assert "no first-moment gap" in zero.claims["C1"]["why"] and "lattice" not in zero.claims["C1"]["why"]
    assert "every direction is fixed" in zero.claims["C4"]["why"] and "lattice" not in zero.claims["C4"]["why"]
    assert not any(zero.claims[c]["applies"] for c in ("C1", "C2", "C3", "C4", "C6")) and zero.claims["C5"]["applies"]


def test_gaussian_and_householder_sphere_pass():
    gauss = report(make_family("so2-accumulated", dim=8, law="gaussian", sigma=0.5))
    assert gauss.condition_holds and all(c["applies"] for c in gauss.claims.values())
    assert gauss.conditions["non-lattice"].passed and gauss.conditions["orthogonal"].passed
    assert gauss.theory["mean_step_max_z"] <= gauss.theory["mean_step_k"]  # sampler agrees with the closed form
    # its threshold: the statistical conditions' share budget / 4, Bonferroni over the d^2 entries, two-sided
    assert gauss.theory["mean_step_k"] == pytest.approx(z_threshold(BUDGET / 4, 8 * 8), rel=1e-12)
    hh = report(make_family("householder", dim=8, beta=1.0))
    assert hh.condition_holds and hh.conditions["orthogonal"].passed is False and hh.conditions["norm-bounded"].passed
    assert hh.conditions["non-lattice"].passed is None
    # orthogonality is a property no claim needs: a contraction shows "no", not FAIL, beside a holding condition
    text = checks.format_report(hh)
    assert "  no    orthogonal" in text and "FAIL" not in text and "spectral-gap condition: HOLDS" in text
    refl = report(make_family("householder", dim=8, beta=2.0))
    assert refl.condition_holds and refl.conditions["orthogonal"].passed


def test_untouched_directions_fail_c1_and_c4_without_a_false_hint():
    """PaTH with token vectors spanning 4 of 16 dimensions: E[A] = 1 on the rest (g1 = 1 to rounding, its se ~ 0),
    so no number of samples resolves C1; and a probe there stays coherent (kappa = 1)."""
    r = report(make_family("householder", dim=16, beta=1.0, w="token", vocab=4))
    assert not r.condition_holds and r.conditions["coherent-direction"].value == 1.0
    assert "no first-moment gap" in r.claims["C1"]["why"] and "--samples" not in r.claims["C1"]["why"]
    assert "kappa = 1" in r.claims["C4"]["why"]
    near = checks.verdict({**r.conditions, "first-moment-gap": checks.Condition("first-moment-gap", False, 0.99, 0.004)})[0]
    assert "more --samples may resolve it" in near["C1"]["why"]  # 2.5 se below 1: more samples can decide


def test_token_laws_too_large_for_the_transfer_matrix_have_no_closed_form_not_a_crash():
    """vocab = 10^6: the V x V transfer matrix (7 TiB) is never formed: the theory has no closed form there, and
    the check still decides from its samples; a Markov law over 5000 tokens has no product rate, so C1 is not
    certified for its dependent steps."""
    from accum.theory import so2

    big = make_family("so2-accumulated", dim=2, law="token", vocab=10**6)
    with pytest.raises(NoClosedForm, match="MAX_TRANSFER_ENTRIES"):
        so2.path_characteristic(plane_angles(big), 3)
    assert report(big, samples=400).condition_holds
    markov = report(make_family("so2-accumulated", dim=16, law="token", vocab=5000, source="markov"), samples=400)
    assert "product_rate" not in markov.theory and "no product rate is known" in markov.claims["C1"]["why"]


def test_markov_tokens_are_dependent_and_certified_by_the_transfer_matrix():
    r = report(make_family("so2-accumulated", dim=8, law="token", source="markov", stay=0.5))
    assert r.conditions["independent-steps"].passed is False
    assert r.theory["product_rate"] < 1 and r.claims["C1"]["applies"] and "transfer matrix" in r.claims["C1"]["why"]


@dataclass(frozen=True)
class StickyRotation:
    """User-defined: one random 2-d rotation angle per sequence, repeated at every step (dependent steps)."""

    dim: int = 2

    def sample(self, rng, n_steps, batch):
        theta = np.repeat(rng.uniform(-1.0, 1.0, size=(batch, 1)), n_steps, axis=1)
        c, s = np.cos(theta), np.sin(theta)
        return DenseSteps(np.stack([np.stack([c, -s], -1), np.stack([s, c], -1)], -2))


def test_user_defined_families():
    good = report(SignedPermutation(dim=5, signed=1))
    assert good.condition_holds and good.theory == {} and good.family.endswith("SignedPermutation")
    bad = report(SignedPermutation(dim=5, signed=0))
    assert not bad.condition_holds and bad.conditions["first-moment-gap"].passed is False
    sticky = report(StickyRotation())
    assert sticky.conditions["first-moment-gap"].passed and sticky.conditions["independent-steps"].passed is False
    assert not sticky.claims["C1"]["applies"] and "not certify" in sticky.claims["C1"]["why"]


def parser():
    p = argparse.ArgumentParser(prog="accum")
    add_subparser(p.add_subparsers(dest="command"))
    return p


def test_cli_exit_status_output_and_record(tmp_path, capsys):
    path = tmp_path / "check.json"
    args = parser().parse_args(["check", "householder", "--param", "dim=6", "--param", "beta=1", "--seed", "3",
                                "--samples", "800", "--json", str(path)])
    assert run(args) == 0
    out = capsys.readouterr().out
    assert "spectral-gap condition: HOLDS" in out and "first-moment-gap" in out
    rec = read_record(path)
    assert rec["kind"] == "check" and rec["seed"] == 3 and rec["config"]["params"]["beta"] == 1.0
    assert rec["result"]["claims"]["C1"]["applies"] is True
    json.dumps(rec)
    args = parser().parse_args(["check", "so2-accumulated", "--param", "dim=4", "--param", "law=lattice", "--param", "m=2",
                                "--samples", "400"])
    assert run(args) == 1 and "FAILS" in capsys.readouterr().out
    with pytest.raises(ParamError):
        run(parser().parse_args(["check", "householder", "--param", "beta=3"]))
    with pytest.raises(ParamError):
        run(parser().parse_args(["check", "haar", "--samples", "2"]))


@pytest.mark.parametrize("name,params", [("so2-accumulated", dict(dim=6, law="gaussian", mu=0.3, sigma=0.8)),
                                         ("householder", dict(dim=5, beta=1.3)), ("haar", dict(dim=3))])
def test_structured_pair_operators_equal_the_dense_sums(name, params):
    """S(X) = mean A X A^T, T(X) = mean A^T X A and <U, A_i V A_i^T> in the angle / Householder forms against plain
    fp64 sums over the dense matrices, on asymmetric X, U, V."""
    rng = np.random.default_rng(7)
    chunks = sampled.draw_steps(make_family(name, **params), 37, rng)
    mats = fixedspace.dense_steps(chunks)
    d = mats.shape[1]
    x, u, v = rng.normal(size=(3, d, d))
    op = common_form(chunks).pair_operator(chunks)
    assert type(op).__name__ == {"so2-accumulated": "AnglePair", "householder": "HouseholderPair", "haar": "DensePair"}[name]
    np.testing.assert_allclose(op.left(x), sum(a @ x @ a.T for a in mats) / len(mats), atol=1e-12)
    np.testing.assert_allclose(op.right(x), sum(a.T @ x @ a for a in mats) / len(mats), atol=1e-12)
    np.testing.assert_allclose(op.values(u, v), [np.sum(u * (a @ v @ a.T)) for a in mats], atol=1e-12)


def test_split_sample_first_moment_gap_is_unbiased_where_the_plug_in_is_not():
    """Householder beta = 1, d = 16: sigma_max(E[A]) = 1 - 1/16 = 0.9375 exactly.  The split-sample estimate is within
    its two-sided threshold (budget 1e-4); the plug-in sigma_max of the noisy mean lies above it by more than 3 se."""
    fam = make_family("householder", dim=16, beta=1.0)
    chunks = sampled.draw_steps(fam, 4000, np.random.default_rng(11))
    gap = gaps.first_moment_gap(*sampled.split(chunks))
    assert abs(gap.value - 0.9375) <= z_threshold(BUDGET, 1) * gap.stderr
    assert gap.plug_in > 0.9375 + 3 * gap.stderr


def test_gaps_report_the_skewness_of_the_values_they_average():
    """Gap.skew is the sample skewness (scipy.stats.skew, biased) of the second half's values whose mean is the
    estimate: u'A_i v for g1 (a skewed mean needs ``verdict.hall_transform``), <U, A_i V A_i'> for g2."""
    half1, half2 = sampled.split(sampled.draw_steps(make_family("givens", dim=8, sigma=1.0), 2000,
                                                    np.random.default_rng(14)))
    g1 = gaps.first_moment_gap(half1, half2)
    vals = sampled.bilinear_values(half2, *g1.pair)
    assert g1.value == pytest.approx(vals.mean(), rel=1e-12) and g1.skew == pytest.approx(sps.skew(vals), rel=1e-9)
    assert g1.skew < -2  # most Givens steps leave u'v nearly as it is; a few turn it down
    g2 = gaps.second_moment_gap(half1, half2, np.random.default_rng(15))
    vals2 = common_form(half2).pair_operator(half2).values(*g2.pair)
    assert g2.skew == pytest.approx(sps.skew(vals2), rel=1e-9)
    assert gaps.sample_skewness(np.full(5, 0.3)) == 0.0


def test_head_size_128_holds_for_gaussian_angles_and_fails_for_a_lattice():
    """d = 128 (above pair_dim): the matrix-free second-moment gap and the plane-basis coherent direction decide C4
    (nothing skipped); the lattice law fails for its real reason."""
    good = report(make_family("so2-accumulated", dim=128, law="gaussian", mu=0.3, sigma=0.5), samples=800)
    assert good.condition_holds and good.conditions["coherent-direction"].value == pytest.approx(0.5, abs=1e-9)
    assert good.conditions["second-moment-gap"].passed and "skipped" not in good.claims["C4"]["why"]
    # dense steps above pair_dim: the coherent direction is skipped, shown, and fails nothing
    hh = report(make_family("haar", dim=40), samples=300)
    assert hh.conditions["coherent-direction"].passed is None and "  skip  coherent-direction" in checks.format_report(hh)
    assert hh.condition_holds and "coherent-direction skipped" in hh.claims["C4"]["why"]
    # exact g2 = max(|phi(1)|^2, |phi(2)|) = exp(-sigma^2) for gaussian angles; the split estimate is within k se
    g2 = good.conditions["second-moment-gap"]
    assert abs(g2.value - math.exp(-0.25)) <= z_threshold(BUDGET, 1) * g2.stderr
    lat = report(make_family("so2-accumulated", dim=128, law="lattice", m=3), samples=800)
    assert not lat.condition_holds and "lattice of step 2 pi / 3" in lat.claims["C1"]["why"]


def test_check_requires_an_rng():
    with pytest.raises(TypeError):
        checks.check(make_family("haar", dim=3))  # no unseeded default


@pytest.mark.parametrize("d", [16, 64])
def test_second_moment_gap_of_householder_is_its_norm_rate(d):
    """Householder beta = 1 on the sphere: S(X) = E[A X A] is self-adjoint with top value tau = 1 - 1/d on the trace
    direction (traceless parts: 1 - 2/d + 2/(d(d+2)), antisymmetric: 1 - 2/d), no fixed space.  The split estimate
    is biased down (second order in the first half's noise), the plug-in up: they must bracket tau within k se
    (budget 1e-4), and the split estimate must lie above the traceless value, i.e. the trace direction was found."""
    chunks = sampled.draw_steps(make_family("householder", dim=d, beta=1.0), 2000, np.random.default_rng(12))
    gap = gaps.second_moment_gap(*sampled.split(chunks), np.random.default_rng(13))
    tau, k = householder.norm_rate(1.0, d), z_threshold(BUDGET, 1)
    traceless = householder.pair_coefficients(1.0, d)[0]
    assert not gap.all_fixed and gap.value - k * gap.stderr <= tau <= gap.plug_in + k * gap.stderr, (gap, tau)
    assert gap.value - k * gap.stderr > traceless, (gap, traceless)


def test_top_singular_pair_by_lanczos_equals_the_full_svd(monkeypatch):
    """Past DIRECT_SVD_DIM the top pair comes from ARPACK (svds, k = 1): on a non-symmetric 37 x 37 matrix with a
    clear top value it is the full SVD's pair, up to one common sign, and u^T M v = sigma_max."""
    rng = np.random.default_rng(14)
    a, b = rng.normal(size=37), rng.normal(size=37)
    m = 3.0 * np.outer(a / np.linalg.norm(a), b / np.linalg.norm(b)) + 0.1 * rng.normal(size=(37, 37))
    u_ref, s_ref, vh_ref = np.linalg.svd(m)
    monkeypatch.setattr(gaps, "DIRECT_SVD_DIM", 10)
    u, s, v = gaps.top_singular_pair(m)
    assert s == pytest.approx(s_ref[0], rel=1e-10) and float(u @ m @ v) == pytest.approx(s_ref[0], rel=1e-10)
    sign = np.sign(u @ u_ref[:, 0])
    np.testing.assert_allclose(sign * u, u_ref[:, 0], atol=1e-8)
    np.testing.assert_allclose(sign * v, vh_ref[0], atol=1e-8)


def test_second_moment_gap_of_steps_that_annihilate_everything_is_zero():
    """A = 0 (a user family's degenerate steps): S = 0, so the power method's first step gives S(V) = 0 and
    T(S(V)) = 0; the gap is 0 exactly, with no division by zero on the way (warnings are errors here)."""
    import warnings

    zero = DenseSteps(np.zeros((40, 1, 3, 3)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gap = gaps.second_moment_gap(*sampled.split([zero]), np.random.default_rng(15))
    assert gap.value == 0.0 and gap.plug_in == 0.0


def test_second_moment_gap_of_a_vanishing_scale_stops_where_the_power_step_underflows():
    """A = c I with c^2 = 1e-81: S = c^2 I has no fixed space, so g2 = c^2.  |S(V)| = 1e-81 is representable, but
    the Frobenius norm of T(S(V)) = c^4 V (entries ~6e-163, their squares below the smallest double) is 0: the
    power method must stop there (not divide by it; warnings are errors here) and estimate <U, S V> = c^2."""
    import warnings

    c = math.sqrt(1e-81)
    scaled = DenseSteps(np.broadcast_to(c * np.eye(3), (40, 1, 3, 3)).copy())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gap = gaps.second_moment_gap(*sampled.split([scaled]), np.random.default_rng(15))
    assert gap.value == pytest.approx(c**2, rel=1e-12) and gap.plug_in == pytest.approx(c**2, rel=1e-12)
    assert gap.iterations == 1


def test_second_moment_gap_stops_at_its_step_cap(monkeypatch):
    """With the tolerance at 0 (never converged) and a cap of 3 steps, the power method takes exactly 3 steps and
    says it did not converge (its value is then a lower bound)."""
    monkeypatch.setattr(gaps, "POWER_TOL", 0.0)
    monkeypatch.setattr(gaps, "POWER_ITERS", 3)
    monkeypatch.setattr(gaps, "POWER_ITERS_MAX", 3)
    chunks = sampled.draw_steps(make_family("householder", dim=4, beta=1.0), 200, np.random.default_rng(19))
    gap = gaps.second_moment_gap(*sampled.split(chunks), np.random.default_rng(20))
    assert gap.iterations == 3 and not gap.converged
