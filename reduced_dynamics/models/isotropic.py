r"""The isotropic softmax reduced model and its approximate loss :math:`\tilde L` (the paper's model).

.. math:: \tilde L(\omega, \mu) = \sigma^2 + (1 - \mu^\top\omega)^2 + c\,\mu^\top E\mu,\qquad
          E_{hk} = e^{d\omega_h\omega_k},\ c = (1+\sigma^2)/L

(formulas in :mod:`reduced_dynamics.dynamics.loss`). Domain: ``d·max ω² < exponent_cap``
(default ``0.95·MAX_EXPONENT``), where ``exp(d ωωᵀ)`` stays far from float64 overflow.

The integrator's fast path for this model runs the right-hand side and the Jacobian on Python
floats for H <= 6 (a few µs per call, against ~20 µs for numpy on arrays of 2H entries):
:class:`IsotropicKernel`, handed to the integrator by :meth:`IsotropicModel.kernels`.

References
----------
docs/theory.md#approximate-loss, docs/theory.md#gradient-flow
"""

from __future__ import annotations

import math

import numpy as np

from reduced_dynamics._validation import check_positive_float
from reduced_dynamics.dynamics.loss import (
    MAX_EXPONENT,
    LossOverflowError,
    _grad_arrays,
    _hessian_arrays,
    approx_loss,
    approx_loss_grad,
    approx_loss_hessian,
)
from reduced_dynamics.flow._kernels import BatchKernel, Event, ModelKernel
from reduced_dynamics.models._heads import ScalarHeadsModel

__all__ = ["IsotropicModel", "IsotropicKernel"]

#: Largest H whose right-hand side and Jacobian run on Python floats (cheaper than numpy on tiny arrays).
_PY_KERNEL_MAX_HEADS = 6


def _check_cap(exponent_cap):
    cap = 0.95 * MAX_EXPONENT if exponent_cap is None else check_positive_float("exponent_cap", exponent_cap)
    if cap > MAX_EXPONENT:
        raise ValueError(f"`exponent_cap` must be in (0, {MAX_EXPONENT:g}], got {exponent_cap}")
    return cap


class IsotropicModel(ScalarHeadsModel):
    """L̃ of the isotropic softmax model, ``y = (ω, μ)``; analytic gradient and Hessian.

    Parameters
    ----------
    setting : Setting
        Scalar, isotropic, softmax, single task.
    n_heads : int, in [1, 1000]
    exponent_cap : float in (0, MAX_EXPONENT], optional
        Edge of the domain: ``d·max ω²`` (default ``0.95·MAX_EXPONENT``).

    Examples
    --------
    >>> from reduced_dynamics import Setting, reduced_model
    >>> m = reduced_model(Setting(d=5, L=40, sigma2=0.1), n_heads=2)
    >>> round(m.loss(m.state([0.1, -0.1], [4.0, -4.0])), 6)
    0.228037
    """

    name = "isotropic"
    has_hessian = True
    domain_text = (
        "left the overflow-safe region: d·max(ω²) reached the cap where exp(d ωωᵀ) nears float64 overflow. "
        "Try a smaller start (a smaller `scale`, or smaller |ω| in `omega0`)."
    )

    def __init__(self, setting, *, n_heads, exponent_cap=None):
        super().__init__(setting, n_heads=n_heads)
        # L̃ is the isotropic softmax loss: another covariance or activation has its own model
        self.setting.require_isotropic("the isotropic model").require_softmax("the isotropic model")
        self.exponent_cap = _check_cap(exponent_cap)

    def _layout_key(self):
        return (("exponent_cap", self.exponent_cap),) if self.exponent_cap != 0.95 * MAX_EXPONENT else ()

    def loss(self, y):
        return approx_loss(*self.split(y), self.setting)

    def grad(self, y):
        g = approx_loss_grad(*self.split(y), self.setting)
        return np.concatenate([g.omega, g.mu], axis=-1)

    def hessian(self, y):
        return approx_loss_hessian(*self.split(y), self.setting)

    def margin(self, y):
        return self._margin_of(
            y, lambda y: self.exponent_cap - float(self.setting.d) * np.max(y[..., : self.n_heads] ** 2, axis=-1)
        )

    def hard_margin(self, y):
        """``MAX_EXPONENT − d·max ω²``: where ``exp(d ωωᵀ)`` still evaluates (gradient descent stops beyond)."""
        w = np.asarray(y, dtype=np.float64)[..., : self.n_heads]
        with np.errstate(over="ignore"):
            return MAX_EXPONENT - float(self.setting.d) * np.max(w * w, axis=-1)

    def limit(self) -> dict:
        """η* (the limit of ``μᵀω`` for H >= 2) and ``inf L̃ = 1 + σ² − η*``."""
        s = self.setting
        return {"eta_star": float(s.eta_star), "inf_loss": float(s.inf_loss)}

    def kernels(self, *, stationarity_tol, budget):
        return IsotropicKernel(self, stationarity_tol=stationarity_tol, budget=budget)

    def batch_kernels(self):
        return IsotropicBatchKernel(self)


