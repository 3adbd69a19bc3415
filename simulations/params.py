"""Declared, validated parameters for transform families and estimator options.

Every family lists its parameters as ``ParamSpec`` entries; the same entries parse command-line strings
(``--param beta=1``), check ranges, and describe the family in ``accum families``.  A value outside its
range raises ``ParamError`` naming the parameter and the allowed range; nothing is clipped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from accum.errors import ParamError

__all__ = ["ParamError"]  # raised by every check here; defined below every layer (accum.errors)


def field_error(name: str, detail: str) -> ParamError:
    """``ParamError`` "NAME DETAIL" about the one parameter ``name`` (shown as its flag on a command line)."""
    return ParamError(f"{{{name}}} {detail}", (name,))


@dataclass(frozen=True)
class ParamSpec:
    """One parameter: its type, default and allowed range.

    kind is "int", "float" or "choice".  For numbers, [lo, hi] bounds the value; ``lo_open`` /
    ``hi_open`` make the bound strict.  ``even`` requires an even integer (SO(2) planes).
    ``only_with = (other, values)``: the parameter means something only when parameter ``other`` takes one
    of ``values`` (von Mises ``kappa`` with ``law = vonmises``); ``resolve`` refuses a value other than the
    default otherwise (the default itself is accepted, so a saved config with every parameter resolves again).
    """

    name: str
    kind: str
    default: Any
    doc: str
    lo: float = -math.inf
    hi: float = math.inf
    lo_open: bool = False
    hi_open: bool = False
    choices: tuple[str, ...] = ()
    even: bool = False
    only_with: tuple[str, tuple[str, ...]] | None = None

    def allowed(self) -> str:
        """Human-readable allowed range, e.g. ``[0, 2]`` or ``one of gaussian, uniform``."""
        if self.kind == "choice":
            return "one of " + ", ".join(self.choices)
        left = "(" if self.lo_open or math.isinf(self.lo) else "["
        right = ")" if self.hi_open or math.isinf(self.hi) else "]"
        fmt = _fmt_int if self.kind == "int" else _fmt
        rng = f"{left}{fmt(self.lo)}, {fmt(self.hi)}{right}"
        if self.kind == "int":
            return ("an even integer in " if self.even else "an integer in ") + rng
        return "a finite number in " + rng

    def parse(self, text: str) -> Any:
        """Convert a command-line string to this parameter's type, then validate it."""
        try:
            if self.kind == "int":
                value: Any = _parse_int(text)
            elif self.kind == "float":
                value = _parse_float(text)
            else:
                value = str(text)
        except ValueError:
            raise ParamError(f"parameter {self.name!r}: cannot read {text!r}; allowed: {self.allowed()}") from None
        return self.validate(value)

    def validate(self, value: Any) -> Any:
        """Return ``value`` if it lies in the allowed range, else raise ``ParamError``.  A float comes back as a
        Python float with -0.0 read as 0.0 (``+ 0.0``): numpy's samplers refuse a scale whose sign bit is set."""
        if self.kind == "choice":
            if value not in self.choices:
                raise ParamError(f"parameter {self.name!r} = {value!r} is not allowed; allowed: {self.allowed()}")
            return value
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise ParamError(f"parameter {self.name!r} = {value!r} is not a number; allowed: {self.allowed()}")
        if not math.isfinite(value):
            raise ParamError(f"parameter {self.name!r} = {value!r} is not finite; allowed: {self.allowed()}")
        if self.kind == "int" and not isinstance(value, (int, np.integer)) and not float(value).is_integer():
            raise ParamError(f"parameter {self.name!r} = {value!r} is not an integer; allowed: {self.allowed()}")
        too_low = value <= self.lo if self.lo_open else value < self.lo
        too_high = value >= self.hi if self.hi_open else value > self.hi
        if too_low or too_high or (self.even and int(value) % 2):
            raise ParamError(f"parameter {self.name!r} = {value!r} is out of range; allowed: {self.allowed()}")
        return int(value) if self.kind == "int" else float(value) + 0.0


_FIELD_TYPES = {"int": int, "float": float, "choice": str}


