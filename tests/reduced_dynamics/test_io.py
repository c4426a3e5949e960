"""reduced_dynamics.io and the shared path checks (issue 23): paths of the wrong type, folders, pipes, huge headers."""

import os

import numpy as np
import pytest

from reduced_dynamics import io as rio


def _huge_npy() -> bytes:
    """About 130 bytes whose .npy header declares 100000 x 100000 float64 (80 GB)."""
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': (100000, 100000), }"
    header += " " * ((-(10 + len(header) + 1)) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode("latin1")


def test_read_npy_refuses_an_integer_path_instead_of_reading_that_file_descriptor(tmp_path):
    # os.stat(7) / open(7) read whatever file descriptor 7 is
    r, w = os.pipe()
    try:
        with pytest.raises(TypeError, match="`--sigma` must be a path"):
            rio.read_npy(r, name="--sigma")
    finally:
        os.close(r)
        os.close(w)


def test_read_npy_names_shape_and_max_bytes(tmp_path):
    np.save(tmp_path / "a.npy", np.zeros(3))
    with pytest.raises(ValueError, match="`shape`"):
        rio.read_npy(tmp_path / "a.npy", name="--sigma", shape=3.0)
    with pytest.raises(ValueError, match="`max_bytes`"):
        rio.read_npy(tmp_path / "a.npy", name="--sigma", max_bytes=None)


@pytest.mark.parametrize("writer", ["bytes", "text", "json", "savez"])
def test_atomic_writers_refuse_a_folder_and_a_wrong_type_naming_path(tmp_path, writer):
    write = {
        "bytes": lambda p: rio.atomic_write_bytes(p, b"x"),
        "text": lambda p: rio.atomic_write_text(p, "x"),
        "json": lambda p: rio.atomic_write_json(p, {"a": 1}),
        "savez": lambda p: rio.atomic_savez(p, a=np.zeros(2)),
    }[writer]
    (tmp_path / "folder").mkdir()
    with pytest.raises(ValueError, match="`path` must be a file to write.*a folder"):  # was IsADirectoryError
        write(tmp_path / "folder")
    with pytest.raises(TypeError, match="`path` must be a path"):  # was "expected str, bytes or os.PathLike"
        write(None)
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="is not a folder"):  # was NotADirectoryError
        write(tmp_path / "file" / "inside.npz")


def test_writers_name_their_content_argument(tmp_path):
    with pytest.raises(TypeError, match="`data` must be bytes"):
        rio.atomic_write_bytes(tmp_path / "a", "text")
    with pytest.raises(TypeError, match="`text` must be a str"):  # was AttributeError: no attribute 'encode'
        rio.atomic_write_text(tmp_path / "a", 1.0)
    with pytest.raises(ValueError, match="`indent`"):
        rio.atomic_write_json(tmp_path / "a", {}, indent=1.5)
    with pytest.raises(TypeError, match="`a` must be an array of numbers or strings"):  # numpy would pickle it
        rio.atomic_savez(tmp_path / "a.npz", a=None)
    with pytest.raises(TypeError, match="`fields` must be a mapping"):
        rio.output_stem("flow", 1.0)


def test_to_jsonable_refuses_what_json_cannot_hold():
    with pytest.raises(TypeError, match="`obj` holds a complex"):  # was returned as is (not JSON)
        rio.to_jsonable({"a": 1 + 1j})
    assert rio.to_jsonable({"a": np.float64(np.nan), "b": [np.int64(2)], "c": "s"}) == {"a": None, "b": [2], "c": "s"}


def test_read_npz_refuses_a_huge_header_before_allocating(tmp_path):
    import zipfile

    with zipfile.ZipFile(tmp_path / "huge.npz", "w") as z:
        z.writestr("a.npy", _huge_npy())
    with pytest.raises(ValueError, match="`source` is not a readable .npz file.*declares 80000000000 bytes"):
        rio.read_npz(tmp_path / "huge.npz", name="source")


def test_read_npz_refuses_a_named_pipe_without_blocking(tmp_path, no_hang):
    os.mkfifo(tmp_path / "pipe.npz")
    with pytest.raises(ValueError, match="`source` must be a regular file.*a named pipe"):
        rio.read_npz(tmp_path / "pipe.npz", name="source")


def test_check_path_and_check_bool():
    from reduced_dynamics._validation import check_bool, check_path

    with pytest.raises(TypeError, match="`out`"):
        check_path("out", b"bytes")
    with pytest.raises(ValueError, match="`out`.*empty"):
        check_path("out", "")
    with pytest.raises(ValueError, match="`out`.*NUL"):
        check_path("out", "a\0b")
    assert check_bool("force", np.True_) is True and check_bool("force", 0) is False
    for bad in ("no", None, 2, 0.5, np.array([True, False])):
        with pytest.raises(TypeError, match="`force` must be True or False"):
            check_bool("force", bad)
