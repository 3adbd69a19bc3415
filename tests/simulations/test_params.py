"""Every documented parameter range, at its ends and just past them: a value at an end (inside) builds the family
and passes the first-sample check every command makes (``check_sample``: finite steps of the asked shapes, angles
within ``MAX_ANGLE``); a value just past an end is one line naming the parameter, exit 2, before any work.

The ranges are read from the ``ParamSpec`` tables themselves (what `accum families` and `accum measure --help`
print), so a new parameter is covered without a new test entry."""

from __future__ import annotations

import math

import numpy as np
import pytest

from accum.cli import main
from accum.simulations.families import FAMILIES, make_family
from accum.simulations.measure import QUANTITIES, plan_measurement
from accum.simulations.params import CommandText, ParamError, ParamSpec
from accum.simulations.userfamily import check_sample


def numeric(specs) -> list[ParamSpec]:
    return [s for s in specs if s.kind in ("int", "float")]


def text(spec: ParamSpec, value: float) -> str:
    """``value`` as typed on a command line: an integer's digits, a float's shortest repr (round-trips exactly)."""
    return str(int(value)) if spec.kind == "int" else repr(float(value))


def ends(spec: ParamSpec) -> tuple[list[float], list[float]]:
    """(values at the finite ends that lie inside, values just past them): an open end itself is outside and its
    neighbour towards the range inside; an int's neighbour is +-1, a float's the next float64."""
    inside, outside = [], []
    for end, inward, is_open in ((spec.lo, 1, spec.lo_open), (spec.hi, -1, spec.hi_open)):
        if math.isinf(end):
            continue
        def step(x, sign):  # the next value from x, towards the inside (sign 1) or the outside (sign -1)
            direction = sign * inward
            return x + direction if spec.kind == "int" else float(np.nextafter(x, direction * math.inf))
        inside.append(step(end, 1) if is_open else end)
        outside.append(end if is_open else step(end, -1))
    return inside, outside


def requirements(specs: tuple[ParamSpec, ...], name: str) -> dict[str, str]:
    """The other parameters ``name`` needs to mean something (``only_with``, followed up the chain)."""
    by_name = {s.name: s for s in specs}
    need: dict[str, str] = {}
    spec = by_name[name]
    while spec.only_with:
        other, values = spec.only_with
        need[other] = values[0]
        spec = by_name[other]
    return need


FAMILY_CASES = [(family, spec.name) for family, cls in FAMILIES.items() for spec in numeric(cls.PARAMS)]


def test_ends_helper_on_known_ranges():
    """The helper itself: closed, open and integer ends give the values they should."""
    assert ends(ParamSpec("x", "int", 1, "", lo=1, hi=10)) == ([1, 10], [0, 11])
    inside, outside = ends(ParamSpec("x", "float", 1.0, "", lo=0.0, hi=1.0, lo_open=True))
    assert inside == [5e-324, 1.0] and outside == [0.0, float(np.nextafter(1.0, 2.0))]
    assert ends(ParamSpec("x", "float", 1.0, "", lo=-1e6, hi=1e6))[1] == [float(np.nextafter(-1e6, -np.inf)),
                                                                     float(np.nextafter(1e6, np.inf))]


@pytest.mark.parametrize("family,name", FAMILY_CASES)
def test_family_range_ends(family, name, capsys):
    specs = FAMILIES[family].PARAMS
    spec = next(s for s in specs if s.name == name)
    need = requirements(specs, name)
    inside, outside = ends(spec)
    assert inside or outside, f"{family}.{name} documents no finite end"
    for value in inside:
        built = make_family(family, **{k: CommandText(v) for k, v in {**need, name: text(spec, value)}.items()})
        check_sample(built, family)  # what verify / figures --family ask of a family before any work
        assert getattr(built, name) == value
    for value in outside:
        argv = ["check", family, *(f"--param={k}={v}" for k, v in {**need, name: text(spec, value)}.items())]
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"'{name}'" in err and spec.allowed() in err, err


def test_negative_zero_is_zero_for_every_scale():
    """-0 is inside [0, ...]: it is read as 0.0, which numpy's samplers accept (they refuse a set sign bit)."""
    for family, cls in FAMILIES.items():
        for spec in numeric(cls.PARAMS):
            if spec.kind == "float" and spec.lo == 0.0 and not spec.lo_open:
                need = requirements(cls.PARAMS, spec.name)
                built = make_family(family, **{k: CommandText(v) for k, v in {**need, spec.name: "-0"}.items()})
                assert math.copysign(1.0, getattr(built, spec.name)) == 1.0, (family, spec.name)
                check_sample(built, family)


def test_a_location_far_from_zero_is_the_same_law():
    """mu and offset at the ends of [-1e6, 1e6]: the draws lie within the angle bound and the law is the location
    reduced modulo 2 pi (sampler and characteristic agree with the reduced law exactly)."""
    rng = np.random.default_rng(3)
    for law, key in (("gaussian", "mu"), ("lattice", "offset")):
        for location in (-1e6, 1e6):
            far = make_family("so2-accumulated", dim=4, law=law, **{key: location})
            near = make_family("so2-accumulated", dim=4, law=law, **{key: math.remainder(location, 2 * math.pi)})
            check_sample(far, "so2-accumulated")
            assert np.abs(far.sample(rng, 3, 2).theta).max() < 4 * math.pi
            for k in (1, 2, 5):
                assert np.array_equal(far.angle_law().characteristic(k, 4), near.angle_law().characteristic(k, 4))
            assert np.array_equal(far.sample(np.random.default_rng(0), 5, 3).theta,
                                  near.sample(np.random.default_rng(0), 5, 3).theta)


OPTION_CASES = [(q, spec.name) for q, quantity in QUANTITIES.items() for spec in numeric(quantity.options)]


@pytest.mark.parametrize("quantity,name", OPTION_CASES)
def test_measure_option_range_ends(quantity, name, capsys):
    """An estimator option just past an end is refused naming it; at an end it is accepted, or refused for the
    memory or work it would take (a message naming the option, never 'out of range')."""
    spec = next(s for s in QUANTITIES[quantity].options if s.name == name)
    inside, outside = ends(spec)
    for value in inside:
        try:
            plan_measurement(quantity, "rope", {"dim": 4}, {name: CommandText(text(spec, value))})
        except ParamError as err:
            assert name in str(err) and "out of range" not in str(err), str(err)
    for value in outside:
        assert main(["measure", quantity, "--family", "rope", "--param", "dim=4", "--opt",
                     f"{name}={text(spec, value)}"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"'{name}'" in err and spec.allowed() in err, err
