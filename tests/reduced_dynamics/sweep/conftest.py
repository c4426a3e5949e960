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


def comparable(folder):
    """The tidy table of a sweep folder without the columns that measure time or name the worker.

    Everything else (parameters, results, status, keys) must match exactly; floats are compared as
    stored (bit for bit). Built with ``table_rows`` (no pandas needed).
    """
    from reduced_dynamics.sweep import Store
    from reduced_dynamics.sweep.table import table_rows

    columns, rows = table_rows(Store(folder).records())
    keep = [c for c in columns if c not in TIMING]
    return keep, [{c: r[c] for c in keep} for r in rows]


@pytest.fixture
def spec():
    return tiny_spec()
