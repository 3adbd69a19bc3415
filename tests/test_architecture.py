"""The architecture as a checked contract (docs/families.md, "Layout").

* The import contracts of pyproject.toml (``[tool.importlinter]``: the layers, no cycles between the modules of
  any package, figures never calling the estimators) hold, checked by import-linter on the package as installed;
  and they can fail: a planted upward import and a planted cycle each break one.
* No module is over ``MAX_LINES`` lines.
* Types own their behaviour: no ``isinstance`` (or ``type(x) is``) test on a concrete step form, family or angle law
  class outside that class's own module.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from accum.simulations import laws, steps
from accum.simulations.families import FAMILIES

PROJECT = Path(__file__).resolve().parents[1]
MAX_LINES = 500


def package_dirs() -> dict[str, Path]:
    """Each package of the distribution and the folder it is read from (pyproject's ``package-dir``)."""
    setup = tomllib.loads((PROJECT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return {name: PROJECT / folder for name, folder in setup["package-dir"].items()}


def source_files() -> list[tuple[str, Path]]:
    """(dotted module name, file) of every module of the distribution."""
    return [(f"{package}.{path.stem}" if path.stem != "__init__" else package, path)
            for package, folder in package_dirs().items() for path in sorted(folder.glob("*.py"))]


def installed_copy(dst: Path) -> Path:
    """The distribution's modules copied to their dotted paths under ``dst`` -- the tree an install makes.
    import-linter (grimp) reads one package's files from one folder, and the editable install spreads ``accum``
    over simulations/, theory/, figures/ and probes/."""
    for package, folder in package_dirs().items():
        target = dst.joinpath(*package.split("."))
        target.mkdir(parents=True, exist_ok=True)
        for path in folder.glob("*.py"):
            shutil.copy2(path, target / path.name)
    return dst


def lint_imports(tree: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` with pyproject.toml's contracts on the modules under ``tree`` (run outside the checkout,
    so the checkout's own ``accum/`` folder cannot shadow the copy)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [str(Path(sys.executable).with_name("lint-imports")), str(PROJECT / "pyproject.toml"), "--no-cache"]
    return subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, timeout=300)


def test_import_contracts_hold(tmp_path):
    done = lint_imports(installed_copy(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "broken" in done.stdout and " 0 broken" in done.stdout


@pytest.mark.parametrize("module, planted, contract", [
    ("simulations/params.py", "import accum.cli", "Layers"),  # the bottom of the engine importing the command line
    ("simulations/steps.py", "import accum.simulations.estimators", "No import cycles"),  # estimators import steps
    ("simulations/steps.py", "import accum.simulations.families", "Engine layers"),  # a form knowing the families
    ("figures/specs.py", "from accum.simulations import estimators", "Figures never call the estimators"),
])
def test_import_contracts_can_fail(tmp_path, module, planted, contract):
    tree = installed_copy(tmp_path)
    package, name = module.split("/")
    path = tree / "accum" / package / name
    path.write_text(path.read_text() + f"\n{planted}  # planted\n")
    done = lint_imports(tree)
    assert done.returncode != 0
    assert f"{contract} BROKEN" in done.stdout.splitlines(), done.stdout


@pytest.mark.parametrize("module, path", source_files(), ids=[m for m, _ in source_files()])
def test_no_module_is_too_big_to_hold_in_ones_head(module, path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{module}: {lines} lines (at most {MAX_LINES}: split it by responsibility)"


def concrete_classes() -> dict[str, str]:
    """Class name -> the module that defines it, for every concrete step form, built-in family and angle law."""
    classes = [steps.AngleSteps, steps.HouseholderSteps, steps.DenseSteps, *FAMILIES.values(), *laws.LAWS.values()]
    return {cls.__name__: cls.__module__ for cls in classes}


def type_tests(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, class name) of every ``isinstance(x, C)``, ``isinstance(x, (C, ...))``, and every identity or
    membership test against a class, ``type(x) is C``, ``kind is not C``, ``kind in (C, ...)``, in ``tree``."""
    found = []
    for node in ast.walk(tree):
        named: list[ast.expr] = []
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance" and len(node.args) == 2:
            named = [node.args[1]]
        elif isinstance(node, ast.Compare) and all(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn))
                                                   for op in node.ops):
            named = list(node.comparators)
        for expr in named:
            for leaf in (expr.elts if isinstance(expr, (ast.Tuple, ast.List, ast.Set)) else [expr]):
                name = leaf.attr if isinstance(leaf, ast.Attribute) else getattr(leaf, "id", None)
                if name:
                    found.append((node.lineno, name))
    return found


def test_no_type_tests_on_concrete_classes_outside_their_module():
    owners = concrete_classes()
    offending = [f"{module}:{line} tests for {name} (defined in {owners[name]})"
                 for module, path in source_files()
                 for line, name in type_tests(ast.parse(path.read_text()))
                 if name in owners and owners[name] != module]
    assert not offending, "ask the object instead:\n" + "\n".join(offending)


def test_the_type_test_scan_finds_what_it_looks_for():
    """A control: the scan sees each spelling it forbids."""
    source = ("isinstance(s, AngleSteps)\nisinstance(f, (Rope, m.Householder))\ntype(f) is Givens\n"
              "type(f) in (LieWalk, Haar)\nkind is not NoPE\nisinstance(x, np.ndarray)\nx == Token\n")
    assert [name for _, name in type_tests(ast.parse(source))] == [
        "AngleSteps", "Rope", "Householder", "Givens", "LieWalk", "Haar", "NoPE", "ndarray"]
