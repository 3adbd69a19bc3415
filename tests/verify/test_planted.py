"""Negative controls: defects planted in the real engine, theory and estimator code must make the quick report
fail on the claim they concern.

Each defect is a copy of one real function with one line changed (``plant``: the function's source, one
exact textual replacement, compiled in its own module's namespace, monkeypatched in), so the control tests
the code that ships, not a stand-in.  Checks are seeded from their identity, so running only the checks of
the claim (and family) concerned gives exactly the rows the whole report would: each test runs that subset at
the whole quick report's thresholds (budget / R, R its evidence rows) and asserts that some row of the claim
fails -- and, as a control, that the same subset passes without the defect.
"""

from __future__ import annotations

import inspect
import sys
import textwrap

import numpy as np
import pytest

from accum import verify as v
from accum.simulations import backend_torch, estimators, families, laws, steps
from accum.simulations.families import family_name
from accum.theory import householder, so2, values

predict = sys.modules["accum.theory.predict"]  # the module (accum.theory.predict is also the function's name)

BUDGET = 0.01
QUICK = v.PRESETS["quick"]
PLAN = v.plan(QUICK)
R = v.evidence_rows(PLAN)


def plant(monkeypatch, owner, name: str, old: str, new: str) -> None:
    """Replace ``owner.name`` by a copy of its source with ``old`` (which must occur exactly once) -> ``new``;
    dispatch tables of its module that hold the function (``predict.QUANTITIES``) get the copy too."""
    fn = inspect.unwrap(getattr(owner, name))
    source = textwrap.dedent(inspect.getsource(fn))
    assert source.count(old) == 1, f"the planted line {old!r} is not (once) in {name}"
    namespace = dict(vars(sys.modules[fn.__module__]))  # the function's own globals, so it runs as shipped
    exec(compile(source.replace(old, new), f"<planted {fn.__module__}.{name}>", "exec"), namespace)
    monkeypatch.setattr(owner, name, namespace[name])
    for table in [t for t in vars(sys.modules[fn.__module__]).values() if isinstance(t, dict)]:
        for key in [k for k, item in table.items() if item is fn]:
            monkeypatch.setitem(table, key, namespace[name])


def failed_rows(claim: str, family: str | None = None, check: str | None = None, seed: int = 0) -> list:
    """Rows of the quick report's checks for ``claim`` (optionally one family / one check) that fail."""
    jobs = [j for j in PLAN if j.claim == claim and (family is None or family_name(j.family) == family
                                                     or v.label(j.family) == family)
            and (check is None or j.check == check)]
    assert jobs, (claim, family, check)
    measurements, _ = v.run_plan(jobs, seed, progress=False)
    return [r for r in v.judge_all(measurements, BUDGET, R) if not r.passed]


