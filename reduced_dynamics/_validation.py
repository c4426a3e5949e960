"""Input validation shared by every public function.

Every check raises :class:`ValueError` whose message names the parameter in
backticks and states the allowed range, e.g. ``"`L` must be a positive
integer, got 0"``. The CLI turns these into one line on stderr and exit 2.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

__all__ = [
    "check_positive_int",
    "check_nonnegative_int",
    "check_positive_float",
    "check_nonnegative_float",
    "check_finite_float",
    "check_probability",
    "check_finite_array",
    "check_bool",
    "check_heads_pair",
    "check_problem",
    "check_path",
]


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _int_value(value):
    """An integral float (``3.0``) becomes an int; anything else is returned unchanged."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def check_positive_int(name: str, value, *, hi: int | None = None) -> int:
    """Return ``value`` as ``int`` if it is an integer in ``[1, hi]`` (no upper bound if ``hi`` is None)."""
    value = _int_value(value)
    if not _is_int(value) or value < 1 or (hi is not None and value > hi):
        rng = "a positive integer" if hi is None else f"an integer in [1, {hi}]"
        raise ValueError(f"`{name}` must be {rng}, got {value!r}")
    return int(value)


def check_nonnegative_int(name: str, value, *, hi: int | None = None) -> int:
    """Return ``value`` as ``int`` if it is an integer in ``[0, hi]`` (no upper bound if ``hi`` is None)."""
    value = _int_value(value)
    if not _is_int(value) or value < 0 or (hi is not None and value > hi):
        rng = "a non-negative integer" if hi is None else f"an integer in [0, {hi}]"
        raise ValueError(f"`{name}` must be {rng}, got {value!r}")
    return int(value)


def _as_float(name: str, value, allowed: str) -> float:
    if isinstance(value, (complex, np.complexfloating)) or (isinstance(value, np.ndarray) and value.dtype.kind == "c"):
        raise ValueError(f"`{name}` must be {allowed} (complex numbers are not accepted), got {value!r}")
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"`{name}` must be {allowed}, got {value!r}") from None
    if not math.isfinite(out):
        raise ValueError(f"`{name}` must be {allowed}, got {value!r}")
    return out


def check_finite_float(name: str, value) -> float:
    """Return ``value`` as a finite ``float``."""
    return _as_float(name, value, "a finite real number")


def check_positive_float(name: str, value) -> float:
    """Return ``value`` as a finite ``float > 0``."""
    out = _as_float(name, value, "a finite number > 0")
    if out <= 0:
        raise ValueError(f"`{name}` must be a finite number > 0, got {value!r}")
    return out


def check_nonnegative_float(name: str, value) -> float:
    """Return ``value`` as a finite ``float >= 0``."""
    out = _as_float(name, value, "a finite number >= 0")
    if out < 0:
        raise ValueError(f"`{name}` must be a finite number >= 0, got {value!r}")
    return out


def check_probability(name: str, value, *, open_interval: bool = True) -> float:
    """Return ``value`` as a float in ``(0, 1)`` (or ``[0, 1]``)."""
    out = _as_float(name, value, "a number in (0, 1)")
    ok = 0 < out < 1 if open_interval else 0 <= out <= 1
    if not ok:
        rng = "(0, 1)" if open_interval else "[0, 1]"
        raise ValueError(f"`{name}` must be a number in {rng}, got {value!r}")
    return out


def check_finite_array(name: str, value, *, ndim: int | None = None, min_ndim: int | None = None) -> np.ndarray:
    """Return ``value`` as a float64 array after checking it is real and finite.

    Complex input (a complex array, or a sequence holding complex numbers) is rejected with a
    ``ValueError`` naming ``name``: numpy would otherwise drop the imaginary part silently.
    """
    try:
        raw = np.asarray(value)
    except (TypeError, ValueError):
        raise ValueError(f"`{name}` must be an array of finite real numbers, got {value!r}") from None
    if raw.dtype.kind == "c":
        raise ValueError(f"`{name}` must be an array of finite real numbers (complex numbers are not accepted)")
    try:
        arr = np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"`{name}` must be an array of finite real numbers, got {value!r}") from None
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"`{name}` must be a {ndim}-d array, got shape {arr.shape}")
    if min_ndim is not None and arr.ndim < min_ndim:
        raise ValueError(f"`{name}` must have at least {min_ndim} dimension(s), got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"`{name}` must be non-empty, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"`{name}` must contain only finite values (no NaN/inf)")
    return arr


