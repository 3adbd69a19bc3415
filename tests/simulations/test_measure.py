"""``simulations.measure``: a saved record re-runs with its own config and seed (``config_from_record``, what
``accum measure --from`` reads), and a record whose seed is not one is refused naming the file."""

import pytest

from accum.simulations.identity import job_seed
from accum.simulations.measure import config_from_record, measure, plan_measurement, run_plan
from accum.simulations.params import ParamError

JOB = ("near-weight", "so2-accumulated", {"dim": 6, "law": "uniform", "a": 0.7},
       {"n_max": 40, "points": 3, "samples": 9, "chunk": 7})


@pytest.mark.parametrize("seed", [11, job_seed(5, {"quantity": "near-weight"}, 2)], ids=["small", "sweep-128-bit"])
def test_a_record_reruns_with_its_own_seed(seed):
    """The seed comes back from the record (a sweep job's 128-bit seed too), not a default: re-running gives the
    record's numbers bit for bit, while seed 0 -- what a dropped seed would fall back to -- gives other numbers."""
    first = measure(*JOB, seed=seed)
    quantity, family, params, options, got = config_from_record(first, "a.json")
    assert got == seed and type(got) is int
    again = run_plan(plan_measurement(quantity, family, params, options, got))
    assert again["seed"] == seed and again["config"] == first["config"] and again["result"] == first["result"]
    assert measure(*JOB, seed=0)["result"] != first["result"]


@pytest.mark.parametrize("seed", [None, -1, "7", True, 1.5])
def test_a_record_without_a_valid_seed_is_refused_naming_the_file(seed):
    record = measure(*JOB, seed=3)
    if seed is None:
        del record["seed"]
    else:
        record["seed"] = seed
    with pytest.raises(ParamError) as err:
        config_from_record(record, "a.json")
    assert str(err.value) == f"--from a.json: seed must be an integer >= 0, got {seed!r}"
