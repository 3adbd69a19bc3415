"""Reading input files within bounds: result records (``--from``, a sweep's results, caches), grid files, probe runs.

Every file a command reads goes through ``read_text`` and ``loads_json`` / ``loads_toml``, which refuse with one
``InputError`` naming the file (callers add the option):

* anything but a regular file -- a device such as /dev/zero, a FIFO, a socket, a directory -- before reading a byte
  (opened non-blocking, so a FIFO without a writer cannot hang the command);
* a file over its size cap (``MAX_INPUT_BYTES`` for records, ``MAX_GRID_BYTES`` for grid files), read no further
  than the cap even if it grows meanwhile;
* text that is not UTF-8;
* a document nested deeper than ``MAX_DEPTH`` (Python's parsers would recurse until ``RecursionError``);
* a number literal longer than ``MAX_INT_DIGITS`` digits (an integer) or ``MAX_NUMBER_CHARS`` characters (a float),
  which Python refuses to convert or which no parameter range could hold;
* a JSON document of more than ``MAX_JSON_ITEMS`` items (values and keys), a TOML document of more than ``MAX_TOML_KEYS``
  keys or with a dotted key of more than ``MAX_DEPTH`` parts.

Depth, counts, dotted keys and (TOML) integer lengths are checked on the text, before the parser runs
(``prescan_json``, ``prescan_toml``): the parsers' memory grows with the values (64 MiB of ``[],`` is 3 GB of
Python lists) and tomllib's with the square of a dotted key's length (8,000 parts: 259 MB peak).  The scan masks
strings (and TOML comments) with one regular expression, then counts characters, in time linear in the text.

A missing file raises ``FileNotFoundError`` as ``open`` does, so callers keep their own "no such file" messages.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import numpy as np

#: largest result record, probe record or cache file read (bytes)
MAX_INPUT_BYTES = 64 * 2**20
#: largest grid file read (bytes): a grid is a few lines of TOML
MAX_GRID_BYTES = 2**20
#: deepest nesting of lists and tables / objects in any input document
MAX_DEPTH = 64
#: longest integer literal (digits; 2**64 has 20) and longest float literal (characters)
MAX_INT_DIGITS, MAX_NUMBER_CHARS = 40, 400
#: most items of one JSON document, counted on its text outside strings: commas plus opening brackets plus one (at
#: least its values and keys; ~0.3 GB of Python objects at most).  The committed probe sweep.json has 12,117;
#: 64 MiB of full-precision floats, the most ``MAX_INPUT_BYTES`` can hold, 3.4 million
MAX_JSON_ITEMS = 2**22
#: most keys (key = value pairs) in one TOML document; a grid has a few dozen
MAX_TOML_KEYS = 2**14

#: a JSON string, escapes included
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
#: a TOML string (multi-line basic and literal, basic, literal) or comment
_TOML_SKIP = re.compile(r'"""(?:[^\\]|\\.)*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*', re.S)
#: a run of bare-key characters, dots and blanks: where a dotted key lies
_KEY_RUN = re.compile(r"[A-Za-z0-9_\-. \t]+")
#: a decimal integer literal (not part of a float, a date or a bare key)
_TOML_INT = re.compile(r"(?<![\w.:+-])[+-]?[0-9][0-9_]*(?![\w.:])")


class InputError(ValueError):
    """An input file that cannot be read within bounds; the message starts with the file's path."""


def read_text(path: str | os.PathLike, limit: int = MAX_INPUT_BYTES) -> str:
    """The UTF-8 text of the regular file ``path`` (at most ``limit`` bytes), else ``InputError`` (module docstring);
    ``FileNotFoundError`` and ``IsADirectoryError`` as ``open`` raises them."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        raise
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror or err})") from None
    with os.fdopen(fd, "rb") as fh:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(21, "Is a directory", str(path))
        if not stat.S_ISREG(mode):
            raise InputError(f"{path}: not a regular file (a device, FIFO or socket); give a file")
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise InputError(f"{path}: larger than {limit // 2**20} MiB, the most an input file may have")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(text.lstrip('-'))} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _float(text: str) -> float:
    if len(text) > MAX_NUMBER_CHARS:
        raise ValueError(f"a number of {len(text)} characters (at most {MAX_NUMBER_CHARS})")
    return float(text)


def masked(text: str, pattern: re.Pattern) -> str:
    """``text`` with every match of ``pattern`` (strings, comments) replaced by ``s`` and the newlines it held, so
    that what is left is the document's structure, on the same lines."""
    return pattern.sub(lambda m: "s" + "\n" * m.group().count("\n"), text)


def bracket_depth(structure: str, chunk: int = 2**22) -> int:
    """The deepest nesting of [ and { in ``structure`` (strings already masked): the running maximum of
    #open - #close, computed on chunks of ``chunk`` characters (numpy; at most ~20 bytes a character at a time)."""
    deepest = level = 0
    for start in range(0, len(structure), chunk):
        b = np.frombuffer(structure[start:start + chunk].encode("utf-8"), dtype=np.uint8)
        step = ((b == ord("[")) | (b == ord("{"))).astype(np.int32) - ((b == ord("]")) | (b == ord("}")))
        running = level + np.cumsum(step, dtype=np.int64)
        if running.size:
            deepest, level = max(deepest, int(running.max())), int(running[-1])
    return deepest


