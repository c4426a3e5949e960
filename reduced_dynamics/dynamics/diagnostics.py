r"""Pattern diagnostics of a reduced state or trajectory (docs/theory.md#emergent-patterns, #gradient-flow).

All functions are vectorised over a leading time/batch axis: ``omega, mu`` of
shape ``(T, H)`` (or ``(H,)``).

Definitions (tolerances in :class:`StageTolerances`):

- **dummy head**: ``|ω_h| ≤ dummy·max_k|ω_k|`` and ``|μ_h| ≤ dummy·max_k|μ_k|``;
- **sign matching**: every non-dummy head has ``sign ω_h = sign μ_h``;
- **zero-sum OV**: ``|Σμ| / Σ|μ| < zero_sum``;
- **homogeneous KQ**: ``(max − min)/mean`` of ``|ω_h|`` over non-dummy heads ``< homogeneous``;
- **γ**: mean ``|ω_h|`` over non-dummy heads;
- **manifold gap**: ``|M₊ − μ_γ(γ)| / μ_γ(γ)`` and ``|M₋ + μ_γ(γ)| / μ_γ(γ)`` with ``M₊ = Σ_{μ_h>0} μ_h``,
  ``M₋ = Σ_{μ_h<0} μ_h``.

A *stage time* is the first output time from which the pattern holds at every
later output time of the run (so a pattern that holds by chance at
initialisation and is lost again does not count).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reduced_dynamics._validation import check_probability

__all__ = ["StageTolerances", "trajectory_diagnostics", "stage_times", "manifold_gap"]


@dataclass(frozen=True)
class StageTolerances:
    """Tolerances of the pattern diagnostics (each in (0, 1)).

    Attributes
    ----------
    dummy : float
        Relative size below which a head is a dummy (default 0.1).
    zero_sum : float
        Threshold of ``|Σμ|/Σ|μ|`` (default 0.05).
    homogeneous : float
        Threshold of the relative spread of ``|ω_h|`` (default 0.05).
    """

    dummy: float = 0.1
    zero_sum: float = 0.05
    homogeneous: float = 0.05

    def __post_init__(self):
        for name in ("dummy", "zero_sum", "homogeneous"):
            check_probability(f"tolerances.{name}", getattr(self, name))


def _dummy_mask(omega, mu, tol):
    aw, am = np.abs(omega), np.abs(mu)
    mw = np.max(aw, axis=-1, keepdims=True)
    mm = np.max(am, axis=-1, keepdims=True)
    return (aw <= tol * mw) & (am <= tol * mm)


def trajectory_diagnostics(omega, mu, tolerances: StageTolerances | None = None) -> dict[str, np.ndarray]:
    """Per-time diagnostics of a trajectory.

    Parameters
    ----------
    omega, mu : ndarray, shape (T, H) or (H,)
    tolerances : StageTolerances, optional

    Returns
    -------
    dict of ndarray, each shape (T,) (or scalar arrays for a single state)
        ``gamma, eta_eff, sum_mu, zero_sum_ratio, homogeneity, sign_matched,
        zero_sum, homogeneous, n_dummy, n_positive, n_negative``.
    """
    tol = tolerances or StageTolerances()
    omega = np.asarray(omega, dtype=np.float64)
    mu = np.asarray(mu, dtype=np.float64)
    dummy = _dummy_mask(omega, mu, tol.dummy)
    active = ~dummy
    aw = np.abs(omega)
    n_active = np.maximum(np.sum(active, axis=-1), 1)
    gamma = np.sum(np.where(active, aw, 0.0), axis=-1) / n_active
    wmax = np.max(np.where(active, aw, -np.inf), axis=-1)
    wmin = np.min(np.where(active, aw, np.inf), axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        homogeneity = np.where(gamma > 0, (wmax - wmin) / gamma, np.inf)
        abs_sum = np.sum(np.abs(mu), axis=-1)
        sum_mu = np.sum(mu, axis=-1)
        zsr = np.where(abs_sum > 0, np.abs(sum_mu) / abs_sum, np.inf)
    matched = np.all(np.where(active, np.sign(omega) == np.sign(mu), True), axis=-1)
    pos = np.sum(active & (mu > 0), axis=-1)
    neg = np.sum(active & (mu < 0), axis=-1)
    return {
        "gamma": gamma,
        "eta_eff": np.sum(omega * mu, axis=-1),
        "sum_mu": sum_mu,
        "zero_sum_ratio": zsr,
        "homogeneity": homogeneity,
        "sign_matched": matched,
        "zero_sum": zsr < tol.zero_sum,
        "homogeneous": homogeneity < tol.homogeneous,
        "n_dummy": np.sum(dummy, axis=-1),
        "n_positive": pos,
        "n_negative": neg,
    }


def _first_time_holding_to_end(t, flags) -> float | None:
    flags = np.asarray(flags, dtype=bool)
    if flags.size == 0 or not flags[-1]:
        return None
    bad = np.nonzero(~flags)[0]
    idx = 0 if bad.size == 0 else bad[-1] + 1
    return float(t[idx])


def stage_times(t, omega, mu, tolerances: StageTolerances | None = None) -> dict[str, float | None]:
    """Times from which sign matching, zero-sum OV and homogeneous |ω| hold to the end.

    Parameters
    ----------
    t : ndarray, shape (T,)
    omega, mu : ndarray, shape (T, H)
    tolerances : StageTolerances, optional

    Returns
    -------
    dict
        ``{"sign_matching": t1, "zero_sum": t2, "homogeneous": t3}``; ``None``
        for a pattern that does not hold at the end of the run.
    """
    diag = trajectory_diagnostics(omega, mu, tolerances)
    return {
        "sign_matching": _first_time_holding_to_end(t, diag["sign_matched"]),
        "zero_sum": _first_time_holding_to_end(t, diag["zero_sum"]),
        "homogeneous": _first_time_holding_to_end(t, diag["homogeneous"]),
    }


def manifold_gap(omega, mu, *, d, L, sigma2, tolerances: StageTolerances | None = None):
    """Relative distance of a state's OV masses from the solution manifold S_γ.

    Parameters
    ----------
    omega, mu : ndarray, shape (H,) or (T, H)
    d, L, sigma2 : problem constants

    Returns
    -------
    dict
        ``gamma``, ``mu_gamma`` (prediction), ``M_plus``, ``M_minus`` (measured)
        and ``gap`` = max of the two relative gaps.
    """
    from reduced_dynamics.dynamics.manifold import mu_gamma

    diag = trajectory_diagnostics(omega, mu, tolerances)
    mu = np.asarray(mu, dtype=np.float64)
    gamma = np.asarray(diag["gamma"])
    mg = mu_gamma(np.maximum(gamma, 1e-300), d=d, L=L, sigma2=sigma2)
    m_plus = np.sum(np.where(mu > 0, mu, 0.0), axis=-1)
    m_minus = np.sum(np.where(mu < 0, mu, 0.0), axis=-1)
    gap = np.maximum(np.abs(m_plus - mg), np.abs(m_minus + mg)) / mg
    return {"gamma": gamma, "mu_gamma": mg, "M_plus": m_plus, "M_minus": m_minus, "gap": gap}
