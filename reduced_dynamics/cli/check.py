"""``reduced-dynamics check``: run every check of the theory and print a PASS/FAIL table.

The checks live in the separate package :mod:`proofs_check` (which imports the library); this
command is its front end and imports it inside :func:`main` only -- the one exception to the rule
that the library never imports the checker (tests/test_layering.py).
"""

from __future__ import annotations

import json
import sys
import textwrap
import time

from reduced_dynamics.cli._common import (
    Progress,
    add_quiet,
    check_own_file,
    exit_codes_epilog,
    nonempty,
    prepare_out,
)
from reduced_dynamics.cli._setting import add_setting_arguments, setting_from_args
from reduced_dynamics.io import atomic_write_json, to_jsonable

HELP = "Run the numerical checks of the theory (docs/theory.md#gradient-flow, #theorem-1) and print predicted / measured / tolerance / PASS, FAIL, ERROR or SKIPPED (exit 1 if any check FAILs or ERRORs)."


def add_arguments(p):
    p.add_argument("--quick", action="store_true", help="smaller grids and shorter runs (under a minute)")
    add_setting_arguments(p)
    p.add_argument("--only", type=str, default=None, help="comma-separated subset of check names")
    p.add_argument(
        "--out",
        type=nonempty,
        default=None,
        help="also write the full results (with data and the setting) to this JSON file (a name you choose; an "
        "existing file is replaced only if check wrote it with the same options, or with --force)",
    )
    p.add_argument("--force", action="store_true", help="replace an existing --out file whatever wrote it")
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="run independent checks in parallel on this many processes (default 1; results do not depend on it)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    add_quiet(p)


EPILOG = exit_codes_epilog(fail="a check did not PASS: FAIL or ERROR")


def parse_only(text):
    """``--only`` as a list of names: comma-separated, no empty item; None when not given."""
    if text is None:
        return None
    names = [s.strip() for s in text.split(",")]
    if any(not n for n in names):
        raise ValueError(f"`--only` must be a comma-separated list of check names without empty items, got {text!r}")
    return names


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
    # The one place the library imports its checker package (tests/test_layering.py): this command is
    # the checker's front end. Imported when the command runs, so no other command and not
    # ``import reduced_dynamics`` loads proofs_check.
    from proofs_check.checks import CHECKS, run_checks

    setting = setting_from_args(args)
    only = parse_only(args.only)
    unknown = [n for n in only or () if n not in CHECKS]
    if unknown:  # before any work (a sweep's dry run validates up to the Progress below)
        raise ValueError(f"`--only` must name checks among {list(CHECKS)}, got {unknown}")
    if not 1 <= args.workers <= 512:
        raise ValueError(f"`--workers` must be an integer in [1, 512], got {args.workers}")
    prepare_out(args.out, is_file=True)
    made_by = {
        "command": "check",
        "quick": bool(args.quick),
        "only": only,
        "d": setting.d,
        "L": setting.L,
        "sigma2": float(setting.sigma2),
    }
    if args.out:
        check_own_file(args.out, made_by, force=args.force)
    t0 = time.perf_counter()
    lines = Progress("check", quiet=args.quiet)

    def progress(name, seconds, res):
        lines.stage(f"{name}: {res.status} ({seconds:.1f} s)")

    results = run_checks(setting, quick=args.quick, only=only, progress=progress, workers=args.workers)
    lines.close()
    # A SKIPPED check (its statement does not apply at this setting) is reported but does not fail the run.
    passed = all(r.passed or r.status == "SKIPPED" for r in results)
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
        atomic_write_json(args.out, {**payload, "made_by": made_by, "checks": [r.to_dict() for r in results]})
    if args.json:
        sys.stdout.write(json.dumps(to_jsonable(payload)) + "\n")
    else:
        print(_table(results))
        n_skipped = sum(r.status == "SKIPPED" for r in results)
        skipped = f", {n_skipped} skipped (outside the theory's range)" if n_skipped else ""
        print(f"{sum(r.passed for r in results)}/{len(results)} checks passed{skipped} in {payload['seconds']:.1f} s")
    return 0 if passed else 1
