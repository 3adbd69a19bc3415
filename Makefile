# Two commands set everything up on a fresh machine: `make verify` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: verify test bench figures probes-gpu gpu-bundle gpu-results clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[test]"
	touch $(STAMP)

# one process of one thread, polite on a shared machine; on a machine of your own: make verify WORKERS=4
WORKERS ?= 1
verify: $(STAMP)
	$(BIN)/accum verify --quick --workers $(WORKERS) --json results/verify.json --markdown results/verify.md

# two pytest workers (pytest-xdist), a test file per worker at a time (its module fixtures computed once), so the
# suite fits the 10 minutes of a 2-core CI machine; then the tests that hold a time limit under a stated load
# (marked serial: signal latency), alone, so the other worker's tests are not part of their load
test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --durations=40 -m "not serial"
	$(BIN)/python -m pytest -q -m serial

bench: $(STAMP)
	$(BIN)/accum bench --json results/bench.json

figures: $(STAMP)
	$(BIN)/accum figures --out results/figures

# C7 probes, GPU preset (never run yet: no GPU has been lent), on a machine with a GPU and this venv:
# results in probes/results/gpu/.  A session lent the device tool's GPU uses gpu-bundle instead (measurements/gpu-session.md).
probes-gpu: $(STAMP)
	ACCUM=$(BIN)/accum sh probes/run_gpu.sh

# What the device tool's GPU call carries (probes/gpu_session.sh): the accum wheel and the data files the
# gpu preset reads offline, in $(BUNDLE)/ (git-ignored; carry it).
BUNDLE ?= .gpu-bundle
gpu-bundle: $(STAMP)
	rm -rf $(BUNDLE) build
	$(BIN)/pip wheel -q --no-deps --no-build-isolation -w $(BUNDLE) .
	$(BIN)/python -m accum.probes.gpu_session stage --bundle $(BUNDLE) --preset gpu

# Validate the archive a GPU session returned and unpack it into probes/results/gpu/ (then commit that).
gpu-results: $(STAMP)
	$(BIN)/python -m accum.probes.gpu_session unpack $(ARCHIVE) --dest probes/results/gpu

clean:
	rm -rf $(VENV) build *.egg-info
