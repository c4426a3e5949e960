"""``run --sigma ...``: the flow of the preconditioned reduced model in (ω, μ, W) under x ~ N(0, Σ).

``run`` dispatches here when its setting has a covariance (``setting.Sigma is not None``):
``run_precond(args, setting)`` integrates ``θ̇ = −∇L̃_Σ(θ)``, ``θ = (ω, μ, W)``, from the start ``run``
would use for ``(ω, μ)`` (``--init``, ``--init-scale``, ``--seed`` or ``--omega0/--mu0``) and a shared
``W`` drawn from ``--seed`` (i.i.d. ``N(0, 1/d)`` entries), to ``--t-end``, and prints (``--json``) or
writes (``--out``) the end state: ``omega``, ``mu``, ``W``, the normalised ``W`` (scale moved into γ),
``eta_eff``, the scale-free distances of ``W`` to ``Σ⁻¹``, to ``I`` and to the derived limit
``(Σ + λI)⁻¹``, and the limit predictor (docs/theory.md#non-isotropic-covariates).
Exit 0, or 1 when the solver did not reach ``--t-end`` (status and reason in the output).
"""

from __future__ import annotations

import json
import time

import numpy as np

from reduced_dynamics._validation import check_heads_pair
from reduced_dynamics.cli._common import Progress, parse_floats, write_flow_run
from reduced_dynamics.dynamics.flow import initial_state
from reduced_dynamics.io import to_jsonable
from reduced_dynamics.precond.flow import T_END_MAX, integrate_precond_flow
from reduced_dynamics.precond.loss import sigma_of

__all__ = ["run_precond"]


def run_precond(args, setting) -> int:
    """``run`` with a covariance Σ; returns the exit code (bad input raises ``ValueError`` naming the flag)."""
    t0 = time.perf_counter()
    if getattr(args, "n_init", None) is not None:
        raise ValueError("`--n-init` is not supported with `--sigma` (one flow per run)")
    if (args.omega0 is None) != (args.mu0 is None):
        raise ValueError("`--omega0` and `--mu0` must be given together")
    if not 0.0 < args.t_end <= T_END_MAX:
        raise ValueError(f"`--t-end` must be in (0, {T_END_MAX:g}] with `--sigma`, got {args.t_end}")
    if args.seed < 0:
        raise ValueError(f"`--seed` must be a non-negative integer, got {args.seed}")
    method = args.method or "LSODA"
    if method not in ("LSODA", "Radau", "BDF"):
        raise ValueError(f"`--method` must be one of LSODA, Radau, BDF with `--sigma`, got {method!r}")
    rtol = 1e-9 if args.rtol is None else args.rtol
    atol = 1e-12 if args.atol is None else args.atol
    if not 1e-13 <= rtol <= 1e-2:
        raise ValueError(f"`--rtol` must be in [1e-13, 0.01], got {rtol}")
    if not 0.0 < atol <= 1.0:
        raise ValueError(f"`--atol` must be in (0, 1], got {atol}")
    if args.omega0 is not None:
        w0, m0 = check_heads_pair(parse_floats(args.omega0, "--omega0"), parse_floats(args.mu0, "--mu0"))
        w0, m0 = initial_state(args.heads, kind="given", omega0=w0, mu0=m0)
    else:
        w0, m0 = initial_state(args.heads, kind=args.init, scale=args.init_scale, seed=args.seed)
    d = setting.d
    W0 = np.random.default_rng([int(args.seed), 1]).standard_normal((d, d)) / np.sqrt(d)
    progress = Progress("run", quiet=args.quiet)
    progress.stage(f"integrating the flow of L̃_Σ in (ω, μ, W), H={len(w0)}, d={d}, L={setting.L} to t={args.t_end:g}")
    res = integrate_precond_flow(w0, m0, W0, setting, t_end=args.t_end, method=method, rtol=rtol, atol=atol)
    out = {
        "command": "run",
        **res.summary(),
        "omega0": w0,
        "mu0": m0,
        "W0": W0,
        "sigma_eigenvalues": np.linalg.eigvalsh(sigma_of(setting)),
        "setting": setting.to_dict(),
        "config": {
            "heads": len(w0),
            "init": args.init if args.omega0 is None else "given",
            "init_scale": float(args.init_scale),
            "seed": int(args.seed),
            "t_end": float(args.t_end),
            "method": method,
            "rtol": rtol,
            "atol": atol,
        },
        "seconds": time.perf_counter() - t0,
    }
    if args.out:
        write_flow_run(
            args,
            out,
            "flow_precond",
            n_heads=len(w0),
            setting=setting,
            arrays=dict(
                t=res.t_path,
                omega=res.omega_path,
                mu=res.mu_path,
                W=res.W_path,
                loss=res.loss_path,
                distance_sigma_inv=res.distance_path,
                Sigma=sigma_of(setting),
            ),
        )
    if args.json:
        print(json.dumps(to_jsonable(out)))
    else:
        n, lim = res.normalised, res.limit
        print(
            f"preconditioned reduced flow (KQ_h = ω_h W), H={len(w0)}, d={d}, L={setting.L}, "
            f"σ²={setting.sigma2:g}, Σ eigenvalues {np.array2string(out['sigma_eigenvalues'], precision=3)}: "
            f"{res.message}"
        )
        print(f"  ω (normalised) = {np.array2string(n.omega, precision=5)}  μ = {np.array2string(res.mu, precision=5)}")
        print(
            f"  γ = {n.gamma:.5f}  η_eff = {n.eta_eff:.5f} (limit {lim.eta_eff:.5f})  loss {res.loss:.6f} "
            f"(limit {lim.loss:.6f})  sign matched {n.sign_matched}, |Σμ|/Σ|μ| = {n.zero_sum_ratio:.2g}"
        )
        print(
            f"  distance of W to Σ⁻¹ {float(n.distance_sigma_inv):.5f} (limit (Σ+λI)⁻¹, λ = {lim.lam:.4g}: "
            f"{lim.distance_sigma_inv:.5f}), to the limit {float(n.distance_limit):.2e}, to I {float(n.distance_identity):.4f}"
        )
        for k, v in out.get("files", {}).items():
            print(f"  wrote {k}: {v}")
    return 0 if res.success else 1
