"""The verdict logic of ``accum verify`` (``accum/verdict.py``: thresholds, z, detectable effects, judging, the
claim and report verdicts, the standard-error ratio, the binomial summaries), row shape by row shape: one- and
two-sided, one and many points, normal and t references, relative and absolute detectable effects, log scale,
estimated predictions, exact, bound and adversarial rows.  Every expected number is computed here from its
formula, independently of the module; the file runs in seconds, so the mutation run (docs/verify.md, "Mutation
testing of the verdict code") can use it.

Mutants of verdict.py that no input can tell apart from it (cosmic-ray's survivors, each read by hand):

* type annotations (``float | None`` -> ``float + None``, ``float * None``, ...): the module has
  ``from __future__ import annotations``, so annotations are strings and never evaluated;
* string comparisons that agree on every admitted value: ``m.scale == "log"`` -> ``>= "log"`` and
  ``m.scale != "linear"`` -> ``> "linear"`` (``Measurement`` admits only "linear" < "log"), ``m.kind !=
  "statistical"`` -> ``< "statistical"`` (adversarial, bound and exact all sort before it), ``reference ==
  "normal"`` -> ``<= "normal"`` (the only other reference, "t", sorts after it);
* in ``stderr_ratio``, anything done to ``vb``: vb = mean_r mean_j se_rj^2 / mean_r se_rj^2 = 1 exactly (up to
  rounding), so ``/ vb**2``, ``/ vb**3``, ``/ vb**1``, ``* vb**2``, ``** vb**2``, ``ub * vb``, ``ub / vb``,
  ``ub ** vb`` and ``sqrt(ub * vb)`` give one number;
* in ``stderr_ratio``, ``x.shape[1] > 1`` -> ``!= 1`` and ``x.shape[0] == 1`` -> ``<= 1``: they differ only for an
  array of no outputs or no replicates; ``x.shape[1] > 1`` -> ``> 0`` or ``>= 1`` differ only for a (1, 1) array,
  whose transpose is itself;
* ``self.reference == "t"`` -> ``>= "t"`` in ``Measurement.__post_init__`` (the clause before it admits only
  "normal" and "t", and "normal" sorts before "t"), ``m.side == "upper"`` -> ``>= "upper"`` in ``judge`` (the
  other sides, "lower" and "two", sort before "upper");
* in ``binomial_interval``, ``failures == 0`` -> ``<= 0`` and ``failures == runs`` -> ``>= runs``: they differ only
  for counts outside 0 <= failures <= runs, which no caller makes.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from accum import verdict as v


def row(measured, predicted=0.0, stderr=1.0, **kw):
    return v.Measurement(kw.pop("claim", "C1"), "f", "w", kw.pop("kind", "statistical"), np.asarray(measured, float),
                         np.asarray(stderr, float), np.asarray(predicted, float), kw.pop("n", 10), **kw)


ALPHA = 0.01


# --- Measurement -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", v.KINDS)
def test_every_kind_is_accepted_and_evidence_is_statistical_or_adversarial(kind):
    m = row(0.0, kind=kind)
    assert m.counts_as_evidence == (kind in ("statistical", "adversarial"))
    assert v.EVIDENCE == ("statistical", "adversarial")


def test_a_bad_kind_or_reference_is_refused():
    with pytest.raises(ValueError, match="kind"):
        row(0.0, kind="other")
    with pytest.raises(ValueError, match="reference"):
        row(0.0, reference="cauchy")
    with pytest.raises(ValueError, match="reference"):
        row(0.0, reference="t")  # t needs dof
    with pytest.raises(ValueError, match="reference"):
        row(0.0, reference="t", dof=0.5)
    assert row(0.0, reference="t", dof=1).dof == 1


def test_points_count_the_measured_values():
    assert row(1.0).points == 1
    assert row([1.0, 2.0, 3.0]).points == 3


def test_rows_are_frozen():
    import dataclasses

    m = row(0.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.kind = "exact"
    with pytest.raises(dataclasses.FrozenInstanceError):
        v.judge(m, ALPHA).passed = False


def test_a_bad_scale_or_side_is_refused():
    with pytest.raises(ValueError, match="scale"):
        row(0.0, scale="logs")
    with pytest.raises(ValueError, match="side"):
        row(0.0, side="both")


# --- thresholds ----------------------------------------------------------------------------------------------


def test_a_row_without_points_gets_the_one_point_threshold():
    assert v.threshold(row(np.zeros(0)), ALPHA) == pytest.approx(sps.norm.isf(ALPHA / 2), rel=1e-14)


def test_reference_quantiles_are_normal_and_student_t():
    assert v.reference_isf(0.01, "normal", None) == pytest.approx(sps.norm.isf(0.01), rel=1e-15)
    assert v.reference_isf(0.01, "t", 5) == pytest.approx(sps.t.isf(0.01, 5), rel=1e-15)


@pytest.mark.parametrize("side, per_point", [("two", 0.5), ("upper", 1.0), ("lower", 1.0)])
@pytest.mark.parametrize("points", [1, 3])
@pytest.mark.parametrize("reference, dof", [("normal", None), ("t", 7)])
def test_threshold_splits_the_share_over_points_and_sides(side, per_point, points, reference, dof):
    m = row([0.0] * points, side=side, reference=reference, dof=dof)
    p = ALPHA / points * per_point
    want = sps.norm.isf(p) if reference == "normal" else sps.t.isf(p, dof)
    assert v.threshold(m, ALPHA) == pytest.approx(want, rel=1e-14)


# --- z scores ------------------------------------------------------------------------------------------------


def test_linear_z_uses_both_standard_errors_and_the_floor():
    m = row([3.0, 4.0], [1.0, 1.0], [1.0, 2.0], pred_stderr=[2.0, 3.0], floor=0.5)
    np.testing.assert_allclose(v.z_scores(m), [2.0 / math.sqrt(1 + 4 + 0.25), 3.0 / math.sqrt(4 + 9 + 0.25)],
                               rtol=1e-14)


def test_log_z_is_the_delta_method_on_the_log_scale():
    m = row(110.0, 100.0, 5.0, pred_stderr=4.0, scale="log", floor=0.01)
    want = (math.log(110) - math.log(100)) / math.sqrt((5 / 110) ** 2 + (4 / 100) ** 2 + 0.01**2)
    assert float(v.z_scores(m)[0]) == pytest.approx(want, rel=1e-14)


def test_hall_transform_by_hand_and_monotone():
    """gamma = -3, n = 100: a = -0.1, t = 2 -> 2 - 0.4 + 0.01 * 8 / 3 - 0.05; gamma = 0 is the identity; the
    derivative (1 + a t)^2 >= 0 keeps it increasing, also past t = -1/a where Johnson's quadratic turns back."""
    assert float(v.hall_transform(np.array(2.0), -3.0, 100)) == pytest.approx(2 - 0.4 + 0.08 / 3 - 0.05, rel=1e-14)
    t = np.linspace(-60.0, 60.0, 2401)
    np.testing.assert_array_equal(v.hall_transform(t, 0.0, 50), t)
    assert np.all(np.diff(v.hall_transform(t, -3.0, 100)) >= 0) and np.all(np.diff(v.hall_transform(t, 2.0, 30)) >= 0)


