"""Figure ``precond_flow``: where the shared KQ matrix W of the preconditioned reduced flow goes under x ~ N(0, Σ).

(a) Scale-free distance of the flow's end-state W to Σ⁻¹ vs L (d = 5, Σ eigenvalues spread over
[0.5, 4] in a random basis), with the derived limit (Σ + λI)⁻¹, λ = (tr Σ + dσ²)/L (line), its
1/L asymptote, and the distance to I as the control. (b) Along the flow: distance of W to Σ⁻¹ and
to the limit (Σ + λI)⁻¹ vs time for each L, from a random W. (c) The normalised end-state W at
L = 40 next to the limit and Σ⁻¹ (all scaled to tr(ΣWΣW) = d).

References
----------
docs/theory.md#non-isotropic-covariates
"""

from __future__ import annotations

import numpy as np

from reduced_dynamics.figures._base import FigureData
from reduced_dynamics.flow import integrate
from reduced_dynamics.models import reduced_model
from reduced_dynamics.plots.style import OKABE_ITO, new_figure, styled_data
from reduced_dynamics.precond.flow import precond_limit
from reduced_dynamics.precond.metrics import scale_free_distance
from reduced_dynamics.setting import Setting

__all__ = ["precond_flow_data", "plot_precond_flow"]


def _sigma(setting: Setting) -> np.ndarray:
    if setting.Sigma is not None:
        return np.asarray(setting.Sigma)
    from reduced_dynamics.precond.covariance import example_covariance

    return example_covariance(setting, seed=0)


def precond_flow_data(setting, *, quick=False, seed) -> FigureData:
    """Flow end states and paths at several L, and the derived limit.

    Parameters
    ----------
    setting : Setting
        ``d``, ``σ²`` (and ``Sigma``; without one, eigenvalues ``linspace(0.5, 4, d)`` in the basis of seed 0).
    quick : bool
        L = 20, 80, 320 to t = 1e3 (full: L = 20, 40, ..., 640 to t = 1e5).
    seed : int
        Seed of the random initial W (the ± start of (ω, μ) is symmetric, scale 0.01).

    Returns
    -------
    FigureData
        ``Ls (k,)``, ``dist_sigma_inv (k,)``, ``dist_limit (k,)``, ``dist_identity (k,)``, ``gamma (k,)``,
        ``eta_eff (k,)``, ``limit_eta (k,)``; ``L_line (m,)`` (integers), ``limit_dist_line (m,)``, ``lam_coef``
        (the 1/L asymptote: distance ≈ lam_coef / L); ``t_path (n,)``, ``path_sigma_inv (k, n)``,
        ``path_limit (k, n)``; ``W40 (d, d)``, ``limit40 (d, d)`` at ``L_w`` (40, or the first L in quick mode), ``sigma_inv (d, d)``
        (normalised);
        ``Sigma (d, d)``, ``t_end``, ``sigma2``.
    """
    Sig = _sigma(setting)
    d, s2 = int(setting.d), float(setting.sigma2)
    base = Setting(d=d, L=40, sigma2=s2, Sigma=Sig)
    Ls = np.array([20, 80, 320]) if quick else np.array([20, 40, 80, 160, 320, 640])
    t_end = 1e3 if quick else 1e5
    n_times = 40
    Si = np.linalg.inv(Sig)
    rows = {k: [] for k in ("dist_sigma_inv", "dist_limit", "dist_identity", "gamma", "eta_eff", "limit_eta")}
    path_si, path_lim, t_path = [], [], None
    W40 = lim40 = None
    L_w = 40 if 40 in Ls else int(Ls[0])
    for L in Ls:
        s = base.replace(L=int(L))
        model = reduced_model(s, n_heads=2)
        # the tolerances the Σ flow has always used (1e-9 / 1e-12), no stationarity stop (it had none)
        r = integrate(
            model,
            model.initial_state(seed=seed),
            t_end=t_end,
            rtol=1e-9,
            atol=1e-12,
            n_times=n_times,
            stationarity_tol=0,
        )
        n, lim = r.final, precond_limit(s)
        rows["dist_sigma_inv"].append(float(n.distance_sigma_inv))
        rows["dist_limit"].append(float(n.distance_limit))
        rows["dist_identity"].append(float(n.distance_identity))
        rows["gamma"].append(n.gamma)
        rows["eta_eff"].append(n.eta_eff)
        rows["limit_eta"].append(lim.eta_eff)
        t_path = r.t
        path_si.append(np.asarray(scale_free_distance(r.W, Si)))
        path_lim.append(np.asarray(scale_free_distance(r.W, lim.Gamma)))
        if L == L_w:
            W40, lim40 = n.W_normalised, lim.P
    L_line = np.unique(np.round(np.geomspace(10, 2000, 200)).astype(int))
    line = np.array([precond_limit(base.replace(L=int(x))).distance_sigma_inv for x in L_line])
    # 1/L asymptote: (Σ + λI)⁻¹ = Σ⁻¹ − λΣ⁻² + O(λ²), so the distance → λ·dist-coefficient of Σ⁻² against Σ⁻¹
    lam_per_L = float(np.trace(Sig) + d * s2)
    coef = lam_per_L * scale_free_distance(Si, Si @ Si) * np.linalg.norm(Si @ Si) / np.linalg.norm(Si)
    sin_n = Si * np.sqrt(d / np.trace(Sig @ Si @ Sig @ Si))
    arrays = {k: np.array(v) for k, v in rows.items()}
    arrays.update(
        Ls=Ls,
        L_line=L_line,
        limit_dist_line=line,
        lam_coef=coef,
        t_path=np.asarray(t_path),
        path_sigma_inv=np.array(path_si),
        path_limit=np.array(path_lim),
        W40=W40,
        L_w=L_w,
        limit40=lim40,
        sigma_inv=sin_n,
        Sigma=Sig,
        t_end=t_end,
        sigma2=s2,
    )
    return FigureData("precond_flow", arrays)


