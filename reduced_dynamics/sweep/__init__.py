"""Sweeps: grids of runs, risks, trainings and checks on all cores or a dask cluster, cached, resumable, tabulated.

A sweep is a TOML specification (:mod:`reduced_dynamics.sweep.spec`: a command,
fixed parameters, axes, seeds). :func:`run_sweep` validates every point first
(as the command itself would), then runs each unfinished point through the
command line's own code path on an executor (:mod:`reduced_dynamics.sweep.executors`:
a local process pool by default, dask.distributed optionally) and writes each
result atomically into a content-addressed store (:mod:`reduced_dynamics.sweep.store`),
keyed by the hash of the point's full configuration and the package version.
Rerunning a spec skips finished points. :func:`write_table` / :func:`load_table`
collect the store into one tidy table; :func:`plot_sweep` draws a metric against an
axis, mean ± SE over seeds.

Command line: ``reduced-dynamics sweep SPEC [--quick] [--out DIR] [--workers N | --scheduler ADDRESS|local]``
and ``reduced-dynamics sweep-table DIR``.
"""

from reduced_dynamics.sweep.commands import SWEEP_COMMANDS, Invocation, SweepCommand, run_point
from reduced_dynamics.sweep.executors import (
    DaskExecutor,
    Executor,
    LocalExecutor,
    SerialExecutor,
    default_workers,
    make_executor,
)
from reduced_dynamics.sweep.plot import SweepCurves, plot_sweep, sweep_curves
from reduced_dynamics.sweep.runner import ProgressBar, SweepPlan, SweepRun, SweepStatus, plan_sweep, run_sweep
from reduced_dynamics.sweep.spec import SweepSpec, load_spec
from reduced_dynamics.sweep.store import Store
from reduced_dynamics.sweep.table import TableFiles, load_table, write_table

__all__ = [
    "load_spec",
    "SweepSpec",
    "plan_sweep",
    "SweepPlan",
    "run_sweep",
    "SweepRun",
    "SweepStatus",
    "ProgressBar",
    "Store",
    "write_table",
    "load_table",
    "TableFiles",
    "sweep_curves",
    "plot_sweep",
    "SweepCurves",
    "Executor",
    "SerialExecutor",
    "LocalExecutor",
    "DaskExecutor",
    "make_executor",
    "default_workers",
    "SWEEP_COMMANDS",
    "SweepCommand",
    "Invocation",
    "run_point",
]
