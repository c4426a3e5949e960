r"""Phase-portrait plots of the reduced (ω, μ) gradient flow.

Draw the data of :func:`reduced_dynamics.dynamics.portrait.two_head_portrait_data`
and :func:`reduced_dynamics.dynamics.portrait.general_portrait_data` (or their
``.npz`` files); the analysis itself (vector field, nullclines, invariant plane)
lives in :mod:`reduced_dynamics.dynamics.portrait`. Each function takes
``fig=None`` (a Figure or a SubFigure of the caller's figure), draws, and
returns it; nothing is saved here.

References
----------
docs/theory.md#gradient-flow, docs/theory.md#solution-manifold; He, Pan, Chen, Yang (ICML 2025), Section 4.
"""

from __future__ import annotations

import math

import numpy as np

from reduced_dynamics.dynamics.manifold import flow_eta_gap, mu_gamma
from reduced_dynamics.plots.style import OKABE_ITO, new_figure, styled_data
from reduced_dynamics.setting import Setting

__all__ = ["plot_two_head_portrait", "plot_general_portrait"]


# ----------------------------------------------------------------------------- plotting
CONTOUR_COLOUR = "#3b5b7a"


def _log_ticks(axis, lo, hi):
    """Ticks at 1, 2, 5 × 10^k on an axis whose coordinate is log10 of the quantity."""
    vals = [m * 10.0**k for k in range(int(math.floor(lo)) - 1, int(math.ceil(hi)) + 1) for m in (1, 2, 5)]
    vals = [v for v in vals if lo <= math.log10(v) <= hi]
    axis.set_ticks([math.log10(v) for v in vals])
    axis.set_ticklabels([f"{v:g}" for v in vals])


@styled_data
def plot_two_head_portrait(data, *, fig=None):
    """Draw the two-head symmetric-plane portrait (two panels).

    Parameters
    ----------
    data : PortraitData or mapping
        From :func:`~reduced_dynamics.dynamics.portrait.two_head_portrait_data` (or its ``.npz``).
    fig : Figure or SubFigure, optional
        Where to draw; default a new 13 × 5.6 in figure.

    Returns
    -------
    Figure or SubFigure
        ``fig``.
    """
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    d, L, s2 = int(data["d"]), int(data["L"]), float(data["sigma2"])
    es = float(data["eta_star"])
    fig = new_figure(fig, figsize=(13, 5.6))
    axA, axB = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.1]})
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
    return fig


@styled_data
def plot_general_portrait(data, *, fig=None):
    """Draw the general-H portrait (four projections).

    Parameters
    ----------
    data : PortraitData or mapping
        From :func:`~reduced_dynamics.dynamics.portrait.general_portrait_data` (or its ``.npz``).
    fig : Figure or SubFigure, optional
        Where to draw; default a new 12 × 9.5 in figure.

    Returns
    -------
    Figure or SubFigure
        ``fig``.
    """
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D

    H = int(data["n_heads"])
    d, L, s2 = int(data["d"]), int(data["L"]), float(data["sigma2"])
    es = float(data["eta_star"])
    c = (1 + s2) / L
    setting = Setting(d=d, L=L, sigma2=s2)
    t, W, M = data["t"], data["omega"], data["mu"]
    K = t.shape[0]
    tmax = np.nanmax(t)
    norm = plt.Normalize(-2, math.log10(tmax))
    cmap = plt.get_cmap("viridis")
    fig = new_figure(fig, figsize=(12, 9.5))
    axes = fig.subplots(2, 2)
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
    mg = mu_gamma(gg, setting)
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
        flow_eta_gap(gl, setting),
        color=OKABE_ITO[1],
        lw=1.2,
        ls="--",
        zorder=5,
        label=r"slow drift: $\eta^*-\eta_{\rm eff}=\frac{1}{2}\eta^{*2}cd^3\gamma^4$",
    )
    a3.plot(
        gl,
        es - 2 * gl * mu_gamma(gl, setting),
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
    return fig
