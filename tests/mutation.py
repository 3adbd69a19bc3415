"""Mutation testing of accum's numeric modules with cosmic-ray, one module group at a time (tests/mutation_groups.toml:
the modules mutated and the tests that must kill the mutants).  Not part of `make test`.  From the repository root:

    .venv/bin/pip install cosmic-ray==8.7.0 coverage==7.17.3
    .venv/bin/python tests/mutation.py GROUP [--work DIR] [--sample N] [--seed S] [--refresh]

The package is copied to DIR/tree as an install lays it out and the tests to DIR/tests (the mutants never touch the
checkout; PYTHONPATH puts the copy before the editable install).  ``--sample N`` keeps N mutants drawn at random
(seeded) from the group's mutants and marks the others skipped, so a group is measured on a sample.  Resumable: a
second run with the same DIR continues where the first stopped (from the unmutated tree, whatever mutant a stopped
run left applied); with ``--refresh`` it first takes the checkout's current tests (refused if the checkout's modules
are not the session's).  Prints cosmic-ray's report (survivors and score).

Each mutant is judged as the whole test list judges it, in two stages (``kill``): first the tests that ran one of
the mutated lines in the unmutated tree (coverage contexts, one per test, recorded once per session by
``record_contexts``), then, if they all pass, the whole list.  A mutant is killed when either fails, so the outcome
is the whole list's; the first stage only finds most kills sooner.  A line no test ran in its own process (only in a
pool worker or a subprocess, or while the test files were imported) goes straight to the whole list.
"""

from __future__ import annotations

import argparse
import difflib
import os
import random
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GROUPS = tomllib.loads((ROOT / "tests" / "mutation_groups.toml").read_text())["group"]
#: bitwise, shift, floor-division and modulo replacements of float arithmetic raise TypeError the first time the line
#: runs: they measure line coverage only, which the kept operators measure too
EXCLUDED = ["core/ReplaceBinaryOperator_.*_(RShift|LShift|BitOr|BitAnd|BitXor|FloorDiv|Mod)$"]
#: committed files some tests read beside the tests folder (the sweep's results, the docs they check): linked, not
#: copied, into the work folder
COMMITTED_DATA = ("probes", "docs", "measurements", "README.md")
#: committed data the package itself reads beside its own files (``accum probe report``'s default sweeps, found from
#: probes/cliargs.py): copied into the tree where the installed layout puts them (copied, not linked: the report
#: names a sweep by its resolved path relative to the package), the tree's path -> the checkout's
TREE_DATA = {Path("accum", "probes", "results"): Path("probes", "results")}


#: how pytest judges a mutant: stop at the first failure, warnings as errors, no cache
PYTEST_OPTIONS = ["-x", "-q", "-p", "no:cacheprovider", "-W", "error"]


def pytest_command(python: str, tests: list[str]) -> list[str]:
    """The pytest call, in a process of its own, that judges the tree in the work folder against ``tests``."""
    return [python, "-m", "pytest", *PYTEST_OPTIONS, *tests]


def config_text(group_name: str, group: dict, python: str, work: Path, timeout: float) -> str:
    """cosmic-ray.toml of one group: its modules in the copied tree, this script's ``--kill`` as the kill command."""
    modules = ", ".join(f'"tree/{m}"' for m in group["modules"])
    kill = f"{python} {Path(__file__).resolve()} {group_name} --work {work} --kill"
    return "\n".join([
        "[cosmic-ray]", f"module-path = [{modules}]", f"timeout = {timeout:.0f}", "excluded-modules = []",
        f'test-command = "{kill}"', "", "[cosmic-ray.distributor]", 'name = "local"', "",
        "[cosmic-ray.filters.operators-filter]", f"exclude-operators = {EXCLUDED!r}".replace("'", '"'), ""])


