"""``reduced-dynamics sweep-table``: collect a sweep folder's results into one tidy table (CSV, Parquet)."""

from __future__ import annotations

import json
import sys

from reduced_dynamics.cli._common import add_quiet, exit_codes_epilog, nonempty

#: the library's name for the folder (``write_table(out)``) -> the positional argument
PARAM_FLAGS = {"out": "DIR"}
HELP = "Collect every finished point of a sweep folder into DIR/table.csv (and DIR/table.parquet with pyarrow)."
EPILOG = exit_codes_epilog() + (
    "\n\nOne row per point, one column per parameter (the command's full configuration) and per scalar\n"
    "result (nested keys joined by dots: estimators.gd.risk). In Python:\n"
    "  from reduced_dynamics.sweep import load_table, plot_sweep\n"
    "  df = load_table('DIR')            # a pandas DataFrame\n"
    "  plot_sweep(df, metric='risk', x='L', by='heads')"
)


def add_arguments(p):
    p.add_argument("dir", type=nonempty, metavar="DIR", help="the sweep folder (sweep --out)")
    p.add_argument("--json", action="store_true", help="print one JSON object (files, rows, columns)")
    add_quiet(p)


def main(args) -> int:
    from reduced_dynamics.sweep.table import write_table

    files = write_table(args.dir)
    if args.json:
        sys.stdout.write(json.dumps(files.to_dict()) + "\n")
    else:
        print(
            f"{files.n_rows} points ({files.n_failed} failed) x {files.n_columns} columns -> {files.csv}"
            + (f" and {files.parquet}" if files.parquet else "")
        )
    return 0
