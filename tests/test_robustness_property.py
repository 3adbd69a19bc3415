"""Issue 14, property-based: every command, driven with random bad values, refuses with one line naming the option,
exit status 2, no traceback, and writes nothing (hypothesis, derandomized: the same examples on every run)."""

import contextlib
import io
import os
import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st

from accum.cli import main

JUNK = st.sampled_from(["abc", "", " ", "1.5x", "nan", "inf", "-inf", "1e999", "0x10", "--", "1,2", "½"])


def bad_int(lo: int, hi: int):
    """Integers outside [lo, hi], non-integral numbers, and junk text."""
    return st.one_of(st.integers(max_value=lo - 1).map(str), st.integers(min_value=hi + 1).map(str),
                     st.floats(min_value=lo + 0.01, max_value=hi - 0.01).filter(lambda x: not x.is_integer()).map(repr),
                     JUNK)


def bad_float(lo: float, hi: float):
    """Finite floats outside [lo, hi] (or (lo, hi) where open), and junk text."""
    return st.one_of(st.floats(max_value=lo, exclude_max=True, allow_nan=False, allow_infinity=False).map(repr),
                     st.floats(min_value=hi, exclude_min=True, allow_nan=False, allow_infinity=False).map(repr), JUNK)


MEASURE = ["measure", "coherence", "--family", "householder", "--opt", "steps=3", "--opt", "samples=10"]
# (argv before the bad value, how the bad value is written, what the error must name, the strategy)
CASES = [
    (MEASURE[:4], "--opt=steps={}", "steps", bad_int(1, 10**7)),
    (MEASURE[:4], "--opt=samples={}", "samples", bad_int(2, 10**9)),
    (MEASURE, "--param=beta={}", "beta", bad_float(0.0, 2.0)),
    (["measure", "coherence", "--family", "haar", "--opt", "steps=2", "--opt", "samples=4"], "--param=dim={}", "dim",
     bad_int(1, 4096)),
    (["measure", "coherence", "--family", "so2-accumulated", "--opt", "steps=3", "--opt", "samples=10"],
     "--param=sigma={}", "sigma", st.one_of(st.floats(max_value=-1e-300, allow_nan=False, allow_infinity=False).map(repr),
                                            st.sampled_from(["1e308", "1.7e308", "-0.5"]), JUNK)),
    (MEASURE, "--seed={}", "--seed", st.one_of(st.integers(max_value=-1).map(str), JUNK)),
    (MEASURE, "--threads={}", "--threads", bad_int(1, 1024)),
    (MEASURE, "--family={}", "family", st.sampled_from([":", "nope:", ":X", "a b:C", "no_such_mod_q:C", "rope2", ""])),
    (MEASURE, "--json={}", "--json", st.sampled_from(["", "dir/", ".", "/proc/r.json", "/proc/self/x/r.json"])),
    (["check", "householder"], "--samples={}", "--samples", bad_int(10, 10**7)),
    (["check", "householder"], "--k-max={}", "--k-max", bad_int(1, 1024)),
    (["check", "householder"], "--pair-dim={}", "--pair-dim", bad_int(1, 32)),
    (["check", "householder"], "--budget={}", "--budget", bad_float(0.0, 1.0)),
    (["check", "householder", "--samples", "100"], "--threads={}", "--threads", bad_int(1, 1024)),
    (["verify"], "--seed={}", "--seed", st.one_of(st.integers(max_value=-1).map(str), JUNK)),
    (["verify"], "--budget={}", "--budget", bad_float(1e-12, 1.0)),
    (["verify"], "--threads={}", "--threads", bad_int(1, 1024)),
    (["sweep", "grid.toml"], "--workers={}", "--workers", bad_int(1, 1024)),
    (["sweep", "grid.toml"], "--threads={}", "--threads", bad_int(1, 1024)),
    (["bench"], "--repeats={}", "--repeats", bad_int(1, 100)),
    (["bench"], "--threads={}", "--threads", bad_int(1, 1024)),
    (["figures", "--quick"], "--seed={}", "--seed", st.one_of(st.integers(max_value=-1).map(str), JUNK)),
    (["figures", "--quick"], "--workers={}", "--workers", bad_int(1, 1024)),
    (["figures", "--quick"], "--threads={}", "--threads", bad_int(1, 1024)),
    # probe (its own parser and checks): values no range can allow
    (["probe", "train", "--out", "run"], "--seq-len={}", "--seq-len", st.one_of(st.integers(max_value=0).map(str), JUNK)),
    (["probe", "train", "--out", "run"], "--steps={}", "--steps", st.one_of(st.integers(max_value=0).map(str), JUNK)),
    (["probe", "train", "--out", "run"], "--threads={}", "--threads", st.one_of(st.integers(max_value=0).map(str), JUNK)),
]


def run_in_empty_folder(argv: list[str]) -> tuple[int, str, list[str]]:
    """Run ``accum argv`` in a fresh empty current folder; (exit status, stderr, what the folder holds after)."""
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as folder:
        os.chdir(folder)
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                try:
                    rc = main(argv)
                except SystemExit as exit_:           # argparse's own refusals
                    rc = exit_.code
        finally:
            os.chdir(here)
            left = sorted(os.listdir(folder))
    return rc, err.getvalue(), left


@settings(max_examples=250, derandomize=True, deadline=None, database=None)
@given(st.data())
def test_every_command_refuses_bad_values_in_one_line(data):
    prefix, template, names, values = data.draw(st.sampled_from(CASES), label="case")
    value = data.draw(values, label="value")
    argv = [*prefix, template.format(value)]
    rc, err, left = run_in_empty_folder(argv)
    lines = err.strip().splitlines()
    assert rc == 2, (argv, rc, err)
    assert len(lines) == 1 and "Traceback" not in err, (argv, err)
    assert names in lines[0], (argv, lines)
    assert left == [], (argv, left)
