"""Grid sweeps: validation before any job, resumable atomic results, worker-count-independent seeds."""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import pickle
import signal
import subprocess
import sys
import time
from dataclasses import replace

import dask
import distributed
import numpy as np
import pytest

from accum import cli as accum_cli
from accum.runtime import THREAD_VARIABLES
from accum.simulations import cli, grid as grids, identity, runner, sweep
from accum.simulations.measure import measure
from accum.simulations.params import ParamError
from accum.simulations.results import ResultError

HEAD = 'quantity = "coherence"\nroot_seed = 11\nseeds = 2\noutput = "out"'
OPTIONS = "steps = 4\nsamples = 8"
FAMILIES = """
[[family]]
name = "householder"
dim = [4, 6]
beta = [1.0, 2.0]

[[family]]
name = "so2-accumulated"
dim = 4
sigma = [0.3, 0.6]
"""
N_JOBS = (2 * 2 + 2) * 2

TEST_FAMILIES = '''
"""Families for the sweep tests: one that stalls (to kill a sweep mid-way) and one that checks thread variables."""
import os
import time
from dataclasses import dataclass
from pathlib import Path

from accum.simulations.steps import AngleSteps
from accum.runtime import THREAD_VARIABLES


@dataclass(frozen=True)
class Stall:
    """Waits forever once STALL_AFTER result files are in STALL_DIR (both environment variables, when set)."""
    dim: int = 2

    def sample(self, rng, n_steps, batch):
        if "STALL_DIR" in os.environ:
            limit = int(os.environ["STALL_AFTER"])
            while len([p for p in Path(os.environ["STALL_DIR"]).glob("*.json") if p.name != "index.json"]) >= limit:
                time.sleep(0.01)
        return AngleSteps(rng.normal(0.0, 0.5, (batch, n_steps, self.dim // 2)))


@dataclass(frozen=True)
class ThreadProbe:
    dim: int = 2

    def sample(self, rng, n_steps, batch):
        wrong = {v: os.environ.get(v) for v in THREAD_VARIABLES if os.environ.get(v) != "1"}
        if wrong and (n_steps, batch) != (3, 2):  # the first-sample check (3 steps, 2 sequences) also runs in the driver
            raise RuntimeError(f"thread variables not 1 in this process: {wrong}")
        return AngleSteps(rng.normal(0.0, 0.5, (batch, n_steps, self.dim // 2)))
'''


def grid_text(families: str = FAMILIES, options: str = OPTIONS, head: str = HEAD) -> str:
    return f"{head}\n\n[options]\n{options}\n{families}"


def write_grid(directory: pathlib.Path, text: str) -> pathlib.Path:
    path = directory / "grid.toml"
    path.write_text(text)
    return path


def result_files(output: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for p in output.glob("*.json") if p.name != "index.json")


def result_sections(output: pathlib.Path) -> dict[str, str]:
    """{file name: the record's result section as canonical JSON text} (bit-level comparison)."""
    return {p.name: identity.canonical_json(json.loads(p.read_text())["result"]) for p in result_files(output)}


@pytest.fixture(scope="module")
def family_dir(tmp_path_factory) -> pathlib.Path:
    directory = tmp_path_factory.mktemp("families")
    (directory / "sweep_test_families.py").write_text(TEST_FAMILIES)
    return directory


def test_plan_expands_the_product_in_order_with_unique_hashes(tmp_path):
    jobs = sweep.plan(sweep.load_grid(write_grid(tmp_path, grid_text())))
    assert len(jobs) == N_JOBS == len({j.hash for j in jobs})
    assert [(j.params, j.replicate) for j in jobs[:3]] == [({"dim": 4, "beta": 1.0}, 0), ({"dim": 4, "beta": 1.0}, 1),
                                                           ({"dim": 4, "beta": 2.0}, 0)]
    assert jobs[-1].family == "so2-accumulated" and jobs[-1].params == {"dim": 4, "sigma": 0.6}
    assert jobs[0].key["config"]["params"]["w"] == "sphere"          # resolved defaults are part of the identity
    assert jobs[0].options == {"steps": 4, "samples": 8, "device": "numpy"}