def mutant_env(work: Path) -> dict[str, str]:
    """The tests' environment: the copied (mutated) tree first on the import path, one thread per library."""
    return {**os.environ, "PYTHONPATH": str(work / "tree"), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1"}


def changed_lines(before: str, after: str) -> set[int]:
    """Line numbers (1-based, in ``before``) that ``after`` replaces or deletes, or next to which it inserts."""
    a, b = before.splitlines(), after.splitlines()
    lines: set[int] = set()
    for tag, i1, i2, _, _ in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            lines.update(range(i1 + 1, max(i2, i1 + 1) + 1))
    return lines


def selected_tests(contexts_by_line: dict[int, list[str]], lines: set[int]) -> list[str] | None:
    """The tests (pytest node ids) that ran any of ``lines``, from coverage's contexts of one file; None when a line
    was run by no test in its own process, or while the test files were imported (context ""): then only the
    whole list can judge it."""
    tests: set[str] = set()
    for line in lines:
        contexts = contexts_by_line.get(line, [])
        if not contexts or "" in contexts:
            return None
        tests.update(contexts)
    return sorted(tests)


class ContextRecorder:
    """pytest plugin: coverage's context is the running test's node id from its setup to its teardown."""

    def __init__(self, cov) -> None:
        self.cov = cov

    def pytest_runtest_setup(self, item) -> None:
        self.cov.switch_context(item.nodeid)

    def pytest_runtest_logfinish(self) -> None:
        self.cov.switch_context("")


def record_contexts(group: dict, work: Path) -> int:
    """Run the group's tests once on the unmutated tree under coverage, one context per test, into
    ``work/contexts.sqlite``; returns pytest's exit code (0: the unmutated tree passes, as it must)."""
    import coverage
    import pytest

    os.chdir(work)
    here = Path(__file__).resolve().parent  # the work folder's tests are imported, not the checkout's
    sys.path[:] = [entry for entry in sys.path if not entry or Path(entry).resolve() != here]
    cov = coverage.Coverage(data_file=str(work / "contexts.sqlite"), include=[str(work / "tree") + "/*"])
    cov.start()
    try:
        code = pytest.main([*PYTEST_OPTIONS, *group["tests"]], plugins=[ContextRecorder(cov)])
    finally:
        cov.stop()
        cov.save()
    return int(code)


def kill(group: dict, work: Path) -> int:
    """Judge the mutant now in ``work/tree``: the tests that ran its lines, then (if they pass) the whole list.
    Returns the failing stage's pytest exit code, or the whole list's (0: the mutant survived)."""
    from coverage import CoverageData

    data = CoverageData(str(work / "contexts.sqlite"))
    data.read()
    selected: set[str] = set()
    for module in group["modules"]:
        before = (work / "pristine" / module).read_text()
        after = (work / "tree" / module).read_text()
        if before != after:
            tests = selected_tests(data.contexts_by_lineno(str(work / "tree" / module)), changed_lines(before, after))
            if tests is None:
                selected = set()
                break
            selected.update(tests)
    python, env = sys.executable, mutant_env(work)
    if selected:
        first = subprocess.run(pytest_command(python, sorted(selected)), cwd=work, env=env)
        if first.returncode in (1, 2, 3):  # failed, interrupted (an import error) or internal error: killed
            return first.returncode
    return subprocess.run(pytest_command(python, group["tests"]), cwd=work, env=env).returncode


def sample_work(db_path: Path, keep: int, seed: int) -> tuple[int, int]:
    """Mark all but ``keep`` pending mutants (drawn with ``seed``) as skipped; returns (kept, total)."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    with use_db(str(db_path), WorkDB.Mode.open) as db:
        pending = sorted(item.job_id for item in db.pending_work_items)
        kept = set(random.Random(seed).sample(pending, min(keep, len(pending))))
        for job in pending:
            if job not in kept:
                db.set_result(job, WorkResult(worker_outcome=WorkerOutcome.SKIPPED, output="not in the sample"))
        return len(kept), len(pending)


def copy_tests(name: str, work: Path, bin_dir: Path) -> float | None:
    """The checkout's tests (and pyproject.toml, the committed data linked) into ``work``, and their coverage
    contexts recorded on the unmutated tree; returns the seconds that took, or None when the tests fail there."""
    shutil.rmtree(work / "tests", ignore_errors=True)
    shutil.copytree(ROOT / "tests", work / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "pyproject.toml", work / "pyproject.toml")  # pytest's markers and warning filters
    for entry in COMMITTED_DATA:
        (work / entry).unlink(missing_ok=True)
        (work / entry).symlink_to(ROOT / entry)
    (work / "contexts.sqlite").unlink(missing_ok=True)
    start = time.monotonic()
    recorded = subprocess.run([str(bin_dir / "python"), __file__, name, "--work", str(work), "--contexts"],
                              env=mutant_env(work))
    if recorded.returncode != 0:
        print(f"{name}: the tests fail on the unmutated tree (pytest exit {recorded.returncode})", file=sys.stderr)
        return None
    return time.monotonic() - start


def copy_tree_data(tree: Path) -> None:
    """Copy ``TREE_DATA`` into ``tree`` (an installed layout), so the package finds its committed data there as it
    does in the checkout.  Only the working tree gets them: the pristine copy stays modules only."""
    for in_tree, in_checkout in TREE_DATA.items():
        shutil.rmtree(tree / in_tree, ignore_errors=True)
        shutil.copytree(ROOT / in_checkout, tree / in_tree)


def checkout_tree(dst: Path) -> Path:
    """The checkout's modules as an install lays them out, under ``dst``."""
    sys.path.insert(0, str(ROOT / "tests"))
    from test_architecture import installed_copy

    return installed_copy(dst)


def differing_modules(a: Path, b: Path) -> list[str]:
    """Relative paths of the .py files that differ between the trees ``a`` and ``b`` (or are in one only)."""
    files_a = {p.relative_to(a) for p in a.rglob("*.py")}
    files_b = {p.relative_to(b) for p in b.rglob("*.py")}
    return sorted(str(f) for f in files_a ^ files_b) + sorted(
        str(f) for f in files_a & files_b if (a / f).read_bytes() != (b / f).read_bytes())


def restore_tree(work: Path) -> None:
    """The session's tree as it was before any mutant: a run stopped while a mutant was applied leaves it in
    ``work/tree`` (cosmic-ray restores a module only when its test command returns), and every later mutant would
    be judged on top of it."""
    shutil.rmtree(work / "tree")
    shutil.copytree(work / "pristine", work / "tree")


def refresh_session(name: str, work: Path, bin_dir: Path) -> bool:
    """Give a started session the checkout's current tests (a resumed session otherwise keeps the copy it started
    with), so the pending mutants are judged by them.  Refused (False) unless the checkout's modules equal the
    session's pristine tree: the mutants' positions hold only for that tree.  Judged mutants keep their outcomes."""
    current = checkout_tree(work / "checkout")
    differ = differing_modules(current, work / "pristine")
    shutil.rmtree(current)
    if differ:
        print(f"{name}: the checkout's modules differ from the session's ({', '.join(differ)}); start a new work "
              "folder", file=sys.stderr)
        return False
    return copy_tests(name, work, bin_dir) is not None


def start_session(name: str, work: Path, bin_dir: Path, sample: int, seed: int) -> bool:
    """A new session in ``work``: the installed tree (and its pristine copy), the tests, their coverage contexts on
    the unmutated tree (which must pass), cosmic-ray's mutants (``sample`` of them when nonzero).  False if the
    unmutated tree fails its tests."""
    group = GROUPS[name]
    for folder in ("tree", "pristine"):
        shutil.rmtree(work / folder, ignore_errors=True)
    checkout_tree(work / "tree")
    shutil.copytree(work / "tree", work / "pristine")
    copy_tree_data(work / "tree")
    baseline = copy_tests(name, work, bin_dir)
    if baseline is None:
        return False
    # a surviving mutant runs its selected tests and then the whole list: the timeout must leave room for both, or
    # slowness would be counted as a kill
    timeout = max(group.get("timeout", 300.0), 4 * baseline)
    print(f"{name}: the tests take {baseline:.0f} s unmutated (with coverage); timeout {timeout:.0f} s", file=sys.stderr)
    (work / "cosmic-ray.toml").write_text(config_text(name, group, str(bin_dir / "python"), work, timeout))
    for command in (["cosmic-ray", "init", "cosmic-ray.toml", "session.sqlite"],
                    ["cr-filter-operators", "session.sqlite", "cosmic-ray.toml"]):
        subprocess.run([str(bin_dir / command[0]), *command[1:]], cwd=work, check=True)
    if sample:
        kept, total = sample_work(work / "session.sqlite", sample, seed)
        print(f"{name}: {kept} of {total} mutants sampled (seed {seed})", file=sys.stderr)
    return True


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("group", choices=sorted(GROUPS))
    p.add_argument("--work", type=Path, default=None, help="work folder (default /tmp/accum-mutation-GROUP)")
    p.add_argument("--sample", type=int, default=0, help="mutants kept at random (default 0: every mutant)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kill", action="store_true", help="(cosmic-ray's test command) judge the mutant in WORK/tree")
    p.add_argument("--contexts", action="store_true", help="(internal) record the tests' coverage contexts")
    p.add_argument("--refresh", action="store_true",
                   help="a started session's pending mutants are judged by the checkout's current tests")
    args = p.parse_args(argv)
    group = GROUPS[args.group]
    work = (args.work or Path(f"/tmp/accum-mutation-{args.group}")).resolve()
    if args.kill:
        return kill(group, work)
    if args.contexts:
        return record_contexts(group, work)
    bin_dir = ROOT / ".venv" / "bin"
    db = work / "session.sqlite"
    running = running_exec(work)
    if running is not None:
        print(f"{args.group}: cosmic-ray exec (pid {running}) still judges this session's mutants in {work}: stop it "
              "first (killing this script leaves it running)", file=sys.stderr)
        return 1
    resumed = db.exists()
    if not resumed and not start_session(args.group, work, bin_dir, args.sample, args.seed):
        return 1
    if resumed:
        restore_tree(work)
        copy_tree_data(work / "tree")
        if args.refresh and not refresh_session(args.group, work, bin_dir):
            return 1
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    execution = subprocess.Popen([str(bin_dir / "cosmic-ray"), "exec", "cosmic-ray.toml", "session.sqlite"], cwd=work,
                                 env=env)
    (work / EXEC_PID).write_text(str(execution.pid))
    if execution.wait() != 0:
        raise subprocess.CalledProcessError(execution.returncode, execution.args)
    (work / EXEC_PID).unlink()
    print(summary(db))
    return 0


#: the pid of the session's cosmic-ray exec while it runs (it outlives a killed harness: a second exec on the same
#: tree would apply its mutants on top of the first's)
EXEC_PID = "exec.pid"


def running_exec(work: Path) -> int | None:
    """The pid in ``work``'s EXEC_PID file when that process is alive, else None."""
    try:
        pid = int((work / EXEC_PID).read_text())
        os.kill(pid, 0)
    except (FileNotFoundError, ValueError, ProcessLookupError):
        return None
    return pid


def summary(db_path: Path) -> str:
    """The sampled mutants' outcomes: killed (how many by the timeout), survived (each listed by module, line,
    operator), incompetent (the mutant did not run: an exception in the worker) and pending; skipped ones (outside
    the sample) are not counted."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome

    counts = {"killed": 0, "survived": 0, "incompetent": 0, "timeout": 0}
    survivors = []
    with use_db(str(db_path), WorkDB.Mode.open) as db:
        for item, result in db.completed_work_items:
            if result.worker_outcome == WorkerOutcome.SKIPPED:
                continue
            if result.worker_outcome != WorkerOutcome.NORMAL or result.test_outcome == TestOutcome.INCOMPETENT:
                counts["incompetent"] += 1
            elif result.test_outcome == TestOutcome.SURVIVED:
                counts["survived"] += 1
                m = item.mutations[0]
                survivors.append(f"  {m.module_path}:{m.start_pos[0]} {m.operator_name} #{m.occurrence}")
            else:
                counts["killed"] += 1
                counts["timeout"] += result.output == "timeout"
        pending = sum(1 for _ in db.pending_work_items)
    ran = counts["killed"] + counts["survived"]
    score = f"{counts['killed'] / ran:.1%}" if ran else "n/a"
    return "\n".join([f"killed {counts['killed']} of {ran} mutants that ran ({score}; {counts['timeout']} of the kills "
                      f"by the timeout); incompetent "
                      f"{counts['incompetent']}; pending {pending}", "survivors:", *survivors])


if __name__ == "__main__":
    sys.exit(main())
