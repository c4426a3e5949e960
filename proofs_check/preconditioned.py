r"""Check ``preconditioned``: the reduced model under :math:`x \sim N(0, \Sigma)` with ``KQ_h = ω_h W`` (docs/theory.md#non-isotropic-covariates).

At the check's covariance (the setting's ``Sigma``, or eigenvalues ``linspace(0.5, 4, d)`` in the
random orthogonal basis of seed 0 when it has none; ``d``, ``σ²`` of the setting):

1. **Derivation.** The loss derived with sympy from the moment statements (tilt and fluctuation
   of a softmax average, in whitened coordinates) equals the closed form :math:`\tilde L_\Sigma`
   (difference 0, generic ``Σ`` and ``W``, ``d = 2``), and at ``Σ = I``, ``W = I`` it is exactly
   :math:`\tilde L` (difference 0); numerically ``precond_loss`` equals ``approx_loss`` there.
2. **Gradient.** The hand-written gradient in ``(ω, μ, W)`` equals central differences.
3. **Monte Carlo.** The true risk of the reduced model under Σ (Rao–Blackwellised) at ``L = 640``
   agrees with the exact expansion ``R0 + R1/L`` within 3 SE; :math:`\tilde L_\Sigma` is off by its
   derived ``O(1/L)`` gap.
4. **Flow end state.** From a symmetric ± start and a random ``W`` the flow (to ``t_end``) ends with
   the OV pattern unchanged (sign matching, ``|Σμ|/Σ|μ| < 1e-6``), ``W`` at the derived limit
   ``(Σ + κ_L I)⁻¹`` up to scale (distance < 2e-3), ``η_eff`` at the limit's, and the distance of ``W``
   to ``Σ⁻¹`` decreasing with ``L`` (like ``κ_L ∝ 1/L``).
5. **Limit predictor.** At the first L the reduced model at the flow's end state (t = 1e4, full 1e5) and debiased
   preconditioned GD with ``Γ* = (Σ + κ_L I)⁻¹`` (``precond.predictors``) have Monte Carlo risks within
   ``PAIRED_TOL`` of each other (paired, common prompts), and ``P = Σ⁻¹`` at the same step is worse
   by more than 3 SE.
"""

from __future__ import annotations

import numpy as np

from reduced_dynamics import integrate, reduced_model
from reduced_dynamics.dynamics.loss import approx_loss
from reduced_dynamics.estimation.risk import estimate_risks
from reduced_dynamics.precond.derive import difference_to_closed_form, reduction_to_isotropic
from reduced_dynamics.precond.flow import precond_limit
from reduced_dynamics.precond.loss import PrecondReducedModel, precond_loss, precond_loss_grad, precond_risk_expansion
from reduced_dynamics.setting import Setting

from .result import CheckResult, reports_errors

__all__ = ["check_preconditioned", "check_sigma"]

#: tolerances
DIST_LIMIT_TOL = 2e-3
ETA_TOL = 2e-3
ZERO_SUM_TOL = 1e-6
GRAD_RTOL = 1e-5
REDUCTION_RTOL = 1e-12
MC_SE = 3.0
#: largest |paired risk difference| between the flow's end state and its limit predictor (the O(γ⁴) gap)
PAIRED_TOL = 1e-3


def check_sigma(setting: Setting) -> np.ndarray:
    """The check's covariance: ``setting.Sigma``, or eigenvalues ``linspace(0.5, 4, d)`` in the basis of seed 0 (as the options --sigma-eigs and --sigma-seed 0 give)."""
    if setting.Sigma is not None:
        return np.asarray(setting.Sigma)
    from reduced_dynamics.precond.covariance import example_covariance

    return example_covariance(setting, seed=0)


def _end_state(setting: Setting, *, t_end: float, n_times: int):
    """The two-head flow in ``(ω, μ, W)`` from the symmetric ± start and the random ``W`` of seed 1, to ``t_end``.

    The tolerances (``rtol=1e-9, atol=1e-12``), the output times (``t_first = 1e-2``) and the absence of a
    stationarity stop are those of the former preconditioned flow driver.
    """
    model = reduced_model(setting, n_heads=2)
    return integrate(
        model,
        model.initial_state(seed=1, scale=0.01),
        t_end=t_end,
        rtol=1e-9,
        atol=1e-12,
        n_times=n_times,
        t_first=1e-2,
        stationarity_tol=0,
    )


