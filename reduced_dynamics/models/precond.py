r"""The preconditioned softmax model under x ~ N(0, Σ): state ``(ω, μ, W)``, loss :math:`\tilde L_\Sigma`.

.. math:: \tilde L_\Sigma = \sigma^2 + \tfrac1d\operatorname{tr}\big[(I-\Sigma\Gamma)\Sigma(I-\Sigma\Gamma)^\top\big]
      + c_\Sigma\,\mu^\top K\mu,\qquad K_{hk} = e^{\omega_h\omega_k\tau_{hk}}

(formulas in :mod:`reduced_dynamics.precond.loss`, limit in :mod:`reduced_dynamics.precond.flow`).
``KQ_h = ω_h W`` with one shared ``d × d`` matrix, or ``ω_h W_h`` with one per head
(``per_head=True``). Domain: every exponent ``ω_hω_kτ_hk`` below ``0.95·MAX_EXPONENT``.
No closed-form Hessian.

References
----------
docs/theory.md#non-isotropic-covariates
"""

from __future__ import annotations

import numpy as np

from reduced_dynamics._validation import check_positive_int
from reduced_dynamics.dynamics.loss import MAX_EXPONENT
from reduced_dynamics.models._base import Part, ReducedModel
from reduced_dynamics.models._each import each_state
from reduced_dynamics.setting import as_setting

__all__ = ["PrecondModel", "D_FLOW_MAX"]

#: Largest dimension of a flow (the state has 2H + d² variables).
D_FLOW_MAX = 40
#: Largest number of heads.
N_HEADS_MAX = 16


