r"""Phase-portrait analysis of the reduced (ω, μ) gradient flow (docs/theory.md#gradient-flow).

The dynamics behind the portraits drawn by :mod:`reduced_dynamics.plots.portrait`:

**Two-head symmetric plane.** For ``H = 2`` the plane
:math:`P = \{\omega = (\gamma, -\gamma),\ \mu = (m, -m)\}` is invariant under the
flow :math:`\dot\theta = -\nabla\tilde L(\theta)`. On :math:`P`
(:math:`E = e^{\circ d\omega\omega^\top}` has :math:`E_{11}=E_{22}=e^{d\gamma^2}`,
:math:`E_{12}=e^{-d\gamma^2}`, :math:`c = (1+\sigma^2)/L`),

.. math::

    \partial_{\omega_1}\tilde L = -\partial_{\omega_2}\tilde L
        = 2m\,\big(2\gamma m - 1 + 2cd\,\gamma m\cosh(d\gamma^2)\big), \\
    \partial_{\mu_1}\tilde L = -\partial_{\mu_2}\tilde L
        = 2\,\big((2\gamma m - 1)\gamma + 2cm\sinh(d\gamma^2)\big),

so the gradient lies in :math:`P` and, with :math:`\theta = (\gamma, -\gamma, m, -m)`,
:math:`\dot\gamma = \dot\omega_1 = -\partial_{\omega_1}\tilde L` and
:math:`\dot m = \dot\mu_1 = -\partial_{\mu_1}\tilde L`. Equivalently, with the
restricted loss :math:`\ell(\gamma, m) = \tilde L(\gamma, -\gamma, m, -m)
= 1 + \sigma^2 - 4\gamma m + 4\gamma^2 m^2 + 4cm^2\sinh(d\gamma^2)`,

.. math:: \dot\gamma = -\tfrac12\,\partial_\gamma\ell, \qquad \dot m = -\tfrac12\,\partial_m\ell .

Nullclines: :math:`\dot m = 0` exactly on the solution-manifold curve
:math:`m = \mu_\gamma(\gamma) = \gamma / (2(\gamma^2 + c\sinh d\gamma^2))`;
:math:`\dot\gamma = 0` on :math:`m = 0` and on
:math:`m = 1/(2\gamma(1 + cd\cosh d\gamma^2))`. The two curves meet only as
:math:`\gamma\to0` (``tanh x = x`` only at ``x = 0``): no finite fixed point, the
flow drifts along the narrow channel between them.

The *single-head-like line* drawn in the plane is the orthogonal projection of
the one-head-off family :math:`\{\omega = (w, 0),\ \mu = (\mu_1^*(w), 0)\}`,
:math:`\mu_1^*(w) = w / (w^2 + c e^{dw^2})` (the best OV value of a lone head
with KQ scale ``w``), i.e. :math:`(\gamma, m) = (w/2, \mu_1^*(w)/2)`; it ends at the
projection of the H = 1 optimum :math:`w = 1/\sqrt d`.

**Slow drift.** Along the channel, a slow-manifold expansion gives, for ``p``
positive and ``n`` negative non-dummy heads (``H' = p + n``),

.. math::

    \gamma(t) \simeq \big(16\,c\,d^3\,(pn/H')\,t\big)^{-1/6}, \qquad
    \eta^* - \eta_{\rm eff} \simeq \tfrac12\,\eta^{*2} c\, d^3 \gamma^4 ,

(the second is 3× the on-manifold gap :math:`\eta^* - 2\gamma\mu_\gamma \simeq
\eta^{*2} c d^3\gamma^4/6`, because the state lags behind ``S_γ`` by
:math:`\delta m \simeq -\eta^{*2} c d^3 \gamma^3/6`); both are checked against
the integrator in :mod:`reduced_dynamics.figures.drift`.

References
----------
docs/theory.md#reduced-model, docs/theory.md#gradient-flow, docs/theory.md#solution-manifold, docs/theory.md#drift-law; He, Pan, Chen, Yang (ICML 2025), Section 4.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from reduced_dynamics._results import FrozenResult
from reduced_dynamics._validation import (
    check_finite_array,
    check_nonnegative_int,
    check_positive_float,
    check_positive_int,
)
from reduced_dynamics.dynamics.manifold import drift_law_gamma, eta_star, inf_loss, mu_gamma, single_head_optimum
from reduced_dynamics.flow._integrate import N_TIMES_MAX as N_EVAL_MAX
from reduced_dynamics.flow._integrate import T_END_MAX
from reduced_dynamics.models._heads import N_HEADS_MAX, initial_state
from reduced_dynamics.setting import as_setting

__all__ = [
    "PortraitData",
    "PlaneState",
    "PlanePoint",
    "PlaneVelocity",
    "embed_plane",
    "project_plane",
    "plane_loss",
    "plane_vector_field",
    "gamma_nullcline",
    "single_head_line",
    "two_head_portrait_data",
    "general_portrait_data",
]


@dataclasses.dataclass(frozen=True, eq=False)
class PortraitData(FrozenResult, Mapping):
    """Everything a phase portrait draws, as a read-only mapping of arrays (what its ``.npz`` holds).

    ``data["traj_gamma"]`` etc.; the keys are listed by the function that made it
    (:func:`two_head_portrait_data`, :func:`general_portrait_data`).

    Attributes
    ----------
    kind : str
        ``"two_head"`` or ``"general"``.
    arrays : dict of str to ndarray or scalar
        The data (arrays read-only).
    """

    kind: str
    arrays: dict

    def __getitem__(self, key: str) -> Any:
        return self.arrays[key]

    def __iter__(self):
        return iter(self.arrays)

    def __len__(self) -> int:
        return len(self.arrays)


@dataclasses.dataclass(frozen=True)
class PlaneState(FrozenResult):
    """A two-head state ``ω = (γ, −γ)``, ``μ = (m, −m)`` on the symmetric plane.

    Attributes
    ----------
    omega, mu : ndarray, shape (..., 2)
        KQ scales and OV values of the two heads.
    """

    omega: np.ndarray
    mu: np.ndarray


@dataclasses.dataclass(frozen=True)
class PlanePoint(FrozenResult):
    """Coordinates ``(γ, m)`` on the symmetric plane.

    Attributes
    ----------
    gamma, m : ndarray, shape (...)
        KQ scale of head 1 (head 2 has ``−γ``) and OV value of head 1 (head 2 has ``−m``).
    """

    gamma: np.ndarray
    m: np.ndarray


@dataclasses.dataclass(frozen=True)
class PlaneVelocity(FrozenResult):
    """The flow's velocity ``(γ̇, ṁ)`` on the symmetric plane.

    Attributes
    ----------
    dgamma, dm : ndarray, shape (...)
        Time derivatives of ``γ`` and ``m``.
    """

    dgamma: np.ndarray
    dm: np.ndarray


def _coords(setting, **arrays):
    """Validated finite real arrays (ValueError naming each), checked to broadcast with the setting."""
    out = [check_finite_array(name, value) for name, value in arrays.items()]
    try:
        np.broadcast_shapes(*(a.shape for a in out), () if setting is None else as_setting(setting).shape)
    except ValueError:
        names = ", ".join(f"`{n}`" for n in arrays)
        shapes = ", ".join(str(a.shape) for a in out)
        raise ValueError(f"{names} and `setting` must broadcast together, got shapes {shapes}") from None
    return out


def _finite(result, names):
    """Raise a ValueError naming ``names`` if a closed form overflowed float64."""
    if not all(np.all(np.isfinite(r)) for r in result):
        raise ValueError(f"{names} too large: the result overflows float64; use a smaller window")
    return result


def _constants(setting):
    """``(d, c, sigma2)`` of a (possibly array-valued) setting as float arrays."""
    setting = as_setting(setting)
    return (
        np.asarray(setting.d, dtype=np.float64),
        np.asarray(setting.c, dtype=np.float64),
        np.asarray(setting.sigma2, dtype=np.float64),
    )


# ----------------------------------------------------------------------------- plane algebra
def embed_plane(gamma, m):
    """Map plane coordinates to the 4-D state ``ω = (γ, −γ)``, ``μ = (m, −m)``.

    Parameters
    ----------
    gamma, m : array_like, shape (...)

    Returns
    -------
    PlaneState
        ``omega, mu`` of shape ``(..., 2)``.
    """
    gamma, m = _coords(None, gamma=gamma, m=m)
    gamma, m = np.broadcast_arrays(gamma, m)
    return PlaneState(np.stack([gamma, -gamma], axis=-1), np.stack([m, -m], axis=-1))


def project_plane(omega, mu):
    """Orthogonal projection of 2-head states onto the symmetric plane.

    Parameters
    ----------
    omega, mu : array_like, shape (..., 2)

    Returns
    -------
    PlanePoint
        ``gamma = (ω₁ − ω₂)/2``, ``m = (μ₁ − μ₂)/2``, shape ``(...)``.
    """
    omega = check_finite_array("omega", omega, min_ndim=1)
    mu = check_finite_array("mu", mu, min_ndim=1)
    if omega.shape[-1] != 2 or mu.shape[-1] != 2:
        raise ValueError(f"`omega` and `mu` must have last axis 2 (two heads), got {omega.shape} and {mu.shape}")
    return PlanePoint(0.5 * (omega[..., 0] - omega[..., 1]), 0.5 * (mu[..., 0] - mu[..., 1]))


def plane_loss(gamma, m, setting):
    r""":math:`\tilde L` on the plane: :math:`\ell(\gamma, m) = 1+\sigma^2 - 4\gamma m + 4\gamma^2m^2 + 4cm^2\sinh(d\gamma^2)`.

    Parameters
    ----------
    gamma, m : array_like
        Plane coordinates (broadcast against each other and ``setting``).
    setting : Setting

    Returns
    -------
    ndarray
        Broadcast shape.

    References
    ----------
    docs/theory.md#approximate-loss
    """
    d, c, sigma2 = _constants(setting)
    g, m = _coords(setting, gamma=gamma, m=m)
    with np.errstate(all="ignore"):
        out = 1.0 + sigma2 - 4 * g * m + 4 * g * g * m * m + 4 * c * m * m * np.sinh(d * g * g)
    return _finite([out], "`gamma` or `m`")[0]


def plane_vector_field(gamma, m, setting):
    r"""Exact restriction of the flow to the symmetric plane: :math:`(\dot\gamma, \dot m)`.

    .. math::

        \dot\gamma = -2m\,(2\gamma m - 1 + 2cd\,\gamma m\cosh d\gamma^2), \qquad
        \dot m = -2\,\big((2\gamma m - 1)\gamma + 2cm\sinh d\gamma^2\big).

    Parameters
    ----------
    gamma, m : array_like, shape (...)
        Plane coordinates (broadcast against each other and ``setting``).
    setting : Setting

    Returns
    -------
    PlaneVelocity
        ``dgamma, dm`` of the broadcast shape.

    References
    ----------
    docs/theory.md#gradient-flow

    Examples
    --------
    >>> from reduced_dynamics.dynamics.portrait import plane_vector_field
    >>> from reduced_dynamics.setting import Setting
    >>> v = plane_vector_field(0.0, 0.5, Setting(d=5, L=40, sigma2=0.1))
    >>> float(v.dgamma), float(v.dm) == 0.0
    (1.0, True)
    """
    d, c, _ = _constants(setting)
    g, m = _coords(setting, gamma=gamma, m=m)
    with np.errstate(all="ignore"):
        x = d * g * g
        u = 2 * g * m
        dg = -2 * m * (u - 1 + 2 * c * d * g * m * np.cosh(x))
        dm = -2 * ((u - 1) * g + 2 * c * m * np.sinh(x))
    dg, dm = _finite([dg, dm], "`gamma` or `m`")
    return PlaneVelocity(dg, dm)


def gamma_nullcline(gamma, setting):
    r"""Non-trivial branch of :math:`\dot\gamma = 0`: :math:`m = 1/(2\gamma(1 + cd\cosh d\gamma^2))` (γ ≠ 0).

    Parameters
    ----------
    gamma : array_like
        Non-zero KQ scales.
    setting : Setting

    Returns
    -------
    ndarray
        ``m`` on the nullcline, broadcast shape of ``gamma`` and ``setting``.

    References
    ----------
    docs/theory.md#gradient-flow
    """
    d, c, _ = _constants(setting)
    (g,) = _coords(setting, gamma=gamma)
    if np.any(g == 0):
        raise ValueError("`gamma` must be non-zero (the nullcline m = 1/(2γ(1 + cd cosh dγ²)) diverges at γ = 0)")
    with np.errstate(all="ignore"):
        out = 1.0 / (2 * g * (1 + c * d * np.cosh(d * g * g)))
    return _finite([out], "`gamma`")[0]


def single_head_line(w, setting):
    r"""Projection onto the plane of the one-head-off family ``ω = (w, 0), μ = (μ₁*(w), 0)``.

    :math:`\mu_1^*(w) = w/(w^2 + c e^{dw^2})` minimises the H = 1 loss at fixed ``w``.

    Parameters
    ----------
    w : array_like
        KQ scale of the one active head.
    setting : Setting

    Returns
    -------
    PlanePoint
        ``gamma = w/2``, ``m = μ₁*(w)/2``.

    References
    ----------
    docs/theory.md#single-head
    """
    d, c, _ = _constants(setting)
    (w,) = _coords(setting, w=w)
    # w/(w² + c e^{dw²}) = w e^{−dw²}/(w² e^{−dw²} + c): no overflow for large d w² (the value underflows to 0)
    with np.errstate(all="ignore"):
        decay = np.exp(-d * w * w)
        m = np.where(decay > 0, 0.5 * w * decay / (w * w * decay + c), 0.0)
    return PlanePoint(*_finite([0.5 * w, m], "`w`"))


def _check_range(name, value, *, positive=False):
    """Validate a ``(lo, hi)`` range given as a pair or the text ``"lo,hi"``."""
    if np.iscomplexobj(value):
        raise ValueError(f"`{name}` must be two real numbers 'lo,hi' with lo < hi, got {value!r}")
    if isinstance(value, str):
        try:
            value = [float(v) for v in value.replace(",", " ").split()]
        except ValueError:
            raise ValueError(f"`{name}` must be two numbers 'lo,hi' with lo < hi, got {value!r}") from None
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"`{name}` must be two numbers 'lo,hi' with lo < hi, got {value!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"`{name}` must be two finite numbers 'lo,hi' with lo < hi, got {value!r}")
    if positive and lo <= 0:
        raise ValueError(f"`{name}` must satisfy 0 < lo < hi, got {value!r}")
    return lo, hi


def _interp_logt(t, y, t_marks):
    """Interpolate the rows of ``y`` (shape (T, ...)) at ``t_marks`` in log t."""
    pos = t > 0
    if pos.sum() == 0 or len(t_marks) == 0:
        return np.full((len(t_marks),) + y.shape[1:], np.nan)
    lt = np.log10(t[pos])
    yy = y[pos].reshape(pos.sum(), -1)
    out = np.stack([np.interp(np.log10(t_marks), lt, yy[:, j]) for j in range(yy.shape[1])], axis=-1)
    return out.reshape((len(t_marks),) + y.shape[1:])


# ----------------------------------------------------------------------------- data
def _check_traj_args(n_traj, t_end, init_scale, n_eval):
    """Validate the trajectory arguments of the portrait data (bounded run time)."""
    n_traj = check_positive_int("n_traj", n_traj, hi=1000)
    t_end = check_positive_float("t_end", t_end)
    if not 1.0 <= t_end <= T_END_MAX:
        raise ValueError(f"`t_end` must be a number in [1, {T_END_MAX:g}] for a portrait, got {t_end!r}")
    init_scale = check_positive_float("init_scale", init_scale)
    if not 1e-8 <= init_scale <= 1.0:
        raise ValueError(
            f"`init_scale` must be a number in [1e-08, 1] for a portrait (smaller inits sit on the saddle "
            f"at 0 for the whole run), got {init_scale!r}"
        )
    n_eval = check_positive_int("n_eval", n_eval, hi=N_EVAL_MAX)
    if n_eval < 2:
        raise ValueError(f"`n_eval` must be an integer in [2, {N_EVAL_MAX}], got {n_eval}")
    return n_traj, t_end, init_scale, n_eval


def _batch_from_seeds(n_heads, seed, n_traj, init_scale, setting, t_end, n_eval):
    """The flows from ``initial_state(n_heads, scale=init_scale, seed=seed + k)``, ``k < n_traj``, in one batch."""
    from reduced_dynamics.flow import integrate
    from reduced_dynamics.models import reduced_model

    model = reduced_model(setting, n_heads=n_heads)
    starts = np.array([initial_state(n_heads, kind="random", scale=init_scale, seed=seed + k) for k in range(n_traj)])
    return integrate(model, starts.reshape(n_traj, 2 * n_heads), t_end=t_end, n_times=n_eval, t_first=1e-2)


def two_head_portrait_data(
    setting,
    *,
    seed,
    gamma_range=(-0.9, 0.9),
    m_range=(-4.0, 4.0),
    resolution=80,
    n_traj=4,
    t_end=1e5,
    init_scale=0.3,
    n_eval=300,
) -> PortraitData:
    """Everything the two-head portrait draws, as arrays (saved to ``.npz``).

    Panel A: linear (γ, m) window; panel B: (log10|γ|, η = 2γm) for the slow drift.
    Trajectories are integrated in 4-D from ``initial_state(2, scale=init_scale,
    seed=seed + k)``, ``k < n_traj``, in one batch (:func:`reduced_dynamics.integrate`),
    and projected with :func:`project_plane`.

    Parameters
    ----------
    setting : Setting
        Scalar data model.
    seed : int >= 0
        Trajectory ``k`` starts from the random init of seed ``seed + k``.
    gamma_range, m_range : pair of float or str ``"lo,hi"``
        Window of panel A.
    resolution : int in [10, 2000]
        Grid points per axis of the vector fields.
    n_traj : int in [1, 1000]
        Number of trajectories.
    t_end : float in [1, 1e12]
        Final time of the trajectories.
    init_scale : float in [1e-8, 1]
        Scale of the random 4-D inits.
    n_eval : int in [2, 100000]
        Log-spaced output times per trajectory.

    Returns
    -------
    PortraitData
        ``kind="two_head"``. Keys: ``d, L, sigma2, eta_star, inf_loss, t_end, init_scale``;
        panel A grid ``A_gamma, A_m, A_dgamma, A_dm, A_excess (R, R)`` (``excess`` = L̃ − inf L̃);
        curves ``curve_gamma, curve_mu_gamma, curve_gamma_null (600,)``, ``single_gamma,
        single_m (600,)``, ``single_opt (3,)`` (projected H = 1 optimum γ, m and its loss);
        trajectories ``traj_t, traj_gamma, traj_m, traj_offplane (K, T)`` (NaN-padded),
        ``marks_t (M,)``, ``marks_gamma, marks_m (K, M)`` (positions at t = 10^k),
        ``traj_seeds (K,)``; panel B grid ``B_u, B_eta, B_du, B_deta, B_excess (R, R)``
        (u = log10|γ|, η = 2γm) and curves ``B_curve_gamma, B_curve_eta_manifold,
        B_curve_eta_gnull (400,)``.

    References
    ----------
    docs/theory.md#gradient-flow, docs/theory.md#solution-manifold
    """
    setting = as_setting(setting, "two_head_portrait_data")
    d, L, sigma2 = setting.d, setting.L, setting.sigma2
    seed = check_nonnegative_int("seed", seed)
    g_lo, g_hi = _check_range("gamma_range", gamma_range)
    m_lo, m_hi = _check_range("m_range", m_range)
    resolution = check_positive_int("resolution", resolution, hi=2000)
    if resolution < 10:
        raise ValueError(f"`resolution` must be an integer in [10, 2000], got {resolution}")
    n_traj, t_end, init_scale, n_eval = _check_traj_args(n_traj, t_end, init_scale, n_eval)
    gmax = max(abs(g_lo), abs(g_hi))
    if d * gmax * gmax > 500:
        raise ValueError(f"`gamma_range` too wide for d={d}: need d·max|γ|² <= 500, got {d * gmax * gmax:.4g}")
    out: dict = {
        "d": d,
        "L": L,
        "sigma2": sigma2,
        "eta_star": eta_star(setting),
        "inf_loss": inf_loss(setting),
    }
    # panel A grid
    G, M = np.meshgrid(np.linspace(g_lo, g_hi, resolution), np.linspace(m_lo, m_hi, resolution))
    with np.errstate(over="ignore", invalid="ignore"):
        vA = plane_vector_field(G, M, setting)
        dG, dM = vA.dgamma, vA.dm
        excess = plane_loss(G, M, setting) - out["inf_loss"]
    if not (np.all(np.isfinite(dG)) and np.all(np.isfinite(dM)) and np.all(np.isfinite(excess))):
        raise ValueError(
            f"`m_range` {m_range!r} is too wide for `gamma_range` {gamma_range!r} at d={d}: the vector field "
            "overflows float64 on the grid; narrow the windows"
        )
    out.update(A_gamma=G, A_m=M, A_dgamma=dG, A_dm=dM, A_excess=excess)
    # curves
    gpos = np.linspace(max(1e-3, gmax / 400), gmax, 600)
    out["curve_gamma"] = gpos
    out["curve_mu_gamma"] = mu_gamma(gpos, setting)
    out["curve_gamma_null"] = gamma_nullcline(gpos, setting)
    w = np.linspace(1e-3, 2 * gmax, 600)
    line = single_head_line(w, setting)
    out["single_gamma"], out["single_m"] = line.gamma, line.m
    opt = single_head_optimum(setting)
    w1, mu1, loss1 = opt.omega, opt.mu, opt.loss
    out["single_opt"] = np.array([w1 / 2, mu1 / 2, loss1])
    # trajectories (4-D flow, projected)
    n_dec = int(math.floor(math.log10(t_end)))
    t_marks = 10.0 ** np.arange(-1, n_dec + 1)
    trajs_g, trajs_m, marks_g, marks_m, t_all, offplane = [], [], [], [], [], []
    batch = _batch_from_seeds(2, seed, n_traj, init_scale, setting, t_end, n_eval)
    for k in range(n_traj):
        res = batch[k]
        plane = project_plane(res.omega, res.mu)
        gg, mm = plane.gamma, plane.m
        trajs_g.append(gg)
        trajs_m.append(mm)
        t_all.append(res.t)
        mk = _interp_logt(res.t, np.stack([gg, mm], axis=1), t_marks[t_marks <= res.t[-1]])
        pad = np.full((len(t_marks), 2), np.nan)
        pad[: len(mk)] = mk
        marks_g.append(pad[:, 0])
        marks_m.append(pad[:, 1])
        # distance from the plane: |ω₁ + ω₂|, |μ₁ + μ₂|
        offplane.append(np.hypot(res.omega.sum(1), res.mu.sum(1)))
    T = max(len(t) for t in t_all)

    def _pad(rows):
        a = np.full((len(rows), T), np.nan)
        for i, r in enumerate(rows):
            a[i, : len(r)] = r
        return a

    out.update(
        traj_t=_pad(t_all),
        traj_gamma=_pad(trajs_g),
        traj_m=_pad(trajs_m),
        traj_offplane=_pad(offplane),
        marks_t=t_marks,
        marks_gamma=np.array(marks_g),
        marks_m=np.array(marks_m),
        traj_seeds=np.arange(seed, seed + n_traj),
        init_scale=init_scale,
    )
    # panel B: (u = log10 |γ|, η = 2γm); |γ| lower end from the drift law at t_end
    g_min = 0.5 * drift_law_gamma(max(t_end, 10.0), setting)
    u = np.linspace(math.log10(g_min), math.log10(gmax), resolution)
    eta = np.linspace(-0.15, 1.15, resolution)
    U, ETA = np.meshgrid(u, eta)
    Gb = 10.0**U
    Mb = ETA / (2 * Gb)
    vB = plane_vector_field(Gb, Mb, setting)
    dGb, dMb = vB.dgamma, vB.dm
    out.update(
        B_u=U,
        B_eta=ETA,
        B_du=dGb / (Gb * math.log(10.0)),
        B_deta=2 * (dGb * Mb + Gb * dMb),
        B_excess=plane_loss(Gb, Mb, setting) - out["inf_loss"],
    )
    gb = 10.0 ** np.linspace(math.log10(g_min), math.log10(gmax), 400)
    out["B_curve_gamma"] = gb
    out["B_curve_eta_manifold"] = 2 * gb * mu_gamma(gb, setting)
    out["B_curve_eta_gnull"] = 2 * gb * gamma_nullcline(gb, setting)
    out["t_end"] = t_end
    return PortraitData("two_head", out)


def general_portrait_data(
    setting, *, seed, n_heads=3, n_traj=4, t_end=1e5, init_scale=0.01, n_eval=300
) -> PortraitData:
    """Trajectories of the 2H-dimensional flow from random inits, with stage times.

    Parameters
    ----------
    setting : Setting
        Scalar data model.
    seed : int >= 0
        Trajectory ``k`` starts from the random init of seed ``seed + k``.
    n_heads : int in [2, 1000]
        Number of heads H.
    n_traj : int in [1, 1000]
        Number of trajectories.
    t_end : float in [1, 1e12]
        Final time.
    init_scale : float in [1e-8, 1]
        Scale of the random inits.
    n_eval : int in [2, 100000]
        Log-spaced output times per trajectory.

    Returns
    -------
    PortraitData
        ``kind="general"``. Keys: ``d, L, sigma2, n_heads, eta_star, init_scale, t_end``,
        ``t (K, T)``, ``omega, mu (K, T, H)`` (NaN-padded), ``stage (K, 3)`` (sign matching,
        zero-sum, homogeneous; NaN if never), ``n_pos, n_neg, n_dummy (K,)``, ``seeds (K,)``.

    References
    ----------
    docs/theory.md#gradient-flow, docs/theory.md#stages
    """
    n_heads = check_positive_int("n_heads", n_heads, hi=N_HEADS_MAX)
    if n_heads < 2:
        raise ValueError(f"`n_heads` must be an integer in [2, {N_HEADS_MAX}] for the general portrait, got {n_heads}")
    setting = as_setting(setting, "general_portrait_data")
    d, L, sigma2 = setting.d, setting.L, setting.sigma2
    seed = check_nonnegative_int("seed", seed)
    n_traj, t_end, init_scale, n_eval = _check_traj_args(n_traj, t_end, init_scale, n_eval)
    ts, ws, ms, stages, npos, nneg, ndum = [], [], [], [], [], [], []
    batch = _batch_from_seeds(n_heads, seed, n_traj, init_scale, setting, t_end, n_eval)
    for k in range(n_traj):
        res = batch[k]
        ts.append(res.t)
        ws.append(res.omega)
        ms.append(res.mu)
        st = res.stage_times.to_dict()
        stages.append([np.nan if st[k2] is None else st[k2] for k2 in ("sign_matching", "zero_sum", "homogeneous")])
        dg = res.diagnostics
        npos.append(int(dg.n_positive[-1]))
        nneg.append(int(dg.n_negative[-1]))
        ndum.append(int(dg.n_dummy[-1]))
    T = max(len(t) for t in ts)
    t_arr = np.full((n_traj, T), np.nan)
    w_arr = np.full((n_traj, T, n_heads), np.nan)
    m_arr = np.full((n_traj, T, n_heads), np.nan)
    for i in range(n_traj):
        n = len(ts[i])
        t_arr[i, :n], w_arr[i, :n], m_arr[i, :n] = ts[i], ws[i], ms[i]
    return PortraitData(
        "general",
        {
            "d": d,
            "L": L,
            "sigma2": sigma2,
            "n_heads": n_heads,
            "eta_star": eta_star(setting),
            "t": t_arr,
            "omega": w_arr,
            "mu": m_arr,
            "stage": np.array(stages, float),
            "n_pos": np.array(npos),
            "n_neg": np.array(nneg),
            "n_dummy": np.array(ndum),
            "seeds": np.arange(seed, seed + n_traj),
            "init_scale": init_scale,
            "t_end": t_end,
        },
    )
