"""``reduced-dynamics single-head``: the exact finite-L optimum of the single head and its large-L limit.

Minimises the exact risk (``reduced_dynamics.exact.evaluator``, deterministic quadrature) of the
H = 1 reduced model over (ω, μ): the risk is quadratic in μ, so a golden-section search in ω
suffices (``reduced_dynamics.exact.single_head``). Prints the optimum (positive branch; −ω, −μ
is the other), its exact risk, the closed-form L → ∞ limit ω∞ from the corrected loss, and
L̃'s optimum 1/√d for comparison (docs/theory.md#exact-risk).
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
    prepare_out,
)
from reduced_dynamics.cli._setting import add_setting_arguments, setting_from_args
from reduced_dynamics.io import atomic_write_json, output_stem, to_jsonable

HELP = "Exact finite-L optimum (omega, mu, risk) of the single head and its large-L limit omega_limit."
EPILOG = exit_codes_epilog() + (
    "\n\nOutput name (--out) encodes the configuration, e.g. single_head_d5_L40_sigma2-0.1_tol-1e-07.json"
)
PARAM_FLAGS = {"omega_tol": "--omega-tol"}


def add_arguments(parser) -> None:
    add_setting_arguments(parser)
    parser.add_argument(
        "--omega-tol",
        type=float,
        default=1e-7,
        help="width of the final bracket of the search in omega, in [1e-10, 1e-2] (default 1e-7)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument(
        "--out", type=nonempty, default=None, help="folder for the JSON result, named by the configuration"
    )
    add_quiet(parser)


def main(args) -> int:
    from reduced_dynamics.exact.single_head import _check_interior_optimum, exact_single_head_optimum

    t0, c0 = time.perf_counter(), time.process_time()
    setting = setting_from_args(args)
    prepare_out(args.out)
    # (validated again by the library) before the range check below
    check_option(args, "omega_tol", check_float_in, "--omega-tol", 1e-10, 1e-2, False)
    _check_interior_optimum(setting)  # a too-short L is one error line before any progress output
    progress = Progress("single-head", quiet=args.quiet)
    progress.stage(f"exact single-head optimum at d={setting.d} L={setting.L} sigma2={setting.sigma2:g}")
    r = exact_single_head_optimum(setting, omega_tol=args.omega_tol)
    progress.close()
    out = {
        "omega": r.omega,
        "mu": r.mu,
        "risk": r.risk,
        "error_estimate": r.error_estimate,
        "omega_tol": r.omega_tol,
        "omega_limit": r.omega_limit,
        "mu_limit": r.mu_limit,
        "omega_approx": r.omega_approx,
        "risk_limit_form": r.risk_limit_form,
        "evaluations": r.evaluations,
        "seconds": time.perf_counter() - t0,
        "cpu_seconds": time.process_time() - c0,
        "config": {"d": setting.d, "L": setting.L, "sigma2": setting.sigma2},
    }
    if args.out is not None:
        stem = output_stem(
            "single_head", dict(d=setting.d, L=setting.L, sigma2=float(setting.sigma2), tol=float(args.omega_tol))
        )
        out["file"] = str(atomic_write_json(Path(args.out) / f"{stem}.json", out))
    if args.json:
        print(json.dumps(to_jsonable(out), indent=2))
        return 0
    print(
        f"single-head  d={setting.d} L={setting.L} sigma2={setting.sigma2:g}  "
        f"({out['seconds']:.2f} s, {r.evaluations} exact evaluations)"
    )
    print(f"  exact optimum   omega = {r.omega:.7f}  mu = {r.mu:.7f}  risk = {r.risk:.10f} (± {r.error_estimate:.1e})")
    print(f"  large-L limit   omega = {r.omega_limit:.7f}  mu = {r.mu_limit:.7f}  (corrected loss, closed form)")
    print(f"  L~ optimum      omega = 1/sqrt(d) = {r.omega_approx:.7f}")
    if args.out is not None:
        print(f"  wrote {out['file']}")
    return 0
