"""Figure ``risk_vs_L``: risk vs prompt length of the two-head reduced model and the reference estimators.

Monte Carlo (Rao–Blackwellised, common prompts) and exact risks of the two-head
reduced predictor at the flow's end state, the single-head optimum, optimal
one-step GD, debiased GD at η* and Bayes ridge, for L = 10 … 100.

References
----------
docs/theory.md#predictors, docs/theory.md#optimality, docs/theory.md#finite-l-results
"""

from __future__ import annotations

import numpy as np

from reduced_dynamics.dynamics.manifold import eta_star, single_head_optimum
from reduced_dynamics.figures._base import FigureData
from reduced_dynamics.flow import integrate
from reduced_dynamics.models import reduced_model
from reduced_dynamics.plots.style import OKABE_ITO, new_figure, styled_data, tight_layout

__all__ = ["risk_vs_L_data", "plot_risk_vs_L", "LABELS"]


def risk_vs_L_data(setting, *, quick=False, seed) -> FigureData:
    """Monte Carlo and exact risks vs L of the two-head reduced predictor and the references.

    Parameters
    ----------
    setting : Setting
        Its ``d`` and ``sigma2`` are used; ``L`` is swept over 10, 20, …, 100 (quick: 10, 40).
    quick : bool
        Two lengths, 4000 prompts, flow to t = 100.
    seed : int
        Prompts at length ``L`` use seed ``seed + 1000 L``.

    Returns
    -------
    FigureData
        ``d, sigma2, n, t_end``, ``L (K,)``, ``names (5,)``, ``risk, stderr, excess_over_bayes,
        excess_stderr (K, 5)``, ``exact_gd, exact_debiased_gd, approx_two_head, approx_single_head,
        bayes_limit (K,)``, ``two_head_state (K, 4)`` (ω₁, ω₂, μ₁, μ₂ at the flow's end).
    """
    from reduced_dynamics.dynamics.loss import approx_loss
    from reduced_dynamics.estimation.closed_forms import bayes_risk_limit, gd_optimal_eta, gd_optimal_risk
    from reduced_dynamics.estimation.predictors import BayesRidge, DebiasedGD, MultiHead, SingleHead, VanillaGD
    from reduced_dynamics.estimation.risk import estimate_risks

    d, s2 = setting.d, setting.sigma2
    Ls = np.array([10, 40]) if quick else np.arange(10, 101, 10)
    n = 4000 if quick else 200_000
    t_end = 1e2 if quick else 1e5
    names = ["multi_head", "single_head", "gd", "debiased_gd", "bayes_ridge"]
    risk = np.zeros((len(Ls), len(names)))
    se = np.zeros_like(risk)
    excess = np.zeros((len(Ls), len(names)))
    excess_se = np.zeros_like(excess)
    exact_gd = np.zeros(len(Ls))
    exact_dgd = np.zeros(len(Ls))
    approx_two = np.zeros(len(Ls))
    approx_one = np.zeros(len(Ls))
    bayes_lim = np.zeros(len(Ls))
    two_state = np.zeros((len(Ls), 4))
    for i, L in enumerate(Ls):
        L = int(L)
        at_L = setting.replace(L=L)
        model = reduced_model(at_L, n_heads=2)
        fr = integrate(model, model.symmetric_state(0.01), t_end=t_end, n_times=50)
        w, m = fr.omega[-1], fr.mu[-1]
        two_state[i] = np.concatenate([w, m])
        preds = [
            MultiHead(tuple(w), tuple(m)),
            SingleHead.optimum(at_L),
            VanillaGD(gd_optimal_eta(at_L)),
            DebiasedGD(eta_star(at_L)),
            BayesRidge(),
        ]
        r = estimate_risks(preds, at_L, n_prompts=n, seed=seed + 1000 * L, sampler="full", conditional=True)
        for j, nm in enumerate(names):
            risk[i, j], se[i, j] = r[nm].risk, r[nm].stderr
            dif = r.difference(nm, "bayes_ridge")
            excess[i, j], excess_se[i, j] = dif.risk, dif.stderr
        exact_gd[i] = gd_optimal_risk(at_L)
        exact_dgd[i] = gd_optimal_risk(at_L, debiased=True)
        approx_two[i] = approx_loss(w, m, at_L)
        approx_one[i] = single_head_optimum(at_L).loss
        bayes_lim[i] = bayes_risk_limit(sigma2=s2, xi=d / L)
    return FigureData(
        "risk_vs_L",
        {
            "d": d,
            "sigma2": s2,
            "n": n,
            "t_end": t_end,
            "L": Ls,
            "names": np.array(names),
            "risk": risk,
            "stderr": se,
            "excess_over_bayes": excess,
            "excess_stderr": excess_se,
            "exact_gd": exact_gd,
            "exact_debiased_gd": exact_dgd,
            "approx_two_head": approx_two,
            "approx_single_head": approx_one,
            "bayes_limit": bayes_lim,
            "two_head_state": two_state,
        },
    )


LABELS = {
    "multi_head": "two-head softmax (reduced, flow end state)",
    "single_head": "single head (kernel, H=1 optimum)",
    "gd": "one-step GD (optimal η)",
    "debiased_gd": r"debiased GD ($\eta^*$)",
    "bayes_ridge": r"Bayes ridge ($\lambda=\sigma^2 d$)",
}


