"""The content-addressed result store of a sweep: one JSON file per point, written atomically.

Layout under the sweep folder ``DIR``::

    DIR/points/<key[:2]>/<key>.json    one record per point (key: SHA-256 of command, full configuration, version)
    DIR/sweeps/<name>.json             the manifest of each sweep run into DIR (its spec and its keys)
    DIR/table.csv, DIR/table.parquet   the tidy table (``reduced-dynamics sweep-table DIR``)

A record is written to a temporary file in the same folder, fsynced and renamed
(``reduced_dynamics.io.atomic_write_bytes``), so a reader sees a whole record or
none. Each record carries the SHA-256 of its own content (``checksum``): a
truncated or edited file fails the check and counts as missing, so it is
recomputed rather than trusted. Two sweeps writing the same key write the same
configuration; the last rename wins and both files were whole. A write killed
between its temporary file and the rename leaves ``.<key>.json.*.tmp``, never read
as a record; the next sweep removes such files once they are an hour old.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
from pathlib import Path

from reduced_dynamics._validation import check_path
from reduced_dynamics.io import atomic_write_bytes

__all__ = ["Store", "RECORD_FORMAT"]

#: version of the record layout (a record of another format is not trusted)
RECORD_FORMAT = 1
#: age (seconds) after which a temporary file of an unfinished write is removed by the next sweep
STALE_SECONDS = 3600.0


def _canonical(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _checksum(record: dict) -> str:
    body = {k: v for k, v in record.items() if k != "checksum"}
    return hashlib.sha256(_canonical(body).encode()).hexdigest()


def _opt(value, *types) -> bool:
    return value is None or (isinstance(value, types) and not isinstance(value, bool))


def _well_formed(record: dict) -> bool:
    """True when ``record`` has the layout :meth:`Store.put` writes (a valid checksum alone does not say so).

    A record edited and re-checksummed (no ``status``, ``config`` a list, ...) is treated as corrupted:
    it crashed ``sweep`` and ``sweep-table`` with a traceback.
    """
    r = record
    return (
        isinstance(r.get("key"), str)
        and isinstance(r.get("command"), str)
        and isinstance(r.get("version"), str)
        and r.get("status") in ("done", "failed")
        and isinstance(r.get("params"), dict)
        and isinstance(r.get("config"), dict)
        and isinstance(r.get("argv"), list)
        and all(isinstance(a, str) for a in r["argv"])
        and _opt(r.get("exit_code"), int)
        and _opt(r.get("error"), str)
        and (r.get("result") is None or isinstance(r.get("result"), (dict, list)))
        and (r["status"] == "failed" or r.get("result") is not None)
        and all(_opt(r.get(k), int, float) for k in ("seconds", "cpu_seconds"))
        and _opt(r.get("worker"), str)
    )


def safe_name(name) -> bool:
    """Whether ``name`` may be a sweep's name, a file name in the store: a string of 1 to 200 characters
    without '/', '\\', NUL or other control characters, no leading '.', no surrounding spaces."""
    return (
        isinstance(name, str)
        and 0 < len(name) <= 200
        and not any(c in name for c in "/\\\0")
        and not any(ord(c) < 32 or ord(c) == 127 for c in name)
        and not name.startswith(".")
        and name == name.strip()
    )


def _check_name(name) -> str:
    """A sweep's name as a file-name-safe string (the rules of a spec's ``name``), else a ``ValueError`` naming ``name``."""
    if not safe_name(name):
        raise ValueError(
            "`name` must be a file-name-safe string: 1 to 200 characters, no '/', '\\', control characters, "
            f"leading '.' or surrounding spaces, got {name!r:.80}"
        )
    return name


class Store:
    """The result store of one sweep folder.

    Parameters
    ----------
    root : str or Path
        The sweep folder ``DIR`` (created on the first write).
    """

    def __init__(self, root):
        self.root = check_path("root", root)

    def path(self, key: str) -> Path:
        """File of the record ``key`` (a point's key: hexadecimal digits, a ``ValueError`` naming ``key`` else)."""
        if not isinstance(key, str) or not 2 <= len(key) <= 128 or any(c not in "0123456789abcdef" for c in key):
            raise ValueError(f"`key` must be a point's key (2 to 128 hexadecimal digits), got {key!r:.80}")
        return self.root / "points" / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict | None:
        """The record of ``key`` if its file exists and is intact, else None (missing, truncated or corrupted).

        Parameters
        ----------
        key : str
            A point's key.

        Returns
        -------
        dict or None
        """
        return self._read(self.path(key), key)

    def is_corrupt(self, key: str) -> bool:
        """True when the file of ``key`` exists but is not an intact record."""
        p = self.path(key)
        return p.exists() and self._read(p, key) is None

    @staticmethod
    def _read(path: Path, key: str | None) -> dict | None:
        try:
            record = json.loads(path.read_bytes())
        except (OSError, ValueError):
            return None
        if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT:
            return None
        if key is not None and record.get("key") != key:
            return None
        if record.get("checksum") != _checksum(record):
            return None
        return record if _well_formed(record) else None

    def put(self, invocation, outcome: dict) -> dict:
        """Write the record of one finished point atomically and return it.

        Parameters
        ----------
        invocation : Invocation
            The point (its key, command, parameters, configuration, version).
        outcome : dict
            What :func:`~reduced_dynamics.sweep.commands.run_point` returned.

        Returns
        -------
        dict
            The record as written (with ``status`` ``"done"`` or ``"failed"`` and its ``checksum``).
        """
        from collections.abc import Mapping

        if not isinstance(outcome, Mapping):
            raise TypeError(f"`outcome` must be the mapping run_point returned, got {type(outcome).__name__}")
        check_path("root", self.root, kind="out")
        done = outcome.get("result") is not None and outcome.get("exit_code") in (0, 1)
        record = {
            "format": RECORD_FORMAT,
            "key": invocation.key,
            "command": invocation.command,
            "version": invocation.version,
            "params": invocation.params,
            "config": invocation.config,
            "argv": list(invocation.argv),
            "status": "done" if done else "failed",
            "exit_code": outcome.get("exit_code"),
            "error": None if done else outcome.get("error"),
            "result": outcome.get("result") if done else None,
            "seconds": outcome.get("seconds"),
            "cpu_seconds": outcome.get("cpu_seconds"),
            "worker": outcome.get("worker"),
            "finished": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        }
        record = json.loads(_canonical(record))  # strict JSON (raises on NaN) and plain types
        record["checksum"] = _checksum(record)
        path = self.path(invocation.key)
        self._clear(path)
        atomic_write_bytes(path, (json.dumps(record, indent=1) + "\n").encode())
        return record

    @staticmethod
    def _clear(path: Path) -> None:
        """Make room for a record where a folder is in the way (the rename onto it failed and aborted the sweep).

        An empty folder is removed; one with content is kept, renamed ``<key>.json.displaced[-N]`` (the store
        removes nothing it did not write).
        """
        if not path.is_dir() or path.is_symlink():
            return
        try:
            path.rmdir()
            return
        except OSError:
            pass
        n = 0
        while True:
            aside = path.with_name(path.name + (".displaced" if n == 0 else f".displaced-{n}"))
            if not aside.exists():
                path.rename(aside)
                return
            n += 1

    def clean_stale(self, *, older_than: float = STALE_SECONDS) -> int:
        """Remove temporary files of writes that never finished (their writer was killed).

        Only files older than ``older_than`` seconds: a younger one may belong to a sweep
        writing into the same store right now.

        Parameters
        ----------
        older_than : float
            Age in seconds.

        Returns
        -------
        int
            Files removed.
        """
        import time

        removed = 0
        now = time.time()
        for p in (self.root / "points").glob("*/.*.tmp"):
            try:
                if now - p.stat().st_mtime > older_than:
                    p.unlink()
                    removed += 1
            except OSError:
                continue
        return removed

    def records(self) -> list[dict]:
        """Every intact record in the store (sorted by key); corrupted files are skipped.

        Returns
        -------
        list of dict
        """
        out = []
        folder = self.root / "points"
        if not folder.is_dir():
            return out
        for p in sorted(folder.glob("*/*.json")):
            rec = self._read(p, p.stem)
            if rec is not None:
                out.append(rec)
        return out

    def write_manifest(self, name: str, manifest: dict) -> Path:
        """Write ``DIR/sweeps/<name>.json`` atomically.

        Parameters
        ----------
        name : str
            The sweep's name.
        manifest : dict
            JSON-friendly content.

        Returns
        -------
        Path
        """
        from reduced_dynamics.io import to_jsonable

        path = self.root / "sweeps" / f"{_check_name(name)}.json"
        if not isinstance(manifest, dict):
            raise TypeError(f"`manifest` must be a dict, got {type(manifest).__name__}")
        text = json.dumps(to_jsonable(manifest), indent=1, allow_nan=False)  # to_jsonable: TypeError naming `obj`
        check_path("root", self.root, kind="out")
        atomic_write_bytes(path, (text + "\n").encode())
        return path

    def manifests(self) -> dict[str, dict]:
        """name -> manifest of every sweep run into this folder (unreadable ones skipped).

        Returns
        -------
        dict
        """
        out = {}
        for p in sorted((self.root / "sweeps").glob("*.json")):
            try:
                m = json.loads(p.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(m, dict) and isinstance(m.get("axes", []), list):  # a hand-edited file is skipped
                out[p.stem] = m
        return out

    def manifest(self, name: str) -> dict | None:
        """The manifest of the sweep ``name`` (None when absent or unreadable).

        Parameters
        ----------
        name : str
            The sweep's name.

        Returns
        -------
        dict or None
        """
        try:
            m = json.loads((self.root / "sweeps" / f"{_check_name(name)}.json").read_text())
        except (OSError, ValueError):
            return None
        return m if isinstance(m, dict) else None
