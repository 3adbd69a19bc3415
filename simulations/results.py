"""Result files: plain JSON with the full config, seed, package version and timings, written atomically.

A result is written to a temporary file in the target directory, flushed and fsync'ed, then moved over the
target with ``os.replace`` (atomic on POSIX), so a reader never sees half a file.  Commands create that
temporary file before any work (``reserve_output``), so an unwritable target is refused up front, not after
the computation.  Non-finite numbers are never written (``NonFiniteError``): a saved result holds numbers
only.  Reading validates the record and raises ``ResultError`` for anything truncated or malformed; nothing
is ever unpickled.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import stat
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from accum.interrupts import scratch_paths

from .inputs import InputError, loads_json, read_text
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


class NonFiniteError(ResultError):
    """A value meant to be saved is NaN or infinite; nothing is written."""


def jsonable(obj: Any, where: str = "") -> Any:
    """numpy scalars/arrays -> Python numbers and lists; a non-finite float raises ``NonFiniteError`` naming
    its key path (e.g. ``result.mean[3]``), so strict JSON never carries NaN, inf or their strings."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v, f"{where}.{k}" if where else str(k)) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v, f"{where}[{i}]") for i, v in enumerate(obj)]
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist(), where)
    if isinstance(obj, np.generic):
        return jsonable(obj.item(), where)
    if isinstance(obj, float) and not math.isfinite(obj):
        raise NonFiniteError(f"{where or 'value'} = {obj} is not finite; not written")
    return obj


