"""The README's examples run as printed: every ```python block of README.md is executed as it stands (its code,
then its ``>>>`` lines as a doctest, each printed output compared with the README's), and the "Adding a family"
examples are checked further -- the shipped user family, the two-point angle law and the sign-flip family with
exact moments.  Statistical check: the two-point sampler against its characteristic function, false-failure
budget 1e-4."""

import contextlib
import doctest
import io
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_within

from accum.simulations import examples, laws

README = Path(__file__).parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def readme_block(marker: str) -> tuple[str, list[str]]:
    """(code, session): the README's ```python block containing ``marker``, split into its code and its ``>>>``
    lines (the expressions, without the prompt)."""
    blocks = [b for b in python_blocks() if marker in b]
    assert len(blocks) == 1, f"{len(blocks)} README blocks contain {marker!r}"
    lines = blocks[0].splitlines()
    first_prompt = next((i for i, line in enumerate(lines) if line.startswith(">>>")), len(lines))
    return "\n".join(lines[:first_prompt]), [line[4:] for line in lines if line.startswith(">>> ")]


@pytest.mark.parametrize("block", python_blocks(), ids=lambda b: b.strip().splitlines()[0][:40])
def test_every_readme_example_runs_and_prints_what_the_readme_shows(block):
    """A block's code before its first ``>>>`` runs in a fresh namespace and prints nothing (the README shows no
    output for it); its ``>>>`` lines then run as a doctest (whitespace-insensitive) in that namespace."""
    lines = block.splitlines()
    first_prompt = next((i for i, line in enumerate(lines) if line.startswith(">>>")), len(lines))
    namespace: dict = {}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile("\n".join(lines[:first_prompt]), str(README), "exec"), namespace)
    assert printed.getvalue() == ""
    session = doctest.DocTestParser().get_doctest("\n".join(lines[first_prompt:]) + "\n", namespace, "README",
                                                  str(README), 0)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    report = io.StringIO()
    runner.run(session, out=report.write, clear_globs=False)
    assert runner.failures == 0, report.getvalue()


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
    """The printed TwoPoint law, defined in ``simulations.laws``' namespace as the README says, against its own
    sampler at k = 1, 2, 3 (real parts; the imaginary parts are 0 by symmetry and checked too)."""
    code, _ = readme_block("class TwoPoint")
    namespace = dict(vars(laws))
    exec(code, namespace)
    law, n = namespace["TwoPoint"](a=0.7), 40_000
    theta = law.sample(np.random.default_rng(8), (n, 1, 2), 4)[:, 0]
    assert theta.shape == (n, 2)
    for k in (1, 2, 3):
        z = np.exp(1j * k * theta)
        for part in (np.real, np.imag):
            assert_within(part(z).mean(axis=0), part(z).std(axis=0) / np.sqrt(n) + 1e-12,
                          part(law.characteristic(k, 4)), 1e-4 / 3)


def test_readme_family_with_exact_moments_prints_what_it_says():
    """SignFlips' far residual is the closed form 1/N (E[A] = 0, exact moments): the value the README prints."""
    code, session = readme_block("class SignFlips")
    namespace: dict = {}
    exec(code, namespace)
    (expression,) = session
    p = eval(expression.replace(".value", ""), namespace)
    assert p.source.startswith("closed form") and np.all(p.stderr == 0)
    np.testing.assert_allclose(p.value, 1.0 / np.array([1, 10, 100]), rtol=1e-12)
