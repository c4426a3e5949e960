"""Shared plotting style and the quick trajectory portrait used by ``reduced-dynamics run``.

Matplotlib runs headless (Agg). The palette is Okabe–Ito (colour-blind safe).
"""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from reduced_dynamics.io import atomic_write_bytes

__all__ = ["OKABE_ITO", "apply_style", "save_figure", "plot_flow_summary"]

OKABE_ITO = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"]


def apply_style():
    """Set the package's matplotlib style (readable at README size)."""
    plt.rcParams.update(
        {
            "figure.dpi": 110,
            "savefig.dpi": 130,
            "font.size": 10,
            "axes.titlesize": 11,
            "axes.labelsize": 10,
            "legend.fontsize": 8.5,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.prop_cycle": matplotlib.cycler(color=OKABE_ITO),
        }
    )


def save_figure(fig, path) -> None:
    """Save ``fig`` as PNG atomically and close it."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def plot_flow_summary(result, path) -> None:
    """Two-panel picture of a flow run.

    Left: each head's path in the (ω_h, μ_h) plane, coloured by log10 t, with
    the solution-manifold curve ``μ = ±μ_γ(γ)/n±`` for reference. Right:
    γ(t), η_eff(t) and L̃(t) − inf L̃ against t on log axes, with η* and the
    stage times marked.

    Parameters
    ----------
    result : FlowResult
    path : str or Path
        Output PNG.
    """
    from reduced_dynamics.dynamics.manifold import eta_star, inf_loss, mu_gamma

    apply_style()
    d, L, s2 = result.d, result.L, result.sigma2
    t = result.t
    pos = t > 0
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4.4))
    logt = np.log10(np.where(pos, t, np.nan))
    vmin, vmax = np.nanmin(logt), np.nanmax(logt)
    for h in range(result.n_heads):
        sc = ax0.scatter(
            result.omega[pos, h], result.mu[pos, h], c=logt[pos], s=7, cmap="viridis", vmin=vmin, vmax=vmax
        )
        ax0.plot(result.omega[:, h], result.mu[:, h], lw=0.6, color="0.5", alpha=0.6)
        ax0.annotate(
            f"head {h + 1}",
            (result.omega[-1, h], result.mu[-1, h]),
            fontsize=8,
            xytext=(4, 4),
            textcoords="offset points",
        )
    fig.colorbar(sc, ax=ax0, label=r"$\log_{10} t$")
    diag = result.diagnostics
    if result.n_heads >= 2:
        n_pos = max(int(diag["n_positive"][-1]), 1)
        n_neg = max(int(diag["n_negative"][-1]), 1)
        gmax = max(float(np.max(np.abs(result.omega))), 1e-3)
        g = np.linspace(gmax * 0.02, gmax * 1.05, 200)
        mg = mu_gamma(g, d=d, L=L, sigma2=s2)
        ax0.plot(g, mg / n_pos, "k--", lw=1, label=r"$S_\gamma$: $\mu_h=\mu_\gamma/n_+$")
        ax0.plot(-g, -mg / n_neg, "k:", lw=1, label=r"$S_\gamma$: $\mu_h=-\mu_\gamma/n_-$")
        ax0.set_ylim(np.min(result.mu) * 1.15 - 0.05, np.max(result.mu) * 1.15 + 0.05)
        ax0.legend(loc="best")
    ax0.axhline(0, color="k", lw=0.5)
    ax0.axvline(0, color="k", lw=0.5)
    ax0.set_xlabel(r"KQ scale $\omega_h$")
    ax0.set_ylabel(r"OV value $\mu_h$")
    ax0.set_title(f"Head paths, H={result.n_heads}, d={d}, L={L}, σ²={s2:g}")

    ax1.loglog(t[pos], diag["gamma"][pos], label=r"$\gamma(t)$ (mean $|\omega_h|$)")
    ax1.loglog(t[pos], np.abs(result.eta_eff[pos]), label=r"$\eta_{\rm eff}=\mu^\top\omega$")
    es = eta_star(d, L, s2)
    ax1.axhline(es, color="k", ls="--", lw=0.8, label=rf"$\eta^*={es:.4f}$")
    if result.n_heads >= 2:
        excess = result.loss[pos] - inf_loss(d, L, s2)
        ax1.loglog(t[pos], np.where(excess > 0, excess, np.nan), label=r"$\tilde L-\inf\tilde L$")
    trans = matplotlib.transforms.blended_transform_factory(ax1.transData, ax1.transAxes)
    for k, (name, ts) in enumerate(result.stage_times.items()):
        if ts is not None and ts > 0:
            ax1.axvline(ts, color="0.4", lw=0.7, ls=":")
            ax1.text(
                ts,
                0.62 - 0.1 * k,
                f" {name.replace('_', ' ')}\n t={ts:.3g}",
                transform=trans,
                fontsize=7,
                va="top",
                ha="left",
                bbox=dict(fc="white", ec="none", alpha=0.7, pad=0.5),
            )
    ax1.set_xlabel("time $t$ (gradient-flow units)")
    ax1.set_ylabel("value (log scale)")
    ax1.set_title("Stages and slow drift")
    ax1.legend(loc="lower left", framealpha=0.9)
    fig.tight_layout()
    save_figure(fig, path)
