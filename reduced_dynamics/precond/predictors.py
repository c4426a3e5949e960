r"""Preconditioned and debiased preconditioned one-step GD as predictors of the Monte Carlo engine.

For a ``d × d`` preconditioner ``P`` and a step η,

.. math::

    \hat y_{\rm pgd} = \frac{\eta}{L}\sum_l y_l\, x_l^\top P x_q, \qquad
    \hat y_{\rm dpgd} = \frac{\eta}{L}\sum_l y_l\, (x_l - \bar x)^\top P x_q ,

linear smoothers with weights :math:`w_l = \tfrac{\eta}{L}(x_l - \bar x)^\top P x_q` (debiased) or
:math:`\tfrac{\eta}{L}x_l^\top P x_q`, which depend on the covariates only. They are
:class:`~reduced_dynamics.estimation.predictors.Predictor` objects, so
:func:`~reduced_dynamics.estimate_risks` evaluates them on common prompts with every other
predictor (paired differences with :meth:`~reduced_dynamics.estimation.risk.RiskResult.difference`)
and, with ``conditional=True``, Rao–Blackwellised by
:func:`~reduced_dynamics.conditional_loss` (β and ε integrated; valid for any Σ), exactly as the
isotropic :class:`~reduced_dynamics.VanillaGD` / :class:`~reduced_dynamics.DebiasedGD`. The weights
need the covariates (not only the scores :math:`x_l^\top x_q`), so the engine draws full prompts
(its ``"full"`` sampler, the one it uses whenever ``setting.Sigma`` is set); at ``P = I`` they equal
the isotropic ones (tested).

Bayes ridge under Σ needs nothing new: :class:`~reduced_dynamics.BayesRidge` with
:math:`\lambda = \sigma^2 d` is the posterior mean for any Σ (the prior of β does not involve Σ).

The constructors agreed for issue 11 are :func:`precond_gd` and :func:`debiased_precond_gd`; they
return :class:`PrecondGD` and :class:`DebiasedPrecondGD`. Exact risks:
:mod:`reduced_dynamics.precond.exact`.

References
----------
docs/theory.md#non-isotropic-covariates
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from reduced_dynamics._validation import check_finite_array, check_finite_float
from reduced_dynamics.estimation.predictors import ETA_MAX, Predictor
from reduced_dynamics.estimation.prompts import Prompts

__all__ = ["PrecondGD", "DebiasedPrecondGD", "precond_gd", "debiased_precond_gd"]


def _check_prompts(prompts) -> Prompts:
    if not isinstance(prompts, Prompts):
        raise ValueError(f"`prompts` must be a reduced_dynamics.Prompts batch, got {type(prompts).__name__}")
    if not prompts.has_covariates:
        raise ValueError(
            "`prompts` must have covariates for a preconditioned predictor (not a statistics-only batch): "
            "its weights depend on X and x_q, not only on the scores"
        )
    return prompts


@dataclass(frozen=True, eq=False)
class _PrecondBase(Predictor):
    """Base of the preconditioned one-step GD predictors: a matrix ``P`` (d, d) and a scalar step ``eta``."""

    P: Any
    eta: Any
    uses_stats: ClassVar[bool] = False
    debiased: ClassVar[bool] = False

    def __post_init__(self):
        P = check_finite_array("P", self.P, ndim=2)
        if P.shape[0] != P.shape[1]:
            raise ValueError(f"`P` must be a square (d, d) matrix, got shape {P.shape}")
        if np.iscomplexobj(self.eta):
            raise ValueError("`eta` must be real, got a complex value")
        eta = check_finite_float("eta", self.eta)
        if abs(eta) > ETA_MAX:
            raise ValueError(f"`eta` must be a finite number with |eta| <= {ETA_MAX:g}, got {eta!r}")
        P = P.copy()
        P.setflags(write=False)
        object.__setattr__(self, "P", P)
        object.__setattr__(self, "eta", eta)

    def weights(self, prompts):
        """Smoother weights, shape ``(n, L)``: :math:`\\frac{\\eta}{L}(x_l - \\bar x)^\\top P x_q` (or without the centring)."""
        prompts = _check_prompts(prompts)
        X, xq = prompts.X, prompts.x_q
        d = X.shape[2]
        if self.P.shape != (d, d):
            raise ValueError(f"`P` has shape {self.P.shape} but the prompts have d = {d}")
        with np.errstate(over="ignore", invalid="ignore"):
            v = xq @ self.P.T  # (n, d): P x_q per prompt
            w = np.einsum("nld,nd->nl", X, v)
            if self.debiased:
                w -= w.mean(axis=1, keepdims=True)  # (x_l − x̄)ᵀ P x_q
            w *= self.eta / X.shape[1]
        with np.errstate(over="ignore", invalid="ignore"):
            total = float(np.sum(w))
        if not math.isfinite(total) and not np.all(np.isfinite(w)):
            raise ValueError("the weights of `P`, `eta` on these prompts overflow to non-finite values")
        return w


@dataclass(frozen=True, eq=False)
class PrecondGD(_PrecondBase):
    r"""Preconditioned one-step GD from zero: :math:`\hat y = \frac{\eta}{L}\sum_l y_l\, x_l^\top P x_q`.

    Parameters
    ----------
    P : array_like, shape (d, d)
        Preconditioner (stored read-only).
    eta : float, |eta| <= 1e12
        Step.

    References
    ----------
    docs/theory.md#non-isotropic-covariates
    """

    name: ClassVar[str] = "precond_gd"
    debiased: ClassVar[bool] = False


@dataclass(frozen=True, eq=False)
class DebiasedPrecondGD(_PrecondBase):
    r"""Debiased preconditioned one-step GD: :math:`\hat y = \frac{\eta}{L}\sum_l y_l\, (x_l - \bar x)^\top P x_q`.

    The predictor the multi-head model approximates under :math:`x \sim N(0, \Sigma)` (KQ blocks
    :math:`\pm\gamma\Omega`, :math:`P \propto \Omega`).

    Parameters
    ----------
    P : array_like, shape (d, d)
        Preconditioner (stored read-only).
    eta : float, |eta| <= 1e12
        Step.

    References
    ----------
    docs/theory.md#non-isotropic-covariates

    Examples
    --------
    >>> import numpy as np
    >>> from reduced_dynamics import Setting, sample_prompts
    >>> s = Setting(d=3, L=10, sigma2=0.1, Sigma=np.diag([0.5, 1.0, 2.0]))
    >>> p = sample_prompts(4, s, seed=0)
    >>> debiased_precond_gd(np.linalg.inv(s.Sigma), 0.8)(p).shape
    (4,)
    """

    name: ClassVar[str] = "debiased_precond_gd"
    debiased: ClassVar[bool] = True


def precond_gd(P, eta) -> PrecondGD:
    """Preconditioned one-step GD with matrix ``P`` (d, d) and step ``eta`` (:class:`PrecondGD`).

    Parameters
    ----------
    P : array_like, shape (d, d)
    eta : float

    Returns
    -------
    PrecondGD
    """
    return PrecondGD(P, eta)


def debiased_precond_gd(P, eta) -> DebiasedPrecondGD:
    """Debiased preconditioned one-step GD with matrix ``P`` (d, d) and step ``eta`` (:class:`DebiasedPrecondGD`).

    Parameters
    ----------
    P : array_like, shape (d, d)
    eta : float

    Returns
    -------
    DebiasedPrecondGD
    """
    return DebiasedPrecondGD(P, eta)
