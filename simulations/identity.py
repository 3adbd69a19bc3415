"""What a result depends on, as hashes: the canonical JSON and sha256 ``digest`` of a config, the seed of a
job (``job_seed``: from the root seed and the job's own config, never its position), and the code version
(``code_identity``: package versions and the sha256 of the source files a result depends on).

A sweep job's result file is named by ``digest(job_key(...))`` (``simulations.sweep``); ``accum verify``
seeds each check from ``config_words`` of its identity and keys its cache the same way (``accum.report``).
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import scipy

from .params import ParamError
from .results import jsonable, package_version


def canonical_json(obj: Any) -> str:
    """Sorted keys, no whitespace, strict JSON (numpy values converted by ``jsonable``)."""
    return json.dumps(jsonable(obj), sort_keys=True, separators=(",", ":"), allow_nan=False)


def digest(obj: Any) -> str:
    """sha256 hex digest of ``canonical_json(obj)``."""
    return hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()


def config_words(config: dict[str, Any]) -> tuple[int, ...]:
    """The 256-bit ``digest(config)`` as 8 unsigned 32-bit words (big-endian), a SeedSequence spawn key."""
    raw = bytes.fromhex(digest(config))
    return tuple(int.from_bytes(raw[i:i + 4], "big") for i in range(0, len(raw), 4))


def job_seed(root_seed: int, config: dict[str, Any], replicate: int) -> int:
    """The integer seed passed to ``measure`` for replicate r of a config.

    ss = SeedSequence(root_seed, spawn_key=config_words(config) + (r,)), which is exactly the r-th child of
    ``SeedSequence(root_seed, spawn_key=config_words(config)).spawn(r + 1)``;  w = ss.generate_state(4,
    uint32);  seed = sum_i w_i 2^(32 i)  (128 bits).  It depends on nothing but the root seed, the config
    and r: not on the grid's other entries, the job order, the executor or the code version.
    """
    ss = np.random.SeedSequence(root_seed, spawn_key=config_words(config) + (replicate,))
    return sum(int(w) << (32 * i) for i, w in enumerate(ss.generate_state(4, np.uint32)))


def import_closure(package: str, start: str) -> tuple[str, ...]:
    """``package.start`` and every module of ``package`` it imports by a relative import (``from .x import ...``,
    ``from . import x``), transitively, sorted: the sources its numbers can depend on within the package.

    Found by parsing (``ast``) the files in the package's folder (``importlib.util.find_spec``), nothing imported;
    absolute imports (other packages, ``accum.runtime``) are not followed.
    """
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ParamError(f"{package!r} is not a package to fingerprint")
    here = Path(list(spec.submodule_search_locations)[0])
    seen: set[str] = set()
    todo = [start]
    while todo:
        name = todo.pop()
        if name in seen or not (here / f"{name}.py").is_file():
            continue
        seen.add(name)
        for node in ast.walk(ast.parse((here / f"{name}.py").read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                todo += [node.module.split(".")[0]] if node.module else [a.name for a in node.names]
    return tuple(f"{package}.{name}" for name in sorted(seen))


def measure_modules() -> tuple[str, ...]:
    """``accum.simulations.measure`` and every module of this package it imports, transitively (``import_closure``):
    the sources a measurement's numbers can depend on; editing any other module (the CLI, this sweep driver)
    leaves results valid.
    """
    return import_closure(__package__, "measure")


def job_modules(package_modules: tuple[str, ...], family: str) -> tuple[str, ...]:
    """The modules a job depends on: the package's (``measure_modules()``), plus the module of a
    ``module:Class`` family (that file only, not what it imports)."""
    return package_modules + ((family.partition(":")[0],) if ":" in family else ())


def code_identity(modules: tuple[str, ...]) -> dict[str, str]:
    """The code version a result depends on, as seen by this process.

    {"accum": package version, "numpy": ..., "scipy": ..., "sources": digest of {module name: sha256 of
    its file}} over ``modules`` (found in this process's installation, so a worker checks its own; located, not
    imported: fingerprinting the engine must not load torch, nor keep a Ctrl-C waiting for it).
    """
    sources = {}
    for name in modules:
        path = module_file(name)
        if not path:
            raise ParamError(f"module {name!r} has no source file to fingerprint")
        sources[name] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return {"accum": package_version(), "numpy": np.__version__, "scipy": scipy.__version__,
            "sources": digest(sources)}


def module_file(name: str) -> str | None:
    """The source file of module ``name``: an imported module's ``__file__``, else where the import system would
    load it from (``importlib.util.find_spec``, which runs no code of the module itself), else by importing it."""
    module = sys.modules.get(name)
    if module is not None:
        return getattr(module, "__file__", None)
    spec = importlib.util.find_spec(name)
    if spec is not None and spec.has_location:
        return spec.origin
    return getattr(importlib.import_module(name), "__file__", None)


def job_key(config: dict[str, Any], root_seed: int, replicate: int, code: dict[str, str]) -> dict[str, Any]:
    """Everything a result depends on; its ``digest`` names the result file."""
    return jsonable({"config": config, "root_seed": root_seed, "replicate": replicate,
                     "seed": job_seed(root_seed, config, replicate), "code": code})
