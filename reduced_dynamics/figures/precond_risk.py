r"""Figure ``precond_risk``: risk vs L under x ~ N(0, Σ) for preconditioned vs plain debiased GD vs Bayes, and the Bayes ratio.

At the setting's ``d``, ``σ²`` and the covariance of issue 11 (eigenvalues evenly spread over
[0.5, 4] in a random basis, :func:`reduced_dynamics.precond.covariance.precond_setting`; every quantity
shown depends on Σ only through its spectrum):

(a) exact risks vs L of debiased preconditioned GD at the optimal preconditioner
    :math:`(\Sigma + \kappa_L I)^{-1}`, at :math:`\Sigma^{-1}` and at ``I`` (plain debiased GD), each at
    its optimal step, with Rao–Blackwellised Monte Carlo points (common prompts, ±2 SE), and the
    finite-L Bayes risk (Monte Carlo);
(b) scale-free distance of the optimal preconditioner to :math:`\Sigma^{-1}` and the risk gap
    :math:`\mathcal E(\Sigma^{-1}) - \mathcal E(P_\star)` vs L, with their asymptotes
    :math:`O(1/L)` and :math:`O(1/L^2)`;
(c) the proportional-limit ratio ``r`` to Bayes as the fraction :math:`\rho = (r-1)/(U-1)` of the
    isotropic bound's excess (Theorem 1(c) at :math:`\sigma^2/\bar s`, ξ = d/L), vs the noise-to-signal
    ratio :math:`\sigma^2/\bar s`, for this spectrum, for one with 90 % near-null directions and the
    supremum over all spectra (:func:`reduced_dynamics.precond.bayes.bayes_ratio_sigma`); the bound
    holds iff ρ ≤ 1.

References
----------
docs/theory.md#non-isotropic-covariates
"""

from __future__ import annotations

import numpy as np

from reduced_dynamics.figures._base import FigureData
from reduced_dynamics.plots.style import OKABE_ITO, new_figure, styled_data, tight_layout

__all__ = ["precond_risk_data", "plot_precond_risk"]

#: Monte Carlo estimators, in plotting order
NAMES = ("dpgd_optimal", "dpgd_sigma_inv", "debiased_gd")
LABELS = {
    "dpgd_optimal": r"debiased precond. GD, optimal $P_\star=(\Sigma+\kappa_L I)^{-1}$",
    "dpgd_sigma_inv": r"debiased precond. GD, $P=\Sigma^{-1}$",
    "debiased_gd": r"plain debiased GD ($P=I$)",
}
#: the spectrum of panel (c)'s counterexample: 90 % of the directions nearly without variance
NULL_SPECTRUM = np.array([1e-6] * 9 + [1.0])


