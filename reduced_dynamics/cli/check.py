"""``reduced-dynamics check``: run every check of the theory and print a PASS/FAIL table."""

from __future__ import annotations

import json
import sys
import textwrap
import time

from reduced_dynamics.cli._setting import add_setting_arguments, setting_from_args
from reduced_dynamics.io import atomic_write_json, to_jsonable

HELP = "Run the numerical checks of the theory (docs/theory.md#gradient-flow, #theorem-1) and print predicted / measured / tolerance / PASS, FAIL or ERROR (exit 1 unless all pass)."


def add_arguments(p):
    p.add_argument("--quick", action="store_true", help="smaller grids and shorter runs (under a minute)")
    add_setting_arguments(p)
    p.add_argument("--only", type=str, default=None, help="comma-separated subset of check names")
    p.add_argument("--out", type=str, default=None, help="also write the full results (with data) to this JSON file")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")


def _table(results) -> str:
    lines = []
    for r in results:
        lines.append(f"[{r.status}] {r.name}")
        rows = [("predicted", r.predicted), ("measured", r.measured), ("tolerance", r.tolerance)]
        if r.error:
            rows.append(("error", r.error))
        for label, text in rows:
            wrapped = textwrap.wrap(text, width=100, initial_indent=f"    {label:<10}", subsequent_indent=" " * 14)
            lines.extend(wrapped)
    return "\n".join(lines)


def main(args) -> int:
    from proofs_check.checks import run_checks

    setting = setting_from_args(args)
    only = [s.strip() for s in args.only.split(",") if s.strip()] if args.only else None
    t0 = time.perf_counter()

    def progress(name, seconds, res):
        if not args.json:
            sys.stderr.write(f"  {name}: {res.status} ({seconds:.1f} s)\n")

    results = run_checks(setting, quick=args.quick, only=only, progress=progress)
    passed = all(r.passed for r in results)
    payload = {
        "passed": passed,
        "quick": bool(args.quick),
        "d": setting.d,
        "L": setting.L,
        "sigma2": setting.sigma2,
        "seconds": time.perf_counter() - t0,
        "checks": [{k: v for k, v in r.to_dict().items() if k != "data"} for r in results],
    }
    if args.out:
        atomic_write_json(args.out, {**payload, "checks": [r.to_dict() for r in results]})
    if args.json:
        sys.stdout.write(json.dumps(to_jsonable(payload)) + "\n")
    else:
        print(_table(results))
        print(f"{sum(r.passed for r in results)}/{len(results)} checks passed in {payload['seconds']:.1f} s")
    return 0 if passed else 1
