r"""The isotropic model with another attention activation f (affine, square, tanh): :math:`\tilde L_f`.

.. math:: \tilde L_f = 1 + \sigma^2 - 2\mu^\top T_1 + \mu^\top(T_2 + cK)\mu

(formulas and quadratures in :mod:`reduced_dynamics.activation_dynamics.loss`; ``f = exp`` is the
isotropic model). The domain is where the quadratures and float64 hold; a state outside it is
reported by the formulas, and the flow stops there (status 2). No closed-form Hessian.

References
----------
docs/theory.md#other-activations
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from reduced_dynamics.activation_dynamics.loss import act_loss, act_loss_grad
from reduced_dynamics.models._heads import ScalarHeadsModel

__all__ = ["ActivationModel", "ActivationHeads"]


class ActivationModel(ScalarHeadsModel):
    """L̃_f of the isotropic model with the activation of ``setting``, ``y = (ω, μ)``.

    Parameters
    ----------
    setting : Setting
        Scalar, isotropic, single task, ``activation`` other than ``"exp"``.
    n_heads : int, in [1, 64]
    """

    name = "activation"
    domain_text = "the loss left the float64 range or the range of its quadrature."

    def __init__(self, setting, *, n_heads):
        super().__init__(setting, n_heads=n_heads, heads_max=64)

    def loss(self, y):
        return act_loss(*self.split(y), self.setting)

    def grad(self, y):
        g = act_loss_grad(*self.split(y), self.setting)
        return np.concatenate([g.omega, g.mu], axis=-1)

    def margin(self, y):
        # no edge to approach smoothly: the formulas themselves report a state they cannot evaluate
        return self._margin_of(y, lambda y: np.ones(y.shape[:-1]))

    # the integrator's hooks (ReducedModel._grad_finite): the same numbers on views of a finite state
    def _margin_finite(self, y) -> float:
        return 1.0

    def _grad_finite(self, y):
        from reduced_dynamics.activation_dynamics.loss import QUERY_NODES, _check_method, _grad_of_terms, _terms

        H, s = self.n_heads, self.setting
        act = s.activation_fn
        gom, gmu = _grad_of_terms(_terms(y[:H], act, _check_method("auto", act), s.d, QUERY_NODES), y[H:], s.c)
        return np.concatenate([gom, gmu])

    def predictor(self, y):
        """The H-head model with this activation at state ``y`` (:class:`ActivationHeads`), not the softmax's."""
        w, m = self.split(y)
        return ActivationHeads(w, m, activation=self.setting.activation, activation_c=self.setting.activation_c)

    # ------------------------------------------------------------------ risk
    state_predictor_name = "reduced_f"

    def manifold_point(self, gamma: float) -> np.ndarray:
        """``ω = (γ, −γ)`` with the μ = (M, −M) that minimises L̃_f along the two-head manifold (H = 2).

        Raises
        ------
        ValueError
            A tiny C (≲ 1e-8) for which the manifold's quadratic in M cancels, leaving no finite μ.
        """
        from reduced_dynamics.activation_dynamics.flow import manifold_profile

        g = self._check_manifold_gamma(gamma)
        try:
            M = float(manifold_profile(g, self.setting).M[0])
        except ValueError as exc:  # manifold_profile refuses a quadratic in M without a finite minimiser
            if "quadratic in M" not in str(exc):
                raise
            M = math.nan
        if not np.isfinite(M):
            raise ValueError(
                f"`setting.activation_c` {self.setting.activation_c:g} leaves the two-head point of the solution "
                f"manifold at γ = {g:g} without a finite μ (its quadratic in M cancels): give the state "
                "(`omega` and `mu`)"
            )
        return self.state([g, -g], [M, -M])

    def reference_predictors(self, y=None) -> dict:
        """Debiased GD at η* and, with a state, at the step ``C_f μᵀω`` the paper claims for f."""
        from reduced_dynamics.estimation.predictors import DebiasedGD

        out = {"debiased_gd_star": DebiasedGD(float(self.setting.eta_star))}
        if y is not None:
            w, m = self.split(y)
            out["debiased_gd_claim"] = DebiasedGD(self.setting.activation_fn.c_f * float(m @ w))
        return out

    def reference_risks(self, y=None) -> dict:
        return {}

    def risk_plan(self, y=None):
        """The reduced model with f at ``y`` against debiased GD at η* and at the claimed step, paired;
        always Rao–Blackwellised; landmarks: L̃_f, the claimed step 2C_fγμ₊, the slope μᵀT₁ and η*."""
        from reduced_dynamics.activation_dynamics.flow import eta_claim, eta_tilt

        plan = super().risk_plan(y)
        landmarks = {
            "activation": self.setting.activation,
            "activation_c": self.setting.activation_c,
            "c_f": self.setting.activation_fn.c_f,
            "eta_star": float(self.setting.eta_star),
        }
        if y is not None:
            w, m = self.split(y)
            landmarks.update(
                omega=w.tolist(),
                mu=m.tolist(),
                approx_loss=float(self.loss(y)),
                eta_claim=eta_claim(w, m, self.setting),
                eta_tilt=eta_tilt(w, m, self.setting),
            )
        name = self.state_predictor_name
        return plan.replace(
            pairs=tuple((name, ref) for ref in plan.predictors if ref != name) if y is not None else (),
            landmarks=landmarks,
            config={},
            conditional=True,
            name_prefix="risk_act",
            name_keys={"f": self.setting.activation, "C": float(self.setting.activation_c)},
        )

    def estimate_risks(self, plan, *, n_prompts, seed, conditional=True, stage=None):
        """Rao–Blackwellised risks on one stream of statistics (that of
        :func:`~reduced_dynamics.activation_dynamics.loss.act_mc_risk` for the same seed), paired."""
        from reduced_dynamics.estimation.predictors import conditional_loss
        from reduced_dynamics.estimation.prompts import as_generator, check_n_prompts, iter_prompts
        from reduced_dynamics.estimation.risk import _Moments
        from reduced_dynamics.models._risk import moments_risks

        self._check_plan(plan)
        n = check_n_prompts(n_prompts)
        names = list(plan.predictors)
        preds = [plan.predictors[k] for k in names]
        if stage is not None:
            stage(f"{', '.join(names)} on {n} prompts (f = {self.setting.activation})")
        mom = _Moments(len(names))
        # the working set per prompt of three predictors (it sets the chunks, and so the stream)
        per = 8 * self.setting.L * (6 * self.n_heads + 12) + 64
        for pr in iter_prompts(
            n, self.setting, seed=as_generator(seed), per_prompt_bytes=per, stats_only=True, covariates_only=True
        ):
            mom.add(np.stack([conditional_loss(pr, p.weights(pr), setting=self.setting) for p in preds], axis=1))
        return moments_risks(names, plan.pairs, mom, n)

    def limit(self) -> dict:
        """``act_limit``: C_f, η*, inf L̃_f, the cubic tilt m₃, the manifold-excess coefficient B, the drift kind."""
        from reduced_dynamics.activation_dynamics.flow import act_limit

        return act_limit(self.setting).to_dict()

    def summarize(self, y, *, t=None, tolerances=None) -> dict:
        """The scalar-heads summary plus ``mu_plus, eta_claim, eta_tilt, excess`` and the end-state patterns."""
        from reduced_dynamics.activation_dynamics.flow import drift_gamma, eta_claim, eta_tilt
        from reduced_dynamics.dynamics.diagnostics import trajectory_diagnostics

        t = self._check_time(t)
        out = super().summarize(y, t=t, tolerances=tolerances)
        w, m = self.split(y)
        diag = trajectory_diagnostics(w, m, tolerances=tolerances)
        out.update(
            {
                "mu_plus": float(np.sum(np.where(m > 0, m, 0.0))),
                "eta_claim": eta_claim(w, m, self.setting),
                "eta_tilt": eta_tilt(w, m, self.setting),
                "excess": float(out["loss"] - self.setting.inf_loss),
                "sign_matched": bool(diag.sign_matched),
                "zero_sum": bool(diag.zero_sum),
                "homogeneous": bool(diag.homogeneous),
                "homogeneity": float(diag.homogeneity),
                "activation": self.setting.activation,
                "activation_c": self.setting.activation_c,
                "c_f": self.setting.activation_fn.c_f,
                "limit": self.limit(),
            }
        )
        if t is not None and t > 0:
            pred = float(drift_gamma(t, self.setting))
            out["gamma_drift_law"] = None if np.isnan(pred) else pred
        return out


