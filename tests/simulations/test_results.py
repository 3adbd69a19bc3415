"""Atomic result files: never half-written, corrupt files detected, strict JSON."""

import json
import os

import numpy as np
import pytest

from accum.simulations.params import ParamError
from accum.simulations.results import (NonFiniteError, ResultError, atomic_write_json, make_record, read_record,
                                       reserve_output)


def test_roundtrip_and_nonfinite_values_are_refused(tmp_path):
    rec = make_record("measurement", {"a": np.int64(3)}, {"x": np.array([1.0, 2.5])}, 1, {"seconds": 0.1})
    back = read_record(atomic_write_json(tmp_path / "r.json", rec))
    assert back["result"]["x"] == [1.0, 2.5] and back["config"]["a"] == 3
    for bad in (np.inf, -np.inf, np.nan):
        rec = make_record("measurement", {}, {"x": np.array([1.0, bad])}, 1, {"seconds": 0.1})
        with pytest.raises(NonFiniteError, match=r"result\.x\[1\] = (-?inf|nan) is not finite"):
            atomic_write_json(tmp_path / "bad.json", rec)
    assert sorted(os.listdir(tmp_path)) == ["r.json"]


def test_read_record_refuses_nonfinite_literals_and_strings(tmp_path):
    good = json.loads((atomic_write_json(tmp_path / "r.json", make_record("m", {}, {"x": 1.0}, 0, {}))).read_text())
    for value in ("NaN", "Infinity", '"nan"', '"-inf"'):
        path = tmp_path / "v.json"
        path.write_text(json.dumps({**good, "result": {"x": 0.0}}).replace("0.0", value))
        with pytest.raises(ResultError):
            read_record(path)
    with pytest.raises(ResultError, match="is a directory"):
        read_record(tmp_path)
    for value in ("NaN", "-Infinity", "1e999", "-1e999"):                # json reads each as a float
        path.write_text(json.dumps({**good, "result": {"mean": [1.0, "X"]}}).replace('"X"', value))
        with pytest.raises(ResultError, match=r"v\.json: result\.mean\[1\] is not a finite number"):
            read_record(path)


def test_reserve_output_creates_the_temp_file_first_and_cleans_up(tmp_path):
    target = tmp_path / "new" / "deeper" / "r.json"
    with reserve_output(target, "--json") as out:
        assert [p.name.endswith(".tmp") for p in target.parent.iterdir()] == [True]   # proven writable up front
        out.write_json({"ok": 1})
    assert json.loads(target.read_text()) == {"ok": 1} and os.listdir(target.parent) == ["r.json"]
    other = tmp_path / "fresh" / "r.json"
    with pytest.raises(KeyboardInterrupt):
        with reserve_output(other, "--json"):
            raise KeyboardInterrupt          # interrupted work: no temp file, no folder left behind
    assert not (tmp_path / "fresh").exists()
    with pytest.raises(NonFiniteError):
        with reserve_output(other, "--json") as out:
            out.write_json({"x": float("nan")})
    assert not (tmp_path / "fresh").exists()


@pytest.mark.parametrize("path, message", [("{tmp}/dir/", "ends in a path separator"), ("{tmp}", "is a directory"),
                                           ("/proc/accum-never.json", "cannot write there"), ("", "empty path")])
def test_reserve_output_refuses_before_any_work(tmp_path, path, message):
    with pytest.raises(ParamError, match=f"--json.*{message}"):
        with reserve_output(path.format(tmp=tmp_path), "--json"):
            pytest.fail("the block must not run")
    assert os.listdir(tmp_path) == []


def test_truncated_and_foreign_files_are_rejected(tmp_path):
    path = atomic_write_json(tmp_path / "r.json", make_record("m", {}, {}, 0, {}))
    text = path.read_text()
    path.write_text(text[: len(text) // 2])
    with pytest.raises(ResultError, match="corrupt or half-written"):
        read_record(path)
    path.write_text(json.dumps({"hello": 1}))
    with pytest.raises(ResultError, match="not an accum result"):
        read_record(path)
    with pytest.raises(ResultError, match="no such result file"):
        read_record(tmp_path / "missing.json")


def test_failed_write_leaves_old_file_and_no_temp(tmp_path):
    path = atomic_write_json(tmp_path / "r.json", {"ok": 1})
    with pytest.raises(TypeError):
        atomic_write_json(path, {"bad": object()})
    assert json.loads(path.read_text()) == {"ok": 1}
    assert sorted(os.listdir(tmp_path)) == ["r.json"]
