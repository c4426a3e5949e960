# Two commands: `make run` (set up + main job) and `make test` (set up + docs build + the sdist and wheel built,
# checked and the wheel run from a clean venv + full suite).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP_VENV := $(VENV)/.created
STAMP_RUN := $(VENV)/.installed-run
STAMP_TEST := $(VENV)/.installed-test
# The Sphinx site: fresh environment (-E, docstrings are re-read), nitpicky (-n: a broken cross-reference is an
# error), warnings as errors (-W), all of them reported (--keep-going).
SPHINX := $(PY) -m sphinx -E -n -W --keep-going -q -b html docs docs/_build/html

.PHONY: run test test-fast lint check figures figures-quick bench clean docs dist dist-check

# Bytecode is cached under build/pycache (git-ignored), never in the tree. Where the environment sets
# PYTHONDONTWRITEBYTECODE (some sandboxes do, to keep __pycache__ out of checkouts), every interpreter would
# otherwise compile the package again (~0.1 s per command started by a test) and every pytest process would
# rewrite the asserts of every test module again (collection 10.2 -> 6.3 s of CPU per process with the cache).
export PYTHONPYCACHEPREFIX ?= $(CURDIR)/build/pycache
unexport PYTHONDONTWRITEBYTECODE

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

# The docs build (~65 s) and the wheel check (~35 s) are single-threaded: they run side by side on two cores,
# and the recipe fails if either does (the suite's docs tests read the built site, so they come before it).
# --dist loadfile: each test file runs on one worker, so a module's fixtures are made once and transformer_lens
# (~9 s of CPU to import) is imported by one worker only (tests/reduced_dynamics/importers/test_transformerlens.py).
test: $(STAMP_TEST)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	@$(SPHINX) & docs=$$!; $(MAKE) --no-print-directory dist-check; wheel=$$?; wait $$docs; built=$$?; \
	  [ $$built -eq 0 ] || echo "error: the Sphinx build failed (exit $$built)" >&2; \
	  [ $$wheel -eq 0 ] && [ $$built -eq 0 ]
	$(PY) -m pytest -q -p no:cacheprovider -n auto --dist loadfile

# The sdist and the wheel, built with the venv's setuptools (no isolated build env: offline, seconds; the
# test extra brings setuptools, build and twine), then checked by twine (metadata, README rendering).
DIST := dist
dist: $(STAMP_TEST)
	rm -rf $(DIST) && mkdir -p build
	$(PY) -m build --no-isolation --outdir $(DIST) . >build/dist.log 2>&1 || { cat build/dist.log; exit 1; }
	$(PY) -m twine check --strict $(DIST)/*
	@ls $(DIST)

# The built wheel in a clean virtual environment (no system or project site-packages): its own
# dependencies from PyPI through pip (kept in build/wheelhouse, so a second run downloads nothing), then
# `reduced-dynamics run --quiet` outside the source tree. About 45 s on 2 cores (dist included), most of it
# unpacking numpy, scipy, sympy and matplotlib; part of `make test`.
WHEEL_VENV := build/wheel-venv
WHEELHOUSE := build/wheelhouse
dist-check: dist
	rm -rf $(WHEEL_VENV) build/wheel-run
	$(PYTHON) -m venv $(WHEEL_VENV) || { echo "error: cannot create $(WHEEL_VENV): install python3-venv" >&2; exit 1; }
	$(PY) -m pip download --quiet --dest $(WHEELHOUSE) $(DIST)/*.whl
	$(WHEEL_VENV)/bin/python -m pip install --quiet --no-index --find-links $(WHEELHOUSE) $(DIST)/*.whl
	mkdir -p build/wheel-run
	cd build/wheel-run && ../wheel-venv/bin/python -c 'import reduced_dynamics as rd; assert "site-packages" in rd.__file__, rd.__file__; print("installed", rd.__version__, "from", rd.__file__)'
	cd build/wheel-run && ../wheel-venv/bin/reduced-dynamics run --quiet --out out

# The edit-test loop: every test but those of tests/slow_tests.txt and @pytest.mark.slow (under 30 s wall
# on 2 cores; scripts/fast_lane_modules.py checks that it still runs code of every module). No ruff,
# docs or packaging: `make test` is the gate.
test-fast: $(STAMP_TEST)
	$(PY) -m pytest -q -p no:cacheprovider -n 2 --dist loadfile -m "not slow" --hypothesis-profile=fast

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
	rm -rf $(VENV) results build dist *.egg-info