def _activation_heads_base():
    from reduced_dynamics.estimation.predictors import _HeadsPredictor

    return _HeadsPredictor


@dataclass(frozen=True, eq=False)
class ActivationHeads(_activation_heads_base()):
    r"""The reduced H-head model with activation f at ``(omega, mu)``.

    .. math:: \hat y = \sum_h \mu_h \sum_l y_l\, \frac{f(\omega_h s_l)}{\sum_k f(\omega_h s_k)},
              \quad s_l = x_l^\top x_q

    (``f = exp`` is :class:`~reduced_dynamics.MultiHead`). The weights are those of
    :func:`~reduced_dynamics.activation_dynamics.loss.act_mc_risk`.

    Parameters
    ----------
    omega, mu : array_like, shape (H,)
    activation : str
        A name of :mod:`reduced_dynamics.activations`.
    activation_c : float
        Its constant ``C``.
    """

    activation: Any = "exp"
    activation_c: Any = 1.0
    name: ClassVar[str] = "activation_heads"

    def weights(self, prompts):
        from reduced_dynamics.activations import Activation
        from reduced_dynamics.estimation.predictors import _check_prompts
        from reduced_dynamics.model.attention import _weights

        if self.omega.ndim != 1:
            raise ValueError(f"`omega` and `mu` must be one state of shape (H,), got {self.omega.shape}")
        act = Activation(self.activation, self.activation_c)
        S = _check_prompts(prompts).scores[:, None, :] * self.omega[None, :, None]  # (n, H, L)
        if act.name == "exp":  # stable softmax
            S = S - S.max(axis=-1, keepdims=True)
            F = np.exp(S)
            norm = F.sum(axis=-1)
        else:
            F, _, norm = _weights(S, act, "ActivationHeads")
        return np.einsum("nhl,h->nl", F / norm[..., None], self.mu)
