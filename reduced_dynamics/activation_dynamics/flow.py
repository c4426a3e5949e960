r"""Gradient flow of :math:`\tilde L_f`, its end-state patterns, the limit predictor and the effective step.

The flow ``θ̇ = −∇L̃_f(θ)`` (docs/theory.md#gradient-flow time convention) of the approximate loss
with an attention activation ``f`` (:mod:`reduced_dynamics.activation_dynamics.loss`).

**Limit predictor.** To leading order in ω, :math:`\tilde L_f` is the softmax's loss with
``ω → C_f ω`` (``C_f = f'(0)/f(0)``), so on the solution manifold (``Σμ = 0``, sign matching,
``|ω_h| = γ``) the model tends to debiased GD with the effective step

.. math:: \eta_{\rm eff} = C_f\,\mu^\top\omega = 2 C_f \gamma \mu_+ \to \eta^* = \frac{1}{1 + cd}

(the paper's claim; ``μ₊`` the positive OV mass). What sets the drift of γ is the next order. With
``f(x)/f(0) = 1 + f_1 x + f_2 x² + f_3 x³ + …`` (``f_1 = C_f``) the tilt is
``m_f(t) = C_f t + m_3 t³ + …`` with ``m_3 = 3 f_3 − f_1 f_2``, the kernel's ``t_1³ t_2``
coefficient is ``C_f m_3``, and minimising over μ on the two-head manifold ``ω = (γ, −γ)`` gives

.. math:: \min_\mu \tilde L_f = 1 + \sigma^2 - \eta^* + B\gamma^2 + O(\gamma^4), \qquad
          B = 4\,c\,d\,\eta^{*2}\,(-m_3/C_f).

``exp`` (``m_3 = 0``) and ``affine`` (``f_2 = f_3 = 0``) have ``B = 0``: for exp the excess is
``O(γ⁴)`` (the drift law ``γ ∝ t^{-1/6}``), for affine :math:`\tilde L_f` depends on the state only
through ``C μᵀω`` and ``Σμ`` (flat along the manifold: no drift at all). ``square``
(``m_3 = −2C³``, ``B = 8 c d η*² C²``) and ``tanh`` (``m_3 = −1``, ``B = 4 c d η*²``) have
``B > 0``: γ → 0 faster. The slow motion along the manifold (metric ``|dθ/dγ|² ≈ 2M²/γ²``,
``M = η/(2C_fγ)``) gives ``γ̇ = −2C_f²γ⁴/η² · dL/dγ``, hence for ``B > 0``

.. math:: \gamma(t) \approx \big(64\,c\,d\,C_f(-m_3)\,t\big)^{-1/4} \qquad (H = 2).

**Effective step, measured.** :func:`eta_tilt` is the state's exact large-L slope ``μᵀT_1``
(``T_1 = E_ρ[ρτ]``); :func:`eta_eff_regression` regresses a model's predictions on the debiased-GD
direction ``(1/L) Σ_l y_l (x_l − x̄)ᵀx_q`` over fresh prompts (an independent, model-agnostic
measurement with a sandwich standard error).

References
----------
docs/theory.md#other-activations, docs/theory.md#solution-manifold, docs/theory.md#drift-law
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from reduced_dynamics._results import FrozenResult
from reduced_dynamics._validation import check_finite_array
from reduced_dynamics.activation_dynamics.loss import act_terms
from reduced_dynamics.activations import Activation, as_activation
from reduced_dynamics.dynamics.diagnostics import trajectory_diagnostics
from reduced_dynamics.dynamics.loss import LossOverflowError
from reduced_dynamics.setting import Setting, as_setting

__all__ = [
    "ActLimit",
    "EtaRegression",
    "eta_claim",
    "eta_tilt",
    "tilt_cubic",
    "act_limit",
    "manifold_profile",
    "drift_gamma",
    "eta_eff_regression",
    "trained_activation_report",
    "TrainedActivationReport",
    "ManifoldRiskScan",
    "manifold_risk_scan",
]


def tilt_cubic(activation: Activation | str) -> float:
    """``m_3 = 3 f_3 − f_1 f_2``: the cubic coefficient of the tilt ``m_f(t) = C_f t + m_3 t³ + …`` (``f(0) = 1``).

    ``activation`` is an :class:`~reduced_dynamics.activations.Activation` or the name of one (``"exp"``,
    ``"affine"``, ``"square"``, ``"tanh"``; constant C = 1).
    """
    a = as_activation(activation).taylor(3)
    return 3.0 * a[3] - a[1] * a[2]


@dataclasses.dataclass(frozen=True)
class ActLimit(FrozenResult):
    """The limit predictor of the flow of :math:`\\tilde L_f` (:func:`act_limit`).

    Attributes
    ----------
    c_f : float
        ``f'(0)/f(0)``.
    eta_star : float
        Optimal effective step ``1/(1 + cd)`` (the same for every f).
    inf_loss : float
        ``1 + σ² − η*``, the loss of the limit (debiased GD at η*, to leading order).
    m3 : float
        Cubic tilt coefficient (:func:`tilt_cubic`).
    B : float
        Coefficient of the manifold excess ``Bγ² + O(γ⁴)`` (two heads).
    drift : str
        ``"gamma^-1/4"`` (``B > 0``), ``"gamma^-1/6"`` (exp: ``B = 0``, ``O(γ⁴)`` excess), ``"none"`` (affine:
        flat) or ``"finite-gamma"`` (``B < 0``: the loss falls below the limit at finite γ).
    """

    c_f: float
    eta_star: float
    inf_loss: float
    m3: float
    B: float
    drift: str


def _scalar_setting(setting, where) -> Setting:
    return as_setting(setting, where).require_isotropic(where)


def act_limit(setting: Setting) -> ActLimit:
    """The limit predictor and the manifold excess coefficient for the activation of ``setting``."""
    s = _scalar_setting(setting, "act_limit")
    act = s.activation_fn
    m3 = tilt_cubic(act)
    eta = float(s.eta_star)
    B = 4.0 * s.c * s.d * eta * eta * (-m3 / act.c_f)
    if act.name == "affine":
        drift = "none"
    elif B > 0:
        drift = "gamma^-1/4"
    elif B == 0:
        drift = "gamma^-1/6"
    else:
        drift = "finite-gamma"
    return ActLimit(c_f=act.c_f, eta_star=eta, inf_loss=float(s.inf_loss), m3=m3, B=float(B), drift=drift)


def drift_gamma(t, setting: Setting):
    """Predicted two-head γ(t) on the manifold: ``(64 c d C_f (−m_3) t)^{-1/4}`` (B > 0), ``(8 c d³ t)^{-1/6}`` (exp).

    Returns NaN for ``affine`` (no drift). ``t`` array_like, finite and > 0.
    """
    s = _scalar_setting(setting, "drift_gamma")
    t = check_finite_array("t", t, min_ndim=0)
    if np.any(t <= 0):
        raise ValueError(f"`t` must be > 0 (the law holds at late times), got {t!r}")
    lim = act_limit(s)
    if lim.drift == "gamma^-1/4":
        out = (64.0 * s.c * s.d * lim.c_f * (-lim.m3) * t) ** -0.25
    elif s.activation == "exp":
        out = (8.0 * s.c * s.d**3 * t) ** (-1.0 / 6.0)
    else:
        out = np.full_like(t, np.nan)
    return float(out) if out.ndim == 0 else out


@dataclasses.dataclass(frozen=True)
class ManifoldProfile(FrozenResult):
    """``min_μ L̃_f`` on the two-head manifold ``ω = (γ, −γ)``, ``μ = (M, −M)`` (:func:`manifold_profile`).

    Attributes
    ----------
    gamma, M, loss, excess, eta_tilt, eta_claim : ndarray, shape (G,)
        γ, the optimal M, the loss, ``loss − (1 + σ² − η*)``, ``μᵀT_1`` and ``2 C_f γ M``.
    """

    gamma: np.ndarray
    M: np.ndarray
    loss: np.ndarray
    excess: np.ndarray
    eta_tilt: np.ndarray
    eta_claim: np.ndarray


#: Smallest γ of the manifold scans: the quadratic in M has curvature O(γ²) and cancels in float64 below it
#: (relative error about 1e-16/γ²; at γ = 1e-6 the excess is already wrong in its first digit, at 1e-10 0/0).
GAMMA_MIN = 1e-3


def _check_gamma(gamma) -> np.ndarray:
    g = check_finite_array("gamma", gamma, min_ndim=0).reshape(-1)
    if np.any(g < GAMMA_MIN):
        raise ValueError(
            f"`gamma` must be >= {GAMMA_MIN:g} (below it the quadratic in M cancels in float64), got min {g.min():g}"
        )
    return g


def manifold_profile(gamma, setting: Setting) -> ManifoldProfile:
    """Minimise :math:`\\tilde L_f` over ``M`` at each ``γ`` on the two-head manifold (closed form: a quadratic in M).

    ``gamma`` is array_like with entries >= ``GAMMA_MIN`` (1e-3); a ``γ`` too large for float64 raises
    ``LossOverflowError`` naming ``omega`` (the state ``ω = (γ, −γ)``).
    """
    s = _scalar_setting(setting, "manifold_profile")
    g = _check_gamma(gamma)
    om = np.stack([g, -g], axis=-1)
    try:
        T = act_terms(om, s)
    except LossOverflowError as exc:
        raise LossOverflowError(f"`gamma` up to {g.max():g} is too large for `setting` ({exc})") from None
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        A = T.T2 + s.c * T.K
        b = T.T1[:, 0] - T.T1[:, 1]
        q = A[:, 0, 0] - 2 * A[:, 0, 1] + A[:, 1, 1]
        M = b / q
        loss = 1.0 + s.sigma2 - b * b / q
        eta_claim = 2.0 * s.activation_fn.c_f * g * M
    if not (np.all(q > 0) and np.all(np.isfinite(M)) and np.all(np.isfinite(eta_claim))):
        raise ValueError(
            f"`gamma` up to {g.max():g}: the quadratic in M of `setting` ({s.activation!r}, C = {s.activation_c:g}) "
            "has no finite minimiser there in float64; use a smaller `gamma`"
        )
    return ManifoldProfile(
        gamma=g,
        M=M,
        loss=loss,
        excess=loss - float(s.inf_loss),
        eta_tilt=M * b,
        eta_claim=eta_claim,
    )


def eta_claim(omega, mu, setting: Setting) -> float:
    """The paper's effective step ``2 C_f γ μ₊``: γ = mean ``|ω_h|`` over non-dummy heads, μ₊ = Σ of the positive μ_h."""
    s = as_setting(setting, "eta_claim")
    omega = check_finite_array("omega", omega, ndim=1)
    mu = check_finite_array("mu", mu, ndim=1)
    if mu.shape != omega.shape:
        raise ValueError(f"`mu` must have the shape of `omega` {omega.shape}, got {mu.shape}")
    diag = trajectory_diagnostics(omega, mu)
    mu_plus = float(np.sum(np.where(mu > 0, mu, 0.0)))
    return 2.0 * s.activation_fn.c_f * float(diag.gamma) * mu_plus