def param_dataclass(cls: type) -> type:
    """``cls`` as a frozen dataclass whose fields are its ``PARAMS``: one field per ``ParamSpec``, in order, typed
    int / float / str (a choice) and defaulting to the spec's default -- so each parameter is declared once, by its
    spec.  Other class attributes are left as they are (annotate constants ``ClassVar``).

    Constructing it validates every field against its spec (``ParamSpec.validate``: ``ParamError`` naming the
    parameter and its range; the field keeps the validated int / float), then runs the class's own
    ``__post_init__``, if it has one."""
    own = dict(cls.__dict__.get("__annotations__", {}))
    for spec in cls.PARAMS:
        own[spec.name] = _FIELD_TYPES[spec.kind]
        setattr(cls, spec.name, spec.default)
    cls.__annotations__ = own
    cls.__post_init__ = _validating_post_init(getattr(cls, "__post_init__", None))
    return dataclass(frozen=True)(cls)


def _validating_post_init(then: Any) -> Any:
    """A dataclass ``__post_init__`` that validates each field of ``PARAMS`` and stores the validated value, then
    calls ``then(self)`` (the class's own ``__post_init__``) unless it is None."""

    def __post_init__(self) -> None:
        for spec in self.PARAMS:
            object.__setattr__(self, spec.name, spec.validate(getattr(self, spec.name)))
        if then is not None:
            then(self)

    return __post_init__


def plain_number_text(text: str) -> str:
    """``text`` if it is written as a number is on a command line -- ASCII digits, sign, point, exponent, or the words
    inf / nan, at most 400 characters -- else ``ValueError``: Python's ``int`` and ``float`` would also take digits of
    other scripts (``"８"``), underscores (``"1_0"``) and surrounding spaces, which nobody types as a number."""
    if len(text) > 400 or not text.isascii() or "_" in text or text != text.strip():
        raise ValueError(f"not a plain number: {text!r}")
    return text


def _parse_int(text: str) -> int:
    """An integer from text, exactly: ``"12345678901234567"`` as written, ``"1e3"`` as 1000 (integral floats
    below 2**53 only, where float text is exact); anything else raises ``ValueError``."""
    plain_number_text(text)
    try:
        return int(text)
    except ValueError:
        as_float = float(text)
        if not (as_float.is_integer() and abs(as_float) < 2.0**53):
            raise
        return int(as_float)


def _parse_float(text: str) -> float:
    """A float from text; ``ValueError`` unless it is a number, and for a nonzero number that underflows to 0 in
    float64 (``"1e-400"``), which is not read as 0."""
    value = float(plain_number_text(text))
    if value == 0.0 and any(ch in "123456789" for ch in text.lower().partition("e")[0]):
        raise ValueError(f"{text!r} underflows to 0")
    return value


def _fmt_int(x: float) -> str:
    return _fmt(x) if math.isinf(x) else str(int(x))


def _fmt(x: float) -> str:
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:g}"


def check_int(name: str, value: object, low: int, high: int | None = None) -> int:
    """``value`` as an int if it is an integer (Python or numpy, not a bool) in [low, high] (no upper end for
    ``high=None``); else ``ParamError`` naming ``name`` with the allowed range."""
    ok = (isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= low
          and (high is None or value <= high))
    if not ok:
        allowed = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise field_error(name, f"must be an integer {allowed}, got {value!r}")
    return int(value)


def check_bool(name: str, value: object) -> bool:
    """``value`` as a bool if it is one (Python or numpy); else ``ParamError`` naming ``name``."""
    if not isinstance(value, (bool, np.bool_)):
        raise field_error(name, f"must be True or False, got {value!r}")
    return bool(value)


def integer_option(text: str) -> int | str:
    """argparse ``type`` of every integer option: ``text`` as an int, or unchanged when it is not an integer,
    so that the option's own check (``check_int``, ``check_seed``, ``check_threads``, ...) refuses it with the
    option's allowed range instead of argparse's bare "invalid int value"."""
    try:
        return int(plain_number_text(text))
    except ValueError:
        return text


