"""What a result depends on, as hashes: the canonical JSON and sha256 ``digest`` of a config, the seed of a
job (``job_seed``: from the root seed and the job's own config, never its position), and the code version
(``code_identity``: package versions and the sha256 of the source a result depends on -- whole files, except the
angle laws' module, ``BY_CLASS``, whose classes count one by one: a saved measurement of one law stays valid when
another law is edited or added).

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


#: modules whose top-level classes a job's key fingerprints one by one (``code_identity``, ``job_modules``): the angle
#: laws, so that editing one law leaves every other law's saved results valid and adding a law leaves all of them
#: valid.  Such a module's code outside its classes only registers and dispatches to them.
BY_CLASS = (f"{__package__}.laws",)


def job_modules(package_modules: tuple[str, ...], family: str, classes: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The source units a job depends on (``code_identity``): the package's modules (``measure_modules()``), each
    module of ``BY_CLASS`` narrowed to its code outside its classes ("M:") and the ``classes`` of it the job's
    family draws with ("M:C", ``families.drawn_classes``), plus the module of a ``module:Class`` family (that file
    only, not what it imports)."""
    units: list[str] = []
    for module in package_modules:
        if module in BY_CLASS:
            units += [f"{module}:", *sorted(c for c in classes if c.partition(":")[0] == module)]
        else:
            units.append(module)
    return (*units, *((family.partition(":")[0],) if ":" in family else ()))


def code_identity(modules: tuple[str, ...]) -> dict[str, str]:
    """The code version a result depends on, as seen by this process.

    {"accum": package version, "numpy": ..., "scipy": ..., "sources": digest of {unit: sha256 of its source}} over
    the source units ``modules`` (``unit_source``: a whole module "M", its code outside its top-level classes "M:",
    or one class "M:C"), found in this process's installation, so a worker checks its own; located, not imported:
    fingerprinting the engine must not load torch, nor keep a Ctrl-C waiting for it.
    """
    sources = {unit: hashlib.sha256(unit_source(unit)).hexdigest() for unit in modules}
    return {"accum": package_version(), "numpy": np.__version__, "scipy": scipy.__version__,
            "sources": digest(sources)}


def unit_source(unit: str) -> bytes:
    """What a unit stands for: "M", module M's file, byte for byte; "M:", the syntax tree (``ast.dump``: comments
    and layout left out) of its statements outside its top-level class definitions; "M:C", the syntax tree of its
    top-level class C (decorators included) together with those of the module's other top-level classes that C
    names (its base classes, ...), transitively, in file order.  ``ParamError`` for a module without a source file
    or a class it does not define."""
    module, colon, cls = unit.partition(":")
    path = module_file(module)
    if not path:
        raise ParamError(f"module {module!r} has no source file to fingerprint")
    text = Path(path).read_bytes()
    if not colon:
        return text
    body = ast.parse(text).body
    classes = {node.name: node for node in body if isinstance(node, ast.ClassDef)}
    if not cls:
        return "\n".join(ast.dump(node) for node in body if not isinstance(node, ast.ClassDef)).encode("utf-8")
    if cls not in classes:
        raise ParamError(f"module {module!r} has no top-level class {cls!r} to fingerprint")
    wanted, todo = set(), [cls]
    while todo:
        name = todo.pop()
        if name not in wanted:
            wanted.add(name)
            todo += [n.id for n in ast.walk(classes[name]) if isinstance(n, ast.Name) and n.id in classes]
    return "\n".join(ast.dump(node) for node in body if getattr(node, "name", None) in wanted
                     and isinstance(node, ast.ClassDef)).encode("utf-8")


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
