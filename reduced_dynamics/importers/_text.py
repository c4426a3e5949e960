"""The human-readable form of an :class:`~reduced_dynamics.importers.analysis.AnalysisReport`."""

from __future__ import annotations

import numpy as np

__all__ = ["summary_text"]

#: reference predictor -> column title in the risk table
TITLES = {
    "debiased_gd": "model − dGD(η*)",
    "debiased_gd_own": "model − dGD(η_eff)",
    "reduced": "model − reduced",
    "bayes_ridge": "model − Bayes",
    "limit": "model − limit",
    "debiased_gd_S": "model − dGD on S_n",
    "bayes_ridge_S": "model − Bayes on S_n",
}


def _vec(a, fmt="+.5f") -> str:
    return "[" + ", ".join(_num(x, fmt) for x in np.ravel(a)) + "]"


def _num(x, fmt=".5f") -> str:
    """``fmt`` while that is readable, six significant digits for large numbers (one token either way)."""
    x = float(x)
    if abs(x) >= 1e4:
        return format(x, "+.6g" if fmt.startswith("+") else ".6g")
    return format(x, fmt)


def _pm(r, s, fmt=".5f") -> str:
    return f"{_num(r, fmt)} ± {_num(s)}"


def _g(x) -> str:
    return "undefined" if x is None else f"{float(x):.4g}"