@styled_data
def plot_precond_flow(data, *, fig=None):
    """Draw the three panels (module docstring); returns the figure."""
    fig = new_figure(fig, figsize=(16, 4.6))
    gs = fig.add_gridspec(1, 3, width_ratios=[1.0, 1.0, 1.35], wspace=0.28)
    gm = gs[0, 2].subgridspec(1, 4, width_ratios=[1, 1, 1, 0.07], wspace=0.12)
    Ls = np.asarray(data["Ls"])
    ax = fig.add_subplot(gs[0, 0])
    ax.loglog(data["L_line"], data["limit_dist_line"], color="k", lw=1.2, label="limit (Σ + λI)⁻¹ (derived)")
    ax.loglog(
        data["L_line"],
        float(data["lam_coef"]) / np.asarray(data["L_line"]),
        color="k",
        ls=":",
        lw=1,
        label="1/L asymptote",
    )
    ax.loglog(Ls, data["dist_sigma_inv"], "o", color=OKABE_ITO[0], ms=7, label=f"flow end state, t = {data['t_end']:g}")
    ax.loglog(Ls, data["dist_identity"], "s", color=OKABE_ITO[1], ms=6, label="flow end state vs I (control)")
    ax.set_xlabel("prompt length L")
    ax.set_ylabel("scale-free distance  min_c ‖cW − B‖_F / ‖B‖_F")
    eig = np.linalg.eigvalsh(np.asarray(data["Sigma"]))
    ax.set_ylim(top=12.0)  # room for the legend above the control points
    ax.set_title("(a) distance of the flow's W to Σ⁻¹ vs L", fontsize=9)
    ax.legend(
        loc="upper right",
        fontsize=7,
        title=f"Σ eigenvalues {np.round(eig, 2).tolist()}, d = {eig.size}",
        title_fontsize=7,
    )
    ax = fig.add_subplot(gs[0, 1])
    t = np.asarray(data["t_path"])
    for i, L in enumerate(Ls):
        c = OKABE_ITO[i % len(OKABE_ITO)]
        ax.loglog(t[1:], np.asarray(data["path_sigma_inv"])[i, 1:], color=c, lw=1.3, label=f"L = {L}: to Σ⁻¹")
        ax.loglog(t[1:], np.asarray(data["path_limit"])[i, 1:], color=c, lw=1.0, ls="--")
    ax.set_xlabel("flow time t")
    ax.set_ylabel("scale-free distance of W")
    ax.set_title("(b) along the flow: W to Σ⁻¹ (solid), to (Σ + λI)⁻¹ (dashed)", fontsize=9)
    ax.legend(fontsize=7, ncol=2)
    Lw = int(data["L_w"])
    mats = [
        (f"W (flow, L = {Lw})", data["W40"]),
        (f"(Σ + λI)⁻¹, L = {Lw}", data["limit40"]),
        ("Σ⁻¹", data["sigma_inv"]),
    ]
    vmax = max(float(np.abs(np.asarray(m)).max()) for _, m in mats)
    im = None
    for k, (title, M) in enumerate(mats):
        ax = fig.add_subplot(gm[0, k])
        im = ax.imshow(np.asarray(M), cmap="RdBu_r", vmin=-vmax, vmax=vmax)
        ax.set_title(("(c) " if k == 0 else "") + title, fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    cax = fig.add_subplot(gm[0, 3])
    fig.colorbar(im, cax=cax, label="entry (scaled to tr(ΣWΣW) = d)")
    from matplotlib.figure import Figure

    if isinstance(fig, Figure):  # tight_layout cannot fit the square maps; fixed margins instead
        fig.subplots_adjust(left=0.05, right=0.95, bottom=0.12, top=0.9)
    return fig


def _key_numbers(data) -> dict:
    """Distances of the flow's W to Σ⁻¹ per L, with the limit's, and the largest distance to the limit."""
    Ls = [int(L) for L in data["Ls"]]
    return {
        "distance_sigma_inv": dict(zip(Ls, map(float, data["dist_sigma_inv"]))),
        "distance_limit_max": float(np.max(data["dist_limit"])),
        "eta_eff": dict(zip(Ls, map(float, data["eta_eff"]))),
    }
