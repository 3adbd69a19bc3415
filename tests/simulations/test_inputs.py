"""Input files are bounded on their text, before any parser runs (``simulations.inputs``): depth, dotted-key length,
key and item counts, integer length -- each at its bound (read) and one past it (one ``InputError`` naming the file,
the line where there is one, and the bound).  The commands are run with their address space capped, on the inputs
that drove the parsers to gigabytes."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest

from accum.simulations import inputs
from accum.simulations.inputs import (MAX_DEPTH, MAX_INT_DIGITS, MAX_JSON_ITEMS, MAX_TOML_KEYS, InputError,
                                      loads_json, loads_toml)
from conftest import ENV

GRID_HEAD = 'quantity = "coherence"\nfamily = "rope"\nseeds = 1\nroot_seed = 0\noutput = "out"\n'


def toml_cases() -> dict[str, tuple[str, str, str | None]]:
    """name -> (text at the bound, text one past it, fragment of the refusal)."""
    nested = lambda n: "x = " + "[" * n + "]" * n + "\n"  # noqa: E731
    inline = lambda n: "x = " + "{a = " * (n - 1) + "{}" + "}" * (n - 1) + "\n"  # noqa: E731
    return {
        "dotted key": ("a" + ".a" * (MAX_DEPTH - 1) + " = 1\n", "a" + ".a" * MAX_DEPTH + " = 1\n",
                       f"line 1: a dotted key of {MAX_DEPTH + 1} parts; at most {MAX_DEPTH}"),
        # a header of 63 parts makes a table at depth 63; one of 64 is refused after parsing, for its nesting
        "dotted table header": ("[" + "a." * (MAX_DEPTH - 2) + "a]\n", "[" + "a." * MAX_DEPTH + "a]\n",
                                f"a dotted key of {MAX_DEPTH + 1} parts"),
        "quoted dotted key": ('"a"' + '."a"' * (MAX_DEPTH - 1) + " = 1\n", '"a"' + '."a"' * MAX_DEPTH + " = 1\n",
                              f"a dotted key of {MAX_DEPTH + 1} parts"),
        "arrays": (nested(MAX_DEPTH - 1), nested(MAX_DEPTH + 1), f"nested deeper than {MAX_DEPTH} levels"),
        "inline tables": (inline(MAX_DEPTH - 1), inline(MAX_DEPTH + 1), f"nested deeper than {MAX_DEPTH} levels"),
        "keys": ("".join(f"k{i} = 1\n" for i in range(MAX_TOML_KEYS)),
                 "".join(f"k{i} = 1\n" for i in range(MAX_TOML_KEYS + 1)), f"{MAX_TOML_KEYS + 1} keys; at most"),
        "integer": ("[[family]]\nname = 'rope'\ndim = " + "9" * MAX_INT_DIGITS + "\n",
                    "[[family]]\nname = 'rope'\ndim = " + "9" * (MAX_INT_DIGITS + 1) + "\n",
                    f"line 3 (dim): an integer of {MAX_INT_DIGITS + 1} digits; at most {MAX_INT_DIGITS}"),
        "integer beyond Python's conversion": ("dim = 1\n", "dim = [1,\n  -" + "9" * 5000 + "]\n",
                                               "line 2: an integer of 5000 digits"),
    }


@pytest.mark.parametrize("case", sorted(toml_cases()))
def test_toml_bounds(case):
    fits, past, fragment = toml_cases()[case]
    loads_toml(fits, "g.toml")
    with pytest.raises(InputError) as err:
        loads_toml(past, "g.toml")
    assert str(err.value).startswith("g.toml: ") and fragment in str(err.value), str(err.value)


def test_toml_text_in_strings_and_comments_is_not_structure():
    """Dots, brackets, '=' and digits inside strings or comments count for nothing; dates, floats and times are not
    integers."""
    many = "a." * 10 * MAX_DEPTH
    loads_toml(f'x = "{many}"\ny = \'{"[" * 200}\'\nz = """\n{"= " * MAX_TOML_KEYS}\n"""  # {many}{"[" * 200}\n'
               f"w = '''{'9' * 100}'''\n", "g.toml")
    loads_toml("d = 1979-05-27T07:32:00.999999-07:00\nf = 3.1415926535897932384626433832795028841971693993751\n",
               "g.toml")


def test_toml_integer_named_by_its_key_path_after_parsing():
    """A hexadecimal integer (no decimal digits to count on the text) is caught after parsing, by its key path."""
    with pytest.raises(InputError, match=r"g.toml: family\[0\].dim: an integer of more than 40 digits"):
        loads_toml("[[family]]\nname = 'rope'\ndim = 0x" + "f" * 40 + "\n", "g.toml")


def test_json_bounds(monkeypatch):
    """Depth at the real bound; the item count at a bound of 1,000 (the real one, 4 million items, is what the
    capped command below is refused for)."""
    loads_json("[" * MAX_DEPTH + "]" * MAX_DEPTH, "r.json")
    with pytest.raises(InputError, match=f"r.json: nested deeper than {MAX_DEPTH} levels"):
        loads_json("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "r.json")
    monkeypatch.setattr(inputs, "MAX_JSON_ITEMS", 1000)
    at_bound = '{"a": [' + ",".join(["0.5"] * 998) + "]}"  # 997 commas + 2 opening brackets + 1
    assert len(loads_json(at_bound, "r.json")["a"]) == 998
    with pytest.raises(InputError, match="r.json: 1001 items .* at most 1000"):
        loads_json('{"a": [' + ",".join(["0.5"] * 999) + "]}", "r.json")
    loads_json('["' + "[,{" * 1000 + '"]', "r.json")  # brackets and commas in a string are text


def test_bracket_depth_across_chunks():
    text = "[" * 40 + "]" * 30 + "{" * 50 + "}" * 60
    assert inputs.bracket_depth(text, chunk=7) == inputs.bracket_depth(text) == 60


def capped(argv: list[str], cwd, gib: float = 2.0) -> subprocess.CompletedProcess:
    """``accum ARGV`` with its address space capped at ``gib`` GiB (what the unbounded parsers exceeded)."""
    limit = int(gib * 2**30)
    return subprocess.run([sys.executable, "-m", "accum.cli", *argv], cwd=cwd, env=ENV, capture_output=True,
                          text=True, timeout=120,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))


def test_commands_refuse_the_memory_bombs_under_a_memory_cap(tmp_path):
    """A 200 KB grid line of 100,000 dotted keys (tomllib: 3.9 GB) and a 60 MiB record of 21 million empty lists
    (json: 3 GB): one line naming the file and the bound, exit 2, with the process capped at 2 GiB."""
    grid = tmp_path / "g.toml"
    grid.write_text(GRID_HEAD + "a" + ".a" * 100_000 + " = 1\n")
    done = capped(["sweep", str(grid), "--dry-run"], tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert f"{grid}: line 6: a dotted key of 100001 parts; at most {MAX_DEPTH}" in done.stderr, done.stderr
    record = tmp_path / "r.json"
    record.write_text("[" + "[]," * 21_000_000 + "[]]")
    done = capped(["measure", "--from", str(record)], tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert str(record) in done.stderr and f"at most {MAX_JSON_ITEMS}" in done.stderr, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.toml", "r.json"]
