r"""Pattern diagnostics of a reduced state or trajectory (docs/theory.md#emergent-patterns, #gradient-flow).

All functions are vectorised over a leading time/batch axis: ``omega, mu`` of
shape ``(T, H)`` (or ``(H,)``).

Definitions (tolerances in :class:`StageTolerances`):

- **dummy head**: ``|ω_h| ≤ dummy·max_k|ω_k|`` and ``|μ_h| ≤ dummy·max_k|μ_k|``;
- **sign matching**: every non-dummy head has ``sign ω_h = sign μ_h``;
- **zero-sum OV**: ``|Σμ| / Σ|μ| < zero_sum``; the ratio is defined as 0 at ``μ = 0`` (where
  ``Σμ = 0`` exactly), so it is always finite, in ``[0, 1]``;
- **homogeneous KQ**: ``(max − min)/mean`` of ``|ω_h|`` over non-dummy heads ``< homogeneous``;
  defined as 0 when γ = 0 (all ``|ω_h|`` equal 0), so it is always finite;
- **γ**: mean ``|ω_h|`` over non-dummy heads;
- **manifold gap**: ``|M₊ − μ_γ(γ)| / μ_γ(γ)`` and ``|M₋ − μ_γ(γ)| / μ_γ(γ)`` with the positive and
  negative OV masses ``M₊ = Σ_{μ_h>0} μ_h`` and ``M₋ = −Σ_{μ_h<0} μ_h`` (both >= 0).

A *stage time* is the first output time from which the pattern holds at every
later output time of the run (so a pattern that holds by chance at
initialisation and is lost again does not count).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reduced_dynamics._results import FrozenResult
from reduced_dynamics._validation import check_finite_array, check_probability
from reduced_dynamics.setting import as_setting

__all__ = [
    "StageTolerances",
    "TrajectoryDiagnostics",
    "StageTimes",
    "ManifoldGap",
    "trajectory_diagnostics",
    "stage_times",
    "manifold_gap",
]


@dataclass(frozen=True)
class StageTolerances:
    """Tolerances of the pattern diagnostics (each in (0, 1)); a configuration, not a result.

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

    def to_dict(self) -> dict:
        """The three tolerances as a JSON-friendly dict."""
        return {"dummy": self.dummy, "zero_sum": self.zero_sum, "homogeneous": self.homogeneous}


def _tolerances(tolerances) -> StageTolerances:
    if tolerances is None:
        return StageTolerances()
    if not isinstance(tolerances, StageTolerances):
        raise TypeError(f"`tolerances` must be a StageTolerances or None, got {tolerances!r}")
    return tolerances


def _dummy_mask(omega, mu, tol):
    aw, am = np.abs(omega), np.abs(mu)
    mw = np.max(aw, axis=-1, keepdims=True)
    mm = np.max(am, axis=-1, keepdims=True)
    return (aw <= tol * mw) & (am <= tol * mm)


def _scalarise(value):
    """0-d arrays -> Python scalars (float, int or bool); arrays unchanged."""
    value = np.asarray(value)
    if value.ndim:
        return value
    return value.item()


def _pair(omega, mu):
    from reduced_dynamics.dynamics.loss import _state_pair

    return _state_pair(omega, mu)


@dataclass(frozen=True)
class TrajectoryDiagnostics(FrozenResult):
    """Per-time pattern diagnostics of a state or trajectory (:func:`trajectory_diagnostics`).

    Every field has shape ``(...)``, the leading shape of the state (``(T,)``
    for a trajectory of T times); for a single state of shape ``(H,)`` the
    fields are Python scalars. Definitions in the module docstring.

    Attributes
    ----------
    gamma : float or ndarray
        γ, mean ``|ω_h|`` over non-dummy heads.
    eta_eff : float or ndarray
        Effective step ``μᵀω``.
    sum_mu : float or ndarray
        ``Σ_h μ_h``.
    zero_sum_ratio : float or ndarray
        ``|Σμ| / Σ|μ|`` in [0, 1]; 0 when μ = 0 (then Σμ = 0 exactly).
    homogeneity : float or ndarray
        ``(max − min)/mean`` of ``|ω_h|`` over non-dummy heads; 0 when γ = 0.
    sign_matched : bool or ndarray of bool
        Every non-dummy head has ``sign ω_h = sign μ_h``.
    zero_sum : bool or ndarray of bool
        ``zero_sum_ratio < tolerances.zero_sum``.
    homogeneous : bool or ndarray of bool
        ``homogeneity < tolerances.homogeneous``.
    n_dummy : int or ndarray of int
        Number of dummy heads.
    n_positive : int or ndarray of int
        Number p of non-dummy heads with ``μ_h > 0``.
    n_negative : int or ndarray of int
        Number n of non-dummy heads with ``μ_h < 0``.
    """

    gamma: float | np.ndarray
    eta_eff: float | np.ndarray
    sum_mu: float | np.ndarray
    zero_sum_ratio: float | np.ndarray
    homogeneity: float | np.ndarray
    sign_matched: bool | np.ndarray
    zero_sum: bool | np.ndarray
    homogeneous: bool | np.ndarray
    n_dummy: int | np.ndarray
    n_positive: int | np.ndarray
    n_negative: int | np.ndarray


