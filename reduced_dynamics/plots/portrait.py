r"""Phase portraits of the reduced (ω, μ) gradient flow (docs/theory.md#gradient-flow).

Two pictures:

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
the integrator in :mod:`reduced_dynamics.figures.registry` (``drift``).

References
----------
docs/theory.md#reduced-model, docs/theory.md#gradient-flow; He, Pan, Chen, Yang (ICML 2025), Section 4.
"""

from __future__ import annotations

import math

import numpy as np

from reduced_dynamics._validation import check_positive_float, check_positive_int, check_problem
from reduced_dynamics.dynamics.flow import initial_state, integrate_flow
from reduced_dynamics.dynamics.manifold import (
    drift_law_gamma,
    eta_star,
    flow_eta_gap,
    inf_loss,
    mu_gamma,
    single_head_optimum,
)

__all__ = [
    "embed_plane",
    "project_plane",
    "plane_loss",
    "plane_vector_field",
    "gamma_nullcline",
    "single_head_line",
    "check_range",
    "two_head_portrait_data",
    "general_portrait_data",
    "plot_two_head_portrait",
    "plot_general_portrait",
]


# ----------------------------------------------------------------------------- plane algebra
def embed_plane(gamma, m):
    """Map plane coordinates to the 4-D state ``ω = (γ, −γ)``, ``μ = (m, −m)``.

    Parameters
    ----------
    gamma, m : array_like, shape (...)

    Returns
    -------
    omega, mu : ndarray, shape (..., 2)
    """
    gamma, m = np.broadcast_arrays(np.asarray(gamma, float), np.asarray(m, float))
    return np.stack([gamma, -gamma], axis=-1), np.stack([m, -m], axis=-1)


def project_plane(omega, mu):
    """Orthogonal projection of 2-head states onto the symmetric plane.

    Parameters
    ----------
    omega, mu : array_like, shape (..., 2)

    Returns
    -------
    gamma, m : ndarray, shape (...)
        ``γ = (ω₁ − ω₂)/2``, ``m = (μ₁ − μ₂)/2``.
    """
    omega = np.asarray(omega, float)
    mu = np.asarray(mu, float)
    if omega.shape[-1] != 2 or mu.shape[-1] != 2:
        raise ValueError(f"`omega` and `mu` must have last axis 2 (two heads), got {omega.shape} and {mu.shape}")
    return 0.5 * (omega[..., 0] - omega[..., 1]), 0.5 * (mu[..., 0] - mu[..., 1])


def plane_loss(gamma, m, *, d, L, sigma2):
    r""":math:`\ell(\gamma, m) = 1+\sigma^2 - 4\gamma m + 4\gamma^2m^2 + 4cm^2\sinh(d\gamma^2)` (closed form)."""
    d, L, sigma2 = check_problem(d, L, sigma2)
    g = np.asarray(gamma, float)
    m = np.asarray(m, float)
    c = (1.0 + sigma2) / L
    return 1.0 + sigma2 - 4 * g * m + 4 * g * g * m * m + 4 * c * m * m * np.sinh(d * g * g)


def plane_vector_field(gamma, m, *, d, L, sigma2):
    r"""Exact restriction of the flow to the symmetric plane: :math:`(\dot\gamma, \dot m)`.

    .. math::

        \dot\gamma = -2m\,(2\gamma m - 1 + 2cd\,\gamma m\cosh d\gamma^2), \qquad
        \dot m = -2\,\big((2\gamma m - 1)\gamma + 2cm\sinh d\gamma^2\big).

    Parameters
    ----------
    gamma, m : array_like, shape (...)
    d, L, sigma2 : problem constants

    Returns
    -------
    dgamma, dm : ndarray, shape (...)

    Examples
    --------
    >>> from reduced_dynamics.plots.portrait import plane_vector_field
    >>> [round(float(v), 12) for v in plane_vector_field(0.0, 0.5, d=5, L=40, sigma2=0.1)]
    [1.0, 0.0]
    """
    d, L, sigma2 = check_problem(d, L, sigma2)
    g = np.asarray(gamma, float)
    m = np.asarray(m, float)
    c = (1.0 + sigma2) / L
    x = d * g * g
    u = 2 * g * m
    dg = -2 * m * (u - 1 + 2 * c * d * g * m * np.cosh(x))
    dm = -2 * ((u - 1) * g + 2 * c * m * np.sinh(x))
    return dg, dm