class IsotropicKernel(ModelKernel):
    """Pre-bound ``−∇L̃`` and ``−∇²L̃`` of one scalar setting and H (Python floats for H <= 6).

    Each call only guards the overflow region and counts; ``abort`` makes the right-hand side raise
    :class:`~reduced_dynamics.flow._kernels.Event` at the first evaluation beyond the cap.
    """

    def __init__(self, model: IsotropicModel, *, stationarity_tol, budget):
        super().__init__(model, stationarity_tol=stationarity_tol, budget=budget)
        self.H = model.n_heads
        self.d = float(model.setting.d)
        self.c = float(model.setting.c)
        self.cap = model.exponent_cap
        self._d_arr = np.asarray(self.d)
        self._c_arr = np.asarray(self.c)
        self.has_jac = True

    def margin(self, y) -> float:
        return self.cap - self.d * max([x * x for x in list(y[: self.H])])

    def _guard(self, t, w):
        expo = self.d * max([x * x for x in w])
        if not expo <= MAX_EXPONENT:  # also catches NaN
            from reduced_dynamics.flow._kernels import OutOfDomain

            raise OutOfDomain(f"d·max(ω²) = {expo:.4g} exceeds {MAX_EXPONENT:g}")
        if self.abort and not expo < self.cap:
            raise Event(t)

    def _grad_lists(self, w, m):
        H, d, c = self.H, self.d, self.c
        cd = c * d
        R = range(H)
        u = -1.0
        a = [0.0] * H
        for h in R:
            a[h] = m[h] * w[h]
            u += a[h]
        out = [0.0] * (2 * H)
        exp = math.exp
        for h in R:
            dw = d * w[h]
            g = 0.0
            em = 0.0
            for k in R:
                e = exp(dw * w[k])
                g += e * a[k]
                em += e * m[k]
            out[h] = -2.0 * m[h] * (u + cd * g)
            out[H + h] = -2.0 * (u * w[h] + c * em)
        return out

    def rhs_array(self, t, y):
        H = self.H
        if H <= _PY_KERNEL_MAX_HEADS:
            yl = y.tolist()
            return np.array(self._grad_lists(yl[:H], yl[H:]))
        w, m = y[:H], y[H:]
        E = np.exp(self._d_arr * w[:, None] * w[None, :])
        gw, gm = _grad_arrays(w, m, self._d_arr, self._c_arr, E)
        return -np.concatenate([gw, gm])

    def rhs(self, y, t):
        from reduced_dynamics.flow._kernels import BudgetExceeded

        self.nfev += 1
        if self.nfev > self.budget:
            raise BudgetExceeded()
        H = self.H
        if H <= _PY_KERNEL_MAX_HEADS:
            yl = y.tolist()
            self._guard(t, yl[:H])
            out = self._grad_lists(yl[:H], yl[H:])
            if self.abort and self.stat2 > 0 and self.flag_t is None and sum([x * x for x in out]) < self.stat2:
                self.flag_t = t
        else:
            w = y[:H]
            self._guard(t, w.tolist())
            E = np.exp(self._d_arr * w[:, None] * w[None, :])
            try:
                gw, gm = _grad_arrays(w, y[H:], self._d_arr, self._c_arr, E)
            except LossOverflowError as exc:
                from reduced_dynamics.flow._kernels import OutOfDomain

                raise OutOfDomain(str(exc)) from None
            out = -np.concatenate([gw, gm])
            if self.abort and self.stat2 > 0 and self.flag_t is None and float(out @ out) < self.stat2:
                self.flag_t = t
        if t >= self.last_t:
            self.last_t, self.last_y = float(t), y.copy()
        return out

    def rhs_ivp(self, t, y):
        return np.asarray(self.rhs(y, t))

    def jac(self, y, t):
        """``−∇²L̃`` (the formulas of :func:`~reduced_dynamics.approx_loss_hessian`), shape (2H, 2H)."""
        self.njev += 1
        H = self.H
        if H > _PY_KERNEL_MAX_HEADS:
            w, m = y[:H], y[H:]
            self._check_expo(w.tolist())
            E = np.exp(self._d_arr * w[:, None] * w[None, :])
            return -_hessian_arrays(w, m, self._d_arr, self._c_arr, E)
        yl = y.tolist()
        w, m = yl[:H], yl[H:]
        self._check_expo(w)
        d, c = self.d, self.c
        cd = c * d
        R = range(H)
        exp = math.exp
        E = [[exp(d * w[i] * w[j]) for j in R] for i in R]
        a = [m[k] * w[k] for k in R]
        u = sum(a) - 1.0
        n2 = 2 * H
        J = [[0.0] * n2 for _ in range(n2)]
        for i in R:
            Ei = E[i]
            g = 0.0
            s2 = 0.0
            for k in R:
                g += Ei[k] * a[k]
                s2 += Ei[k] * a[k] * w[k]
            mi, wi = m[i], w[i]
            Ji, Jhi = J[i], J[H + i]
            for j in R:
                e = Ei[j]
                mm = mi * m[j]
                Ji[j] = -(2.0 * mm + 2.0 * cd * mm * e * (1.0 + d * wi * w[j]))
                # ∂²L̃/∂ω_i∂μ_j
                hwm = 2.0 * mi * w[j] * (1.0 + cd * e)
                Ji[H + j] = -hwm
                J[H + j][i] = -hwm
                Jhi[H + j] = -(2.0 * wi * w[j] + 2.0 * c * e)
            Ji[i] -= 2.0 * cd * d * mi * s2
            Ji[H + i] -= 2.0 * (u + cd * g)
            J[H + i][i] -= 2.0 * (u + cd * g)
        return J

    def _check_expo(self, w):
        expo = self.d * max([x * x for x in w])
        if not expo <= MAX_EXPONENT:
            from reduced_dynamics.flow._kernels import OutOfDomain

            raise OutOfDomain(f"d·max(ω²) = {expo:.4g} exceeds {MAX_EXPONENT:g}")

    def jac_ivp(self, t, y):
        return self.jac(y, t)

    def grad_norm(self, y):
        out = self.rhs_array(0.0, y)
        return math.sqrt(float(out @ out))