# (id, claim, family filter, check filter, owner, function, old text, new text)
DEFECTS = [
    ("accumulation dropped", "C1", "so2-accumulated(d=16, mu=0.3)", "coherence", backend_torch, "cumulative_angles",
     "cum = torch.cumsum(theta, dim=1)", "cum = theta.clone()"),
    ("rotation direction flipped", "C1", "so2-accumulated(d=16, mu=0.3)", "coherence", backend_torch,
     "cumulative_angles", "cum = torch.cumsum(theta, dim=1)", "cum = -torch.cumsum(theta, dim=1)"),
    ("product order reversed", "engine", "householder", "fast-paths", steps.HouseholderSteps, "transport",
     "w = self.w[:, t]", "w = self.w[:, self.n_steps - 1 - t]"),
    ("bilinear recursion order reversed", "engine", "householder", "fast-paths", steps.HouseholderSteps, "bilinear",
     "cur -= (beta[t] * np.einsum(\"bd,bd->b\", w[t], cur))[:, None] * w[t]",
     "cur -= (beta[t] * np.einsum(\"bd,bd->b\", w[-1 - t], cur))[:, None] * w[-1 - t]"),
    ("beta scaled by 1.05", "C1", "householder(d=16)", "coherence", families.Householder, "sample",
     "np.full((batch, n_steps), self.beta)", "np.full((batch, n_steps), 1.05 * self.beta)"),
    ("Haar sign fix dropped", "C4", "haar(d=8)", "score-gap", families, "haar_orthogonal",
     "q = q * np.sign(np.diagonal(r, axis1=-2, axis2=-1))[..., None, :]", "pass"),
    ("1/d scaling wrong (d - 1)", "C4", "haar(d=8)", "score-gap", estimators, "score_gap",
     "sq_m.add(d * far**2)", "sq_m.add((d - 1) * far**2)"),
    ("value rotation dropped", "C6", "so2-accumulated(d=16, mu=0.3)", "values", estimators, "far_residual",
     "if not value_rotation:", "if True:"),
    ("ALiBi bias dropped", "C5", "so2-accumulated(d=16, mu=0.3)", "alibi", estimators, "near_weight",
     "logits -= alibi_slope * torch.arange(", "logits -= 0 * torch.arange("),
    ("ALiBi bias flipped", "C5", "so2-accumulated(d=16, mu=0.3)", "alibi", estimators, "near_weight",
     "logits -= alibi_slope * torch.arange(", "logits += alibi_slope * torch.arange("),
    ("log-sum-exp carry lost", "C5", "so2-accumulated(d=16, mu=0.3)", "far-mass", estimators, "near_weight",
     "lse = part if lse is None else torch.logaddexp(lse, part)", "lse = part"),
    ("Markov source ignores its transitions", "C1", "so2-accumulated(d=16, law=token, source=markov, stay=0.7)",
     "coherence", laws.Token, "tokens", 'if self.source == "iid":', "if True:"),
    ("closed form: rate 1 - beta/(d + 0.5)", "C1", "householder(d=16)", "coherence", householder, "mean_rate",
     "return 1.0 - beta / d", "return 1.0 - beta / (d + 0.5)"),
    ("closed form: Gaussian exponent / 2.05", "C1", "so2-accumulated(d=16, mu=0.3)", "coherence", laws.Gaussian,
     "characteristic", "np.exp(1j * k * self.mu - 0.5 * k * k * self.sigma**2)",
     "np.exp(1j * k * self.mu - k * k * self.sigma**2 / 2.05)"),
    ("closed form: window 2% high", "C2", "so2-accumulated(d=16, mu=0.3)", "window", predict, "window_width",
     "return closed_forms(family).window(context, q, k)", "return 1.02 * closed_forms(family).window(context, q, k)"),
    ("closed form: far variance 2% high", "C4", "haar(d=16)", "scores-far-variance", predict.HaarForms, "far_variance",
     "return float(q @ q) * float(k @ k)", "return 1.02 * float(q @ q) * float(k @ k)"),
    ("closed form: far mass 2% high", "C5", "so2-accumulated(d=16, mu=0.3)", "far-mass", so2, "far_mass",
     "return np.array(out)", "return 1.02 * np.array(out)"),
    ("closed form: residual 2% high", "C6", "so2-accumulated(d=16, mu=0.3)", "values", values, "residual_sq",
     "return out", "return 1.02 * out"),
    ("standard errors 3x too large", "C1", None, "stderr", estimators, "pooled_mean",
     "return mean, np.sqrt(var / n), n", "return mean, 3 * np.sqrt(var / n), n"),
    ("standard errors 3x too small", "C1", None, "stderr", estimators, "pooled_mean",
     "return mean, np.sqrt(var / n), n", "return mean, np.sqrt(var / n) / 3, n"),
    ("window loses its bias correction", "C2", None, "window-bias", estimators, "window",
     "return float(np.sum((total**2 - total_sq) / (n * (n - 1))))", "return float(np.sum(total**2 / n**2))"),
]


@pytest.mark.parametrize("defect", DEFECTS, ids=[d[0] for d in DEFECTS])
def test_planted_defect_fails_its_claim(defect, monkeypatch):
    """The same checks pass without the defect: ``test_verify.test_quick_report_passes`` runs them at this seed."""
    name, claim, family, check, owner, function, old, new = defect
    plant(monkeypatch, owner, function, old, new)
    with np.errstate(over="ignore", invalid="ignore"):  # a flipped ALiBi bias overflows the far mass: it must fail
        failed = failed_rows(claim, family, check)
    assert failed and all(r.claim == claim for r in failed), name


def test_catch_rate_is_every_planted_defect():
    """The README's catch rate: every planted defect is one parametrised case above."""
    assert len(DEFECTS) == len({d[0] for d in DEFECTS}) == 21


def test_plant_refuses_a_line_that_is_not_there(monkeypatch):
    with pytest.raises(AssertionError, match="not \\(once\\)"):
        plant(monkeypatch, estimators, "score_gap", "this line is not there", "")


def test_a_planted_defect_fails_the_whole_command(monkeypatch, capsys):
    """The whole `accum verify --quick` (exit 1, report FAIL) under one defect (value rotation dropped)."""
    from accum import cli

    name, claim, family, check, owner, function, old, new = next(d for d in DEFECTS if d[0] == "value rotation dropped")
    plant(monkeypatch, owner, function, old, new)
    monkeypatch.setattr(v, "plan", lambda preset: [j for j in PLAN if j.claim in ("C6", "engine")])
    monkeypatch.setattr(v, "evidence_rows", lambda jobs: R)
    assert cli.main(["verify", "--quick", "--workers", "1"]) == 1  # in this process, where the defect is planted
    out = capsys.readouterr().out
    assert "C6 FAIL" in out and "report FAIL" in out
