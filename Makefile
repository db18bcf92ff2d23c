# Two commands from a fresh clone: `make elaborate` and `make test`.
# The venv gets the test and soc extras: the SoC tests (tests/test_soc.py) are part of the default run.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
CONFIG ?= configs/bert_tiny.yaml

.PHONY: elaborate synth test test-all bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,soc]'
	touch $(STAMP)

elaborate: $(STAMP)
	$(PY) -m mlo_hw.elaborate --config $(CONFIG)

synth: $(STAMP)
	$(PY) -m mlo_hw.synth --config $(CONFIG)

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

test-all: $(STAMP)
	$(PY) -m pytest -m "slow or not slow" $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) bench/accuracy.py --config $(CONFIG)

clean:
	rm -rf build sim_build .pytest_cache