def precond_risk_data(setting, *, quick=False, seed) -> FigureData:
    """Exact and Monte Carlo risks vs L under Σ, the optimum's distance to Σ⁻¹, and the limit Bayes ratio.

    Parameters
    ----------
    setting : Setting
        Its ``d``, ``sigma2``, ``L`` (the ξ = d/L of panel (c)) and ``Sigma`` (default: the spread
        spectrum of the module docstring) are used; L is swept.
    quick : bool
        Two lengths, 4000 prompts, 200 Bayes matrices.
    seed : int
        Prompts at length ``L`` use seed ``seed + 1000 L``.

    Returns
    -------
    FigureData
        ``d, sigma2, xi, n, sigma_eigs (d,)``; ``L (K,)`` Monte Carlo lengths, ``risk, stderr (K, 3)``,
        ``bayes, bayes_stderr (K,)``; ``L_exact (M,)``, ``exact (M, 3)``, ``distance (M,)``,
        ``gap (M,)``, ``distance_coefficient``; ``snr (S,)``, ``ratio, ratio_sigma_inv, ratio_identity,
        bound, rho, rho_sigma_inv, rho_identity, rho_sup (S,)`` (``rho_sup``: the supremum over all spectra,
        :attr:`~reduced_dynamics.precond.bayes.BayesRatioSigma.sup_ratio`), ``null_ratio, null_bound, null_rho (S,)``,
        ``point_snr``.
    """
    from reduced_dynamics.estimation.risk import estimate_risks
    from reduced_dynamics.precond.bayes import bayes_ratio_sigma, bayes_risk_sigma_finite
    from reduced_dynamics.precond.covariance import precond_setting
    from reduced_dynamics.precond.exact import dpgd_risk, optimal_dpgd, precond_optimal_eta
    from reduced_dynamics.precond.metrics import scale_free_distance
    from reduced_dynamics.precond.predictors import debiased_precond_gd
    from reduced_dynamics.setting import Setting

    s0 = precond_setting(setting)
    d, s2 = s0.d, float(s0.sigma2)
    S = np.array(s0.Sigma)
    Sinv = np.linalg.inv(S)
    Sinv = 0.5 * (Sinv + Sinv.T)
    I = np.eye(d)
    Ls = np.array([10, 40]) if quick else np.array([5, 10, 20, 40, 80, 160])
    n = 4000 if quick else 100_000
    n_bayes = 200 if quick else 4000

    def exact_row(s):
        opt = optimal_dpgd(s)
        return [
            opt.risk,
            dpgd_risk(Sinv, precond_optimal_eta(Sinv, s), s),
            dpgd_risk(I, precond_optimal_eta(I, s), s),
        ], opt

    risk = np.zeros((len(Ls), len(NAMES)))
    se = np.zeros_like(risk)
    bayes = np.zeros(len(Ls))
    bayes_se = np.zeros(len(Ls))
    for k, L in enumerate(Ls):
        s = s0.replace(L=int(L))
        opt = optimal_dpgd(s)
        preds = {
            "dpgd_optimal": debiased_precond_gd(opt.P, opt.eta),
            "dpgd_sigma_inv": debiased_precond_gd(Sinv, precond_optimal_eta(Sinv, s)),
            "debiased_gd": debiased_precond_gd(I, precond_optimal_eta(I, s)),
        }
        res = estimate_risks(preds, s, n_prompts=n, seed=seed + 1000 * int(L), conditional=True)
        for j, name in enumerate(NAMES):
            risk[k, j], se[k, j] = res[name].risk, res[name].stderr
        b = bayes_risk_sigma_finite(s, n_prompts=n_bayes, seed=seed + 1000 * int(L) + 1)
        bayes[k], bayes_se[k] = b.risk, b.stderr
    L_exact = np.unique(np.round(np.geomspace(2, 10_000, 60)).astype(int))
    exact = np.zeros((len(L_exact), len(NAMES)))
    distance = np.zeros(len(L_exact))
    gap = np.zeros(len(L_exact))
    for k, L in enumerate(L_exact):
        row, opt = exact_row(s0.replace(L=int(L)))
        exact[k] = row
        distance[k] = opt.distance_to_sigma_inv
        gap[k] = opt.risk_sigma_inv - opt.risk
    S2inv = Sinv @ Sinv
    coeff = (np.trace(S) + s2 * d) * scale_free_distance(Sinv, S2inv) * np.linalg.norm(S2inv) / np.linalg.norm(Sinv)
    eigs = np.linalg.eigvalsh(S)
    sbar = float(eigs.mean())
    snr = np.geomspace(1e-2, 1e2, 25 if quick else 81)  # σ²/s̄
    xi = float(s0.xi)
    ratio, ratio_inv, ratio_id, bound, null_ratio, null_bound = (np.zeros(len(snr)) for _ in range(6))
    rho, rho_inv, null_rho, rho_sup = (np.zeros(len(snr)) for _ in range(4))
    nbar = float(NULL_SPECTRUM.mean())
    for k, t in enumerate(snr):
        r = bayes_ratio_sigma(eigs, Setting(d=s0.d, L=s0.L, sigma2=t * sbar))
        ratio[k], ratio_inv[k], ratio_id[k], bound[k] = r.ratio, r.ratio_sigma_inv, r.ratio_identity, r.bound
        rho[k], rho_inv[k] = r.rho, r.rho_sigma_inv
        rho_sup[k] = (r.sup_ratio - 1.0) / (r.bound - 1.0)
        rn = bayes_ratio_sigma(NULL_SPECTRUM, Setting(d=s0.d, L=s0.L, sigma2=t * nbar))
        null_ratio[k], null_bound[k], null_rho[k] = rn.ratio, rn.bound, rn.rho
    return FigureData(
        "precond_risk",
        {
            "d": d,
            "sigma2": s2,
            "xi": xi,
            "n": n,
            "sigma_eigs": eigs,
            "L": Ls,
            "names": np.array(NAMES),
            "risk": risk,
            "stderr": se,
            "bayes": bayes,
            "bayes_stderr": bayes_se,
            "L_exact": L_exact,
            "exact": exact,
            "distance": distance,
            "gap": gap,
            "distance_coefficient": float(coeff),
            "snr": snr,
            "ratio": ratio,
            "ratio_sigma_inv": ratio_inv,
            "ratio_identity": ratio_id,
            "bound": bound,
            "null_ratio": null_ratio,
            "null_bound": null_bound,
            "rho": rho,
            "rho_sigma_inv": rho_inv,
            "rho_identity": (ratio_id - 1.0) / (bound - 1.0),
            "null_rho": null_rho,
            "rho_sup": rho_sup,
            "point_snr": s2 / sbar,
        },
    )


