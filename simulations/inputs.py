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
  which Python refuses to convert or which no parameter range could hold.

A missing file raises ``FileNotFoundError`` as ``open`` does, so callers keep their own "no such file" messages.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

#: largest result record, probe record or cache file read (bytes)
MAX_INPUT_BYTES = 64 * 2**20
#: largest grid file read (bytes): a grid is a few lines of TOML
MAX_GRID_BYTES = 2**20
#: deepest nesting of lists and tables / objects in any input document
MAX_DEPTH = 64
#: longest integer literal (digits; 2**64 has 20) and longest float literal (characters)
MAX_INT_DIGITS, MAX_NUMBER_CHARS = 40, 400


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


def loads_json(text: str, source: str | os.PathLike) -> Any:
    """The JSON document ``text`` read from ``source`` within the bounds above; ``json.JSONDecodeError`` for bad
    syntax (callers word it), ``InputError`` naming ``source`` for a bound."""
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
    """The TOML document ``text`` read from ``source`` within the bounds above; ``tomllib.TOMLDecodeError`` for bad
    syntax, ``InputError`` naming ``source`` for a bound."""
    import tomllib

    try:
        document = tomllib.loads(text, parse_float=_float)
    except RecursionError:
        raise InputError(f"{source}: nested deeper than {MAX_DEPTH} levels") from None
    except tomllib.TOMLDecodeError:
        raise
    except ValueError as err:  # the float hook, or an integer Python will not convert (over 4300 digits)
        reason = f"an integer of more than {MAX_INT_DIGITS} digits" if "digits" in str(err) else str(err)
        raise InputError(f"{source}: {reason}") from None
    check_bounds(document, source)
    return document


def check_bounds(document: Any, source: str | os.PathLike) -> None:
    """``InputError`` naming ``source`` if ``document`` nests lists and dicts deeper than ``MAX_DEPTH`` or holds an
    integer of more than ``MAX_INT_DIGITS`` digits (walked without recursion)."""
    stack = [(document, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth >= MAX_DEPTH:
                raise InputError(f"{source}: nested deeper than {MAX_DEPTH} levels")
            stack.extend((child, depth + 1) for child in (value.values() if isinstance(value, dict) else value))
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**MAX_INT_DIGITS:
            raise InputError(f"{source}: an integer of more than {MAX_INT_DIGITS} digits")
