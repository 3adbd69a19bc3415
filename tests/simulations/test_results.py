"""Atomic result files: never half-written, corrupt files detected, strict JSON."""

import json
import os

import numpy as np
import pytest

from accum.simulations.results import ResultError, atomic_write_json, make_record, read_record


def test_roundtrip_and_nonfinite_values(tmp_path):
    rec = make_record("measurement", {"a": np.int64(3)}, {"x": np.array([1.0, np.inf, np.nan])}, 1, {"seconds": 0.1})
    path = atomic_write_json(tmp_path / "r.json", rec)
    back = read_record(path)
    assert back["result"]["x"] == [1.0, "inf", "nan"] and back["config"]["a"] == 3
    assert [p for p in os.listdir(tmp_path) if p.endswith(".tmp")] == []


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
