"""accum verify: the report passes on the correct code, its rows follow the JSON contract, its verdict rules
can fail, and its statistics (reference distributions, standard-error ratio, binomial interval) are right.

The defects planted in the real code are in test_planted.py; this report at seed 0 is their control.
"""

import dataclasses
import json
from dataclasses import asdict

import numpy as np
import pytest
from scipy import stats as sps

from accum import cli
from accum import calibration as cal, report as rep, report_format as fmt, report_plan as rp, stderrs
from accum.claims import CHECKS, deterministic, label
from accum.verdict import (Measurement, binomial_interval, binomial_tail, claim_verdicts, judge, min_detectable_effect, stderr_ratio,
                           threshold, z_scores)

BUDGET = 0.01
CONTRACT = ("claim", "family", "kind", "counts_as_evidence", "predicted", "measured", "stderr", "z", "k",
            "reference", "dof", "mde", "mde_absolute", "passed")
COLUMN = {c[0]: i for i, c in enumerate(fmt.COLUMNS)}


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory):
    """`accum verify --quick --seed 0` through the command line, its JSON, Markdown and console text."""
    out = tmp_path_factory.mktemp("verify")
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        status = cli.main(["verify", "--quick", "--seed", "0", "--json", str(out / "v.json"),
                           "--markdown", str(out / "v.md")])
    return status, json.loads((out / "v.json").read_text())["result"], (out / "v.md").read_text(), buf.getvalue()


def test_quick_report_passes_at_seed_0(quick_report):
    status, report, _, text = quick_report
    failed = [r for r in report["rows"] if not r["passed"]]
    assert status == 0 and report["passed"], failed
    assert report["claims"] == {c: True for c in rp.CLAIMS}
    assert "report PASS" in text


def test_rows_follow_the_json_contract(quick_report):
    _, report, _, _ = quick_report
    for r in report["rows"]:
        assert all(key in r for key in CONTRACT), r
        assert r["kind"] in ("statistical", "exact", "bound", "adversarial")
        assert r["counts_as_evidence"] == (r["kind"] in ("statistical", "adversarial"))
        assert r["reference"] in ("normal", "t", "exact")
        assert (r["dof"] is not None) == (r["reference"] == "t")
        if r["kind"] == "statistical" and r["mde"] is not None:
            assert 0 < r["mde"] < 1 and r["mde_absolute"] is None
        if r["mde_absolute"] is not None:  # a statistical row held to a prediction of 0
            assert r["kind"] == "statistical" and abs(r["predicted"]) <= 1e-9 and r["mde_absolute"] > 0
    assert report["evidence_rows"] == sum(r["counts_as_evidence"] for r in report["rows"])


def test_every_claim_has_evidence_for_every_family_it_runs_on(quick_report):
    _, report, _, _ = quick_report
    pairs = {(r["claim"], r["family"]) for r in report["rows"] if r["claim"] in rp.CLAIMS}
    evidence = {(r["claim"], r["family"]) for r in report["rows"] if r["counts_as_evidence"]}
    contrasts = {(c, f) for c, f in pairs if f.startswith(("rope", "nope"))}  # deterministic contrasts
    assert pairs - contrasts <= evidence


def best_detectable_errors(report: dict) -> dict[tuple[str, str], float]:
    """(claim, family) -> the smallest detectable error of its rows held to the theory (closed form or estimated;
    relative, or absolute where every prediction is 0), over the statistical rows."""
    best: dict[tuple[str, str], float] = {}
    for r in report["rows"]:
        if r["kind"] == "statistical" and r["source"].startswith(("closed form", "estimated")):
            mde = r["mde"] if r["mde"] is not None else r["mde_absolute"]
            if mde is not None:
                key = (r["claim"], r["family"])
                best[key] = min(best.get(key, np.inf), mde)
    return best


def test_quick_detects_a_1_percent_error_for_every_claim_and_family(quick_report):
    """Issue 31's target: each (claim, family) pair's best row held to the theory detects a 1% error (an absolute
    0.01 where the prediction is 0, at the probes' |q||k| = 0.91)."""
    _, report, _, _ = quick_report
    best = best_detectable_errors(report)
    fam = rp.default_families()
    reduced = {(claim, label(fam[key])) for claim, key in rp.REDUCED_POWER}
    assert len(best) >= 25 and reduced <= set(best)
    assert {claim for claim, _ in best} == set(rp.CLAIMS)
    full = {key: v for key, v in best.items() if key not in reduced}
    assert max(full.values()) <= 0.01, {key: v for key, v in full.items() if v > 0.01}
    # the pairs held at reduced sizes (dense steps) state their power: a few percent (report_plan.REDUCED_POWER)
    assert max(best[key] for key in reduced) <= 0.05, {key: best[key] for key in reduced}