def gamma_nullcline(gamma, *, d, L, sigma2):
    r"""Non-trivial branch of :math:`\dot\gamma = 0`: :math:`m = 1/(2\gamma(1 + cd\cosh d\gamma^2))` (γ ≠ 0)."""
    d, L, sigma2 = check_problem(d, L, sigma2)
    g = np.asarray(gamma, float)
    c = (1.0 + sigma2) / L
    return 1.0 / (2 * g * (1 + c * d * np.cosh(d * g * g)))


def single_head_line(w, *, d, L, sigma2):
    r"""Projection onto the plane of the one-head-off family ``ω = (w, 0), μ = (μ₁*(w), 0)``.

    :math:`\mu_1^*(w) = w/(w^2 + c e^{dw^2})` minimises the H = 1 loss at fixed ``w``.

    Returns
    -------
    gamma, m : ndarray
        ``(w/2, μ₁*(w)/2)``.
    """
    d, L, sigma2 = check_problem(d, L, sigma2)
    w = np.asarray(w, float)
    c = (1.0 + sigma2) / L
    # w/(w² + c e^{dw²}) = w e^{−dw²}/(w² e^{−dw²} + c): no overflow for large d w² (the value underflows to 0)
    decay = np.exp(-d * w * w)
    return 0.5 * w, 0.5 * w * decay / (w * w * decay + c)


def check_range(name, value, *, positive=False):
    """Validate a ``(lo, hi)`` range given as a pair or the text ``"lo,hi"``."""
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
    lt = np.log10(t[pos])
    yy = y[pos].reshape(pos.sum(), -1)
    out = np.stack([np.interp(np.log10(t_marks), lt, yy[:, j]) for j in range(yy.shape[1])], axis=-1)
    return out.reshape((len(t_marks),) + y.shape[1:])


