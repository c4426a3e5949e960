"""Atomic result files: write to a temporary file in the same folder, then rename.

A crash mid-write leaves either the old file or the new one, never half of one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from reduced_dynamics._validation import check_path

__all__ = [
    "output_stem",
    "atomic_write_bytes",
    "atomic_write_text",
    "atomic_write_json",
    "atomic_savez",
    "folder_lock",
    "to_jsonable",
    "read_npy",
    "read_npz",
    "NPY_MAX_BYTES",
]


#: longest stem written as is; a longer one keeps its first fields and ends in a hash of all of them
MAX_STEM = 200
_STR_VALUE = re.compile(r"^[A-Za-z0-9.+\-]+$")
_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")


def _stem_value(key: str, value) -> str:
    if isinstance(value, bool) or value is None:
        raise TypeError(f"`{key}` of an output name must be a number, a name or a list of numbers, got {value!r}")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"`{key}` of an output name must be finite, got {value!r}")
        return "-" + repr(value)  # shortest round-trip text: 0.1 and 0.5 (or 0.1 and 0.10000000000000002) differ
    if isinstance(value, str):
        if not _STR_VALUE.match(value):
            raise ValueError(f"`{key}` of an output name must match [A-Za-z0-9.+-]+, got {value!r}")
        return "-" + value
    if isinstance(value, (list, tuple)):
        return "-" + ",".join(repr(float(v)) if not isinstance(v, int) else str(v) for v in value)
    raise TypeError(f"`{key}` of an output name must be a number, a name or a list of numbers, got {value!r}")


def output_stem(prefix: str, fields: dict) -> str:
    """The file-name stem of a command's outputs: ``prefix`` and every configuration field, unambiguously.

    Integers are written ``<key><value>`` (``d5``), floats ``<key>-<repr>``
    (``sigma2-0.1``: the shortest text that reads back to the same float, so
    different floats give different names), names ``<key>-<name>`` and lists of
    numbers ``<key>-<v1>,<v2>``; fields are joined by ``_`` in the given order.
    Values never contain ``_``, so with the same keys in the same order two
    different configurations never share a stem. A stem longer than
    :data:`MAX_STEM` characters keeps the fields that fit and ends with
    ``h-<16 hex digits of sha256 of the full stem>``.

    Parameters
    ----------
    prefix : str
        What the file holds, e.g. ``"flow"`` or ``"portrait_two_head"``.
    fields : dict
        The configuration, in order: key -> int, float, str or list of numbers,
        e.g. ``{"H": 2, "d": 5, "L": 40, "sigma2": 0.1, "seed": 0}``.

    Returns
    -------
    str
        E.g. ``flow_H2_d5_L40_sigma2-0.1_seed0`` (no suffix: add ``.npz``, ``.png``...).

    Raises
    ------
    ValueError
        A non-finite float or a name with characters outside ``[A-Za-z0-9.+-]``.
    TypeError
        A value that is not a number, a name or a list of numbers.
    """
    if not isinstance(prefix, str) or not prefix:
        raise TypeError(f"`prefix` must be a non-empty string, got {prefix!r:.60}")
    if not isinstance(fields, Mapping):
        raise TypeError(f"`fields` must be a mapping of name -> value, got {type(fields).__name__}")
    parts = [prefix]
    for key, value in fields.items():
        if not isinstance(key, str) or not _KEY.match(key):
            raise ValueError(f"`fields` keys must be alphanumeric names, got {key!r}")
        parts.append(key + _stem_value(key, value))
    stem = "_".join(parts)
    if len(stem) <= MAX_STEM:
        return stem
    digest = hashlib.sha256(stem.encode("utf-8")).hexdigest()[:16]
    kept = [parts[0]]
    for part in parts[1:]:
        if len("_".join([*kept, part])) + 19 > MAX_STEM:
            break
        kept.append(part)
    return "_".join([*kept, f"h-{digest}"])


def _current_umask() -> int:
    """The process umask (read without changing it where the OS allows)."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    umask = os.umask(0)  # fallback: set and restore
    os.umask(umask)
    return umask


def atomic_write_bytes(path, data: bytes, *, name: str = "path") -> Path:
    """Write ``data`` to ``path`` atomically (temp file in the same folder, fsync, ``os.replace``).

    The folder is created if needed and fsynced after the rename (best effort), so
    a completed write survives a crash; an interrupted one leaves no temporary file.
    ``name`` is the parameter named in errors (a path of the wrong type, a folder where
    the file should be, a parent that is not a folder).
    """
    path = check_path(name, path, kind="new")
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"`data` must be bytes, got {type(data).__name__}")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:  # owns fd from here on: closed even if a later call fails
            os.fchmod(fh.fileno(), 0o666 & ~_current_umask())  # mkstemp creates 0600; use the usual mode
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    try:  # make the rename itself durable
        dfd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return path
    try:
        with contextlib.suppress(OSError):
            os.fsync(dfd)
    finally:
        os.close(dfd)
    return path


