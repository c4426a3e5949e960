"""Benchmark: sweeps on this machine's cores, the per-point overhead, and figures/check with --workers.

Run ``python benchmarks/bench_sweep.py [--quick] [--reps R]``. Printed side by side, from one run,
repetitions interleaved, medians:

1. An 8-point training sweep (``train`` at d=5, L=40, H=2, batch 256, --steps S each, seeds 0..7):
   ``--workers 2`` (local process pool) against ``--workers 1`` (serial, in process). Target >= 1.8x.
2. The per-point overhead of the store and executor for a trivial command (``run`` to t = 1e-3
   with RK45: a few ms): the sweep's wall time minus the same points run by a plain loop over
   ``reduced_dynamics.cli.main`` in this process, per point. Serial, local pool of 2 and dask
   LocalCluster of 2 (its start-up timed apart). Target < 50 ms.
3. ``figures --quick`` and ``check --quick`` with workers 2 against 1 (``run_figures``,
   ``run_checks``: the functions behind the commands).

Wall time (time.perf_counter) and CPU time (this process's time.process_time plus the CPU of its
finished child processes, resource.RUSAGE_CHILDREN) are both reported. The machine has 2 cores
shared with other jobs: wall-time ratios are noisy; CPU time shows what the work cost, and the
machine's *capacity* (2 x the wall time of a pure-Python loop in one process over the wall time of
the same loop in each of two processes, measured before each repetition) shows the most any
2-worker speed-up could have been at that moment (2.0 on two free cores).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import resource
import shutil
import statistics
import tempfile
import time
from pathlib import Path


def _child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def measure(fn):
    """(wall seconds, CPU seconds) of ``fn()``; CPU includes child processes reaped during it."""
    c0, k0, t0 = time.process_time(), _child_cpu(), time.perf_counter()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0 + _child_cpu() - k0


def _burn(n: int) -> float:
    s = 0
    for i in range(n):
        s += i * i
    return float(s)


def capacity(n: int = 3_000_000) -> float:
    """What this machine gives two processes right now: 2 x wall(1 process, work W) / wall(2 processes, W each).

    2.0 on two free cores; less when other jobs share them. The sweep speed-ups are best read against it.
    """
    import multiprocessing as mp

    t0 = time.perf_counter()
    _burn(n)
    w1 = time.perf_counter() - t0
    with mp.get_context("fork").Pool(2) as pool:
        pool.map(_burn, [1000, 1000])  # start-up outside the timing
        t0 = time.perf_counter()
        pool.map(_burn, [n, n])
        w2 = time.perf_counter() - t0
    return 2 * w1 / w2


def train_spec(steps: int) -> dict:
    return {
        "command": "train",
        "name": "bench_train",
        "seeds": list(range(8)),
        "fixed": {"d": 5, "L": 40, "heads": 2, "steps": steps, "batch": 256, "n-eval": 2000},
    }


def trivial_spec(n: int) -> dict:
    return {
        "command": "run",
        "name": "bench_trivial",
        "seeds": list(range(n)),
        "fixed": {"t-end": 1e-3, "n-eval": 2, "d": 3, "L": 10, "method": "RK45", "rtol": 1e-6},
    }


def direct_loop(spec: dict) -> None:
    """The same points as plain command-line calls in this process (no store, no executor)."""
    from reduced_dynamics.cli import main
    from reduced_dynamics.sweep import plan_sweep

    for inv in plan_sweep(spec).invocations:
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(list(inv.argv)) == 0


def sweep_fresh(spec, *, workers=None, executor=None):
    from reduced_dynamics.sweep import run_sweep

    out = Path(tempfile.mkdtemp(prefix="bench_sweep_"))
    try:
        run = run_sweep(spec, out=out, workers=workers, executor=executor)
        assert run.n_done == run.n_points and run.n_cached == 0, run
    finally:
        shutil.rmtree(out, ignore_errors=True)


def _hms(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.2f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.1f} s"


def paper_projection(report, *, workers: int = 2, cores=(1, 2, 8, 64)) -> None:
    """Per-point CPU costs of the paper-scale grids, measured by sweeps, and the wall time on more cores.

    Training: every (H, L) of examples/sweeps/trained_risk_vs_L.toml trained for 300 and 900 steps (seed 0);
    the CPU-time difference / 600 is the cost of a step, the rest the fixed cost (risk on 20000 prompts);
    a 5e5-step point costs fixed + 5e5 x step. Drift law: every point of examples/sweeps/drift_law.toml
    (seed 0) run at full size; its CPU time. Projection on P cores: longest-first greedy schedule of the
    grid's points (seeds included) plus the measured per-point overhead, ignoring start-up.
    """
    import heapq

    from reduced_dynamics.sweep import load_spec, run_sweep
    from reduced_dynamics.sweep.store import Store

    root = Path(__file__).resolve().parents[1] / "examples" / "sweeps"
    tmp = Path(tempfile.mkdtemp(prefix="bench_paper_"))
    try:
        full = load_spec(root / "trained_risk_vs_L.toml")
        grid = dict(full.axes)
        probe = {
            "command": "train",
            "name": "probe",
            "seeds": [0],
            "fixed": {**{k: v for k, v in full.fixed.items() if k != "steps"}},
            "axes": {**grid, "steps": [300, 900]},
        }
        run_sweep(probe, out=tmp / "train", workers=workers)
        cpu = {}
        for rec in Store(tmp / "train").records():
            c = rec["config"]
            cpu[(c["heads"], c["L"], c["steps"])] = rec["cpu_seconds"]
        train_costs = []
        for H in grid["heads"]:
            for L in grid["L"]:
                step = (cpu[(H, L, 900)] - cpu[(H, L, 300)]) / 600
                fixed = cpu[(H, L, 300)] - 300 * step
                point = fixed + full.fixed["steps"] * step
                train_costs += [point] * len(full.seeds)
                report(
                    f"[paper train] H={H} L={L}: {1e3 * step:.2f} ms CPU/step, fixed {fixed:.2f} s -> "
                    f"{point / 60:.1f} min CPU per {full.fixed['steps']:.0e}-step point"
                )
        drift = load_spec(root / "drift_law.toml")
        spec = {**drift.source, "seeds": [0]}
        spec.pop("quick", None)
        run_sweep(spec, out=tmp / "drift", workers=workers)
        d_costs = [r["cpu_seconds"] for r in Store(tmp / "drift").records()] * len(drift.seeds)
        report(
            f"[paper drift] {len(d_costs) // len(drift.seeds)} points at t_end=1e7: CPU per point "
            f"median {statistics.median(d_costs):.2f} s, max {max(d_costs):.2f} s"
        )
        for name, costs in (("trained risk vs L", train_costs), ("drift law", d_costs)):
            total = sum(costs)
            parts = []
            for p_ in cores:
                loads = [0.0] * p_
                heapq.heapify(loads)
                for c in sorted(costs, reverse=True):
                    heapq.heappush(loads, heapq.heappop(loads) + c)
                wall = max(loads)
                parts.append(f"{p_} cores {_hms(wall)} (efficiency {total / (p_ * wall):.0%})")
            report(
                f"[paper projection] {name}: {len(costs)} points, {_hms(total)} CPU in total; "
                + "; ".join(parts)
                + f"; lower bound on any number of cores: the longest point, {_hms(max(costs))}"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def med(xs):
    return statistics.median(xs)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run, not the measurement)")
    p.add_argument("--reps", type=int, default=3, help="interleaved repetitions (default 3)")
    p.add_argument("--skip", default="", help="comma-separated parts to skip: train,overhead,dask,figures,check")
    p.add_argument(
        "--paper",
        action="store_true",
        help="also measure the paper grids' per-point costs and project them to 64 cores",
    )
    a = p.parse_args()
    skip = set(filter(None, a.skip.split(",")))
    reps = a.reps
    lines = []

    def report(text):
        print(text, flush=True)
        lines.append(text)

    # 1. training sweep, 2 workers vs 1
    if "train" not in skip:
        steps = 200 if a.quick else 1500
        spec = train_spec(steps)
        res = {1: [], 2: []}
        caps, ratios = [], []
        for _ in range(reps):
            caps.append(capacity())
            for w in (1, 2):
                res[w].append(measure(lambda w=w: sweep_fresh(spec, workers=w)))
            ratios.append(res[1][-1][0] / res[2][-1][0])
        w1, w2 = med([r[0] for r in res[1]]), med([r[0] for r in res[2]])
        c1, c2 = med([r[1] for r in res[1]]), med([r[1] for r in res[2]])
        report(
            f"[train sweep] 8 points x {steps} steps (d=5, L=40, H=2, batch 256), median of {reps}: "
            f"workers=1 {w1:.2f} s wall / {c1:.2f} s CPU; workers=2 {w2:.2f} s wall / {c2:.2f} s CPU; "
            f"speed-up {w1 / w2:.2f}x (target >= 1.8x; per repetition {', '.join(f'{r:.2f}' for r in ratios)}); "
            f"machine capacity for 2 processes {med(caps):.2f}x (per repetition {', '.join(f'{c:.2f}' for c in caps)}); "
            f"per point {w1 / 8:.2f} s serial; load average {os.getloadavg()[0]:.1f}"
        )

    # 2. per-point overhead on a trivial command
    if "overhead" not in skip:
        n = 20 if a.quick else 60
        spec = trivial_spec(n)
        direct_loop(spec)  # warm-up (imports, caches)
        sweep_fresh(spec, workers=1)
        runs = {"direct": [], "serial": [], "local2": []}
        for _ in range(reps):
            runs["direct"].append(measure(lambda: direct_loop(spec)))
            runs["serial"].append(measure(lambda: sweep_fresh(spec, workers=1)))
            runs["local2"].append(measure(lambda: sweep_fresh(spec, workers=2)))
        d = med([r[0] for r in runs["direct"]])
        s = med([r[0] for r in runs["serial"]])
        l2 = med([r[0] for r in runs["local2"]])
        dc, sc, lc = (med([r[1] for r in runs[k]]) for k in ("direct", "serial", "local2"))
        report(
            f"[overhead] {n} trivial points (run to t=1e-3, RK45), median of {reps}: plain loop of cli.main "
            f"{1e3 * d / n:.1f} ms/point; sweep serial {1e3 * s / n:.1f} ms/point -> overhead "
            f"{1e3 * (s - d) / n:.1f} ms/point (target < 50 ms); local pool of 2 {1e3 * l2 / n:.1f} ms/point wall "
            f"(incl. pool start), worker-time overhead {1e3 * (2 * l2 - d) / n:.1f} ms/point; in CPU time "
            f"(less sensitive to other jobs): plain loop {1e3 * dc / n:.1f}, sweep serial {1e3 * sc / n:.1f} "
            f"(overhead {1e3 * (sc - dc) / n:.1f}), local pool of 2 {1e3 * lc / n:.1f} (overhead "
            f"{1e3 * (lc - dc) / n:.1f}) ms/point; load average {os.getloadavg()[0]:.1f}"
        )
        if "dask" not in skip:
            try:
                import distributed  # noqa: F401
            except ImportError:
                report("[overhead dask] skipped: dask.distributed not installed")
            else:
                from reduced_dynamics.sweep import DaskExecutor

                start = []
                dask_runs = []
                for _ in range(reps):
                    t0 = time.perf_counter()
                    ex = DaskExecutor("local", workers=2)
                    start.append(time.perf_counter() - t0)
                    try:
                        sweep_fresh(spec, executor=ex)  # warm-up: imports on the workers
                        dask_runs.append(measure(lambda ex=ex: sweep_fresh(spec, executor=ex)))
                    finally:
                        ex.close()
                dk = med([r[0] for r in dask_runs])
                dkc = med([r[1] for r in dask_runs])
                report(
                    f"[overhead dask] LocalCluster of 2 (start-up {med(start):.2f} s, not included), median of {reps}: "
                    f"{1e3 * dk / n:.1f} ms/point wall; worker-time overhead {1e3 * (2 * dk - d) / n:.1f} ms/point "
                    f"over the plain loop; CPU time of this process {1e3 * dkc / n:.1f} ms/point (the workers' CPU "
                    f"is not counted: they are not children reaped during the timing)"
                )

    # 3. figures --quick and check --quick, workers 2 vs 1
    if not {"figures", "check"} <= skip:
        from proofs_check.checks import run_checks
        from reduced_dynamics.figures.registry import run_figures
        from reduced_dynamics.setting import PAPER_SETTING

        parts = {}
        if "figures" not in skip:

            def figs(w):
                out = Path(tempfile.mkdtemp(prefix="bench_figs_"))
                try:
                    run_figures(out=out, quick=True, seed=0, workers=w)
                finally:
                    shutil.rmtree(out, ignore_errors=True)

            parts["figures --quick"] = figs
        if "check" not in skip:
            parts["check --quick"] = lambda w: run_checks(PAPER_SETTING, quick=True, workers=w)
        r = {(k, w): [] for k in parts for w in (1, 2)}
        caps = []
        for _ in range(max(1, reps - 1)):
            for k, fn in parts.items():
                caps.append(capacity())
                for w in (1, 2):
                    r[(k, w)].append(measure(lambda fn=fn, w=w: fn(w)))
        for k in parts:
            w1, w2 = med([x[0] for x in r[(k, 1)]]), med([x[0] for x in r[(k, 2)]])
            c1, c2 = med([x[1] for x in r[(k, 1)]]), med([x[1] for x in r[(k, 2)]])
            report(
                f"[{k}] median of {max(1, reps - 1)}: workers=1 {w1:.2f} s wall / {c1:.2f} s CPU; "
                f"workers=2 {w2:.2f} s wall / {c2:.2f} s CPU; speed-up {w1 / w2:.2f}x"
            )
        report(f"[machine] capacity for 2 processes during figures/check: {', '.join(f'{c:.2f}' for c in caps)}x")
    if a.paper:
        paper_projection(report)
    print("\nsummary:")
    for line in lines:
        print("  " + line)


if __name__ == "__main__":
    main()
