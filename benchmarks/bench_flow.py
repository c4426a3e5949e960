"""Benchmark: the package's flow integrators against naive ``solve_ivp`` calls -- speed ratios and accuracy.

Run ``python benchmarks/bench_flow.py [--quick] [--only single|batch]``. Everything is measured in one process, side by side, with
interleaved repetitions (each contender once per round, rounds repeated) and medians; CPU time
(``time.process_time``) and wall time are both reported, because the machine (2 cores) is shared with other
jobs and wall time is noisy. The ratios use CPU time.

Setting: the paper's (d = 5, L = 40, σ² = 0.1), model ``reduced_model(S, n_heads=H)``, starts
``model.initial_state(seed=s, scale=0.01)``, t_end = 1e5 (``--quick``: 1e4), 400 log-spaced output times.

Contenders
----------
* ``package``: :func:`reduced_dynamics.integrate` with its defaults on the isotropic model (LSODA in odeint's
  Fortran loop, analytic Jacobian, pre-bound float kernels, rtol 1e-11, atol 1e-14, both events active).
* ``naive LSODA`` / ``naive Radau``: ``solve_ivp(rhs, (0, t_end), y0, method=..., t_eval=..., rtol=1e-8,
  atol=1e-11)`` without a Jacobian, with a plain numpy right-hand side as a researcher would write it
  (``E = exp(d ωωᵀ)``, two matrix-vector products), the package's former default tolerances.
* ``batch(B)``: :func:`reduced_dynamics.integrate` on a ``(B, 2H)`` array of starts with
  ``method="batch-Radau"`` (the batched Radau IIA, default rtol 1e-6, atol 1e-10) on B = 256 starts
  (``--quick``: 64).
* ``loop of naive LSODA`` / ``loop of package``: the same B starts one after the other.
* ``CLI run --n-init``: ``python -m reduced_dynamics run --n-init B --t-end ... --json`` in a subprocess, start-up
  included (the in-process and the command-line ratios are printed side by side, in one run) (its CPU time counted through ``RUSAGE_CHILDREN``); the same B starts. The child runs as an installed
  command does, from cached bytecode: ``PYTHONDONTWRITEBYTECODE`` (set in some sandboxes, which would make every
  run recompile the package's ~50 modules, ~0.1 s) is dropped for it, its bytecode goes to a temporary
  ``PYTHONPYCACHEPREFIX`` (never into the checkout), and one untimed run fills that cache first.

Accuracy: the maximum absolute difference of the final state (ω, μ) from a tight reference
(``integrate(model, y0, method="Radau", rtol=1e-12, atol=1e-15)``), per single-trajectory contender; for the batch,
the largest difference over all B trajectories from the package's single-trajectory result, and over the
first 8 from the tight reference.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
from scipy.integrate import solve_ivp

from reduced_dynamics.flow import integrate
from reduced_dynamics.models import reduced_model
from reduced_dynamics.setting import Setting

S = Setting(d=5, L=40, sigma2=0.1)


def log_times(t_end, n, t_first):
    """0 and ``n - 1`` log-spaced times from ``t_first`` to ``t_end`` (the package's output times)."""
    return np.concatenate([[0.0], np.geomspace(t_first, t_end, n - 1)])


def naive(y0, H, t_end, method):
    """A plain ``solve_ivp`` call without a Jacobian (numpy right-hand side)."""
    d, c = float(S.d), float(S.c)

    def rhs(_t, y):
        w, m = y[:H], y[H:]
        E = np.exp(d * np.outer(w, w))
        u = m @ w
        return -np.concatenate([2 * m * (u - 1 + c * d * (E @ (m * w))), 2 * ((u - 1) * w + c * (E @ m))])

    t_eval = log_times(t_end, 400, 1e-2)
    return solve_ivp(rhs, (0.0, t_end), y0, method=method, t_eval=t_eval, rtol=1e-8, atol=1e-11).y[:, -1]


#: the child processes import the package of this checkout, from bytecode cached in a temporary folder
_ENV = {
    **{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
    "PYTHONPATH": os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
        + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    ),
    "PYTHONPYCACHEPREFIX": os.path.join(tempfile.gettempdir(), f"bench_flow_pycache_{os.getuid()}"),
}


def _cpu():
    """CPU seconds of this process and its finished children (a subprocess contender is timed too)."""
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + ch.ru_utime + ch.ru_stime


def timed(fn):
    c0, w0 = _cpu(), time.perf_counter()
    out = fn()
    return out, _cpu() - c0, time.perf_counter() - w0


def rounds(contenders, reps):
    """Run each contender once per round, ``reps`` rounds; return {name: (last output, cpu list, wall list)}."""
    res = {k: [None, [], []] for k in contenders}
    for _ in range(reps):
        for name, fn in contenders.items():
            out, c, w = timed(fn)
            res[name][0] = out
            res[name][1].append(c)
            res[name][2].append(w)
    return res


def med(x):
    return statistics.median(x)


def single(H, t_end, reps):
    model = reduced_model(S, n_heads=H)
    y0 = model.initial_state(seed=0, scale=0.01)
    ref = integrate(model, y0, t_end=t_end, method="Radau", rtol=1e-12, atol=1e-15, stationarity_tol=0)
    yref = ref.y[:, -1]
    res = rounds(
        {
            "package": lambda: integrate(model, y0, t_end=t_end).y[:, -1],
            "naive LSODA": lambda: naive(y0, H, t_end, "LSODA"),
            "naive Radau": lambda: naive(y0, H, t_end, "Radau"),
        },
        reps,
    )
    print(f"\nH = {H}, one trajectory to t = {t_end:g} (medians of {reps} interleaved rounds)")
    print(f"  {'contender':<14} {'CPU s':>9} {'wall s':>9} {'|y_end - ref|':>14}")
    for name, (y, c, w) in res.items():
        print(f"  {name:<14} {med(c):9.4f} {med(w):9.4f} {np.max(np.abs(y - yref)):14.2e}")
    p = med(res["package"][1])
    print(f"  ratio naive LSODA / package (CPU): {med(res['naive LSODA'][1]) / p:6.2f}   (target >= 2)")
    print(f"  ratio naive Radau / package (CPU): {med(res['naive Radau'][1]) / p:6.2f}")
    return med(res["naive LSODA"][1]) / p


def batch(B, t_end, reps):
    model = reduced_model(S, n_heads=2)
    Y0 = np.array([model.initial_state(seed=s, scale=0.01) for s in range(B)])

    def loop_package():
        return np.array([integrate(model, Y0[i], t_end=t_end).y[:, -1] for i in range(B)])

    def loop_naive():
        return np.array([naive(Y0[i], 2, t_end, "LSODA") for i in range(B)])

    def run_batch():
        return integrate(model, Y0, t_end=t_end, method="batch-Radau").y_stop

    def cli_batch(env=_ENV):
        # the same B starts (seeds 0..B-1) from the command line, start-up included; the child's CPU time is
        # counted by the rounds' process_time through RUSAGE_CHILDREN (see _child_cpu)
        argv = [sys.executable, "-m", "reduced_dynamics", "run", "--n-init", str(B), "--t-end", repr(t_end)]
        out = subprocess.run([*argv, "--quiet", "--json"], capture_output=True, text=True, check=True, env=env)
        import json

        stop = json.loads(out.stdout)
        return np.concatenate([np.asarray(stop["omega"]), np.asarray(stop["mu"])], axis=1)

    cli_batch()  # untimed: fills the child's bytecode cache (an installed command has its bytecode)
    contenders = {
        "batch": run_batch,
        "loop of package": loop_package,
        "loop of naive LSODA": loop_naive,
        "CLI run --n-init": cli_batch,
    }
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):  # also as this environment runs it: recompiling every time
        # (without the cache prefix: Python would still read the cached bytecode from it)
        recompiling = {k: v for k, v in _ENV.items() if k != "PYTHONPYCACHEPREFIX"}
        contenders["CLI, recompiling"] = lambda: cli_batch({**recompiling, "PYTHONDONTWRITEBYTECODE": "1"})
    res = rounds(contenders, reps)
    yb, yp = res["batch"][0], res["loop of package"][0]
    k = min(B, 8)
    tight = np.array(
        [integrate(model, Y0[i], t_end=t_end, method="Radau", rtol=1e-12, atol=1e-15).y[:, -1] for i in range(k)]
    )
    print(f"\nH = 2, a batch of B = {B} trajectories to t = {t_end:g} (medians of {reps} interleaved rounds)")
    print(f"  {'contender':<20} {'CPU s':>9} {'wall s':>9}")
    for name, (_, c, w) in res.items():
        print(f"  {name:<20} {med(c):9.3f} {med(w):9.3f}")
    b = med(res["batch"][1])
    r_naive = med(res["loop of naive LSODA"][1]) / b
    print(f"  ratio loop of naive LSODA / batch (CPU): {r_naive:6.2f}   (target >= 30)")
    print(f"  ratio loop of package / batch (CPU):     {med(res['loop of package'][1]) / b:6.2f}")
    r_cli = med(res["loop of naive LSODA"][1]) / med(res["CLI run --n-init"][1])
    print(f"  ratio loop of naive LSODA / CLI run --n-init {B} (CPU, start-up included): {r_cli:6.2f}   (target >= 20)")
    if "CLI, recompiling" in res:
        r_re = med(res["loop of naive LSODA"][1]) / med(res["CLI, recompiling"][1])
        print(f"  ratio loop of naive LSODA / CLI recompiling its bytecode (PYTHONDONTWRITEBYTECODE): {r_re:6.2f}")
    print(f"  max |CLI - batch| over {B}: {np.max(np.abs(res['CLI run --n-init'][0] - yb)):.2e}")
    rel_p = np.linalg.norm(yb - yp, axis=1) / np.linalg.norm(yp, axis=1)
    print(f"  max |batch - package single| over {B}: {np.max(np.abs(yb - yp)):.2e}, relative {np.max(rel_p):.2e}")
    print(f"  max |batch - tight reference| over {k}: {np.max(np.abs(yb[:k] - tight)):.2e}")
    rel = np.linalg.norm(yb[:k] - tight, axis=1) / np.linalg.norm(tight, axis=1)
    print(f"  max relative |batch - tight reference| over {k}: {np.max(rel):.2e}   (target <= 1e-6)")
    print(
        f"  max |loop of naive LSODA - tight reference| over {k}: {np.max(np.abs(res['loop of naive LSODA'][0][:k] - tight)):.2e}"
    )
    return r_naive, r_cli


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="t_end = 1e4, B = 64, one round for the batch")
    ap.add_argument(
        "--only",
        choices=["single", "batch"],
        default=None,
        help="run only the single-trajectory comparisons or only the batch ones (default: both)",
    )
    args = ap.parse_args(argv)
    t_end = 1e4 if args.quick else 1e5
    reps = 3
    print("bench_flow: CPU and wall seconds, medians of interleaved rounds; ratios from CPU time")
    print("(2-core machine shared with other jobs: wall time is noisy, CPU time less so)")
    ratios = {H: single(H, t_end, reps) for H in (1, 2, 3)} if args.only != "batch" else {}
    B = 64 if args.quick else 256
    r_batch = batch(B, t_end, 1 if args.quick else 3) if args.only != "single" else None
    print()
    if ratios:
        print(
            "summary: package single vs naive LSODA (CPU) " + ", ".join(f"H={h}: {r:.2f}x" for h, r in ratios.items())
        )
    if r_batch is not None:
        print(
            f"summary: batch of {B} vs loop of naive LSODA (CPU): in process {r_batch[0]:.2f}x (target >= 30), "
            f"from the command line (run --n-init {B}) {r_batch[1]:.2f}x (target >= 20)"
        )


if __name__ == "__main__":
    main()