def atomic_write_text(path, text: str, *, name: str = "path") -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically (``name``: as in :func:`atomic_write_bytes`)."""
    if not isinstance(text, str):
        raise TypeError(f"`text` must be a str, got {type(text).__name__}")
    path = check_path(name, path, kind="new")
    return atomic_write_bytes(path, text.encode("utf-8"))


def to_jsonable(obj: Any) -> Any:
    """Convert numpy scalars/arrays (recursively) into JSON-serialisable objects.

    Non-finite floats become ``None`` so that the output is strict JSON. Strings,
    ``None`` and numbers pass; anything else (a complex number, an object) is refused.

    Raises
    ------
    TypeError
        Naming ``obj``: a value JSON cannot hold.
    """
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        kinds = set(map(type, obj))
        if kinds == {float}:  # a list of Python floats (ndarray.tolist()): no per-item conversion
            return list(obj) if all(map(math.isfinite, obj)) else [v if math.isfinite(v) else None for v in obj]
        if kinds == {int}:
            return list(obj)
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, (np.bool_, bool)):
        return bool(obj)
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating, float)):
        f = float(obj)
        return f if np.isfinite(f) else None
    if obj is None or isinstance(obj, (str, int)):
        return obj
    raise TypeError(f"`obj` holds a {type(obj).__name__} ({obj!r:.60}), which JSON cannot hold")


def atomic_write_json(path, obj: Any, *, indent: int | None = 2, name: str = "path") -> Path:
    """Serialise ``obj`` (numpy-aware, :func:`to_jsonable`) to JSON and write it atomically.

    ``indent``: None or an integer in [0, 16]; ``name``: as in :func:`atomic_write_bytes`.
    """
    if indent is not None and (isinstance(indent, bool) or not isinstance(indent, int) or not 0 <= indent <= 16):
        raise ValueError(f"`indent` must be None or an integer in [0, 16], got {indent!r:.60}")
    path = check_path(name, path, kind="new")
    return atomic_write_text(path, json.dumps(to_jsonable(obj), indent=indent) + "\n", name=name)


def atomic_savez(path, **arrays) -> Path:
    """``numpy.savez_compressed`` to ``path`` atomically.

    Each array must be numeric, boolean or text: an object array (which numpy would pickle, and
    which a reader with ``allow_pickle=False`` refuses) raises ``TypeError`` naming its key.
    """
    import io as _io

    path = check_path("path", path, kind="new")
    for key, value in arrays.items():
        try:
            kind = np.asarray(value).dtype.kind
        except (TypeError, ValueError):
            kind = "O"
        if kind not in "biufcUS":
            raise TypeError(f"`{key}` must be an array of numbers or strings to save, got {value!r:.60}")
    buf = _io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return atomic_write_bytes(path, buf.getvalue())


@contextlib.contextmanager
def folder_lock(folder):
    """Hold an exclusive advisory lock on the existing folder ``folder`` for the ``with`` block.

    ``fcntl.flock`` on the folder itself (no lock file is left behind), so that two commands writing
    one record in the same folder (read, check, write) take turns instead of losing one update. The
    lock is released when the block ends or the process dies. Where ``fcntl`` does not exist
    (Windows) the block runs unlocked.

    Parameters
    ----------
    folder : str or Path
        An existing folder.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    fd = os.open(os.fspath(folder), os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


#: largest array :func:`read_npy` loads (bytes of data): a header declaring more is refused before reading
NPY_MAX_BYTES = 2**30


def read_npy(path, *, name: str, shape: tuple | None = None, max_bytes: int = NPY_MAX_BYTES) -> np.ndarray:
    """Read a real numeric ``.npy`` array after checking the file and its header, before allocating.

    The file must be a regular file (a named pipe, a device or a folder is refused: reading one would hang
    or fail late); its header is read with :func:`numpy.lib.format.read_magic` and
    ``read_array_header_1_0`` / ``read_array_header_2_0``; the declared dtype must be a real number
    (no objects, so no pickle), the declared ``shape`` the one expected, the declared size at most
    ``max_bytes`` and present in the file. Only then is the data read.

    Parameters
    ----------
    path : str or Path
        The ``.npy`` file.
    name : str
        The parameter (or flag) named in errors, e.g. ``"--sigma"``.
    shape : tuple of int, optional
        The shape the array must have (checked on the header).
    max_bytes : int
        Largest data size accepted.

    Returns
    -------
    ndarray, float64
        The array, of shape ``shape`` when given.

    Raises
    ------
    ValueError
        One line naming ``name``: a missing or non-regular file, not a ``.npy`` file, a non-real dtype,
        a wrong shape, a declared size over ``max_bytes`` or larger than the file.
    """
    import stat

    from reduced_dynamics._validation import check_positive_int

    if not isinstance(name, str) or not name:
        raise TypeError(f"`name` must be a non-empty string, got {name!r:.60}")
    path = check_path(name, path)
    if shape is not None:
        if not isinstance(shape, (tuple, list)) or not all(
            isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 0 for n in shape
        ):
            raise ValueError(f"`shape` must be None or a tuple of non-negative integers, got {shape!r:.60}")
    max_bytes = check_positive_int("max_bytes", max_bytes)
    where = str(path)
    try:
        st = os.stat(path)
    except (OSError, ValueError, TypeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise ValueError(f"`{name}`: cannot read {where!r} ({why})") from None
    if not stat.S_ISREG(st.st_mode):
        kind = (
            "a folder"
            if stat.S_ISDIR(st.st_mode)
            else ("a named pipe" if stat.S_ISFIFO(st.st_mode) else "not a regular file")
        )
        raise ValueError(f"`{name}` must be a .npy file saved by numpy.save, got {where!r}, {kind}")
    try:
        with open(path, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):  # replaced between the two looks
                raise ValueError("not a regular file")
            dshape, fortran, dtype = _npy_header(fh)
            if dtype.kind not in "iuf" or dtype.hasobject or dtype.fields is not None:
                raise _NpyRefusal(f"must hold a real numeric array, got dtype {dtype} in {where!r}")
            if shape is not None and tuple(dshape) != tuple(shape):
                raise _NpyRefusal(f"must be a {tuple(shape)} array, got shape {tuple(dshape)} in {where!r}")
            count = math.prod(int(n) for n in dshape)
            nbytes = count * dtype.itemsize
            if nbytes > max_bytes:
                raise _NpyRefusal(
                    f"declares {nbytes} bytes of data (shape {tuple(dshape)}), more than the {max_bytes} read; "
                    f"got {where!r}"
                )
            if st.st_size - fh.tell() < nbytes:
                raise _NpyRefusal(f"is truncated: its header declares {nbytes} bytes of data, got {where!r}")
            data = np.fromfile(fh, dtype=dtype, count=count)
    except _NpyRefusal as exc:
        raise ValueError(f"`{name}` {exc}") from None
    except (OSError, ValueError, EOFError, SyntaxError, TypeError) as exc:
        why = str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"`{name}`: cannot read {where!r} as a .npy array ({why})") from None
    arr = data.reshape(dshape, order="F" if fortran else "C")
    return np.array(arr, dtype=np.float64, order="C")


def read_npz(path, *, name: str, scalars: bool = True, max_bytes: int = NPY_MAX_BYTES) -> dict:
    """The arrays of the ``.npz`` file ``path``, each member's header checked before anything is read.

    Like :func:`read_npy`: the file must be a regular file (a named pipe or a folder is refused), every
    member a ``.npy`` of a numeric, boolean or text dtype (no objects, so no pickle) declaring at most the
    bytes it holds, ``max_bytes`` in all: a 200-byte member declaring 100000 x 100000 made
    :func:`numpy.load` allocate 74.5 GiB.

    Parameters
    ----------
    path : str or Path
        The ``.npz`` file.
    name : str
        The parameter (or flag) named in errors, e.g. ``"resume"``.
    scalars : bool
        0-d arrays become Python scalars.
    max_bytes : int
        Largest total data size accepted.

    Returns
    -------
    dict
        Member name (without ``.npy``) -> array (or scalar).

    Raises
    ------
    ValueError
        One line naming ``name`` and the file.
    """
    import zipfile

    path = check_path(name, path, kind="file")
    where = str(path)
    try:
        total = 0
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():  # every header first: nothing is allocated for a file that is refused
                if not info.filename.endswith(".npy"):
                    raise _NpyRefusal(f"it holds {info.filename!r}, not a .npy array")
                with zf.open(info) as fh:
                    shape, _, dtype = _npy_header(fh)
                    if dtype.hasobject or dtype.kind not in "biufcUS":
                        raise _NpyRefusal(f"{info.filename!r} holds objects (dtype {dtype}), which are not read")
                    nbytes = math.prod(int(n) for n in shape) * dtype.itemsize
                    if nbytes > info.file_size - fh.tell():
                        raise _NpyRefusal(
                            f"{info.filename!r} declares {nbytes} bytes of data (shape {tuple(shape)}) and "
                            f"holds {info.file_size}: the file is corrupted"
                        )
                    total += nbytes
                    if total > max_bytes:
                        raise _NpyRefusal(f"it declares more than the {max_bytes} bytes of data read")
        out = {}
        with np.load(path, allow_pickle=False) as z:
            for k in z.files:
                a = z[k]
                out[k] = a.item() if scalars and a.ndim == 0 else a
        return out
    except _NpyRefusal as exc:
        raise ValueError(f"`{name}` is not a readable .npz file: {where!r} ({exc})") from None
    except (OSError, ValueError, EOFError, SyntaxError, TypeError, KeyError, zipfile.BadZipFile) as exc:
        why = str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"`{name}` is not a readable .npz file: {where!r} ({why})") from None


def _npy_header(fh) -> tuple:
    """``(shape, fortran_order, dtype)`` from the ``.npy`` header at the position of ``fh`` (nothing else read)."""
    fmt = np.lib.format
    version = fmt.read_magic(fh)
    if version == (1, 0):
        return fmt.read_array_header_1_0(fh, max_header_size=10_000)
    if version in ((2, 0), (3, 0)):
        return fmt.read_array_header_2_0(fh, max_header_size=10_000)
    raise ValueError(f"unsupported .npy version {version}")


class _NpyRefusal(Exception):
    """A readable ``.npy`` header that :func:`read_npy` refuses (message completes "`name` ...")."""
