"""accum.runtime, threads (issue 40): ``--threads N`` holds for every library a command loads, torch's libgomp and
scipy's OpenBLAS loaded in the middle of the work included, measured by CPU time against wall time."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from accum.runtime import DEFAULT_THREADS, THREAD_VARIABLES, thread_environment, threads_requested


@pytest.mark.parametrize("argv, threads", [
    (["measure", "coherence", "--threads", "3"], 3),
    (["measure", "--threads=4", "coherence"], 4),
    (["sweep", "g.toml", "--threads", "2", "--threads", "5"], 5),       # the last one (the parser refuses the pair)
    (["measure", "coherence"], DEFAULT_THREADS),
    (["measure", "--threads"], DEFAULT_THREADS),                         # no value: the parser refuses it
    (["measure", "--threads", "0"], DEFAULT_THREADS),                    # out of range: refused later
    (["measure", "--threads", "٣"], DEFAULT_THREADS),                    # not ASCII: refused later
    (["measure", "--", "--threads", "3"], DEFAULT_THREADS),              # after "--" it is no option
    (["bench", "--threads", "1" * 5000], DEFAULT_THREADS),               # over int()'s 4300 digits (fuzz seed 11)
    (["bench", "--threads", "0" * 30 + "2"], 2),                         # leading zeros, as the parser reads it
])
def test_threads_requested_reads_the_count_before_any_parser(argv, threads):
    assert threads_requested(argv) == threads


def test_thread_environment_sets_every_variable_and_restores_them(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    with thread_environment(2):
        assert [os.environ[name] for name in THREAD_VARIABLES] == ["2"] * len(THREAD_VARIABLES)
    assert os.environ["OMP_NUM_THREADS"] == "7" and "OPENBLAS_NUM_THREADS" not in os.environ


#: runs accum.cli.main in a fresh interpreter whose environment sets no thread variable, then reports wall and CPU
#: time, the CPU time of every thread but the main one, the thread count of each BLAS / OpenMP pool and of torch
MEASURE = """
import json, os, resource, sys, time
from accum.cli import main
start = time.monotonic()
status = main(sys.argv[1:])
wall = time.monotonic() - start
usage = resource.getrusage(resource.RUSAGE_SELF)
others = 0
for tid in os.listdir("/proc/self/task"):
    if int(tid) != os.getpid():
        fields = open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()
        others += int(fields[11]) + int(fields[12])
from threadpoolctl import threadpool_info
import torch
print(json.dumps({"status": status, "wall": wall, "cpu": usage.ru_utime + usage.ru_stime,
                  "others": others / os.sysconf("SC_CLK_TCK"), "torch": torch.get_num_threads(),
                  "pools": {p["filepath"].rsplit("/", 1)[-1]: p["num_threads"] for p in threadpool_info()}}))
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="per-thread CPU times are read from Linux /proc")
def test_one_thread_means_one_core_for_every_library_loaded_mid_command():
    """``accum measure near-weight`` (default ``--threads 1``) loads torch, and with it libgomp, in the middle of the
    work, then streams far tokens through torch.  With the thread variables unset by the caller, every pool still
    runs one thread and the other threads of the process use no CPU: CPU <= 1.05 x wall.  (Before the fix torch
    ran 2 intra-op threads here: the other threads took 6.7 of 15.2 CPU-seconds at n_max = 65536.)"""
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    done = subprocess.run([sys.executable, "-c", MEASURE, "measure", "near-weight", "--family", "so2-accumulated",
                           "--param", "dim=64", "--opt", "n_max=8192", "--no-progress"],
                          env=env, capture_output=True, text=True, timeout=300)
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["status"] == 0 and got["torch"] == 1, got
    assert got["pools"] and set(got["pools"].values()) == {1}, got     # numpy's and scipy's OpenBLAS, torch's libgomp
    assert any(name.startswith("libgomp") for name in got["pools"]), got
    assert got["others"] <= 0.05 * got["wall"] and got["cpu"] <= 1.05 * got["wall"], got