def summary_text(rep) -> str:
    """Every section of the report as text (the same numbers as ``rep.to_dict()``, rounded)."""
    src, s = rep.source, rep.setting
    lines = [rep.message]
    who = "query attends to itself" if src["query_attends_self"] else "query attends to the context only"
    lines.append(f"model: {src['format']}, H={src['n_heads']} head(s), d={src['d']}, n_out={src['n_out']} ({who})")
    kind = {"isotropic": "isotropic", "precond": "x ~ N(0, Σ)", "multitask": f"{s.n_tasks} tasks"}[rep.model]
    cfg = rep.config
    lines.append(
        f"setting: d={s.d}, L={s.L}, σ²={float(s.sigma2):g} ({kind}); reduced model {rep.model}; "
        f"{cfg['n_prompts']} prompts per L, seed {cfg['seed']}"
    )
    st = rep.state
    lines += ["", f"circuits per head (dummy: |ω_h μ_h| < {cfg['dummy_tol']:g} · max):"]
    for h in range(rep.n_heads):
        tag = " dummy" if bool(st["dummy"][h]) else ""
        dist = float(rep.ideal["distance"][h])
        if rep.model == "multitask":
            role = st["roles"][h]
            lines.append(
                f"  head {h + 1}: ω={_vec(st['omega'][h], '+.4f')}  μ={_vec(st['mu'][h], '+.4f')}  role {role}  "
                f"distance to the ideal pattern {dist:.3f}"
            )
        else:
            lines.append(
                f"  head {h + 1}: ω={float(st['omega'][h]):+.5f}  μ={float(st['mu'][h]):+.5f}  "
                f"distance to the ideal pattern {dist:.3f}{tag}"
            )
    lines += ["", "verdicts (measured, threshold, rule):"]
    for name, v in rep.verdicts.items():
        op = ">=" if name == "sign_match" else "<="
        val = "undefined" if v.value is None else f"{v.value:.4g}"
        if name == "dummy_heads":
            val, op = f"{int(v.value)} dummy", "at tol"
        mark = "pass" if v.passed else "FAIL"
        lines.append(f"  {mark}  {name:<20} {val:>10} {op} {v.threshold:<6g} {v.rule}")
    loc = rep.location
    lines += ["", "where the state sits:"]
    if rep.model == "multitask":
        lines.append(f"  A = MᵀΩ against the limit predictor's A*: max |A − A*| / max |A*| = {loc['A_rel_gap']:.4g}")
    else:
        lines.append(
            f"  η_eff = μᵀω = {loc['eta_eff']:.5f}"
            + (f", step of P_eff (tr(PΣ) = d) {loc['eta_eff_sigma']:.5f}" if "eta_eff_sigma" in loc else "")
            + f"; η* = {loc['eta_star']:.5f}; relative gap {loc['eta_rel_gap']:+.2%}"
        )
        gap = loc.get("manifold")
        if gap is not None:
            g = gap if isinstance(gap, dict) else gap.to_dict()
            lines.append(
                f"  solution manifold: γ = {g['gamma']:.5f}, μ₊ = {g['mu_plus']:.5f}, μ₋ = {g['mu_minus']:.5f}, "
                f"μ_γ = {g['mu_gamma']:.5f} (relative gaps {_g(g['rel_gap_plus'])} and {_g(g['rel_gap_minus'])})"
            )
        if rep.model == "precond":
            lines.append(
                f"  P_eff: distance to Σ⁻¹ {loc['P_eff_distance_sigma_inv']:.4f}, to P* {loc['P_eff_distance_optimal']:.4f}, "
                f"to I {loc['P_eff_distance_identity']:.4f} (P* is {loc['P_optimal_distance_sigma_inv']:.4f} from Σ⁻¹); "
                f"‖P_eff − η*P*‖/‖η*P*‖ = {loc['P_eff_rel_error']:.4f}"
            )
            lines.append(
                f"  KQ blocks: distance to Σ⁻¹ {_vec(loc['kq_distance_sigma_inv'], '.4f')}, "
                f"to P* {_vec(loc['kq_distance_optimal'], '.4f')}"
            )
        else:
            lines.append(f"  KQ blocks: distance to Σ⁻¹ = P* = I: {_vec(loc['kq_distance_sigma_inv'], '.4f')}")
    th = rep.theory
    lines += ["", f"the theory at the extracted state (L = {s.L}):"]
    if "loss_approx" in th:
        inf = th.get("inf_loss")
        lines.append(
            f"  {'L̃ (the reduced model loss)':<44} {_num(th['loss_approx'], '.6f')}"
            + (f"   (its infimum {inf:.6f})" if inf is not None else "")
        )
    if rep.model == "multitask":
        lines.append(
            f"  L̃ per task {_vec(th['loss_per_task'], '.6f')}; limit ({th['limit_regime']}) "
            f"{_vec(th['limit_loss_per_task'], '.6f')}"
        )
    if th.get("exact") is not None:
        lines.append(
            f"  {'exact finite-L risk (reduced model)':<44} {_num(th['exact']['risk'], '.6f')} "
            f"(error estimate {th['exact']['error_estimate']:.1e})"
        )
    for key, text in (
        ("debiased_gd_optimal", "debiased GD at the optimum (exact)"),
        ("debiased_gd_own", "debiased GD at the model's own step (exact)"),
        ("debiased_gd_sigma_inv", "debiased GD with P = Σ⁻¹ (exact)"),
        ("debiased_gd_identity", "debiased GD with P = I (exact)"),
    ):
        if key in th:
            lines.append(f"  {text:<44} {_num(th[key], '.6f')}")
    lines.append(f"  {'Bayes ridge (Monte Carlo)':<44} " + _risk_cell(th["bayes_ridge_mc"]))
    lines.append(f"  {'the model (Monte Carlo)':<44} " + _risk_cell(th["model_mc"]))
    rk = rep.risks
    lines += ["", f"risks on fresh prompts, paired on common prompts (± standard error, {rk.n} prompts per L):"]
    multi = np.ndim(rk.risk["model"]) == 2
    tasks = range(np.shape(rk.risk["model"])[1]) if multi else [None]
    for t in tasks:
        if multi:
            lines.append(f"  task {t + 1}:")
        head = f"  {'L':>6}  {'model':>19}" + "".join(f"  {TITLES.get(k, k):>22}" for k in rk.names)
        lines.append(head)
        for i, L in enumerate(rk.L):
            sel = (i, t) if multi else i
            row = f"  {int(L):>6}  {_pm(rk.risk['model'][sel], rk.stderr['model'][sel]):>19}"
            row += "".join(f"  {_pm(rk.diff[k][sel], rk.diff_stderr[k][sel], '+.5f'):>22}" for k in rk.names)
            lines.append(row)
    if rk.exact:
        lines.append(
            "  exact risks of the references: " + "; ".join(f"{k} {_vec(v, '.5f')}" for k, v in rk.exact.items())
        )
    if rep.notes:
        lines += ["", "notes:"] + [f"  - {n}" for n in rep.notes]
    return "\n".join(lines)


def _risk_cell(d) -> str:
    r, s = np.asarray(d["risk"]), np.asarray(d["stderr"])
    if r.ndim == 0:
        return _pm(r, s, ".6f")
    return "; ".join(f"task {t + 1}: {_pm(r[t], s[t], '.6f')}" for t in range(r.size))
