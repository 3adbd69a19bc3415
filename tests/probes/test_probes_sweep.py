"""``probes.sweep``'s reuse of stored runs: a finished run is reused from its JSON only under its key -- the run's
training config (every ``TrainConfig`` field) and ``sweep_evaluation_key`` (every ``EvalConfig`` field and the
analysis sizes).  The fields are enumerated from the dataclasses, so a new field the key misses fails here.  And
what a sweep's run does by default: one thread, no bar of its own, analysis noise apart, text blocks of the longest
length; the summary's hosts; a finished run under another evaluation is refused."""

import json
import shutil
from dataclasses import fields, replace

import numpy as np
import pytest
import torch

from accum.probes.analysis import analyse
from accum.probes.data import SOURCES, TOKENIZERS
from accum.probes.evaluate import EvalConfig
from accum.probes.sweep import EVAL_RESULTS, check_run_folder, finished_run, run_dir, run_sweep, sweep_evaluation_key
from accum.probes.sweepconfig import SweepConfig
from accum.probes.model import INITS, OUTPUTS
from accum.probes.train import DECAYS, RESULTS, TrainConfig, train
from accum.simulations.params import ParamError

from test_probes_train import DATA, TINY

torch.set_num_threads(1)

STRINGS = {"arm": ["family_qkv"], "learned_token": ["key"], "family": ["rope"], "data_source": list(SOURCES),
           "tokenizer": list(TOKENIZERS), "init": list(INITS), "output": list(OUTPUTS), "decay": list(DECAYS)}


def other_values(name: str, value) -> list:
    """Candidate values of a config field other than ``value`` (some may be refused by the config's checks)."""
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [value + 1, 2 * value, value - 1]
    if isinstance(value, float):
        return [0.5 * value, 1.5 * value, 0.5]
    if isinstance(value, str):
        return [v for v in STRINGS[name] if v != value]
    if name == "family_param":
        return [("sigma=0.5",)]
    if name == "multipliers":
        return [(*value, max(value) + 1), value[:-1]]
    raise AssertionError(f"no other values for field {name} = {value!r}: add them here")


def replaced(config, name: str) -> list:
    """``config`` with field ``name`` set to each valid other value; at least one must be valid."""
    out = []
    for value in other_values(name, getattr(config, name)):
        if value == getattr(config, name):
            continue
        try:
            out.append(replace(config, **{name: value}))
        except (ParamError, ValueError):
            continue
    assert out, f"no valid other value of {name}"
    return out


def test_the_training_key_changes_with_every_trainconfig_field():
    """The stored run's training key is ``TrainConfig.normalised(config.to_dict())``: every field, changed to any
    valid other value, changes it (a family arm, so that family and family_param can change too)."""
    base = TrainConfig(arm="family", family="so2-accumulated", **TINY)
    key = TrainConfig.normalised(base.to_dict())
    for f in fields(TrainConfig):
        for other in replaced(base, f.name):
            assert TrainConfig.normalised(other.to_dict()) != key, f.name


@pytest.fixture(scope="module")
def finished(tmp_path_factory, request):
    """A finished one-arm sweep (nope, three seeds, three training steps) on the tests' text, run with the library's
    defaults (no ``threads`` given); returns the config, the folder and, for each training, the ``threads`` and
    ``progress`` it was called with and torch's thread count inside it, and for each analysis its generator's seed,
    its windows' shape and L."""
    out = tmp_path_factory.mktemp("sweep")
    cfg = SweepConfig(train=TrainConfig(steps=3, **TINY), eval=EvalConfig(multipliers=(1, 2, 3), n_tokens=128, chunk=8),
                      arms=("nope",), analysis_windows=1)
    trainings, analyses = [], []

    def recorded_train(*args, **kwargs):
        trainings.append((kwargs["threads"], kwargs["progress"], torch.get_num_threads()))
        return train(*args, **kwargs)

    def recorded_analyse(model, x, seq_len, generator, *args, **kwargs):
        analyses.append((generator.initial_seed(), tuple(x.shape), seq_len))
        return analyse(model, x, seq_len, generator, *args, **kwargs)

    patch = pytest.MonkeyPatch()
    patch.setattr("accum.probes.sweep.load_data", lambda cfg, cache: (DATA, {"source": "test"}))
    patch.setattr("accum.probes.sweep.train", recorded_train)
    patch.setattr("accum.probes.sweep.analyse", recorded_analyse)
    request.addfinalizer(patch.undo)
    torch.set_num_threads(2)
    run_sweep(cfg, out)
    return cfg, out, trainings, analyses


