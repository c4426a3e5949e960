"""Apply a one-state formula over the leading (batch) axes of a state array."""

from __future__ import annotations

import numpy as np

__all__ = ["each_state"]


def each_state(y, fn):
    """``fn`` of each state of ``y`` (shape ``(..., size)``), results stacked to ``(...) + shape``."""
    y = np.asarray(y, dtype=np.float64)
    if y.ndim == 1:
        return fn(y)
    flat = y.reshape(-1, y.shape[-1])
    out = [fn(v) for v in flat]
    return np.asarray(out).reshape(y.shape[:-1] + np.shape(out[0]))
