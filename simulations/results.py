"""Result files: plain JSON with the full config, seed, package version and timings, written atomically.

A result is written to a temporary file in the target directory, flushed and fsync'ed, then moved over the
target with ``os.replace`` (atomic on POSIX), so a reader never sees half a file.  Reading validates the
record and raises ``ResultError`` for anything truncated or malformed; nothing is ever unpickled.
"""

from __future__ import annotations

import json
import math
import os
import platform
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from .params import ParamError

SCHEMA = "accum.result/1"
REQUIRED = ("schema", "kind", "config", "result", "version")


class ResultError(ValueError):
    """A result file is missing, truncated, corrupt or not an accum result."""


def package_version() -> str:
    try:
        return metadata.version("accum")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def jsonable(obj: Any) -> Any:
    """numpy scalars/arrays -> Python; non-finite floats -> strings "inf", "-inf", "nan" (strict JSON)."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return jsonable(obj.item())
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    return obj


def check_output_path(path: str | os.PathLike, option: str, directory: bool = False) -> Path:
    """Refuse, before any work is done, an output ``path`` that cannot be written; ``ParamError`` names ``option``.

    A file path must not be a directory; a directory path must not be a file, and must be writable if it
    exists; the nearest existing ancestor must be a writable directory (missing folders below it are created
    when the result is written).
    """
    if not str(path).strip():
        raise ParamError(f"{option}: empty path")
    path = Path(path)
    if directory and path.exists() and not path.is_dir():
        raise ParamError(f"{option} {path}: exists and is not a directory")
    if not directory and path.is_dir():
        raise ParamError(f"{option} {path}: is a directory; give a file path")
    ancestor = next(p for p in (path.parent, *path.parent.parents) if p.exists())
    if not ancestor.is_dir():
        raise ParamError(f"{option} {path}: {ancestor} is not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ParamError(f"{option} {path}: {ancestor} is not writable")
    if directory and path.is_dir() and not os.access(path, os.W_OK | os.X_OK):
        raise ParamError(f"{option} {path}: the directory is not writable")
    return path


def make_output_dir(path: str | os.PathLike, option: str) -> Path:
    """``check_output_path(path, option, directory=True)``, then create the directory (and its parents);
    a refusal by the system is a ``ParamError`` naming ``option`` too."""
    path = check_output_path(path, option, directory=True)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ParamError(f"{option} {path}: cannot create the directory ({err.strerror or err})") from None
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (temporary file + fsync + os.replace); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are meant to be shared
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(jsonable(obj), indent=2, allow_nan=False) + "\n")


def make_record(kind: str, config: dict, result: dict, seed: int | None, timings: dict) -> dict:
    """The saved form of any accum result."""
    return {"schema": SCHEMA, "kind": kind, "config": config, "seed": seed, "result": result,
            "timings": timings, "version": package_version(),
            "platform": {"python": platform.python_version(), "numpy": np.__version__}}


def read_record(path: str | os.PathLike) -> dict:
    """Load and validate a saved record; raises ``ResultError`` if it is unreadable or incomplete."""
    path = Path(path)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ResultError(f"{path}: no such result file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ResultError(f"{path}: corrupt or half-written result ({err})") from None
    if not isinstance(record, dict) or record.get("schema") != SCHEMA or any(k not in record for k in REQUIRED):
        raise ResultError(f"{path}: not an accum result (schema {SCHEMA} with keys {', '.join(REQUIRED)})")
    return record