def test_a_sweep_trains_each_run_on_one_thread_without_a_progress_bar(finished):
    """By default each run trains on one thread (torch's count is set, whatever it was before), and no run draws a
    progress bar of its own: with several workers their bars would interleave; the sweep reports finished runs."""
    _, _, trainings, _ = finished
    assert trainings == [(1, False, 1)] * 3


def test_a_runs_analysis_draws_its_noise_apart_on_its_windows(finished):
    """The lengths' noise comes from a generator seeded with the evaluation seed, the analysis's from seed + 1; the
    analysis reads ``analysis_windows`` windows of ``analysis_multiplier`` x L tokens."""
    cfg, _, _, analyses = finished
    windows = (cfg.analysis_windows, cfg.analysis_multiplier * cfg.train.seq_len)
    assert analyses == [(cfg.eval.seed + 1, windows, cfg.train.seq_len)] * 3


def test_a_stored_run_is_reused_only_under_its_evaluation_key(finished):
    """Reused under the same design; not under a design that changes any EvalConfig field, either analysis size,
    or a training field the run depends on (steps here; every field is in the key by the test above)."""
    cfg, out, _, _ = finished
    assert finished_run(cfg, out, "nope", 0) is not None
    assert set(sweep_evaluation_key(cfg)) == {"eval_config", "analysis_config"}
    changed = [replace(cfg, eval=e) for f in fields(EvalConfig) for e in replaced(cfg.eval, f.name)]
    changed += [replace(cfg, analysis_multiplier=3), replace(cfg, analysis_windows=2),
                replace(cfg, train=replace(cfg.train, steps=4))]
    for other in changed:
        assert finished_run(other, out, "nope", 0) is None, other


def test_a_finished_run_under_another_evaluation_is_refused_naming_what_differs(finished):
    """A sweep never rewrites a finished run: under another evaluation config or other analysis sizes the run
    folder is refused, the message naming the eval config or the analysis config (nothing is written)."""
    cfg, out, _, _ = finished
    before = sorted((p, p.stat().st_mtime_ns) for p in out.rglob("*") if p.is_file())
    for other, named in ((replace(cfg, eval=replace(cfg.eval, n_tokens=96)), "another eval config"),
                         (replace(cfg, analysis_windows=2), "another analysis config")):
        with pytest.raises(ParamError, match=named):
            check_run_folder(other, out, "nope", 0)
    assert sorted((p, p.stat().st_mtime_ns) for p in out.rglob("*") if p.is_file()) == before


def test_an_evaluation_without_its_training_record_is_refused_too(finished, tmp_path):
    """A run folder whose train.json is gone still holds its eval.json: another evaluation is refused over it."""
    cfg, out, _, _ = finished
    shutil.copytree(run_dir(out, "nope", 0), run_dir(tmp_path, "nope", 0))
    (run_dir(tmp_path, "nope", 0) / RESULTS).unlink()
    with pytest.raises(ParamError, match="another eval config"):
        check_run_folder(replace(cfg, eval=replace(cfg.eval, n_tokens=96)), tmp_path, "nope", 0)


def test_a_runs_text_blocks_are_its_longest_length(finished):
    """sweep.json's text blocks of a run are equal blocks of its longest length: their mean NLL is that length's
    NLL (eval.json), and their 1x reference the mean 1x NLL of the windows that length's windows cover."""
    cfg, out, _, _ = finished
    runs = json.loads((out / "sweep.json").read_text())["runs"]["nope"]
    for seed in cfg.seeds:
        lengths = json.loads((run_dir(out, "nope", seed) / EVAL_RESULTS).read_text())["lengths"]
        longest, one = lengths[-1], next(r for r in lengths if r["multiplier"] == 1)
        blocks = runs[str(seed)]["text_blocks"]
        m = longest["multiplier"]
        assert np.mean(blocks["nll"]) == pytest.approx(longest["nll"], rel=1e-12)
        assert np.mean(blocks["ref"]) == pytest.approx(np.mean(one["window_nll"][:longest["windows"] * m]), rel=1e-12)


def test_the_summary_names_the_machines_its_runs_trained_on(finished):
    """sweep.json's hosts are the hosts of its runs' train.json provenance ("?" only for a run that does not say)."""
    cfg, out, _, _ = finished
    hosts = {json.loads((run_dir(out, "nope", seed) / RESULTS).read_text())["provenance"]["host"] for seed in cfg.seeds}
    assert None not in hosts and "?" not in hosts
    assert json.loads((out / "sweep.json").read_text())["hosts"] == sorted(hosts)