def trajectory_diagnostics(omega, mu, *, tolerances: StageTolerances | None = None) -> TrajectoryDiagnostics:
    """Per-time diagnostics of a state or a trajectory.

    Parameters
    ----------
    omega, mu : array_like, shape (..., H)
        A state ``(H,)`` or a trajectory ``(T, H)`` (any leading axes;
        ``omega`` and ``mu`` broadcast over them).
    tolerances : StageTolerances, optional
        Defaults to ``StageTolerances()``.

    Returns
    -------
    TrajectoryDiagnostics
        Fields of shape ``(...)``; Python scalars for a single state.

    References
    ----------
    docs/theory.md#emergent-patterns
    """
    tol = _tolerances(tolerances)
    omega, mu = _pair(omega, mu)
    dummy = _dummy_mask(omega, mu, tol.dummy)
    active = ~dummy
    aw = np.abs(omega)
    n_active = np.maximum(np.sum(active, axis=-1), 1)
    wmax = np.max(np.where(active, aw, -np.inf), axis=-1)
    wmin = np.min(np.where(active, aw, np.inf), axis=-1)
    with np.errstate(all="ignore"):  # overflow is turned into a ValueError below
        gamma = np.sum(np.where(active, aw, 0.0), axis=-1) / n_active
        homogeneity = np.where(gamma > 0, (wmax - wmin) / np.where(gamma > 0, gamma, 1.0), 0.0)
        scale = np.max(np.abs(mu), axis=-1, keepdims=True)  # scaled sums cannot overflow
        mu_s = mu / np.where(scale > 0, scale, 1.0)
        abs_sum = np.sum(np.abs(mu_s), axis=-1)
        zsr = np.where(abs_sum > 0, np.abs(np.sum(mu_s, axis=-1)) / np.where(abs_sum > 0, abs_sum, 1.0), 0.0)
        sum_mu = np.sum(mu, axis=-1)
        eta_eff = np.sum(omega * mu, axis=-1)
    if not (np.all(np.isfinite(gamma)) and np.all(np.isfinite(sum_mu)) and np.all(np.isfinite(eta_eff))):
        raise ValueError("`omega` and `mu` are too large: Σμ, μᵀω or γ overflow float64")
    if not np.all(np.isfinite(homogeneity)):
        raise ValueError("`omega` is too large: the spread of |ω_h| overflows float64")
    matched = np.all(np.where(active, np.sign(omega) == np.sign(mu), True), axis=-1)
    pos = np.sum(active & (mu > 0), axis=-1)
    neg = np.sum(active & (mu < 0), axis=-1)
    return TrajectoryDiagnostics(
        gamma=_scalarise(gamma),
        eta_eff=_scalarise(eta_eff),
        sum_mu=_scalarise(sum_mu),
        zero_sum_ratio=_scalarise(zsr),
        homogeneity=_scalarise(homogeneity),
        sign_matched=_scalarise(matched),
        zero_sum=_scalarise(zsr < tol.zero_sum),
        homogeneous=_scalarise(homogeneity < tol.homogeneous),
        n_dummy=_scalarise(np.sum(dummy, axis=-1)),
        n_positive=_scalarise(pos),
        n_negative=_scalarise(neg),
    )


def _first_time_holding_to_end(t, flags) -> float | None:
    flags = np.atleast_1d(np.asarray(flags, dtype=bool))
    if flags.size == 0 or not flags[-1]:
        return None
    bad = np.nonzero(~flags)[0]
    idx = 0 if bad.size == 0 else bad[-1] + 1
    return float(t[idx])


@dataclass(frozen=True)
class StageTimes(FrozenResult):
    """Times from which each pattern holds at every later output time of the run (:func:`stage_times`).

    Attributes
    ----------
    sign_matching : float or None
        Sign matching ``sign ω_h = sign μ_h`` of the non-dummy heads.
    zero_sum : float or None
        Zero-sum OV ``|Σμ|/Σ|μ| < tolerances.zero_sum``.
    homogeneous : float or None
        Homogeneous KQ ``(max − min)/mean |ω_h| < tolerances.homogeneous``.

    ``None`` for a pattern that does not hold at the end of the run.
    ``to_dict()`` gives ``{"sign_matching": .., "zero_sum": .., "homogeneous": ..}``.
    """

    sign_matching: float | None
    zero_sum: float | None
    homogeneous: float | None

    @property
    def all_reached(self) -> bool:
        """True when every pattern holds at the end of the run."""
        return None not in (self.sign_matching, self.zero_sum, self.homogeneous)


