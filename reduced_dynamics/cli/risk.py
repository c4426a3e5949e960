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
import re
import time
from pathlib import Path

import numpy as np

from reduced_dynamics._validation import check_positive_int
from reduced_dynamics.cli._common import Progress, add_quiet, exit_codes_epilog, nonempty, parse_floats, prepare_out
from reduced_dynamics.cli._common import risk_table as table
from reduced_dynamics.cli._dispatch import SETTING_FLAGS
from reduced_dynamics.cli._setting import (
    add_extension_arguments,
    add_setting_arguments,
    add_tasks_argument,
    setting_from_args,
)
from reduced_dynamics.dynamics.manifold import eta_star, mu_gamma
from reduced_dynamics.estimation.predictors import BayesRidge, DebiasedGD, MultiHead, SingleHead, VanillaGD
from reduced_dynamics.estimation.risk import RiskEstimate, estimate_risks
from reduced_dynamics.io import atomic_write_json, output_stem, to_jsonable

HELP = "Monte Carlo risks of multi-head attention, single head, GD, debiased GD and Bayes ridge."
EPILOG = exit_codes_epilog() + (
    "\n\nLists: --omega 0.1,-0.1 --mu 4.4,-4.4 (comma-separated, as in `run`; space-separated also works).\n"
    "Output name (--out) encodes the whole configuration, e.g.\n"
    "  risk_d5_L40_sigma2-0.1_prompts200000_seed0_omega-0.1,-0.1_mu-4.4,-4.4_conditional0.json"
)
#: library parameter names -> the flags of this command (for the one error line)
#: (``lam``: Bayes ridge's λ = σ²·d, zero only with ``--sigma2 0``)
PARAM_FLAGS = {"n_prompts": "--prompts", "n": "--prompts", "lam": "--sigma2", **SETTING_FLAGS}

#: γ of the default two-head point on the solution manifold
DEFAULT_GAMMA = 0.1


def add_arguments(parser) -> None:
    add_setting_arguments(parser)
    add_tasks_argument(parser)
    add_extension_arguments(parser)
    parser.add_argument("--prompts", type=int, default=200000, help="Monte Carlo prompts (default 200000)")
    parser.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    parser.add_argument(
        "--omega", nargs="+", default=None, help="KQ scales of the heads, comma-separated: 0.1,-0.1 (needs --mu)"
    )
    parser.add_argument(
        "--mu", nargs="+", default=None, help="OV values of the heads, comma-separated: 4.4,-4.4 (needs --omega)"
    )
    parser.add_argument(
        "--conditional",
        action="store_true",
        help="Rao-Blackwellise: average the risk conditional on the covariates (same mean, smaller stderr)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--out", type=nonempty, default=None, help="folder for the JSON result, named by the configuration"
    )
    add_quiet(parser)


def _gd_risk():
    """``proofs_check.closed_forms.gd_risk`` if importable now, else None."""
    try:
        mod = importlib.import_module("reduced_dynamics.estimation.closed_forms")
    except ImportError:
        return None
    return getattr(mod, "gd_risk", None)


def _risk_activation(args, setting, t0):
    from reduced_dynamics.cli._activation import risk_activation

    return risk_activation(args, setting)


def _risk_precond(args, setting, t0):
    from reduced_dynamics.cli._precond_risk import risk_precond

    return risk_precond(args, setting)


#: the reduced model of the setting (reduced_dynamics.models.model_name) -> how ``risk`` estimates its risks;
#: a model without an entry is refused in one line
HANDLERS = {
    "isotropic": lambda args, setting, t0: _main_isotropic(args, setting, t0),
    "activation": _risk_activation,
    "precond": _risk_precond,
    "multitask": lambda args, setting, t0: _main_multitask(args, setting, t0),
}


def main(args) -> int:
    from reduced_dynamics.models import model_name

    t0 = time.perf_counter()
    setting = setting_from_args(args)
    name = model_name(setting)
    if name not in HANDLERS:
        raise ValueError(
            f"`risk` has no Monte Carlo estimators for the {name} model yet (Σ with several tasks: "
            "`--sigma/--sigma-eigs` together with `--tasks`); `run` integrates its reduced flow"
        )
    return HANDLERS[name](args, setting, t0)


def _main_isotropic(args, setting, t0) -> int:
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
        omega, mu = tuple(parse_floats(args.omega, "--omega")), tuple(parse_floats(args.mu, "--mu"))
    stats_preds = {
        "multi_head": MultiHead(omega, mu),
        "single_head": SingleHead.optimum(setting),
        "gd": VanillaGD(eta),
        "debiased_gd": DebiasedGD(eta),
    }
    prepare_out(args.out)
    progress = Progress("risk", quiet=args.quiet)
    common = dict(n_prompts=args.prompts, seed=args.seed, conditional=args.conditional)
    progress.stage(f"{', '.join(stats_preds)} on {args.prompts} prompts")
    try:
        res = estimate_risks(stats_preds, setting, **common)
    except (ValueError, OverflowError) as exc:
        if args.omega is not None and re.search(r"MultiHead|multi_head", str(exc)):  # the user's heads overflow
            raise ValueError(
                "`--omega` and `--mu` make the multi-head predictions overflow to non-finite values; use smaller values"
            ) from None
        raise
    progress.stage(f"bayes_ridge on {args.prompts} prompts")
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
    if args.out is not None:
        stem = output_stem(
            "risk",
            dict(
                d=d,
                L=L,
                sigma2=float(sigma2),
                prompts=int(args.prompts),
                seed=int(args.seed),
                omega=[float(w) for w in omega],
                mu=[float(v) for v in mu],
                conditional=int(bool(args.conditional)),
            ),
        )
        out["file"] = str(atomic_write_json(Path(args.out) / f"{stem}.json", out))
    if args.json:
        print(json.dumps(to_jsonable(out), indent=2))
        return 0
    print(f"risk  d={d} L={L} sigma2={sigma2} prompts={res.n} seed={args.seed}  ({seconds:.2f} s)")
    print(f"multi_head at omega={np.round(omega, 6).tolist()} mu={np.round(mu, 6).tolist()}; eta*={eta:.6f}")
    print(table(estimates, exact))
    if args.out is not None:
        print(f"  wrote {out['file']}")
    return 0


