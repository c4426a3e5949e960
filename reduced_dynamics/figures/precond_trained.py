"""Figure ``precond_trained``: attention trained under x ~ N(0, Σ) learns KQ blocks ∝ (Σ + κ_L I)⁻¹ ≈ Σ⁻¹.

Σ has eigenvalues evenly spread over [0.5, 4] in a random orthogonal basis (seed 0; the setting's
``Sigma`` if it has one), d = 5, σ² = 0.1. Two-head softmax attention (separate Q, K, V, o) is
trained with Adam from random init at each L (batch 256, fresh prompts; 4000 steps at lr 1e-2 then
4000 at lr 1e-3). (a) The covariate block of each head's KQ at the largest L, next to Σ⁻¹ and to the
optimal preconditioner P* of debiased preconditioned GD at that L (each scaled to unit Frobenius
norm, sign so that the trace is positive). (b) Scale-free distance to Σ⁻¹ of the learned effective
preconditioner ``P_eff = Σ_h μ_h B_h`` (the limit predictor's; ``B_h`` the covariate block of head h) vs L
(trained runs, and the paper-scale runs of ``scripts/precond_experiment.py`` when their report
``figures/precond_trained_runs.json`` is present), with the exact distance of P* to Σ⁻¹ and of I to
Σ⁻¹ (control). (c) Risk vs L: the trained model (Monte Carlo ± 1 SE) against the exact risks of
debiased preconditioned GD at P*, at Σ⁻¹ (its best step) and of plain debiased GD (P = I, its best
step under Σ).

References
----------
docs/theory.md#non-isotropic-covariates
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from reduced_dynamics.figures._base import FigureData
from reduced_dynamics.plots.style import OKABE_ITO, new_figure, styled_data, tight_layout
from reduced_dynamics.precond.covariance import example_covariance
from reduced_dynamics.setting import Setting

__all__ = ["precond_trained_data", "plot_precond_trained", "train_under_sigma", "PAPER_RUNS"]

#: Report of the paper-scale runs (``scripts/precond_experiment.py report``, copied here), overlaid when present.
PAPER_RUNS = Path(__file__).resolve().parents[2] / "figures" / "precond_trained_runs.json"
#: Training phases (steps, Adam lr) of the figure's models; quick: one short phase.
PHASES = ((4000, 1e-2), (4000, 1e-3))
QUICK_PHASES = ((600, 1e-2),)


def train_under_sigma(setting: Setting, *, n_heads: int = 2, seed: int, phases=PHASES):
    """Train the separate-parameter softmax model under ``setting`` (with its Σ) through Adam ``phases``.

    Phase ``k`` (``(steps, lr)``) starts from the parameters of phase ``k − 1`` with the prompt stream
    of seed ``seed + k``.

    Returns
    -------
    model, params, losses
        The model, its final parameters and the concatenated training losses.
    """
    from reduced_dynamics.model.training import TrainConfig, train

    params, losses, cfg = None, [], None
    for k, (steps, lr) in enumerate(phases):
        cfg = TrainConfig(setting=setting, n_heads=n_heads, steps=int(steps), lr=float(lr), seed=seed + k, batch=256)
        r = train(cfg, init_params=params)
        if not r.success:
            raise ValueError(f"training under Σ failed at L = {setting.L}: {r.message}")
        params, losses = r.params, losses + [r.losses]
    return cfg.model(), params, np.concatenate(losses)


def _unit(A):
    A = np.asarray(A, dtype=np.float64)
    s = np.sign(np.trace(A)) or 1.0
    return s * A / np.linalg.norm(A)


def _paper_runs() -> dict:
    """The paper-scale runs' numbers from :data:`PAPER_RUNS` (empty arrays when the file is absent)."""
    keys = ("paper_L", "paper_H", "paper_steps", "paper_W_dist", "paper_P_eff_dist", "paper_risk", "paper_risk_se")
    keys += ("paper_diff_opt", "paper_diff_opt_se")
    if not PAPER_RUNS.is_file():
        return {k: np.zeros(0) for k in keys}
    runs = json.loads(PAPER_RUNS.read_text())["runs"]
    return {
        "paper_L": np.array([r["L"] for r in runs]),
        "paper_H": np.array([r["H"] for r in runs]),
        "paper_steps": np.array([r["steps"] for r in runs]),
        "paper_W_dist": np.array([r["W_distance_sigma_inv"] for r in runs]),
        "paper_P_eff_dist": np.array([r["P_eff_distance_sigma_inv"] for r in runs]),
        "paper_risk": np.array([r["risks"]["model"]["risk"] for r in runs]),
        "paper_risk_se": np.array([r["risks"]["model"]["stderr"] for r in runs]),
        "paper_diff_opt": np.array([r["diffs"]["model-dpgd_optimal"]["risk"] for r in runs]),
        "paper_diff_opt_se": np.array([r["diffs"]["model-dpgd_optimal"]["stderr"] for r in runs]),
    }