def check_output_path(path: str | os.PathLike, option: str, directory: bool = False) -> Path:
    """Refuse, before any work is done, an output ``path`` that cannot be written; ``ParamError`` names ``option``.

    A file path must not end in a separator and, if it exists, must be a regular file (not a directory, device,
    fifo or socket, which the final ``os.replace`` would replace); a directory path must not be a file, and
    must be writable if it exists; the nearest existing ancestor must be a writable directory (missing folders
    below it are created when the result is written).  A path the system cannot even look up (a name too
    long), and a dangling symbolic link on the way (which no folder can be created over), are refused too.
    """
    if not str(path).strip():
        raise ParamError(f"{option}: empty path")
    if str(path) == "-":
        raise ParamError(f"{option} -: results are written to files, not to stdout; give a file path (./- for a file "
                         "named '-')")
    if not directory and str(path).endswith((os.sep, "/")):
        raise ParamError(f"{option} {path}: ends in a path separator; give a file path (e.g. {path}result.json)")
    path = Path(path)
    mode = _file_mode(path, option)
    dangling = next((p for p in (path, *path.parents) if _file_mode(p, option) is None and p.is_symlink()), None)
    if dangling is not None:
        raise ParamError(f"{option} {path}: {dangling} is a symbolic link to {os.readlink(dangling)}, which does not "
                         "exist; create its target or give another path")
    if directory and mode is not None and not stat.S_ISDIR(mode):
        raise ParamError(f"{option} {path}: exists and is not a directory")
    if not directory and mode is not None and stat.S_ISDIR(mode):
        raise ParamError(f"{option} {path}: is a directory; give a file path")
    if not directory and mode is not None and not stat.S_ISREG(mode):
        raise ParamError(f"{option} {path}: exists and is not a regular file (a device, fifo or socket); "
                         "give a file path")
    ancestor = next(p for p in (path.parent, *path.parent.parents) if _file_mode(p, option) is not None)
    if not ancestor.is_dir():
        raise ParamError(f"{option} {path}: {ancestor} is not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ParamError(f"{option} {path}: {ancestor} is not writable")
    if directory and mode is not None and not os.access(path, os.W_OK | os.X_OK):
        raise ParamError(f"{option} {path}: the directory is not writable")
    return path


def _file_mode(path: Path, option: str) -> int | None:
    """``st_mode`` of ``path`` (links followed), or None where nothing is there (or a file stands where a
    folder is expected); any other failure to look it up (a name too long, no permission) is a ``ParamError``
    naming ``option``."""
    try:
        return path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as err:
        raise ParamError(f"{option} {path}: cannot use this path ({err.strerror or err})") from None


def make_output_dir(path: str | os.PathLike, option: str) -> Path:
    """``check_output_path(path, option, directory=True)``, then create the directory (and its parents);
    a refusal by the system is a ``ParamError`` naming ``option`` too."""
    path = check_output_path(path, option, directory=True)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ParamError(f"{option} {path}: cannot create the directory ({err.strerror or err})") from None
    return path


def prove_writable_dirs(paths: dict[str, str | os.PathLike]) -> list[Path]:
    """Before any work, for each ``{option: folder}``: ``check_output_path(folder, option, directory=True)``,
    create the folder (and its parents) and a temporary file in it, then remove the file and the folders
    created here, so a later refusal leaves nothing behind (the work creates them again when it writes).
    A refusal by the system (a read-only or virtual file system such as /proc) is a ``ParamError`` naming
    the option."""
    checked = [(option, check_output_path(path, option, directory=True)) for option, path in paths.items()]
    for option, path in checked:
        created = [p for p in (path, *path.parents) if not p.exists()]
        try:
            path.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(prefix=".accum-write-test.", dir=path):
                pass
        except OSError as err:
            raise ParamError(f"{option} {path}: cannot write there ({err.strerror or err})") from None
        finally:
            _remove_empty(created)
    return [path for _, path in checked]


class ReservedOutput:
    """A temporary file already created beside ``path``; ``write_text`` / ``write_json`` fill it, fsync it
    and move it over ``path`` (``os.replace``).  Made by ``reserve_output``, which removes it if unused."""

    def __init__(self, path: Path, fd: int, tmp: Path) -> None:
        self.path, self._fd, self._tmp = path, fd, tmp
        self.closed = False

    def close(self) -> None:
        """Close the temporary file without writing (idempotent)."""
        if not self.closed:
            self.closed = True
            os.close(self._fd)

    def write_text(self, text: str) -> Path:
        if self.closed:
            raise ResultError(f"{self.path}: already written")
        self.closed = True
        with os.fdopen(self._fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(self._tmp, self.path)
        return self.path

    def write_json(self, obj: Any) -> Path:
        """Strict JSON (``jsonable``: a non-finite value raises ``NonFiniteError`` before anything is written)."""
        return self.write_text(json.dumps(jsonable(obj), indent=2, allow_nan=False) + "\n")


@contextlib.contextmanager
def reserve_output(path: str | os.PathLike, option: str) -> Iterator[ReservedOutput]:
    """Prove ``path`` writable before any work: ``check_output_path``, then create the missing folders and a
    temporary file in the target folder.  A refusal by the system here is a ``ParamError`` naming ``option``.

    The block does the work and calls ``write_json`` / ``write_text`` once.  If the block raises (an error,
    Ctrl-C) or never writes, the temporary file and the folders created here are removed: nothing is left.
    """
    path = check_output_path(path, option)
    created = [p for p in (path.parent, *path.parent.parents) if not p.exists()]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are meant to be shared
    except OSError as err:
        _remove_empty(created)
        raise ParamError(f"{option} {path}: cannot write there ({err.strerror or err})") from None
    out = ReservedOutput(path, fd, Path(tmp))
    try:
        with scratch_paths(tmp, *created):  # removed if a signal ends the process at once (accum.interrupts)
            yield out
    finally:
        out.close()
        Path(tmp).unlink(missing_ok=True)
        if not path.exists():
            _remove_empty(created)


def _remove_empty(folders: list[Path]) -> None:
    """Remove ``folders`` (deepest first) where they are empty."""
    for folder in folders:
        with contextlib.suppress(OSError):
            folder.rmdir()


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (temporary file + fsync + os.replace); returns the path.

    For a target whose writability was not proven up front; commands use ``reserve_output`` instead.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    out = ReservedOutput(path, fd, Path(tmp))
    try:
        with scratch_paths(tmp):
            os.chmod(tmp, 0o644)
            out.write_text(text)
    except BaseException:
        out.close()
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Strict JSON, atomically; a non-finite value raises ``NonFiniteError`` and nothing is written."""
    return atomic_write_text(path, json.dumps(jsonable(obj), indent=2, allow_nan=False) + "\n")


def make_record(kind: str, config: dict, result: dict, seed: int | None, timings: dict) -> dict:
    """The saved form of any accum result."""
    return {"schema": SCHEMA, "kind": kind, "config": config, "seed": seed, "result": result,
            "timings": timings, "version": package_version(),
            "platform": {"python": platform.python_version(), "numpy": np.__version__}}


def read_record(path: str | os.PathLike) -> dict:
    """Load and validate a saved record.

    Returns the record as written by ``make_record``: a dict with ``schema`` (``SCHEMA``), ``kind``
    ("measurement", "check", "verify", "bench"), ``config`` (for a measurement: quantity, family, params,
    options; ``accum measure --from PATH`` re-runs it), ``seed``, ``result`` (numbers and lists of numbers,
    all finite), ``timings`` (seconds), ``version`` and ``platform``.  Raises ``ResultError`` if the file is
    missing, truncated, not JSON, not an accum record, or holds a non-finite number (NaN / Infinity literals
    or their strings), and for anything ``inputs.read_text`` / ``loads_json`` refuse (a device or FIFO, over
    64 MiB, nested too deep, a number too long).  Nothing is ever unpickled.
    """
    path = Path(path)
    try:
        record = loads_json(read_text(path), path)
    except FileNotFoundError:
        raise ResultError(f"{path}: no such result file") from None
    except IsADirectoryError:
        raise ResultError(f"{path}: is a directory, not a result file") from None
    except json.JSONDecodeError as err:
        raise ResultError(f"{path}: corrupt or half-written result ({err})") from None
    except InputError as err:  # not a regular file, too large, too deep, a number too long (``inputs``)
        raise ResultError(str(err)) from None
    except OSError as err:
        raise ResultError(f"{path}: cannot read ({err.strerror or err})") from None
    if not isinstance(record, dict) or record.get("schema") != SCHEMA or any(k not in record for k in REQUIRED):
        raise ResultError(f"{path}: not an accum result (schema {SCHEMA} with keys {', '.join(REQUIRED)})")
    where = _nonfinite_number(record)
    if where is not None:
        raise ResultError(f"{path}: {where} is not a finite number (NaN, Infinity or out of range); "
                          "a result holds finite numbers only")
    if _has_nonfinite_string(record["result"]):
        raise ResultError(f"{path}: holds a non-finite value written as a string (from an older accum); rerun it")
    return record


def _nonfinite_number(obj: Any, where: str = "") -> str | None:
    """The key path (e.g. ``result.mean[3]``) of the first NaN or infinite float in ``obj`` (as json reads the
    literals NaN / Infinity and numbers too large for a float, such as 1e999), or None if there is none."""
    if isinstance(obj, dict):
        found = (_nonfinite_number(v, f"{where}.{k}" if where else str(k)) for k, v in obj.items())
    elif isinstance(obj, list):
        found = (_nonfinite_number(v, f"{where}[{i}]") for i, v in enumerate(obj))
    else:
        return where if isinstance(obj, float) and not math.isfinite(obj) else None
    return next((w for w in found if w is not None), None)


def _has_nonfinite_string(obj: Any) -> bool:
    if isinstance(obj, dict):
        return any(_has_nonfinite_string(v) for v in obj.values())
    if isinstance(obj, list):
        return any(_has_nonfinite_string(v) for v in obj)
    return obj in ("nan", "inf", "-inf")
