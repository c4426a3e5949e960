r"""The multi-task softmax model: per head a KQ weight per feature and an OV weight per task.

.. math:: \tilde L = \sum_n \Big[\sigma^2 + \frac{1}{|S_n|}\sum_{j\in S_n}(1 - a_{nj})^2 + c\,\mu_n^\top K\mu_n\Big],
          \qquad A = M^\top\Omega,\ K = e^{\circ\,\Omega\Omega^\top}

(formulas in :mod:`reduced_dynamics.multitask.loss`). State ``y = (vec Ω, vec M)`` with ``Ω`` of
shape (H, d) and ``M`` of shape (H, N). Domain: every ``ω⁽ʰ⁾·ω⁽ᵏ⁾`` below ``0.95·700``
(``exp`` overflows float64 at 709). No closed-form Hessian.

References
----------
docs/theory.md#extensions
"""

from __future__ import annotations

import numpy as np

from reduced_dynamics._validation import check_positive_int
from reduced_dynamics.models._base import Part, ReducedModel
from reduced_dynamics.setting import as_setting

__all__ = ["MultitaskModel"]

#: the multitask loss refuses ω⁽ʰ⁾·ω⁽ᵏ⁾ above this (exp overflows float64 at 709)
_EXP_MAX = 700.0


class MultitaskModel(ReducedModel):
    """L̃ of the multi-task model, ``y = (vec Ω, vec M)``.

    Parameters
    ----------
    setting : Setting
        Scalar, isotropic, softmax; ``tasks`` (or the single task on all features).
    n_heads : int, in [1, 64]
    """

    name = "multitask"
    domain_text = "an exponent ω⁽ʰ⁾·ω⁽ᵏ⁾ reached 0.95·700, near float64 overflow of exp."

    def __init__(self, setting, *, n_heads):
        self.setting = as_setting(setting, "MultitaskModel").require_softmax("the multi-task model")
        self.n_heads = check_positive_int("n_heads", n_heads, hi=64)
        H, d, N = self.n_heads, self.setting.d, self.setting.n_tasks
        self.parts = (Part("omega", (H, d)), Part("mu", (H, N)))

    def split(self, y):
        p = self.unpack(y)
        return p["omega"], p["mu"]

    def state(self, omega, mu):
        return self.pack(omega=omega, mu=mu)

    def _random_state(self, rng, shape):
        # as reduced_dynamics.multitask.flow.random_mt_state: one (H, d + N) draw, ω the first d columns
        H, d, N = self.n_heads, self.setting.d, self.setting.n_tasks
        lead = shape[:-1]
        z = rng.standard_normal(lead + (H, d + N))
        return np.concatenate([z[..., :d].reshape(lead + (H * d,)), z[..., d:].reshape(lead + (H * N,))], axis=-1)

    def loss(self, y):
        from reduced_dynamics.multitask.loss import mt_loss

        return mt_loss(*self.split(y), self.setting)

    def loss_per_task(self, y):
        """Per-task losses, shape ``(..., N)``."""
        from reduced_dynamics.multitask.loss import mt_loss_per_task

        return mt_loss_per_task(*self.split(y), self.setting)

    def grad(self, y):
        from reduced_dynamics.multitask.loss import mt_gradient

        g = mt_gradient(*self.split(y), self.setting)
        lead = np.shape(y)[:-1]
        return np.concatenate([g.omega.reshape(lead + (-1,)), g.mu.reshape(lead + (-1,))], axis=-1)

    def margin(self, y):
        om, _ = self.split(y)
        G = om @ np.swapaxes(om, -1, -2)
        out = 0.95 * _EXP_MAX - np.max(G, axis=(-1, -2))
        return float(out) if np.ndim(out) == 0 else out

    def limit(self) -> dict:
        """The limit predictor of the flow with H heads (regime, per-task weights A, per-task loss)."""
        from reduced_dynamics.multitask.predictors import limit_predictor

        lim = limit_predictor(self.n_heads, self.setting)
        return {
            "regime": lim.regime,
            "A": np.asarray(lim.A).tolist(),
            "loss_per_task": np.asarray(lim.loss_per_task).tolist(),
        }

    def summarize(self, y, *, t=None) -> dict:
        """Loss (total and per task), |∇|, the effective weights A = Mᵀ Ω, the head roles and antipodal pairs."""
        from reduced_dynamics.multitask.flow import antipodal_pairs, classify_heads
        from reduced_dynamics.multitask.loss import effective_weights

        om, mu = self.split(y)
        g = self.grad(y)
        return {
            "omega": om.tolist(),
            "mu": mu.tolist(),
            "loss": float(self.loss(y)),
            "loss_per_task": np.asarray(self.loss_per_task(y)).tolist(),
            "grad_norm": float(np.sqrt(np.sum(g * g))),
            "A": effective_weights(om, mu, self.setting).tolist(),
            "roles": list(classify_heads(om, mu, self.setting)),
            "antipodal_pairs": antipodal_pairs(om, mu),
            "limit": self.limit(),
        }