@styled_data
def plot_precond_risk(data, *, fig=None):
    """(a) risk vs L, (b) distance of the optimum to Σ⁻¹ and its risk gain vs L, (c) the limit Bayes ratio.

    Parameters
    ----------
    data : FigureData or mapping
        From :func:`precond_risk_data` (or its ``.npz``).
    fig : Figure or SubFigure, optional
        Where to draw; default a new 17 × 5 in figure.

    Returns
    -------
    Figure or SubFigure
        ``fig``.
    """
    fig = new_figure(fig, figsize=(17, 5.2))
    a0, a1, a2 = fig.subplots(1, 3)
    Ls, Le = np.asarray(data["L"]), np.asarray(data["L_exact"])
    names = [str(x) for x in np.asarray(data["names"])]
    colors = {"dpgd_optimal": OKABE_ITO[0], "dpgd_sigma_inv": OKABE_ITO[1], "debiased_gd": OKABE_ITO[2]}
    for j, name in enumerate(names):
        c = colors.get(name, OKABE_ITO[7])
        a0.plot(Le, data["exact"][:, j], color=c, lw=1.6, label=LABELS.get(name, name) + " (exact)")
        a0.errorbar(
            Ls, data["risk"][:, j], yerr=2 * data["stderr"][:, j], fmt="o", ms=4, color=c, capsize=2, label=None
        )
    a0.errorbar(
        Ls,
        data["bayes"],
        yerr=2 * data["bayes_stderr"],
        fmt="s-",
        ms=4,
        color=OKABE_ITO[3],
        capsize=2,
        label=r"Bayes ridge $\lambda=\sigma^2 d$ (Monte Carlo)",
    )
    eigs = np.asarray(data["sigma_eigs"])
    a0.set_xscale("log")
    a0.set_yscale("log")
    a0.set_xlim(2, 1.2 * max(Ls.max(), 200))
    a0.set_xlabel("prompt length $L$")
    a0.set_ylabel(r"risk $E(y_q-\hat y)^2$ (incl. $\sigma^2$, log scale)")
    a0.set_title(
        f"(a) risk vs L, d={int(data['d'])}, σ²={float(data['sigma2']):g}, Σ eigenvalues "
        f"{eigs.min():g}…{eigs.max():g}\n(lines exact at the optimal step; points Monte Carlo ± 2 SE, "
        f"{int(data['n'])} prompts)",
        fontsize=9.5,
    )
    a0.legend(fontsize=7.5, loc="lower left")

    coeff = float(data["distance_coefficient"])
    a1.plot(
        Le, data["distance"], color=OKABE_ITO[0], lw=1.8, label=r"scale-free distance of $P_\star$ to $\Sigma^{-1}$"
    )
    a1.plot(Le, coeff / Le, color=OKABE_ITO[0], lw=1, ls="--", label=f"first order {coeff:.3g}/L")
    a1.plot(
        Le, data["gap"], color=OKABE_ITO[1], lw=1.8, label=r"risk gap $\mathcal{E}(\Sigma^{-1})-\mathcal{E}(P_\star)$"
    )
    g = np.asarray(data["gap"])
    a1.plot(Le, g[-1] * (Le[-1] / Le) ** 2, color=OKABE_ITO[1], lw=1, ls="--", label=r"slope $L^{-2}$")
    a1.set_xscale("log")
    a1.set_yscale("log")
    a1.set_xlabel("prompt length $L$")
    a1.set_ylabel("distance (relative Frobenius) / risk gap")
    a1.set_title("(b) the optimal preconditioner is not Σ⁻¹ at finite L", fontsize=9.5)
    a1.legend(fontsize=7.5, loc="lower left")

    snr = np.asarray(data["snr"])
    a2.plot(snr, data["rho"], color=OKABE_ITO[0], lw=1.8, label=r"optimal $P_\star$, this Σ")
    a2.plot(snr, data["rho_sigma_inv"], color=OKABE_ITO[1], lw=1.5, label=r"$P=\Sigma^{-1}$, this Σ")
    a2.plot(snr, data["rho_identity"], color=OKABE_ITO[2], lw=1.5, label=r"$P=I$, this Σ")
    a2.plot(snr, data["null_rho"], color=OKABE_ITO[4], lw=1.8, label=r"optimal $P_\star$, 90 % near-null directions")
    if "rho_sup" in data:
        a2.plot(
            snr, data["rho_sup"], color="k", lw=1.2, ls=":", label="supremum over all spectra (proven bound, tight)"
        )
    a2.axhline(1.0, color="k", lw=1.3, ls="--", label="bound attained (ρ = 1); above: bound fails")
    ps = float(data["point_snr"])
    a2.axvline(ps, color="0.5", lw=0.8, ls=":", label=f"this setting: σ²/s̄ = {ps:.3g}")
    a2.set_xscale("log")
    a2.set_yscale("log")
    a2.set_xlabel(r"noise-to-signal ratio $\sigma^2/\bar s$ ($\bar s=\mathrm{tr}\,\Sigma/d$)")
    a2.set_ylabel(r"$\rho=(r-1)/(U-1)$, $r$ = limit risk ratio to Bayes")
    a2.set_title(
        f"(c) proportional limit L→∞, d/L = ξ = {float(data['xi']):g}: fraction of the isotropic\n"
        r"bound's excess $U(\sigma^2/\bar s,\xi)-1$ used by the ratio",
        fontsize=9.5,
    )
    a2.legend(fontsize=7.5, loc="lower left")
    tight_layout(fig)
    return fig


