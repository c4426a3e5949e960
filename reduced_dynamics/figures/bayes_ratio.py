"""Figure ``bayes_ratio``: Theorem 1(c) over the (ξ, σ²) plane.

The limiting (L → ∞, d/L → ξ) risk ratio of one-step GD at η* to Bayes ridge,
its bound 1 + σ⁻²{(1+ξσ²)(1+σ²+1/ξ)}⁻¹ and the slack, with the theorem's
condition boundary σ² + 1/ξ = 1.

References
----------
docs/theory.md#bayes-ratio, docs/theory.md#theorem-1
"""

from __future__ import annotations

import numpy as np

from reduced_dynamics.figures._base import FigureData
from reduced_dynamics.plots.style import OKABE_ITO, new_figure, styled_data, tight_layout

__all__ = ["bayes_ratio_data", "plot_bayes_ratio"]


def bayes_ratio_data(setting, *, quick=False) -> FigureData:
    """Limiting risk ratio E_gd(η*)/E_Bayes and its bound on a (ξ, σ²) grid (closed forms).

    Parameters
    ----------
    setting : Setting
        Only marks its point ``(ξ, σ²) = (d/L, sigma2)`` on the map (the grid does not depend on it).
    quick : bool
        40 × 40 grid instead of 161 × 161.

    Returns
    -------
    FigureData
        ``xi (N,)``, ``sigma2 (N,)``, ``ratio, bound, condition (N, N)`` (rows: σ², columns: ξ;
        ``condition`` is σ² + 1/ξ > 1), ``point_xi, point_sigma2`` (the setting's point).
    """
    from reduced_dynamics.estimation.closed_forms import bayes_risk_limit, gd_risk_limit, risk_ratio_bound

    nx = 40 if quick else 161
    xi = np.geomspace(1e-2, 1e2, nx)
    s2 = np.geomspace(1e-2, 1e1, nx)
    XI, S2 = np.meshgrid(xi, s2)
    gd = np.asarray(gd_risk_limit(sigma2=S2, xi=XI))
    by = np.asarray(bayes_risk_limit(sigma2=S2, xi=XI))
    ratio = gd / by
    bound = np.asarray(risk_ratio_bound(sigma2=S2, xi=XI))
    return FigureData(
        "bayes_ratio",
        {
            "xi": xi,
            "sigma2": s2,
            "ratio": ratio,
            "bound": bound,
            "condition": (S2 + 1.0 / XI > 1.0),
            "point_xi": setting.d / setting.L,
            "point_sigma2": setting.sigma2,
        },
    )


@styled_data
def plot_bayes_ratio(data, *, fig=None):
    """(a) the risk ratio, (b) its bound, (c) the slack, over the (ξ, σ²) plane.

    Parameters
    ----------
    data : FigureData or mapping
        From :func:`bayes_ratio_data` (or its ``.npz``).
    fig : Figure or SubFigure, optional
        Where to draw; default a new 16 × 4.8 in figure.

    Returns
    -------
    Figure or SubFigure
        ``fig``.
    """
    import matplotlib.colors as mcolors

    xi, s2 = data["xi"], data["sigma2"]
    fig = new_figure(fig, figsize=(16, 4.8))
    axes = fig.subplots(1, 3)
    panels = [
        ("ratio", r"(a) ratio $E_{\rm gd}(\eta^*)/E_{\rm Bayes}$ (limit $L\to\infty$)"),
        ("bound", r"(b) bound $1+\sigma^{-2}\{(1+\xi\sigma^2)(1+\sigma^2+1/\xi)\}^{-1}$"),
        ("slack", r"(c) slack = bound − ratio (log colour)"),
    ]
    xc = np.geomspace(xi.min(), xi.max(), 400)
    for ax, (key, title) in zip(axes, panels):
        Z = data["bound"] - data["ratio"] if key == "slack" else data[key]
        if key == "slack":
            Zc = np.clip(Z, 1e-6, None)
            im = ax.pcolormesh(
                xi,
                s2,
                Zc,
                norm=mcolors.LogNorm(vmin=max(Zc.min(), 1e-6), vmax=Zc.max()),
                cmap="cividis",
                shading="auto",
            )
            cs = ax.contour(xi, s2, Zc, levels=[1e-3, 1e-2, 1e-1, 1, 10], colors="w", linewidths=0.7)
        else:
            im = ax.pcolormesh(
                xi,
                s2,
                Z,
                norm=mcolors.LogNorm(vmin=1.0, vmax=max(float(Z.max()), 1.01)),
                cmap="viridis",
                shading="auto",
            )
            cs = ax.contour(xi, s2, Z, levels=[1.01, 1.1, 1.5, 2, 5, 10, 100], colors="w", linewidths=0.7)
        ax.clabel(cs, fontsize=7, fmt="%g")
        cb = fig.colorbar(im, ax=ax, fraction=0.045, pad=0.02)
        cb.set_label({"ratio": "risk ratio", "bound": "bound", "slack": "bound − ratio"}[key])
        # condition boundary σ² + 1/ξ = 1  ⇔  σ² = 1 − 1/ξ (ξ > 1)
        xb = xc[xc > 1.0]
        sb = 1.0 - 1.0 / xb
        okb = (sb >= s2.min()) & (sb <= s2.max())
        ax.plot(
            xb[okb],
            sb[okb],
            color=OKABE_ITO[1],
            lw=2.0,
            label=r"$\sigma^2+1/\xi=1$ (condition fails to the lower right)",
        )
        px, ps = float(data.get("point_xi", 5 / 40)), float(data.get("point_sigma2", 0.1))
        ax.plot(
            [px], [ps], marker="*", ms=12, color=OKABE_ITO[4], mec="k", ls="none", label=f"setting: ξ={px:g}, σ²={ps:g}"
        )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(r"$\xi=d/L$")
        ax.set_ylabel(r"noise variance $\sigma^2$")
        ax.set_title(title, fontsize=10)
        ax.grid(False)
    axes[0].legend(loc="upper right", fontsize=7.5, framealpha=0.9)
    tight_layout(fig)
    return fig


def _key_numbers(data) -> dict:
    """Smallest slack, largest ratio, and ratio and bound at the setting's point."""
    from reduced_dynamics.estimation.closed_forms import bayes_risk_limit, gd_risk_limit, risk_ratio_bound

    px, ps = float(data["point_xi"]), float(data["point_sigma2"])
    sl = data["bound"] - data["ratio"]
    i = np.unravel_index(np.argmin(sl), sl.shape)
    j = np.unravel_index(np.argmax(data["ratio"]), sl.shape)
    paper_ratio = float(gd_risk_limit(sigma2=ps, xi=px) / bayes_risk_limit(sigma2=ps, xi=px))
    return {
        "min_slack": float(sl[i]),
        "min_slack_at": {"xi": float(data["xi"][i[1]]), "sigma2": float(data["sigma2"][i[0]])},
        "ratio_le_bound_everywhere_on_grid": bool(np.all(sl >= -1e-12)),
        "ratio_le_bound_where_condition_fails": bool(np.all(sl[~data["condition"]] >= -1e-12)),
        "max_ratio": float(data["ratio"][j]),
        "max_ratio_at": {"xi": float(data["xi"][j[1]]), "sigma2": float(data["sigma2"][j[0]])},
        "paper_point": {"ratio": paper_ratio, "bound": float(risk_ratio_bound(sigma2=ps, xi=px))},
    }