def test_hall_transform_brings_a_skewed_mean_to_the_normal_tails():
    """Means of n = 100 exponential values (skewness 2), 40,000 replicates, fixed seed: the studentized mean's lower
    tail beyond -2.5 holds over 3x the normal's share; with each replicate's own sample skewness given, both tails are
    within 35% of the normal's (the rows of ``check-gaps`` use this: their Givens values have skewness about -7)."""
    rng = np.random.default_rng(7)
    n, reps = 100, 40_000
    x = rng.exponential(size=(reps, n))
    se = x.std(axis=1, ddof=1) / math.sqrt(n)
    skew = sps.skew(x, axis=1)
    plain = v.z_scores(row(x.mean(axis=1), 1.0, se))
    hall = v.z_scores(row(x.mean(axis=1), 1.0, se, skew=skew, n=n))
    normal = reps * sps.norm.sf(2.5)
    assert np.sum(plain < -2.5) > 3 * normal
    for tail in (np.sum(hall < -2.5), np.sum(hall > 2.5)):
        assert abs(tail / normal - 1) < 0.35, (tail, normal)


def test_skew_goes_with_the_linear_scale_only():
    with pytest.raises(ValueError, match="linear scale only"):
        row(1.0, 1.0, 0.1, scale="log", skew=1.0)


def test_a_zero_standard_error_gives_infinite_z_and_nan_for_equality():
    with np.errstate(all="ignore"):
        z = v.z_scores(row([1.0, 0.0, -1.0], 0.0, 0.0, floor=0.0))
    assert z[0] == np.inf and np.isnan(z[1]) and z[2] == -np.inf


# --- detectable effects --------------------------------------------------------------------------------------


