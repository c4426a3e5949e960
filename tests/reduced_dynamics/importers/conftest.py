"""Shared pieces of the importer tests: random prompts in token form, and a refusal check."""

from __future__ import annotations

import numpy as np
import pytest


def random_tokens(n: int, L: int, d: int, n_out: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(Z, x_q)``: context tokens ``(n, L, d + n_out)`` and query covariates ``(n, d)``, standard normal."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, L, d + n_out)), rng.standard_normal((n, d))


@pytest.fixture
def tokens():
    """The :func:`random_tokens` function."""
    return random_tokens


@pytest.fixture
def refused():
    """``refused(call, *args, match=..., **kwargs)``: ``call`` raises a one-line CheckpointError matching ``match``."""
    from reduced_dynamics.importers import CheckpointError

    def check(call, *args, match: str, **kwargs):
        with pytest.raises(CheckpointError, match=match) as info:
            call(*args, **kwargs)
        message = str(info.value)
        assert "\n" not in message and message.strip(), message
        return message

    return check
