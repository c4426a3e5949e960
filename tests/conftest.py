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
# One quick run of each figure for the whole suite
# ------------------------------------------------------------------------------------------------------
# The golden suite (tests/test_golden.py) compares every figure's quick data with its recorded values and
# tests/reduced_dynamics/figures/ checks the files it writes and that its plot embeds: both look at the
# same ``FIGURES[name].run(quick=True, seed=0)``, made here once per test session and shared by the
# pytest-xdist workers (a folder beside theirs, one lock file per figure), instead of once per test.


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


@pytest.fixture(scope="session")
def quick_figure(tmp_path_factory):
    """``quick_figure(name) -> (folder, run)``: the folder holding ``name``'s quick PNG and ``.npz`` (seed 0)
    and its run as a dict (``name``, ``png``, ``data_file``, ``key_numbers`` as JSON). Read-only: copy
    the files before changing them."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # shared by the workers of this session
    cache = root / "quick-figures-seed0"

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


# ------------------------------------------------------------------------------------------------------
# The fast lane: `make test-fast` runs `pytest -m "not slow"`
# ------------------------------------------------------------------------------------------------------
_HERE = Path(__file__).resolve().parent


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
