r"""The isotropic softmax model with the risk to order 1/L: :math:`R_0 + R_1/L` (the corrected loss).

Formulas in :mod:`reduced_dynamics.dynamics.corrected_loss`. Domain: ``max ω_h² < 0.45``
(the expansion needs ``1 − 2ω_hω_k > 0``); the flow stops at ``max ω² = 0.95·0.45``. No
closed-form Hessian: implicit methods receive the central-difference Hessian of the analytic
gradient.

References
----------
docs/theory.md#corrected-loss
"""

from __future__ import annotations

import numpy as np

from reduced_dynamics._validation import check_positive_float
from reduced_dynamics.dynamics.corrected_loss import (
    MAX_OMEGA2,
    _fd_hessian,
    corrected_eta_star,
    corrected_loss,
    corrected_loss_grad,
)
from reduced_dynamics.models._heads import ScalarHeadsModel

__all__ = ["CorrectedModel"]


class CorrectedModel(ScalarHeadsModel):
    """``R_0 + R_1/L`` of the isotropic softmax model, ``y = (ω, μ)`` (objective ``"corrected"``).

    Parameters
    ----------
    setting : Setting
        Scalar, isotropic, softmax, single task.
    n_heads : int, in [1, 1000]
    """

    name = "corrected"
    objective = "corrected"
    default_method = "Radau"
    use_fd_jacobian = True
    domain_text = "max ω_h² reached 0.95·0.45, where the 1/L expansion (1 − 2ω_hω_k > 0) breaks down."

    def __init__(self, setting, *, n_heads):
        super().__init__(setting, n_heads=n_heads)
        # R_0 + R_1/L is derived for the isotropic softmax model only
        self.setting.require_isotropic("the corrected model").require_softmax("the corrected model")

    def loss(self, y):
        return corrected_loss(*self.split(y), self.setting)

    def grad(self, y):
        g = corrected_loss_grad(*self.split(y), self.setting)
        return np.concatenate([g.omega, g.mu], axis=-1)

    def jacobian_fd(self, y, *, step: float = 1e-6):
        """Central-difference Hessian of the analytic gradient (``corrected_loss_hessian_fd``)."""
        s = self.setting
        w, m = self.split(y)
        if w.ndim != 1:
            raise ValueError(f"`y` must be one state of shape ({self.size},), got shape {np.shape(y)}")
        step = check_positive_float("step", step)
        if step > 1.0:
            raise ValueError(f"`step` must be a finite-difference step in (0, 1], got {step!r}")
        return _fd_hessian(w, m, s.d, s.L, s.sigma2, h=step)

    def margin(self, y):
        return self._margin_of(y, lambda y: 0.95 * MAX_OMEGA2 - np.max(y[..., : self.n_heads] ** 2, axis=-1))

    # the integrator's hooks (ReducedModel._grad_finite): the same numbers on views of a finite state
    def _margin_finite(self, y) -> float:
        with np.errstate(over="ignore"):
            return self._clamp_margin(0.95 * MAX_OMEGA2 - np.max(y[: self.n_heads] ** 2, axis=-1))

    def _grad_finite(self, y):
        from reduced_dynamics.dynamics.corrected_loss import _corrected_grad_arrays, _guard

        om, mu = y[: self.n_heads], y[self.n_heads :]
        with np.errstate(over="ignore"):
            if not float((om * om).max()) < MAX_OMEGA2:  # outside the expansion: corrected_loss_grad's error
                return self.grad(y)
        st = self.setting  # scalar, isotropic, softmax: checked by the constructor
        gw, gm = _corrected_grad_arrays(om, mu, st.d, st.L, st.sigma2)
        _guard("corrected_loss_grad", gw, gm)
        return np.concatenate([gw, gm])

    def limit(self) -> dict:
        """The corrected optimal step η*_L (docs/theory.md#corrected-loss)."""
        return {"eta_star": float(corrected_eta_star(self.setting))}
