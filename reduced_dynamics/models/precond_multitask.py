r"""Σ and several tasks together: per head a full KQ block ``B_h`` and an OV weight per task.

.. math:: \tilde L = \sum_n \Big[\sigma^2 + \tfrac{1}{|S_n|}\operatorname{tr}\big(D_n(I-\Sigma A_n)\Sigma(I-\Sigma A_n)^\top\big)
          + c_n\,\mu_n^\top K\mu_n\Big],\quad A_n = \sum_h \mu^{(h)}_n B_h,\quad K_{hk} = e^{\operatorname{tr}(\Sigma B_h^\top\Sigma B_k)}

with ``c_n = (tr(D_nΣ)/|S_n| + σ²)/L`` (derived from the same moment statements as its two parents in
:mod:`reduced_dynamics.multitask.sigma_derive`; formulas, Hessian and limit in
:mod:`reduced_dynamics.multitask.sigma_loss`). It reduces to the multi-task model at Σ = I with
``B_h = diag(ω⁽ʰ⁾)``, to the preconditioned model with one task on all features and ``B_h = ω_h W_h``,
and to L̃ with both. The limit: per task ``A_n* = (Σ_{S_nS_n} + λ_n I)⁻¹`` on the support block.

References
----------
docs/theory.md#sigma-with-several-tasks
"""

from __future__ import annotations

import functools

import numpy as np

from reduced_dynamics._validation import check_positive_int
from reduced_dynamics.dynamics.loss import MAX_EXPONENT
from reduced_dynamics.models._base import Part, ReducedModel
from reduced_dynamics.setting import as_setting

__all__ = ["PrecondMultitaskModel"]

#: Largest dimension (the state has H d² + H N variables and a dense Hessian).
D_MAX = 12


def _margin_raw(S, B):
    """``0.95 · MAX_EXPONENT − max_hk tr(ΣB_hᵀΣB_k)`` of ``B`` (..., H, d, d) (a non-finite τ counts as inf), shape ``(...)``."""
    SB = S @ B
    tau = np.einsum("...hji,...kji->...hk", SB, SB)  # tr(ΣB_hᵀΣB_k) = <ΣB_h, ΣB_k>_F
    return 0.95 * MAX_EXPONENT - np.where(np.isfinite(tau), tau, np.inf).max(axis=(-1, -2))


class PrecondMultitaskModel(ReducedModel):
    """L̃ of the composed model under x ~ N(0, Σ) with several tasks, ``y = (vec B, vec M)``.

    Parameters
    ----------
    setting : Setting
        Scalar, softmax; ``Sigma`` and ``tasks``; ``d <= 12``.
    n_heads : int, in [1, 16]
    """

    name = "precond_multitask"
    has_hessian = True
    domain_text = "an exponent tr(ΣB_hᵀΣB_k) reached 0.95·MAX_EXPONENT (overflow-safe region)."

    def __init__(self, setting, *, n_heads):
        self.setting = as_setting(setting, "PrecondMultitaskModel").require_softmax("the model with Σ and tasks")
        if self.setting.d > D_MAX:
            raise ValueError(
                f"`setting.d` must be <= {D_MAX} for the model with Σ and tasks (H d² + H N variables), got {self.setting.d}"
            )
        self.n_heads = check_positive_int("n_heads", n_heads, hi=16)
        H, d, N = self.n_heads, self.setting.d, self.setting.n_tasks
        self.parts = (Part("B", (H, d, d)), Part("mu", (H, N)))

    def split(self, y):
        p = self.unpack(self._state_array(y))
        return p["B"], p["mu"]

    def state(self, B, mu):
        return self.pack(B=B, mu=mu)

    def loss(self, y):
        from reduced_dynamics.multitask.sigma_loss import sigma_mt_loss

        return sigma_mt_loss(*self.split(y), self.setting)

    def loss_per_task(self, y):
        from reduced_dynamics.multitask.sigma_loss import sigma_mt_loss_per_task

        return sigma_mt_loss_per_task(*self.split(y), self.setting)

    def grad(self, y):
        from reduced_dynamics.multitask.sigma_loss import sigma_mt_gradient

        g = sigma_mt_gradient(*self.split(y), self.setting)
        lead = np.shape(y)[:-1]
        return np.concatenate([g.B.reshape(lead + (-1,)), g.mu.reshape(lead + (-1,))], axis=-1)

    def hessian(self, y):
        from reduced_dynamics.multitask.sigma_loss import sigma_mt_hessian

        return sigma_mt_hessian(*self.split(y), self.setting)

    def margin(self, y):
        return self._margin_of(y, lambda y: _margin_raw(self._constants[0], self.split(y)[0]))

    @functools.cached_property
    def _constants(self):
        """``(Σ, mask, sizes, c)`` of the setting, made once."""
        from reduced_dynamics.multitask.sigma_loss import COVARIANCE_WHERE, D_MAX, task_constants

        return self.setting.covariance(d_max=D_MAX, where=COVARIANCE_WHERE), *task_constants(self.setting)

    # the integrator's hooks (ReducedModel._grad_finite): the same numbers on views of a finite state
    def _margin_finite(self, y) -> float:
        with np.errstate(over="ignore", invalid="ignore"):
            return self._clamp_margin(_margin_raw(self._constants[0], self._views(y)[0]))

    def _grad_finite(self, y):
        from reduced_dynamics.multitask.sigma_loss import _finite, _grad_parts, _state_parts

        B, mu = self._views(y)
        S, mask, sizes, c = self._constants
        V, _, K, _, P = _state_parts(B, mu, S, self.setting.d, "sigma_mt_gradient")
        with np.errstate(over="ignore", invalid="ignore"):
            _, _, g_B, g_mu = _grad_parts(B, mu, self.setting, S, mask, sizes, c, V, K, P)
        _finite("sigma_mt_gradient", B_gradient=g_B, mu_gradient=g_mu)
        return np.concatenate([g_B.ravel(), g_mu.ravel()])

    def limit(self) -> dict:
        """Per task: ``A_n*``, ``λ_n`` and the minimum of the limit loss (:func:`~reduced_dynamics.multitask.sigma_loss.sigma_mt_limit`)."""
        from reduced_dynamics.multitask.sigma_loss import sigma_mt_limit

        lim = sigma_mt_limit(self.setting)
        return {"A": lim.A.tolist(), "lam": lim.lam.tolist(), "loss_per_task": lim.loss.tolist()}

    def summarize(self, y, *, t=None) -> dict:
        """Loss (total, per task), |∇|, the effective matrices A_n and their relative distance to A_n*."""
        from reduced_dynamics.multitask.sigma_loss import sigma_mt_effective, sigma_mt_limit

        self._check_time(t)
        B, mu = self.split(y)
        A = sigma_mt_effective(B, mu, self.setting)
        lim = sigma_mt_limit(self.setting)
        dist = np.linalg.norm(A - lim.A, axis=(-1, -2)) / np.linalg.norm(lim.A, axis=(-1, -2))
        g = self.grad(y)
        return {
            "B": B.tolist(),
            "mu": mu.tolist(),
            "loss": float(self.loss(y)),
            "loss_per_task": np.asarray(self.loss_per_task(y)).tolist(),
            "grad_norm": float(np.sqrt(np.sum(g * g))),
            "A": A.tolist(),
            "distance_limit": dist.tolist(),
            "sum_mu": mu.sum(axis=0).tolist(),
            "limit": {"lam": lim.lam.tolist(), "loss_per_task": lim.loss.tolist()},
        }
