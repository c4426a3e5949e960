"""Shared pytest configuration: a deterministic hypothesis profile, and ``api_fuzz`` importable by the tests."""

import contextlib
import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# tests/api_fuzz.py (the API fuzz harness) is not a package module: register it once, before any test
# module is collected, so the fuzz suites simply ``import api_fuzz``.
if "api_fuzz" not in sys.modules:
    _spec = importlib.util.spec_from_file_location("api_fuzz", Path(__file__).resolve().parent / "api_fuzz.py")
    sys.modules["api_fuzz"] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules["api_fuzz"])

settings.register_profile(
    "deterministic",
    derandomize=True,
    deadline=None,
    max_examples=40,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
# `make test-fast` (--hypothesis-profile=fast): the same properties on fewer examples, for the edit-test loop
settings.register_profile("fast", parent=settings.get_profile("deterministic"), max_examples=6)
settings.load_profile("deterministic")


# ------------------------------------------------------------------------------------------------------
# Work shared by the tests of a session (and by its pytest-xdist workers: a folder beside theirs, one lock
# file per item), made once instead of once per test
# ------------------------------------------------------------------------------------------------------
_HERE = Path(__file__).resolve().parent


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive ``fcntl`` lock on ``path`` (created) for the ``with`` block."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@pytest.fixture
def no_hang():
    """Fail (TimeoutError) instead of hanging when a call blocks on a named pipe for 10 s."""
    import signal

    def fire(signum, frame):
        raise TimeoutError("blocked on the named pipe")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, 10)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, old)


def _session_cache(tmp_path_factory, name: str) -> Path:
    """A folder for this test session, shared by its pytest-xdist workers (beside their own folders)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # shared by the workers of this session
    return root / name


# ------------------------------------------------------------------------------------------------------
# One run of each golden CLI case for the whole suite
# ------------------------------------------------------------------------------------------------------
# tests/test_golden.py compares each recorded case of tests/golden/cli_baseline.json with a new run (and two more
# of its tests look at the runs of the moved and the stationary-stop cases); tests/proofs_check/ reads the numbers
# of the `check --quick --only NAME` cases (the same ``CHECKS[NAME](Setting(), quick=True)`` the check tests
# called themselves, written to the case's --out file in full precision). Each case is run once per session,
# by ``record.run_case`` (in this process, or as ``python -m reduced_dynamics`` with GOLDEN_SUBPROCESS=1), and
# its normalised record (JSON) is shared by the workers.


def golden_record_module():
    """tests/golden/record.py as the module ``golden_record`` (loaded once)."""
    name = "golden_record"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, _HERE / "golden" / "record.py")
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


@pytest.fixture(scope="session")
def golden_case(tmp_path_factory):
    """``golden_case(case) -> dict``: the normalised record of a new run of ``record.CASES[case]`` (as
    ``record.run_case`` returns it: ``exit``, ``json`` or ``stdout``, ``files``), made once per session.
    Read-only: copy it before changing it."""
    subprocess_mode = os.environ.get("GOLDEN_SUBPROCESS", "") not in ("", "0")
    cache = _session_cache(tmp_path_factory, "golden-cases" + ("-subprocess" if subprocess_mode else ""))

    def get(case: str) -> dict:
        done = cache / f"{case}.json"
        with _locked(cache / f"{case}.lock"):
            if not done.is_file():
                record = golden_record_module()
                doc = record.run_case(record.CASES[case], subprocess_mode=subprocess_mode)
                tmp = done.with_suffix(".tmp")
                tmp.write_text(json.dumps(doc), encoding="utf-8")
                os.replace(tmp, done)
        return json.loads(done.read_text(encoding="utf-8"))

    return get


@pytest.fixture(scope="session")
def quick_check(golden_case):
    """``quick_check(name) -> dict``: the result of ``proofs_check.checks.CHECKS[name](Setting(), quick=True)``
    as the golden case ``check_quick_<name>`` wrote it to its --out file (``name``, ``passed``, ``error``,
    ``measured``, ``data`` ... in full precision; times dropped), from the session's one run of that case."""

    def get(name: str) -> dict:
        (result,) = golden_case(f"check_quick_{name}")["files"]["check.json"]["checks"]
        assert result["name"] == name
        return result

    return get


# ------------------------------------------------------------------------------------------------------
# One quick run of each figure for the whole suite
# ------------------------------------------------------------------------------------------------------
# The golden suite (tests/test_golden.py) compares every figure's quick data with its recorded values and
# tests/reduced_dynamics/figures/ checks the files it writes and that its plot embeds: both look at the
# same ``FIGURES[name].run(quick=True, seed=0)``, made here once per test session.


@pytest.fixture(scope="session")
def quick_figure(tmp_path_factory):
    """``quick_figure(name) -> (folder, run)``: the folder holding ``name``'s quick PNG and ``.npz`` (seed 0)
    and its run as a dict (``name``, ``png``, ``data_file``, ``key_numbers`` as JSON). Read-only: copy
    the files before changing them."""
    cache = _session_cache(tmp_path_factory, "quick-figures-seed0")

    def get(name: str):
        folder = cache / name
        done = folder / "run.json"
        with _locked(cache / f"{name}.lock"):
            if not done.is_file():
                from threadpoolctl import threadpool_limits

                from reduced_dynamics.figures.registry import FIGURES
                from reduced_dynamics.io import to_jsonable

                folder.mkdir(parents=True, exist_ok=True)
                with threadpool_limits(1):  # as `figures` runs them
                    run = FIGURES[name].run(quick=True, out=folder, seed=0)
                doc = {"name": run.name, "png": run.png, "data_file": run.data_file}
                doc["key_numbers"] = to_jsonable(run.key_numbers)
                tmp = done.with_suffix(".tmp")
                tmp.write_text(json.dumps(doc), encoding="utf-8")
                os.replace(tmp, done)
        return folder, json.loads(done.read_text(encoding="utf-8"))

    return get


@pytest.fixture(scope="session")
def quick_figure_data(quick_figure):
    """``quick_figure_data(name, data_function) -> dict``: the arrays of ``name``'s quick ``.npz`` (what the plot
    draws), from :func:`quick_figure`; first checks that the registry makes that figure with ``data_function``
    in the paper's setting (d = 5, L = 40, σ² = 0.1), so a test of ``data_function`` reads its own output."""

    def get(name: str, data_function):
        from reduced_dynamics.figures._base import load_data
        from reduced_dynamics.figures.registry import FIGURES
        from reduced_dynamics.setting import Setting

        assert FIGURES[name].data_function is data_function
        assert FIGURES[name].quick_setting == Setting(d=5, L=40, sigma2=0.1)
        folder, _ = quick_figure(name)
        return load_data(folder / f"{name}.npz")

    return get


# ------------------------------------------------------------------------------------------------------
# The fast lane: `make test-fast` runs `pytest -m "not slow"`
# ------------------------------------------------------------------------------------------------------


def _ids(name: str) -> frozenset[str]:
    path = _HERE / name
    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    return frozenset(s.strip() for s in lines if s.strip() and not s.startswith("#"))


def _slow_ids() -> frozenset[str]:
    """tests/slow_tests.txt without tests/fast_lane_keep.txt (one cheap test per module stays fast)."""
    return _ids("slow_tests.txt") - _ids("fast_lane_keep.txt")


def pytest_collection_modifyitems(config, items):
    """Mark ``slow`` the tests listed in tests/slow_tests.txt (written by scripts/update_slow_tests.py)."""
    slow = _slow_ids()
    marker = pytest.mark.slow
    for item in items:
        if item.nodeid in slow:
            item.add_marker(marker)