# ----------------------------------------------------------------------------- data
def two_head_portrait_data(
    *,
    d=5,
    L=40,
    sigma2=0.1,
    gamma_range=(-0.9, 0.9),
    m_range=(-4.0, 4.0),
    resolution=80,
    n_traj=4,
    t_end=1e5,
    seed=0,
    init_scale=0.3,
    n_eval=300,
):
    """Everything the two-head portrait draws, as arrays (saved to ``.npz``).

    Panel A: linear (γ, m) window; panel B: (log10|γ|, η = 2γm) for the slow drift.
    Trajectories are integrated in 4-D from ``initial_state(2, scale=init_scale,
    seed=seed + k)``, ``k < n_traj``, and projected with :func:`project_plane`.

    Returns
    -------
    dict of ndarray
    """
    d, L, sigma2 = check_problem(d, L, sigma2)
    g_lo, g_hi = check_range("gamma_range", gamma_range)
    m_lo, m_hi = check_range("m_range", m_range)
    resolution = check_positive_int("resolution", resolution)
    if resolution < 10:
        raise ValueError(f"`resolution` must be an integer >= 10, got {resolution}")
    n_traj = check_positive_int("n_traj", n_traj)
    t_end = check_positive_float("t_end", t_end)
    if t_end < 1.0:
        raise ValueError(f"`t_end` must be >= 1 for a portrait, got {t_end}")
    init_scale = check_positive_float("init_scale", init_scale)
    gmax = max(abs(g_lo), abs(g_hi))
    if d * gmax * gmax > 500:
        raise ValueError(f"`gamma_range` too wide for d={d}: need d·max|γ|² <= 500, got {d * gmax * gmax:.4g}")
    out: dict = {
        "d": d,
        "L": L,
        "sigma2": sigma2,
        "eta_star": eta_star(d, L, sigma2),
        "inf_loss": inf_loss(d, L, sigma2),
    }
    # panel A grid
    G, M = np.meshgrid(np.linspace(g_lo, g_hi, resolution), np.linspace(m_lo, m_hi, resolution))
    with np.errstate(over="ignore", invalid="ignore"):
        dG, dM = plane_vector_field(G, M, d=d, L=L, sigma2=sigma2)
        excess = plane_loss(G, M, d=d, L=L, sigma2=sigma2) - out["inf_loss"]
    if not (np.all(np.isfinite(dG)) and np.all(np.isfinite(dM)) and np.all(np.isfinite(excess))):
        raise ValueError(
            f"`m_range` {m_range!r} is too wide for `gamma_range` {gamma_range!r} at d={d}: the vector field "
            "overflows float64 on the grid; narrow the windows"
        )
    out.update(A_gamma=G, A_m=M, A_dgamma=dG, A_dm=dM, A_excess=excess)
    # curves
    gpos = np.linspace(max(1e-3, gmax / 400), gmax, 600)
    out["curve_gamma"] = gpos
    out["curve_mu_gamma"] = mu_gamma(gpos, d=d, L=L, sigma2=sigma2)
    out["curve_gamma_null"] = gamma_nullcline(gpos, d=d, L=L, sigma2=sigma2)
    w = np.linspace(1e-3, 2 * gmax, 600)
    out["single_gamma"], out["single_m"] = single_head_line(w, d=d, L=L, sigma2=sigma2)
    w1, mu1, loss1 = single_head_optimum(d, L, sigma2)
    out["single_opt"] = np.array([w1 / 2, mu1 / 2, loss1])
    # trajectories (4-D flow, projected)
    n_dec = int(math.floor(math.log10(t_end)))
    t_marks = 10.0 ** np.arange(-1, n_dec + 1)
    trajs_g, trajs_m, marks_g, marks_m, t_all, offplane = [], [], [], [], [], []
    for k in range(n_traj):
        w0, m0 = initial_state(2, kind="random", scale=init_scale, seed=seed + k)
        res = integrate_flow(w0, m0, d=d, L=L, sigma2=sigma2, t_end=t_end, n_eval=n_eval, t_first=1e-2)
        gg, mm = project_plane(res.omega, res.mu)
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
    g_min = 0.5 * drift_law_gamma(max(t_end, 10.0), d=d, L=L, sigma2=sigma2)
    u = np.linspace(math.log10(g_min), math.log10(gmax), resolution)
    eta = np.linspace(-0.15, 1.15, resolution)
    U, ETA = np.meshgrid(u, eta)
    Gb = 10.0**U
    Mb = ETA / (2 * Gb)
    dGb, dMb = plane_vector_field(Gb, Mb, d=d, L=L, sigma2=sigma2)
    out.update(
        B_u=U,
        B_eta=ETA,
        B_du=dGb / (Gb * math.log(10.0)),
        B_deta=2 * (dGb * Mb + Gb * dMb),
        B_excess=plane_loss(Gb, Mb, d=d, L=L, sigma2=sigma2) - out["inf_loss"],
    )
    gb = 10.0 ** np.linspace(math.log10(g_min), math.log10(gmax), 400)
    out["B_curve_gamma"] = gb
    out["B_curve_eta_manifold"] = 2 * gb * mu_gamma(gb, d=d, L=L, sigma2=sigma2)
    out["B_curve_eta_gnull"] = 2 * gb * gamma_nullcline(gb, d=d, L=L, sigma2=sigma2)
    out["t_end"] = t_end
    return out