def test_quick_standard_error_rows_fail_a_5_percent_error_with_95_percent_power(quick_report):
    """Issue 31: each standard-error row (replicate spread / reported se, ``accum.stderrs``) fails a reported standard
    error 5% too small with probability >= 95% (``stderrs.power`` at the row's se, threshold and side), and 5% too
    large as well where the row is two-sided (all but the window's: a jackknife, ``stderrs.CONSERVATIVE``)."""
    _, report, _, _ = quick_report
    rows = [r for r in report["rows"] if r["source"] == "replicates"]
    assert {r["claim"] for r in rows} == set(stderrs.ESTIMATOR_CLAIMS.values())
    weak = {r["what"]: stderrs.power(r["stderr"], r["k"], 0.05, r["side"]) for r in rows}
    assert min(weak.values()) >= 0.95, weak
    assert sorted(r["what"].split(" through")[0] for r in rows if r["side"] != "two") == ["se of window"]


def test_rope_window_is_a_contrast_never_a_finite_window_pass(quick_report):
    _, report, _, _ = quick_report
    rope = [r for r in report["rows"] if r["family"].startswith("rope") and r["claim"] == "C2"]
    assert rope and all(not r["counts_as_evidence"] for r in rope)
    assert any("contrast" in r["what"] for r in rope)
    growth = [r for r in rope if "growth" in r["what"]][0]
    assert growth["measured"] > 50  # RoPE's window keeps growing with T, exactly as its theory says


def test_markdown_is_valid_and_console_columns_align(quick_report):
    """Every Markdown table line has one cell per column (| inside a cell is escaped); the console's
    verdict column sits at one position on every row."""
    _, report, md, text = quick_report
    pipes = {line.replace("\\|", "").count("|") for line in md.splitlines() if line.startswith("|")}
    assert pipes == {len(fmt.COLUMNS) + 1, 4}  # the rows tables and the claims table
    rows = [line for line in text.splitlines() if line.split(" ", 1)[0] in (*rp.CLAIMS, "engine") and len(line) > 150]
    assert len(rows) == len(report["rows"])
    assert len({line.rfind(" PASS") if line.endswith("PASS") else line.rfind(" FAIL") for line in rows}) == 1


def test_seeds_come_from_the_check_identity_not_its_position():
    jobs = rp.plan(rp.PRESETS["quick"])
    cheap = [j for j in jobs if j.check == "fast-paths"][:2] + [j for j in jobs if j.check == "score-gap"][:1]
    alone, _ = rep.run_plan(cheap[2:], 5, progress=False)
    together, _ = rep.run_plan(cheap, 5, progress=False)
    assert float(alone[0].measured) == float(together[-1].measured)


def test_a_process_pool_gives_the_same_rows_as_this_process():
    jobs = rp.plan(rp.PRESETS["quick"])
    few = [j for j in jobs if j.check in ("fast-paths", "score-gap")][5:9]
    serial, _ = rep.run_plan(few, 3, progress=False)
    pooled, _ = rep.run_plan(few, 3, progress=False, workers=2)
    assert [(m.what, float(np.max(m.measured))) for m in serial] == [(m.what, float(np.max(m.measured))) for m in pooled]


def test_a_rerun_with_a_cache_reuses_finished_checks_and_recomputes_corrupt_ones(tmp_path, monkeypatch):
    jobs = [j for j in rp.plan(rp.PRESETS["quick"]) if j.check in ("fast-paths", "score-gap")][5:8]
    first, _ = rep.run_plan(jobs, 2, progress=False, cache=tmp_path)
    files = sorted(tmp_path.glob("*.json"))
    assert len(files) == 3
    files[0].write_text("{ half a file")
    calls = []
    real = rep.run_job
    monkeypatch.setattr(rep, "run_job", lambda item: calls.append(item[0]) or real(item))
    again, _ = rep.run_plan(jobs, 2, progress=False, cache=tmp_path)
    assert len(calls) == 1  # only the corrupt one was recomputed
    assert [(m.what, m.measured.tolist(), m.stderr.tolist()) for m in again] == \
        [(m.what, m.measured.tolist(), m.stderr.tolist()) for m in first]


