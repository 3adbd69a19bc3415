"""The documentation's examples run as printed, on every page: README.md and every docs/*.md.

* Every ```python block is executed as it stands (its code, then its ``>>>`` lines as a doctest, each printed output
  compared with the page's).
* Every ```console block is run command by command (``$ `` lines, through bash, in a fresh temporary folder, with the
  venv's ``accum`` first on ``PATH``); what the command prints (stdout and stderr together) must match the lines
  shown under it, where ``...`` stands for any text (doctest's ELLIPSIS) and runs of whitespace compare equal.

The "Adding a family" examples are checked further -- the shipped user family, the two-point angle law (numpy and
torch samplers) and the sign-flip family with exact moments.  Statistical checks: each two-point sampler against its
characteristic function, false-failure budget 1e-4 each."""

import contextlib
import doctest
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_within

from accum.simulations import examples, laws

ROOT = Path(__file__).parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]


def fenced_blocks(language: str) -> list[tuple[Path, str]]:
    """(page, text) of every ```language block of every page, dedented to the fence's own indentation (a block may
    sit inside a list item)."""
    found = []
    for page in PAGES:
        for indent, body in re.findall(rf"^( *)```{language}\n(.*?)^\1```", page.read_text(), flags=re.S | re.M):
            lines = [line[len(indent):] if line.startswith(indent) else line for line in body.splitlines()]
            found.append((page, "\n".join(lines) + "\n"))
    return found


def python_blocks() -> list[str]:
    return [text for _, text in fenced_blocks("python")]


def console_examples() -> list[tuple[str, str, str]]:
    """(page name, command, expected output) of every ``$ `` command of every ```console block."""
    examples_ = []
    for page, text in fenced_blocks("console"):
        for chunk in re.split(r"^(?=\$ )", text, flags=re.M):
            if chunk.startswith("$ "):
                command, _, expected = chunk[2:].partition("\n")
                examples_.append((page.name, command, expected))
    return examples_


def readme_block(marker: str) -> tuple[str, list[str]]:
    """(code, session): the documentation's ```python block containing ``marker``, split into its code and its
    ``>>>`` lines (the expressions, without the prompt)."""
    blocks = [b for b in python_blocks() if marker in b]
    assert len(blocks) == 1, f"{len(blocks)} documentation blocks contain {marker!r}"
    lines = blocks[0].splitlines()
    first_prompt = next((i for i, line in enumerate(lines) if line.startswith(">>>")), len(lines))
    return "\n".join(lines[:first_prompt]), [line[4:] for line in lines if line.startswith(">>> ")]


def readme_two_point(a: float):
    """The printed TwoPoint law of half-width ``a``, defined in ``simulations.laws``' namespace as the README says."""
    code, _ = readme_block("class TwoPoint")
    namespace = dict(vars(laws))
    exec(code, namespace)
    return namespace["TwoPoint"](a=a)


def assert_draws_follow_characteristic(law, theta: np.ndarray) -> None:
    """theta (n, d/2): n i.i.d. draws of ``law``, whose means of cos(k theta) and sin(k theta) per plane are within
    standard errors of the real and imaginary parts of ``law.characteristic(k, d)`` at k = 1, 2, 3 (the imaginary
    parts are 0 by symmetry; budget 1e-4 over the three k)."""
    n, dim = theta.shape[0], 2 * theta.shape[1]
    for k in (1, 2, 3):
        z = np.exp(1j * k * theta)
        for part in (np.real, np.imag):
            assert_within(part(z).mean(axis=0), part(z).std(axis=0) / np.sqrt(n) + 1e-12,
                          part(law.characteristic(k, dim)), 1e-4 / 3)


def test_the_pages_hold_the_examples():
    """Every page is read: the README and each docs page exist, and the python and console blocks are found."""
    assert README in PAGES and len(PAGES) >= 8
    assert len(python_blocks()) >= 5 and len(console_examples()) >= 6


@pytest.mark.parametrize("block", python_blocks(), ids=lambda b: b.strip().splitlines()[0][:40])
def test_every_python_example_runs_and_prints_what_the_page_shows(block):
    """A block's code before its first ``>>>`` runs in a fresh namespace and prints nothing (the page shows no
    output for it); its ``>>>`` lines then run as a doctest (whitespace-insensitive) in that namespace."""
    lines = block.splitlines()
    first_prompt = next((i for i, line in enumerate(lines) if line.startswith(">>>")), len(lines))
    namespace: dict = {}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile("\n".join(lines[:first_prompt]), "<documentation>", "exec"), namespace)
    assert printed.getvalue() == ""
    session = doctest.DocTestParser().get_doctest("\n".join(lines[first_prompt:]) + "\n", namespace, "page",
                                                  "<documentation>", 0)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    report = io.StringIO()
    runner.run(session, out=report.write, clear_globs=False)
    assert runner.failures == 0, report.getvalue()


