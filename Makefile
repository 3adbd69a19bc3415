# Two commands set everything up on a fresh machine: `make verify` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: verify test bench figures probes-gpu clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[test]"
	touch $(STAMP)

verify: $(STAMP)
	$(BIN)/accum verify --quick --json results/verify.json --markdown results/verify.md

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/accum bench --json results/bench.json

figures: $(STAMP)
	$(BIN)/accum figures --out results/figures

# C7 probes, GPU preset (one H200, about 8 minutes, not yet run): results in probes/results/gpu/
probes-gpu: $(STAMP)
	ACCUM=$(BIN)/accum sh probes/run_gpu.sh

clean:
	rm -rf $(VENV) build *.egg-info