def line_of(text: str, position: int) -> int:
    """1-based line number of ``position`` in ``text``."""
    return text.count("\n", 0, position) + 1


def prescan_json(text: str, source: str | os.PathLike) -> None:
    """Before ``json.loads``: ``InputError`` naming ``source`` for more than ``MAX_JSON_ITEMS`` items (commas +
    opening brackets + 1, outside strings) or nesting deeper than ``MAX_DEPTH``.  Strings are masked only when the
    raw counts could exceed a bound."""
    opening = text.count("[") + text.count("{")
    if opening <= MAX_DEPTH and opening + text.count(",") + 1 <= MAX_JSON_ITEMS:
        return
    structure = masked(text, _JSON_STRING)
    items = structure.count(",") + structure.count("[") + structure.count("{") + 1
    if items > MAX_JSON_ITEMS:
        raise InputError(f"{source}: {items} items (commas and opening brackets, a bound on its values and keys); "
                         f"at most {MAX_JSON_ITEMS} (MAX_JSON_ITEMS)")
    if bracket_depth(structure) > MAX_DEPTH:
        raise InputError(f"{source}: nested deeper than {MAX_DEPTH} levels")


def prescan_toml(text: str, source: str | os.PathLike) -> None:
    """Before ``tomllib.loads``: ``InputError`` naming ``source`` (and the line) for nesting deeper than
    ``MAX_DEPTH`` (brackets of arrays and inline tables, or parts of a dotted key), more than ``MAX_TOML_KEYS``
    keys, or a decimal integer of more than ``MAX_INT_DIGITS`` digits (named by the key on its line)."""
    structure = masked(text, _TOML_SKIP)
    for run in _KEY_RUN.finditer(structure):
        if run.group().count(".") >= MAX_DEPTH:
            raise InputError(f"{source}: line {line_of(structure, run.start())}: a dotted key of "
                             f"{run.group().count('.') + 1} parts; at most {MAX_DEPTH} (each part is a level of nesting)")
    if bracket_depth(structure) > MAX_DEPTH:
        raise InputError(f"{source}: nested deeper than {MAX_DEPTH} levels")
    keys = structure.count("=")
    if keys > MAX_TOML_KEYS:
        raise InputError(f"{source}: {keys} keys; at most {MAX_TOML_KEYS} (MAX_TOML_KEYS)")
    for number in _TOML_INT.finditer(structure):
        digits = sum(ch.isdigit() for ch in number.group())
        if digits > MAX_INT_DIGITS:
            line = line_of(structure, number.start())
            column = number.start() - structure.rfind("\n", 0, number.start()) - 1
            key, equals, _ = structure.splitlines()[line - 1].partition("=")
            named = equals and len(key) < column  # the key on the number's line, left of it
            where = f" ({text.splitlines()[line - 1].partition('=')[0].strip()[:60]})" if named else ""
            raise InputError(f"{source}: line {line}{where}: an integer of {digits} digits; at most {MAX_INT_DIGITS}")


def loads_json(text: str, source: str | os.PathLike) -> Any:
    """The JSON document ``text`` read from ``source`` within the bounds above (``prescan_json`` first);
    ``json.JSONDecodeError`` for bad syntax (callers word it), ``InputError`` naming ``source`` for a bound."""
    prescan_json(text, source)
    try:
        document = json.loads(text, parse_int=_int, parse_float=_float)
    except RecursionError:
        raise InputError(f"{source}: nested deeper than {MAX_DEPTH} levels") from None
    except json.JSONDecodeError:
        raise
    except ValueError as err:  # from the number hooks
        raise InputError(f"{source}: {err}") from None
    check_bounds(document, source)
    return document


def loads_toml(text: str, source: str | os.PathLike) -> dict:
    """The TOML document ``text`` read from ``source`` within the bounds above (``prescan_toml`` first);
    ``tomllib.TOMLDecodeError`` for bad syntax, ``InputError`` naming ``source`` for a bound."""
    import tomllib

    prescan_toml(text, source)
    try:
        document = tomllib.loads(text, parse_float=_float)
    except RecursionError:
        raise InputError(f"{source}: nested deeper than {MAX_DEPTH} levels") from None
    except tomllib.TOMLDecodeError:
        raise
    except ValueError as err:  # the float hook (decimal integers are bounded by ``prescan_toml``)
        raise InputError(f"{source}: {err}") from None
    check_bounds(document, source)
    return document


def check_bounds(document: Any, source: str | os.PathLike) -> None:
    """``InputError`` naming ``source`` if ``document`` nests lists and dicts deeper than ``MAX_DEPTH`` or holds an
    integer of more than ``MAX_INT_DIGITS`` digits (named by its key path, e.g. ``family[0].dim``; walked without
    recursion)."""
    stack = [(document, 0, "")]
    while stack:
        value, depth, where = stack.pop()
        if isinstance(value, (dict, list)):
            if depth >= MAX_DEPTH:
                raise InputError(f"{source}: nested deeper than {MAX_DEPTH} levels")
            children = ((f"{where}.{k}" if where else str(k), v) for k, v in value.items()) if isinstance(value, dict) \
                else ((f"{where}[{i}]", v) for i, v in enumerate(value))
            stack.extend((child, depth + 1, path) for path, child in children)
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**MAX_INT_DIGITS:
            raise InputError(f"{source}: {where or 'the document'}: an integer of more than {MAX_INT_DIGITS} digits")