class IsotropicBatchKernel(BatchKernel):
    """The batched ``−∇L̃``, ``−∇²L̃`` of one scalar setting on transposed states ``(2H, N)`` (pre-bound, by
    broadcasting over ``(H, H, N)`` arrays: contiguous over the batch)."""

    def __init__(self, model: IsotropicModel):
        super().__init__(model)
        self.H = model.n_heads
        self.d = float(model.setting.d)
        self.c = float(model.setting.c)
        self.cd = self.c * self.d
        self.cap = model.exponent_cap

    def exp_matrix(self, w):
        """``exp(d ω_h ω_k)``, shape (H, H, N), from ω of shape (H, N); the exponent clipped at MAX_EXPONENT so
        a trial stage far outside the safe region stays finite (its step is then rejected, or the overflow
        event ends the trajectory)."""
        return np.exp(np.minimum((self.d * w)[:, None, :] * w, MAX_EXPONENT))

    def rhs(self, y):
        H = self.H
        w, m = y[:H], y[H:]
        E = self.exp_matrix(w)
        a = m * w
        ga = np.einsum("hkn,jkn->jhn", E, np.concatenate((a, m)).reshape(2, H, -1))  # (E a, E m), each (H, N)
        u = a[0] - 1.0
        for h in range(1, H):
            u = u + a[h]
        out = np.empty_like(y)
        np.multiply(m, u + self.cd * ga[0], out=out[:H])
        np.add(u * w, self.c * ga[1], out=out[H:])
        out *= -2.0
        return out

    def jac(self, y):
        """``−∇²L̃`` (the formulas of :func:`~reduced_dynamics.approx_loss_hessian`), shape (2H, 2H, N)."""
        H = self.H
        d, c, cd = self.d, self.c, self.cd
        w, m = y[:H], y[H:]
        E = self.exp_matrix(w)
        a = m * w
        u = np.sum(a, axis=0)
        g = np.sum(E * a, axis=1)
        s2 = np.sum(E * (a * w), axis=1)
        mm = m[:, None, :] * m[None, :, :]
        ww = w[:, None, :] * w[None, :, :]
        out = np.empty((2 * H, 2 * H, y.shape[1]))
        i = np.arange(H)
        h_ww = (2.0 * mm) * (1.0 + cd * E * (1.0 + d * ww))
        h_ww[i, i] += (2.0 * cd * d) * (m * s2)
        # h_wm[j, i] = d² L̃ / dω_j dμ_i
        h_wm = (2.0 * m[:, None, :] * w[None, :, :]) * (1.0 + cd * E)
        h_wm[i, i] += 2.0 * (u - 1.0 + cd * g)
        out[:H, :H] = -h_ww
        out[:H, H:] = -h_wm
        out[H:, :H] = -np.swapaxes(h_wm, 0, 1)
        out[H:, H:] = -2.0 * (ww + c * E)
        return out

    def margin(self, y):
        w = y[: self.H]
        return self.cap - self.d * np.max(w * w, axis=0)

    def grad_norm(self, y):
        g = self.rhs(y)
        return np.sqrt(np.sum(g * g, axis=0))
