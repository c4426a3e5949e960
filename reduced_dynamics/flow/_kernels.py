"""The kernels the integrator calls: ``−∇loss`` and ``−∇²loss`` of a model, counted and guarded.

:class:`ModelKernel` serves one trajectory of any :class:`~reduced_dynamics.models.ReducedModel`
(a model may supply a faster subclass through ``ReducedModel.kernels``, as the isotropic model does);
:class:`BatchKernel` serves the batched stiff integrator on arrays of states.
"""

from __future__ import annotations

import math

import numpy as np

from reduced_dynamics.dynamics.loss import LossOverflowError

__all__ = ["ModelKernel", "RatedKernel", "BatchKernel", "BudgetExceeded", "Event", "OutOfDomain"]


class BudgetExceeded(Exception):
    """The flow needed more gradient evaluations than its budget."""


class OutOfDomain(Exception):
    """The model could not evaluate its gradient at a state (outside its domain)."""


class Event(Exception):
    """The fast LSODA pass met an event condition (domain margin or stationarity) at time ``t``."""

    def __init__(self, t):
        super().__init__(t)
        self.t = t


class ModelKernel:
    """``−∇loss`` (and ``−∇²loss``) of one model for the single-trajectory solvers.

    Every right-hand-side call is counted against ``budget`` (:class:`BudgetExceeded` beyond it) and
    remembers the latest state; a model error inside its domain check (``LossOverflowError`` or
    ``ValueError`` from the formulas) becomes :class:`OutOfDomain`. With ``abort`` set (the fast LSODA
    pass), the first evaluation at a non-positive margin raises :class:`Event`, and the first one below
    the stationarity threshold is recorded in ``flag_t``.
    """

    def __init__(self, model, *, stationarity_tol: float, budget: int):
        self.model = model
        self.n = model.size
        self.stat2 = stationarity_tol * stationarity_tol
        self.budget = budget
        self.nfev = 0
        self.njev = 0
        self.abort = False
        self.flag_t = None
        self.last_t = 0.0
        self.last_y = None
        self.has_jac = model.has_hessian or model.use_fd_jacobian
        # the model's unchecked one-state formulas where they mirror its grad and margin (ReducedModel._hook)
        self._grad_one = model._hook("grad")
        self._margin_one = model._hook("margin")

    def margin(self, y) -> float:
        return float(self._margin_one(y))

    def _grad(self, y):
        try:
            return np.asarray(self._grad_one(y), dtype=np.float64)
        except (LossOverflowError, ValueError) as exc:
            raise OutOfDomain(str(exc)) from None

    def rhs_array(self, t, y):
        """``−∇loss(y)`` (not counted)."""
        return -self._grad(y)

    def rhs(self, y, t):
        """``−∇loss`` for odeint (``(y, t)``): counted, guarded, remembers the latest state."""
        self.nfev += 1
        if self.nfev > self.budget:
            raise BudgetExceeded()
        if self.abort and not self.margin(y) > 0:
            raise Event(t)
        out = -self._grad(y)
        g2 = float(out @ out)  # not finite if an entry is not (or the sum overflows: then each entry is looked at)
        if not math.isfinite(g2) and not np.isfinite(out).all():
            raise OutOfDomain("the gradient is not finite")
        if self.abort and self.stat2 > 0 and self.flag_t is None and g2 < self.stat2:
            self.flag_t = t
        if t >= self.last_t:
            self.last_t, self.last_y = float(t), np.array(y, dtype=np.float64)
        return out

    def rhs_ivp(self, t, y):
        return self.rhs(y, t)

    def jac(self, y, t):
        self.njev += 1
        try:
            if self.model.has_hessian:
                return -np.asarray(self.model.hessian(y))
            return -self.model.jacobian_fd(y)
        except (LossOverflowError, ValueError) as exc:
            raise OutOfDomain(str(exc)) from None

    def jac_ivp(self, t, y):
        return self.jac(y, t)

    def grad_norm(self, y) -> float:
        g = self.rhs_array(0.0, y)
        return math.sqrt(float(g @ g))


class RatedKernel(ModelKernel):
    """``−P∇loss`` with a constant diagonal rate ``P`` (a flow whose blocks run at different speeds)."""

    def __init__(self, model, rates, *, stationarity_tol: float, budget: int):
        super().__init__(model, stationarity_tol=stationarity_tol, budget=budget)
        self.P = np.asarray(rates, dtype=np.float64)

    def rhs_array(self, t, y):
        return self.P * super().rhs_array(t, y)

    def rhs(self, y, t):
        return self.P * super().rhs(y, t)

    def jac(self, y, t):
        return self.P[:, None] * super().jac(y, t)


class BatchKernel:
    """Batched ``−∇loss``, ``−∇²loss`` and margin of one model on states laid out **transposed**: ``y`` of shape
    ``(size, N)``, one column per trajectory (the layout of :func:`~reduced_dynamics.flow._batch.radau_batch`).

    ``rhs`` returns ``(size, N)``, ``jac`` ``(size, size, N)``, ``margin`` and ``grad_norm``
    ``(N,)``. This generic kernel calls the model's vectorised ``grad``/``hessian`` on ``y.T``; a model may
    supply a faster one through ``ReducedModel.batch_kernels`` (the isotropic model does). Values outside the
    domain come back as NaN (the step is then rejected or the trajectory stops), never as an exception.
    """

    def __init__(self, model):
        self.model = model
        self.n = model.size

    def rhs(self, y):
        rows = np.ascontiguousarray(y.T)
        with np.errstate(all="ignore"):
            try:
                out = -np.asarray(self.model.grad(rows), dtype=np.float64)
            except (LossOverflowError, ValueError):
                out = np.empty_like(rows)
                for i in range(rows.shape[0]):
                    try:
                        out[i] = -self.model.grad(rows[i])
                    except (LossOverflowError, ValueError):
                        out[i] = np.nan
        return np.ascontiguousarray(out.T)

    def jac(self, y):
        rows = np.ascontiguousarray(y.T)
        with np.errstate(all="ignore"):
            try:
                out = -np.asarray(self.model.hessian(rows), dtype=np.float64)
            except (LossOverflowError, ValueError):
                return np.full((self.n, self.n, rows.shape[0]), np.nan)
        return np.ascontiguousarray(np.moveaxis(out, 0, 2))

    def margin(self, y):
        with np.errstate(all="ignore"):
            return np.asarray(self.model.margin(np.ascontiguousarray(y.T)), dtype=np.float64)

    def grad_norm(self, y):
        g = self.rhs(y)
        return np.sqrt(np.sum(g * g, axis=0))
