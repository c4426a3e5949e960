"""Shared fixtures of the sweep tests: a tiny, fast, deterministic spec of the `run` command."""

import pytest


def tiny_spec(**over):
    """4 points of `run` (H = 2, 3 x seeds 0, 1), each a few ms in process."""
    spec = {
        "command": "run",
        "name": "tiny",
        "seeds": [0, 1],
        "fixed": {"t-end": 1.0, "n-eval": 5, "d": 3, "L": 10, "method": "RK45", "rtol": 1e-6},
        "axes": {"heads": [2, 3]},
    }
    spec.update(over)
    return spec


TIMING = {"wall_seconds", "cpu_seconds", "worker", "seconds", "result.seconds"}


def comparable(df):
    """A table without the columns that measure time or name the worker (everything else must match)."""
    return df.drop(columns=[c for c in df.columns if c in TIMING]).reset_index(drop=True)


@pytest.fixture
def spec():
    return tiny_spec()
