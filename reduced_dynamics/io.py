"""Atomic result files: write to a temporary file in the same folder, then rename.

A crash mid-write leaves either the old file or the new one, never half of one.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["atomic_write_bytes", "atomic_write_text", "atomic_write_json", "atomic_savez", "to_jsonable"]


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


def atomic_write_bytes(path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (temp file in the same folder, fsync, ``os.replace``).

    The folder is created if needed and fsynced after the rename (best effort), so
    a completed write survives a crash; an interrupted one leaves no temporary file.
    """
    path = Path(path)
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


def atomic_write_text(path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def to_jsonable(obj: Any) -> Any:
    """Convert numpy scalars/arrays (recursively) into JSON-serialisable objects.

    Non-finite floats become ``None`` so that the output is strict JSON.
    """
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
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
    return obj


def atomic_write_json(path, obj: Any, *, indent: int | None = 2) -> Path:
    """Serialise ``obj`` (numpy-aware) to JSON and write it atomically."""
    return atomic_write_text(path, json.dumps(to_jsonable(obj), indent=indent) + "\n")


def atomic_savez(path, **arrays) -> Path:
    """``numpy.savez_compressed`` to ``path`` atomically."""
    import io as _io

    buf = _io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return atomic_write_bytes(path, buf.getvalue())