def test_relative_mde_is_the_best_resolved_point():
    k = 4.0
    m = row([2.0, 4.0, 0.0], [10.0, 20.0, 0.0], [0.1, 0.3, 0.001], pred_stderr=[0.0, 0.4, 0.0])
    # points: 4 * 0.1 / 10 = 0.04, 4 * 0.5 / 20 = 0.1; the point predicted 0 has no relative error
    assert v.min_detectable_effect(m, k) == pytest.approx(0.04, rel=1e-14)


def test_mde_against_an_effect_scale():
    assert v.min_detectable_effect(row(0.1, 0.0, 0.01, effect_scale=-5.0), 3.0) == pytest.approx(3 * 0.01 / 5)


def test_log_mde_is_k_times_the_relative_error():
    m = row([80.0, 40.0], [100.0, 50.0], [2.0, 2.0], pred_stderr=[3.0, 0.0], scale="log")
    want = 3.0 * min(math.hypot(2 / 80, 3 / 100), 2 / 40)  # se relative to the measurement, pse to the prediction
    assert v.min_detectable_effect(m, 3.0) == pytest.approx(want, rel=1e-14)


@pytest.mark.parametrize("kind", ["adversarial", "exact", "bound"])
def test_only_statistical_rows_have_detectable_effects(kind):
    m = row(1.0, 2.0, 0.1, kind=kind)
    assert v.min_detectable_effect(m, 3.0) is None and v.absolute_detectable_effect(m, 3.0) is None
    assert v.absolute_detectable_effect(row(0.1, 0.0, 0.01, kind=kind), 3.0) is None  # predicted 0: still none


def test_a_row_predicted_zero_states_an_absolute_effect():
    m = row([0.1, -0.2], [0.0, 1e-13], [0.02, 0.01], pred_stderr=[0.0, 0.01])
    assert v.min_detectable_effect(m, 3.0) is None
    assert v.absolute_detectable_effect(m, 3.0) == pytest.approx(3.0 * min(0.02, math.sqrt(2) * 0.01), rel=1e-14)


def test_absolute_effect_only_where_every_prediction_is_zero_on_the_linear_scale():
    assert v.absolute_detectable_effect(row([0.1, 0.2], [0.0, 0.5], 0.01), 3.0) is None
    assert v.absolute_detectable_effect(row(0.1, 0.0, 0.01, scale="log"), 3.0) is None
    assert v.absolute_detectable_effect(row(0.1, 0.0, 0.01, effect_scale=2.0), 3.0) is None
    assert v.absolute_detectable_effect(row(0.1, 1e-12, 0.01), 3.0) == pytest.approx(0.03)  # |p| <= floor is 0


def test_a_prediction_at_the_floor_is_zero_for_the_relative_effect_too():
    """|p| = floor exactly is a prediction of 0 in both detectable effects (the docstrings' |p| <= floor)."""
    assert v.min_detectable_effect(row(0.1, 1e-12, 0.01), 3.0) is None
    assert v.absolute_detectable_effect(row(0.1, 1e-12, 0.01), 3.0) == pytest.approx(0.03)


# --- judging ---------------------------------------------------------------------------------------------------


def k_of(m):
    return v.threshold(m, ALPHA)


@pytest.mark.parametrize("reference, dof", [("normal", None), ("t", 4)])
def test_two_sided_one_point_passes_inside_and_fails_outside_k(reference, dof):
    k = k_of(row(0.0, reference=reference, dof=dof))
    for sign in (1, -1):
        inside = v.judge(row(sign * (k - 1e-9), reference=reference, dof=dof), ALPHA)
        outside = v.judge(row(sign * (k + 1e-9), reference=reference, dof=dof), ALPHA)
        assert inside.passed and not outside.passed
        assert inside.k == pytest.approx(k) and inside.reference == reference and inside.dof == dof
    at = v.judge(row(k_of(row(0.0, reference=reference, dof=dof)), reference=reference, dof=dof), ALPHA)
    assert at.passed  # |z| <= k passes at the threshold itself


def test_two_sided_many_points_reports_the_worst_by_absolute_z():
    m = row([0.5, -4.5, 3.0], [0.0, 0.0, 0.0], 1.0)
    r = v.judge(m, ALPHA)
    assert r.measured == -4.5 and r.z == -4.5 and r.points == 3 and not r.passed
    assert r.k == pytest.approx(sps.norm.isf(ALPHA / 6))


