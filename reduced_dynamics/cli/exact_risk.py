"""``reduced-dynamics exact-risk``: the exact finite-L risk of the reduced model, without Monte Carlo.

Evaluates :func:`reduced_dynamics.exact.evaluator.exact_risk` at one state ``(--omega, --mu)``
by deterministic quadrature (docs/theory.md#exact-risk): the same quantity the
``risk`` command estimates for ``multi_head`` by Monte Carlo, to about 1e-13, with
a conservative error estimate and, with ``--grad``, the gradient in (ω, μ).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from reduced_dynamics.cli._common import (
    Progress,
    add_quiet,
    check_float_in,
    check_option,
    exit_codes_epilog,
    nonempty,
    parse_floats,
    prepare_out,
)
from reduced_dynamics.cli._setting import add_setting_arguments, setting_from_args
from reduced_dynamics.dynamics.manifold import mu_gamma
from reduced_dynamics.io import atomic_write_json, output_stem, to_jsonable

HELP = "Exact finite-L risk of the reduced model at (omega, mu) by deterministic quadrature (no Monte Carlo)."
EPILOG = exit_codes_epilog() + (
    "\n\nLists: --omega 0.3,-0.3 --mu 1.5,-1.5 (comma-separated, as in `risk`; space-separated also works).\n"
    "At most 8 heads here (the library takes 16). Output name (--out) encodes the configuration, e.g.\n"
    "  exact_risk_d5_L40_sigma2-0.1_omega-0.3,-0.3_mu-1.5,-1.5_grad0_tol-1e-12.json"
)
PARAM_FLAGS = {"omega": "--omega", "mu": "--mu", "tol": "--tol"}

#: γ of the default two-head point on the solution manifold (as in `risk`)
DEFAULT_GAMMA = 0.1

#: most heads accepted on the command line (the cost grows like H²)
CLI_H_MAX = 8


def add_arguments(parser) -> None:
    add_setting_arguments(parser)
    parser.add_argument(
        "--omega",
        nargs="+",
        default=None,
        help="KQ scales of the heads, comma-separated: 0.3,-0.3 (default: the two-head manifold point at γ = 0.1)",
    )
    parser.add_argument(
        "--mu", nargs="+", default=None, help="OV values of the heads, comma-separated: 1.5,-1.5 (needs --omega)"
    )
    parser.add_argument("--grad", action="store_true", help="also print the gradient in omega and mu")
    parser.add_argument(
        "--tol",
        type=float,
        default=1e-12,
        help="quadrature accuracy target in [1e-15, 1e-3] (default 1e-12; sets the quadrature steps)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument(
        "--out", type=nonempty, default=None, help="folder for the JSON result, named by the configuration"
    )
    add_quiet(parser)


def main(args) -> int:
    from reduced_dynamics.exact.evaluator import L_EXACT_MAX, exact_risk

    t0, c0 = time.perf_counter(), time.process_time()
    setting = setting_from_args(args)
    if not 2 <= setting.L <= L_EXACT_MAX:
        raise ValueError(f"`--L` must be an integer in [2, {L_EXACT_MAX}] for exact-risk, got {setting.L}")
    if (args.omega is None) != (args.mu is None):
        given = "--omega" if args.omega is not None else "--mu"
        raise ValueError(f"`{given}` needs its partner: give --omega and --mu together (one number per head each)")
    if args.omega is None:  # the default state of `risk`: the two-head point of the solution manifold at γ = 0.1
        m = float(mu_gamma(DEFAULT_GAMMA, setting))
        omega, mu = [DEFAULT_GAMMA, -DEFAULT_GAMMA], [m, -m]
    else:
        omega = parse_floats(args.omega, "--omega")
        mu = parse_floats(args.mu, "--mu")
    if len(omega) != len(mu):
        raise ValueError(f"`--omega` and `--mu` must list the same number of heads, got {len(omega)} and {len(mu)}")
    if len(omega) > CLI_H_MAX:
        raise ValueError(f"`--omega` must list at most {CLI_H_MAX} heads, got {len(omega)}")
    check_option(args, "tol", check_float_in, "--tol", 1e-15, 1e-3, False)
    prepare_out(args.out)
    progress = Progress("exact-risk", quiet=args.quiet)
    progress.stage(f"quadrature at d={setting.d} L={setting.L} sigma2={setting.sigma2:g}, H={len(omega)}")
    res = exact_risk(omega, mu, setting, grad=args.grad, tol=args.tol)
    out = {
        "risk": res.risk,
        "error_estimate": res.error_estimate,
        "linear_coef": res.linear_coef,
        "quadratic_coef": res.quadratic_coef,
    }
    if args.grad:
        out["grad_omega"] = res.grad_omega
        out["grad_mu"] = res.grad_mu
        out["grad_error_estimate"] = res.grad_error_estimate
    out.update(
        {
            "n_nodes": res.n_nodes,
            "seconds": time.perf_counter() - t0,
            "cpu_seconds": time.process_time() - c0,
            "config": {
                "d": setting.d,
                "L": setting.L,
                "sigma2": setting.sigma2,
                "omega": omega,
                "mu": mu,
                "grad": bool(args.grad),
                "tol": args.tol,
            },
        }
    )
    if args.out is not None:
        stem = output_stem(
            "exact_risk",
            dict(
                d=setting.d,
                L=setting.L,
                sigma2=float(setting.sigma2),
                omega=omega,
                mu=mu,
                grad=int(bool(args.grad)),
                tol=float(args.tol),
            ),
        )
        out["file"] = str(atomic_write_json(Path(args.out) / f"{stem}.json", to_jsonable(out)))
    if args.json:
        print(json.dumps(to_jsonable(out), indent=2))
        return 0
    print(f"exact-risk  d={setting.d} L={setting.L} sigma2={setting.sigma2}  ({out['seconds']:.3f} s)")
    print(f"omega={omega} mu={mu}")
    print(f"risk            {res.risk:.15g}")
    print(f"error_estimate  {res.error_estimate:.3g}")
    if args.grad:
        print(f"grad_omega      {[float(f'{v:.12g}') for v in res.grad_omega]}")
        print(f"grad_mu         {[float(f'{v:.12g}') for v in res.grad_mu]}")
    if args.out is not None:
        print(f"  wrote {out['file']}")
    return 0
