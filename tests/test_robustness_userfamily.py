"""Issue 14, user families: the first sample is checked (step form, shapes, real dtype, finite values) and every
violation is one line with exit status 2; a module in the current folder is importable without PYTHONPATH."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

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


def test_expanding_user_family_is_checked_and_refused_by_verify(tmp_path, monkeypatch, capsys):
    """1.5 I: no first-moment gap, not norm-bounded, so no claim applies; check says why (exit 1), and verify
    refuses it (exit 2) in one line naming --family, the failed conditions and each claim's reason, with nothing on
    stdout and no --json written -- not a report that exits 0 over no evidence."""
    monkeypatch.chdir(tmp_path)
    family = write_module(tmp_path, "fam_expanding", BODIES["expanding"])
    assert main(["check", family, "--samples", "100"]) == 1
    out = capsys.readouterr().out
    assert "C4 does not apply: steps can expand norms" in out and "spectral-gap condition: FAILS" in out
    assert main(["verify", "--quick", "--family", family, "--workers", "1", "--json", "r.json"]) == 2
    captured = capsys.readouterr()
    err = [line for line in captured.err.splitlines() if line.startswith("accum verify: error:")]
    assert captured.out == "" and len(err) == 1, captured
    assert f"--family {family} (dim=4): no claim C1-C6 applies, nothing to verify" in err[0]
    assert "conditions failed: norm-bounded (estimate 1.5), first-moment-gap (estimate 1.5" in err[0]
    assert "C5: steps can expand norms" in err[0] and "C2, C3, C6: needs C1" in err[0]
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix != ".py" and p.name != "__pycache__") == []


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


# ---------------------------------------------------------------------------------------------------------------------
# Issue 40: a family's own failures, of any exception type, are one line naming the family and what was called; its
# output never reaches stdout; a family whose draws ignore rng is refused before anything is saved.

def write_source(folder, name: str, source: str) -> str:
    """A module ``name`` in ``folder``: HEADER, then ``source`` (which defines ``Fam``)."""
    (folder / f"{name}.py").write_text(HEADER + "import os, sys\n" + textwrap.dedent(source))
    return f"{name}:Fam"


GOOD_SAMPLE = """
    def sample(self, rng, n_steps, batch):
        return AngleSteps(rng.normal(size=(batch, n_steps, self.dim // 2)))
"""

#: kind: (module source, what the one line says) -- refused by measure, check and verify alike, exit status 2
REFUSED = {
    "generator_exit": ("class Fam:\n    dim = 4\n    def sample(self, rng, n_steps, batch):\n"
                       "        raise GeneratorExit('closing')\n", "sample(rng, n_steps=3, batch=2) raised GeneratorExit: closing"),
    "base_exception": ("class Stop(BaseException):\n    pass\n\nclass Fam:\n    dim = 4\n"
                       "    def sample(self, rng, n_steps, batch):\n        raise Stop('halt')\n", "raised Stop: halt"),
    "dim_property": ("class Fam:\n    @property\n    def dim(self):\n        raise ValueError('no dim')\n" + GOOD_SAMPLE,
                     "reading dim raised ValueError: no dim"),
    "dim_text": ("class Fam:\n    dim = '4'\n" + GOOD_SAMPLE, "dim must be an integer >= 1, got a str"),
    "no_sample": ("class Fam:\n    dim = 4\n", "does not implement the Family protocol (dim, sample): it has no sample"),
    "init_exits": ("class Fam:\n    dim = 4\n    def __init__(self):\n        sys.exit(0)\n" + GOOD_SAMPLE,
                   "refused its parameters {}: SystemExit: 0"),
    "import_exits": ("raise SystemExit(3)\n", "importing"),
    "unprintable": ("class Odd(Exception):\n    def __str__(self):\n        raise RuntimeError('no text')\n\n"
                    "class Fam:\n    dim = 4\n    def sample(self, rng, n_steps, batch):\n        raise Odd()\n",
                    "raised Odd: (its message could not be printed)"),
    "multiline": ("class Fam:\n    dim = 4\n    def sample(self, rng, n_steps, batch):\n"
                  "        raise RuntimeError('first\\nsecond\\n' + 'x' * 1000)\n", "raised RuntimeError: first second xxx"),
    "ignores_rng": ("GLOBAL = np.random.default_rng()\n\nclass Fam:\n    dim = 4\n    def sample(self, rng, n_steps, batch):\n"
                    "        return AngleSteps(GLOBAL.normal(size=(batch, n_steps, 2)))\n", "do not come from rng alone"),
    "keeps_state": ("class Fam:\n    dim = 4\n    calls = 0\n    def sample(self, rng, n_steps, batch):\n"
                    "        Fam.calls += 1\n        return AngleSteps(Fam.calls + rng.normal(size=(batch, n_steps, 2)))\n",
                    "do not come from rng alone"),
}


@pytest.mark.parametrize("kind", sorted(REFUSED))
@pytest.mark.parametrize("command", ["measure", "check", "verify"])
def test_a_familys_own_failure_of_any_type_is_one_line_naming_it(kind, command, tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)
    source, message = REFUSED[kind]
    family = write_source(tmp_path, f"fam40_{kind}_{command}", source)
    argv = {"measure": ["measure", "coherence", "--family", family, "--opt", "steps=3", "--opt", "samples=10"],
            "check": ["check", family, "--samples", "100"],
            "verify": ["verify", "--quick", "--family", family, "--workers", "1"]}[command]
    assert main([*argv, "--json", "out.json"]) == 2
    out, err = capfd.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and len(lines) == 1 and message in lines[0] and family.split(":")[0] in lines[0], lines
    assert len(lines[0]) < 800 and "Traceback" not in err
    assert not (tmp_path / "out.json").exists()  # nothing saved, the non-reproducible family included


#: kind: (module source, the text it writes somewhere other than stderr) -- measure runs, stdout is its JSON line only
NOISY = {
    "os_write": ("class Fam:\n    dim = 4\n    def sample(self, rng, n_steps, batch):\n"
                 "        os.write(1, b'fd one\\n')\n        return AngleSteps(rng.normal(size=(batch, n_steps, 2)))\n",
                 "fd one"),
    "dunder_stdout": ("class Fam:\n    dim = 4\n    def sample(self, rng, n_steps, batch):\n"
                      "        print('dunder', file=sys.__stdout__)\n"
                      "        return AngleSteps(rng.normal(size=(batch, n_steps, 2)))\n", "dunder"),
    "kept_stdout": ("OUT = sys.stdout\n\nclass Fam:\n    dim = 4\n    def sample(self, rng, n_steps, batch):\n"
                    "        OUT.write('kept reference\\n')\n        return AngleSteps(rng.normal(size=(batch, n_steps, 2)))\n",
                    "kept reference"),
    "init_print": ("class Fam:\n    dim = 4\n    def __init__(self):\n        print('constructed')\n" + GOOD_SAMPLE,
                   "constructed"),
    "import_print": ("print('imported')\n\nclass Fam:\n    dim = 4\n" + GOOD_SAMPLE, "imported"),
    "closes_stdout": ("class Fam:\n    dim = 4\n    def sample(self, rng, n_steps, batch):\n        sys.stdout.close()\n"
                      "        return AngleSteps(rng.normal(size=(batch, n_steps, 2)))\n", None),
    "catch_all": ("class Fam:\n    dim = 4\n    def __getattr__(self, name):\n        print('asked', name)\n"
                  "        return 42\n" + GOOD_SAMPLE, None),
    "catch_all_raises": ("class Fam:\n    dim = 4\n    def __getattr__(self, name):\n"
                         "        raise RuntimeError(name)\n" + GOOD_SAMPLE, None),
}


@pytest.mark.parametrize("kind", sorted(NOISY))
def test_a_familys_output_never_reaches_stdout(kind, tmp_path, monkeypatch, capfd):
    """Whatever the family writes (print, sys.__stdout__, a reference kept from import time, os.write on fd 1) is on
    stderr; closing its sys.stdout closes nothing of the command's; a catch-all __getattr__ is not a capability."""
    monkeypatch.chdir(tmp_path)
    source, noise = NOISY[kind]
    family = write_source(tmp_path, f"fam40_noisy_{kind}", source)
    assert main(["measure", "coherence", "--family", family, "--opt", "steps=3", "--opt", "samples=10"]) == 0
    out, err = capfd.readouterr()
    record = json.loads(out)  # the whole of stdout is the one JSON line
    assert out.count("\n") == 1 and record["family"] == family and record["n"] == 10
    assert noise is None or noise in err
    assert f"family {family}: AngleSteps" in err  # stderr still open after the family closed its stdout


def test_a_keyboard_interrupt_from_family_code_stays_an_interrupt(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    family = write_source(tmp_path, "fam40_interrupt", "class Fam:\n    dim = 4\n"
                          "    def sample(self, rng, n_steps, batch):\n        raise KeyboardInterrupt\n")
    assert main(["measure", "coherence", "--family", family]) == 130
    assert capsys.readouterr().err.strip() == "accum measure: interrupted"


MOMENTS = {
    "wrong_shape": ("return np.zeros((3, 3)), np.zeros((4, 4, 4))", "moments() gave E[A] of shape (3, 3); expected (4, 4)"),
    "not_a_pair": ("return np.zeros((4, 4))", "moments() returned a ndarray; it must return the pair"),
    "nan": ("return np.full((4, 4), np.nan), np.zeros((4,) * 4)", "moments() gave E[A] with non-finite values"),
    "raises": ("raise GeneratorExit('gone')", "moments() raised GeneratorExit: gone"),
}


@pytest.mark.parametrize("kind", sorted(MOMENTS))
def test_bad_moments_are_refused_before_any_monte_carlo(kind, tmp_path, monkeypatch, capsys):
    """verify and check hold a family's stated moments() to their shapes before any work (the issue: a RuntimeError
    after 7 CPU-seconds)."""
    import time

    monkeypatch.chdir(tmp_path)
    body, message = MOMENTS[kind]
    family = write_source(tmp_path, f"fam40_moments_{kind}", "class Fam:\n    dim = 4\n" + GOOD_SAMPLE
                          + f"    def moments(self):\n        {body}\n")
    for argv in (["verify", "--quick", "--family", family, "--workers", "1"], ["check", family, "--samples", "100"]):
        start = time.process_time()
        assert main(argv) == 2
        assert time.process_time() - start < 2.0
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and f"family {family}: {message}" in lines[0], lines


@pytest.mark.parametrize("attribute, value, message", [
    ("moments", "3", "moments must be a method, got a int"),
    ("iid_steps", "'yes'", "iid_steps must be True or False, got a str"),
])
def test_an_optional_attribute_of_the_wrong_kind_is_one_line(attribute, value, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    family = write_source(tmp_path, f"fam40_attr_{attribute}", f"class Fam:\n    dim = 4\n    {attribute} = {value}\n"
                          + GOOD_SAMPLE)
    assert main(["verify", "--quick", "--family", family, "--workers", "1"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and f"family {family}: {message}" in lines[0], lines


def test_a_family_failing_in_a_pool_worker_or_while_shipped_is_one_line(tmp_path, monkeypatch, capsys):
    """A draw that fails only in a pool worker, and a family that cannot be pickled for one: one line, exit 2."""
    monkeypatch.chdir(tmp_path)
    in_worker = write_source(tmp_path, "fam40_in_worker", "import multiprocessing\n\nclass Fam:\n    dim = 4\n"
                             "    def sample(self, rng, n_steps, batch):\n"
                             "        if multiprocessing.parent_process() is not None:\n"
                             "            raise GeneratorExit('in a worker')\n"
                             "        return AngleSteps(rng.normal(size=(batch, n_steps, 2)))\n")
    assert main(["verify", "--quick", "--family", in_worker, "--workers", "2", "--no-progress"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and f"family {in_worker}: sample(" in lines[0] and "GeneratorExit: in a worker" in lines[0], lines
    unpicklable = write_source(tmp_path, "fam40_unpicklable", "class Fam:\n    dim = 4\n    def __reduce__(self):\n"
                               "        raise TypeError('not today')\n" + GOOD_SAMPLE)
    assert main(["verify", "--quick", "--family", unpicklable, "--workers", "2", "--no-progress"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "pickling (for a worker) raised TypeError: not today" in lines[0], lines


# Issue 40: a user family in the current folder works in every worker, run the natural way (the installed `accum`
# script, whose import path does not hold the current folder, and --workers 2).

ACCUM = Path(sys.executable).with_name("accum")
ENV = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "OMP_NUM_THREADS": "1"}
GRID = 'quantity = "coherence"\nroot_seed = 1\nseeds = 2\noutput = "out"\n[options]\nsteps = 3\nsamples = 20\n' \
       '[[family]]\nname = "fams40:Good"\ndim = 4\n'


@pytest.fixture(scope="module")
def family_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cwd")
    write_source(folder, "fams40", "class Fam:\n    pass\n\n@dataclass(frozen=True)\nclass Good:\n    dim: int = 4\n"
                 + GOOD_SAMPLE)
    (folder / "g.toml").write_text(GRID)
    return folder


@pytest.mark.parametrize("argv, done", [
    (["sweep", "g.toml", "--workers", "2", "--no-progress"], '"computed": 2, "failed": 0'),
    (["verify", "--quick", "--family", "fams40:Good", "--param", "dim=4", "--workers", "2", "--no-progress"],
     "report PASS"),
    (["figures", "--quick", "--family", "fams40:Good", "--workers", "2", "--no-progress", "--out", "figs",
      "--results", "figdata"], ""),
    (["probe", "sweep", "--preset", "tiny", "--arms", "rope", "family", "--family", "fams40:Good", "--seeds", "0", "1",
      "2", "--looks", "3", "--steps", "4", "--workers", "2", "--no-progress", "--out", "probes"],
     "rotation_only_degrades:family"),
], ids=["sweep", "verify", "figures", "probe-sweep"])
def test_a_family_in_the_current_folder_runs_in_pool_workers(argv, done, family_folder):
    """The issue's reproducers: each failed (ModuleNotFoundError in every job, BrokenProcessPool, 6 of 38 figure jobs,
    an error naming arm 'rope') before the job runner shipped the current folder with every job."""
    assert not (Path(sys.prefix) / "fams40.py").exists() and str(family_folder) not in sys.path
    run = subprocess.run([str(ACCUM), *argv], cwd=family_folder, env=ENV, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and done in run.stdout, (run.stdout[-2000:], run.stderr[-2000:])
    assert "Traceback" not in run.stderr and "ModuleNotFoundError" not in run.stderr and "failed" not in run.stderr
