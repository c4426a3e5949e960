"""The tidy table of a sweep folder: one row per point, one column per parameter and per scalar result.

Columns, in order:

- ``key, command, version, status, exit_code, error, wall_seconds, cpu_seconds, worker``
  (the record: ``status`` is ``done`` or ``failed``, ``error`` the failed point's error line);
- every parameter of the command (its full configuration, defaults included, as
  parsed; names are the options' ``dest`` names: ``heads``, ``L``, ``t_end``);
- every scalar of the JSON result, nested keys joined with dots
  (``estimators.gd.risk``); a short list of numbers gives one column per entry
  (``omega.0``, ``omega.1``), a list of named objects one group per name
  (``checks.drift_law.status``); longer arrays are left out. A result name equal
  to a parameter or record column is prefixed ``result.``.

Rows are sorted by command and parameters, so the same points give the same
table whatever order they ran in. :func:`write_table` writes ``DIR/table.csv``
(always) and ``DIR/table.parquet`` (when pyarrow is installed);
:func:`load_table` returns a pandas DataFrame.
"""

from __future__ import annotations

import csv
import dataclasses
import io

from reduced_dynamics._results import FrozenResult

__all__ = ["TableFiles", "table_rows", "write_table", "load_table", "RECORD_COLUMNS", "MAX_LIST"]

#: the record's columns, first in every table
RECORD_COLUMNS = ("key", "command", "version", "status", "exit_code", "error", "wall_seconds", "cpu_seconds", "worker")
#: longest list of numbers spread into columns (longer ones, e.g. trajectories, are left out)
MAX_LIST = 16


def _scalar(v) -> bool:
    return v is None or isinstance(v, (bool, int, float, str))


def _flatten(obj, prefix: str, out: dict) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            _flatten(v, f"{prefix}{k}.", out)
    elif isinstance(obj, list):
        if obj and all(isinstance(v, dict) and isinstance(v.get("name"), str) for v in obj):
            for v in obj:
                _flatten({k: x for k, x in v.items() if k != "name"}, f"{prefix}{v['name']}.", out)
        elif all(_scalar(v) for v in obj) and len(obj) <= MAX_LIST:
            for i, v in enumerate(obj):
                out[f"{prefix}{i}"] = v
    elif _scalar(obj):
        out[prefix[:-1]] = obj


def _param_value(v):
    if isinstance(v, list):
        return ",".join(str(x) for x in v)
    return v


def _sort_key(row: dict, params: list[str]):
    key = [row["command"]]
    for p in params:
        v = row.get(p)
        if v is None:
            key.append((0, 0.0, ""))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            key.append((1, float(v), ""))
        else:
            key.append((2, 0.0, str(v)))
    return key


def table_rows(records) -> tuple[list[str], list[dict]]:
    """The columns and rows of the tidy table of ``records`` (store records).

    Parameters
    ----------
    records : iterable of dict
        :meth:`Store.records <reduced_dynamics.sweep.store.Store.records>`.

    Returns
    -------
    columns : list of str
    rows : list of dict
        Column -> value (None where a row has no such column).
    """
    from reduced_dynamics.sweep.store import _well_formed

    if isinstance(records, (str, bytes)) or not hasattr(records, "__iter__"):
        raise TypeError(f"`records` must be an iterable of store records, got {type(records).__name__}")
    records = list(records)
    bad = next((r for r in records if not isinstance(r, dict) or not _well_formed(r)), None)
    if bad is not None:
        raise ValueError(f"`records` must hold store records (Store.records()), got {bad!r:.80}")
    rows, params, results = [], {}, {}
    # first-seen column order must not depend on the order the store lists its records in
    for rec in sorted(records, key=lambda r: r["key"]):
        row = {
            "key": rec["key"],
            "command": rec["command"],
            "version": rec["version"],
            "status": rec["status"],
            "exit_code": rec["exit_code"],
            "error": rec["error"],
            "wall_seconds": rec["seconds"],
            "cpu_seconds": rec["cpu_seconds"],
            "worker": rec["worker"],
        }
        for k, v in rec["config"].items():
            params.setdefault(k, None)
            row[k] = _param_value(v)
        flat: dict = {}
        if rec.get("result") is not None:
            _flatten(rec["result"], "", flat)
        row["_results"] = flat
        for k in flat:
            results.setdefault(k, None)
        rows.append(row)
    taken = set(RECORD_COLUMNS) | set(params)
    rename = {k: (f"result.{k}" if k in taken else k) for k in results}
    for row in rows:
        for k, v in row.pop("_results").items():
            row[rename[k]] = v
    param_cols = list(params)
    columns = [*RECORD_COLUMNS, *param_cols, *rename.values()]
    rows.sort(key=lambda r: _sort_key(r, param_cols))
    return columns, [{c: r.get(c) for c in columns} for r in rows]


