"""Figure ``approx_vs_mc``: how well L̃ approximates the true risk of the reduced predictor, vs L.

Relative error (L̃ − MC risk)/MC risk for two-head states on the solution
manifold and the single-head optimum, L = 10 … 1280, with the exact γ → 0 limit.

References
----------
docs/theory.md#approximate-loss, docs/theory.md#approximation, docs/theory.md#deviations
"""

from __future__ import annotations

import numpy as np

from reduced_dynamics.dynamics.manifold import eta_star, inf_loss, mu_gamma, single_head_optimum
from reduced_dynamics.figures._base import FigureData
from reduced_dynamics.plots.style import OKABE_ITO, new_figure, styled_data, tight_layout

__all__ = ["approx_vs_mc_data", "plot_approx_vs_mc"]


def approx_vs_mc_data(setting, *, quick=False, seed) -> FigureData:
    """L̃ and the Monte Carlo risk of reduced predictors (H = 2 on S_γ, H = 1 optimum) for L = 10 … 1280.

    Parameters
    ----------
    setting : Setting
        Its ``d`` and ``sigma2`` are used; ``L`` is swept (quick: 10, 40).
    quick : bool
        Two lengths, two γ, 4000 prompts.
    seed : int
        Prompts at length ``L`` use seed ``seed + 7 L``.

    Returns
    -------
    FigureData
        ``d, sigma2, n``, ``L (K,)``, ``labels (P,)``, ``gammas (P-1,)``, ``mc_risk, mc_stderr,
        approx_loss (K, P)``, ``gamma0_limit_rel_error (K,)`` (exact γ → 0 limit of the two-head
        relative error).
    """
    from reduced_dynamics.dynamics.loss import approx_loss
    from reduced_dynamics.estimation.predictors import MultiHead
    from reduced_dynamics.estimation.risk import estimate_risks

    d, s2 = setting.d, setting.sigma2
    Ls = np.array([10, 40]) if quick else np.array([10, 20, 40, 80, 160, 320, 640, 1280])
    n = 4000 if quick else 400_000
    gammas = [0.1, 0.3] if quick else [0.05, 0.1, 0.2, 0.3]
    labels = [f"H=2 on S_γ, γ={g:g}" for g in gammas] + ["H=1 optimum"]
    mc = np.zeros((len(Ls), len(labels)))
    se = np.zeros_like(mc)
    approx = np.zeros_like(mc)
    for i, L in enumerate(Ls):
        L = int(L)
        at_L = setting.replace(L=L)
        preds = {}
        for g in gammas:
            m = mu_gamma(g, at_L)
            preds[f"H=2 on S_γ, γ={g:g}"] = MultiHead((g, -g), (m, -m))
            approx[i, len(preds) - 1] = approx_loss([g, -g], [m, -m], at_L)
        opt = single_head_optimum(at_L)
        w1, m1, l1 = opt.omega, opt.mu, opt.loss
        preds["H=1 optimum"] = MultiHead((w1,), (m1,))
        approx[i, -1] = l1
        r = estimate_risks(preds, at_L, n_prompts=n, seed=seed + 7 * L, conditional=True)
        for j, nm in enumerate(labels):
            mc[i, j], se[i, j] = r[nm].risk, r[nm].stderr
    from reduced_dynamics.estimation.closed_forms import gd_risk

    # γ → 0 limit of the two-head relative error: L̃ → 1+σ²−η*, the predictor → debiased GD(η*) (exact risk)
    exact = np.array(
        [gd_risk(eta_star(setting.replace(L=int(L))), setting.replace(L=int(L)), debiased=True) for L in Ls]
    )
    limit_rel = (np.array([inf_loss(setting.replace(L=int(L))) for L in Ls]) - exact) / exact
    return FigureData(
        "approx_vs_mc",
        {
            "d": d,
            "sigma2": s2,
            "n": n,
            "L": Ls,
            "labels": np.array(labels),
            "gammas": np.array(gammas),
            "mc_risk": mc,
            "mc_stderr": se,
            "approx_loss": approx,
            "gamma0_limit_rel_error": limit_rel,
        },
    )


