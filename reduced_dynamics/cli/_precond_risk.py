"""``risk`` with a covariance (``--sigma`` / ``--sigma-eigs``): preconditioned GD risks under x ~ N(0, Σ).

``risk`` dispatches here when its setting has ``Sigma`` (``risk_precond(args, setting)`` returns the
exit code). On common prompts (the engine's full sampler, ``--conditional`` Rao–Blackwellises):

* ``dpgd_optimal``: debiased preconditioned GD at the optimal preconditioner and step,
  ``ηP = (Σ + κ_L I)⁻¹`` (:func:`reduced_dynamics.precond.exact.optimal_dpgd`);
* ``dpgd_sigma_inv``: debiased preconditioned GD with ``P = Σ⁻¹`` at its optimal step;
* ``pgd_sigma_inv``: preconditioned (vanilla) GD with ``P = Σ⁻¹`` at its optimal step;
* ``debiased_gd``, ``gd``: ``P = I`` at their optimal steps under Σ;
* ``bayes_ridge``: the posterior mean (λ = σ² d), Bayes-optimal for any Σ.

``exact`` is the closed-form finite-L risk (:mod:`reduced_dynamics.precond.exact`; null for ridge);
``differences`` are paired Monte Carlo differences with their standard errors and exact values;
``limit`` is the proportional-limit Bayes ratio at ξ = d/L, σ² and the spectrum of Σ
(:func:`reduced_dynamics.precond.bayes.bayes_ratio_sigma`, docs/theory.md#non-isotropic-covariates).
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import numpy as np

from reduced_dynamics._validation import check_positive_int
from reduced_dynamics.cli._common import Progress, prepare_out
from reduced_dynamics.estimation.predictors import BayesRidge
from reduced_dynamics.estimation.risk import estimate_risks
from reduced_dynamics.io import atomic_write_json, output_stem, to_jsonable
from reduced_dynamics.precond.bayes import bayes_ratio_sigma
from reduced_dynamics.precond.exact import dpgd_risk, optimal_dpgd, pgd_risk, precond_optimal_eta
from reduced_dynamics.precond.predictors import debiased_precond_gd, precond_gd

__all__ = ["risk_precond"]

#: the paired differences reported: (first, second)
PAIRS = (
    ("dpgd_optimal", "dpgd_sigma_inv"),
    ("dpgd_sigma_inv", "debiased_gd"),
    ("dpgd_sigma_inv", "bayes_ridge"),
)


def sigma_tag(Sigma) -> str:
    """A short, stable name of a covariance matrix for output file names (12 hex digits of sha256)."""
    return hashlib.sha256(np.ascontiguousarray(Sigma, dtype=np.float64).tobytes()).hexdigest()[:12]


def risk_precond(args, setting) -> int:
    """``risk`` under Σ: the estimators of the module docstring on ``--prompts`` common prompts.

    Parameters
    ----------
    args : argparse.Namespace
        The parsed ``risk`` arguments (``--prompts``, ``--seed``, ``--conditional``, ``--json``,
        ``--out``, ``--quiet``; ``--omega``/``--mu`` are refused).
    setting : Setting
        Scalar, with ``Sigma`` set.

    Returns
    -------
    int
        The exit code, 0. Bad input raises ``ValueError`` naming the flag (exit 2).
    """
    t0 = time.perf_counter()
    if check_positive_int("prompts", args.prompts) < 2:
        raise ValueError(f"`prompts` must be an integer >= 2 (for a standard error), got {args.prompts}")
    if getattr(args, "omega", None) is not None or getattr(args, "mu", None) is not None:
        raise ValueError(
            "`--omega`/`--mu` are not supported with `--sigma`/`--sigma-eigs` (the preconditioned reduced model "
            "is `run --sigma`); `risk` reports preconditioned GD and Bayes ridge"
        )
    if setting.L < 2:
        raise ValueError(f"`L` must be >= 2 with a covariance (debiased GD predicts 0 at L = 1), got {setting.L}")
    S = np.array(setting.Sigma)
    d = setting.d
    if setting.sigma2 == 0 and setting.L < d:
        raise ValueError(
            f"`sigma2` must be > 0 when L < d: Bayes ridge (λ = σ²d) is then singular, got σ² = 0 with "
            f"L = {setting.L}, d = {d}"
        )
    Sinv = np.linalg.inv(S)
    Sinv = 0.5 * (Sinv + Sinv.T)
    I = np.eye(d)
    opt = optimal_dpgd(setting)
    eta_inv = precond_optimal_eta(Sinv, setting)
    eta_inv_v = precond_optimal_eta(Sinv, setting, debiased=False)
    eta_id = precond_optimal_eta(I, setting)
    eta_id_v = precond_optimal_eta(I, setting, debiased=False)
    preds = {
        "dpgd_optimal": debiased_precond_gd(opt.P, opt.eta),
        "dpgd_sigma_inv": debiased_precond_gd(Sinv, eta_inv),
        "pgd_sigma_inv": precond_gd(Sinv, eta_inv_v),
        "debiased_gd": debiased_precond_gd(I, eta_id),
        "gd": precond_gd(I, eta_id_v),
        "bayes_ridge": BayesRidge(),
    }
    exact = {
        "dpgd_optimal": float(dpgd_risk(opt.P, opt.eta, setting)),
        "dpgd_sigma_inv": float(dpgd_risk(Sinv, eta_inv, setting)),
        "pgd_sigma_inv": float(pgd_risk(Sinv, eta_inv_v, setting)),
        "debiased_gd": float(dpgd_risk(I, eta_id, setting)),
        "gd": float(pgd_risk(I, eta_id_v, setting)),
        "bayes_ridge": None,
    }
    prepare_out(args.out)
    progress = Progress("risk", quiet=args.quiet)
    progress.stage(f"{', '.join(preds)} on {args.prompts} prompts (covariance Σ)")
    res = estimate_risks(preds, setting, n_prompts=args.prompts, seed=args.seed, conditional=args.conditional)
    estimates = res.estimates
    differences = {}
    for a, b in PAIRS:
        diff = res.difference(a, b)
        ex = None if exact[a] is None or exact[b] is None else exact[a] - exact[b]
        differences[f"{a}-{b}"] = {"risk": diff.risk, "stderr": diff.stderr, "exact": ex}
    lim = bayes_ratio_sigma(np.linalg.eigvalsh(S), setting) if setting.sigma2 > 0 else None
    seconds = time.perf_counter() - t0
    out = {
        "estimators": {
            name: {"risk": est.risk, "stderr": est.stderr, "exact": exact[name]} for name, est in estimates.items()
        },
        "differences": differences,
        "optimal": {
            "P": opt.P,
            "eta": opt.eta,
            "kappa": opt.kappa,
            "distance_to_sigma_inv": opt.distance_to_sigma_inv,
        },
        "steps": {
            "dpgd_sigma_inv": eta_inv,
            "pgd_sigma_inv": eta_inv_v,
            "debiased_gd": eta_id,
            "gd": eta_id_v,
        },
        "limit": None if lim is None else lim.to_dict(),
        "prompts": res.n,
        "seconds": seconds,
        "config": {
            "d": d,
            "L": setting.L,
            "sigma2": setting.sigma2,
            "sigma_eigs": np.linalg.eigvalsh(S),
            "seed": args.seed,
            "conditional": bool(args.conditional),
        },
    }
    if args.out is not None:
        stem = output_stem(
            "risk_precond",
            dict(
                d=d,
                L=int(setting.L),
                sigma2=float(setting.sigma2),
                Sigma=sigma_tag(S),
                prompts=int(args.prompts),
                seed=int(args.seed),
                conditional=int(bool(args.conditional)),
            ),
        )
        out["file"] = str(atomic_write_json(Path(args.out) / f"{stem}.json", out))
    if args.json:
        print(json.dumps(to_jsonable(out), indent=2))
        return 0
    from reduced_dynamics.cli._common import risk_table as table

    eigs = ", ".join(f"{v:.4g}" for v in np.linalg.eigvalsh(S))
    print(
        f"risk  d={d} L={setting.L} sigma2={setting.sigma2} Σ eigenvalues [{eigs}] prompts={res.n} "
        f"seed={args.seed}  ({seconds:.2f} s)"
    )
    print(
        f"optimal preconditioner ηP = (Σ + κI)⁻¹, κ = {opt.kappa:.6g}, η = {opt.eta:.6f} (tr PΣ = d); "
        f"scale-free distance to Σ⁻¹ {opt.distance_to_sigma_inv:.4g}"
    )
    print(table(estimates, exact))
    print("paired differences")
    for key, v in differences.items():
        ex = "-" if v["exact"] is None else f"{v['exact']:+.6f}"
        print(f"  {key}: {v['risk']:+.6f} ± {v['stderr']:.6f}  (exact {ex})")
    if lim is not None:
        print(
            f"proportional limit (ξ = {lim.xi:.4g}, σ²/s̄ = {lim.sigma2_eff:.4g}): ratio to Bayes {lim.ratio:.4f} "
            f"(optimal P), {lim.ratio_sigma_inv:.4f} (Σ⁻¹); isotropic bound U = {lim.bound:.4f} "
            f"{'holds' if lim.bound_holds else 'FAILS'}"
        )
    if args.out is not None:
        print(f"  wrote {out['file']}")
    return 0