@pytest.mark.parametrize("page,command,expected", console_examples(), ids=lambda v: str(v)[:50])
def test_every_console_example_prints_what_the_page_shows(page, command, expected, tmp_path):
    """The command, run as printed from an empty folder, prints the lines shown (``...``: any text)."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    run = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, timeout=120)
    checker = doctest.OutputChecker()
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    assert checker.check_output(expected, run.stdout, flags), f"{page}: $ {command}\n--- shown\n{expected}--- printed\n{run.stdout}"


def test_readme_user_family_is_the_shipped_example():
    """The printed SignedPermutation declares the same parameters and samples exactly as ``simulations/examples.py``."""
    code, _ = readme_block("class SignedPermutation")
    namespace: dict = {}
    exec(code, namespace)
    printed, shipped = namespace["SignedPermutation"](dim=5), examples.SignedPermutation(dim=5)
    assert printed == namespace["SignedPermutation"](**vars(shipped))
    a = printed.sample(np.random.default_rng(7), 3, 4).dense()
    np.testing.assert_array_equal(a, shipped.sample(np.random.default_rng(7), 3, 4).dense())
    assert namespace["SignedPermutation"].PARAMS == examples.SignedPermutation.PARAMS


def test_readme_angle_law_samples_its_characteristic_function():
    """The printed TwoPoint law against its own numpy sampler."""
    law, n = readme_two_point(0.7), 40_000
    theta = law.sample(np.random.default_rng(8), (n, 1, 2), 4)[:, 0]
    assert theta.shape == (n, 2)
    assert_draws_follow_characteristic(law, theta)


def test_readme_angle_law_torch_sampler_draws_its_law():
    """The printed TwoPoint's torch sampler: float64 draws of shape (batch, n_steps, d/2) on the device, each +-a,
    whose sample characteristic function matches ``characteristic``."""
    import torch

    law, n, cpu = readme_two_point(0.7), 40_000, torch.device("cpu")
    gen = torch.Generator(device=cpu)
    gen.manual_seed(8)
    theta = law.torch_sampler(4, cpu, gen)(3, n)
    assert theta.shape == (n, 3, 2) and theta.dtype == torch.float64 and theta.device == cpu
    theta = theta.numpy()
    np.testing.assert_array_equal(np.abs(theta), 0.7)
    assert_draws_follow_characteristic(law, theta[:, 0])


def test_readme_family_with_exact_moments_prints_what_it_says():
    """SignFlips' far residual is the closed form 1/N (E[A] = 0, exact moments): the value the README prints."""
    code, session = readme_block("class SignFlips")
    namespace: dict = {}
    exec(code, namespace)
    (expression,) = session
    p = eval(expression.replace(".value", ""), namespace)
    assert p.source.startswith("closed form") and np.all(p.stderr == 0)
    np.testing.assert_allclose(p.value, 1.0 / np.array([1, 10, 100]), rtol=1e-12)


def test_your_family_page_module_runs_from_a_folder_of_its_own(tmp_path, monkeypatch, capsys):
    """docs/your-family.md's module, saved as mymod.py in the current folder: both families are checked, measured
    and named in the JSON line as the page says."""
    from accum.cli import main

    code, _ = readme_block("class StudentTAngles")
    (tmp_path / "mymod.py").write_text(code)
    monkeypatch.chdir(tmp_path)
    try:
        for family, verdict in (("mymod:StudentTAngles", "orthogonal"), ("mymod:RandomStrengthReflections", "contractive")):
            assert main(["measure", "coherence", "--family", family, "--param", "dim=4", "--opt", "steps=3",
                         "--opt", "samples=10"]) == 0
            out, err = capsys.readouterr()
            assert f"{family}: " in err and err.strip().endswith(verdict) and '"family": "' + family + '"' in out
    finally:
        sys.modules.pop("mymod", None)


def test_your_family_page_moments_are_the_monte_carlo_moments():
    """RandomStrengthReflections.moments() (the page's closed forms) against E[A] and E[A_ij A_kl] of 40000 of its
    own steps at d = 3, beta_max = 1.5: every entry within its standard error (budget 1e-4 over the 90 entries)."""
    code, _ = readme_block("class StudentTAngles")
    namespace: dict = {}
    exec(code, namespace)
    family = namespace["RandomStrengthReflections"](dim=3, beta_max=1.5)
    mean, pair = family.moments()
    a = family.sample(np.random.default_rng(9), 1, 40_000).dense()[:, 0]  # (n, 3, 3)
    products = np.einsum("nij,nkl->nijkl", a, a).reshape(len(a), -1)
    draws = np.concatenate([a.reshape(len(a), -1), products], axis=1)
    predicted = np.concatenate([mean.ravel(), pair.ravel()])
    assert_within(draws.mean(axis=0), draws.std(axis=0) / np.sqrt(len(a)), predicted, 1e-4, floor=1e-9)


def test_your_family_page_angle_law_samples_its_characteristic_function():
    """The page's Laplace law against its own numpy sampler."""
    code, _ = readme_block("class Laplace")
    namespace: dict = {}
    exec(code, namespace)
    law, n = namespace["Laplace"](mu=0.3, b=0.4), 40_000
    assert_draws_follow_characteristic(law, law.sample(np.random.default_rng(10), (n, 1, 2), 4)[:, 0])


def test_the_sweep_guide_grid_has_the_jobs_it_says(tmp_path, capsys, monkeypatch):
    """simulations/SWEEP.md's grid file, run as printed with --dry-run, has the number of jobs the guide states."""
    import json

    from accum.cli import main

    guide = (ROOT / "simulations" / "SWEEP.md").read_text()
    (grid,) = re.findall(r"```toml\n(.*?)```", guide, flags=re.S)
    stated = int(re.search(r"The grid above has .*? = (\d+) jobs", guide).group(1))
    (tmp_path / "grid.toml").write_text(grid)
    monkeypatch.chdir(tmp_path)
    assert main(["sweep", "grid.toml", "--dry-run"]) == 0
    assert json.loads(capsys.readouterr().out)["jobs"] == stated == 88
