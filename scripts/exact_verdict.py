"""The exact finite-L risk on the solution manifold and for the single head (issue 13, sections 2-3); JSON out.

Usage (from the repository root)::

    .venv/bin/python scripts/exact_verdict.py coefficients --out results/exact_coefficients.json
    .venv/bin/python scripts/exact_verdict.py minima       --out results/exact_minima.json
    .venv/bin/python scripts/exact_verdict.py single-head  --out results/exact_single_head.json
    .venv/bin/python scripts/exact_verdict.py trust        --out results/exact_trust.json

* ``coefficients``: A₂(η*), A₄(η*) closed form over the grid d ∈ {1..50}, L ∈ {2..2560},
  σ² ∈ {0.01..10} (sign verdict), and Richardson extraction from the exact evaluator at a
  sub-grid (residuals against the closed forms).
* ``minima``: the exact manifold minimiser (γ_min, η, depth, Hessian eigenvalues of the H = 2
  risk) at a sub-grid, against the leading-order estimate.
* ``single-head``: the exact single-head optimum for L = 40 ... 655360 against the closed-form limit.
* ``trust``: corrected loss minus exact risk for one head at μ = 1/ω, ω = 0.2 ... 0.65,
  L = 40 ... 40960, with the fitted decay exponent per ω.

Every number printed is measured in the run; CPU time (process_time) and wall time are reported.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from reduced_dynamics.dynamics.corrected_loss import corrected_loss
from reduced_dynamics.exact.drift import exact_manifold_minimum, richardson_coefficients
from reduced_dynamics.exact.evaluator import exact_risk
from reduced_dynamics.exact.expansion import exact_manifold_coefficients
from reduced_dynamics.exact.single_head import exact_single_head_optimum, single_head_limit
from reduced_dynamics.setting import Setting

D_GRID = (1, 2, 3, 5, 10, 20, 50)
L_GRID = (2, 3, 5, 10, 20, 40, 80, 160, 320, 640, 1280, 2560)
S2_GRID = (0.01, 0.1, 0.5, 1.0, 2.0, 10.0)


def coefficients(args):
    rows = []
    for d in D_GRID:
        for L in L_GRID:
            for s2 in S2_GRID:
                c = exact_manifold_coefficients(None, Setting(d=d, L=L, sigma2=s2))
                rows.append((d, L, s2, float(c.a2), float(c.a4)))
    a2 = np.array([r[3] for r in rows])
    a4 = np.array([r[4] for r in rows])
    out = {
        "grid": {"d": D_GRID, "L": L_GRID, "sigma2": S2_GRID, "points": len(rows)},
        "a2_max": float(a2.max()),
        "a2_negative": int((a2 < 0).sum()),
        "a4_min": float(a4.min()),
        "a4_positive": int((a4 > 0).sum()),
        "richardson": [],
    }
    for d, L, s2 in [(5, 40, 0.1), (5, 200, 0.1), (2, 10, 0.5), (20, 160, 0.01), (5, 2560, 1.0), (10, 40, 2.0)]:
        t0, c0 = time.perf_counter(), time.process_time()
        r = richardson_coefficients(Setting(d=d, L=L, sigma2=s2))
        out["richardson"].append(
            {
                "d": d,
                "L": L,
                "sigma2": s2,
                "a2": r.a2,
                "a2_closed": r.a2_closed,
                "a2_residual": r.a2_residual,
                "a4": r.a4,
                "a4_closed": r.a4_closed,
                "a4_residual": r.a4_residual,
                "wall_s": time.perf_counter() - t0,
                "cpu_s": time.process_time() - c0,
            }
        )
        print(out["richardson"][-1], flush=True)
    return out


def minima(args):
    out = []
    for d, L, s2 in [
        (5, 40, 0.1),
        (5, 200, 0.1),
        (5, 10, 0.1),
        (5, 1000, 0.1),
        (2, 40, 0.1),
        (20, 40, 0.1),
        (5, 40, 0.01),
        (5, 40, 2.0),
        (50, 640, 1.0),
        (2, 5, 10.0),
    ]:
        t0, c0 = time.perf_counter(), time.process_time()
        m = exact_manifold_minimum(Setting(d=d, L=L, sigma2=s2), gamma_tol=1e-6)
        row = {
            "d": d,
            "L": L,
            "sigma2": s2,
            "gamma": m.gamma,
            "gamma_estimate": m.gamma_estimate,
            "eta": m.eta,
            "eta_star": Setting(d=d, L=L, sigma2=s2).eta_star,
            "risk": m.risk,
            "depth": m.depth,
            "depth_estimate": m.depth_estimate,
            "error_estimate": m.error_estimate,
            "hessian_eigenvalues": m.hessian_eigenvalues.tolist(),
            "wall_s": time.perf_counter() - t0,
            "cpu_s": time.process_time() - c0,
        }
        print(row, flush=True)
        out.append(row)
    return {"minima": out}


def single_head(args):
    out = []
    for L in (40, 160, 640, 2560, 10240, 40960, 163840, 655360):
        s = Setting(d=5, L=L, sigma2=0.1)
        t0, c0 = time.perf_counter(), time.process_time()
        r = exact_single_head_optimum(s, omega_tol=1e-7)
        row = {
            "L": L,
            "omega": r.omega,
            "mu": r.mu,
            "risk": r.risk,
            "error_estimate": r.error_estimate,
            "omega_limit": r.omega_limit,
            "risk_limit_form": r.risk_limit_form,
            "wall_s": time.perf_counter() - t0,
            "cpu_s": time.process_time() - c0,
        }
        print(row, flush=True)
        out.append(row)
    w = np.array([r["omega"] for r in out]) - single_head_limit(Setting()).omega
    Ls = np.array([r["L"] for r in out], dtype=float)
    slopes = np.diff(np.log(np.abs(w))) / np.diff(np.log(Ls))
    return {"optima": out, "omega_limit": single_head_limit(Setting()).omega, "local_exponents": slopes.tolist()}


def trust(args):
    omegas = (0.2, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65)
    Ls = (40, 160, 640, 2560, 10240, 40960)
    rows = []
    for w in omegas:
        errs = []
        for L in Ls:
            s = Setting(d=5, L=L, sigma2=0.1)
            ex = exact_risk([w], [1 / w], s)
            co = corrected_loss([w], [1 / w], s)
            errs.append(
                {"L": L, "exact": ex.risk, "error_estimate": ex.error_estimate, "corrected_minus_exact": co - ex.risk}
            )
        e = np.abs([x["corrected_minus_exact"] for x in errs])
        sl = np.diff(np.log(e)) / np.diff(np.log(np.array(Ls, dtype=float)))
        row = {"omega": w, "rows": errs, "local_exponents": (-sl).tolist()}
        print(w, [f"{x:.3g}" for x in e], [f"{x:.2f}" for x in -sl], flush=True)
        rows.append(row)
    return {"d": 5, "sigma2": 0.1, "mu": "1/omega", "trust": rows}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["coefficients", "minima", "single-head", "trust"])
    p.add_argument("--out", default=None)
    p.add_argument("--L", type=int, default=40)
    args = p.parse_args(argv)
    t0, c0 = time.perf_counter(), time.process_time()
    fn = {"coefficients": coefficients, "minima": minima, "single-head": single_head, "trust": trust}
    res = fn[args.what](args)
    res["wall_s"] = time.perf_counter() - t0
    res["cpu_s"] = time.process_time() - c0
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
    print(json.dumps({k: v for k, v in res.items() if not isinstance(v, list)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