def precond_trained_data(setting, *, quick=False, seed) -> FigureData:
    """Train two-head models under Σ at several L; extract their circuits; exact and Monte Carlo risks.

    Parameters
    ----------
    setting : Setting
        ``d`` and ``σ²`` of the problem (the registry: the paper's); its ``Sigma``, or
        :func:`~reduced_dynamics.precond.covariance.example_covariance` (seed 0) when it has none. ``L`` is not used (the figure sweeps it).
    quick : bool
        L = 20, 40, 600 steps at lr 1e-2, 4000 risk prompts (full: L = 20, 40, 80, 160, 4000 steps at
        lr 1e-2 then 4000 at lr 1e-3, 40000 prompts).
    seed : int
        Training seed (phase k uses ``seed + k``) and evaluation seed.

    Returns
    -------
    FigureData
        ``Ls (K,)``, ``Sigma``, ``sigma_inv``, ``P_opt_last`` (d, d), ``kq_last (H, d, d)``;
        ``W (K, d, d)``, ``W_dist_sigma_inv``, ``W_dist_identity``, ``W_dist_optimal``, ``P_eff_dist_sigma_inv``,
        ``P_eff_dist_optimal`` (K,);
        ``cos_sigma_inv``, ``cos_identity`` (K, H); ``risk``, ``risk_se``, ``diff_opt``,
        ``diff_opt_se``, ``diff_own``, ``diff_own_se`` (K,); ``L_grid (G,)``, ``opt_dist_grid``,
        ``risk_opt_grid``, ``risk_sigma_inv_grid``, ``risk_identity_grid`` (G,),
        ``identity_dist`` (float); the paper-scale overlay ``paper_*`` (empty when absent or quick).
    """
    from reduced_dynamics.model.circuits import precond_cross_check
    from reduced_dynamics.precond.exact import dpgd_risk, optimal_dpgd, precond_optimal_eta
    from reduced_dynamics.precond.metrics import scale_free_distance

    d, sigma2 = int(setting.d), float(setting.sigma2)
    S = setting.Sigma if setting.Sigma is not None else example_covariance(setting, seed=0)
    Si = np.linalg.inv(S)
    Si = 0.5 * (Si + Si.T)
    Ls = (20, 40) if quick else (20, 40, 80, 160)
    phases = QUICK_PHASES if quick else PHASES
    n_prompts = 4000 if quick else 40_000
    H = 2
    K = len(Ls)
    out = {k: np.zeros(K) for k in ("W_dist_sigma_inv", "W_dist_identity", "W_dist_optimal", "risk", "risk_se")}
    out.update({k: np.zeros(K) for k in ("P_eff_dist_sigma_inv", "P_eff_dist_optimal")})
    out.update({k: np.zeros(K) for k in ("diff_opt", "diff_opt_se", "diff_own", "diff_own_se")})
    W = np.zeros((K, d, d))
    cos_si, cos_i = np.zeros((K, H)), np.zeros((K, H))
    kq_last = P_last = None
    for i, L in enumerate(Ls):
        s = Setting(d=d, L=L, sigma2=sigma2, Sigma=S)
        model, params, _ = train_under_sigma(s, n_heads=H, seed=seed, phases=phases)
        cc = precond_cross_check(model, params, s, n_prompts=n_prompts, seed=seed + 1000 + i)
        c = cc.circuits
        opt = optimal_dpgd(s)
        W[i] = c.W
        cos_si[i], cos_i[i] = c.cosine_sigma_inv, c.cosine_identity
        out["W_dist_sigma_inv"][i], out["W_dist_identity"][i] = c.W_distance_sigma_inv, c.W_distance_identity
        out["W_dist_optimal"][i] = float(scale_free_distance(c.W, opt.P))
        out["P_eff_dist_sigma_inv"][i] = c.P_eff_distance_sigma_inv
        out["P_eff_dist_optimal"][i] = float(scale_free_distance(c.P_eff, opt.P))
        out["risk"][i], out["risk_se"][i] = cc.risks["model"].risk, cc.risks["model"].stderr
        out["diff_opt"][i], out["diff_opt_se"][i] = cc.diffs["dpgd_optimal"].risk, cc.diffs["dpgd_optimal"].stderr
        out["diff_own"][i], out["diff_own_se"][i] = cc.diffs["dpgd_own"].risk, cc.diffs["dpgd_own"].stderr
        kq_last, P_last = c.kq, opt.P
    L_grid = np.unique(np.round(np.geomspace(10, 400, 40)).astype(int))
    grid = {k: np.zeros(L_grid.size) for k in ("opt_dist_grid", "risk_opt_grid", "risk_sigma_inv_grid")}
    grid["risk_identity_grid"] = np.zeros(L_grid.size)
    for j, L in enumerate(L_grid):
        s = Setting(d=d, L=int(L), sigma2=sigma2, Sigma=S)
        opt = optimal_dpgd(s)
        grid["opt_dist_grid"][j] = opt.distance_to_sigma_inv
        grid["risk_opt_grid"][j] = opt.risk
        grid["risk_sigma_inv_grid"][j] = dpgd_risk(Si, precond_optimal_eta(Si, s), s)
        grid["risk_identity_grid"][j] = dpgd_risk(np.eye(d), precond_optimal_eta(np.eye(d), s), s)
    paper = _paper_runs() if not quick else {k: np.zeros(0) for k in _paper_runs()}
    arrays = {
        "Ls": np.array(Ls),
        "Sigma": S,
        "sigma_inv": Si,
        "P_opt_last": P_last,
        "kq_last": kq_last,
        "W": W,
        "cos_sigma_inv": cos_si,
        "cos_identity": cos_i,
        "L_grid": L_grid,
        "identity_dist": float(scale_free_distance(np.eye(d), Si)),
        "steps": int(sum(p[0] for p in phases)),
        "n_prompts": n_prompts,
        **out,
        **grid,
        **paper,
    }
    return FigureData("precond_trained", arrays)


