"""A fuzz campaign over every command, run as a new user would (issue 32): not part of ``make test``.

    python tests/fuzz_campaign.py --cases 600 --seed 1 [--json FILE]
    python tests/fuzz_campaign.py --startup-window
    python tests/fuzz_campaign.py --rerun FILE      # the failed cases of a saved campaign, run again

Each case is one ``accum`` command in a fresh empty folder, in a subprocess (as a user runs it):

* ``argv``: a command with options drawn from its real ones, values drawn from good ones and junk (other scripts'
  digits, underscores, huge and tiny numbers, paths that are special files), a few options repeated or abbreviated;
* ``input``: an input option (``--from``, a grid file, ``--sweep``, ``--run``, ``--probes``) given a device, a FIFO,
  a folder, a dangling link, deep / huge / non-UTF-8 / wrong-shaped JSON or TOML;
* ``family``: a misbehaving user family (prints, raises, exits, wrong shapes, NaN, huge angles, expanding steps);
* ``signal``: SIGINT or SIGTERM at a random moment from ``--min-delay`` (0.1 s) to 4 s after the start of a long run
  of any command.  Before 0.1 s a signal may meet the interpreter's own start-up rather than accum (CPython's text for
  a SIGINT, a silent exit 143 for a SIGTERM): that window is measured apart, by ``--startup-window``, and stated in
  docs/commands.md (15-45 ms at load); drawing signals inside it tested CPython, about once a campaign.

A case fails when stderr holds a traceback, a refusal (exit 2) is not one line starting ``accum``, a temporary
file is left, a signal is not acted on within ``--latency`` seconds, or an input case (or a signalled run)
outlives its 30 s box (a read that never ends); a valid command still working after 30 s is stopped, not counted.  It prints one line per failure and a summary; exit status 1 if any case failed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
JUNK = ["", " ", "abc", "８", "1_0", "٣", "½", "nan", "inf", "-inf", "1e999", "1e-400", "0x10", "--", "-1", "0",
        "1" * 60, "1" * 5000, "2.5", "1e308", "-0", "+5", "5.", "∞", "None", "[]", "{}", "/dev/zero", "-"]
GOOD = ["1", "2", "3", "4", "8", "16", "0.5", "1.0"]
FAMILIES = ["householder", "so2-accumulated", "rope", "haar", "givens", "lie-walk", "nope", "bogus",
            "accum.simulations.examples:SignedPermutation", "fz:Prints", "fz:Raises", "fz:Exits", "fz:Shape",
            "fz:NaN", "fz:HugeAngles", "fz:Expanding", "fz:NotSteps", "no.such:Mod"]
QUANTITIES = ["coherence", "product-norm", "onset", "window", "score-gap", "near-weight", "far-residual", "drift"]
OPTS = ["steps", "samples", "eps", "context", "offset", "n_max", "points", "s0", "alibi_slope", "chunk", "device",
        "value_rotation"]
PARAMS = ["dim", "beta", "sigma", "mu", "law", "w", "vocab", "base", "group", "kappa", "m", "stay", "source"]

#: what the misbehaving family ``fz:Prints`` prints (accum sends it to stderr; not part of accum's own message)
FAMILY_NOISE = "noise on stdout"
USER_FAMILIES = '''
import sys
import numpy as np
from accum.simulations.steps import AngleSteps, DenseSteps

class Base:
    dim = 4
    def eye(self, n, b):
        return np.broadcast_to(np.eye(4), (b, n, 4, 4)).copy()

class Prints(Base):
    def sample(self, rng, n, b):
        print("noise on stdout"); return DenseSteps(self.eye(n, b))  # FAMILY_NOISE

class Raises(Base):
    def sample(self, rng, n, b):
        raise RuntimeError("boom")

class Exits(Base):
    def sample(self, rng, n, b):
        sys.exit(3)

class Shape(Base):
    def sample(self, rng, n, b):
        return DenseSteps(np.zeros((b, n + 1, 4, 4)))

class NaN(Base):
    def sample(self, rng, n, b):
        return DenseSteps(np.full((b, n, 4, 4), np.nan))

class HugeAngles(Base):
    def sample(self, rng, n, b):
        return AngleSteps(np.full((b, n, 2), 1e300))

class Expanding(Base):
    def sample(self, rng, n, b):
        return DenseSteps(1e100 * self.eye(n, b))

class NotSteps(Base):
    def sample(self, rng, n, b):
        return self.eye(n, b)
'''


def pick(rng: random.Random, good: list[str]) -> str:
    return rng.choice(good) if rng.random() < 0.6 else rng.choice(JUNK)


def argv_case(rng: random.Random) -> list[str]:
    """A command with some of its real options, values good or junk, sometimes repeated or abbreviated."""
    command = rng.choice(["families", "measure", "check", "verify", "sweep", "figures", "bench", "probe", "bogus", ""])
    small = ["--opt", "steps=3", "--opt", "samples=8"]
    if command == "measure":
        argv = ["measure", rng.choice(QUANTITIES + ["bogus"]), "--family", rng.choice(FAMILIES), "--no-progress"]
        argv += small[: 2 * rng.randint(0, 2)]
        for _ in range(rng.randint(0, 3)):
            which = rng.choice(["--param", "--opt", "--seed", "--json", "--threads", "--from"])
            key = rng.choice(PARAMS if which == "--param" else OPTS)
            value = pick(rng, GOOD)
            argv += [which, f"{key}={value}" if which in ("--param", "--opt") else value]
    elif command == "check":
        argv = ["check", rng.choice(FAMILIES), "--samples", rng.choice(["100", "200", *JUNK[:8]])]
        argv += rng.choice([[], ["--param", f"dim={pick(rng, ['4', '8'])}"], ["--budget", pick(rng, ['0.1'])],
                            ["--k-max", pick(rng, ['4'])], ["--pair-dim", pick(rng, ['4'])], ["--json", "r.json"]])
    elif command == "verify":
        argv = ["verify", "--no-progress", "--workers", "1"]
        argv += rng.choice([["--budget", pick(rng, ["0.01"])], ["--seed", pick(rng, ["1"])], ["--calibrate", "0"],
                            ["--only", "x"], ["--family", rng.choice(FAMILIES[9:])], ["--param", "dim=4"],
                            ["--json", "-"], ["--markdown", "r.md", "--json", "r.md"], ["--cache", "/dev/zero"]])
    elif command == "sweep":
        argv = ["sweep", rng.choice(["grid.toml", "missing.toml", "/dev/zero", "."]), "--dry-run"]
        argv += rng.choice([[], ["--workers", pick(rng, ["1"])], ["--scheduler", pick(rng, ["tcp://h:1"])],
                            ["--out", rng.choice(["out", "/proc/x", "", "grid.toml"])]])
    elif command == "figures":
        argv = ["figures", "--quick", "--no-progress", "--workers", "1"]
        argv += rng.choice([["--seed", pick(rng, ["1"])], ["--probes", rng.choice(["/dev/zero", "none.json"])],
                            ["--family", rng.choice(FAMILIES)], ["--out", "/proc/x"], ["--param", "dim=4"]])
        argv += ["--out", "figs", "--results", "data"] if rng.random() < 0.5 else []
    elif command == "bench":
        argv = ["bench", "--repeats", pick(rng, ["1"]), "--threads", pick(rng, ["1"]), "--json", "/proc/x.json"]
    elif command == "probe":
        sub = rng.choice(["train", "eval", "sweep", "report", "tables", "theory", "bogus"])
        argv = ["probe", sub] + rng.choice([["--out", ""], ["--run", "nowhere"], ["--sweep", "/dev/zero"],
                                            ["--seq-len", pick(rng, ["0"])], ["--threads", pick(rng, ["0"])],
                                            ["--preset", "tpu"], ["--arms", "spiral"], ["--device", "tpu"],
                                            ["--runs", "nowhere"], ["--data-source", "web"]])
    else:
        argv = [command] if command else []
        argv += rng.choice([[], ["--help"], ["--version"], ["--jso"]])
    if len(argv) > 2 and rng.random() < 0.1:  # a repeated or abbreviated option
        argv += rng.choice([["--json", "a.json", "--json", "b.json"], ["--jso", "a.json"], ["--thread", "1"]])
    return argv


def special_files(folder: Path) -> dict[str, str]:
    os.mkfifo(folder / "fifo")
    (folder / "dir").mkdir()
    (folder / "dangling").symlink_to(folder / "nowhere")
    writes = {"deep.json": "[" * 100_000, "deep-ok.json": "[" * 70 + "]" * 70, "bigint.json": '{"a": ' + "9" * 5000 + "}",
              "list.json": "[]", "null.json": "null", "half.json": '{"schema": "accum.result/1", "kind"',
              "deep.toml": "a = " + "[" * 5000, "table.toml": "a = " + "{b=" * 200 + "1" + "}" * 200,
              "bigint.toml": "quantity = " + "9" * 5000, "nan.json": '{"schema": "accum.result/1", "kind": "measurement", '
              '"config": {}, "result": {"x": NaN}, "version": "0"}'}
    writes.update({"dotted.toml": "a" + ".a" * 100_000 + " = 1\n", "items.json": "[" + "[]," * 2_200_000 + "[]]"})
    for name, text in writes.items():
        (folder / name).write_text(text)
    (folder / "latin1.json").write_bytes(b'{"a": "\xe9\xff"}')
    runs = damaged_runs(folder)
    return {"device": "/dev/zero", "fifo": "fifo", "dir": "dir", "dangling": "dangling", "latin1": "latin1.json",
            **{name.replace(".", "-"): name for name in writes}, **runs}


def damaged_runs(folder: Path) -> dict[str, str]:
    """Finished probe run folders (a train.json of the default config) whose model.safetensors is truncated, zeroed
    or has a header length of 2^62, and one whose checkpoint.pt is junk (a run to resume)."""
    from accum.probes.train import TrainConfig

    record = json.dumps({"config": TrainConfig().to_dict(), "finished": True, "step": TrainConfig().steps})
    weights = {"truncated": b"\x10\x00\x00\x00\x00\x00\x00\x00{\"a\":", "zeroed": bytes(4096),
               "huge-header": (2**62).to_bytes(8, "little") + b"{}"}
    names = {}
    for kind, data in weights.items():
        run = folder / f"run-{kind}"
        run.mkdir()
        (run / "train.json").write_text(record)
        (run / "model.safetensors").write_bytes(data)
        names[f"run-{kind}"] = run.name
    (folder / "run-checkpoint").mkdir()
    (folder / "run-checkpoint" / "checkpoint.pt").write_bytes(b"PK\x03\x04" + bytes(2048))
    names["run-checkpoint"] = "run-checkpoint"
    return names


def valid_work(argv: list[str]) -> bool:
    """An input case whose input is in fact good (an empty folder as ``--cache``): the command then does real work,
    and outliving the box is not a read that never ends."""
    return any(a == "--cache" and b == "dir" for a, b in zip(argv, argv[1:]))


def input_case(rng: random.Random, files: dict[str, str]) -> list[str]:
    path = rng.choice(sorted(files.values()))
    return rng.choice([["measure", "--from", path], ["sweep", path, "--dry-run"], ["probe", "report", "--sweep", path],
                       ["probe", "eval", "--run", path], ["figures", "--quick", "--probes", path, "--out", "f"],
                       ["verify", "--calibrate", "1", "--cache", path],
                       ["probe", "train", "--preset", "tiny", "--out", path, "--no-progress"]])


def family_case(rng: random.Random) -> list[str]:
    family = rng.choice([f for f in FAMILIES if f.startswith("fz:")])
    return rng.choice([["measure", "coherence", "--family", family, "--opt", "steps=4", "--opt", "samples=8"],
                       ["check", family, "--samples", "100"], ["verify", "--family", family, "--workers", "1"],
                       ["figures", "--quick", "--family", family, "--out", "f", "--workers", "1"]])


LONG = [["measure", "coherence", "--family", "householder", "--opt", "samples=200000000", "--json", "r.json"],
        ["measure", "coherence", "--family", "haar", "--param", "dim=1024", "--json", "h.json"],
        ["check", "householder", "--param", "dim=4096", "--samples", "14"], ["check", "haar", "--param", "dim=1024"],
        ["check", "lie-walk", "--param", "dim=512"], ["verify", "--quick", "--workers", "1", "--json", "v.json"],
        ["verify", "--quick", "--workers", "2"], ["sweep", "long.toml", "--workers", "2"],
        ["figures", "--out", "f", "--results", "d", "--workers", "1"], ["bench", "--json", "b.json"],
        ["probe", "report"], ["families"], ["measure", "window", "--family", "lie-walk", "--param", "dim=512"]]


def run_case(kind: str, argv: list[str], folder: Path, delay: float | None, sig: int, box: float,
             latency: float) -> str | None:
    """Run one case in ``folder`` (``sig`` sent after ``delay`` seconds unless delay is None); the reason it failed,
    or None.  A run ended by the signal itself within ``latency``, having printed nothing, was stopped by the
    interpreter's default action before accum's code ran (a SIGTERM in its first hundredths of a second): acted on."""
    proc = subprocess.Popen([sys.executable, "-m", "accum.cli", *argv], cwd=folder, env=ENV, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    sent = None
    try:
        if delay is not None:
            try:
                proc.wait(timeout=delay)
            except subprocess.TimeoutExpired:
                sent = time.monotonic()
                os.killpg(proc.pid, sig)
        out, err = proc.communicate(timeout=box)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        if (kind in ("argv", "family") or valid_work(argv)) and sent is None:  # valid long work: not a failure
            return None
        return f"still running after {box:.0f} s" + (" (signal ignored)" if sent else " (reading an input?)")
    took = None if sent is None else time.monotonic() - sent
    lines = [line for line in err.strip().splitlines() if line != FAMILY_NOISE]  # the user family's own prints
    if "Traceback" in err:
        return "traceback: " + " | ".join(lines[-3:])
    if proc.returncode < 0 and not (proc.returncode == -sig and took is not None and took <= latency and not lines):
        return f"killed by signal {-proc.returncode}"
    if proc.returncode == 2 and (len(lines) != 1 or not lines[0].startswith("accum")) and "--help" not in argv:
        return f"refusal not one line: {lines[:3]}"
    if took is not None and proc.returncode == 128 + sig and took > latency:
        return f"signal acted on after {took:.2f} s"
    left = [str(p.relative_to(folder)) for p in folder.rglob("*") if p.suffix == ".tmp" or ".accum-write-test" in p.name]
    if left:
        return f"left {left}"
    return None


def startup_window(script: str, tries: int = 6, step_ms: int = 5, max_ms: int = 60) -> None:
    """SIGINT, then SIGTERM, to the installed ``script families`` at 0, ``step_ms``, ..., ``max_ms`` ms after its
    start, ``tries`` times each: per delay how many ended with accum's one line, with CPython's own text (a SIGINT
    before accum's handler is in place: "Fatal Python error: init_import_site" during site start-up, or a
    KeyboardInterrupt traceback), silently by the signal's default action (a SIGTERM then: status 143), or finished
    before the signal came."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        for ms in range(0, max_ms + 1, step_ms):
            counts = {"accum": 0, "python": 0, "silent": 0, "finished": 0}
            for _ in range(tries):
                proc = subprocess.Popen([script, "families"], env=ENV, start_new_session=True,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                time.sleep(ms / 1000)
                os.killpg(proc.pid, sig)
                _, err = proc.communicate()
                outcome = ("accum" if "accum families: interrupted" in err else "python" if err.strip() else
                           "finished" if proc.returncode == 0 else "silent")
                counts[outcome] += 1
            print(f"{sig.name} {ms} ms: " + ", ".join(f"{n} {k}" for k, n in counts.items() if n), flush=True)


def case_files(folder: Path) -> dict[str, str]:
    """Fill a case's empty ``folder``: the user families (fz.py), two grids and the special input files; the latter
    by name (``special_files``)."""
    (folder / "fz.py").write_text(USER_FAMILIES)
    (folder / "grid.toml").write_text('quantity = "coherence"\nroot_seed = 1\nseeds = 1\noutput = "res"\n'
                                      '[options]\nsteps = 4\nsamples = 8\n[[family]]\nname = "householder"\n')
    (folder / "long.toml").write_text('quantity = "coherence"\nroot_seed = 1\nseeds = 4\noutput = "res"\n'
                                      '[options]\nsamples = [2000, 200000000]\n[[family]]\nname = "haar"\n'
                                      'dim = [8, 64]\n')
    return special_files(folder)


def rerun_failures(path: str, latency: float) -> int:
    """Run again, as they first ran (same argv, signal and delay, a fresh folder), the failed cases of the campaign
    saved at ``path`` (``--json``): each case's new outcome printed; 1 if any fails still."""
    failed = [o for o in json.loads(Path(path).read_text()) if o["failure"]]
    still = 0
    for o in failed:
        sig = signal.Signals[o["signal"]] if o["signal"] else signal.SIGINT
        with tempfile.TemporaryDirectory(prefix="fuzz.") as tmp:
            case_files(Path(tmp))
            failure = run_case(o["kind"], o["argv"], Path(tmp), o["delay"], sig, 30.0, latency)
        still += failure is not None
        print(f"case {o['case']} {o['kind']} {o['argv']} delay={o['delay']}: was {o['failure']!r}, now "
              f"{failure or 'passes'}", flush=True)
    print(f"{len(failed)} failed cases run again: {still} fail still")
    return 1 if still else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=600)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--latency", type=float, default=1.0, help="seconds a signal may take to end a run")
    parser.add_argument("--json", help="write every case and its outcome here")
    parser.add_argument("--startup-window", action="store_true",
                        help="only measure how long after its start a signal still meets CPython rather than accum")
    parser.add_argument("--accum", default=str(Path(sys.executable).with_name("accum")),
                        help="the installed accum script --startup-window starts (default: the one beside this Python)")
    parser.add_argument("--tries", type=int, default=6, help="signals per delay (--startup-window)")
    parser.add_argument("--rerun", metavar="JSON", help="only run again the failed cases of a campaign's --json")
    parser.add_argument("--min-delay", type=float, default=0.1,
                        help="earliest signal, seconds after the start (the interpreter's start-up window is before)")
    args = parser.parse_args()
    # a campaign started as a background job of a script inherits SIGINT ignored, and so would every command it runs
    # (accum keeps an inherited SIG_IGN, as POSIX intends): a handler here is reset to the default in each child
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if args.rerun:
        return rerun_failures(args.rerun, args.latency)
    if args.startup_window:
        startup_window(args.accum, args.tries)
        return 0
    rng = random.Random(args.seed)
    kinds = ["argv"] * 60 + ["input"] * 15 + ["family"] * 10 + ["signal"] * 15
    outcomes, start = [], time.monotonic()
    for i in range(args.cases):
        kind = rng.choice(kinds)
        with tempfile.TemporaryDirectory(prefix="fuzz.") as tmp:
            folder = Path(tmp)
            files = case_files(folder)
            delay, sig = None, rng.choice([signal.SIGINT, signal.SIGTERM])
            if kind == "argv":
                argv = argv_case(rng)
            elif kind == "input":
                argv = input_case(rng, files)
            elif kind == "family":
                argv = family_case(rng)
            else:
                argv, delay = rng.choice(LONG), round(rng.uniform(args.min_delay, 4.0), 2)
            failure = run_case(kind, argv, folder, delay, sig, 30.0, args.latency)
        outcomes.append({"case": i, "kind": kind, "argv": argv, "delay": delay,
                         "signal": None if delay is None else signal.Signals(sig).name, "failure": failure})
        if failure:
            print(f"case {i} {kind} {argv} delay={delay}: {failure}", flush=True)
    failed = [o for o in outcomes if o["failure"]]
    by_kind = {k: sum(o["kind"] == k for o in outcomes) for k in ("argv", "input", "family", "signal")}
    print(f"{len(outcomes)} cases ({', '.join(f'{n} {k}' for k, n in by_kind.items())}) in "
          f"{time.monotonic() - start:.0f} s: {len(failed)} failed")
    if args.json:
        Path(args.json).write_text(json.dumps(outcomes, indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