def general_portrait_data(
    *, n_heads=3, d=5, L=40, sigma2=0.1, n_traj=4, t_end=1e5, seed=0, init_scale=0.01, n_eval=300
):
    """Trajectories of the 2H-dimensional flow from random inits, with stage times.

    Returns
    -------
    dict of ndarray
        ``t (K, T)``, ``omega, mu (K, T, H)``, ``stage (K, 3)`` (sign matching,
        zero-sum, homogeneous; NaN if never), ``n_pos, n_neg, n_dummy (K,)``.
    """
    n_heads = check_positive_int("n_heads", n_heads)
    if n_heads < 2:
        raise ValueError(f"`n_heads` must be an integer >= 2 for the general portrait, got {n_heads}")
    d, L, sigma2 = check_problem(d, L, sigma2)
    n_traj = check_positive_int("n_traj", n_traj)
    t_end = check_positive_float("t_end", t_end)
    if t_end < 1.0:
        raise ValueError(f"`t_end` must be >= 1 for a portrait, got {t_end}")
    init_scale = check_positive_float("init_scale", init_scale)
    ts, ws, ms, stages, npos, nneg, ndum = [], [], [], [], [], [], []
    for k in range(n_traj):
        w0, m0 = initial_state(n_heads, kind="random", scale=init_scale, seed=seed + k)
        res = integrate_flow(w0, m0, d=d, L=L, sigma2=sigma2, t_end=t_end, n_eval=n_eval, t_first=1e-2)
        ts.append(res.t)
        ws.append(res.omega)
        ms.append(res.mu)
        st = res.stage_times
        stages.append([np.nan if st[k2] is None else st[k2] for k2 in ("sign_matching", "zero_sum", "homogeneous")])
        dg = res.diagnostics
        npos.append(int(dg["n_positive"][-1]))
        nneg.append(int(dg["n_negative"][-1]))
        ndum.append(int(dg["n_dummy"][-1]))
    T = max(len(t) for t in ts)
    t_arr = np.full((n_traj, T), np.nan)
    w_arr = np.full((n_traj, T, n_heads), np.nan)
    m_arr = np.full((n_traj, T, n_heads), np.nan)
    for i in range(n_traj):
        n = len(ts[i])
        t_arr[i, :n], w_arr[i, :n], m_arr[i, :n] = ts[i], ws[i], ms[i]
    return {
        "d": d,
        "L": L,
        "sigma2": sigma2,
        "n_heads": n_heads,
        "eta_star": eta_star(d, L, sigma2),
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
    }


# ----------------------------------------------------------------------------- plotting
CONTOUR_COLOUR = "#3b5b7a"


def _log_ticks(axis, lo, hi):
    """Ticks at 1, 2, 5 × 10^k on an axis whose coordinate is log10 of the quantity."""
    vals = [m * 10.0**k for k in range(int(math.floor(lo)) - 1, int(math.ceil(hi)) + 1) for m in (1, 2, 5)]
    vals = [v for v in vals if lo <= math.log10(v) <= hi]
    axis.set_ticks([math.log10(v) for v in vals])
    axis.set_ticklabels([f"{v:g}" for v in vals])


