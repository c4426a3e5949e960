# Two commands: `make run` (set up + main job) and `make test` (set up + docs build + full suite).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP_VENV := $(VENV)/.created
STAMP_RUN := $(VENV)/.installed-run
STAMP_TEST := $(VENV)/.installed-test
# The Sphinx site: fresh environment (-E, docstrings are re-read), nitpicky (-n: a broken cross-reference is an
# error), warnings as errors (-W), all of them reported (--keep-going).
SPHINX := $(PY) -m sphinx -E -n -W --keep-going -q -b html docs docs/_build/html

.PHONY: run test lint check figures figures-quick bench clean docs

# The venv counts as made only once its stamp exists, so a half-created .venv (e.g. ensurepip missing)
# is rebuilt on the next run instead of being trusted; an existing venv with a working pip is reused.
# Where `python3 -m venv` lacks ensurepip (Debian/Ubuntu without python3-venv) the venv is created
# without pip and uses the system pip through --system-site-packages (it installs into the venv).
# The install stamps live inside .venv, so recreating the venv reinstalls; editing pyproject.toml does too.
$(STAMP_VENV):
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "python3 >= 3.10 is required (use make PYTHON=python3.X)")'
	@if [ -x $(PY) ] && $(PY) -m pip --version >/dev/null 2>&1; then \
	  echo "reusing $(VENV)"; \
	else \
	  rm -rf $(VENV); \
	  { $(PYTHON) -m venv $(VENV) || { rm -rf $(VENV) && $(PYTHON) -m venv --without-pip --system-site-packages $(VENV) \
	    && $(PY) -m pip --version >/dev/null; }; } \
	  && $(PY) -m pip install --quiet --upgrade pip \
	  || { rm -rf $(VENV); echo "error: cannot set up $(VENV): install python3-venv (or pip for $(PYTHON))" >&2; exit 1; }; \
	fi
	touch $@

$(STAMP_RUN): pyproject.toml | $(STAMP_VENV)
	$(PY) -m pip install --quiet -e .
	touch $@

$(STAMP_TEST): pyproject.toml | $(STAMP_VENV)
	$(PY) -m pip install --quiet -e ".[test,docs,sweep,numba,torch,lens]"
	touch $@ $(STAMP_RUN)

run: $(STAMP_RUN)
	$(VENV)/bin/reduced-dynamics run --out results

test: $(STAMP_TEST)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(SPHINX)
	$(PY) -m pytest -q -p no:cacheprovider -n auto --dist worksteal

docs: $(STAMP_TEST)
	$(SPHINX)
	@echo "docs: open docs/_build/html/index.html"

lint: $(STAMP_TEST)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

check: $(STAMP_RUN)
	$(VENV)/bin/reduced-dynamics check

figures: $(STAMP_RUN)
	$(VENV)/bin/reduced-dynamics figures --out figures

figures-quick: $(STAMP_RUN)
	$(VENV)/bin/reduced-dynamics figures --quick --out results/figures-quick

# Every speed claim of the README, measured side by side in one run (ratios printed; torch rows only where torch imports).
# BENCH_ARGS=--quick for a smoke run.
BENCH_ARGS ?=
bench: $(STAMP_TEST)
	$(PY) benchmarks/bench_flow.py $(BENCH_ARGS)
	$(PY) benchmarks/bench_risk.py $(BENCH_ARGS)
	$(PY) benchmarks/bench_train.py $(BENCH_ARGS)
	$(PY) benchmarks/bench_exact.py $(BENCH_ARGS)
	$(PY) benchmarks/bench_sweep.py $(BENCH_ARGS)
	$(PY) benchmarks/bench_startup.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) results build *.egg-info