def test_upper_rows_fail_only_above():
    k = k_of(row(0.0, side="upper"))
    assert v.judge(row(-100.0, side="upper"), ALPHA).passed
    assert v.judge(row(k, side="upper"), ALPHA).passed
    assert not v.judge(row(k + 1e-9, side="upper"), ALPHA).passed
    worst = v.judge(row([1.0, 2.5, -9.0], side="upper"), ALPHA)
    assert worst.measured == 2.5 and worst.side == "upper"


def test_lower_rows_fail_only_below():
    k = k_of(row(0.0, side="lower"))
    assert v.judge(row(100.0, side="lower"), ALPHA).passed
    assert v.judge(row(-k, side="lower"), ALPHA).passed
    assert not v.judge(row(-k - 1e-9, side="lower"), ALPHA).passed
    worst = v.judge(row([1.0, -2.5, 9.0], side="lower"), ALPHA)
    assert worst.measured == -2.5 and worst.side == "lower"


@pytest.mark.parametrize("side", ["two", "upper", "lower"])
def test_a_non_finite_point_fails_every_side(side):
    assert not v.judge(row([0.0, np.nan], side=side), ALPHA).passed
    nothing = v.judge(row([np.nan, np.nan], [1.0, 2.0], side=side), ALPHA)
    assert not nothing.passed and nothing.predicted == 1.0  # no finite z: the first point is reported


def test_exact_and_bound_rows_use_k_1_on_the_floor():
    ok = v.judge(row(1.0 + 5e-13, 1.0, 0.0, kind="exact"), ALPHA)
    assert ok.passed and ok.k == 1.0 and ok.reference == "exact" and not ok.counts_as_evidence and ok.mde is None
    assert not v.judge(row(1.0 + 2e-12, 1.0, 0.0, kind="exact"), ALPHA).passed
    bound = v.judge(row([0.2, 0.3], [0.25, 0.3], 0.0, kind="bound", side="upper"), ALPHA)
    assert bound.passed and bound.measured == 0.3 and bound.k == 1.0  # at the bound itself: z = 0
    broken = v.judge(row([0.2, 0.31], [0.25, 0.3], 0.0, kind="bound", side="upper"), ALPHA)
    assert not broken.passed and broken.measured == 0.31 and broken.reference == "exact"


def test_adversarial_rows_are_evidence_judged_at_their_share_without_an_mde():
    r = v.judge(row([0.1, 0.2], [0.5, 0.5], 0.0, kind="adversarial", side="upper"), ALPHA)
    assert r.passed and r.counts_as_evidence and r.reference == "normal" and r.mde is None
    assert r.k == pytest.approx(sps.norm.isf(ALPHA / 2))
    assert not v.judge(row(0.6, 0.5, 0.0, kind="adversarial", side="upper"), ALPHA).passed


def test_judge_carries_every_field_of_the_worst_point():
    m = row([1.0, 7.0], [1.5, 2.0], [0.5, 1.0], pred_stderr=[0.1, 0.2], reference="t", dof=9, source="s",
            n=42, params={"a": 1}, claim="C4")
    r = v.judge(m, ALPHA)
    assert (r.claim, r.family, r.what, r.kind, r.source, r.n, r.params) == ("C4", "f", "w", "statistical", "s", 42,
                                                                           {"a": 1})
    assert (r.measured, r.predicted, r.stderr, r.pred_stderr) == (7.0, 2.0, 1.0, 0.2)
    assert r.z == pytest.approx(5.0 / math.sqrt(1 + 0.04 + 1e-24))
    assert r.scale == "linear" and r.side == "two" and r.points == 2
    assert r.mde == pytest.approx(r.k * math.sqrt(0.25 + 0.01) / 1.5)
    assert r.mde_absolute is None


def test_judge_all_gives_each_row_budget_over_r():
    rows = v.judge_all([row(0.0), row([0.0, 0.0])], 0.02, 4)
    assert rows[0].k == pytest.approx(sps.norm.isf(0.02 / 4 / 2))
    assert rows[1].k == pytest.approx(sps.norm.isf(0.02 / 4 / 4))
    assert v.judge_all([row(0.0)], 0.02, 0)[0].k == pytest.approx(sps.norm.isf(0.02 / 2))  # R = 0 counts as 1


# --- claim and report verdicts -------------------------------------------------------------------------------


def judged(claim, passed, kind="statistical"):
    m = row(0.0 if passed else 100.0, kind=kind, claim=claim, stderr=1.0 if kind in v.EVIDENCE else 0.0)
    return v.judge(m, ALPHA)


