"""Result keys (``simulations.identity``): a module of ``BY_CLASS`` (the angle laws) is fingerprinted class by class,
so editing one law changes the keys of that law's jobs only, and adding a law changes none."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from accum.simulations import identity, sweep
from accum.simulations.families import make_family
from accum.simulations.params import ParamError

MODULE = '''
"""A module fingerprinted by class."""
SCALE = 2

def helper(x):
    return SCALE * x

class Base:
    def twice(self, x):
        return helper(x)

def decorate(cls):
    return cls

@decorate
class A(Base):
    def value(self):
        return self.twice(1)

class B(Base):
    def value(self):
        return 3

class Alone:
    pass
'''
UNITS = ("unitmod", "unitmod:", "unitmod:A", "unitmod:B", "unitmod:Alone")


def digests(folder, text: str) -> dict[str, str]:
    (folder / "unitmod.py").write_text(textwrap.dedent(text))
    return {unit: identity.code_identity((unit,))["sources"] for unit in UNITS}


@pytest.mark.parametrize("edit, changed", [
    (("return self.twice(1)", "return self.twice(2)"), {"unitmod", "unitmod:A"}),
    (("@decorate\nclass A", "@decorate\n@decorate\nclass A"), {"unitmod", "unitmod:A"}),
    (("return 3", "return 3  # a comment"), {"unitmod"}),                                     # not code
    (("return helper(x)", "return helper(x) + 0"), {"unitmod", "unitmod:A", "unitmod:B"}),  # a base class
    (("return 3", "return 4"), {"unitmod", "unitmod:B"}),
    (("SCALE = 2", "SCALE = 3"), {"unitmod", "unitmod:"}),                                    # code outside classes
    (("class Alone:", "class Added:\n    pass\n\nclass Alone:"), {"unitmod"}),                  # a new class
])
def test_a_class_unit_changes_with_its_own_source_and_its_bases_only(edit, changed, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    before = digests(tmp_path, MODULE)
    assert len(set(before.values())) == len(UNITS)
    after = digests(tmp_path, MODULE.replace(*edit))
    assert {unit for unit in UNITS if after[unit] != before[unit]} == changed


def test_a_unit_of_a_class_the_module_lacks_is_refused(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    digests(tmp_path, MODULE)
    with pytest.raises(ParamError, match="no top-level class 'Missing'"):
        identity.code_identity(("unitmod:Missing",))


GRID = '''quantity = "coherence"
root_seed = 3
seeds = 2
output = "out"
[options]
steps = 3
samples = 8
[[family]]
name = "so2-accumulated"
dim = 4
law = ["gaussian", "vonmises", "token"]
[[family]]
name = "householder"
dim = 4
'''


def keys_by_law(tmp_path) -> dict[str, set[str]]:
    (tmp_path / "grid.toml").write_text(GRID)
    jobs = sweep.plan(sweep.load_grid(tmp_path / "grid.toml"))
    out: dict[str, set[str]] = {}
    for job in jobs:
        out.setdefault(job.params.get("law", job.family), set()).add(job.hash)
    return out


NEW_LAW = """
@param_dataclass
class TwoPoint(AngleLaw):
    \"\"\"theta = +-a with probability 1/2 each: phi(k) = cos(k a).\"\"\"
    name: ClassVar[str] = "two-point"
    PARAMS: ClassVar[tuple[ParamSpec, ...]] = (ParamSpec("a", "float", 1.0, "half-width", lo=0.0, hi=1e6),)

    def sample(self, rng, shape, dim):
        return self.a * rng.choice([-1.0, 1.0], size=shape)

    def characteristic(self, k, dim):
        return np.full(dim // 2, np.cos(k * self.a), dtype=complex)


"""


@pytest.mark.parametrize("edit, changed", [
    (("rng.vonmises(self.mu, self.kappa, shape)", "rng.vonmises(self.mu, self.kappa, shape) + 0.0"), {"vonmises"}),
    (("    return True\n", "    return 1 == 1\n"), {"gaussian", "vonmises", "token"}),  # the base class AngleLaw
    (("MAX_TABLE_NUMBERS = 50_000_000", "MAX_TABLE_NUMBERS = 50_000_001"),             # code outside the classes
     {"gaussian", "vonmises", "token", "householder"}),
    (("#: every law of this module", NEW_LAW + "#: every law of this module"), set()),   # a new law
    (("(ratios of exponentially", "(ratios of two exponentially"), {"vonmises"}),       # its docstring is code too
])
def test_editing_one_law_changes_the_keys_of_its_jobs_only(edit, changed, tmp_path, monkeypatch):
    """A sweep's (and the figures') saved results are named by their keys: an edit of the von Mises class leaves
    every other law's and family's results valid, a new law leaves all of them valid; the laws' base class reaches
    every job that draws from a law, their shared code every job.  The edit is made to a copy of laws.py that the
    fingerprint reads in place of the installed one (``identity.module_file``)."""
    before = keys_by_law(tmp_path)
    laws_name = identity.BY_CLASS[0]
    source = Path(identity.module_file(laws_name)).read_text()
    assert source.count(edit[0]) == 1
    edited = tmp_path / "laws.py"
    edited.write_text(source.replace(*edit))
    located = identity.module_file
    monkeypatch.setattr(identity, "module_file", lambda name: str(edited) if name == laws_name else located(name))
    after = keys_by_law(tmp_path)
    assert {law for law in before if after[law] != before[law]} == changed
    assert all(not (after[law] & before[law]) for law in changed)


def test_a_result_records_its_own_laws_parameters_only():
    """What a so2-accumulated result records (its config) holds its law's parameters, not the other laws': a law
    added with new parameters leaves every saved result's config as it was."""
    assert make_family("so2-accumulated", dim=4, law="vonmises").params() == {"dim": 4, "law": "vonmises", "mu": 0.0,
                                                                             "kappa": 4.0}
    assert set(make_family("so2-accumulated", dim=4).params()) == {"dim", "law", "mu", "sigma"}