@dataclasses.dataclass(frozen=True)
class TableFiles(FrozenResult):
    """The files :func:`write_table` wrote.

    Attributes
    ----------
    csv : str
        ``DIR/table.csv``.
    parquet : str or None
        ``DIR/table.parquet``, or None without pyarrow.
    n_rows : int
        Points in the table.
    n_columns : int
        Columns.
    n_failed : int
        Rows with ``status == "failed"``.
    """

    csv: str
    parquet: str | None
    n_rows: int
    n_columns: int
    n_failed: int


def _csv_value(v):
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    return v


def _arrow_column(values):
    import pyarrow as pa

    kinds = {type(v) for v in values if v is not None}
    if kinds <= {bool}:
        return pa.array(values, type=pa.bool_())
    if kinds <= {int}:
        return pa.array(values, type=pa.int64())
    if kinds <= {int, float}:
        return pa.array([None if v is None else float(v) for v in values], type=pa.float64())
    return pa.array([None if v is None else str(v) for v in values], type=pa.string())


def write_table(out, *, parquet=None) -> TableFiles:
    """Collect every intact point of the sweep folder ``out`` into ``out/table.csv`` (and ``out/table.parquet``).

    Parameters
    ----------
    out : str or Path
        The sweep folder.
    parquet : bool, optional
        Write Parquet too (default: when pyarrow is importable; True without pyarrow raises).

    Returns
    -------
    TableFiles

    Raises
    ------
    ValueError
        Naming ``out`` when it holds no sweep store, or ``parquet`` when pyarrow is missing.
    """
    from reduced_dynamics._validation import check_bool, check_path
    from reduced_dynamics.io import atomic_write_bytes, atomic_write_text
    from reduced_dynamics.sweep.store import Store

    out = check_path("out", out)
    parquet = None if parquet is None else check_bool("parquet", parquet)
    if not (out / "points").is_dir() and not (out / "sweeps").is_dir():
        raise ValueError(f"`out` {str(out)!r} holds no sweep results (no points/ folder)")
    columns, rows = table_rows(Store(out).records())
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for r in rows:
        w.writerow([_csv_value(r[c]) for c in columns])
    csv_path = atomic_write_text(out / "table.csv", buf.getvalue())
    pq_path = None
    if parquet is None or parquet:
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            if parquet:
                raise ValueError("`parquet` needs pyarrow, which is not installed") from None
        else:
            table = pa.table({c: _arrow_column([r[c] for r in rows]) for c in columns})
            sink = pa.BufferOutputStream()
            pq.write_table(table, sink)
            pq_path = str(atomic_write_bytes(out / "table.parquet", sink.getvalue().to_pybytes()))
    n_failed = sum(r["status"] == "failed" for r in rows)
    return TableFiles(str(csv_path), pq_path, len(rows), len(columns), n_failed)


def load_table(out, *, status="done"):
    """The sweep folder's table as a pandas DataFrame (built from the store; needs pandas).

    Parameters
    ----------
    out : str or Path
        The sweep folder.
    status : {"done", "failed", None}
        Keep only these rows (None: all).

    Returns
    -------
    pandas.DataFrame
        One row per point; ``df.attrs["params"]`` lists the parameter columns and
        ``df.attrs["axes"]`` the varying parameters of the sweeps run into ``out``.

    Raises
    ------
    ValueError
        Naming ``out`` when it holds no sweep store, ``status`` when it is not one of the above.
    """
    try:
        import pandas as pd
    except ImportError:
        raise ValueError(
            "`load_table` needs pandas, which is not installed: pip install 'reduced-dynamics[sweep]' "
            "(or read table.csv with the csv module)"
        ) from None
    from reduced_dynamics._validation import check_path
    from reduced_dynamics.sweep.store import Store

    if status is not None and (not isinstance(status, str) or status not in ("done", "failed")):
        raise ValueError(f"`status` must be 'done', 'failed' or None, got {status!r:.80}")
    out = check_path("out", out)
    if not (out / "points").is_dir():
        raise ValueError(f"`out` {str(out)!r} holds no sweep results (no points/ folder)")
    store = Store(out)
    records = store.records()
    columns, rows = table_rows(records)
    df = pd.DataFrame(rows, columns=columns)
    if status is not None:
        df = df[df["status"] == status].reset_index(drop=True)
    params = [c for rec in records[:1] for c in rec["config"]]
    for rec in records[1:]:
        params += [c for c in rec["config"] if c not in params]
    df.attrs["params"] = params
    axes: list[str] = []
    for m in store.manifests().values():
        axes += [a for a in m.get("axes", []) if a not in axes]
    df.attrs["axes"] = axes
    return df