def test_a_claim_needs_evidence_and_every_row_passing():
    rows = [judged("C1", True), judged("C1", True, "exact"), judged("C2", True, "exact"), judged("C3", True),
            judged("C3", False, "exact"), judged("C4", True, "adversarial"), judged("C5", False)]
    assert v.claim_verdicts(rows, ["C1", "C2", "C3", "C4", "C5", "C6"]) == {
        "C1": True, "C2": False, "C3": False, "C4": True, "C5": False, "C6": False}


def test_claims_are_matched_by_value_not_identity():
    """A claim name built at run time (not an interned literal) still finds its rows."""
    name = "".join(["C", str(1)])
    assert v.claim_verdicts([judged(name, True)], ["C1"]) == {"C1": True}
    assert v.claim_verdicts([judged(name, False)], ["C1"]) == {"C1": False}
    assert v.report_verdict([judged("C1", True), judged("".join(["eng", "ine"]), False, "exact")], ["C1"])[1] is False


def test_the_report_passes_when_every_claim_and_every_sanity_row_does():
    good = [judged("C1", True), judged("engine", True, "exact")]
    assert v.report_verdict(good, ["C1"]) == ({"C1": True}, True, True)
    assert v.report_verdict(good + [judged("engine", False, "exact")], ["C1"]) == ({"C1": True}, False, False)
    assert v.report_verdict(good + [judged("C1", False)], ["C1"]) == ({"C1": False}, True, False)
    assert v.report_verdict([judged("engine", True, "exact")], ["C1"]) == ({"C1": False}, True, False)
    assert v.report_verdict([], []) == ({}, True, True)


# --- standard-error ratio --------------------------------------------------------------------------------------


def test_stderr_ratio_by_its_formula():
    rng = np.random.default_rng(3)
    x, se = rng.normal(size=(50, 2)), rng.uniform(0.5, 1.5, size=(50, 2))
    scale = np.mean(se**2, axis=0)
    u = np.mean((x - x.mean(axis=0)) ** 2 * 50 / 49 / scale, axis=1)
    w = np.mean(se**2 / scale, axis=1)
    c = np.cov(u, w)
    rho = math.sqrt(u.mean() / w.mean())
    se_want = rho / 2 * math.sqrt((c[0, 0] / u.mean() ** 2 + c[1, 1] / w.mean() ** 2
                                   - 2 * c[0, 1] / (u.mean() * w.mean())) / 50)
    got = v.stderr_ratio(x, se)
    assert got == (pytest.approx(rho, rel=1e-12), pytest.approx(se_want, rel=1e-12))


def test_stderr_ratio_of_one_output_and_of_wrong_errors():
    rng = np.random.default_rng(4)
    x = rng.normal(size=20_000)
    se = np.full_like(x, 1.0)
    rho, s = v.stderr_ratio(x, se)
    assert abs(rho - 1) < 4 * s and s > 0
    assert v.stderr_ratio(x[:, None], se[:, None]) == (rho, s)
    for r in (2, 3):  # R replicates of one output given as a flat (R,) array are R rows, not one row of R outputs
        assert v.stderr_ratio(x[:r], se[:r]) == v.stderr_ratio(x[:r, None], se[:r, None])
    small, _ = v.stderr_ratio(x, se / 2)
    assert small == pytest.approx(2 * rho)
    with np.errstate(all="ignore"):
        assert np.isnan(v.stderr_ratio(np.ones(5), np.zeros(5))[0])


# --- binomial summaries --------------------------------------------------------------------------------------


def test_binomial_interval_edges_and_level():
    assert v.binomial_interval(0, 10) == (0.0, pytest.approx(1 - 0.025 ** (1 / 10)))
    assert v.binomial_interval(10, 10) == (pytest.approx(0.025 ** (1 / 10)), 1.0)
    big, same = int("300"), int("300")  # two int objects beyond CPython's small-int cache (not one constant)
    assert v.binomial_interval(big, same)[1] == 1.0 and v.binomial_interval(0, big)[0] == 0.0
    lo, hi = v.binomial_interval(3, 50, 0.9)
    assert lo == pytest.approx(sps.beta.ppf(0.05, 3, 48)) and hi == pytest.approx(sps.beta.ppf(0.95, 4, 47))


def test_binomial_tail_counts_from_the_failures_up():
    assert v.binomial_tail(0, 10, 0.3) == pytest.approx(1.0)
    assert v.binomial_tail(2, 10, 0.3) == pytest.approx(1 - 0.7**10 - 10 * 0.3 * 0.7**9)