def eta_tilt(omega, mu, setting: Setting) -> float:
    """The state's exact large-L slope ``μᵀT_1`` (``T_1 = E_ρ[ρ τ(ρ)]``; ``μᵀω`` for exp)."""
    s = _scalar_setting(setting, "eta_tilt")
    omega = check_finite_array("omega", omega, min_ndim=1)
    mu = check_finite_array("mu", mu, min_ndim=1)
    if mu.shape != omega.shape:
        raise ValueError(f"`mu` must have the shape of `omega` {omega.shape}, got {mu.shape}")
    T = act_terms(omega, s)
    return float(np.sum(mu * T.T1))


@dataclasses.dataclass(frozen=True)
class EtaRegression(FrozenResult):
    """Effective step of a predictor measured on fresh prompts (:func:`eta_eff_regression`).

    Attributes
    ----------
    eta : float
        ``Σ ŷ g / Σ g²`` with ``g`` the debiased-GD prediction at step 1.
    stderr : float
        Sandwich standard error ``sqrt(Σ g² e²)/Σ g²`` (``e = ŷ − η g``).
    r2 : float
        Fraction of ``Σ ŷ²`` explained by ``η g``.
    n : int
        Prompts.
    """

    eta: float
    stderr: float
    r2: float
    n: int


def eta_eff_regression(model, params, setting: Setting, *, n_prompts: int = 50_000, seed) -> EtaRegression:
    """Measure a model's effective step by regressing its predictions on debiased GD's direction.

    Parameters
    ----------
    model, params : a model of :mod:`reduced_dynamics.model.attention` and its parameters
    setting : Setting
        Scalar, isotropic; its activation must be the model's.
    n_prompts : int, in [2, 1e7]
    seed : int or Generator
        Required.

    Returns
    -------
    EtaRegression
    """
    from reduced_dynamics.estimation.predictors import debiased_gd
    from reduced_dynamics.estimation.prompts import as_generator, check_n_prompts
    from reduced_dynamics.model.training import _check_eval, _eval_chunks, _sample

    s, n_prompts, _ = _check_eval(model, params, setting, n_prompts, 8192, "eta_eff_regression")
    rng = as_generator(seed)
    n_prompts = check_n_prompts(n_prompts)
    ys, gs = [], []
    for k in _eval_chunks(model, s, n_prompts, 8192):
        tok = _sample(k, s, rng)
        ys.append(model.predict(params, tok))
        gs.append(debiased_gd(tok, 1.0))
    y, g = np.concatenate(ys), np.concatenate(gs)
    gg = float(g @ g)
    eta = float(y @ g) / gg
    e = y - eta * g
    se = math.sqrt(float((g * g) @ (e * e))) / gg
    r2 = 1.0 - float(e @ e) / float(y @ y) if float(y @ y) > 0 else 0.0
    return EtaRegression(eta=eta, stderr=se, r2=r2, n=n_prompts)


