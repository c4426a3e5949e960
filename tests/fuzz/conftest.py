"""The fork server of the CLI fuzz suites, shared by tests/fuzz/test_cli_fuzz.py and test_sweep_spec_fuzz.py."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def runner():
    """``test_cli_fuzz.Runner``: one fork server per pytest process (started on the first invocation; it imports
    the package and what the commands import lazily, ~2 s, once instead of once per fuzz module); with
    ``RD_FUZZ_FRESH=1`` a fresh ``python -m reduced_dynamics`` per invocation instead."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_cli_fuzz import Runner

    r = Runner(fresh=os.environ.get("RD_FUZZ_FRESH") == "1")
    yield r
    r.close()
