"""The public API is declared in one place and every name in __all__ exists."""

import pytest

import proofs_check
import reduced_dynamics


@pytest.mark.parametrize("mod", [reduced_dynamics, proofs_check])
def test_all_names_exist(mod):
    missing = [n for n in mod.__all__ if not hasattr(mod, n)]
    assert not missing
    assert len(set(mod.__all__)) == len(mod.__all__)