def test_evidence_rows_are_derived_from_the_plan():
    jobs = rp.plan(rp.PRESETS["quick"])
    assert rp.evidence_rows(jobs) == sum(k in ("statistical", "adversarial") for j in jobs for k in j.kinds())
    rope = [j for j in jobs if j.check == "window" and deterministic(j.family)][0]
    assert rope.kinds() == ("exact", "exact")


def test_a_job_that_returns_other_rows_than_it_declares_is_an_error(monkeypatch):
    job = [j for j in rp.plan(rp.PRESETS["quick"]) if j.check == "fast-paths"][0]
    spec = CHECKS["fast-paths"]
    monkeypatch.setitem(CHECKS, "fast-paths", dataclasses.replace(spec, kinds=lambda family, **_: ("exact", "exact")))
    with pytest.raises(RuntimeError, match="declared"):
        rep.run_plan([job], 0, progress=False)


def test_a_claim_without_evidence_rows_fails():
    row = judge(Measurement("C1", "f", "x", "exact", np.array(1.0), np.array(0.0), np.array(1.0), 1), 0.01)
    assert row.passed
    assert claim_verdicts([row], ["C1", "C2"]) == {"C1": False, "C2": False}


def m(measured, predicted=0.0, stderr=1.0, **kw):
    return Measurement("C1", "f", "x", kw.pop("kind", "statistical"), np.asarray(measured, float), np.asarray(stderr, float),
                       np.asarray(predicted, float), 10, **kw)


def test_judge_sides_nonfinite_and_exact_tolerance():
    assert not judge(m([0.0, 3.0]), 0.01).passed and judge(m([0.0, 3.0]), 0.001).passed is True
    assert judge(m(-10.0, side="upper"), 0.01).passed and not judge(m(-10.0, side="lower"), 0.01).passed
    assert not judge(m(np.nan), 0.01).passed
    assert judge(m(1.0 + 1e-13, 1.0, 0.0, kind="exact"), 0.01).passed
    assert not judge(m(1.0 + 1e-6, 1.0, 0.0, kind="exact"), 0.01).passed


def test_thresholds_use_the_row_reference_and_points():
    normal, t5 = m([0.0] * 4), m([0.0] * 4, reference="t", dof=5)
    assert threshold(normal, 0.01) == pytest.approx(sps.norm.isf(0.01 / 8))
    assert threshold(t5, 0.01) == pytest.approx(sps.t.isf(0.01 / 8, 5))
    assert threshold(m(0.0, side="upper"), 0.01) == pytest.approx(sps.norm.isf(0.01))


def test_log_scale_z_and_detectable_effect():
    row = m(110.0, 100.0, 5.0, scale="log")
    assert judge(row, 0.01).z == pytest.approx(np.log(1.1) / (5.0 / 110.0))
    k = threshold(m(1.0), 0.01)
    assert min_detectable_effect(m([2.0, 4.0], [10.0, 10.0], [0.1, 0.05]), k) == pytest.approx(k * 0.05 / 10)
    assert min_detectable_effect(m(0.1, 0.0, 0.01, effect_scale=5.0), k) == pytest.approx(k * 0.01 / 5.0)


def test_a_prediction_of_0_states_an_absolute_detectable_effect():
    """Where every prediction is 0 (within the floor) a relative error means nothing: mde is None and
    mde_absolute = k min se; a row with some nonzero prediction keeps the relative mde over its nonzero points."""
    k = threshold(m([0.0, 0.0]), 0.01)
    zero = judge(m([0.003, -0.001], [0.0, 1e-17], [0.002, 0.001]), 0.01)
    assert zero.mde is None and zero.mde_absolute == pytest.approx(zero.k * 0.001)
    mixed = judge(m([0.003, 2.1], [0.0, 2.0], [0.002, 0.01]), 0.01)
    assert mixed.mde_absolute is None and mixed.mde == pytest.approx(k * 0.01 / 2.0)
    assert judge(m(0.1, 0.0, 0.01, effect_scale=5.0), 0.01).mde_absolute is None
    cells = fmt._cells({**asdict(zero)})
    assert cells[COLUMN["mde"]] == f"±{zero.mde_absolute:.2g}"