@styled_data
def plot_risk_vs_L(data, *, fig=None):
    """(a) risk vs L of every estimator with exact curves; (b) paired excess over Bayes ridge.

    Parameters
    ----------
    data : FigureData or mapping
        From :func:`risk_vs_L_data` (or its ``.npz``).
    fig : Figure or SubFigure, optional
        Where to draw; default a new 13 × 4.8 in figure.

    Returns
    -------
    Figure or SubFigure
        ``fig``.
    """
    from matplotlib.lines import Line2D

    Ls = data["L"]
    names = [str(s) for s in data["names"]]
    cols = dict(zip(names, [OKABE_ITO[0], OKABE_ITO[3], OKABE_ITO[4], OKABE_ITO[2], "k"]))
    mk = dict(zip(names, ["o", "s", "^", "v", "D"]))
    fig = new_figure(fig, figsize=(13, 4.8))
    a0, a1 = fig.subplots(1, 2)
    off = dict(zip(names, np.linspace(-1.2, 1.2, len(names))))
    for j, nm in enumerate(names):
        a0.errorbar(
            Ls + off[nm],
            data["risk"][:, j],
            yerr=2 * data["stderr"][:, j],
            fmt=mk[nm],
            color=cols[nm],
            ms=5,
            capsize=2,
            label=LABELS.get(nm, nm),
            ls="none",
        )
        if nm != "bayes_ridge":
            a1.errorbar(
                Ls + off[nm],
                data["excess_over_bayes"][:, j],
                yerr=2 * data["excess_stderr"][:, j],
                fmt=mk[nm],
                color=cols[nm],
                ms=5,
                capsize=2,
                ls="none",
            )
    a0.plot(Ls, data["exact_gd"], color=cols["gd"], lw=1.2, label="GD exact risk")
    a0.plot(Ls, data["exact_debiased_gd"], color=cols["debiased_gd"], lw=1.2, label="debiased GD exact risk")
    a0.plot(
        Ls, data["approx_two_head"], color=cols["multi_head"], lw=1.0, ls="--", label=r"two-head $\tilde L$ (approx.)"
    )
    a0.plot(
        Ls,
        data["approx_single_head"],
        color=cols["single_head"],
        lw=1.0,
        ls="--",
        label=r"single-head $\tilde L$ (approx.)",
    )
    a0.plot(Ls, data["bayes_limit"], color="k", lw=1.0, ls=":", label=r"Bayes limit at $\xi=d/L$ (MP)")
    a0.set_yscale("log")
    a0.set_xlabel("prompt length $L$")
    a0.set_ylabel(r"risk $E(y_q-\hat y)^2$ (incl. $\sigma^2$, log scale)")
    a0.set_title(
        f"(a) Risk vs L (d={int(data['d'])}, σ²={float(data['sigma2']):g}); markers: MC ± 2 s.e. (mostly < marker), n={int(data['n'])}",
        fontsize=9.5,
    )
    handles, labels = a0.get_legend_handles_labels()
    for nm in names:
        if nm == "debiased_gd":
            a1.plot(
                Ls,
                data["exact_debiased_gd"] - data["risk"][:, names.index("bayes_ridge")],
                color=cols[nm],
                lw=0.8,
                alpha=0.6,
            )
        if nm == "gd":
            a1.plot(
                Ls, data["exact_gd"] - data["risk"][:, names.index("bayes_ridge")], color=cols[nm], lw=0.8, alpha=0.6
            )
    a1.set_yscale("log")
    a1.set_xlabel("prompt length $L$")
    a1.set_ylabel("risk − Bayes-ridge risk (log scale)")
    import matplotlib.ticker as mticker

    a1.yaxis.set_major_formatter(mticker.FormatStrFormatter("%g"))
    a1.yaxis.set_minor_formatter(mticker.FormatStrFormatter("%g"))
    a0.yaxis.set_major_formatter(mticker.FormatStrFormatter("%g"))
    a0.yaxis.set_minor_formatter(mticker.FormatStrFormatter("%g"))
    a1.set_title("(b) Excess over Bayes ridge, paired on common prompts (± 2 s.e.)", fontsize=9.5)
    a1.legend(
        handles=[
            Line2D([], [], marker=mk[nm], color=cols[nm], ls="none", label=LABELS[nm])
            for nm in names
            if nm != "bayes_ridge"
        ]
        + [Line2D([], [], color="0.4", lw=0.8, label="exact GD risk − MC Bayes")],
        fontsize=7.5,
        loc="upper right",
    )
    tight_layout(fig)
    fig.subplots_adjust(bottom=0.27)
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=7.5, frameon=True)
    return fig


def _key_numbers(data) -> dict:
    """Risks at L = 40 and the largest two-head − debiased-GD difference."""
    names = [str(s) for s in data["names"]]
    i40 = int(np.argmin(np.abs(data["L"] - 40)))
    return {
        "L": int(data["L"][i40]),
        "risk_at_L": {nm: [float(data["risk"][i40, j]), float(data["stderr"][i40, j])] for j, nm in enumerate(names)},
        "exact_debiased_gd_at_L": float(data["exact_debiased_gd"][i40]),
        "exact_gd_at_L": float(data["exact_gd"][i40]),
        "two_head_minus_debiased_gd_max_over_L": float(np.max(data["risk"][:, 0] - data["risk"][:, 3])),
    }