def _key_numbers(data) -> dict:
    """Risks at the setting's largest Monte Carlo L, the optimum's distance to Σ⁻¹, the Bayes-ratio verdict."""
    Ls = np.asarray(data["L"])
    names = [str(x) for x in np.asarray(data["names"])]
    k = int(np.argmin(np.abs(Ls - 40)))
    Le = np.asarray(data["L_exact"])
    m = int(np.argmin(np.abs(Le - 40)))
    viol = np.asarray(data["null_ratio"]) > np.asarray(data["null_bound"])
    return {
        "L": int(Ls[k]),
        "risk": {name: float(data["risk"][k, j]) for j, name in enumerate(names)},
        "stderr": {name: float(data["stderr"][k, j]) for j, name in enumerate(names)},
        "bayes": float(data["bayes"][k]),
        "distance_to_sigma_inv_at_L": {"L": int(Le[m]), "distance": float(data["distance"][m])},
        "bound_holds_this_sigma": bool(np.all(np.asarray(data["ratio"]) <= np.asarray(data["bound"]))),
        "max_rho_this_sigma": float(np.max(data["rho"])),
        "max_rho_null_spectrum": float(np.max(data["null_rho"])),
        "max_rho_all_spectra": float(np.max(data["rho_sup"])),
        "null_spectrum_exceeds_bound_from_snr": float(np.asarray(data["snr"])[viol].min()) if np.any(viol) else None,
    }
