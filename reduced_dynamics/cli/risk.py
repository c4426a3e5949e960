"""``reduced-dynamics risk``: Monte Carlo risks of the attention model and the reference predictors.

Estimates, on the same seed, the risks of ``multi_head`` (at ``--omega/--mu``;
default the two-head point of the solution manifold at γ = 0.1),
``single_head`` (the H = 1 optimum of L̃, docs/theory.md#gradient-flow), ``gd`` and ``debiased_gd`` (at η*) and
``bayes_ridge`` (λ = σ² d). The attention/GD predictors share prompts from the
sufficient-statistics sampler; ridge uses the full sampler. ``exact`` is the
closed-form finite-L risk where one exists (gd, debiased_gd through
``proofs_check.closed_forms.gd_risk`` when that module is importable), else null.
"""

from __future__ import annotations

import importlib
import json
import time

import numpy as np

from reduced_dynamics._validation import check_positive_int
from reduced_dynamics.cli._setting import add_setting_arguments, setting_from_args
from reduced_dynamics.dynamics.manifold import eta_star, mu_gamma
from reduced_dynamics.estimation.predictors import BayesRidge, DebiasedGD, MultiHead, SingleHead, VanillaGD
from reduced_dynamics.estimation.risk import estimate_risks
from reduced_dynamics.io import to_jsonable

HELP = "Monte Carlo risks of multi-head attention, single head, GD, debiased GD and Bayes ridge."

#: γ of the default two-head point on the solution manifold
DEFAULT_GAMMA = 0.1


def add_arguments(parser) -> None:
    add_setting_arguments(parser)
    parser.add_argument("--prompts", type=int, default=200000, help="Monte Carlo prompts (default 200000)")
    parser.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    parser.add_argument("--omega", type=float, nargs="+", default=None, help="KQ scales of the heads")
    parser.add_argument("--mu", type=float, nargs="+", default=None, help="OV values of the heads")
    parser.add_argument(
        "--conditional",
        action="store_true",
        help="Rao-Blackwellise: average the risk conditional on the covariates (same mean, smaller stderr)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _gd_risk():
    """``proofs_check.closed_forms.gd_risk`` if importable now, else None."""
    try:
        mod = importlib.import_module("proofs_check.closed_forms")
    except ImportError:
        return None
    return getattr(mod, "gd_risk", None)


def main(args) -> int:
    t0 = time.perf_counter()
    setting = setting_from_args(args)
    d, L, sigma2 = setting.d, setting.L, setting.sigma2
    eta = eta_star(setting)
    if check_positive_int("prompts", args.prompts) < 2:
        raise ValueError(f"`prompts` must be an integer >= 2 (for a standard error), got {args.prompts}")
    if (args.omega is None) != (args.mu is None):
        raise ValueError("`omega` and `mu` must be given together")
    if args.omega is None:
        m = mu_gamma(DEFAULT_GAMMA, setting)
        omega, mu = (DEFAULT_GAMMA, -DEFAULT_GAMMA), (m, -m)
    else:
        omega, mu = tuple(args.omega), tuple(args.mu)
    stats_preds = {
        "multi_head": MultiHead(omega, mu),
        "single_head": SingleHead.optimum(setting),
        "gd": VanillaGD(eta),
        "debiased_gd": DebiasedGD(eta),
    }
    common = dict(n_prompts=args.prompts, seed=args.seed, conditional=args.conditional)
    res = estimate_risks(stats_preds, setting, **common)
    ridge = estimate_risks({"bayes_ridge": BayesRidge()}, setting, **common)
    gd_risk = _gd_risk()
    exact = {name: None for name in (*stats_preds, "bayes_ridge")}
    if gd_risk is not None:
        exact["gd"] = float(gd_risk(eta, setting, debiased=False))
        exact["debiased_gd"] = float(gd_risk(eta, setting, debiased=True))
    estimates = {**res.estimates, **ridge.estimates}
    seconds = time.perf_counter() - t0
    out = {
        "estimators": {
            name: {"risk": est.risk, "stderr": est.stderr, "exact": exact[name]} for name, est in estimates.items()
        },
        "prompts": res.n,
        "seconds": seconds,
        "config": {
            "d": d,
            "L": L,
            "sigma2": sigma2,
            "seed": args.seed,
            "omega": list(omega),
            "mu": list(mu),
            "eta_star": eta,
            "conditional": bool(args.conditional),
        },
    }
    if args.json:
        print(json.dumps(to_jsonable(out), indent=2))
        return 0
    print(f"risk  d={d} L={L} sigma2={sigma2} prompts={res.n} seed={args.seed}  ({seconds:.2f} s)")
    print(f"multi_head at omega={np.round(omega, 6).tolist()} mu={np.round(mu, 6).tolist()}; eta*={eta:.6f}")
    print(f"{'estimator':<14}{'risk':>12}{'stderr':>12}{'exact':>12}{'(mc-exact)/se':>15}")
    for name, est in estimates.items():
        ex = exact[name]
        ex_s = f"{ex:12.6f}" if ex is not None else f"{'-':>12}"
        z_s = f"{(est.risk - ex) / est.stderr:15.2f}" if ex is not None and est.stderr > 0 else f"{'-':>15}"
        print(f"{name:<14}{est.risk:12.6f}{est.stderr:12.6f}{ex_s}{z_s}")
    return 0
