"""Grid files of ``accum sweep`` (TOML; the format is documented in ``simulations/SWEEP.md``): ``load_grid``
reads one into a ``Grid`` -- one quantity, family tables whose list-valued entries are axes, estimator-option
axes, a replicate count and a root seed -- and refuses a bad one with ``GridError`` naming the entry.

Only the file's shape is checked here; ``simulations.sweep.plan`` validates every job the axes give.
"""

from __future__ import annotations

import math
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .inputs import MAX_GRID_BYTES, InputError, loads_toml, read_text
from .measure import QUANTITIES
from .params import ParamError

GRID_KEYS = ("quantity", "family", "options", "seeds", "root_seed", "output")
REQUIRED_KEYS = ("quantity", "family", "seeds", "root_seed", "output")
MAX_REPLICATES = 100_000   # replicates per config (``seeds``)
MAX_JOBS = 1_000_000       # jobs per grid, counted before any job is planned


class GridError(ParamError):
    """A grid file is unreadable or names an invalid job; the message names the grid entry."""


@dataclass(frozen=True)
class FamilyAxes:
    """One ``[[family]]`` table: the family name and its parameter axes (name -> values, file order)."""

    name: str
    axes: dict[str, tuple]


@dataclass(frozen=True)
class Grid:
    """A parsed grid file.  ``replicates`` are replicate indices r (``seeds = 3`` gives (0, 1, 2))."""

    source: str
    quantity: str
    families: tuple[FamilyAxes, ...]
    options: dict[str, tuple]
    replicates: tuple[int, ...]
    root_seed: int
    output: Path


def load_grid(path: str | os.PathLike) -> Grid:
    """Read and check a grid file; relative ``output`` paths are taken from the grid file's directory."""
    path = Path(path)
    try:
        data = loads_toml(read_text(path, MAX_GRID_BYTES), path)
    except FileNotFoundError:
        raise GridError(f"{path}: no such grid file") from None
    except IsADirectoryError:
        raise GridError(f"{path}: is a directory; give a grid file") from None
    except InputError as err:  # a device or FIFO, over 1 MiB, not UTF-8, nested too deep, a number too long
        raise GridError(f"grid file {err}") from None
    except OSError as err:
        raise GridError(f"{path}: cannot read the grid file ({err.strerror or err})") from None
    except tomllib.TOMLDecodeError as err:
        raise GridError(f"{path}: not a valid TOML file ({err})") from None
    return parse_grid(data, str(path), path.parent)


def parse_grid(data: dict[str, Any], source: str, base: Path) -> Grid:
    """Check the top-level keys of a grid document and parse each; errors name ``source`` and the key."""
    unknown = [k for k in data if k not in GRID_KEYS]
    if unknown:
        raise GridError(f"{source}: unknown key {unknown[0]!r}; known: {', '.join(GRID_KEYS)}")
    missing = [k for k in REQUIRED_KEYS if k not in data]
    if missing:
        raise GridError(f"{source}: missing key {missing[0]!r}; required: {', '.join(REQUIRED_KEYS)}")
    quantity = data["quantity"]
    if not isinstance(quantity, str) or quantity not in QUANTITIES:
        raise GridError(f"{source}: quantity: expected one of {', '.join(QUANTITIES)}, got {quantity!r}")
    output = data["output"]
    if not isinstance(output, str) or not output.strip():
        raise GridError(f"{source}: output: expected a directory path, got {output!r}")
    families = parse_families(data["family"], source)
    options = parse_axes(data.get("options", {}), "options", source)
    replicates = parse_replicates(data["seeds"], source)
    jobs = job_count(families, options, replicates)
    if jobs > MAX_JOBS:
        raise GridError(f"{source}: the grid has {jobs} jobs; at most {MAX_JOBS} are allowed (split it into "
                        "several grids)")
    return Grid(source, quantity, families, options, replicates, parse_root_seed(data["root_seed"], source),
                base / output)


def job_count(families: tuple[FamilyAxes, ...], options: dict[str, tuple], replicates: tuple[int, ...]) -> int:
    """Number of jobs, without expanding them: (sum_f prod_a |axis_a of f|) * prod_o |option axis o| * |replicates|."""
    points = sum(math.prod(len(v) for v in fam.axes.values()) for fam in families)
    return points * math.prod(len(v) for v in options.values()) * len(replicates)


def parse_families(value: Any, source: str) -> tuple[FamilyAxes, ...]:
    """``family = "name"``, one ``[family]`` table or several ``[[family]]`` tables, each with a ``name``."""
    tables = [{"name": value}] if isinstance(value, str) else [value] if isinstance(value, dict) else value
    if not isinstance(tables, list) or not tables:
        raise GridError(f"{source}: family: expected a family name or [[family]] tables with a name")
    families = []
    for i, table in enumerate(tables):
        where = f"family[{i}]"
        if not isinstance(table, dict) or not isinstance(table.get("name"), str) or not table["name"]:
            raise GridError(f"{source}: {where}: expected a table with a family name, e.g. name = \"householder\"")
        axes = {k: v for k, v in table.items() if k != "name"}
        families.append(FamilyAxes(table["name"], parse_axes(axes, where, source)))
    return tuple(families)


def parse_axes(table: Any, where: str, source: str) -> dict[str, tuple]:
    """Table of parameters -> axes: a list is an axis, a scalar a one-point axis.

    Values must be numbers or strings (booleans are refused: use 0/1); an empty list or a repeated value is
    an error naming ``where.key``.
    """
    if not isinstance(table, dict):
        raise GridError(f"{source}: {where}: expected a table of parameters")
    axes = {}
    for name, value in table.items():
        entry = f"{where}.{name}"
        values = tuple(value) if isinstance(value, list) else (value,)
        if not values:
            raise GridError(f"{source}: {entry}: empty axis (give at least one value)")
        for v in values:
            if isinstance(v, bool) or not isinstance(v, (int, float, str)):
                raise GridError(f"{source}: {entry}: {v!r} is not a number or a string")
        if len(set(values)) < len(values):
            raise GridError(f"{source}: {entry}: repeated value in {list(values)!r}")
        axes[name] = values
    return axes


def parse_replicates(value: Any, source: str) -> tuple[int, ...]:
    """``seeds = n`` -> replicates 0..n-1; ``seeds = [r, ...]`` -> those replicate indices (distinct, >= 0).

    At most ``MAX_REPLICATES`` replicates either way.
    """
    expected = (f"{source}: seeds: expected a count in [1, {MAX_REPLICATES}] or a non-empty list of distinct "
                "integers >= 0")
    if isinstance(value, int) and not isinstance(value, bool):
        if not 1 <= value <= MAX_REPLICATES:
            raise GridError(f"{expected}, got {value}")
        return tuple(range(value))
    if isinstance(value, list) and len(value) > MAX_REPLICATES:
        raise GridError(f"{source}: seeds: expected at most {MAX_REPLICATES} replicate indices, "
                        f"got a list of {len(value)}")
    ok = isinstance(value, list) and value and all(isinstance(r, int) and not isinstance(r, bool) and r >= 0
                                                   for r in value)
    if not ok or len(set(value)) < len(value):
        raise GridError(f"{expected}, got {value!r}")
    return tuple(value)


def parse_root_seed(value: Any, source: str) -> int:
    """``root_seed``: an integer >= 0 (TOML integers are < 2^63)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise GridError(f"{source}: root_seed: expected an integer >= 0, got {value!r}")
    return value
