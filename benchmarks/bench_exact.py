"""Benchmark: the exact finite-L risk evaluator vs the Monte Carlo engine -- speed, precision per second, agreement.

Run ``python benchmarks/bench_exact.py [--quick]``. Everything is measured in one process, side by side,
with interleaved repetitions (exact, Monte Carlo, control-variate Monte Carlo, exact, ...) and medians;
CPU time (``time.process_time``) and wall time are both reported, because the machine (2 cores) is
shared with other jobs and wall time is noisy.

1. **Speed and precision per second** at d = 5, σ² = 0.1 on three states (H = 1 at L = 40, the paper's
   two heads at L = 40, three heads at L = 200):

   * ``exact``: :func:`reduced_dynamics.exact.evaluator.exact_risk` (value; and with ``grad=True``);
     its accuracy is measured as ``|R - R_fine|`` against the rule with ``tol=1e-15`` (about 1.3x more
     nodes per dimension) and reported with its own ``error_estimate``;
   * ``mc``: the Rao–Blackwellised engine ``estimate_risk(MultiHead, conditional=True)``;
   * ``mc_cv``: the control-variate estimator ``mc_risk_cv`` (the most precise Monte Carlo of the package).

   Precision per second: the standard error Monte Carlo reaches in the CPU time of one exact
   evaluation, ``SE · sqrt(t_MC / t_exact)``, and the Monte Carlo CPU time needed to reach a standard
   error equal to the exact evaluator's *error estimate* (conservative for the exact side: its measured
   error is about 1000x smaller), ``t_MC · (SE/err)²``, also as a multiple of the exact evaluator's time.

2. **Agreement** (full run only): exact vs Rao–Blackwellised Monte Carlo at 12 states (H = 1, 2, 3;
   |ω| up to 0.65; L = 2 ... 2560; d = 2, 5, 20), ``(MC − exact)/SE`` with ``SE`` from ``4e6``-``1e7``
   prompt-length units; ``--quick`` uses 50x fewer prompts.

3. **Precision sweep**: 40 random states (10 with ``--quick``; seeded) over d = 1 ... 100,
   L = 2 ... 1e5, H = 1 ... 3, |ω| up to 0.99 ``omega_max``: the actual error against the rule with
   ``tol=1e-15``, how often it exceeds the error estimate, and the CPU time per evaluation.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from reduced_dynamics.dynamics.corrected_loss import mc_risk_cv
from reduced_dynamics.estimation.predictors import MultiHead
from reduced_dynamics.estimation.risk import estimate_risk
from reduced_dynamics.exact.evaluator import exact_risk, omega_max
from reduced_dynamics.setting import Setting

SPEED_STATES = [
    ("H=1 L=40", Setting(d=5, L=40, sigma2=0.1), [0.4], [1.5]),
    ("H=2 L=40", Setting(d=5, L=40, sigma2=0.1), [0.3, -0.3], [1.5, -1.5]),
    ("H=3 L=200", Setting(d=5, L=200, sigma2=0.1), [0.3, -0.2, 0.1], [1.5, -1.5, 0.3]),
]

# the 12 states of MC_STATES in tests/reduced_dynamics/exact/test_evaluator.py (the test checks them within
# 3 SE at fewer prompts; this script prints the z-scores): change both together
AGREE_STATES = [
    (5, 40, 0.1, [0.5], [1.5]),
    (5, 2, 0.1, [-0.65], [-1.2]),
    (5, 640, 0.1, [0.37], [2.0]),
    (5, 40, 0.1, [0.3, -0.3], [1.5, -1.5]),
    (5, 2, 0.1, [0.65, -0.65], [0.7, -0.7]),
    (5, 200, 0.1, [0.1, -0.1], [4.4, -4.4]),
    (5, 2560, 0.1, [0.65, -0.2], [0.8, -0.5]),
    (5, 10, 0.1, [0.6, -0.2, 0.1], [1.0, -2.0, 0.5]),
    (5, 160, 0.1, [0.2, -0.2, 0.0], [2.0, -2.0, 0.3]),
    (5, 3, 0.1, [0.65, -0.4, 0.3], [0.5, -0.6, 0.4]),
    (2, 20, 0.5, [0.5, -0.5], [1.0, -1.0]),
    (20, 100, 0.0, [0.2], [3.0]),
]


def timed(fn, *args, **kwargs):
    c0, w0 = time.process_time(), time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.process_time() - c0, time.perf_counter() - w0


def speed(quick: bool) -> None:
    reps = 3 if quick else 7
    n_mc = 20_000 if quick else 200_000
    print(f"1. speed and precision per second (median of {reps} interleaved repetitions; MC with {n_mc} prompts)")
    header = (
        f"{'state':<10} {'method':<11} {'cpu ms':>9} {'wall ms':>9} {'error / SE':>11} {'estimate':>9}  "
        f"{'MC: SE in exact cpu time':>24}  {'MC cpu to reach the exact error estimate':>40}"
    )
    print(header)
    for label, s, w, m in SPEED_STATES:
        fine = exact_risk(w, m, s, tol=1e-15).risk
        rows = {k: [] for k in ("exact", "exact+grad", "mc", "mc_cv")}
        vals = {k: [] for k in rows}
        for rep in range(reps):
            r, c, t = timed(exact_risk, w, m, s)
            rows["exact"].append((c, t))
            vals["exact"].append((abs(r.risk - fine), r.error_estimate))
            r, c, t = timed(exact_risk, w, m, s, grad=True)
            rows["exact+grad"].append((c, t))
            vals["exact+grad"].append((abs(r.risk - fine), r.error_estimate))
            r, c, t = timed(estimate_risk, MultiHead(w, m), s, n_prompts=n_mc, seed=rep, conditional=True)
            rows["mc"].append((c, t))
            vals["mc"].append((r.stderr, None))
            r, c, t = timed(mc_risk_cv, [(w, m)], s, n_prompts=n_mc, seed=rep)
            rows["mc_cv"].append((c, t))
            vals["mc_cv"].append((float(r.stderr[0]), None))
        ex_cpu = statistics.median(c for c, _ in rows["exact"])
        ex_err = statistics.median(e for _, e in vals["exact"])
        for k in rows:
            cpu = statistics.median(c for c, _ in rows[k])
            wall = statistics.median(t for _, t in rows[k])
            acc = statistics.median(a for a, _ in vals[k])
            est = vals[k][0][1]
            extra = ""
            if k.startswith("mc"):
                need = cpu * (acc / ex_err) ** 2
                same = acc * (cpu / ex_cpu) ** 0.5
                extra = f"{same:24.2e}  {need:14.3g} s = {need / ex_cpu:9.3g} x exact"
            est_s = f"{est:9.1e}" if est is not None else f"{'':9}"
            print(f"{label:<10} {k:<11} {cpu * 1e3:9.1f} {wall * 1e3:9.1f} {acc:11.1e} {est_s}  {extra}")


def agreement(quick: bool) -> None:
    scale = 50 if quick else 1
    print(
        f"\n2. agreement with Rao-Blackwellised Monte Carlo ({'quick: ' if quick else ''}n = max(4e4, 4e8/L)/{scale})"
    )
    print(f"{'d':>3} {'L':>5} {'s2':>4} {'omega':<20} {'exact':>16} {'MC':>12} {'SE':>9} {'(MC-ex)/SE':>10}")
    zs = []
    for d, L, s2, w, m in AGREE_STATES:
        s = Setting(d=d, L=L, sigma2=s2)
        ex = exact_risk(w, m, s)
        n = max(40_000, int(4e8 // L)) // scale
        mc = estimate_risk(MultiHead(w, m), s, n_prompts=n, seed=1000 + L, conditional=True)
        z = (mc.risk - ex.risk) / mc.stderr
        zs.append(z)
        print(f"{d:>3} {L:>5} {s2:>4} {str(w):<20} {ex.risk:16.12f} {mc.risk:12.8f} {mc.stderr:9.2e} {z:10.2f}")
    print(f"max |z| = {max(abs(z) for z in zs):.2f} over {len(zs)} states; chi2/dof = {np.mean(np.square(zs)):.2f}")


def precision_sweep(quick: bool) -> None:
    """Random states (seeded): actual error against the 1.3x finer rule vs the error estimate, and the time."""
    n = 10 if quick else 40
    rng = np.random.default_rng(0)
    print(f"\n3. precision over {n} random states (d = 1 ... 100, L = 2 ... 1e5, H = 1 ... 3, |omega| < omega_max)")
    rows = []
    for _ in range(n):
        d = int(rng.choice([1, 2, 3, 5, 10, 30, 100]))
        L = int(rng.choice([2, 3, 5, 17, 40, 200, 2560, 100000]))
        H = int(rng.integers(1, 4))
        s = Setting(d=d, L=L, sigma2=float(rng.choice([0.0, 0.1, 1.0])))
        w = rng.uniform(-1, 1, H) * omega_max(s) * rng.choice([0.1, 0.5, 0.99])
        m = rng.normal(0, 2, H)
        r, c, _ = timed(exact_risk, w, m, s, grad=True)
        err = abs(r.risk - exact_risk(w, m, s, tol=1e-15).risk)
        rows.append((err, r.error_estimate, c, d, L, H))
    worst = max(rows, key=lambda x: x[0])
    print(
        f"max actual error {worst[0]:.2e} (d={worst[3]} L={worst[4]} H={worst[5]}, estimate {worst[1]:.1e}); ", end=""
    )
    print(f"states with error > estimate: {sum(e > est for e, est, *_ in rows)}; ", end="")
    print(
        f"CPU per evaluation with gradient: median {statistics.median(x[2] for x in rows):.3f} s, "
        f"max {max(x[2] for x in rows):.2f} s"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions and prompts (about a minute)")
    args = ap.parse_args()
    speed(args.quick)
    agreement(args.quick)
    precision_sweep(args.quick)


if __name__ == "__main__":
    main()
