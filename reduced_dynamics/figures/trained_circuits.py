"""Figure ``trained_circuits``: the KQ and OV circuits of the trained softmax models.

Heat maps of KQ_h = K_hᵀQ_h/√(d+1) and OV_h = V_hᵀo_h per head of the softmax
models trained for the trained-model figures (H = 1, 2, 4), with the extracted
(ω_h, μ_h) and the emergent-pattern metrics.

References
----------
docs/theory.md#emergent-patterns, docs/theory.md#reduced-model
"""

from __future__ import annotations

import numpy as np

from reduced_dynamics.figures._base import FigureData
from reduced_dynamics.figures._trained import TRAINED_MODELS, trained_runs, trained_settings
from reduced_dynamics.plots.style import new_figure, styled_data

__all__ = ["trained_circuits_data", "plot_trained_circuits"]


def trained_circuits_data(setting, *, quick=False, seed) -> FigureData:
    """KQ_h, OV_h, (ω_h, μ_h) and pattern metrics of the trained softmax models (H = 1, 2, 4).

    Parameters
    ----------
    setting : Setting
        Training problem (the registry: the paper's; quick: d = 2, L = 8).
    quick : bool
        300 training steps.
    seed : int
        Training seed.

    Returns
    -------
    FigureData
        ``d, L, sigma2, steps``, ``heads (3,)``; for each H in ``heads``: ``KQ_H{H} (H, d+1, d+1)``,
        ``ov_H{H} (H, d+1)``, ``omega_H{H}, mu_H{H}, dummy_H{H} (H,)``, ``eta_eff_H{H}`` and the
        pattern metrics ``<metric>_H{H}`` (see :func:`reduced_dynamics.pattern_metrics`).
    """
    from reduced_dynamics.model.circuits import extract_circuits, pattern_metrics

    kw = trained_settings(setting, quick=quick)
    runs = trained_runs(setting, quick=quick, seed=seed)
    out = {"d": kw["d"], "L": kw["L"], "sigma2": kw["sigma2"], "steps": kw["steps"], "heads": []}
    for label, H, param in TRAINED_MODELS:
        if param != "separate":
            continue
        r = runs[label]
        c = extract_circuits(r.config.model(), r.params)
        pm = pattern_metrics(c)
        out["heads"].append(H)
        out[f"KQ_H{H}"], out[f"ov_H{H}"] = c.KQ, c.ov
        out[f"omega_H{H}"], out[f"mu_H{H}"], out[f"dummy_H{H}"] = c.omega, c.mu, c.dummy
        out[f"eta_eff_H{H}"] = c.eta_eff
        for k in (
            "kq_offdiag_fraction_max",
            "kq_response_row_fraction_max",
            "ov_offresponse_fraction_max",
            "omega_cv",
            "zero_sum_ratio",
            "sign_match_fraction",
        ):
            out[f"{k}_H{H}"] = getattr(pm, k)
    out["heads"] = np.array(out["heads"])
    return FigureData("trained_circuits", out)


