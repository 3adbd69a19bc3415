"""Atomic result files and provenance shared by the probe commands."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

import torch

from accum.interrupts import scratch_paths
from accum.simulations.inputs import InputError, loads_json, read_text


def package_version() -> str:
    """``importlib.metadata.version('accum')``."""
    return importlib.metadata.version("accum")


def machine_id() -> str:
    """This machine as the runs record it: the host name and the first 8 characters of the kernel's boot id (two
    machines of one image share a host name; a reboot counts as another machine, the cautious side)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
    except OSError:
        boot = ""
    return f"{platform.node()}-{boot}" if boot else platform.node()


def provenance(threads: int, device: str) -> dict:
    """Versions and machine facts stored with every result."""
    return {"accum_version": package_version(), "torch_version": torch.__version__, "host": machine_id(),
            "python": sys.version.split()[0], "platform": platform.platform(), "threads": threads, "device": device}


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and ``os.replace``; the
    temporary file is removed if anything fails, so ``path`` is either the old file or the new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    try:
        with scratch_paths(tmp), open(tmp, "wb") as f:  # removed if a signal ends the process at once
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
            os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def json_text(obj: dict) -> str:
    """The text of a probe result file: indented JSON with sorted keys."""
    return json.dumps(obj, indent=2, sort_keys=True) + "\n"


def write_json(path: Path, obj: dict) -> None:
    """``obj`` as ``json_text`` in ``path``, atomically (``write_atomic``)."""
    write_atomic(path, json_text(obj).encode())


def read_json(path: Path) -> Any:
    """The JSON document in ``path``, read within bounds (``accum.simulations.inputs``: a regular file of at most
    64 MiB, nesting and numbers bounded); ``ValueError`` naming the file otherwise, ``OSError`` as ``open``."""
    try:
        return loads_json(read_text(path), path)
    except json.JSONDecodeError as err:
        raise InputError(f"{path}: not valid JSON ({err})") from None


def write_if_changed(path: Path, text: str) -> None:
    """``text`` into ``path`` atomically, unless the file already holds exactly that."""
    if not (path.is_file() and path.read_text() == text):
        write_atomic(path, text.encode())