def stage_times(t, omega, mu, *, tolerances: StageTolerances | None = None) -> StageTimes:
    """Times from which sign matching, zero-sum OV and homogeneous |ω| hold to the end.

    Parameters
    ----------
    t : array_like, shape (T,)
        Output times.
    omega, mu : array_like, shape (T, H)
    tolerances : StageTolerances, optional

    Returns
    -------
    StageTimes

    References
    ----------
    docs/theory.md#stages
    """
    diag = trajectory_diagnostics(omega, mu, tolerances=tolerances)
    t = np.atleast_1d(check_finite_array("t", t))
    if t.shape != np.atleast_1d(diag.gamma).shape:
        raise ValueError(
            f"`t` must have one entry per state of the trajectory, got {t.shape} for states of shape {np.shape(omega)}"
        )
    return StageTimes(
        sign_matching=_first_time_holding_to_end(t, diag.sign_matched),
        zero_sum=_first_time_holding_to_end(t, diag.zero_sum),
        homogeneous=_first_time_holding_to_end(t, diag.homogeneous),
    )


@dataclass(frozen=True)
class ManifoldGap(FrozenResult):
    """Distance of a state's OV masses from the solution manifold S_γ (:func:`manifold_gap`).

    Sign convention: both masses are reported as non-negative numbers,
    ``M_plus = Σ_{μ_h>0} μ_h`` and ``M_minus = −Σ_{μ_h<0} μ_h``; on S_γ both
    equal ``mu_gamma``.

    Attributes
    ----------
    gamma : float or ndarray, shape (...)
        γ of the state (mean ``|ω_h|`` over non-dummy heads).
    mu_gamma : float or ndarray, shape (...)
        The predicted mass μ_γ(γ) of each sign.
    M_plus : float or ndarray, shape (...)
        Measured positive OV mass (>= 0).
    M_minus : float or ndarray, shape (...)
        Measured negative OV mass, as a magnitude (>= 0).
    gap : float or ndarray, shape (...)
        ``max(|M_plus − mu_gamma|, |M_minus − mu_gamma|) / mu_gamma`` (finite:
        :func:`manifold_gap` raises where ``mu_gamma`` is 0 or infinite).

    Floats for a single state ``(H,)``, arrays of the leading shape otherwise.
    """

    gamma: float | np.ndarray
    mu_gamma: float | np.ndarray
    M_plus: float | np.ndarray
    M_minus: float | np.ndarray
    gap: float | np.ndarray


def manifold_gap(omega, mu, setting, *, tolerances: StageTolerances | None = None) -> ManifoldGap:
    """Relative distance of a state's OV masses from the solution manifold S_γ.

    Parameters
    ----------
    omega, mu : array_like, shape (..., H)
        A state ``(H,)`` or trajectory ``(T, H)``.
    setting : Setting
        May be array-valued (broadcasts against the leading axes).
    tolerances : StageTolerances, optional
        Used to tell dummy heads apart (for γ).

    Returns
    -------
    ManifoldGap
        ``gamma``, ``mu_gamma`` (prediction), ``M_plus``, ``M_minus`` (measured,
        both >= 0) and ``gap``.

    Raises
    ------
    ValueError
        A state with γ = 0 (μ_γ is infinite there), or with ``d γ² > ~700`` (μ_γ underflows to 0),
        or OV masses that overflow.

    References
    ----------
    docs/theory.md#solution-manifold
    """
    from reduced_dynamics.dynamics.manifold import mu_gamma

    setting = as_setting(setting)
    omega, mu = _pair(omega, mu)
    diag = trajectory_diagnostics(omega, mu, tolerances=tolerances)
    gamma = np.asarray(diag.gamma, dtype=np.float64)
    if np.any(gamma <= 0):
        raise ValueError(
            "`omega` must have γ > 0 (a non-dummy head with ω_h != 0) for manifold_gap: μ_γ(0) is infinite"
        )
    with np.errstate(all="ignore"):  # non-finite values are turned into a ValueError below
        mg = np.asarray(mu_gamma(gamma, setting))
        m_plus = np.sum(np.where(mu > 0, mu, 0.0), axis=-1)
        m_minus = -np.sum(np.where(mu < 0, mu, 0.0), axis=-1)
        gap = np.maximum(np.abs(m_plus - mg), np.abs(m_minus - mg)) / mg
    if not (np.all(mg > 0) and np.all(np.isfinite(mg))):
        raise ValueError(
            "`omega` is outside the range of manifold_gap: μ_γ(γ) underflows to 0 for d·γ² > ~700 "
            f"(largest γ = {float(np.max(gamma)):.4g})"
        )
    if not (np.all(np.isfinite(gap)) and np.all(np.isfinite(m_plus)) and np.all(np.isfinite(m_minus))):
        raise ValueError("`mu` is too large: the OV masses overflow float64")
    return ManifoldGap(
        gamma=_scalarise(np.broadcast_to(gamma, gap.shape)),
        mu_gamma=_scalarise(mg),
        M_plus=_scalarise(np.broadcast_to(m_plus, gap.shape)),
        M_minus=_scalarise(np.broadcast_to(m_minus, gap.shape)),
        gap=_scalarise(gap),
    )
