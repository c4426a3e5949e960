# Two commands: `make run` (set up + main job) and `make test` (set up + full suite).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP_RUN := $(VENV)/.installed-run
STAMP_TEST := $(VENV)/.installed-test

.PHONY: run test check figures figures-quick bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP_RUN): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e .
	touch $@

$(STAMP_TEST): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e ".[test]"
	touch $@ $(STAMP_RUN)

run: $(STAMP_RUN)
	$(VENV)/bin/reduced-dynamics run --out results

test: $(STAMP_TEST)
	$(PY) -m pytest -q -p no:cacheprovider

check: $(STAMP_RUN)
	$(VENV)/bin/reduced-dynamics check

figures: $(STAMP_RUN)
	$(VENV)/bin/reduced-dynamics figures --out figures

figures-quick: $(STAMP_RUN)
	$(VENV)/bin/reduced-dynamics figures --quick --out results/figures-quick

bench: $(STAMP_TEST)
	$(PY) benchmarks/bench_risk.py

clean:
	rm -rf $(VENV) results build *.egg-info
