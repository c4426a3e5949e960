"""The importers meet the API contract (issue 23): paths, counts and arrays get an error naming the argument."""

import importlib
import os
import zipfile

import numpy as np
import pytest

from reduced_dynamics.importers import CheckpointError, export, from_arrays, load, read_arrays

HUGE = importlib.import_module("api_fuzz").HUGE_NPY  # a tiny .npy declaring 80 GB (registered by tests/conftest.py)


@pytest.fixture(scope="module")
def arrays():
    from reduced_dynamics.model.attention import AttentionModel

    m = AttentionModel(2, 3)
    return export(m, format="npz", params=m.init(seed=0))


def test_read_arrays_refuses_a_huge_header_before_allocating(tmp_path):
    with zipfile.ZipFile(tmp_path / "m.npz", "w") as z:
        z.writestr("KQ.npy", HUGE)
    with pytest.raises(CheckpointError, match="`path` is not a readable .npz file.*declares 80000000000"):
        read_arrays(tmp_path / "m.npz")  # was "Unable to allocate 74.5 GiB", after trying
    with pytest.raises(CheckpointError, match="`source` is not a readable .npz file.*declares 80000000000"):
        load(tmp_path / "m.npz")


def test_read_arrays_and_load_refuse_a_named_pipe_and_a_wrong_type(tmp_path, no_hang):
    os.mkfifo(tmp_path / "m.npz")
    with pytest.raises(CheckpointError, match="`source` must be a regular file.*a named pipe"):
        load(tmp_path / "m.npz")
    with pytest.raises(TypeError, match="`path` must be a path"):  # was "expected str, bytes or os.PathLike"
        read_arrays(None)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "x", [1], 0])
def test_counts_are_named(arrays, bad):
    for count in ("n_out", "n_heads"):  # was "cannot convert float NaN to integer", OverflowError, ...
        with pytest.raises(CheckpointError, match=f"`{count}` must be a positive integer"):
            load(arrays, **{count: bad})


def test_from_arrays_names_arrays_and_source_format(arrays):
    with pytest.raises(CheckpointError, match="`arrays` must be a mapping"):  # was "'float' object is not iterable"
        from_arrays(1.0)
    with pytest.raises(CheckpointError, match="`source_format`"):  # was recorded as given (a complex, say)
        from_arrays(arrays, source_format=1j)


def test_detect_format_and_load_name_their_argument():
    from reduced_dynamics.importers import detect_format

    with pytest.raises(CheckpointError, match="`state` is not a one-layer attention checkpoint"):
        detect_format({"a": np.zeros(2)})
    with pytest.raises(CheckpointError, match="`source` is not a one-layer attention checkpoint"):
        load({"a": np.zeros(2)})


def test_predict_names_tokens_and_x_q(arrays):
    imp = load(arrays)
    with pytest.raises(ValueError, match="`tokens`"):  # was a ComplexWarning, then the real part
        imp.predict(np.ones((2, 4, 4)) + 1j, np.ones((2, 3)))
    with pytest.raises(ValueError, match="`x_q`"):  # was "could not convert string to float"
        imp.predict(np.ones((2, 4, 4)), "x")
