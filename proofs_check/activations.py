r"""Check ``activations``: the reduced model with an attention activation f (docs/theory.md#other-activations).

For ``f`` in exp, affine (``C = 0.3``), square (``C = 1``) and 1 + tanh, at the given ``d, L, σ²``:

1. **Reduction.** :math:`\tilde L_f` at ``f = exp`` equals :math:`\tilde L` (``approx_loss``) and so does
   its gradient (relative 1e-10, random states, H = 1..4).
2. **Moments.** The closed forms of the tilt ``m_f`` and the kernel ``K`` (exp, affine, square) equal the
   quadrature route (error relative to max(|value|, 1) below 1e-9); the tanh quadrature equals scipy's adaptive ``quad`` (1e-9).
3. **Gradient.** :func:`act_loss_grad` equals central differences (relative 1e-6) for every f.
4. **Monte Carlo.** :math:`\tilde L_f` against the reduced model's true risk with f
   (:func:`act_mc_risk`) at ``L`` and ``16 L``: the error at ``16 L`` is within 3 SE + A/(16L), with the
   O(1/L) allowance ``A = 2 L (|err(L)| + 3 SE(L))`` measured at ``L`` (the factor 2 leaves room for the
   pre-asymptotic O(1/L²) part: measured, ``L·err`` changes by up to 1.3x between L = 40 and 640), and it
   shrinks (``|err(16L)| < |err(L)|/3 + 3 SE``; an O(1) error fails this).
5. **Flow.** From a small random start the flow of :math:`\tilde L_f` ends sign-matched and zero-sum (and
   homogeneous, except for affine, whose loss is flat along the manifold); the large-L slope ``μᵀT₁`` is
   within 2e-3 of ``η*``; γ follows the drift law (``(64 c d C_f(−m₃) t)^{-1/4}``, exp ``(8cd³t)^{-1/6}``)
   within 3 %; the claimed ``2 C_f γ μ₊`` exceeds the slope by ``−m₃(d+2)γ²/C_f`` (within 10 %). Quick: 4000
   Monte Carlo prompts per L (full: 40000).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.integrate import quad

from reduced_dynamics import Final, integrate, reduced_model
from reduced_dynamics.activation_dynamics.flow import act_limit, drift_gamma
from reduced_dynamics.activation_dynamics.loss import (
    act_loss,
    act_loss_grad,
    act_mc_risk,
    fluctuation_kernel,
    tilt_ratio,
)
from reduced_dynamics.activations import Activation
from reduced_dynamics.dynamics.loss import approx_loss, approx_loss_grad
from reduced_dynamics.models.activation import ActivationModel
from reduced_dynamics.setting import Setting, as_setting

from .result import CheckResult, reports_errors

__all__ = ["check_activations", "CHECK_ACTIVATIONS"]

#: The activations of the check with their constants.
CHECK_ACTIVATIONS = (("exp", 1.0), ("affine", 0.3), ("square", 1.0), ("tanh", 1.0))
RED_RTOL, MOM_RTOL, FD_RTOL = 1e-10, 1e-9, 1e-6
ETA_ATOL, DRIFT_RTOL, CLAIM_RTOL = 2e-3, 0.03, 0.10
T_END = 1e5


def _reduction(s: Setting, rng) -> float:
    worst = 0.0
    for H in (1, 2, 3, 4):
        om, mu = rng.uniform(-0.5, 0.5, H), rng.uniform(-3, 3, H)
        a, b = act_loss(om, mu, s), approx_loss(om, mu, s)
        g, g0 = act_loss_grad(om, mu, s), approx_loss_grad(om, mu, s)
        ref = max(abs(b), np.abs(g0.theta).max())
        worst = max(worst, abs(a - b) / ref, float(np.abs(g.theta - g0.theta).max()) / ref)
    return worst


def _moments() -> float:
    worst = 0.0
    t = np.linspace(-2.5, 2.5, 11)
    for name, c in CHECK_ACTIVATIONS[:3]:
        act = Activation(name, c)
        for k in ("value", "slope"):
            a, b = getattr(tilt_ratio(t, act, method="closed"), k), getattr(tilt_ratio(t, act, method="quadrature"), k)
            worst = max(worst, float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1.0))))
            a = getattr(fluctuation_kernel(t, 0.6 * t[::-1], act, method="closed"), k)
            b = getattr(fluctuation_kernel(t, 0.6 * t[::-1], act, method="quadrature"), k)
            worst = max(worst, float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1.0))))

    def phi(a):
        return math.exp(-a * a / 2) / math.sqrt(2 * math.pi)

    for tt in (0.3, 2.0, 8.0):
        num = quad(
            lambda a, tt=tt: a * (1 + math.tanh(tt * a)) * phi(a), -12, 12, points=[0.0], limit=400, epsabs=1e-14
        )[0]
        m = float(tilt_ratio(tt, Activation("tanh")).value)
        worst = max(worst, abs(m - num) / abs(num))
    return worst


def _fd(s: Setting) -> float:
    om, mu = np.array([0.35, -0.2, 0.1]), np.array([1.3, -1.1, 0.4])
    g = act_loss_grad(om, mu, s).theta
    h = 1e-6
    fd = []
    for which in (0, 1):
        for k in range(3):
            e = np.zeros(3)
            e[k] = h
            if which == 0:
                fd.append((act_loss(om + e, mu, s) - act_loss(om - e, mu, s)) / (2 * h))
            else:
                fd.append((act_loss(om, mu + e, s) - act_loss(om, mu - e, s)) / (2 * h))
    fd = np.array(fd)
    return float(np.max(np.abs(g - fd) / (np.abs(fd) + 1e-7)))


def _mc(s: Setting, n: int, seed: int) -> dict:
    om = np.array([0.25, -0.25])
    mu = np.array([1.7, -1.7]) / s.activation_fn.c_f
    out = {}
    for L in (s.L, 16 * s.L):
        sl = s.replace(L=L)
        r = act_mc_risk(om, mu, sl, n_prompts=n, seed=seed + L)
        out[L] = (act_loss(om, mu, sl) - r.risk, r.stderr)
    (e1, se1), (e2, se2) = out[s.L], out[16 * s.L]
    A = 2.0 * s.L * (abs(e1) + 3 * se1)
    ok = abs(e2) <= 3 * se2 + A / (16 * s.L) and abs(e2) < abs(e1) / 3 + 3 * se2
    return {"err_L": e1, "se_L": se1, "err_16L": e2, "se_16L": se2, "allowance_16L": A / (16 * s.L), "ok": bool(ok)}


def _end_state(s: Setting):
    """The two-head flow of L̃_f from the small random start of seed 0 to ``T_END``, and its end-state summary.

    The tolerances, output times and the absence of a stationarity stop are those of the former
    activation flow driver (``rtol=1e-9, atol=1e-12``, 60 times from ``1e-3·t_end``). For ``exp`` the
    selector picks the isotropic model (L̃_exp = L̃), whose summary has no activation keys: the summary
    is the activation model's, evaluated at the end state (the same formulas for every f).
    """
    model = reduced_model(s, n_heads=2)
    flow = integrate(
        model,
        model.initial_state(seed=0, scale=0.01),
        t_end=T_END,
        rtol=1e-9,
        atol=1e-12,
        n_times=60,
        t_first=1e-3 * T_END,
        stationarity_tol=0,
    )
    summary = ActivationModel(s, n_heads=2).summarize(flow.states[-1])
    return flow, Final(t=float(flow.t[-1]), values=summary)


def _flow(s: Setting) -> dict:
    flow, r = _end_state(s)
    lim = act_limit(s)
    pred = drift_gamma(T_END, s)
    claim_excess = r.eta_claim / r.eta_tilt - 1.0
    claim_pred = -lim.m3 * (s.d + 2) * r.gamma**2 / lim.c_f
    affine = s.activation == "affine"
    ok = bool(
        flow.success
        and r.sign_matched
        and r.zero_sum
        and (r.homogeneous or affine)
        and abs(r.eta_tilt - lim.eta_star) < ETA_ATOL
        and (affine or abs(r.gamma / pred - 1) < DRIFT_RTOL)
        and (affine or lim.m3 == 0 or abs(claim_excess / claim_pred - 1) < CLAIM_RTOL)
        and (not affine or abs(r.excess) < 1e-9)
    )
    return {
        "ok": ok,
        "gamma": r.gamma,
        "gamma_drift_law": None if affine else pred,
        "eta_claim": r.eta_claim,
        "eta_tilt": r.eta_tilt,
        "eta_star": lim.eta_star,
        "claim_excess": claim_excess,
        "claim_excess_predicted": claim_pred,
        "excess": r.excess,
        "B": lim.B,
        "sign_matched": r.sign_matched,
        "zero_sum": r.zero_sum,
        "homogeneous": r.homogeneous,
        "omega": r.omega.tolist(),
        "mu": r.mu.tolist(),
    }


@reports_errors("activations")
def check_activations(setting: Setting, *, quick: bool = False) -> CheckResult:
    """Run the ``activations`` check (module docstring). ``quick``: 4000 Monte Carlo prompts (full: 40000).

    Parameters
    ----------
    setting : Setting
        Isotropic; its ``d``, ``L``, ``σ²`` are used with each activation of :data:`CHECK_ACTIVATIONS`.
    quick : bool

    Returns
    -------
    CheckResult
    """
    base = as_setting(setting, "check_activations").require_isotropic("check_activations")
    base = base.replace(activation="exp", activation_c=1.0)
    rng = np.random.default_rng(0)
    red = _reduction(base, rng)
    mom = _moments()
    n_mc = 4000 if quick else 40_000
    per = {}
    for name, c in CHECK_ACTIVATIONS:
        s = base.replace(activation=name, activation_c=c)
        per[name] = {"fd_rel_err": _fd(s), "mc": _mc(s, n_mc, seed=11), "flow": _flow(s)}
    passed = bool(
        red < RED_RTOL
        and mom < MOM_RTOL
        and all(r["fd_rel_err"] < FD_RTOL and r["mc"]["ok"] and r["flow"]["ok"] for r in per.values())
    )
    flows = {k: v["flow"] for k, v in per.items()}
    measured = (
        f"reduction rel err {red:.1e}; moments rel err {mom:.1e}; FD rel err max "
        f"{max(r['fd_rel_err'] for r in per.values()):.1e}; MC err at L / 16L: "
        + ", ".join(
            f"{k} {r['mc']['err_L']:+.4f}±{r['mc']['se_L']:.4f} / {r['mc']['err_16L']:+.5f}±{r['mc']['se_16L']:.5f}"
            for k, r in per.items()
        )
        + "; flow γ vs drift law, η slope, claim: "
        + ", ".join(
            f"{k} γ={f['gamma']:.4f} ({'—' if f['gamma_drift_law'] is None else format(f['gamma_drift_law'], '.4f')}) "
            f"μᵀT₁={f['eta_tilt']:.5f} 2C_fγμ₊={f['eta_claim']:.5f}"
            for k, f in flows.items()
        )
    )
    return CheckResult(
        name="activations",
        passed=passed,
        predicted=(
            f"L̃_exp = L̃; closed forms = quadrature; FD = gradient; MC error O(1/L); flows sign-matched, zero-sum, "
            f"μᵀT₁ → η* = {float(base.eta_star):.5f}, γ on the drift law, claim/slope − 1 = −m₃(d+2)γ²/C_f"
        ),
        measured=measured,
        tolerance=(
            f"reduction {RED_RTOL:g}, moments {MOM_RTOL:g}, FD {FD_RTOL:g} (relative); MC 3 SE + O(1/L) allowance; "
            f"|μᵀT₁ − η*| < {ETA_ATOL:g}, γ {DRIFT_RTOL:.0%}, claim excess {CLAIM_RTOL:.0%}"
        ),
        explanation=(
            f"Approximate loss with activation f (tilt averaged over the query norm, fluctuation kernel) at {base!r} "
            f"for {', '.join(f'{n} (C={c:g})' for n, c in CHECK_ACTIVATIONS)}: reduction, moments, gradient, "
            f"Monte Carlo ({n_mc} prompts per L) and flow end states (t = {T_END:g})."
        ),
        data={"setting": base.to_dict(), "reduction_rel_err": red, "moments_rel_err": mom, "per_activation": per},
    )