def test_seed_is_the_spawned_child_of_the_job_config_and_ignores_the_rest_of_the_grid(tmp_path):
    jobs = sweep.plan(sweep.load_grid(write_grid(tmp_path, grid_text())))
    for job in jobs[:4]:
        parent = np.random.SeedSequence(11, spawn_key=identity.config_words(job.key["config"]))
        words = parent.spawn(job.replicate + 1)[job.replicate].generate_state(4, np.uint32)
        assert job.seed == sum(int(w) << (32 * i) for i, w in enumerate(words))
    bigger = grid_text(FAMILIES.replace("dim = [4, 6]", "dim = [8, 4, 6]"),
                       head=HEAD.replace("seeds = 2", "seeds = [2, 1, 0]"))
    more = {j.hash: j.seed for j in sweep.plan(sweep.load_grid(write_grid(tmp_path, bigger)))}
    assert len(more) == (3 * 2 + 2) * 3
    assert all(more[j.hash] == j.seed for j in jobs)


def test_code_version_is_in_the_file_key_but_not_in_the_seed(tmp_path):
    job = sweep.plan(sweep.load_grid(write_grid(tmp_path, grid_text())))[0]
    assert job.key["code"] == identity.code_identity(job.modules)
    other = {**job.key["code"], "sources": "0" * 64}
    key = identity.job_key(job.key["config"], 11, job.replicate, other)
    assert identity.digest(key) != job.hash and key["seed"] == job.seed
    names = set(identity.measure_modules())
    assert {f"accum.simulations.{m}" for m in ("measure", "estimators", "families", "params", "steps")} <= names
    assert not names & {"accum.simulations.sweep", "accum.simulations.cli"}
    with pytest.raises(RuntimeError, match="differs"):                # a worker with other code refuses the job
        sweep.run_job(replace(job, key={**job.key, "code": other}))


def test_one_and_three_workers_give_bit_identical_results_from_single_threaded_workers(tmp_path, monkeypatch,
                                                                                      family_dir):
    monkeypatch.syspath_prepend(str(family_dir))
    probe = '\n[[family]]\nname = "sweep_test_families:ThreadProbe"\ndim = [2, 4]\n'
    grid = sweep.load_grid(write_grid(tmp_path, grid_text(FAMILIES + probe)))
    for name in THREAD_VARIABLES:                                # in-process: the probe needs them set here
        monkeypatch.setenv(name, "1")
    one = sweep.run_sweep(grid, workers=1)
    for name in THREAD_VARIABLES:                                # the pool must set them for its workers
        monkeypatch.delenv(name)
    three = sweep.run_sweep(replace(grid, output=tmp_path / "three"), workers=3)
    assert one.failed == three.failed == ()
    assert one.computed == three.computed == N_JOBS + 4
    assert result_sections(grid.output) == result_sections(tmp_path / "three")
    assert not set(THREAD_VARIABLES) & set(os.environ)           # and restore the parent's environment


def test_single_thread_env_sets_one_thread_and_restores_the_environment(monkeypatch):
    """Workers run one thread whatever the parent's count (``accum --threads 4`` sets the variables to 4 in the
    parent); afterwards each variable is as it was, set or not."""
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    with runner.single_thread_env():
        assert all(os.environ[name] == "1" for name in THREAD_VARIABLES)
    assert os.environ["OMP_NUM_THREADS"] == "3" and "MKL_NUM_THREADS" not in os.environ


def test_interrupted_sweep_keeps_finished_jobs_and_restart_redoes_none(tmp_path, monkeypatch):
    grid = sweep.load_grid(write_grid(tmp_path, grid_text()))
    calls = []

    def interrupted_after_five(*args, **kwargs):
        if len(calls) == 5:
            raise KeyboardInterrupt
        calls.append(args)
        return measure(*args, **kwargs)

    monkeypatch.setattr(sweep, "measure", interrupted_after_five)
    with pytest.raises(KeyboardInterrupt):
        sweep.run_sweep(grid)
    finished = result_files(grid.output)
    assert len(finished) == 5
    index = json.loads((grid.output / "index.json").read_text())
    assert [j["status"] for j in index["jobs"]].count("done") == 5
    stamps = {p: p.stat().st_mtime_ns for p in finished}

    calls.clear()
    monkeypatch.setattr(sweep, "measure", lambda *a, **k: calls.append(a) or measure(*a, **k))
    summary = sweep.run_sweep(grid)
    assert (summary.skipped, summary.computed, len(calls)) == (5, N_JOBS - 5, N_JOBS - 5)
    assert {p: p.stat().st_mtime_ns for p in finished} == stamps
    assert sweep.run_sweep(grid).computed == 0


