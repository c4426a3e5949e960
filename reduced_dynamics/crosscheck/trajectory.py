r"""How far a measured (ω, μ) trajectory is from a reference one (docs/theory.md#gradient-flow).

:func:`trajectory_discrepancy` compares, e.g., the (ω, μ) extracted along SGD
with a reference flow (a :class:`~reduced_dynamics.flow.Flow` of
:func:`reduced_dynamics.crosscheck.preconditioned_flow` or
:func:`reduced_dynamics.crosscheck.mc_flow`) at the same times.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from reduced_dynamics._results import FrozenResult
from reduced_dynamics._validation import check_finite_array
from reduced_dynamics.estimation.predictors import _real

__all__ = ["TrajectoryDiscrepancy", "trajectory_discrepancy"]


@dataclass(frozen=True)
class TrajectoryDiscrepancy(FrozenResult):
    r"""Relative discrepancy of a measured trajectory ``a`` from a reference ``b`` (:func:`trajectory_discrepancy`).

    Every relative difference is divided by the reference's value at the same time.

    Attributes
    ----------
    gamma_max, gamma_final : float
        ``|γ_a − γ_b| / γ_b`` (γ = mean_h |ω_h|): maximum over times, and at the last time.
    eta_max, eta_final : float
        ``|η_a − η_b| / |η_b|`` (η = μᵀω): maximum over times, and at the last time.
    omega_max, omega_final : ndarray, shape (H,)
        Per head ``|ω_a − ω_b| / |ω_b|``: maximum over times, and at the last time.
    mu_max, mu_final : ndarray, shape (H,)
        Per head ``|μ_a − μ_b| / |μ_b|``: maximum over times, and at the last time.
    motion : float
        ``max_t ‖θ_ref(t) − θ_ref(0)‖`` (θ = (ω, μ)): how far the reference moved.
    unexplained : float
        ``max_t ‖θ_a − θ_b‖ / motion``: the part of the reference's motion that
        ``a`` does not reproduce; 0 for a perfect match, about 1 if ``a`` did
        not move; ``inf`` if the reference did not move.
    """

    gamma_max: float
    gamma_final: float
    eta_max: float
    eta_final: float
    omega_max: np.ndarray
    omega_final: np.ndarray
    mu_max: np.ndarray
    mu_final: np.ndarray
    motion: float
    unexplained: float


def trajectory_discrepancy(omega_a, mu_a, omega_b, mu_b, *, omega_ref=None, mu_ref=None) -> TrajectoryDiscrepancy:
    r"""Discrepancy between two (ω, μ) trajectories ``a`` (measured) and ``b`` (reference).

    Parameters
    ----------
    omega_a, mu_a : array_like, shape (T, H)
        The measured trajectory (e.g. the (ω, μ) extracted along SGD).
    omega_b, mu_b : array_like, shape (T, H)
        The reference trajectory at the same times (e.g. a flow).
    omega_ref, mu_ref : array_like, shape (T, H), optional
        The trajectory whose motion normalises ``unexplained`` (default: ``b``);
        used to compare several references against one common motion.

    Returns
    -------
    TrajectoryDiscrepancy

    Examples
    --------
    >>> w = np.array([[0.1, -0.1], [0.2, -0.2]]); m = np.array([[1.0, -1.0], [1.5, -1.5]])
    >>> trajectory_discrepancy(w, m, w, m).unexplained
    0.0
    """
    names = ("omega_a", "mu_a", "omega_b", "mu_b")
    wa, ma, wb, mb = (
        np.atleast_2d(check_finite_array(k, _real(k, a))) for k, a in zip(names, (omega_a, mu_a, omega_b, mu_b))
    )
    if not (wa.shape == ma.shape == wb.shape == mb.shape):
        raise ValueError(
            f"`omega_a`, `mu_a`, `omega_b`, `mu_b` must have equal shapes (T, H), got "
            f"{wa.shape}, {ma.shape}, {wb.shape}, {mb.shape}"
        )
    wr = wb if omega_ref is None else np.atleast_2d(check_finite_array("omega_ref", _real("omega_ref", omega_ref)))
    mr = mb if mu_ref is None else np.atleast_2d(check_finite_array("mu_ref", _real("mu_ref", mu_ref)))
    if np.any(np.abs(wb).mean(1) == 0) or np.any(np.sum(wb * mb, 1) == 0) or np.any(wb == 0) or np.any(mb == 0):
        raise ValueError("`omega_b`, `mu_b` must be nonzero: the discrepancies are relative to the reference")
    ga, gb = np.abs(wa).mean(1), np.abs(wb).mean(1)
    ea, eb = np.sum(wa * ma, 1), np.sum(wb * mb, 1)
    rel_gamma = np.abs(ga - gb) / gb
    rel_eta = np.abs(ea - eb) / np.abs(eb)
    rel_omega = np.abs(wa - wb) / np.abs(wb)
    rel_mu = np.abs(ma - mb) / np.abs(mb)
    dev = np.sqrt(np.sum((wa - wb) ** 2 + (ma - mb) ** 2, axis=1))
    motion = float(np.sqrt(np.sum((wr - wr[0]) ** 2 + (mr - mr[0]) ** 2, axis=1)).max())
    return TrajectoryDiscrepancy(
        gamma_max=float(rel_gamma.max()),
        gamma_final=float(rel_gamma[-1]),
        eta_max=float(rel_eta.max()),
        eta_final=float(rel_eta[-1]),
        omega_max=rel_omega.max(axis=0),
        omega_final=rel_omega[-1].copy(),
        mu_max=rel_mu.max(axis=0),
        mu_final=rel_mu[-1].copy(),
        motion=motion,
        unexplained=float(dev.max() / motion) if motion > 0 else math.inf,
    )