@styled_data
def plot_trained_circuits(data, *, fig=None):
    """Heat maps of KQ_h and OV_h, one row per trained model, with ω_h, μ_h and the pattern metrics.

    Parameters
    ----------
    data : FigureData or mapping
        From :func:`trained_circuits_data` (or its ``.npz``).
    fig : Figure or SubFigure, optional
        Where to draw; default a new (2.9 H_max + 1.2) × (3.7 rows + 0.9) in figure.

    Returns
    -------
    Figure or SubFigure
        ``fig``.
    """
    import matplotlib.pyplot as plt

    d = int(data["d"])
    heads = [int(h) for h in data["heads"]]
    ncol = max(heads)
    names = [f"$x_{{{i + 1}}}$" for i in range(d)] + ["$y$"]
    fig = new_figure(fig, figsize=(2.9 * ncol + 1.2, 3.7 * len(heads) + 0.9))
    outer = fig.add_gridspec(len(heads), 1, hspace=0.5)
    cmap = "RdBu_r"
    for i, H in enumerate(heads):
        # heads, then the colour bars, then (if H < ncol) a text panel; head panels have the same width in every row
        wr = [1.0] * H + [0.07, 0.25] + ([ncol - H - 0.32] if H < ncol else [])
        inner = outer[i].subgridspec(2, len(wr), width_ratios=wr, height_ratios=[d + 1, 1.25], hspace=0.08, wspace=0.3)
        KQ, ov = data[f"KQ_H{H}"], data[f"ov_H{H}"]
        om, mu, dm = data[f"omega_H{H}"], data[f"mu_H{H}"], data[f"dummy_H{H}"]
        kq_lim = float(np.max(np.abs(KQ))) or 1.0
        ov_lim = float(np.max(np.abs(ov))) or 1.0
        for h in range(H):
            a = fig.add_subplot(inner[0, h])
            b = fig.add_subplot(inner[1, h])
            imk = a.imshow(KQ[h], cmap=cmap, vmin=-kq_lim, vmax=kq_lim)
            imo = b.imshow(ov[h][None, :], cmap=cmap, vmin=-ov_lim, vmax=ov_lim, aspect="auto")
            for (r, c), v in np.ndenumerate(KQ[h]):
                a.text(
                    c,
                    r,
                    f"{v:.2f}",
                    ha="center",
                    va="center",
                    fontsize=6.3,
                    color="white" if abs(v) > 0.6 * kq_lim else "0.15",
                )
            for c, v in enumerate(ov[h]):
                b.text(
                    c,
                    0,
                    f"{v:.2f}",
                    ha="center",
                    va="center",
                    fontsize=6.5,
                    color="white" if abs(v) > 0.6 * ov_lim else "0.15",
                )
            for ax in (a, b):
                ax.grid(False)
                ax.set_xticks(range(d + 1))
                ax.set_xticklabels(names, fontsize=8)
            a.set_yticks(range(d + 1))
            a.set_yticklabels(names, fontsize=8)
            b.set_yticks([0])
            b.set_yticklabels(["OV"], fontsize=8)
            a.tick_params(bottom=False, labelbottom=False, top=True, labeltop=True)
            a.set_xlabel("query coordinate ($z_q$), columns", fontsize=7.5, labelpad=2)
            a.xaxis.set_label_position("top")
            if h == 0:
                a.set_ylabel("key coordinate ($z_l$), rows", fontsize=7.5)
            b.set_xlabel("value coordinate ($z_l$)", fontsize=7.5, labelpad=1)
            # the last column multiplies the 0 entry of z_q: irrelevant to the prediction
            a.add_patch(plt.Rectangle((d - 0.5, -0.5), 1, d + 1, fill=False, hatch="///", ec="0.5", lw=0))
            tag = " (dummy)" if bool(dm[h]) else ""
            a.set_title(
                f"H={H}, head {h + 1}{tag}\n$\\omega_{{{h + 1}}}$={om[h]:+.3f},  $\\mu_{{{h + 1}}}$={mu[h]:+.3f}",
                fontsize=9,
            )
        cb1 = fig.colorbar(imk, cax=fig.add_subplot(inner[0, H]))
        cb1.set_label(r"$KQ_h$ entry (symmetric scale)", fontsize=7.5)
        cb1.ax.tick_params(labelsize=7)
        cb2 = fig.colorbar(imo, cax=fig.add_subplot(inner[1, H]))
        cb2.ax.tick_params(labelsize=6)
        cb2.set_label("OV", fontsize=7)
        share = np.abs(om * mu) / max(float(np.max(np.abs(om * mu))), 1e-300)
        lines = [
            f"H = {H}:  $\\eta_{{\\rm eff}}=\\mu^\\top\\omega$ = {float(data[f'eta_eff_H{H}']):.4f}",
            f"KQ off-diagonal energy (x-block): {float(data[f'kq_offdiag_fraction_max_H{H}']):.1e}",
            f"KQ y-row energy (first d columns): {float(data[f'kq_response_row_fraction_max_H{H}']):.1e}",
            f"OV energy off the y entry: {float(data[f'ov_offresponse_fraction_max_H{H}']):.1e}",
            f"sign match ($\\omega_h\\mu_h>0$): {float(data[f'sign_match_fraction_H{H}']):.0%} of heads",
        ]
        if H >= 2:
            lines += [
                f"zero-sum |Σμ|/Σ|μ|: {float(data[f'zero_sum_ratio_H{H}']):.3f}",
                f"|ω| spread (CV over heads): {float(data[f'omega_cv_H{H}']):.3f}",
                "head shares $|\\omega_h\\mu_h|/\\max_k|\\omega_k\\mu_k|$: " + ", ".join(f"{v:.2f}" for v in share),
            ]
        lines.append("(energies: max over heads)")
        if H < ncol:
            t = fig.add_subplot(inner[:, H + 2])
            t.axis("off")
            t.text(
                0.02,
                0.5,
                "\n".join(lines),
                fontsize=8.3,
                va="center",
                ha="left",
                transform=t.transAxes,
                bbox=dict(fc="0.97", ec="0.7"),
            )
        else:
            fig.text(
                0.5,
                outer[i].get_position(fig).y0 - 0.055,
                ";  ".join(lines[:1] + lines[5:-1]),
                ha="center",
                fontsize=8.5,
                bbox=dict(fc="0.97", ec="0.7"),
            )
    fig.suptitle(
        f"Circuits of the trained softmax models (Adam, {int(data['steps'])} steps, d={d}, L={int(data['L'])}, "
        f"σ²={float(data['sigma2']):g}); colours: RdBu, symmetric about 0, one scale per row\n"
        r"$KQ_h=K_h^\top Q_h/\sqrt{d+1}$ (hatched last column multiplies the 0 entry of $z_q$: irrelevant);  "
        r"OV $=V_h^\top o_h$, its $y$ entry is $\mu_h$;  $\omega_h$ = mean of the $x$-diagonal of $KQ_h$",
        fontsize=10,
        y=0.995,
    )
    return fig


def _key_numbers(data) -> dict:
    """(ω, μ), dummy heads, η_eff and pattern metrics per model."""
    res = {}
    for H in data["heads"]:
        H = int(H)
        res[f"H{H}"] = {
            "omega": data[f"omega_H{H}"].tolist(),
            "mu": data[f"mu_H{H}"].tolist(),
            "dummy": data[f"dummy_H{H}"].tolist(),
            "eta_eff": float(data[f"eta_eff_H{H}"]),
            **{
                k: float(data[f"{k}_H{H}"])
                for k in (
                    "kq_offdiag_fraction_max",
                    "ov_offresponse_fraction_max",
                    "omega_cv",
                    "zero_sum_ratio",
                    "sign_match_fraction",
                )
            },
        }
    return res