def test_killed_sweep_leaves_only_complete_files_and_restart_finishes_it(tmp_path, monkeypatch, family_dir):
    stall = '[[family]]\nname = "sweep_test_families:Stall"\ndim = [2, 4]\n'
    head = HEAD.replace("seeds = 2", "seeds = 8")
    path = write_grid(tmp_path, grid_text(stall, options="steps = 3\nsamples = 2", head=head))
    output = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(family_dir), os.environ.get("PYTHONPATH")])),
           "STALL_DIR": str(output), "STALL_AFTER": "3"}                # the 4th job waits until it is killed
    code = "import sys; from accum.simulations.sweep import load_grid, run_sweep; run_sweep(load_grid(sys.argv[1]))"
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)], env=env)
    deadline = time.monotonic() + 300                                    # a guard against a hang, not a timing
    while len(result_files(output)) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    running = proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    survivors = result_files(output)
    assert running and len(survivors) == 3, "the sweep should have been killed while its 4th job waited"
    for p in survivors:                                                # atomic writes: no partial file is visible
        sweep.read_job_record(p, p.stem)
    stamps = {p: p.stat().st_mtime_ns for p in survivors}
    monkeypatch.syspath_prepend(str(family_dir))
    summary = sweep.run_sweep(sweep.load_grid(path))
    assert (summary.skipped, summary.computed) == (len(survivors), 16 - len(survivors))
    assert {p: p.stat().st_mtime_ns for p in survivors} == stamps
    assert len(result_files(output)) == 16


def pickle_touching(path: pathlib.Path) -> bytes:
    """A pickle that creates ``path`` when unpickled."""
    class Payload:
        def __reduce__(self):
            return pathlib.Path.touch, (path,)
    return pickle.dumps(Payload())


