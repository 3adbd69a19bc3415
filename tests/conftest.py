"""Helpers shared by the test modules (import them with ``from conftest import ...``).

``off_default`` gives a point of a class's parameters away from their defaults, so a test that runs every angle law
(``simulations.laws.LAWS``) at non-default parameters needs no entry for a new law.

``interrupt_when`` starts an ``accum`` command and interrupts it once its work has started (the interrupt tests).
``plant`` puts a one-line defect into a real function for a test's duration (the planted-defect tables).

Statistical tests compare a Monte Carlo estimate with an independent prediction by one rule,
``simulations.stats.within_budget``: z = (measured - predicted) / sqrt(se^2 + floor^2) against the normal
threshold for the test's false-failure ``budget`` split (Bonferroni) over the points it checks.  Each module
states its budget; the suite's total stays below 1e-3.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from accum.simulations.params import ParamSpec
from accum.simulations.stats import within_budget


def assert_within(measured, stderr, predicted, budget: float, floor: float = 1e-12) -> None:
    """Fail with the z scores unless every point of ``measured`` +- ``stderr`` agrees with ``predicted``."""
    ok, z = within_budget(measured, stderr, predicted, budget, floor)
    assert ok, f"max |z| = {np.max(np.abs(z)):.2f} over {z.size} points: z = {z}"


def other_values(spec) -> list:
    """A few values of the ``ParamSpec`` ``spec`` other than its default, each within its declared range."""
    d = spec.default
    if spec.kind == "choice":
        candidates = list(spec.choices)
    elif spec.kind == "int":
        candidates = [d + 2, d - 2, d + 1, d - 1, 2 * d]
    else:
        candidates = [d + 0.25, d - 0.25, 1.5 * d, 0.5 * d]
    out = []
    for value in candidates:
        if value == d:
            continue
        try:
            out.append(spec.validate(value))
        except ValueError:
            continue
    return out


def family_variants(name: str, base: dict | None = None) -> dict[str, list]:
    """{parameter: [families]}: the built-in family ``name`` (with ``base`` parameters) with each of its parameters
    changed to each valid other value (with the parameters it only applies with, ``only_with``, set to allow it);
    every parameter gets at least one family, so a new parameter is enumerated too."""
    from accum.simulations.families import FAMILIES, make_family
    from accum.simulations.params import ParamError

    base = base or {}
    specs = {spec.name: spec for spec in FAMILIES[name].PARAMS}
    out: dict[str, list] = {}
    for spec in specs.values():
        out[spec.name] = []
        for value in other_values(spec):
            params, needs = {**base, spec.name: value}, spec.only_with
            while needs is not None:                      # e.g. stay needs source = markov, which needs law = token
                params[needs[0]] = needs[1][0]
                needs = specs[needs[0]].only_with
            try:
                out[spec.name].append(make_family(name, **params))
            except ParamError:
                continue
        assert out[spec.name], f"{name}: no valid other value of {spec.name}"
    return out


#: modules whose import ``accum_modules_loaded`` reports, in order (one interpreter for all of them)
FINGERPRINTED_ENTRIES = ("accum.simulations.measure", "accum.report_plan", "accum.calibration")


@functools.lru_cache(maxsize=1)
def accum_modules_loaded() -> dict[str, frozenset]:
    """{module: the ``accum`` modules loaded once it is imported} for each of ``FINGERPRINTED_ENTRIES``, imported in
    turn by one fresh interpreter (each set includes the earlier ones' modules), less the packages themselves and the
    three modules that hold no numbers (``accum.errors``: exception types; ``accum.runtime``: progress and threads;
    ``accum.interrupts``: the signal policy, which atomic writers tell of their temporary files)."""
    code = ("import importlib, sys\n"
            f"for name in {FINGERPRINTED_ENTRIES!r}:\n"
            "    importlib.import_module(name)\n"
            "    print(name, *sorted(m for m in sys.modules if m.startswith('accum')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=ENV).stdout
    skip = {"accum", "accum.errors", "accum.interrupts", "accum.runtime", "accum.simulations", "accum.theory"}
    return {line.split()[0]: frozenset(line.split()[1:]) - skip for line in out.splitlines()}


def off_default(specs: tuple[ParamSpec, ...]) -> dict:
    """Each numeric parameter of ``specs`` at its first ``other_values`` value (off its default, inside its range);
    choices, and parameters that apply only with another's value (``ParamSpec.only_with``), keep their defaults."""
    point = {}
    for spec in specs:
        values = other_values(spec) if spec.kind != "choice" and spec.only_with is None else []
        if values:
            point[spec.name] = values[0]
    return point


ENV = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def ignore_sigint() -> None:
    """Child set-up of a script's background job: SIGINT ignored, which Python then leaves ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def interrupt_when(argv: list[str], ready, cwd: Path, timeout: float = 60.0, sig: int = signal.SIGINT,
                   preexec=None) -> tuple[int, str, float]:
    """Start ``accum argv`` in its own process group (``preexec`` run in the child first), wait until ``ready()``
    (the work has started), send ``sig`` to the group as a terminal's Ctrl-C does (pool workers included);
    returns (exit status, stderr, seconds from the signal to the exit)."""
    proc = subprocess.Popen([sys.executable, "-m", "accum.cli", *argv], cwd=cwd, env=ENV, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=preexec)
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None or time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"the command ended or never started its work: {proc.communicate()}")
        time.sleep(0.05)
    time.sleep(0.3)
    os.killpg(proc.pid, sig)
    err, latency = exit_after_signal(proc, 30.0, "Ctrl-C")
    return proc.returncode, err, latency


def exit_after_signal(proc: subprocess.Popen, timeout: float, what: str) -> tuple[str, float]:
    """Wait (at most ``timeout`` s) for ``proc``, just signalled, to exit: (its stderr, seconds from now to its exit);
    the test fails, the group killed, if it is still running then."""
    sent = time.monotonic()
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"still running {timeout:g} s after {what}: {proc.communicate()}")
    return err, time.monotonic() - sent


def owner_and_name(target: str) -> tuple[Any, str]:
    """``"package.module:function"`` or ``"package.module:Class.function"`` -> (its module or class, its name)."""
    module, _, path = target.partition(":")
    *attributes, name = path.split(".")
    owner = importlib.import_module(module)
    for attribute in attributes:
        owner = getattr(owner, attribute)
    return owner, name


def plant(monkeypatch, target: str, old: str, new: str) -> None:
    """Replace the function ``target`` by a copy of its source with ``old`` (which must occur exactly once) ->
    ``new``, wherever accum holds it: its owner, every accum module that imported it by name (``estimators``
    imports ``near_weight`` from ``farset``), and dispatch tables of its module (``predict.QUANTITIES``)."""
    owner, name = owner_and_name(target)
    fn = inspect.unwrap(getattr(owner, name))
    source = textwrap.dedent(inspect.getsource(fn))
    assert source.count(old) == 1, f"the planted line {old!r} is not (once) in {name}"
    namespace = dict(vars(sys.modules[fn.__module__]))  # the function's own globals, so it runs as shipped
    exec(compile(source.replace(old, new), f"<planted {fn.__module__}.{name}>", "exec"), namespace)
    monkeypatch.setattr(owner, name, namespace[name])
    for module in [m for key, m in list(sys.modules.items()) if key.startswith("accum.") and m is not None]:
        if getattr(module, name, None) is fn:
            monkeypatch.setattr(module, name, namespace[name])
    for table in [t for t in vars(sys.modules[fn.__module__]).values() if isinstance(t, dict)]:
        for key in [k for k, item in table.items() if item is fn]:
            monkeypatch.setitem(table, key, namespace[name])