@dataclasses.dataclass(frozen=True)
class TrainedActivationReport(FrozenResult):
    """Evaluation of a trained checkpoint with an activation (:func:`trained_activation_report`).

    Attributes
    ----------
    activation : str
    activation_c, c_f : float
    step, steps : int
        Steps done and configured.
    train_loss_last1000 : float
    omega, mu : ndarray, shape (H,)
        Extracted (ω, μ).
    dummy : ndarray of bool, shape (H,)
    kq_offdiag_fraction, ov_offresponse_fraction : ndarray, shape (H,)
    omega_cv, zero_sum_ratio, sign_match_fraction : float
        Pattern metrics (``reduced_dynamics.model.circuits.pattern_metrics``).
    eta_claim : float
        ``2 C_f γ μ₊``.
    eta_c_f_mu_omega : float
        ``C_f μᵀω`` (the step of the debiased-GD comparison).
    eta_tilt : float
        The extracted state's large-L slope ``μᵀT₁`` (:func:`eta_tilt`).
    eta_measured, eta_measured_stderr, eta_measured_r2 : float
        :func:`eta_eff_regression`.
    eta_star : float
    risks : dict
        ``name -> [risk, SE]`` for ``model``, ``reduced`` (with f at (ω, μ)), ``debiased_gd_claim``
        (at ``C_f μᵀω``), ``debiased_gd_star`` and the paired differences ``model-reduced``,
        ``model-dgd_claim``, ``model-dgd_star`` (common prompts).
    claim_history : list
        ``[step, ω, μ, claim]`` from the checkpoint's circuit snapshots at steps ≥ 10⁴.
    n_prompts : int
    """

    activation: str
    activation_c: float
    c_f: float
    step: int
    steps: int
    train_loss_last1000: float
    omega: np.ndarray
    mu: np.ndarray
    dummy: np.ndarray
    kq_offdiag_fraction: np.ndarray
    ov_offresponse_fraction: np.ndarray
    omega_cv: float
    zero_sum_ratio: float
    sign_match_fraction: float
    eta_claim: float
    eta_c_f_mu_omega: float
    eta_tilt: float
    eta_measured: float
    eta_measured_stderr: float
    eta_measured_r2: float
    eta_star: float
    risks: dict
    claim_history: list
    n_prompts: int


