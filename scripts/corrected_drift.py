"""Verify the O(1/L) risk expansion (reduced_dynamics.dynamics.corrected_loss) and its drift law; JSON out.

Usage (from the repository root)::

    .venv/bin/python scripts/corrected_drift.py table  --out results/corrected_table.json   # ~2.5 min
    .venv/bin/python scripts/corrected_drift.py phigamma --L 200 --n 2000000                 # ~35 s
    .venv/bin/python scripts/corrected_drift.py flow

* ``table``: corrected loss and L̃ minus the Rao–Blackwellised, control-variate Monte Carlo
  risk at five states (H = 1, 2, 3; on and off the solution manifold), L = 40, 160, 640, 2560.
* ``phigamma``: the drift driver ∂Φ/∂γ at fixed η on the two-head manifold
  (ω = ±γ, μ = ±η/(2γ), η = corrected η*), Monte Carlo (common random numbers, central
  difference h = 0.01) vs the corrected loss and L̃.
* ``flow``: the corrected gradient flow from γ = 0.2 vs the corrected drift law.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from reduced_dynamics.dynamics.corrected_loss import (
    _mc_chunk,
    corrected_drift_constant,
    corrected_drift_gamma,
    corrected_eta_star,
    corrected_loss,
    mc_risk_cv,
)
from reduced_dynamics.dynamics.loss import approx_loss
from reduced_dynamics.flow import integrate
from reduced_dynamics.models import reduced_model
from reduced_dynamics.setting import Setting

STATES = {
    "H1 generic": ([0.25], [1.5]),
    "H2 manifold g=.2": ([0.2, -0.2], [2.25, -2.25]),
    "H2 generic": ([0.25, -0.1], [2.0, -1.5]),
    "H3 generic": ([0.2, -0.15, 0.1], [1.0, -2.0, 1.2]),
    "H3 manifold g=.15": ([0.15, 0.15, -0.15], [1.5, 1.5, -3.0]),
}
NS = {40: 1_000_000, 160: 1_000_000, 640: 400_000, 2560: 400_000}


def table(d, sigma2, seed, n_override=None):
    out = {}
    for L, n in NS.items():
        n = n if n_override is None else n_override
        t0 = time.perf_counter()
        setting = Setting(d=d, L=L, sigma2=sigma2)
        mc = mc_risk_cv(list(STATES.values()), setting, n_prompts=n, seed=seed)
        for (name, (w, m)), r, se in zip(STATES.items(), mc.mean.tolist(), mc.stderr.tolist()):
            c, a = corrected_loss(w, m, setting), approx_loss(w, m, setting)
            out.setdefault(name, []).append(
                dict(L=L, n=n, mc=r, se=se, corrected_minus_mc=c - r, approx_minus_mc=a - r)
            )
            print(f"{name:18s} L={L:5d} MC={r:.8f}±{se:.1e}  L̃−MC={a - r:+.3e}  corr−MC={c - r:+.3e}", flush=True)
        print(f"  ({time.perf_counter() - t0:.0f} s)", flush=True)
    for name, rows in out.items():
        ec = np.array([abs(r["corrected_minus_mc"]) for r in rows])
        ea = np.array([abs(r["approx_minus_mc"]) for r in rows])
        Ls = np.array([r["L"] for r in rows], dtype=float)
        print(
            name,
            "slopes corrected",
            np.round(np.diff(np.log(ec)) / np.diff(np.log(Ls)), 3),
            "L̃",
            np.round(np.diff(np.log(ea)) / np.diff(np.log(Ls)), 3),
        )
    return out


def phigamma(d, L, sigma2, n, seed, gammas=(0.1, 0.15, 0.2), h=0.01):
    setting = Setting(d=d, L=L, sigma2=sigma2)
    eta = corrected_eta_star(setting)
    st = [
        ([g + sg * h, -(g + sg * h)], [eta / (2 * (g + sg * h)), -eta / (2 * (g + sg * h))])
        for g in gammas
        for sg in (-1, 1)
    ]
    m = max(1, 4_000_000 // L)
    ss = np.random.SeedSequence([seed, L])
    acc = [[] for _ in gammas]
    done = 0
    while done < n:
        mm = min(m, n - done)
        o = _mc_chunk(np.random.Generator(np.random.SFC64(ss.spawn(1)[0])), mm, d, L, sigma2, st, False)
        for i in range(len(gammas)):
            acc[i].append((o[2 * i + 1][0] - o[2 * i][0]) / (2 * h))
        done += mm
    out = []
    for i, g in enumerate(gammas):
        y = np.concatenate(acc[i])

        def fd(fn, i=i):
            return (fn(*st[2 * i + 1], setting) - fn(*st[2 * i], setting)) / (2 * h)

        row = dict(
            gamma=g,
            eta=eta,
            mc=float(y.mean()),
            se=float(y.std(ddof=1) / np.sqrt(y.size)),
            corrected=fd(corrected_loss),
            approx=fd(approx_loss),
        )
        print(
            f"L={L} γ={g}: ∂Φ/∂γ|η MC {row['mc']:.4e}±{row['se']:.1e}  corrected {row['corrected']:.4e} "
            f"(MC/corr {row['mc'] / row['corrected']:.3f})  L̃ {row['approx']:.4e} (MC/L̃ {row['mc'] / row['approx']:.3f})"
        )
        out.append(row)
    return out


def flow(d, sigma2):
    out = []
    for L, p, n in [(40, 1, 1), (200, 1, 1), (200, 2, 1), (800, 1, 1)]:
        g0 = 0.2
        setting = Setting(d=d, L=L, sigma2=sigma2)
        eta = corrected_eta_star(setting)
        w0 = np.r_[[g0] * p, [-g0] * n]
        m0 = np.r_[[eta / (2 * g0 * p)] * p, [-eta / (2 * g0 * n)] * n]
        ts = np.r_[0.0, np.logspace(0, 6, 13)]
        model = reduced_model(setting, n_heads=p + n, objective="corrected")
        # Radau at 1e-9 / 1e-12 (the tolerances of the former corrected-flow driver), output at `ts`
        res = integrate(model, model.state(w0, m0), times=ts, method="Radau", rtol=1e-9, atol=1e-12, stationarity_tol=0)
        if not res.success:
            raise RuntimeError(f"corrected flow at L={L}, p={p}, n={n}: {res.message}")
        W = res.omega
        g = np.abs(W).mean(axis=1)
        i0 = int(np.searchsorted(ts, 10.0))
        law = corrected_drift_gamma(ts[i0:], setting, n_positive=p, n_negative=n, gamma0=g[i0], t0=ts[i0])
        law4 = corrected_drift_gamma(ts[i0:], setting, n_positive=p, n_negative=n, include_gamma2=False)
        K = corrected_drift_constant(setting)
        row = dict(
            L=L,
            p=p,
            n=n,
            K=K,
            K_approx=16 * (1 + sigma2) / L * d**3,
            t=ts[i0:].tolist(),
            gamma=g[i0:].tolist(),
            law_rel_err=(law / g[i0:] - 1).tolist(),
            law4_rel_err=(law4 / g[i0:] - 1).tolist(),
        )
        print(
            f"L={L} p={p} n={n} K={K:.4g} (L̃: {row['K_approx']:.4g}); max|two-term law/flow − 1| = "
            f"{np.max(np.abs(row['law_rel_err'])):.2e}; γ⁴-only law/flow − 1 at t=1e6: {row['law4_rel_err'][-1]:+.3f}"
        )
        out.append(row)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=["table", "phigamma", "flow"])
    p.add_argument("--d", type=int, default=5)
    p.add_argument("--sigma2", type=float, default=0.1)
    p.add_argument("--L", type=int, default=200)
    p.add_argument("--n", type=int, default=2_000_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None)
    p.add_argument("--table-n", type=int, default=None, help="prompts per L in `table` (default: the NS table)")
    a = p.parse_args(argv)
    if a.what == "table":
        res = table(a.d, a.sigma2, a.seed, a.table_n)
    elif a.what == "phigamma":
        res = phigamma(a.d, a.L, a.sigma2, a.n, a.seed)
    else:
        res = flow(a.d, a.sigma2)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