@styled_data
def plot_approx_vs_mc(data, *, fig=None):
    """(a) |relative error| of L̃ vs L (log–log), (b) signed relative error ± 2 s.e.

    Parameters
    ----------
    data : FigureData or mapping
        From :func:`approx_vs_mc_data` (or its ``.npz``).
    fig : Figure or SubFigure, optional
        Where to draw; default a new 13 × 4.8 in figure.

    Returns
    -------
    Figure or SubFigure
        ``fig``.
    """

    Ls = data["L"].astype(float)
    labels = [str(s) for s in data["labels"]]
    fig = new_figure(fig, figsize=(13, 4.8))
    a0, a1 = fig.subplots(1, 2)
    for j, nm in enumerate(labels):
        col = OKABE_ITO[j % len(OKABE_ITO)]
        mc, se, ap = data["mc_risk"][:, j], data["mc_stderr"][:, j], data["approx_loss"][:, j]
        rel = (ap - mc) / mc
        rse = se / mc
        a0.errorbar(
            Ls,
            np.abs(rel),
            yerr=2 * rse,
            fmt="o-",
            color=col,
            ms=4,
            capsize=2,
            lw=1.1,
            label=nm.replace("S_γ", r"$S_\gamma$").replace("γ=", r"$\gamma$="),
        )
        a0.plot(Ls, 2 * rse, color=col, lw=0.7, ls=":")
        a1.plot(Ls, rel, "o-", color=col, ms=4, lw=1.1)
        a1.fill_between(Ls, rel - 2 * rse, rel + 2 * rse, color=col, alpha=0.2, lw=0)
    lim = data["gamma0_limit_rel_error"]
    a0.plot(
        Ls,
        np.abs(lim),
        color="k",
        lw=1.0,
        ls="--",
        label=r"$\gamma\to0$: $(1+\sigma^2-\eta^*-R_{\rm dGD}(\eta^*))/R_{\rm dGD}$ (exact)",
    )
    a1.plot(Ls, lim, color="k", lw=1.0, ls="--")
    a0.set_xscale("log")
    a0.set_yscale("log")
    a0.set_xlabel("prompt length $L$ (log scale)")
    a0.set_ylabel(r"$|\tilde L - \mathcal{E}_{\rm MC}|/\mathcal{E}_{\rm MC}$ (log scale)")
    a0.set_title(
        f"(a) Relative error of $\\tilde L$ (d={int(data['d'])}, σ²={float(data['sigma2']):g}); dotted: 2 MC s.e."
    )
    a0.legend(fontsize=7.5, loc="lower left")
    a1.axhline(0, color="k", lw=0.7)
    a1.set_xscale("log")
    a1.set_xlabel("prompt length $L$ (log scale)")
    a1.set_ylabel(r"signed $(\tilde L-\mathcal{E}_{\rm MC})/\mathcal{E}_{\rm MC}$")
    a1.set_title(f"(b) Signed relative error ± 2 s.e. (n={int(data['n'])} prompts, Rao–Blackwellised)")
    tight_layout(fig)
    return fig


def _slopes(data) -> dict:
    """Log–log slope of |relative error| vs L, fitted where the error exceeds 3 s.e. (at least 2 points)."""
    Ls = np.asarray(data["L"], float)
    slopes = {}
    for j, nm in enumerate(str(s) for s in data["labels"]):
        mc, se, ap = data["mc_risk"][:, j], data["mc_stderr"][:, j], data["approx_loss"][:, j]
        rel = (ap - mc) / mc
        sig = np.abs(rel) > 3 * (se / mc)
        if np.sum(sig) >= 2:
            slopes[nm] = np.polyfit(np.log(Ls[sig]), np.log(np.abs(rel[sig])), 1)[0]
    return slopes


def _key_numbers(data) -> dict:
    """Relative errors per L and predictor, their log–log slopes and the γ → 0 limit."""
    slopes = _slopes(data)
    labels = [str(s) for s in data["labels"]]
    rel = (data["approx_loss"] - data["mc_risk"]) / data["mc_risk"]
    return {
        "L": data["L"].tolist(),
        "rel_error": {nm: rel[:, j].tolist() for j, nm in enumerate(labels)},
        "rel_stderr": {nm: (data["mc_stderr"][:, j] / data["mc_risk"][:, j]).tolist() for j, nm in enumerate(labels)},
        "loglog_slope": {k: float(v) for k, v in slopes.items()},
        "gamma0_limit_rel_error": data["gamma0_limit_rel_error"].tolist(),
    }