def trained_activation_report(checkpoint, *, n_prompts: int = 100_000, seed) -> TrainedActivationReport:
    """Evaluate a trained checkpoint of an activation run (``scripts/activation_experiment.py``).

    Parameters
    ----------
    checkpoint : path-like
        A ``checkpoint.npz`` of :func:`reduced_dynamics.model.training.train`.
    n_prompts : int, in [2, 1e7]
        Evaluation prompts (the η regression and the paired risks).
    seed : int
        Required; the regression uses ``seed``, the risks ``seed + 1``.

    Returns
    -------
    TrainedActivationReport
    """
    import os

    from reduced_dynamics._validation import check_nonnegative_int
    from reduced_dynamics.estimation.predictors import debiased_gd
    from reduced_dynamics.estimation.risk import _Moments
    from reduced_dynamics.model.attention import ReducedModel, unflatten_params
    from reduced_dynamics.model.circuits import extract_circuits, pattern_metrics
    from reduced_dynamics.model.training import _eval_chunks, _sample, load_checkpoint

    if isinstance(checkpoint, np.ndarray) or not isinstance(checkpoint, (str, os.PathLike)):
        raise ValueError(f"`checkpoint` must be a path (str or os.PathLike), got {type(checkpoint).__name__}")
    seed = check_nonnegative_int("seed", seed)
    ck = load_checkpoint(checkpoint, name="checkpoint")
    cfg = ck.config
    s = cfg.setting
    model = cfg.model()
    params = {k: np.array(v) for k, v in unflatten_params(ck.theta, model.param_shapes()).items()}
    c = extract_circuits(model, params)
    pm = pattern_metrics(c)
    claim = eta_claim(c.omega, c.mu, s)
    reg = eta_eff_regression(model, params, s, n_prompts=n_prompts, seed=seed)
    red = ReducedModel(c.n_heads, c.d, activation=s.activation_fn)
    rp = {"omega": c.omega, "mu": c.mu}
    eta_c = s.activation_fn.c_f * float(c.mu @ c.omega)
    rng = np.random.default_rng(seed + 1)
    mom = _Moments(7)
    for k in _eval_chunks(model, s, n_prompts, 8192):
        tok = _sample(k, s, rng)
        a = (model.predict(params, tok) - tok.y_q) ** 2
        b = (red.predict(rp, tok) - tok.y_q) ** 2
        g1 = (debiased_gd(tok, eta_c) - tok.y_q) ** 2
        g2 = (debiased_gd(tok, float(s.eta_star)) - tok.y_q) ** 2
        mom.add(np.stack([a, b, g1, g2, a - b, a - g1, a - g2], axis=1))
    names = ["model", "reduced", "debiased_gd_claim", "debiased_gd_star", "model-reduced", "model-dgd_claim"]
    names.append("model-dgd_star")
    risks = {k: [float(mom.mean[i]), mom.stderr(i)] for i, k in enumerate(names)}
    tail = ck.losses[-min(1000, ck.losses.size) :]
    d = s.d
    history = []  # (step, ω, μ, claim) from the log-spaced circuit snapshots: convergence of the claim
    for k, KQ, ov in zip(ck.snapshot_steps, ck.snapshot_KQ, ck.snapshot_ov):
        if k >= 10_000:
            om = np.trace(KQ[:, :d, :d], axis1=1, axis2=2) / d
            history.append([int(k), om.tolist(), ov[:, d].tolist(), eta_claim(om, ov[:, d], s)])
    return TrainedActivationReport(
        activation=s.activation,
        activation_c=float(s.activation_c),
        c_f=s.activation_fn.c_f,
        step=int(ck.step),
        steps=int(cfg.steps),
        train_loss_last1000=float(np.mean(tail)) if tail.size else float("nan"),
        omega=c.omega,
        mu=c.mu,
        dummy=c.dummy,
        kq_offdiag_fraction=np.asarray(pm.kq_offdiag_fraction),
        ov_offresponse_fraction=np.asarray(pm.ov_offresponse_fraction),
        omega_cv=float(pm.omega_cv),
        zero_sum_ratio=float(pm.zero_sum_ratio),
        sign_match_fraction=float(pm.sign_match_fraction),
        eta_claim=claim,
        eta_c_f_mu_omega=eta_c,
        eta_tilt=eta_tilt(c.omega, c.mu, s),
        eta_measured=reg.eta,
        eta_measured_stderr=reg.stderr,
        eta_measured_r2=reg.r2,
        eta_star=float(s.eta_star),
        risks=risks,
        claim_history=history,
        n_prompts=int(n_prompts),
    )