def test_corrupt_or_foreign_results_are_recomputed_and_never_read(tmp_path):
    grid = sweep.load_grid(write_grid(tmp_path, grid_text()))
    sweep.run_sweep(grid)
    before = result_sections(grid.output)
    truncated, empty, foreign, pickled = result_files(grid.output)[:4]
    truncated.write_bytes(truncated.read_bytes()[: truncated.stat().st_size // 2])
    empty.write_bytes(b"")
    foreign.write_bytes(result_files(grid.output)[5].read_bytes())    # a valid record of another job
    check = tmp_path / "payload-works"
    pickle.loads(pickle_touching(check))
    assert check.exists()
    marker = tmp_path / "unpickled"
    pickled.write_bytes(pickle_touching(marker))

    bad = {p.stem for p in (truncated, empty, foreign, pickled)}
    for p in (truncated, empty, foreign, pickled):
        with pytest.raises(ResultError):
            sweep.read_job_record(p, p.stem)
    loaded = sweep.load_results(grid)
    assert len(loaded) == N_JOBS - 4 and not bad & set(loaded)
    summary = sweep.run_sweep(grid)
    assert (summary.skipped, summary.computed) == (N_JOBS - 4, 4)
    assert result_sections(grid.output) == before
    assert not marker.exists()


def test_failed_jobs_are_reported_and_retried(tmp_path, monkeypatch):
    grid = sweep.load_grid(write_grid(tmp_path, grid_text()))

    def fails_for_beta_2(quantity, family, params, options, seed):
        if params.get("beta") == 2.0:
            raise FloatingPointError("boom")
        return measure(quantity, family, params, options, seed=seed)

    monkeypatch.setattr(sweep, "measure", fails_for_beta_2)
    summary = sweep.run_sweep(grid)
    assert (summary.computed, len(summary.failed)) == (N_JOBS - 4, 4)
    assert all("beta=2.0" in where and "boom" in error for where, error in summary.failed)
    statuses = [j["status"] for j in json.loads((grid.output / "index.json").read_text())["jobs"]]
    assert sum(s.startswith("failed: FloatingPointError") for s in statuses) == 4
    monkeypatch.setattr(sweep, "measure", measure)
    assert sweep.run_sweep(grid).computed == 4


BAD_GRIDS = {
    "unknown family": (grid_text(FAMILIES.replace('"so2-accumulated"', '"so3-accumulated"')),
                       ["family[1] so3-accumulated", "unknown family 'so3-accumulated'"]),
    "parameter out of range": (grid_text(FAMILIES.replace("beta = [1.0, 2.0]", "beta = [1.0, 2.5]")),
                               ["family[0] householder (dim=4, beta=2.5)", "'beta' = 2.5 is out of range"]),
    "option out of range": (grid_text(options="steps = 4\nsamples = [8, 1]"), ["samples=1", "'samples' = 1"]),
    "empty axis": (grid_text(FAMILIES.replace("dim = [4, 6]", "dim = []")), ["family[0].dim: empty axis"]),
    "unknown key": (grid_text(head=HEAD + "\nsedes = 3"), ["unknown key 'sedes'"]),
    "unknown family parameter": (grid_text(FAMILIES.replace("beta =", "betta =")), ["family[0] householder", "betta"]),
    "unknown option": (grid_text(options="stepz = 4"), ["options (stepz=4)", "stepz"]),
    "unknown quantity": (grid_text(head=HEAD.replace("coherence", "coherense")), ["quantity", "'coherense'"]),
    "no seeds": (grid_text(head=HEAD.replace("seeds = 2", "seeds = 0")), ["seeds"]),
    "empty seed list": (grid_text(head=HEAD.replace("seeds = 2", "seeds = []")), ["seeds"]),
    "missing output": (grid_text(head=HEAD.replace('output = "out"', "")), ["missing key 'output'"]),
    "repeated value": (grid_text(FAMILIES.replace("beta = [1.0, 2.0]", "beta = [1, 1.0]")),
                       ["family[0].beta", "repeated"]),
    "same job twice": (grid_text(FAMILIES + '\n[[family]]\nname = "so2-accumulated"\nsigma = 0.3\ndim = 4\n'),
                       ["family[2] so2-accumulated", "same job"]),
    "boolean value": (grid_text(FAMILIES.replace("dim = 4", "dim = true")), ["family[1].dim", "True"]),
    "not TOML": ("quantity = coherence\n", ["not a valid TOML file"]),
    "quantity is a list": (grid_text(head=HEAD.replace('"coherence"', '["coherence"]')),
                           ["quantity: expected one of", "['coherence']"]),
    "quantity is a table": (grid_text(head=HEAD.replace('"coherence"', '{ name = "coherence" }')), ["quantity"]),
    "root_seed is a string": (grid_text(head=HEAD.replace("root_seed = 11", 'root_seed = "11"')),
                              ["root_seed: expected an integer >= 0", "'11'"]),
    "root_seed is a float": (grid_text(head=HEAD.replace("root_seed = 11", "root_seed = 11.0")), ["root_seed", "11.0"]),
    "root_seed is a boolean": (grid_text(head=HEAD.replace("root_seed = 11", "root_seed = true")),
                               ["root_seed", "True"]),
    "output is a number": (grid_text(head=HEAD.replace('output = "out"', "output = 5")), ["output: expected", "5"]),
    "output is blank": (grid_text(head=HEAD.replace('output = "out"', 'output = " "')), ["output: expected"]),
    "seeds is a string": (grid_text(head=HEAD.replace("seeds = 2", 'seeds = "2"')), ["seeds: expected", "'2'"]),
    "seeds is a float": (grid_text(head=HEAD.replace("seeds = 2", "seeds = 2.0")), ["seeds: expected", "2.0"]),
    "seeds is a boolean": (grid_text(head=HEAD.replace("seeds = 2", "seeds = true")), ["seeds: expected", "True"]),
    "seed count huge": (grid_text(head=HEAD.replace("seeds = 2", "seeds = 1000000000000")),
                        ["seeds: expected a count in [1, 100000]", "1000000000000"]),
    "seed count one too many": (grid_text(head=HEAD.replace("seeds = 2", "seeds = 100001")),
                                ["seeds: expected a count in [1, 100000]", "100001"]),
    "seed list one too long": (grid_text(head=HEAD.replace("seeds = 2", f"seeds = {list(range(100001))}")),
                               ["seeds: expected", "at most 100000", "a list of 100001"]),
    "user family refused by its first sample": (
        grid_text("[[family]]\nname = \"sweep_test_families:ThreadProbe\"\ndim = 3\n"),
        ["family[0] sweep_test_families:ThreadProbe (dim=3)", "AngleSteps need an even dim"]),
    "too many jobs": (grid_text(options="steps = 4\nsamples = [8, 16]", head=HEAD.replace("seeds = 2", "seeds = 100000")),
                      ["1200000 jobs", "at most 1000000"]),
}


@pytest.mark.parametrize("case", sorted(BAD_GRIDS))
def test_bad_grid_fails_before_any_job_with_a_message_naming_the_entry(case, tmp_path, monkeypatch, family_dir):
    text, fragments = BAD_GRIDS[case]
    monkeypatch.syspath_prepend(str(family_dir))

    def no_job_may_run(*args, **kwargs):
        raise AssertionError("a job ran")

    monkeypatch.setattr(sweep, "measure", no_job_may_run)
    path = write_grid(tmp_path, text)
    with pytest.raises(grids.GridError) as err:
        sweep.run_sweep(sweep.load_grid(path))
    message = str(err.value)
    assert message.startswith(str(path)) and all(f in message for f in fragments), message
    assert not (tmp_path / "out").exists()


def test_limits_are_inclusive_and_counted_without_expanding(tmp_path):
    families = '[[family]]\nname = "householder"\ndim = [4, 6, 8, 10, 12]\n'
    head = HEAD.replace("seeds = 2", f"seeds = {grids.MAX_REPLICATES}")
    grid = sweep.load_grid(write_grid(tmp_path, grid_text(families, "steps = 4\nsamples = [8, 16]", head)))
    assert len(grid.replicates) == grids.MAX_REPLICATES == 100_000
    assert grids.job_count(grid.families, grid.options, grid.replicates) == grids.MAX_JOBS == 1_000_000
    small = sweep.load_grid(write_grid(tmp_path, grid_text()))
    assert grids.job_count(small.families, small.options, small.replicates) == len(sweep.plan(small)) == N_JOBS


def test_dask_local_cluster_gives_the_same_results(tmp_path):
    grid = sweep.load_grid(write_grid(tmp_path, grid_text()))
    sweep.run_sweep(grid)
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                  dashboard_address=None) as cluster:
        summary = sweep.run_sweep(replace(grid, output=tmp_path / "dask"), scheduler=cluster.scheduler_address)
    assert (summary.computed, summary.failed) == (N_JOBS, ())
    assert result_sections(tmp_path / "dask") == result_sections(grid.output)


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    cli.add_sweep(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["sweep", *argv])
    return args.run(args)


def test_command_line(tmp_path, capsys):
    assert cli.add_sweep in cli.SUBCOMMANDS
    path = str(write_grid(tmp_path, grid_text()))
    assert run_cli([path, "--dry-run"]) == 0
    assert json.loads(capsys.readouterr().out) == {"jobs": N_JOBS, "done": 0, "pending": N_JOBS,
                                                   "output": str(tmp_path / "out")}
    assert not (tmp_path / "out").exists()
    elsewhere = tmp_path / "elsewhere"
    assert run_cli([path, "--workers", "1", "--no-progress", "--out", str(elsewhere)]) == 0
    assert json.loads(capsys.readouterr().out)["computed"] == N_JOBS
    assert len(result_files(elsewhere)) == N_JOBS
    index = json.loads((elsewhere / "index.json").read_text())
    assert index["schema"] == sweep.INDEX_SCHEMA and {j["file"] for j in index["jobs"]} == {
        p.name for p in result_files(elsewhere)}
    assert all(j["status"] == "done" and j["config"]["quantity"] == "coherence" for j in index["jobs"])
    with pytest.raises(ParamError, match="not both"):
        run_cli([path, "--workers", "2", "--scheduler", "tcp://127.0.0.1:1"])
    assert issubclass(grids.GridError, ParamError)                    # `accum` prints it on one line, exit 2


def accum_sweep(argv: list[str], capsys) -> tuple[int, str]:
    """``accum sweep ARGV`` through the real entry point (``accum.cli.main``): (exit status, stderr)."""
    status = accum_cli.main(["sweep", *argv])
    return status, capsys.readouterr().err


def assert_refused(status: int, err: str, *fragments: str) -> None:
    """Exit status 2 and one error line, no traceback, containing every fragment."""
    assert status == 2, err
    assert err.startswith("accum sweep: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert all(f in err for f in fragments), err


# argv and message fragments; {grid} is a good grid, {missing} no file (so the option is checked before the grid
# is read), {file} a regular file, {dir} a directory, {listq} a grid with quantity = ["coherence"], {badout} a grid
# whose output lies below {file}, {badbeta} a grid with beta = 2.5 (found when the jobs are planned).
REFUSED_COMMANDS = {
    "scheduler not an address": (["{grid}", "--scheduler", "notaurl"], ["--scheduler 'notaurl'", "SCHEME://HOST:PORT"]),
    "scheduler empty": (["{grid}", "--scheduler", ""], ["--scheduler ''"]),
    "scheduler checked before the grid": (["{missing}", "--scheduler", "notaurl"], ["--scheduler"]),
    "scheduler without port": (["{grid}", "--scheduler", "tcp://127.0.0.1"], ["--scheduler"]),
    "scheduler without scheme": (["{grid}", "--scheduler", "127.0.0.1:8786"], ["--scheduler"]),
    "scheduler unknown scheme": (["{grid}", "--scheduler", "http://127.0.0.1:8786"], ["--scheduler", "tcp, tls"]),
    "scheduler port 0": (["{grid}", "--scheduler", "tcp://127.0.0.1:0"], ["--scheduler", "[1, 65535]"]),
    "scheduler port too big": (["{grid}", "--scheduler", "tcp://127.0.0.1:65536"], ["--scheduler", "[1, 65535]"]),
    "scheduler with a path": (["{grid}", "--scheduler", "tcp://127.0.0.1:8786/x"], ["--scheduler"]),
    "no workers, dry run": (["{grid}", "--dry-run", "--workers", "0"], ["--workers: expected an integer in [1, 1024], got 0"]),
    "no workers": (["{grid}", "--workers", "0", "--no-progress"], ["--workers", "[1, 1024]"]),
    "too many workers": (["{grid}", "--workers", "1025", "--dry-run"], ["--workers", "[1, 1024]", "1025"]),
    "workers checked before the grid": (["{missing}", "--workers", "-1", "--dry-run"], ["--workers", "-1"]),
    "workers checked before the scheduler": (["{grid}", "--workers", "0", "--scheduler", "notaurl"], ["--workers"]),
    "grid is a directory": (["{dir}"], ["{dir}: is a directory"]),
    "quantity is a list": (["{listq}", "--dry-run"], ["{listq}: quantity"]),
    "out is a file": (["{grid}", "--workers", "1", "--no-progress", "--out", "{file}"],
                      ["--out {file}: exists and is not a directory"]),
    "out is a file, dry run": (["{grid}", "--dry-run", "--out", "{file}"], ["--out {file}"]),
    "out below a file": (["{grid}", "--workers", "1", "--no-progress", "--out", "{file}/x"],
                         ["--out {file}/x", "not a directory"]),
    "out below a file, dry run": (["{grid}", "--dry-run", "--out", "{file}/x"], ["--out {file}/x"]),
    "out empty": (["{grid}", "--workers", "1", "--no-progress", "--out", ""], ["--out: empty path"]),
    "out empty, dry run": (["{grid}", "--dry-run", "--out", ""], ["--out: empty path"]),
    "grid output below a file": (["{badout}", "--workers", "1", "--no-progress"], ["output (in {badout}) ", "afile/sub"]),
    "grid output below a file, dry run": (["{badout}", "--dry-run"], ["output (in {badout}) "]),
    "parameter out of range": (["{badbeta}", "--workers", "1", "--no-progress"], ["{badbeta}: family[0]", "'beta'"]),
}


@pytest.mark.parametrize("case", sorted(REFUSED_COMMANDS))
def test_bad_command_line_exits_2_on_one_line_before_any_job(case, tmp_path, monkeypatch, capsys):
    argv, fragments = REFUSED_COMMANDS[case]
    afile = tmp_path / "afile"
    afile.write_text("keep")
    (tmp_path / "adir").mkdir()
    (tmp_path / "listq.toml").write_text(grid_text(head=HEAD.replace('"coherence"', '["coherence"]')))
    (tmp_path / "badout.toml").write_text(grid_text(head=HEAD.replace('"out"', '"afile/sub"')))
    (tmp_path / "badbeta.toml").write_text(grid_text(FAMILIES.replace("beta = [1.0, 2.0]", "beta = [1.0, 2.5]")))
    names = {"grid": write_grid(tmp_path, grid_text()), "missing": tmp_path / "missing.toml", "file": afile,
             "dir": tmp_path / "adir", "listq": tmp_path / "listq.toml", "badout": tmp_path / "badout.toml",
             "badbeta": tmp_path / "badbeta.toml"}
    calls = []
    monkeypatch.setattr(sweep, "measure", lambda *args, **kwargs: calls.append(args))
    status, err = accum_sweep([a.format(**names) for a in argv], capsys)
    assert_refused(status, err, *(f.format(**names) for f in fragments))
    assert not calls and not (tmp_path / "out").exists() and afile.read_text() == "keep"


@pytest.mark.parametrize("run", [["--workers", "1", "--no-progress"], ["--dry-run"]], ids=["run", "dry run"])
def test_uncreatable_output_directory_fails_before_any_job(run, tmp_path, monkeypatch, capsys):
    if not pathlib.Path("/proc/self").is_dir():
        pytest.skip("needs Linux /proc, where no directory can be created")
    calls = []
    monkeypatch.setattr(sweep, "measure", lambda *args, **kwargs: calls.append(args))
    path = str(write_grid(tmp_path, grid_text()))
    status, err = accum_sweep([path, *run, "--out", "/proc/sweepx"], capsys)
    assert_refused(status, err, "--out /proc/sweepx")
    grid = write_grid(tmp_path, grid_text(head=HEAD.replace('"out"', '"/proc/sweepx"')))
    status, err = accum_sweep([str(grid), *run], capsys)        # the grid's own output, as SWEEP.md says
    assert_refused(status, err, f"output (in {grid}) /proc/sweepx")
    assert not calls


def test_output_directory_is_created_and_checked_before_the_first_job(tmp_path, monkeypatch, capsys):
    grid = sweep.load_grid(write_grid(tmp_path, grid_text()))
    seen = []
    monkeypatch.setattr(sweep, "measure", lambda *args, **kwargs: seen.append(grid.output.is_dir()) or {})
    sweep.run_sweep(grid)
    assert seen and all(seen)
    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: real_access(p, mode) and pathlib.Path(p) != locked)
    seen.clear()
    status, err = accum_sweep([grid.source, "--workers", "1", "--no-progress", "--out", str(locked)], capsys)
    assert_refused(status, err, f"--out {locked}: the directory is not writable")
    assert not seen


@pytest.mark.parametrize("slot", ["index.json", "result"])
@pytest.mark.parametrize("run", [["--workers", "1", "--no-progress"], ["--dry-run"]], ids=["run", "dry run"])
def test_a_folder_where_a_result_belongs_is_refused_before_any_job(slot, run, tmp_path, monkeypatch, capsys):
    """A folder standing where index.json or a job's result file goes: the write (an os.replace) would fail only after
    every job had computed, so the sweep is refused first, naming the output and the file."""
    path = write_grid(tmp_path, grid_text())
    grid = sweep.load_grid(path)
    name = "index.json" if slot == "index.json" else sweep.result_path(grid.output, sweep.plan(grid)[3]).name
    (grid.output / name).mkdir(parents=True)
    calls = []
    monkeypatch.setattr(sweep, "measure", lambda *args, **kwargs: calls.append(args))
    status, err = accum_sweep([str(path), *run], capsys)
    assert_refused(status, err, f"output (in {path}) {grid.output}: {name} is a folder", "move it away")
    assert not calls and sorted(p.name for p in grid.output.iterdir()) == [name]


def test_run_sweep_checks_workers_and_scheduler(tmp_path):
    grid = sweep.load_grid(write_grid(tmp_path, grid_text()))
    for kwargs, fragment in (({"workers": 0}, r"workers: expected an integer in \[1, 1024\]"), ({"workers": True}, "workers"),
                             ({"scheduler": ""}, "scheduler ''"), ({"scheduler": "tcp://:8786"}, "scheduler")):
        with pytest.raises(ParamError, match=fragment):
            sweep.run_sweep(grid, **kwargs)
    assert not grid.output.exists()
    assert runner.check_scheduler("tcp://[::1]:8786", "--scheduler") == "tcp://[::1]:8786"
    assert runner.check_scheduler("tls://scheduler.example.org:1", "--scheduler") == "tls://scheduler.example.org:1"


def test_unreachable_scheduler_is_one_line_with_exit_2(tmp_path, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(sweep, "measure", lambda *args, **kwargs: calls.append(args))
    path = str(write_grid(tmp_path, grid_text()))
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        status, err = accum_sweep([path, "--scheduler", "tcp://127.0.0.1:1", "--no-progress"], capsys)
    assert_refused(status, err, "--scheduler tcp://127.0.0.1:1: cannot connect")
    assert not calls and not result_files(tmp_path / "out")


def job_hash(quantity: str, family: str, params: dict, options: dict, root_seed: int = 11, replicate: int = 0) -> str:
    """The result-file name of the one job of a one-point grid."""
    grid = grids.Grid("test", quantity, (grids.FamilyAxes(family, {k: (v,) for k, v in params.items()}),),
                      {k: (v,) for k, v in options.items()}, (replicate,), root_seed, pathlib.Path("out"))
    return sweep.plan(grid)[0].hash


#: small options of every quantity (the job is planned, never run)
SMALL = {"coherence": {"steps": 4, "samples": 8}, "product-norm": {"steps": 4, "samples": 8},
         "onset": {"steps": 8, "samples": 8}, "window": {"context": 8, "samples": 8},
         "score-gap": {"offset": 4, "samples": 8}, "near-weight": {"n_max": 50, "points": 3, "samples": 4},
         "far-residual": {"n_max": 50, "points": 3, "samples": 4}, "drift": {"steps": 10}}


def test_a_job_file_name_changes_with_every_family_parameter_and_option_the_seed_and_the_replicate(monkeypatch):
    """The result file of a sweep job (and of a figure's job, the same file) is keyed by every declared parameter of
    every built-in family, every option of every quantity (both enumerated from their ``ParamSpec`` lists), the root
    seed and the replicate: changing any one of them names another file.  (The code version, the same for every job
    here, is fingerprinted once.)"""
    import functools

    from conftest import family_variants, other_values
    from accum.simulations.families import FAMILIES, family_params
    from accum.simulations.measure import QUANTITIES

    monkeypatch.setattr(sweep, "measure_modules", functools.lru_cache(identity.measure_modules))
    monkeypatch.setattr(sweep, "code_identity", functools.lru_cache(identity.code_identity))

    assert set(SMALL) == set(QUANTITIES)
    for name in FAMILIES:
        base = job_hash("coherence", name, {"dim": 4}, SMALL["coherence"])
        assert base != job_hash("coherence", name, {"dim": 4}, SMALL["coherence"], root_seed=12)
        assert base != job_hash("coherence", name, {"dim": 4}, SMALL["coherence"], replicate=1)
        for param, families in family_variants(name, {"dim": 4}).items():
            for family in families:
                assert job_hash("coherence", name, family_params(family), SMALL["coherence"]) != base, (name, param)
    for quantity, q in QUANTITIES.items():
        base = job_hash(quantity, "so2-accumulated", {"dim": 4}, SMALL[quantity])
        for spec in q.options:
            changed = []
            for value in other_values(spec):
                if value == SMALL[quantity].get(spec.name, spec.default):
                    continue
                try:
                    changed.append(job_hash(quantity, "so2-accumulated", {"dim": 4}, {**SMALL[quantity], spec.name: value}))
                except ParamError:  # e.g. device = cuda on a machine without one
                    continue
            assert changed and base not in changed, (quantity, spec.name)


def test_the_fingerprinted_modules_are_every_module_a_measurement_loads():
    """Every module of the engine loaded by importing ``measure`` is in ``measure_modules`` (its numbers' sources)."""
    from conftest import accum_modules_loaded

    loaded = accum_modules_loaded()["accum.simulations.measure"]
    assert "accum.simulations.estimators" in loaded
    assert loaded <= set(identity.measure_modules()), loaded - set(identity.measure_modules())