def test_stderr_ratio_holds_its_level_and_detects_a_5_percent_error():
    """Replicates: means of 8 exponential samples (skewed, as a far mass is) with their honest standard errors
    sd / sqrt(8).  Over 400 trials of R = 4000 replicates, rho = 1 is rejected at two-sided 5% about 5% of the
    time (the delta method needs no normal-theory F law); errors reported 5% too small (too large) push rho up
    (down) by 5%, and are rejected at the quick report's k at the rate ``stderrs.power`` gives from the rows' own
    standard errors (within 10 points: the normal approximation of a ratio of skewed means)."""
    from accum.stderrs import power

    rng = np.random.default_rng(0)
    trials, r, n = 400, 4000, 8
    z = {1.0: [], 1 / 1.05: [], 1.05: []}
    ses = {scale: [] for scale in z}
    for _ in range(trials):
        x = rng.exponential(size=(r, n))
        mean, se = x.mean(axis=1), x.std(axis=1, ddof=1) / np.sqrt(n)
        for scale in z:
            rho, rho_se = stderr_ratio(mean, scale * se)
            z[scale].append((rho - 1.0) / rho_se)
            ses[scale].append(rho_se)
    level = np.mean(np.abs(z[1.0]) > sps.norm.isf(0.025))
    lo, hi = binomial_interval(int(level * trials), trials, 0.999)
    assert lo <= 0.05 <= hi
    k = 3.88  # the quick report's two-sided one-point k
    for scale in (1 / 1.05, 1.05):
        rate = np.mean(np.abs(z[scale]) > k)
        expected = power(float(np.mean(ses[scale])), k, abs(1 / scale - 1))
        assert abs(rate - expected) <= 0.1, (scale, rate, expected)
        assert np.sign(np.mean(z[scale])) == np.sign(1 / scale - 1) and rate > 0.3


def test_binomial_interval_matches_clopper_pearson():
    """Against scipy's exact (Clopper-Pearson) interval of ``binomtest``, both ends, several counts and levels."""
    assert binomial_interval(0, 10) == (0.0, pytest.approx(1 - 0.025 ** (1 / 10)))
    for failures, runs, level in ((0, 10, 0.95), (3, 500, 0.95), (5, 500, 0.95), (17, 40, 0.99), (40, 40, 0.9)):
        want = sps.binomtest(failures, runs).proportion_ci(confidence_level=level, method="exact")
        assert binomial_interval(failures, runs, level) == (pytest.approx(want.low, rel=1e-10, abs=1e-15),
                                                            pytest.approx(want.high, rel=1e-10))


@pytest.mark.parametrize("scale", ["linear", "log"])
def test_z_scores_are_standard_normal_when_both_sides_are_noisy(scale):
    """A measurement and a prediction that both scatter around the same truth, with standard errors se and pse
    (pse > se, so the prediction's own uncertainty matters): z = (x - p) / sqrt(se^2 + pse^2) is N(0, 1), so
    the variance of 20000 z's lies in the chi-square(19999) interval of false-failure budget 1e-4."""
    rng = np.random.default_rng(11)
    n, truth, r_meas, r_pred = 20_000, 2.5, 0.2, 0.3
    e1, e2 = rng.normal(size=(2, n))
    if scale == "linear":
        x, p, se, pse = truth + r_meas * e1, truth + r_pred * e2, np.full(n, r_meas), np.full(n, r_pred)
    else:  # relative errors: log x = log truth + r e exactly, se / x = r
        x, p = truth * np.exp(r_meas * e1), truth * np.exp(r_pred * e2)
        se, pse = r_meas * x, r_pred * p
    z = z_scores(Measurement("C1", "f", "w", "statistical", x, se, p, n, pred_stderr=pse, scale=scale, floor=0.0))
    lo, hi = sps.chi2.ppf([0.5e-4, 1 - 0.5e-4], n - 1) / (n - 1)
    assert abs(np.mean(z)) <= sps.norm.isf(0.5e-4) / np.sqrt(n) * 1.01
    assert lo <= np.var(z, ddof=1) <= hi