def check_heads_pair(omega, mu) -> tuple[np.ndarray, np.ndarray]:
    """Validate a state ``(omega, mu)`` of shape ``(..., H)`` each, same shape."""
    omega = check_finite_array("omega", omega, min_ndim=1)
    mu = check_finite_array("mu", mu, min_ndim=1)
    if omega.shape != mu.shape:
        raise ValueError(f"`omega` and `mu` must have the same shape (..., H), got {omega.shape} and {mu.shape}")
    return omega, mu


def check_problem(d, L, sigma2) -> tuple[int, int, float]:
    """Validate the problem constants ``d >= 1``, ``L >= 1``, ``sigma2 >= 0``."""
    return (
        check_positive_int("d", d),
        check_positive_int("L", L),
        check_nonnegative_float("sigma2", sigma2),
    )


def check_bool(name: str, value) -> bool:
    """Return ``value`` as ``bool`` if it is a bool (``True``/``False``, a numpy bool, or the integers 0 and 1).

    A flag of another type (a string, an array, ``None``, ``2.5``) is refused with a ``TypeError``
    naming ``name`` instead of being read by its truth value (``"no"`` would mean yes).
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if _is_int(value) and value in (0, 1):
        return bool(value)
    raise TypeError(f"`{name}` must be True or False, got {value!r}")


def check_path(name: str, value, *, kind: str | None = None):
    """Return ``value`` as a :class:`pathlib.Path` if it is a ``str`` or ``os.PathLike`` path.

    Parameters
    ----------
    name : str
        The parameter named in errors.
    value : str or os.PathLike
        The path. Not bytes, not an integer (``os.stat(7)`` would read file descriptor 7), not empty,
        no NUL character.
    kind : {None, "file", "dir", "new", "out"}
        ``"file"``: must exist and be a regular file (after links), so that reading it cannot block
        (a named pipe) or read a device; ``"dir"``: must exist and be a folder; ``"new"``: a file to
        write, which must not be a folder and whose nearest existing ancestor must be a folder;
        ``"out"``: a folder to write into (created by the caller if missing): a folder, or missing
        with a folder as its nearest existing ancestor.

    Raises
    ------
    TypeError
        Not a ``str`` / ``os.PathLike`` (naming ``name``).
    ValueError
        Empty, a NUL character, or not of ``kind`` (naming ``name`` and the path).
    """
    import os
    import stat
    from pathlib import Path

    if isinstance(value, (str, os.PathLike)):
        try:
            raw = os.fspath(value)
        except TypeError:
            raw = None
        if isinstance(raw, str):
            if not raw or "\0" in raw:
                why = "empty" if not raw else "a NUL character"
                raise ValueError(f"`{name}` must be a path, got {value!r} ({why})")
            path = Path(raw)
        else:
            raise TypeError(f"`{name}` must be a path (str or os.PathLike of str), got {type(value).__name__}")
    else:
        raise TypeError(f"`{name}` must be a path (str or os.PathLike), got {type(value).__name__} {value!r:.60}")
    if kind is None:
        return path
    if kind not in ("file", "dir", "new", "out"):
        raise ValueError(f"`kind` must be None, 'file', 'dir', 'new' or 'out', got {kind!r}")
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):  # missing, or under a file: the ancestors' check says which
        mode = None
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise ValueError(f"`{name}`: cannot use {str(path)!r} ({why})") from None
    if kind in ("new", "out"):
        what = "a file to write" if kind == "new" else "a folder to write into"
        if kind == "new" and mode is not None and stat.S_ISDIR(mode):
            raise ValueError(f"`{name}` must be {what}, got {str(path)!r}, a folder")
        if kind == "out" and mode is not None and not stat.S_ISDIR(mode):
            raise ValueError(f"`{name}` must be {what}, got {str(path)!r}, {_kind_of(mode)}")
        parent = next((p for p in path.absolute().parents if os.path.lexists(p)), None)
        if mode is None and parent is not None and not parent.is_dir():
            raise ValueError(f"`{name}` must be {what}, got {str(path)!r}: {str(parent)!r} is not a folder")
        return path
    if mode is None:
        raise ValueError(f"`{name}` {'file' if kind == 'file' else 'folder'} not found: {str(path)!r}")
    if kind == "dir" and not stat.S_ISDIR(mode):
        raise ValueError(f"`{name}` must be a folder, got {str(path)!r}, {_kind_of(mode)}")
    if kind == "file" and not stat.S_ISREG(mode):
        raise ValueError(f"`{name}` must be a regular file, got {str(path)!r}, {_kind_of(mode)}")
    return path


def _kind_of(mode: int) -> str:
    """What a ``stat`` mode is, in words (for error messages)."""
    import stat

    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISREG(mode):
        return "a regular file"
    return "not a regular file"
