"""Shared pytest configuration: a deterministic hypothesis profile, and ``api_fuzz`` importable by the tests."""

import importlib.util
import sys
from pathlib import Path

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
settings.load_profile("deterministic")
