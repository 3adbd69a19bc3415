"""``accum.report``'s cache of finished checks: a check is reused only under its key (identity, seed, code version),
and that key changes with every preset field the plan reads, every parameter of a check's family, the seed and the
code of every module a check's numbers come from.  Fields are enumerated from the dataclasses and the families'
declared parameters, so a new one the key misses fails here."""

import dataclasses

from accum.report import cache_key, verify_modules
from accum.report_plan import PRESETS, Check, Preset, plan
from accum.simulations.families import family_name
from accum.simulations.identity import digest

from conftest import accum_modules_loaded, family_variants


def other_field_values(value) -> list:
    """Other values of a preset field: a number moved (up by 2, times 4, halved: a threshold field such as
    haar_max_dim changes the plan only past a dimension), a tuple with its last entry moved, the first family factor
    doubled."""
    if isinstance(value, int):
        return [value + 2, 4 * value, value // 2]
    if isinstance(value, float):
        return [1.5 * value, 0.5 * value]
    if value and isinstance(value[0], tuple):
        (check, key, factor), *rest = value
        return [((check, key, 2 * factor), *rest)]
    return [(*value[:-1], v) for v in other_field_values(value[-1])]


def plan_keys(preset: Preset, seed: int = 0, code: dict | None = None) -> set[str]:
    return {digest(cache_key(job, seed, code or {})) for job in plan(preset)}


def test_the_cache_keys_change_with_every_preset_field():
    """Each ``Preset`` field, moved, changes the set of the plan's cache keys: no field reaches the checks except
    through their identities."""
    quick = PRESETS["quick"]
    base = plan_keys(quick)
    for f in dataclasses.fields(Preset):
        changed = (plan_keys(dataclasses.replace(quick, **{f.name: v})) for v in other_field_values(getattr(quick, f.name)))
        assert any(keys != base for keys in changed), f"preset field {f.name} does not reach the cache key"


def test_the_cache_key_changes_with_every_family_parameter_the_seed_and_the_code():
    """One check of every family name in the plan, its family with each declared parameter changed: another key;
    so do another seed and another code version."""
    jobs = {family_name(job.family): job for job in plan(PRESETS["quick"])}
    code = {"sources": "a"}
    for name, job in jobs.items():
        key = digest(cache_key(job, 0, code))
        assert digest(cache_key(job, 1, code)) != key and digest(cache_key(job, 0, {"sources": "b"})) != key
        for param, families in family_variants(name, {"dim": job.family.dim}).items():
            for family in families:
                assert family != job.family or param == "dim"
                if family != job.family:
                    assert digest(cache_key(Check(job.check, family, job.kwargs), 0, code)) != key, (name, param)


def test_the_fingerprinted_modules_are_every_module_a_check_loads():
    """Every accum module loaded by importing the plan is fingerprinted (``verify_modules``) -- ``accum.verdict``
    among them, whose ``stderr_ratio`` computes the standard-error rows."""
    loaded = accum_modules_loaded()["accum.report_plan"]
    assert "accum.verdict" in loaded
    assert loaded <= set(verify_modules()), loaded - set(verify_modules())
