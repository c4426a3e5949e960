"""``reduced-dynamics risk``: Monte Carlo risks of a reduced model's predictor and of its reference predictors.

One path for every model: the flags build the :class:`~reduced_dynamics.Setting`,
:func:`reduced_dynamics.reduced_model` picks the model (H = the number of ``--omega`` entries, else 2),
:mod:`reduced_dynamics.cli._dispatch` checks that ``risk`` serves it and that every typed flag applies, and
the model's :meth:`~reduced_dynamics.models.ReducedModel.risk_plan` names what is estimated: the predictor of
the state (``--omega/--mu``; default the two-head point of the solution manifold at γ = 0.1) for the models
that have one, then the model's reference predictors, with their exact risks where a closed form exists,
paired differences and the model's landmarks. :meth:`~reduced_dynamics.models.ReducedModel.estimate_risks`
estimates them on common prompts of ``--seed``. Per model:

* isotropic: ``multi_head`` at the state, ``single_head`` (the H = 1 optimum of L̃), ``gd`` and
  ``debiased_gd`` at η* (exact finite-L risks), ``bayes_ridge`` (λ = σ²d; on its own prompts of the same
  seed: it needs the covariates, the others share the statistics sampler);
* ``--activation``: ``reduced_f`` (the model with f) at the state against debiased GD at η* and at the
  claimed step C_f μᵀω, paired and always Rao–Blackwellised; L̃_f and the claimed step at the state;
* ``--sigma/--sigma-eigs``: (debiased) preconditioned GD at the optimum (Σ + κ_L I)⁻¹, with Σ⁻¹ and with I,
  and Bayes ridge, with exact risks, paired differences and the proportional-limit Bayes ratio;
* ``--tasks``: per task, debiased GD and Bayes ridge on each support, the flow's limits for H = 1 and 2,
  and zero.

``--json`` prints ``model, estimators {name: {risk, stderr, exact}}, differences {a-b: {risk, stderr,
exact}}, prompts, seed, setting, config`` and the model's landmarks; ``--out`` writes it, named by the
configuration.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import numpy as np

from reduced_dynamics.cli._common import (
    Progress,
    add_quiet,
    check_int_in,
    check_option,
    exit_codes_epilog,
    nonempty,
    parse_floats,
    prepare_out,
)
from reduced_dynamics.cli._common import risk_table as table
from reduced_dynamics.cli._dispatch import MODEL_FLAGS, SETTING_FLAGS, check_model_flags, model_from_args
from reduced_dynamics.cli._setting import (
    add_extension_arguments,
    add_setting_arguments,
    add_tasks_argument,
    setting_from_args,
)

HELP = "Monte Carlo risks of multi-head attention, single head, GD, debiased GD and Bayes ridge."
EPILOG = exit_codes_epilog() + (
    "\n\nThe setting (--sigma/--sigma-eigs, --tasks, --activation) chooses the reduced model and its reference\n"
    "predictors; flags that do not apply to it are refused.\n"
    "Lists: --omega 0.1,-0.1 --mu 4.4,-4.4 (comma-separated, as in `run`; space-separated also works).\n"
    "Output name (--out) encodes the whole configuration, e.g.\n"
    "  risk_d5_L40_sigma2-0.1_prompts200000_seed0_omega-0.1,-0.1_mu-4.4,-4.4_conditional0.json"
)
#: library parameter names -> the flags of this command (for the one error line)
#: (``lam``: Bayes ridge's λ = σ²·d, zero only with ``--sigma2 0``)
PARAM_FLAGS = {"n_prompts": "--prompts", "n": "--prompts", "lam": "--sigma2", **SETTING_FLAGS}

#: γ of the default two-head point on the solution manifold
DEFAULT_GAMMA = 0.1
#: largest --prompts (every model's estimator takes it)
PROMPTS_MAX = 10**8


def add_arguments(parser) -> None:
    add_setting_arguments(parser)
    add_tasks_argument(parser)
    add_extension_arguments(parser)
    parser.add_argument(
        "--prompts", type=int, default=200000, help=f"Monte Carlo prompts, in [2, {PROMPTS_MAX:.0e}] (default 200000)"
    )
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


def _state(args, model):
    """The state ``risk`` evaluates: ``--omega/--mu``, else the two-head point of the solution manifold at γ = 0.1;
    None for the models whose plan has no state."""
    if "--omega" not in MODEL_FLAGS["risk"][model.name]:
        return None
    if args.omega is None:
        return model.manifold_point(DEFAULT_GAMMA)
    return model.state(parse_floats(args.omega, "--omega"), parse_floats(args.mu, "--mu"))


def main(args) -> int:
    t0 = time.perf_counter()
    setting = setting_from_args(args)
    heads = 2
    if (args.omega is None) != (args.mu is None):
        raise ValueError("`--omega` and `--mu` must be given together")
    if args.omega is not None:
        omega, mu = parse_floats(args.omega, "--omega"), parse_floats(args.mu, "--mu")
        if len(omega) != len(mu):
            raise ValueError(
                f"`--omega` and `--mu` must have one entry per head each, got {len(omega)} and {len(mu)} entries"
            )
        heads = len(omega)
    model = model_from_args(args, setting, n_heads=heads)
    check_model_flags(args, model, "risk")
    check_option(args, "prompts", check_int_in, "--prompts", 2, PROMPTS_MAX, " (two for a standard error)")
    check_option(args, "seed", check_int_in, "--seed", 0)
    y = _state(args, model)
    plan = model.risk_plan(y)
    conditional = bool(args.conditional) if plan.conditional is None else plan.conditional
    prepare_out(args.out)
    progress = Progress("risk", quiet=args.quiet)
    try:
        res = model.estimate_risks(
            plan, n_prompts=args.prompts, seed=args.seed, conditional=conditional, stage=progress.stage
        )
    except (ValueError, OverflowError) as exc:
        state = plan.predictors.get(plan.state)
        names = [re.escape(plan.state or "")] + ([re.escape(type(state).__name__)] if state is not None else [])
        if args.omega is not None and re.search("|".join(names), str(exc)):  # the user's heads overflow
            raise ValueError(
                "`--omega` and `--mu` make the model's predictions overflow to non-finite values; use smaller values"
            ) from None
        raise
    out = _report(args, model, setting, y, plan, res, conditional, seconds=time.perf_counter() - t0)
    if args.out is not None:
        out["file"] = str(_write(args, model, setting, y, plan, conditional, out))
    if args.json:
        from reduced_dynamics.io import to_jsonable

        print(json.dumps(to_jsonable(out), indent=2))
        return 0
    print(_text(model, setting, y, plan, res, out))
    if args.out is not None:
        print(f"  wrote {out['file']}")
    return 0


def _report(args, model, setting, y, plan, res, conditional, *, seconds) -> dict:
    """The one JSON report of every model (the model's landmarks at the top level)."""
    estimators = {}
    for name in res.names:
        r, s = res.estimate(name)
        estimators[name] = {"risk": r, "stderr": s, "exact": plan.exact[name]}
    differences = {}
    for a, b in plan.pairs:
        key = f"{a}-{b}"
        r, s = res.differences[key]
        ea, eb = plan.exact[a], plan.exact[b]
        exact = None if ea is None or eb is None else ea - eb
        differences[key] = {"risk": r, "stderr": s, "exact": exact}
    config = {"d": setting.d, "L": setting.L, "sigma2": setting.sigma2, "seed": args.seed, "conditional": conditional}
    if y is not None:
        config.update({k: v.tolist() for k, v in model.unpack(y).items()})
    config.update(plan.config)
    return {
        "model": model.name,
        "estimators": estimators,
        "differences": differences,
        "prompts": res.n,
        "seed": int(args.seed),
        "seconds": seconds,
        "setting": setting.to_dict(),
        "config": config,
        **plan.landmarks,
    }


def _write(args, model, setting, y, plan, conditional, out) -> Path:
    """Write the report under ``--out``, named by everything that changes the numbers."""
    from reduced_dynamics.io import atomic_write_json, output_stem

    key = dict(d=setting.d, L=setting.L, sigma2=float(setting.sigma2), **plan.name_keys)
    key.update(prompts=int(args.prompts), seed=int(args.seed))
    if y is not None:
        key.update({k: [float(x) for x in np.ravel(v)] for k, v in model.unpack(y).items()})
    if "--conditional" in MODEL_FLAGS["risk"][model.name]:
        key["conditional"] = int(bool(conditional))
    return atomic_write_json(Path(args.out) / f"{output_stem(plan.name_prefix, key)}.json", out)


def _vec(v) -> str:
    return np.array2string(np.asarray(v, dtype=float), precision=5)


def _text(model, setting, y, plan, res, out) -> str:
    """The text report: the configuration, the state and its landmarks, the risk table(s), the paired differences."""
    land, cfg = plan.landmarks, out["config"]
    what = f"{model.name} model"
    if "activation" in land:
        what += f", f = {land['activation']} (C = {land['activation_c']:g}, C_f = {land['c_f']:g})"
    if "sigma_eigs" in cfg:
        what += f", Σ eigenvalues [{', '.join(f'{v:.4g}' for v in cfg['sigma_eigs'])}]"
    if "tasks_1based" in cfg:
        what += f", tasks {cfg['tasks_1based']}"
    lines = [
        f"risk  {what}  d={setting.d} L={setting.L} sigma2={setting.sigma2:g} prompts={res.n} seed={out['seed']}"
        f"{'  conditional' if cfg['conditional'] else ''}  ({out['seconds']:.2f} s)"
    ]
    if y is not None:
        parts = " ".join(f"{k}={_vec(v)}" for k, v in model.unpack(y).items())
        facts = []
        if "approx_loss" in land:
            facts.append(f"L̃_f = {land['approx_loss']:.6f}")
        if "eta_claim" in land:
            facts.append(f"η claimed {land['eta_claim']:.5f}, slope μᵀT₁ {land['eta_tilt']:.5f}")
        eta = land.get("eta_star", cfg.get("eta_star"))
        if eta is not None:
            facts.append(f"η* = {eta:.6f}")
        lines.append(f"{plan.state} at {parts}; " + "; ".join(facts))
    if "optimal" in land:
        o = land["optimal"]
        lines.append(
            f"optimal preconditioner ηP = (Σ + κI)⁻¹, κ = {o['kappa']:.6g}, η = {o['eta']:.6f} (tr PΣ = d); "
            f"scale-free distance to Σ⁻¹ {o['distance_to_sigma_inv']:.4g}"
        )
    if np.ndim(res.risk) == 2:  # per task
        from reduced_dynamics.estimation.risk import RiskEstimate

        for n, S in enumerate(setting.supports):
            lines.append(f"task {n + 1} (features {[j + 1 for j in S]})")
            ests = {
                name: RiskEstimate(float(res.risk[i, n]), float(res.stderr[i, n]), res.n, name)
                for i, name in enumerate(res.names)
            }
            exact = {name: None if plan.exact[name] is None else plan.exact[name][n] for name in res.names}
            lines.append(table(ests, exact))
    else:
        from reduced_dynamics.estimation.risk import RiskEstimate

        ests = {name: RiskEstimate(*res.estimate(name), res.n, name) for name in res.names}
        lines.append(table(ests, plan.exact))
    if out["differences"]:
        lines.append("paired differences")
        for key, v in out["differences"].items():
            ex = "-" if v["exact"] is None else f"{v['exact']:+.6f}"
            lines.append(f"  {key}: {v['risk']:+.6f} ± {v['stderr']:.6f}  (exact {ex})")
    lim = land.get("limit")
    if lim:
        lines.append(
            f"proportional limit (ξ = {lim['xi']:.4g}, σ²/s̄ = {lim['sigma2_eff']:.4g}): ratio to Bayes "
            f"{lim['ratio']:.4f} (optimal P), {lim['ratio_sigma_inv']:.4f} (Σ⁻¹); isotropic bound U = "
            f"{lim['bound']:.4f} {'holds' if lim['bound_holds'] else 'FAILS'}"
        )
    return "\n".join(lines)