@reports_errors("preconditioned")
def check_preconditioned(setting: Setting, *, quick: bool = False) -> CheckResult:
    """Run the ``preconditioned`` check (module docstring); ``quick``: L = 40, 160 to t = 1e3 (full: six L to t = 1e4).

    Parameters
    ----------
    setting : Setting
    quick : bool

    Returns
    -------
    CheckResult
    """
    setting.require_scalar("the preconditioned check")
    Sig = check_sigma(setting)
    d, s2 = int(setting.d), float(setting.sigma2)
    base = Setting(d=d, L=setting.L, sigma2=s2, Sigma=Sig)
    # 1. derivation
    cases = [(2, 2, False)] if quick else [(1, 2, False), (2, 2, False), (2, 2, True)]
    sym_zero = all(difference_to_closed_form(H, n, per_head=p) == 0 for H, n, p in cases)
    red_zero = all(reduction_to_isotropic(H, n, per_head=p) == 0 for H, n, p in cases)
    rng = np.random.default_rng(0)
    iso = Setting(d=d, L=setting.L, sigma2=s2)
    red_err = 0.0
    for _ in range(5):
        om, mu = 0.3 * rng.standard_normal(3), 2.0 * rng.standard_normal(3)
        a = approx_loss(om, mu, iso)
        red_err = max(red_err, abs(precond_loss(om, mu, np.eye(d), iso) - a) / abs(a))
    # 2. gradient vs central differences
    H = 2
    om, mu, W = 0.3 * rng.standard_normal(H), rng.standard_normal(H), rng.standard_normal((d, d)) / np.sqrt(d)
    g = precond_loss_grad(om, mu, W, base)
    theta = np.concatenate([om, mu, W.ravel()])
    gvec = np.concatenate([g.omega, g.mu, g.W.ravel()])

    def f(th):
        return precond_loss(th[:H], th[H : 2 * H], th[2 * H :].reshape(d, d), base)

    h = 1e-6
    fd = np.array([(f(theta + h * e) - f(theta - h * e)) / (2 * h) for e in np.eye(theta.size)])
    grad_err = float(np.abs(gvec - fd).max() / max(np.abs(fd).max(), 1e-300))
    # 3. Monte Carlo of the true risk
    L_mc = 640
    s_mc = base.replace(L=L_mc)
    om_mc, mu_mc, W_mc = np.array([0.2, -0.2]), np.array([2.0, -2.0]), np.linalg.inv(Sig)
    n_mc = 8_000 if quick else 60_000
    est = estimate_risks(
        {"m": PrecondReducedModel(om_mc, mu_mc, W_mc)}, s_mc, n_prompts=n_mc, seed=7, conditional=True
    )["m"]
    exp_mc = precond_risk_expansion(om_mc, mu_mc, W_mc, s_mc)
    approx_mc = precond_loss(om_mc, mu_mc, W_mc, s_mc)
    z_exp = (est.risk - exp_mc.risk) / est.stderr
    z_approx = (est.risk - approx_mc) / est.stderr
    # 4. flow end states vs L
    Ls = (40, 160) if quick else (20, 40, 80, 160, 320, 640)
    t_end = 1e3 if quick else 1e4
    rows = []
    for L in Ls:
        s_L = base.replace(L=L)
        r = _end_state(s_L, t_end=t_end, n_times=20)
        n, lim = r.final, precond_limit(s_L)
        rows.append(
            {
                "L": L,
                "success": bool(r.success),
                "distance_sigma_inv": float(n.distance_sigma_inv),
                "distance_limit": float(n.distance_limit),
                "distance_identity": float(n.distance_identity),
                "limit_distance_sigma_inv": lim.distance_sigma_inv,
                "kappa": lim.kappa,
                "gamma": n.gamma,
                "eta_eff": n.eta_eff,
                "limit_eta_eff": lim.eta_eff,
                "zero_sum_ratio": n.zero_sum_ratio,
                "sign_matched": n.sign_matched,
                "loss": n.loss,
                "limit_loss": lim.loss,
            }
        )
    # 5. the limit predictor on common prompts
    from reduced_dynamics.precond.predictors import debiased_precond_gd

    L0 = Ls[0]
    s0 = base.replace(L=L0)
    t_pair = 1e4 if quick else 1e5  # the gap to the limit predictor shrinks like γ⁴ along the drift
    r0 = _end_state(s0, t_end=t_pair, n_times=5)
    end0, lim0 = r0.model.unpack(r0.states[-1]), precond_limit(s0)
    n_pair = 8_000 if quick else 100_000
    pair = estimate_risks(
        {
            "reduced": PrecondReducedModel(end0["omega"], end0["mu"], end0["W"]),
            "dpgd_limit": debiased_precond_gd(lim0.Gamma, 1.0),
            "dpgd_sigma_inv": debiased_precond_gd(np.linalg.inv(Sig), lim0.eta_eff),
        },
        s0,
        n_prompts=n_pair,
        seed=11,
        conditional=True,
    )
    d_lim = pair.difference("reduced", "dpgd_limit")
    d_sinv = pair.difference("dpgd_sigma_inv", "dpgd_limit")
    dists = [row["distance_sigma_inv"] for row in rows]
    decreasing = bool(np.all(np.diff(dists) < 0))
    max_dlim = max(row["distance_limit"] for row in rows)
    max_eta = max(abs(row["eta_eff"] - row["limit_eta_eff"]) for row in rows)
    ov_ok = all(row["sign_matched"] and row["zero_sum_ratio"] < ZERO_SUM_TOL for row in rows)
    passed = bool(
        sym_zero
        and red_zero
        and red_err < REDUCTION_RTOL
        and grad_err < GRAD_RTOL
        and abs(z_exp) < MC_SE
        and abs(est.risk - approx_mc) < MC_SE * est.stderr + abs(exp_mc.approx_gap)
        and decreasing
        and max_dlim < DIST_LIMIT_TOL
        and max_eta < ETA_TOL
        and ov_ok
        and all(row["success"] for row in rows)
        and abs(d_lim.risk) < PAIRED_TOL
        and d_sinv.risk > MC_SE * d_sinv.stderr
    )
    table = ", ".join(
        f"L={row['L']}: {row['distance_sigma_inv']:.4f} (limit {row['limit_distance_sigma_inv']:.4f})" for row in rows
    )
    return CheckResult(
        name="preconditioned",
        passed=passed,
        predicted=(
            "derived − closed form = 0, reduction to L̃ at Σ = I, W = I = 0; MC risk = R0 + R1/L; "
            "flow: W → (Σ + κ_L I)⁻¹ (κ_L = (tr Σ + dσ²)/L) up to scale, η_eff → its limit, OV pattern unchanged, "
            "distance of W to Σ⁻¹ decreasing like 1/L: "
            + ", ".join(f"L={row['L']}: {row['limit_distance_sigma_inv']:.4f}" for row in rows)
        ),
        measured=(
            f"symbolic {'0' if sym_zero else '≠ 0'}, reduction {'0' if red_zero else '≠ 0'} (numeric rel {red_err:.1e}); "
            f"grad vs FD rel {grad_err:.1e}; MC at L = {L_mc} ({n_mc} prompts): {est.risk:.5f} ± {est.stderr:.5f} vs "
            f"R0 + R1/L {exp_mc.risk:.5f} ({z_exp:+.2f} SE), L̃_Σ {approx_mc:.5f} ({z_approx:+.2f} SE, derived gap "
            f"{exp_mc.approx_gap:+.5f}); flow distances to Σ⁻¹ {table}; max distance to (Σ + κ_L I)⁻¹ {max_dlim:.1e}, "
            f"max |η_eff − limit| {max_eta:.1e}, OV pattern (sign matching, zero-sum) {'kept' if ov_ok else 'broken'}; "
            f"L = {L0}, t = {t_pair:g} ({n_pair} paired prompts): risk(reduced end state) − risk(DPGD with (Σ + κ_L I)⁻¹) = "
            f"{d_lim.risk:+.2e} ± {d_lim.stderr:.1e}, DPGD with Σ⁻¹ (same step) worse by {d_sinv.risk:.2e} ± {d_sinv.stderr:.1e}"
        ),
        tolerance=(
            f"distance to limit < {DIST_LIMIT_TOL}, |η_eff − limit| < {ETA_TOL}, |Σμ|/Σ|μ| < {ZERO_SUM_TOL}, "
            f"grad rel < {GRAD_RTOL}, MC within {MC_SE} SE (plus the derived O(1/L) gap for L̃_Σ), "
            f"|paired difference to the limit predictor| < {PAIRED_TOL}"
        ),
        explanation=(
            f"Preconditioned reduced model (KQ_h = ω_h W) under Σ with eigenvalues "
            f"{np.round(np.linalg.eigvalsh(Sig), 3).tolist()}, d = {d}, σ² = {s2:g}: sympy derivation, gradient, "
            f"true-risk Monte Carlo and the flow end state (t = {t_end:g}) at L = {list(Ls)}."
        ),
        data={
            "sigma": Sig,
            "grad_rel_err": grad_err,
            "reduction_rel_err": red_err,
            "mc": {
                "L": L_mc,
                "n": n_mc,
                "risk": est.risk,
                "stderr": est.stderr,
                "expansion": exp_mc.risk,
                "approx": approx_mc,
                "approx_gap": exp_mc.approx_gap,
            },
            "flow": rows,
            "limit_predictor": {
                "L": L0,
                "n": n_pair,
                "reduced_minus_limit": d_lim.risk,
                "reduced_minus_limit_se": d_lim.stderr,
                "sigma_inv_minus_limit": d_sinv.risk,
                "sigma_inv_minus_limit_se": d_sinv.stderr,
                "risks": {k: [v.risk, v.stderr] for k, v in pair.estimates.items()},
            },
        },
    )
