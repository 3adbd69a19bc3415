"""Issue 14, user families: the first sample is checked (step form, shapes, real dtype, finite values) and every
violation is one line with exit status 2; a module in the current folder is importable without PYTHONPATH."""

import json
import textwrap

import pytest

from accum.cli import main

HEADER = """
import numpy as np
from dataclasses import dataclass
from accum.simulations.steps import AngleSteps, DenseSteps, HouseholderSteps
"""

# body of sample(self, rng, n_steps, batch) for a family of dim d = self.dim (4)
BODIES = {
    "ndarray": "return np.broadcast_to(np.eye(self.dim), (batch, n_steps, self.dim, self.dim)).copy()",
    "complex": "return DenseSteps(np.broadcast_to(np.eye(self.dim), (batch, n_steps, self.dim, self.dim)).astype(complex))",
    "extra_row": "return AngleSteps(rng.normal(size=(batch + 1, n_steps, self.dim // 2)))",
    "extra_step": "return HouseholderSteps(np.ones((batch, n_steps + 1, self.dim)) / 2, np.ones((batch, n_steps + 1)))",
    "nan": "return AngleSteps(np.full((batch, n_steps, self.dim // 2), np.nan))",
    "ints": "return AngleSteps(np.zeros((batch, n_steps, self.dim // 2), dtype=int))",
    "raises": "raise RuntimeError('boom')",
    "orthogonal": "return AngleSteps(rng.normal(size=(batch, n_steps, self.dim // 2)))",
    "contractive": "return DenseSteps(0.5 * np.broadcast_to(np.eye(self.dim), (batch, n_steps, self.dim, self.dim)).copy())",
    "expanding": "return DenseSteps(1.5 * np.broadcast_to(np.eye(self.dim), (batch, n_steps, self.dim, self.dim)).copy())",
    "huge": "return DenseSteps(1e200 * np.broadcast_to(np.eye(self.dim), (batch, n_steps, self.dim, self.dim)).copy())",
    "exits": "raise SystemExit(0)",
    # the first sample (batch 2, 3 steps) is fine; later draws are not
    "late_raise": "return AngleSteps(rng.normal(size=(batch, n_steps, self.dim // 2))) if batch == 2 else 1 / 0",
    "late_shape": "return AngleSteps(rng.normal(size=(batch, n_steps + (batch != 2), self.dim // 2)))",
}


def write_module(folder, name: str, body: str) -> str:
    """A module ``name`` in ``folder`` with one family class ``Fam`` (dim 4) whose sample() runs ``body``."""
    code = HEADER + textwrap.dedent(f"""
        @dataclass(frozen=True)
        class Fam:
            dim: int = 4

            def sample(self, rng, n_steps, batch):
                {body}

        def not_a_class():
            return None
        """)
    (folder / f"{name}.py").write_text(code)
    return f"{name}:Fam"


@pytest.mark.parametrize("kind, message", [
    ("ndarray", "returned a ndarray; it must return a step form"),
    ("complex", "dtype complex128; a real floating dtype"),
    ("extra_row", "theta of shape (3, 3, 2); expected (2, 3, 2)"),
    ("extra_step", "w of shape (2, 4, 4); expected (2, 3, 4)"),
    ("nan", "non-finite value(s)"),
    ("ints", "dtype int64; a real floating dtype"),
    ("raises", "raised RuntimeError: boom"),
    ("huge", "entries up to 1e+200; |entries| must be at most 1e+150"),
    ("exits", "raised SystemExit: 0"),
    ("late_raise", "raised ZeroDivisionError: division by zero"),  # every draw is checked, not only the first
    ("late_shape", "gave theta of shape"),
])
@pytest.mark.parametrize("command", ["measure", "check", "verify"])
def test_bad_user_family_is_one_line_exit_2(kind, message, command, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)       # the module sits in the current folder only: no PYTHONPATH
    family = write_module(tmp_path, f"fam_{kind}_{command}", BODIES[kind])
    argv = {"measure": ["measure", "coherence", "--family", family, "--opt", "steps=3", "--opt", "samples=10"],
            "check": ["check", family, "--samples", "100"],
            "verify": ["verify", "--quick", "--family", family, "--workers", "1"]}[command]
    assert main([*argv, "--json", "out.json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and "Traceback" not in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix != ".pyc" and p.name != "__pycache__") == \
        [f"fam_{kind}_{command}.py"]


@pytest.mark.parametrize("family, message", [
    (":", "expected package.module:ClassName"),
    ("mod:", "expected package.module:ClassName"),
    ("no_such_module_xyz:Fam", "cannot import module 'no_such_module_xyz'"),
    ("{mod}:Missing", "has no 'Missing'"),
    ("{mod}:not_a_class", "is not a class but a function"),
])
def test_bad_family_names_are_refused(family, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    mod = write_module(tmp_path, "fam_names", BODIES["orthogonal"]).split(":")[0]
    assert main(["measure", "coherence", "--family", family.format(mod=mod)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


@pytest.mark.parametrize("kind, verdict, top", [("orthogonal", "orthogonal", "1"), ("contractive", "contractive", "0.5")])
def test_good_user_family_from_the_current_folder_runs_and_is_reported(kind, verdict, top, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    family = write_module(tmp_path, f"fam_good_{kind}", BODIES[kind])
    assert main(["measure", "coherence", "--family", family, "--opt", "steps=3", "--opt", "samples=10",
                 "--json", "r.json"]) == 0
    captured = capsys.readouterr()
    assert f"max ||A||_2 = {top}: {verdict}" in captured.err
    record = json.loads((tmp_path / "r.json").read_text())
    assert record["family_check"]["largest_singular_value"] == pytest.approx(float(top))
    assert json.loads(captured.out)["n"] == 10


def test_expanding_user_family_is_checked_and_verified_without_a_traceback(tmp_path, monkeypatch, capsys):
    """1.5 I: no first-moment gap, not norm-bounded, so no claim applies; check says why (exit 1), and verify says
    that nothing was verified rather than PASS over no evidence."""
    monkeypatch.chdir(tmp_path)
    family = write_module(tmp_path, "fam_expanding", BODIES["expanding"])
    assert main(["check", family, "--samples", "100"]) == 1
    out = capsys.readouterr().out
    assert "C4 does not apply: steps can expand norms" in out and "spectral-gap condition: FAILS" in out
    assert main(["verify", "--quick", "--family", family, "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "NOTHING VERIFIED" in out and "report PASS" not in out and "C4 not run: steps can expand norms" in out


def test_checked_family_is_the_users_family_to_the_engine(tmp_path, monkeypatch):
    """make_family hands out a CheckedFamily: same name, parameters, attributes and draws as the user's object,
    and it pickles (process pools, Dask)."""
    import pickle

    import numpy as np

    from accum.simulations.families import family_name, family_params, make_family
    from accum.simulations.userfamily import CheckedFamily

    monkeypatch.chdir(tmp_path)
    family = write_module(tmp_path, "fam_wrapped", BODIES["orthogonal"])
    fam = make_family(family)
    assert isinstance(fam, CheckedFamily) and type(fam.user_family).__name__ == "Fam"
    assert family_name(fam) == family and family_params(fam) == {"dim": 4} and fam.dim == 4
    again = pickle.loads(pickle.dumps(fam))
    a, b = (f.sample(np.random.default_rng(3), 5, 7).theta for f in (fam, again))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, fam.user_family.sample(np.random.default_rng(3), 5, 7).theta)
    with pytest.raises(AttributeError):
        fam.no_such_attribute
