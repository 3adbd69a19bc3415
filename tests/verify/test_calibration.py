"""``accum.calibration``'s cache of finished reports: a report's outcome is reused only under its key, which changes
with every argument of ``calibration_key`` (enumerated from its signature) and with the code of every module a
report's pass / fail comes from."""

import inspect

from accum.calibration import calibration_key, calibration_modules
from accum.simulations.identity import digest

from conftest import accum_modules_loaded

BASE = {"preset": "quick", "seed": 3, "budget": 1e-3, "code": {"sources": "a"}, "only": ("coherence",)}
OTHER = {"preset": "full", "seed": 4, "budget": 2e-3, "code": {"sources": "b"}, "only": ("coherence", "window")}


def test_the_calibration_key_changes_with_every_argument():
    assert list(inspect.signature(calibration_key).parameters) == list(BASE)
    key = digest(calibration_key(**BASE))
    for name in BASE:
        assert digest(calibration_key(**{**BASE, name: OTHER[name]})) != key, name
    assert digest(calibration_key(**{**BASE, "only": None})) != key
    assert calibration_key(**{**BASE, "only": ("window", "coherence")}) == calibration_key(**{**BASE, "only": ("coherence", "window")})


def test_the_fingerprinted_modules_are_every_module_a_calibration_loads():
    loaded = accum_modules_loaded()["accum.calibration"]
    assert {"accum.report", "accum.verdict", "accum.calibration"} <= loaded
    assert loaded <= set(calibration_modules()), loaded - set(calibration_modules())
