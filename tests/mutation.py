"""Mutation testing of accum's numeric modules with cosmic-ray, one module group at a time (tests/mutation_groups.toml:
the modules mutated and the tests that must kill the mutants).  Not part of `make test`.  From the repository root:

    .venv/bin/pip install cosmic-ray==8.7.0
    .venv/bin/python tests/mutation.py GROUP [--work DIR] [--sample N] [--seed S]

The package is copied to DIR/tree as an install lays it out and the tests to DIR/tests (the mutants never touch the
checkout; PYTHONPATH puts the copy before the editable install).  ``--sample N`` keeps N mutants drawn at random
(seeded) from the group's mutants and marks the others skipped, so a group is measured on a sample.  Resumable: a
second run with the same DIR continues where the first stopped.  Prints cosmic-ray's report (survivors and score).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GROUPS = tomllib.loads((ROOT / "tests" / "mutation_groups.toml").read_text())["group"]
#: bitwise, shift, floor-division and modulo replacements of float arithmetic raise TypeError the first time the line
#: runs: they measure line coverage only, which the kept operators measure too
EXCLUDED = ["core/ReplaceBinaryOperator_.*_(RShift|LShift|BitOr|BitAnd|BitXor|FloorDiv|Mod)$"]


def config_text(group: dict, python: str) -> str:
    """cosmic-ray.toml of one group: its modules in the copied tree, its tests as the kill command."""
    modules = ", ".join(f'"tree/{m}"' for m in group["modules"])
    tests = " ".join(group["tests"])
    return "\n".join([
        "[cosmic-ray]", f"module-path = [{modules}]", f"timeout = {group.get('timeout', 300.0)}", "excluded-modules = []",
        f'test-command = "env PYTHONPATH=tree OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 {python} '
        f'-m pytest -x -q -p no:cacheprovider -W error {tests}"', "", "[cosmic-ray.distributor]", 'name = "local"', "",
        "[cosmic-ray.filters.operators-filter]", f"exclude-operators = {EXCLUDED!r}".replace("'", '"'), ""])


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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("group", choices=sorted(GROUPS))
    p.add_argument("--work", type=Path, default=None, help="work folder (default /tmp/accum-mutation-GROUP)")
    p.add_argument("--sample", type=int, default=0, help="mutants kept at random (default 0: every mutant)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    group, work = GROUPS[args.group], args.work or Path(f"/tmp/accum-mutation-{args.group}")
    bin_dir = ROOT / ".venv" / "bin"
    db = work / "session.sqlite"
    if not db.exists():
        shutil.rmtree(work / "tree", ignore_errors=True)
        shutil.rmtree(work / "tests", ignore_errors=True)
        sys.path.insert(0, str(ROOT / "tests"))
        from test_architecture import installed_copy

        installed_copy(work / "tree")
        shutil.copytree(ROOT / "tests", work / "tests", ignore=shutil.ignore_patterns("__pycache__"))
        (work / "cosmic-ray.toml").write_text(config_text(group, str(bin_dir / "python")))
        for command in (["cosmic-ray", "init", "cosmic-ray.toml", "session.sqlite"],
                        ["cr-filter-operators", "session.sqlite", "cosmic-ray.toml"]):
            subprocess.run([str(bin_dir / command[0]), *command[1:]], cwd=work, check=True)
        if args.sample:
            kept, total = sample_work(db, args.sample, args.seed)
            print(f"{args.group}: {kept} of {total} mutants sampled (seed {args.seed})", file=sys.stderr)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([str(bin_dir / "cosmic-ray"), "exec", "cosmic-ray.toml", "session.sqlite"], cwd=work, check=True,
                   env=env)
    print(summary(db))
    return 0


def summary(db_path: Path) -> str:
    """The sampled mutants' outcomes: killed, survived (each listed by module, line, operator), incompetent (the
    mutant did not run: an exception in the worker) and pending; skipped ones (outside the sample) are not counted."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome

    counts = {"killed": 0, "survived": 0, "incompetent": 0}
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
        pending = sum(1 for _ in db.pending_work_items)
    ran = counts["killed"] + counts["survived"]
    score = f"{counts['killed'] / ran:.1%}" if ran else "n/a"
    return "\n".join([f"killed {counts['killed']} of {ran} mutants that ran ({score}); incompetent "
                      f"{counts['incompetent']}; pending {pending}", "survivors:", *survivors])


if __name__ == "__main__":
    sys.exit(main())