def test_calibrate_counts_failures_per_row(monkeypatch, capsys, tmp_path):
    jobs = rp.plan(rp.PRESETS["quick"])
    few = [j for j in jobs if j.check == "fast-paths"][:2] + [j for j in jobs if j.check == "score-gap"][:4]
    monkeypatch.setattr(rp, "plan", lambda preset: few)
    path = tmp_path / "cal.json"
    assert cli.main(["verify", "--calibrate", "3", "--workers", "1", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "of 3 reports failed" in out and "95% interval" in out
    result = json.loads(path.read_text())["result"]
    assert result["runs"] == 3 and len(result["rows"]) == sum(len(j.kinds()) for j in few)
    assert result["interval95"][0] <= result["rate"] <= result["interval95"][1]


def test_calibrating_part_of_the_report_judges_its_rows_as_the_whole_report_does(monkeypatch, tmp_path):
    """--only score-gap: the score-gap rows alone, each judged at the whole plan's R (its z, k and verdict are the
    whole report's), and the summary's share uses that R."""
    jobs = rp.plan(rp.PRESETS["quick"])
    few = [j for j in jobs if j.check == "fast-paths"][:1] + [j for j in jobs if j.check == "score-gap"][:3]
    monkeypatch.setattr(rp, "plan", lambda preset: few)
    whole, part = tmp_path / "whole.json", tmp_path / "part.json"
    assert cli.main(["verify", "--calibrate", "2", "--workers", "1", "--json", str(whole)]) == 0
    assert cli.main(["verify", "--calibrate", "2", "--workers", "1", "--only", "score-gap", "--json", str(part)]) == 0
    w, p = (json.loads(x.read_text())["result"] for x in (whole, part))
    assert p["checks"] == ["score-gap"] and w["checks"] == "all"
    assert p["evidence_rows"] == w["evidence_rows"] == rp.evidence_rows(few)
    assert len(p["rows"]) == sum(len(j.kinds()) for j in few[1:]) < len(w["rows"])
    assert [(r["what"], r["failures"]) for r in p["rows"]] == [(r["what"], r["failures"]) for r in w["rows"][-len(p["rows"]):]]
    assert p["rows"][0]["expected"] == pytest.approx(2 * 0.01 / rp.evidence_rows(few))
    # the part passes at a seed when its rows do (the claims of the checks left out have no evidence in it)
    assert all(r["failures"] == 0 for r in p["rows"]) and p["failures"] == 0 and p["seeds_failed"] == []


def test_calibration_summary_flags_a_row_significantly_above_three_times_its_share():
    """Synthetic outcomes, 500 runs of 57 evidence rows and one sanity row at budget 0.01 (a row's share
    0.088): one failure is consistent with 3x the share (p = 0.23), two are not (p = 0.029); a sanity row's
    failures fail the report but are not judged against a share."""
    rows = [("C1", f"f{i}", "x", True, True) for i in range(57)] + [("C5", "g", "bound", True, False)]
    fail_at = {3: [0], 7: [1, 1], 11: [57]}  # seed -> failing row indices
    outcomes = []
    for seed in range(1, 501):
        bad = fail_at.get(seed, [])
        outcomes.append({"seed": seed, "passed": not bad,
                         "rows": [(c, f, w, i not in bad, e) for i, (c, f, w, _, e) in enumerate(rows)]})
    outcomes[8]["rows"][1] = ("C1", "f1", "x", False, True)  # row 1 fails again at seed 9
    outcomes[8]["passed"] = False
    c = cal.summarize_calibration(outcomes, "quick", 1, 0.01)
    by = {r["family"]: r for r in c["rows"]}
    assert c["failures"] == 4 and c["seeds_failed"] == [3, 7, 9, 11] and c["evidence_rows"] == 57
    assert by["f0"]["failures"] == 1 and by["f0"]["p_above_3x_share"] == pytest.approx(1 - (1 - 0.03 / 57) ** 500)
    assert by["f1"]["failures"] == 2 and by["f1"]["p_above_3x_share"] < 0.05 < by["f0"]["p_above_3x_share"]
    assert by["g"]["failures"] == 1 and by["g"]["p_above_3x_share"] is None
    assert c["rows_above_3x_share"] == 1
    assert "significant against 3x their share" in cal.format_calibration(c)


def test_binomial_tail_is_the_upper_tail_sum():
    from math import comb

    n, p = 40, 0.07
    for k in (0, 1, 3, 9):
        direct = sum(comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(k, n + 1))
        assert binomial_tail(k, n, p) == pytest.approx(direct, rel=1e-12)


def test_calibration_with_a_cache_resumes_and_extends(monkeypatch, capsys, tmp_path):
    """With --cache every finished report is saved as it arrives: a longer run reuses the shorter run's reports
    (computing only the new seeds) and gives the same per-seed outcomes as an uncached run."""
    jobs = rp.plan(rp.PRESETS["quick"])
    few = [j for j in jobs if j.check == "score-gap"][:3]
    monkeypatch.setattr(rp, "plan", lambda preset: few)
    computed = []
    real = cal._report_outcome
    monkeypatch.setattr(cal, "_report_outcome", lambda item: computed.append(item[1]) or real(item))
    cache = tmp_path / "cache"
    assert cli.main(["verify", "--calibrate", "2", "--workers", "1", "--cache", str(cache)]) == 0
    assert computed == [1, 2] and len(list(cache.iterdir())) == 2
    path = tmp_path / "cal.json"
    assert cli.main(["verify", "--calibrate", "3", "--workers", "1", "--cache", str(cache), "--json", str(path)]) == 0
    assert computed == [1, 2, 3]
    cached = json.loads(path.read_text())["result"]
    assert cli.main(["verify", "--calibrate", "3", "--workers", "1", "--json", str(tmp_path / "plain.json")]) == 0
    plain = json.loads((tmp_path / "plain.json").read_text())["result"]
    assert cached["rows"] == plain["rows"] and cached["failures"] == plain["failures"] and cached["runs"] == 3


@pytest.mark.parametrize("calibrate", [[], ["--calibrate", "1"]])
@pytest.mark.parametrize("entry", ["model.safetensors", "checkpoint.pt", "sub/"])
def test_a_cache_folder_of_another_command_is_refused_untouched(capsys, tmp_path, entry, calibrate):
    """--cache given a folder holding what no cache writes (a probe run's weights, a sub-folder; the fuzz campaign
    gave run folders) is refused in one line naming --cache and the entry, before any work, and nothing is added."""
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "eval.json").write_text("{}")
    (folder / entry).mkdir() if entry.endswith("/") else (folder / entry).write_bytes(b"\0" * 8)
    before = sorted(p.name for p in folder.iterdir())
    assert cli.main(["verify", "--quick", *calibrate, "--workers", "1", "--cache", str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--cache" in err[0] and repr(entry.rstrip("/")) in err[0], err
    assert sorted(p.name for p in folder.iterdir()) == before


@pytest.mark.parametrize("argv, flag", [
    (["--calibrate", "0"], "--calibrate"), (["--calibrate", "2", "--family", "haar"], "--family"),
    (["--workers", "0"], "--workers"), (["--workers", "2", "--scheduler", "tcp://h:1"], "--scheduler"), (["--param", "dim=4"], "--param"), (["--budget", "2"], "--budget"),
    (["--calibrate", "2", "--scheduler", "http://x"], "--scheduler"), (["--only", "far-mass"], "--only"),
    (["--calibrate", "2", "--only", "no-such-check"], "--only"),
])
def test_bad_options_are_one_line_exit_2(argv, flag, capsys, tmp_path):
    assert cli.main(["verify", *argv, "--json", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0]
    assert not (tmp_path / "x.json").exists()


def test_a_user_family_is_verified_on_every_claim_that_applies(tmp_path, capsys):
    """Issue 13's acceptance command: the shipped example family passes with rows for every claim `accum check`
    says applies, its predictions estimated from moment operators (each with its own standard error)."""
    path = tmp_path / "family.json"
    assert cli.main(["verify", "--quick", "--family", "accum.simulations.examples:SignedPermutation", "--param", "dim=8",
                     "--workers", "1", "--json", str(path)]) == 0
    report = json.loads(path.read_text())["result"]
    assert report["passed"] and set(report["claims"]) == set(rp.CLAIMS) and all(report["claims"].values())
    estimated = [r for r in report["rows"] if r["source"].startswith("estimated")]
    assert estimated and all(r["pred_stderr"] > 0 for r in estimated)
    assert {r["claim"] for r in report["rows"] if r["counts_as_evidence"]} == set(rp.CLAIMS)


def test_a_one_family_report_holds_a_random_built_in_sampler_to_its_exact_mean():
    """``plan_for_family``: a random built-in family of d <= STEP_MEAN_MAX_DIM gets the step-mean row; a deterministic
    one, one too large and a user family (no exact E[A]) do not."""
    from accum.simulations.examples import SignedPermutation
    from accum.simulations.families import make_family

    def has_step_mean(family):
        return any(j.check == "step-mean" for j in rp.plan_for_family(rp.QUICK, family, {"C1"}))

    assert has_step_mean(make_family("householder", dim=16, w="token", vocab=40))
    assert has_step_mean(make_family("givens", dim=rp.STEP_MEAN_MAX_DIM))
    assert not has_step_mean(make_family("givens", dim=rp.STEP_MEAN_MAX_DIM + 2))
    assert not has_step_mean(make_family("rope", dim=16))
    assert not has_step_mean(SignedPermutation(dim=8))

    def has_step_pair(family):
        return any(j.check == "step-pair" for j in rp.plan_for_family(rp.QUICK, family, {"C1", "C4"}))

    assert has_step_pair(make_family("householder", dim=16, w="token", vocab=40))
    assert has_step_pair(make_family("lie-walk", dim=8))
    assert not has_step_pair(make_family("haar", dim=2, group="SO"))  # no closed-form E[A (x) A]
    assert not has_step_pair(make_family("rope", dim=16))  # deterministic steps
    assert not has_step_pair(SignedPermutation(dim=8))


def test_adversarial_search_reaches_the_bound_where_it_is_attainable():
    """The adversarial C5 row (best near weight found <= 1/(1 + N e^{-2 s0})) is evidence only if the search is
    strong: with N = 10 far tokens the angles can put every far score near -s0, and the search must find a near
    weight within 1% of the bound (it reaches 0.9998 of it), and never above it."""
    from accum.adversarial import check_adversarial
    from accum.simulations.families import make_family

    fam = make_family("so2-accumulated", dim=16, mu=0.3)
    for seed in (0, 1):
        best, _ = check_adversarial(fam, np.random.default_rng(seed), far_sizes=[10, 20], s0=4.0, iterations=150,
                                    starts=2)
        assert 0.99 <= float(np.asarray(best.measured)[0] / np.asarray(best.predicted)[0]) <= 1.0


@pytest.mark.parametrize("check, kwargs", [
    ("coherence", {"steps": 6, "samples": 200, "eps": 0.05, "theory_samples": 64}),
    ("transport", {"lags": (1, 3), "samples": 200}),
    ("scores-far-variance", {"length": 16, "offsets": (1, 4), "sequences": 40, "theory_samples": 64}),
    ("window", {"contexts": (8, 16), "samples": 64, "theory_samples": 64}),
])
def test_non_unit_probes_leave_homogeneous_rows_unchanged(check, kwargs, monkeypatch):
    """Rows linear or homogeneous in q and k (and the window's ratios) give the same z with the probes of
    ``claims.PROBE_NORMS`` as with unit ones (same draws): those rows' calibrations stand; a closed form that drops
    |q|^2 |k|^2 does not (planted_defects.toml)."""
    from accum import claims

    family = rp.default_families()["so2"]

    def zs():
        return np.concatenate([z_scores(m) for m in CHECKS[check].run(family, np.random.default_rng(4), **kwargs)])

    scaled = zs()
    monkeypatch.setattr(claims, "PROBE_NORMS", (1.0, 1.0))
    np.testing.assert_allclose(scaled, zs(), rtol=1e-7, atol=1e-9)
    monkeypatch.undo()
    q, k = claims.probe_pair(16, np.random.default_rng(0))
    assert np.linalg.norm(q) == pytest.approx(1.3) and np.linalg.norm(k) == pytest.approx(0.7)


def test_step_pair_of_a_slowly_turning_plane_is_not_held_as_constant():
    """Calibration report 11013 (quick): rope-uniform's slowest plane (theta ~ U(-0.13, 0.13)) drew an axis pair
    whose contraction varied 1e-10 times as much as the random directions' (norms ~ sqrt(d)), so ``hotelling``
    counted it constant and the exact row failed at 1.5e-7.  Read in units of each contraction's bound, both rows
    of that job pass."""
    job = next(j for j in rp.plan(rp.QUICK) if j.check == "step-pair" and "rope-uniform" in label(j.family))
    rows = [judge(m, 0.01 / 250) for m in job.run(11013)]
    assert [r.kind for r in rows] == ["statistical", "exact"] and all(r.passed for r in rows), rows