class PrecondModel(ReducedModel):
    """L̃_Σ of the preconditioned model, ``y = (ω, μ, vec W)``.

    Parameters
    ----------
    setting : Setting
        Scalar, softmax, single task; ``Sigma`` (None = ``I_d``), ``d <= 40``.
    n_heads : int, in [1, 16]
    per_head : bool, default False
        One KQ matrix per head (``W`` of shape (H, d, d)) instead of a shared one (d, d).
    """

    name = "precond"
    domain_text = (
        "an exponent ω_h ω_k tr(ΣW_hᵀΣW_k) reached 0.95·MAX_EXPONENT (overflow-safe region). "
        "Try a smaller `init_scale` or a smaller start."
    )

    def __init__(self, setting, *, n_heads, per_head=False):
        self.setting = as_setting(setting, "PrecondModel").require_softmax("the preconditioned model")
        if self.setting.d > D_FLOW_MAX:
            raise ValueError(
                f"`setting.d` must be <= {D_FLOW_MAX} for the preconditioned model (2H + d² variables), "
                f"got {self.setting.d}"
            )
        self.n_heads = check_positive_int("n_heads", n_heads, hi=N_HEADS_MAX)
        if not isinstance(per_head, (bool, np.bool_)):
            raise ValueError(f"`per_head` must be True or False, got {per_head!r}")
        self.per_head = bool(per_head)
        d, H = self.setting.d, self.n_heads
        wshape = (H, d, d) if self.per_head else (d, d)
        self.parts = (Part("omega", (H,)), Part("mu", (H,)), Part("W", wshape))

    def _layout_key(self):
        return (("per_head", True),) if self.per_head else ()

    def split(self, y):
        p = self.unpack(y)
        return p["omega"], p["mu"], p["W"]

    def state(self, omega, mu, W):
        return self.pack(omega=omega, mu=mu, W=W)

    def initial_state(self, *, seed, scale=0.01, n=None, kind="symmetric", w_init="random"):
        """A start: ``(ω, μ)`` symmetric ± (default) or random ``N(0, scale²)``, ``W`` random ``N(0, 1/d)`` or ``I_d``.

        The random numbers are drawn as by :func:`reduced_dynamics.precond.flow.precond_initial_state`.
        """
        from reduced_dynamics.precond.flow import precond_initial_state

        if n is not None:
            from reduced_dynamics.flow._batch import N_TRAJ_MAX

            n = check_positive_int("n", n, hi=N_TRAJ_MAX)
            from reduced_dynamics.estimation.prompts import as_generator

            rng = as_generator(seed)
            return np.stack([self.initial_state(seed=rng, scale=scale, kind=kind, w_init=w_init) for _ in range(n)])
        s = precond_initial_state(
            self.n_heads, self.setting, seed=seed, scale=scale, kind=kind, w_init=w_init, per_head=self.per_head
        )
        return self.state(s.omega, s.mu, s.W)

    def loss(self, y):
        from reduced_dynamics.precond.loss import precond_loss

        out = each_state(y, lambda v: precond_loss(*self.split(v), self.setting))
        return float(out) if np.ndim(out) == 0 else out

    def grad(self, y):
        from reduced_dynamics.precond.loss import precond_loss_grad

        def one(v):
            g = precond_loss_grad(*self.split(v), self.setting)
            return np.concatenate([g.omega, g.mu, np.ravel(g.W)])

        return each_state(y, one)

    def exponents(self, y):
        """The largest exponent ``max_hk ω_h ω_k τ_hk`` of one state."""
        from reduced_dynamics.precond.loss import sigma_of

        om, _, W = self.split(y)
        S = sigma_of(self.setting)
        H, d = self.n_heads, self.setting.d
        Wh = np.broadcast_to(W, (H, d, d)) if W.ndim == 2 else W
        with np.errstate(over="ignore", invalid="ignore"):
            tau = np.einsum("hij,kij->hk", Wh @ S, S @ Wh)
            expo = om[:, None] * om[None, :] * tau
        return float(np.max(expo)) if np.all(np.isfinite(expo)) else np.inf

    def margin(self, y):
        out = each_state(y, lambda v: 0.95 * MAX_EXPONENT - self.exponents(v))
        return float(out) if np.ndim(out) == 0 else out

    def limit(self) -> dict:
        """The limit predictor (:func:`~reduced_dynamics.precond.flow.precond_limit`): Γ* = (Σ + λI)⁻¹, λ, η, P, loss."""
        from reduced_dynamics.precond.flow import precond_limit

        lim = precond_limit(self.setting)
        return {
            "Gamma": lim.Gamma.tolist(),
            "lam": lim.lam,
            "eta_eff": lim.eta_eff,
            "loss": lim.loss,
            "distance_sigma_inv": lim.distance_sigma_inv,
            "P": lim.P.tolist(),
        }

    def summarize(self, y, *, t=None) -> dict:
        """Loss, the state, and its normalisation (γ, η_eff, distances of W to Σ⁻¹, I, Γ*), with the limit."""
        from reduced_dynamics.precond.flow import normalise_precond_state

        om, mu, W = self.split(y)
        n = normalise_precond_state(om, mu, W, self.setting)
        g = self.grad(y)
        return {
            "omega": om.tolist(),
            "mu": mu.tolist(),
            "W": W.tolist(),
            "loss": float(self.loss(y)),
            "grad_norm": float(np.sqrt(np.sum(g * g))),
            "gamma": n.gamma,
            "eta_eff": n.eta_eff,
            "W_normalised": n.W.tolist(),
            "distance_sigma_inv": np.asarray(n.distance_sigma_inv).tolist(),
            "distance_identity": np.asarray(n.distance_identity).tolist(),
            "distance_limit": np.asarray(n.distance_limit).tolist(),
            "zero_sum_ratio": n.zero_sum_ratio,
            "sign_matched": n.sign_matched,
            "limit": self.limit(),
        }

    def predictor(self, y):
        """The preconditioned reduced model at this state (``PrecondReducedModel``)."""
        from reduced_dynamics.precond.loss import PrecondReducedModel

        om, mu, W = self.split(y)
        return PrecondReducedModel(omega=om, mu=mu, W=W)