def float_option(text: str) -> float:
    """argparse ``type`` of every real-valued option: a plain number (``plain_number_text``), else argparse's one-line
    refusal "argument --budget: expected a number, got '８'"; the option's own check then tests its range."""
    import argparse

    try:
        return float(plain_number_text(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def check_seed(seed: Any, name: str = "seed") -> int:
    """``seed`` as an int if it is an integer >= 0 (what ``SeedSequence`` accepts), else ``ParamError``."""
    return check_int(name, seed, 0)


class CommandText(str):
    """A value as typed on a command line (``parse_assignments`` gives them): ``resolve`` reads it into its
    parameter's type (``ParamSpec.parse``).  A plain ``str`` given to the library is taken as it is, so a number's
    parameter refuses ``dim='16'`` (``ParamSpec.validate``)."""


def parse_assignments(items: Sequence[str] | None, option: str = "--param") -> dict[str, CommandText]:
    """Split ``["k=v", ...]`` into a dict of ``CommandText`` values; a malformed or repeated entry raises
    ``ParamError``."""
    out: dict[str, CommandText] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ParamError(f"{option} expects key=value, got {item!r}")
        if key.strip() in out:
            raise ParamError(f"{option} {key.strip()!r} given twice")
        out[key.strip()] = CommandText(value.strip())
    return out


def resolve(specs: Sequence[ParamSpec], given: dict[str, Any], owner: str) -> dict[str, Any]:
    """Defaults overlaid with ``given`` (command-line text, ``CommandText``, is parsed), every value validated.

    Unknown names raise ``ParamError`` listing the known ones.
    """
    by_name = {s.name: s for s in specs}
    unknown = sorted(set(given) - set(by_name))
    if unknown:
        raise ParamError(f"{owner}: unknown parameter(s) {', '.join(unknown)}; known: {', '.join(by_name)}")
    values = {}
    for spec in specs:
        if spec.name in given:
            raw = given[spec.name]
            values[spec.name] = spec.parse(raw) if isinstance(raw, CommandText) else spec.validate(raw)
        else:
            values[spec.name] = spec.default
    for name in given:
        spec = by_name[name]
        if spec.only_with and values[name] != spec.default and values[spec.only_with[0]] not in spec.only_with[1]:
            other, allowed = spec.only_with
            raise ParamError(f"{owner}: parameter {name!r} = {values[name]!r} applies only with {other} = "
                             f"{' or '.join(allowed)}, not {other} = {values[other]!r}; leave it out")
    return values


#: the most memory one command may plan to use (bytes); larger work is refused before it starts
MAX_MEMORY_BYTES = 8 * 2**30

#: flops of one numpy call in long dense work (QR, expm, d x d products over many samples): Ctrl-C and SIGTERM are
#: acted on between calls, so long work is cut into calls of about this size (a few hundredths of a second)
PIECE_FLOPS = 5e7


#: largest d of steps given as dense matrices: each step's d x d product (or QR) is one numpy call, ~0.2 s at
#: d = 1024 but ~7 s at 4096 on one core, and a signal is acted on only between calls
MAX_DENSE_DIM = 1024


def pieces(count: int, flops_each: float) -> list[slice]:
    """Slices of ``range(count)`` of about ``PIECE_FLOPS`` work each (at least one item), in order."""
    step = max(1, int(PIECE_FLOPS // max(flops_each, 1.0)))
    return [slice(start, min(start + step, count)) for start in range(0, count, step)]


def check_memory(estimate_bytes: float, option: str, value: Any, owner: str, fits: str) -> None:
    """Refuse planned work whose estimated peak memory exceeds ``MAX_MEMORY_BYTES``.

    ``option`` = ``value`` is the setting that drives the estimate; ``fits`` says how to make it fit.
    """
    if estimate_bytes > MAX_MEMORY_BYTES:
        raise ParamError(f"{owner}: {option} = {value} would need about {estimate_bytes / 2**30:.3g} GiB of memory "
                         f"(limit {MAX_MEMORY_BYTES / 2**30:g} GiB, MAX_MEMORY_BYTES); {fits}")
