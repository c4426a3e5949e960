"""``reduced-dynamics sweep``: run a grid of points of one command (a TOML spec) on all cores or a dask cluster."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from reduced_dynamics.cli._common import add_quiet, exit_codes_epilog, nonempty
from reduced_dynamics.io import to_jsonable

HELP = (
    "Run a sweep (a TOML spec: command, fixed parameters, axes, seeds) over all cores or a dask cluster; "
    "results cached in --out, resumable, tabulated in --out/table.csv."
)
EPILOG = exit_codes_epilog(fail="a point failed: it is recorded with its error, the other points ran") + (
    "\n\nThe spec (examples/sweeps/*.toml; reduced_dynamics.sweep.spec documents the format):\n"
    '  command = "risk"\n'
    "  seeds = 3\n"
    "  [fixed]\n"
    "  prompts = 20000\n"
    "  [axes]\n"
    "  L = [10, 20, 40]\n"
    "  sigma2 = { logspace = [0.01, 1, 3] }\n"
    "Every point is validated before any runs (exit 2 naming the point and the flag). Each result is\n"
    "written atomically to --out/points/ under the hash of its full configuration and the package\n"
    "version; rerunning the spec skips finished points (a killed sweep loses only the points in flight).\n"
    "--out/table.csv (and table.parquet with pyarrow) is written at the end (also: sweep-table DIR)."
)


def add_arguments(p):
    p.add_argument("spec", type=nonempty, metavar="SPEC", help="the sweep specification (TOML)")
    p.add_argument("--quick", action="store_true", help="the spec's [quick] sizes (seconds)")
    p.add_argument(
        "--out",
        type=nonempty,
        default=None,
        help="sweep folder holding the results (default sweeps/<spec name>, sweeps/<spec name>-quick with --quick)",
    )
    p.add_argument("--workers", type=int, default=None, help="local worker processes (default: all cores; 1: serial)")
    p.add_argument(
        "--scheduler",
        type=nonempty,
        default=None,
        metavar="ADDRESS|local",
        help="dask.distributed: 'local' starts a LocalCluster (--workers sets its size), tcp://host:port connects",
    )
    p.add_argument("--retry-failed", action="store_true", help="rerun the points recorded as failed")
    p.add_argument(
        "--force",
        action="store_true",
        help="replace the manifest of a different sweep of the same name in --out (its points stay in the store)",
    )
    p.add_argument("--dry-run", action="store_true", help="validate the spec and every point, print the plan, run none")
    p.add_argument("--json", action="store_true", help="print one JSON object (the run's counts and files)")
    add_quiet(p)


def _validation_progress(quiet: bool):
    """``progress(i, n)`` for :func:`plan_sweep`: a line on stderr every 2 s once validation has taken 1 s."""
    import time

    if quiet:
        return None
    t0 = time.perf_counter()
    last = [t0 - 1.0]

    def progress(i, n):
        now = time.perf_counter()
        if now - t0 >= 1.0 and now - last[0] >= 2.0:
            last[0] = now
            sys.stderr.write(f"reduced-dynamics sweep: validated {i}/{n} points [{now - t0:.1f} s]\n")
            sys.stderr.flush()

    return progress


def main(args) -> int:
    from reduced_dynamics.sweep.runner import ProgressBar, plan_sweep, run_sweep
    from reduced_dynamics.sweep.spec import load_spec
    from reduced_dynamics.sweep.store import Store
    from reduced_dynamics.sweep.table import write_table

    workers = args.workers
    if args.scheduler not in (None, "local") and workers is not None:
        raise ValueError(
            "`--workers` sets the size of a local pool or of `--scheduler local`, not of a running cluster"
        )
    if workers is not None and not 1 <= workers <= 512:
        raise ValueError(f"`--workers` must be an integer in [1, 512], got {workers}")
    from reduced_dynamics.sweep.executors import check_scheduler

    check_scheduler(args.scheduler)  # before validating the points (minutes for a large grid)
    spec = load_spec(args.spec, quick=args.quick)
    plan = plan_sweep(spec, progress=_validation_progress(args.quiet))
    out = Path(args.out) if args.out else Path("sweeps") / (spec.name + ("-quick" if args.quick else ""))
    if args.dry_run:
        store = Store(out)
        cached = sum(store.get(inv.key) is not None for inv in plan.invocations)
        payload = {
            "name": spec.name,
            "command": spec.command,
            "points": len(plan.invocations),
            "cached": cached,
            "axes": spec.axis_names,
            "out": str(out),
            "argv": [list(inv.argv) for inv in plan.invocations],
        }
        if args.json:
            sys.stdout.write(json.dumps(payload) + "\n")
        else:
            print(f"{spec.name}: {len(plan.invocations)} points of `{spec.command}` ({cached} already in {out})")
            for inv in plan.invocations:
                print("  reduced-dynamics " + " ".join(inv.argv[:-2]))
        return 0
    bar = ProgressBar(quiet=args.quiet)
    try:
        run = run_sweep(
            plan,
            out=out,
            workers=workers,
            scheduler=args.scheduler,
            retry_failed=args.retry_failed,
            progress=bar,
            force=args.force,
        )
    finally:
        bar.finish()
    files = write_table(out)
    payload = {**run.to_dict(), "table": files.csv, "parquet": files.parquet}
    payload.pop("keys")
    if args.json:
        sys.stdout.write(json.dumps(to_jsonable(payload)) + "\n")
    else:
        print(
            f"{run.name}: {run.n_done}/{run.n_points} points done ({run.n_cached} cached), {run.n_failed} failed, "
            f"{run.seconds:.1f} s on {run.executor}"
        )
        for f in run.failures[:10]:
            print(f"  failed {f['params']}: {f['error']}")
        if len(run.failures) > 10:
            print(f"  ... and {len(run.failures) - 10} more failures (table: status == failed)")
        print(f"  table: {files.csv}" + (f" and {files.parquet}" if files.parquet else ""))
    return 0 if run.n_failed == 0 else 1
