r"""The isotropic softmax model with its exact finite-L risk (deterministic quadrature).

Formulas in :mod:`reduced_dynamics.exact.evaluator` (:func:`~reduced_dynamics.exact.evaluator.exact_risk`
with its gradient). Domain: ``|ω_h| <= omega_max(setting)`` (beyond it the softmax is nearly a
hard max and the quadrature would need too many nodes); the flow stops at ``0.999·omega_max``.
No closed-form Hessian: implicit methods receive a forward-difference Jacobian of the exact
gradient (2H gradients, symmetrised); BDF needs about 2.7× fewer gradients than Radau and
LSODA on the paper's two-head flow to t = 1000, so BDF is this model's default method.

References
----------
docs/theory.md#exact-risk
"""

from __future__ import annotations

import numpy as np

from reduced_dynamics._validation import check_positive_float
from reduced_dynamics.exact.evaluator import H_MAX, MU_MAX, _check_setting, _check_tol, exact_risk, omega_max
from reduced_dynamics.models._heads import ScalarHeadsModel

__all__ = ["ExactModel"]


class ExactModel(ScalarHeadsModel):
    """The exact risk of the isotropic softmax model at finite L, ``y = (ω, μ)`` (objective ``"exact"``).

    Parameters
    ----------
    setting : Setting
        Scalar, isotropic, softmax, single task, ``L`` in [2, L_EXACT_MAX].
    n_heads : int, in [1, 16]
    tol : float, in [1e-15, 1e-3]
        Quadrature target of :func:`~reduced_dynamics.exact.evaluator.exact_risk`.
    fd_step : float, in [1e-8, 1e-2]
        Step of the forward-difference Jacobian.
    """

    name = "exact"
    objective = "exact"
    default_method = "BDF"
    use_fd_jacobian = True

    def __init__(self, setting, *, n_heads, tol=1e-12, fd_step=1e-5):
        _check_setting(setting, "the exact-risk model")
        super().__init__(setting, n_heads=n_heads, heads_max=H_MAX)
        self.tol = _check_tol(tol)
        self.fd_step = check_positive_float("fd_step", fd_step)
        if not 1e-8 <= self.fd_step <= 1e-2:
            raise ValueError(f"`fd_step` must be in [1e-8, 1e-2], got {fd_step!r}")
        self.omega_max = omega_max(self.setting)
        self.domain_text = (
            f"|ω_h| reached 0.999·omega_max = {0.999 * self.omega_max:.6g}, the edge of the exact evaluator's range "
            "(beyond it the softmax is nearly a hard max)."
        )

    def _layout_key(self):
        out = []
        if self.tol != 1e-12:
            out.append(("tol", self.tol))
        if self.fd_step != 1e-5:
            out.append(("fd_step", self.fd_step))
        return tuple(out)

    def _each(self, y, fn):
        y = self._state_array(y)
        if y.ndim == 1:
            return fn(y)
        flat = y.reshape(-1, y.shape[-1])
        out = [fn(v) for v in flat]
        return np.asarray(out).reshape(y.shape[:-1] + np.shape(out[0]))

    def loss(self, y):
        def one(v):
            w, m = self.split(v)
            return exact_risk(w, m, self.setting, tol=self.tol).risk

        out = self._each(y, one)
        return float(out) if np.ndim(out) == 0 else out

    def grad(self, y):
        def one(v):
            w, m = self.split(v)
            r = exact_risk(w, m, self.setting, grad=True, tol=self.tol)
            return np.concatenate([r.grad_omega, r.grad_mu])

        return self._each(y, one)

    def risk(self, y):
        """The full :class:`~reduced_dynamics.exact.evaluator.ExactRisk` (risk, error estimate, gradient) at one state."""
        w, m = self.split(y)
        return exact_risk(w, m, self.setting, grad=True, tol=self.tol)

    def jacobian_fd(self, y, *, step=None):
        return super().jacobian_fd(y, step=self.fd_step if step is None else step)

    def margin(self, y):
        def fn(y):
            w, m = y[..., : self.n_heads], y[..., self.n_heads :]
            out = 0.999 * self.omega_max - np.max(np.abs(w), axis=-1)
            return np.where(np.max(np.abs(m), axis=-1) <= MU_MAX, out, -1.0)

        return self._margin_of(y, fn)

    def limit(self) -> dict:
        """η* of the large-L theory (the exact flow's limit differs from it at O(1/L); docs/theory.md#exact-risk)."""
        return {"eta_star": float(self.setting.eta_star)}