@styled_data
def plot_precond_trained(data, *, fig=None):
    """Draw the figure from its data (see :func:`precond_trained_data`); returns the Figure."""
    fig = new_figure(fig, figsize=(14, 8.2))
    top = fig.add_gridspec(2, 1, height_ratios=[1.0, 1.25])
    row1 = top[0].subgridspec(1, 4)
    row2 = top[1].subgridspec(1, 2)
    Ls = np.asarray(data["Ls"])
    Lmax = int(Ls[-1])
    kq = np.asarray(data["kq_last"])
    mats = [
        (_unit(data["sigma_inv"]), r"$\Sigma^{-1}$"),
        (_unit(data["P_opt_last"]), rf"optimal $P^*$ of debiased precond. GD, $L={Lmax}$"),
    ] + [(_unit(kq[h]), f"trained head {h + 1}: KQ block, L = {Lmax}") for h in range(kq.shape[0])]
    vmax = max(float(np.abs(m).max()) for m, _ in mats)
    im = None
    for j, (m, title) in enumerate(mats[:4]):
        ax = fig.add_subplot(row1[0, j])
        im = ax.imshow(m, cmap="RdBu_r", vmin=-vmax, vmax=vmax)
        ax.set_title(("(a) " if j == 0 else "") + title, fontsize=9)
        ax.set_xticks(range(m.shape[0]))
        ax.set_yticks(range(m.shape[0]))
        ax.grid(False)
    fig.colorbar(im, ax=fig.axes[-1], fraction=0.046, pad=0.04, label="entry (unit Frobenius norm)")

    ax = fig.add_subplot(row2[0, 0])
    Lg = np.asarray(data["L_grid"])
    ax.plot(Lg, data["opt_dist_grid"], color=OKABE_ITO[7], lw=1.5, label=r"optimal $P^*$ (exact)")
    ax.axhline(float(data["identity_dist"]), color=OKABE_ITO[1], ls="--", lw=1.2, label=r"$I$ (control)")
    ax.plot(
        Ls,
        data["P_eff_dist_sigma_inv"],
        "o",
        color=OKABE_ITO[0],
        ms=7,
        label=f"trained $P_{{eff}}$, H = 2 ({data['steps']} steps)",
    )
    pL, pH = np.asarray(data["paper_L"]), np.asarray(data["paper_H"])
    for H, mk in ((2, "s"), (3, "^")):
        sel = pH == H
        if sel.any():
            ax.plot(
                pL[sel],
                np.asarray(data["paper_P_eff_dist"])[sel],
                mk,
                mfc="none",
                color=OKABE_ITO[2],
                ms=9,
                mew=1.5,
                label=f"trained $P_{{eff}}$, H = {H}, paper scale (lr 1e-3)",
            )
    ax.set_xscale("log")
    ax.set_xlabel("context length L")
    ax.set_ylabel(r"distance to $\Sigma^{-1}$: $\min_c\|cA-\Sigma^{-1}\|_F/\|\Sigma^{-1}\|_F$")
    ax.set_title(r"(b) distance of the learned preconditioner $P_{eff}=\sum_h\mu_h B_h$ to $\Sigma^{-1}$")
    ax.set_ylim(0, None)
    ax.legend(loc="center right")

    ax = fig.add_subplot(row2[0, 1])
    ax.plot(Lg, data["risk_identity_grid"], color=OKABE_ITO[1], ls="--", label="debiased GD, P = I (exact, best η)")
    ax.plot(Lg, data["risk_sigma_inv_grid"], color=OKABE_ITO[3], label=r"debiased precond. GD, $P=\Sigma^{-1}$ (exact)")
    ax.plot(Lg, data["risk_opt_grid"], color=OKABE_ITO[7], lw=1.0, ls=":", label=r"debiased precond. GD, $P^*$ (exact)")
    ax.errorbar(
        Ls, data["risk"], yerr=data["risk_se"], fmt="o", color=OKABE_ITO[0], ms=6, capsize=3, label="trained, H = 2"
    )
    if pL.size:
        ax.errorbar(
            pL,
            data["paper_risk"],
            yerr=data["paper_risk_se"],
            fmt="s",
            mfc="none",
            color=OKABE_ITO[2],
            ms=9,
            capsize=3,
            label="trained, paper scale (H = 2, 3)",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("context length L")
    ax.set_ylabel(r"risk $E(y_q-\hat y)^2$")
    ax.set_title(r"(c) risk under $x\sim N(0,\Sigma)$, eigenvalues in [0.5, 4]")
    ax.legend(loc="upper right")
    tight_layout(fig)
    return fig


def _key_numbers(data) -> dict:
    """Distances of W to Σ⁻¹ and to P*, per-head cosines, and model − dpgd(P*) per L."""
    Ls = [int(x) for x in data["Ls"]]
    return {
        "W_distance_sigma_inv": dict(zip(Ls, map(float, data["W_dist_sigma_inv"]))),
        "W_distance_optimal": dict(zip(Ls, map(float, data["W_dist_optimal"]))),
        "P_eff_distance_sigma_inv": dict(zip(Ls, map(float, data["P_eff_dist_sigma_inv"]))),
        "P_eff_distance_optimal": dict(zip(Ls, map(float, data["P_eff_dist_optimal"]))),
        "cos_sigma_inv_min": dict(zip(Ls, map(float, np.min(data["cos_sigma_inv"], axis=1)))),
        "cos_identity_max": dict(zip(Ls, map(float, np.max(data["cos_identity"], axis=1)))),
        "model_minus_dpgd_optimal": {
            L: [float(a), float(b)] for L, a, b in zip(Ls, data["diff_opt"], data["diff_opt_se"])
        },
    }