def plot_two_head_portrait(data, path) -> None:
    """Draw the two-head symmetric-plane portrait (two panels) from :func:`two_head_portrait_data`."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from reduced_dynamics.plots.style import OKABE_ITO, apply_style, save_figure

    apply_style()
    d, L, s2 = int(data["d"]), int(data["L"]), float(data["sigma2"])
    es = float(data["eta_star"])
    fig, (axA, axB) = plt.subplots(1, 2, figsize=(13, 5.6), gridspec_kw={"width_ratios": [1, 1.1]})
    cmap_t = plt.get_cmap("viridis")
    marks_t = np.asarray(data["marks_t"])
    lmark = np.log10(marks_t)
    norm_t = plt.Normalize(lmark.min(), lmark.max())
    levels = np.arange(-5, 1.01, 1.0)

    # ---- panel A: linear (γ, m)
    G, M = data["A_gamma"], data["A_m"]
    exc = np.log10(np.clip(data["A_excess"], 1e-12, None))
    axA.contourf(G, M, exc, levels=np.arange(-6, 2.01, 1.0), cmap="Blues_r", alpha=0.35, extend="both")
    cs = axA.contour(G, M, exc, levels=levels, colors=CONTOUR_COLOUR, linewidths=0.6, linestyles="solid")
    axA.clabel(cs, fmt=lambda v: f"$10^{{{v:g}}}$", fontsize=7, inline=True)
    axA.streamplot(
        G[0], M[:, 0], data["A_dgamma"], data["A_dm"], density=1.1, color="0.3", linewidth=0.55, arrowsize=0.7
    )
    g = data["curve_gamma"]
    for sgn in (1, -1):
        axA.plot(sgn * g, sgn * data["curve_mu_gamma"], color="k", lw=1.8, ls="--")
        axA.plot(sgn * g, sgn * data["curve_gamma_null"], color=OKABE_ITO[1], lw=1.5)
        axA.plot(sgn * data["single_gamma"], sgn * data["single_m"], color=OKABE_ITO[3], lw=1.5, ls="-.")
    axA.axhline(0, color=OKABE_ITO[1], lw=1.5)
    so = data["single_opt"]
    axA.plot([so[0], -so[0]], [so[1], -so[1]], marker="*", ms=12, ls="none", color=OKABE_ITO[3], mec="k", mew=0.6)
    traj_cols = [OKABE_ITO[i] for i in (0, 2, 4, 5, 6)]
    for k in range(data["traj_gamma"].shape[0]):
        col = traj_cols[k % len(traj_cols)]
        for ax in (axA,):
            ax.plot(data["traj_gamma"][k], data["traj_m"][k], color=col, lw=1.6, alpha=0.95)
            ax.plot(data["traj_gamma"][k][0], data["traj_m"][k][0], "o", mfc="white", mec=col, ms=6, mew=1.5)
            ax.scatter(
                data["marks_gamma"][k],
                data["marks_m"][k],
                c=cmap_t(norm_t(lmark)),
                s=26,
                zorder=5,
                edgecolors="k",
                linewidths=0.4,
            )
    axA.set_xlim(G.min(), G.max())
    axA.set_ylim(M.min(), M.max())
    axA.set_xlabel(r"KQ scale $\gamma$  (state $\omega=(\gamma,-\gamma)$)")
    axA.set_ylabel(r"OV value $m$  (state $\mu=(m,-m)$)")
    axA.set_title(f"(a) Invariant plane of H = 2 (d={d}, L={L}, σ²={s2:g})")
    handles = [
        Line2D([], [], color="k", ls="--", lw=1.8, label=r"$\dot m=0$: solution manifold $m=\mu_\gamma(\gamma)$"),
        Line2D(
            [],
            [],
            color=OKABE_ITO[1],
            lw=1.5,
            label=r"$\dot\gamma=0$: $m=0$, $m=\frac{1}{2\gamma(1+cd\cosh d\gamma^2)}$",
        ),
        Line2D(
            [],
            [],
            color=OKABE_ITO[3],
            ls="-.",
            lw=1.5,
            marker="*",
            ms=9,
            mec="k",
            mew=0.5,
            label="one head off, best $\\mu_1$ (projected);\n★ H=1 optimum $\\omega=1/\\sqrt{d}$",
        ),
        Line2D([], [], color="0.3", lw=0.6, label=r"streamlines of $(\dot\gamma,\dot m)$"),
        Line2D(
            [], [], color=CONTOUR_COLOUR, lw=0.7, label=r"contours of $\tilde L-\inf\tilde L$ (shading: low = dark)"
        ),
        Line2D(
            [],
            [],
            color=traj_cols[0],
            lw=1.6,
            marker="o",
            mfc="white",
            label="4-D flow from random init,\nprojected (○ = start)",
        ),
    ]
    axA.legend(handles=handles, loc="lower right", fontsize=7.2, framealpha=0.92)

    # ---- panel B: (log10 |γ|, η = 2γm)
    U, ETA = data["B_u"], data["B_eta"]
    excB = np.log10(np.clip(data["B_excess"], 1e-12, None))
    axB.contourf(U, ETA, excB, levels=np.arange(-7, 2.01, 1.0), cmap="Blues_r", alpha=0.35, extend="both")
    csB = axB.contour(
        U, ETA, excB, levels=np.arange(-6, 1.01, 1.0), colors=CONTOUR_COLOUR, linewidths=0.6, linestyles="solid"
    )
    axB.clabel(csB, fmt=lambda v: f"$10^{{{v:g}}}$", fontsize=7, inline=True)
    axB.streamplot(
        U[0], ETA[:, 0], data["B_du"], data["B_deta"], density=1.1, color="0.3", linewidth=0.55, arrowsize=0.7
    )
    gb = np.log10(data["B_curve_gamma"])
    axB.plot(gb, data["B_curve_eta_manifold"], "k--", lw=1.8)
    axB.plot(gb, data["B_curve_eta_gnull"], color=OKABE_ITO[1], lw=1.5)
    axB.axhline(0, color=OKABE_ITO[1], lw=1.5)
    axB.axhline(es, color=OKABE_ITO[2], lw=1.0, ls=":")
    axB.text(
        0.02,
        es - 0.03,
        rf"$\eta^*={es:.4f}$ (infimum, $\gamma\to0$)",
        color=OKABE_ITO[2],
        fontsize=8,
        ha="left",
        va="top",
        transform=axB.get_yaxis_transform(),
        bbox=dict(fc="white", ec="none", alpha=0.8, pad=0.5),
    )
    for k in range(data["traj_gamma"].shape[0]):
        col = traj_cols[k % len(traj_cols)]
        gg, mm = data["traj_gamma"][k], data["traj_m"][k]
        ok = np.abs(gg) > 0
        axB.plot(np.log10(np.abs(gg[ok])), 2 * gg[ok] * mm[ok], color=col, lw=1.6)
        mg, mmk = data["marks_gamma"][k], data["marks_m"][k]
        okm = np.isfinite(mg) & (np.abs(mg) > 0)
        axB.scatter(
            np.log10(np.abs(mg[okm])),
            2 * mg[okm] * mmk[okm],
            c=cmap_t(norm_t(lmark[okm])),
            s=26,
            zorder=5,
            edgecolors="k",
            linewidths=0.4,
        )
    axB.set_xlim(U.min(), U.max())
    axB.set_ylim(ETA.min(), ETA.max())
    _log_ticks(axB.xaxis, U.min(), U.max())
    axB.set_xlabel(r"$|\gamma|$ (log scale)")
    axB.set_ylabel(r"effective step $\eta_{\rm eff}=\mu^\top\omega=2\gamma m$")
    axB.set_title(r"(b) Same plane in $(\log|\gamma|,\ \eta_{\rm eff})$: the slow drift $\gamma\to0$")
    sm = plt.cm.ScalarMappable(norm=norm_t, cmap=cmap_t)
    cb = fig.colorbar(sm, ax=[axA, axB], fraction=0.025, pad=0.015, ticks=lmark)
    cb.set_label(r"dots: position on the trajectory at time $t$")
    cb.ax.set_yticklabels([f"$10^{{{int(v)}}}$" for v in lmark])
    save_figure(fig, path)


def plot_general_portrait(data, path) -> None:
    """Draw the general-H portrait (four projections) from :func:`general_portrait_data`."""
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D

    from reduced_dynamics.plots.style import OKABE_ITO, apply_style, save_figure

    apply_style()
    H = int(data["n_heads"])
    d, L, s2 = int(data["d"]), int(data["L"]), float(data["sigma2"])
    es = float(data["eta_star"])
    c = (1 + s2) / L
    t, W, M = data["t"], data["omega"], data["mu"]
    K = t.shape[0]
    tmax = np.nanmax(t)
    norm = plt.Normalize(-2, math.log10(tmax))
    cmap = plt.get_cmap("viridis")
    fig, axes = plt.subplots(2, 2, figsize=(12, 9.5))
    (a0, a1), (a2, a3) = axes
    stage_style = [("sign matching", "^"), ("zero-sum OV", "s"), ("homogeneous |ω|", "D")]

    def _colored(ax, x, y, tt, lw=1.4, start=True):
        ok = np.isfinite(x) & np.isfinite(y) & (tt > 0)
        pts = np.stack([x[ok], y[ok]], axis=1)
        seg = np.stack([pts[:-1], pts[1:]], axis=1)
        lc = LineCollection(seg, cmap=cmap, norm=norm, linewidths=lw)
        lc.set_array(np.log10(tt[ok][:-1]))
        ax.add_collection(lc)
        if start:
            ax.plot(x[ok][0], y[ok][0], "o", mfc="white", mec="k", ms=4, mew=0.8)

    def _stages(ax, k, fx, fy):
        tk = t[k]
        okt = np.isfinite(tk) & (tk > 0)
        for j, (_, mk) in enumerate(stage_style):
            ts = data["stage"][k, j]
            if np.isfinite(ts) and ts > 0:
                i = int(np.argmin(np.abs(np.log10(tk[okt]) - math.log10(ts))))
                ax.plot(
                    fx(k)[okt][i], fy(k)[okt][i], marker=mk, ms=8, mfc="none", mec="k", mew=1.3, ls="none", zorder=6
                )

    # (a) per-head (ω_h, μ_h) for trajectory 0, μ on symlog
    k0 = 0
    for h in range(H):
        _colored(a0, W[k0, :, h], M[k0, :, h], t[k0])
        last = np.where(np.isfinite(W[k0, :, h]))[0][-1]
        a0.annotate(
            f"head {h + 1}",
            (W[k0, last, h], M[k0, last, h]),
            fontsize=8,
            xytext=(8, 8 - 10 * h),
            textcoords="offset points",
            arrowprops=dict(arrowstyle="-", color="0.5", lw=0.5),
        )
        for j, (_, mk) in enumerate(stage_style):
            ts = data["stage"][k0, j]
            if np.isfinite(ts) and ts > 0:
                tk = t[k0]
                i = int(np.nanargmin(np.abs(np.log10(np.where(tk > 0, tk, np.nan)) - math.log10(ts))))
                a0.plot(W[k0, i, h], M[k0, i, h], marker=mk, ms=8, mfc="none", mec="k", mew=1.3, ls="none", zorder=6)
    wmax = float(np.nanmax(np.abs(W[k0])))
    gg = np.linspace(wmax * 0.01, wmax * 1.05, 300)
    p, n = max(int(data["n_pos"][k0]), 1), max(int(data["n_neg"][k0]), 1)
    mg = mu_gamma(gg, d=d, L=L, sigma2=s2)
    a0.plot(gg, mg / p, "k--", lw=1.1, label=rf"$S_\gamma$: $\mu_h=\mu_\gamma/n_+$ ($n_+={p}$)")
    a0.plot(-gg, -mg / n, "k:", lw=1.3, label=rf"$S_\gamma$: $\mu_h=-\mu_\gamma/n_-$ ($n_-={n}$)")
    a0.set_yscale("symlog", linthresh=1.0)
    a0.set_xlim(-1.1 * wmax, 1.1 * wmax)
    mmax = float(np.nanmax(np.abs(M[k0])))
    a0.set_ylim(-1.5 * mmax, 1.5 * mmax)
    a0.axhline(0, color="k", lw=0.5)
    a0.axvline(0, color="k", lw=0.5)
    a0.set_xlabel(r"KQ scale $\omega_h$")
    a0.set_ylabel(r"OV value $\mu_h$ (symlog, linear for $|\mu_h|<1$)")
    a0.set_title(rf"(a) Per-head paths $(\omega_h, \mu_h)$, seed {int(data['seeds'][k0])}")
    a0.legend(loc="upper left", fontsize=7.5)

    # (b) (ω_1, ω_2) for all trajectories
    for k in range(K):
        _colored(a1, W[k, :, 0], W[k, :, 1], t[k])
        _stages(a1, k, lambda kk: W[kk, :, 0], lambda kk: W[kk, :, 1])
    lim = 1.1 * float(np.nanmax(np.abs(W[:, :, :2])))
    xx = np.array([-lim, lim])
    a1.plot(xx, xx, color="0.5", lw=0.8, ls="--")
    a1.plot(xx, -xx, color="0.5", lw=0.8, ls="--")
    a1.text(
        -0.97 * lim,
        0.97 * lim,
        r"$\omega_2=-\omega_1$ (opposite signs)",
        fontsize=7.5,
        ha="left",
        va="top",
        color="0.3",
    )
    a1.text(0.97 * lim, 0.97 * lim, r"$\omega_2=\omega_1$", fontsize=7.5, ha="right", va="top", color="0.3")
    a1.set_xlim(-lim, lim)
    a1.set_ylim(-lim, lim)
    a1.set_aspect("equal")
    a1.axhline(0, color="k", lw=0.5)
    a1.axvline(0, color="k", lw=0.5)
    a1.set_xlabel(r"$\omega_1$")
    a1.set_ylabel(r"$\omega_2$")
    a1.set_title(f"(b) KQ scales of heads 1, 2 ({K} seeds): $|\\omega_h|\\to\\gamma$")

    # (c) (η_eff, Σμ)
    for k in range(K):
        eta = np.nansum(W[k] * M[k], axis=1)
        sm_ = np.nansum(M[k], axis=1)
        bad = ~np.isfinite(t[k])
        eta[bad] = np.nan
        sm_[bad] = np.nan
        _colored(a2, eta, sm_, t[k])
        _stages(a2, k, lambda kk: np.nansum(W[kk] * M[kk], axis=1), lambda kk: np.nansum(M[kk], axis=1))
    a2.axvline(es, color=OKABE_ITO[2], ls=":", lw=1.2)
    a2.text(
        es, 0.02, rf" $\eta^*={es:.4f}$", color=OKABE_ITO[2], fontsize=8, transform=a2.get_xaxis_transform(), ha="right"
    )
    a2.set_yscale("symlog", linthresh=1e-3)
    a2.axhline(0, color="k", lw=0.5)
    a2.set_xlabel(r"effective step $\eta_{\rm eff}=\langle\mu,\omega\rangle$")
    a2.set_ylabel(r"$\Sigma_h\mu_h$ (symlog, linear for $|\cdot|<10^{-3}$)")
    a2.set_title(r"(c) $(\langle\mu,\omega\rangle,\ \Sigma\mu)$: zero-sum OV, then $\eta_{\rm eff}\to\eta^*$")
    a2.autoscale_view()

    # (d) (γ, η* − η_eff) log–log, with the drift relation
    for k in range(K):
        tk = t[k]
        ok = np.isfinite(tk) & (tk > 0)
        gam = np.nanmean(np.abs(W[k]), axis=1)
        gap = es - np.nansum(W[k] * M[k], axis=1)
        good = ok & (gap > 0) & (tk >= 10.0)
        _colored(
            a3,
            np.where(good, gam, np.nan),
            np.where(good, gap, np.nan),
            np.where(good, tk, np.nan),
            lw=4.0,
            start=False,
        )
    g_end = np.nanmin(np.nanmean(np.abs(W[:, -1]), axis=-1))
    gl = np.geomspace(g_end * 0.7, 0.6, 200)
    a3.plot(
        gl,
        flow_eta_gap(gl, d=d, L=L, sigma2=s2),
        color=OKABE_ITO[1],
        lw=1.2,
        ls="--",
        zorder=5,
        label=r"slow drift: $\eta^*-\eta_{\rm eff}=\frac{1}{2}\eta^{*2}cd^3\gamma^4$",
    )
    a3.plot(
        gl,
        es - 2 * gl * mu_gamma(gl, d=d, L=L, sigma2=s2),
        color="k",
        lw=1.0,
        ls=":",
        label=r"on $S_\gamma$: $\eta^*-2\gamma\mu_\gamma$",
    )
    a3.set_xscale("log")
    a3.set_yscale("log")
    a3.set_xlabel(r"$\gamma$ = mean $|\omega_h|$ (log scale)")
    a3.set_ylabel(r"$\eta^*-\eta_{\rm eff}$ (log scale)")
    a3.set_title(r"(d) Slow drift ($t\geq10$): $\gamma\to0$, $\eta_{\rm eff}\to\eta^*$")
    a3.legend(loc="upper left", fontsize=7.5)
    a3.set_xlim(g_end * 0.7, 0.6)
    import matplotlib.ticker as mticker

    a3.xaxis.set_major_locator(
        mticker.FixedLocator([v for v in (0.02, 0.05, 0.1, 0.2, 0.5) if g_end * 0.7 <= v <= 0.6])
    )
    a3.xaxis.set_major_formatter(mticker.FormatStrFormatter("%g"))
    a3.xaxis.set_minor_formatter(mticker.NullFormatter())

    for ax in (a0, a1, a2):
        ax.autoscale_view()
    a0.set_ylim(-1.5 * mmax, 1.5 * mmax)
    sm = plt.cm.ScalarMappable(norm=norm, cmap=cmap)
    cb = fig.colorbar(sm, ax=axes, fraction=0.025, pad=0.02)
    cb.set_label(r"$\log_{10} t$ (gradient-flow time)")
    stage_handles = [
        Line2D([], [], marker=mk, ms=8, mfc="none", mec="k", mew=1.3, ls="none", label=f"{nm} (stage time)")
        for nm, mk in stage_style
    ]
    stage_handles.append(Line2D([], [], marker="o", mfc="white", mec="k", ls="none", label="start"))
    fig.legend(handles=stage_handles, loc="lower center", ncol=4, fontsize=8.5, bbox_to_anchor=(0.45, -0.01))
    fig.suptitle(
        f"Gradient flow of $\\tilde L$ for H = {H} (d={d}, L={L}, σ²={s2:g}, random init scale "
        f"{float(data['init_scale']):g}; c=(1+σ²)/L={c:.4g})",
        y=0.995,
    )
    save_figure(fig, path)
