"""SGD vs the reduced gradient flow (docs/theory.md#reduced-model, docs/theory.md#gradient-flow): measured discrepancies, written as JSON.

Usage (from the repository root)::

    .venv/bin/python scripts/sgd_vs_flow.py --out results/sgd_vs_flow.json

For each case: Adam warm-up (patterns form), then plain SGD; the extracted (ω, μ) are
compared with (i) the flow of L̃ at the training L, (ii) the flow of L̃ with time x2
(negative control), (iii) the flow of the Rao–Blackwellised Monte Carlo risk on a fixed
sample (the *true* risk, up to MC error), so (i) − (iii) isolates L̃ ≠ true risk.
"""

from __future__ import annotations

import argparse
import json
import time

from reduced_dynamics.crosscheck import CovariateSample, mc_flow, sgd_vs_flow, trajectory_discrepancy
from reduced_dynamics.io import atomic_write_json
from reduced_dynamics.setting import Setting

#: Seed of the fixed Monte Carlo sample of the MC-risk flow (common to all cases).
MC_SEED = 12345


def run_case(*, parameterisation, L, lr, sgd_steps, warmup_steps, seed, mc_n, d=5, sigma2=0.1, H=2):
    t0 = time.perf_counter()
    setting = Setting(d=d, L=L, sigma2=sigma2)
    common = dict(
        n_heads=H,
        parameterisation=parameterisation,
        lr=lr,
        sgd_steps=sgd_steps,
        warmup_steps=warmup_steps,
        seed=seed,
        n_records=40,
    )
    r = sgd_vs_flow(setting, **common)
    out = r.to_dict()
    x2 = sgd_vs_flow(setting, time_scale=2.0, **common)
    out["discrepancy_time_x2"] = trajectory_discrepancy(
        x2.omega_sgd, x2.mu_sgd, x2.omega_flow, x2.mu_flow, omega_ref=r.omega_flow, mu_ref=r.mu_flow
    ).to_dict()
    if mc_n:
        mc = mc_flow(
            r.omega_sgd[0], r.mu_sgd[0], r.t, CovariateSample(mc_n, setting, seed=MC_SEED), omega_rate=r.omega_rate
        )
        out["mc_n"] = mc_n
        out["discrepancy_vs_mc_flow"] = trajectory_discrepancy(r.omega_sgd, r.mu_sgd, mc.omega, mc.mu).to_dict()
        out["mc_flow_vs_approx_flow"] = trajectory_discrepancy(mc.omega, mc.mu, r.omega_flow, r.mu_flow).to_dict()
        out["omega_mc_flow_end"], out["mu_mc_flow_end"] = mc.omega[-1].tolist(), mc.mu[-1].tolist()
    out["case_seconds"] = time.perf_counter() - t0
    return out


CASES = {
    "reduced_L40_lr1e-2": dict(parameterisation="reduced", L=40, lr=1e-2, sgd_steps=3000, warmup_steps=300),
    "reduced_L40_lr3e-3": dict(parameterisation="reduced", L=40, lr=3e-3, sgd_steps=10000, warmup_steps=300),
    "reduced_L200_lr1e-2": dict(parameterisation="reduced", L=200, lr=1e-2, sgd_steps=3000, warmup_steps=300),
    "merged_L40_lr1e-2": dict(parameterisation="merged", L=40, lr=1e-2, sgd_steps=10000, warmup_steps=1000),
    # a seconds-long smoke test of the script (not a measurement)
    "smoke": dict(parameterisation="reduced", d=3, L=20, lr=1e-2, sgd_steps=100, warmup_steps=50),
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="results/sgd_vs_flow.json")
    p.add_argument("--cases", nargs="*", default=[c for c in CASES if c != "smoke"], choices=list(CASES))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--mc-n", type=int, default=50_000)
    args = p.parse_args(argv)
    res = {}
    for name in args.cases:
        res[name] = run_case(seed=args.seed, mc_n=args.mc_n, **CASES[name])
        d = res[name]
        short = {k: d[k] for k in ("discrepancy", "discrepancy_time_x2")}
        short.update({k: d.get(k) for k in ("discrepancy_vs_mc_flow",)})
        print(
            name,
            json.dumps(
                {
                    k: {
                        kk: vv
                        for kk, vv in v.items()
                        if kk in ("unexplained", "gamma_max", "gamma_final", "eta_max", "eta_final")
                    }
                    for k, v in short.items()
                    if v
                }
            ),
            flush=True,
        )
        atomic_write_json(args.out, res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