def _main_multitask(args, setting, t0) -> int:
    """``risk --tasks``: per-task risks of the multi-task predictors on common prompts (docs/theory.md#extensions).

    Predictors: debiased GD on each support at η_n = 1/(1 + c|S_n|) (exact finite-L risk from
    the single-task closed form at d = |S_n|), Bayes ridge on each support (λ = σ²|S_n|), the
    limit predictors of the reduced flow for H = 1 (one head at the optimum of L̃) and
    H = 2 (one weighted debiased GD shared by the tasks), and the zero predictor (exact 1 + σ²).
    """
    from reduced_dynamics.exact.expansion import dgd_risk
    from reduced_dynamics.multitask.predictors import (
        limit_predictor,
        per_task_risks,
        reduced_mt_predict,
        support_dgd_weights,
        support_ridge_predict,
        weighted_dgd_predict,
    )

    if check_positive_int("prompts", args.prompts) < 2:
        raise ValueError(f"`prompts` must be an integer >= 2 (for a standard error), got {args.prompts}")
    if args.omega is not None or args.mu is not None:
        raise ValueError("`--omega`/`--mu` are not supported with `--tasks` (use `run --tasks` for a flow end state)")
    if args.conditional:
        raise ValueError("`--conditional` is not supported with `--tasks` (plain Monte Carlo on common prompts)")
    if setting.sigma2 == 0 and setting.L < max(map(len, setting.supports)):  # numpy's error named no flag
        raise ValueError(
            f"`--sigma2` must be > 0 when L < a task's number of features (Bayes ridge on the support: XᵀX is "
            f"singular), got 0 with `--L` {setting.L} and supports of up to {max(map(len, setting.supports))} features"
        )
    prepare_out(args.out)
    A = support_dgd_weights(setting)
    one, two = limit_predictor(1, setting), limit_predictor(2, setting)
    preds = {
        "debiased_gd_S": lambda p: weighted_dgd_predict(p, A),
        "bayes_ridge_S": lambda p: support_ridge_predict(p, setting),
        "limit_H1": lambda p: reduced_mt_predict(p, one.omega, one.mu, setting),
        "limit_H2": lambda p: weighted_dgd_predict(p, two.A),
        "zero": lambda p: np.zeros_like(p.yq),
    }
    res = per_task_risks(preds, setting, n_prompts=args.prompts, seed=args.seed)
    exact = {name: [None] * setting.n_tasks for name in preds}
    exact["debiased_gd_S"] = [
        float(dgd_risk(A[n].max(), setting.replace(d=len(S), tasks=None))) for n, S in enumerate(setting.supports)
    ]
    exact["zero"] = [1.0 + setting.sigma2] * setting.n_tasks
    seconds = time.perf_counter() - t0
    tasks = ",".join(f"{t[0] + 1}-{t[-1] + 1}" if len(t) > 1 else f"{t[0] + 1}" for t in setting.tasks)
    out = {
        "estimators": {
            name: {"risk": res.risk[i].tolist(), "stderr": res.stderr[i].tolist(), "exact": exact[name]}
            for i, name in enumerate(res.names)
        },
        "prompts": res.n,
        "seconds": seconds,
        "config": {**setting.to_dict(), "tasks_1based": tasks, "seed": args.seed, "eta": A.max(axis=1).tolist()},
    }
    if args.out is not None:
        stem = output_stem(
            "risk",
            dict(
                d=setting.d,
                L=setting.L,
                sigma2=float(setting.sigma2),
                tasks=tasks,
                prompts=int(args.prompts),
                seed=int(args.seed),
            ),
        )
        out["file"] = str(atomic_write_json(Path(args.out) / f"{stem}.json", out))
    if args.json:
        print(json.dumps(to_jsonable(out), indent=2))
        return 0
    print(
        f"risk --tasks {tasks}  d={setting.d} L={setting.L} sigma2={setting.sigma2} prompts={res.n} seed={args.seed}"
        f"  ({seconds:.2f} s)"
    )
    for n in range(setting.n_tasks):
        print(f"task {n + 1} (features {[j + 1 for j in setting.supports[n]]})")
        ests = {
            name: RiskEstimate(float(res.risk[i, n]), float(res.stderr[i, n]), res.n, name)
            for i, name in enumerate(res.names)
        }
        print(table(ests, {name: exact[name][n] for name in res.names}))
    if args.out is not None:
        print(f"  wrote {out['file']}")
    return 0