@dataclasses.dataclass(frozen=True)
class ManifoldRiskScan(FrozenResult):
    """True finite-L risk of the two-head reduced model with f along the manifold (:func:`manifold_risk_scan`).

    Attributes
    ----------
    gamma : ndarray, shape (G,)
    M : ndarray, shape (G,)
        The OV mass minimising the Monte Carlo risk at each γ (exact: the risk is quadratic in M).
    risk, stderr : ndarray, shape (G,)
        Risk of the state ``ω = (γ, −γ)``, ``μ = (M, −M)`` and its standard error.
    diff_dgd, diff_stderr : ndarray, shape (G,)
        Paired ``risk − risk(debiased GD at η*)`` and its standard error.
    risk_dgd : float
        Risk of debiased GD at η* on the same prompts.
    n : int
        Prompts.
    """

    gamma: np.ndarray
    M: np.ndarray
    risk: np.ndarray
    stderr: np.ndarray
    diff_dgd: np.ndarray
    diff_stderr: np.ndarray
    risk_dgd: float
    n: int


def manifold_risk_scan(gamma, setting: Setting, *, n_prompts: int = 100_000, seed) -> ManifoldRiskScan:
    """Monte Carlo risk (Rao–Blackwellised, common prompts) of the two-head model with f on the manifold.

    At each γ the state is ``ω = (γ, −γ)``, ``μ = (M, −M)`` with ``M`` minimising the sample risk
    (a quadratic in ``M``: fitted exactly from ``M = 0, 1, 2``); it is compared, paired, with debiased GD at
    ``η*``. This is the finite-L counterpart of :func:`manifold_profile` (which uses :math:`\\tilde L_f`).

    Parameters
    ----------
    gamma : array_like, shape (G,), entries > 0
    setting : Setting
        Scalar, isotropic; its activation is f.
    n_prompts : int, in [2, 1e7]
    seed : int or Generator
        Required.

    Returns
    -------
    ManifoldRiskScan
    """
    from reduced_dynamics.estimation.predictors import conditional_loss, debiased_gd_weights
    from reduced_dynamics.estimation.prompts import as_generator, check_n_prompts, sample_prompts
    from reduced_dynamics.model.attention import _weights

    s = _scalar_setting(setting, "manifold_risk_scan")
    g = _check_gamma(gamma)
    if s.L < 2:
        raise ValueError(
            f"`setting.L` must be >= 2 for the manifold (with one example both heads weight it 1), got {s.L}"
        )
    n = check_n_prompts(n_prompts)
    if n > 10**7:
        raise ValueError(f"`n_prompts` must be <= 1e7, got {n}")
    act = s.activation_fn
    pr = sample_prompts(n, s, seed=as_generator(seed), stats_only=True, covariates_only=True)
    S = pr.scores
    ld = conditional_loss(pr, debiased_gd_weights(S, float(s.eta_star)), setting=s)
    Ms, risk, se, dd, dse = [], [], [], [], []
    for gam in g:
        P = []
        for om in (gam, -gam):
            X = om * S
            if act.name == "exp":
                X = X - X.max(axis=1, keepdims=True)
                F = np.exp(X)
                P.append(F / F.sum(axis=1, keepdims=True))
            else:
                F, _, norm = _weights(X, act, "manifold_risk_scan")
                P.append(F / norm[:, None])
        W = P[0] - P[1]
        m0, m1, m2 = (float(conditional_loss(pr, M * W, setting=s).mean()) for M in (0.0, 1.0, 2.0))
        a = (m2 - 2 * m1 + m0) / 2
        b = m1 - m0 - a
        if not a > 0:  # the sample risk is flat in M: no minimiser
            raise ValueError(
                f"`gamma` = {gam:g}: the sample risk of `setting` is flat in M there (curvature {a:.3g}); use a "
                "larger `gamma` or `n_prompts`"
            )
        M = -b / (2 * a)
        loss = conditional_loss(pr, M * W, setting=s)
        diff = loss - ld
        Ms.append(M)
        risk.append(float(loss.mean()))
        se.append(float(loss.std(ddof=1) / math.sqrt(n)))
        dd.append(float(diff.mean()))
        dse.append(float(diff.std(ddof=1) / math.sqrt(n)))
    return ManifoldRiskScan(
        gamma=g,
        M=np.array(Ms),
        risk=np.array(risk),
        stderr=np.array(se),
        diff_dgd=np.array(dd),
        diff_stderr=np.array(dse),
        risk_dgd=float(ld.mean()),
        n=n,
    )
