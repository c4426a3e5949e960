"""Figure ``drift``: the slow drift along the solution manifold against the derived laws.

γ(t) and η* − η_eff(t) of the gradient flow of L̃ for H = 2, 3, 4 on log–log
axes, with γ ≈ (16 c d³ (pn/(p+n)) t)^(−1/6) and η* − η_eff ≈ ½ η*² c d³ γ⁴.

References
----------
docs/theory.md#drift-law, docs/theory.md#gradient-flow
"""

from __future__ import annotations

import numpy as np

from reduced_dynamics.dynamics.manifold import drift_law_gamma, eta_star, flow_eta_gap
from reduced_dynamics.figures._base import FigureData
from reduced_dynamics.flow import integrate
from reduced_dynamics.models import reduced_model
from reduced_dynamics.plots.style import OKABE_ITO, new_figure, styled_data, tight_layout
from reduced_dynamics.setting import Setting

__all__ = ["drift_data", "plot_drift"]


def drift_data(setting, *, quick=False, seed) -> FigureData:
    """γ(t) and η_eff(t) of the flow from small random inits, H = 2, 3, 4 × 4 seeds, to t = 1e7.

    Parameters
    ----------
    setting : Setting
        Scalar data model (the registry uses the paper's).
    quick : bool
        H = 2, 3, one seed, t = 1e3 (seconds).
    seed : int
        Run ``k`` of each H uses init seed ``seed + k``.

    Returns
    -------
    FigureData
        ``d, L, sigma2, eta_star, t_end``; per run (R runs, T times): ``H, seed, n_pos, n_neg,
        n_dummy, status (R,)``, ``t, gamma, eta_eff (R, T)`` (NaN-padded).
    """
    heads = (2, 3) if quick else (2, 3, 4)
    seeds = [seed] if quick else [seed + k for k in range(4)]
    t_end = 1e3 if quick else 1e7
    n_eval = 80 if quick else 300
    rows = []
    for H in heads:
        model = reduced_model(setting, n_heads=H)
        starts = np.array([model.initial_state(seed=s, scale=0.01) for s in seeds])
        # fewer than 48 starts: a loop of single LSODA runs (the batched Radau starts at 48)
        batch = integrate(model, starts, t_end=t_end, n_times=n_eval, t_first=1e-2)
        for k, s in enumerate(seeds):
            res = batch[k]
            dg = res.diagnostics
            rows.append(
                (
                    H,
                    s,
                    int(dg.n_positive[-1]),
                    int(dg.n_negative[-1]),
                    int(dg.n_dummy[-1]),
                    res.t,
                    res.gamma,
                    res.eta_eff,
                    res.status,
                )
            )
    T = max(len(r[5]) for r in rows)

    def pad(i):
        a = np.full((len(rows), T), np.nan)
        for k, r in enumerate(rows):
            a[k, : len(r[i])] = r[i]
        return a

    return FigureData(
        "drift",
        {
            "d": setting.d,
            "L": setting.L,
            "sigma2": setting.sigma2,
            "eta_star": eta_star(setting),
            "t_end": t_end,
            "H": np.array([r[0] for r in rows]),
            "seed": np.array([r[1] for r in rows]),
            "n_pos": np.array([r[2] for r in rows]),
            "n_neg": np.array([r[3] for r in rows]),
            "n_dummy": np.array([r[4] for r in rows]),
            "status": np.array([r[8] for r in rows]),
            "t": pad(5),
            "gamma": pad(6),
            "eta_eff": pad(7),
        },
    )


@styled_data
def plot_drift(data, *, fig=None):
    """Three panels: γ(t) with the drift law, η* − η_eff(t) with its law, and both ratios to the law.

    Parameters
    ----------
    data : FigureData or mapping
        From :func:`drift_data` (or its ``.npz``).
    fig : Figure or SubFigure, optional
        Where to draw; default a new 15 × 4.6 in figure.

    Returns
    -------
    Figure or SubFigure
        ``fig``.
    """
    from matplotlib.lines import Line2D

    d, L, s2 = int(data["d"]), int(data["L"]), float(data["sigma2"])
    setting = Setting(d=d, L=L, sigma2=s2)
    es = float(data["eta_star"])
    fig = new_figure(fig, figsize=(15, 4.6))
    a0, a1, a2 = fig.subplots(1, 3)
    Hcol = {2: OKABE_ITO[0], 3: OKABE_ITO[1], 4: OKABE_ITO[2], 5: OKABE_ITO[3]}
    pn_done = set()
    for k in range(len(data["H"])):
        H, p, n = int(data["H"][k]), int(data["n_pos"][k]), int(data["n_neg"][k])
        t, g, e = data["t"][k], data["gamma"][k], data["eta_eff"][k]
        ok = np.isfinite(t) & (t > 0)
        col = Hcol.get(H, "0.3")
        a0.loglog(t[ok], g[ok], color=col, lw=1.3, alpha=0.8)
        gap = es - e
        okg = ok & (gap > 0)
        a1.loglog(t[okg], gap[okg], color=col, lw=1.3, alpha=0.8)
        late = ok & (t >= 10)
        if p >= 1 and n >= 1:
            law = drift_law_gamma(t[late], setting, n_positive=p, n_negative=n)
            a2.semilogx(t[late], g[late] / law, color=col, lw=1.3)
            a2.semilogx(t[late], gap[late] / flow_eta_gap(law, setting), color=col, lw=1.3, ls="--")
            if (p, n) not in pn_done:
                pn_done.add((p, n))
                tt = np.geomspace(10, float(np.nanmax(t)), 100)
                gl = drift_law_gamma(tt, setting, n_positive=p, n_negative=n)
                a0.loglog(tt, gl, color="k", lw=0.9, ls=":", zorder=5)
                a1.loglog(tt, flow_eta_gap(gl, setting), color="k", lw=0.9, ls=":", zorder=5)
    a0.set_xlabel("time $t$ (gradient-flow units)")
    a0.set_ylabel(r"$\gamma(t)$ = mean $|\omega_h|$ over non-dummy heads")
    a0.set_title(r"(a) Drift along $S_\gamma$: $\gamma\simeq(16cd^3\frac{pn}{p+n}t)^{-1/6}$")
    handles = [Line2D([], [], color=Hcol[H], lw=1.5, label=f"H = {H}") for H in sorted(set(int(h) for h in data["H"]))]
    handles.append(Line2D([], [], color="k", ls=":", lw=1, label="derived law (p positive, n negative heads)"))
    a0.legend(handles=handles, loc="lower right")
    a1.set_xlabel("time $t$")
    a1.set_ylabel(r"$\eta^*-\eta_{\rm eff}(t)$, $\eta_{\rm eff}=\mu^\top\omega$")
    a1.set_title(rf"(b) $\eta_{{\rm eff}}\to\eta^*={es:.5f}$; law $\frac{{1}}{{2}}\eta^{{*2}}cd^3\gamma^4$ (dotted)")
    a1.legend(
        handles=handles[:-1]
        + [Line2D([], [], color="k", ls=":", lw=1, label=r"$\frac{1}{2}\eta^{*2}cd^3\gamma_{\rm law}(t)^4$")],
        loc="lower left",
    )
    a2.axhline(1.0, color="k", lw=0.8)
    a2.set_ylim(0.9, 1.1)
    a2.set_xlabel("time $t$ (from $t=10$)")
    a2.set_ylabel("measured / law")
    a2.set_title(r"(c) Ratio to the law: $\gamma$ (solid), $\eta^*-\eta_{\rm eff}$ (dashed)")
    a2.legend(
        handles=handles[:-1]
        + [
            Line2D([], [], color="0.3", lw=1.3, label=r"$\gamma/\gamma_{\rm law}$"),
            Line2D([], [], color="0.3", lw=1.3, ls="--", label=r"gap / gap$_{\rm law}$"),
        ],
        loc="upper right",
    )
    fig.suptitle(
        f"Slow drift of the gradient flow on $\\tilde L$ (d={d}, L={L}, σ²={s2:g}, c=(1+σ²)/L; random init scale 0.01, "
        f"{len(set(int(s) for s in data['seed']))} seed(s) per H)",
        y=1.02,
    )
    tight_layout(fig)
    return fig


def _key_numbers(data) -> dict:
    """Per run: final γ and its ratio to the drift law; γ(1e5) of H = 2."""
    setting = Setting(d=int(data["d"]), L=int(data["L"]), sigma2=float(data["sigma2"]))
    res = {"t_end": data["t_end"], "runs": []}
    for k in range(len(data["H"])):
        t, g = data["t"][k], data["gamma"][k]
        last = np.where(np.isfinite(t))[0][-1]
        p, n = int(data["n_pos"][k]), int(data["n_neg"][k])
        law = drift_law_gamma(t[last], setting, n_positive=max(p, 1), n_negative=max(n, 1))
        gap = data["eta_star"] - data["eta_eff"][k][last]
        res["runs"].append(
            {
                "H": int(data["H"][k]),
                "seed": int(data["seed"][k]),
                "p": p,
                "n": n,
                "n_dummy": int(data["n_dummy"][k]),
                "t": float(t[last]),
                "gamma": float(g[last]),
                "gamma_over_law": float(g[last] / law),
                "eta_gap_over_law": float(gap / flow_eta_gap(law, setting)),
            }
        )
    # γ(1e5) for H = 2 by log-interpolation
    k2 = [k for k in range(len(data["H"])) if data["H"][k] == 2][0]
    t, g = data["t"][k2], data["gamma"][k2]
    ok = np.isfinite(t) & (t > 0)
    if t[ok][-1] >= 1e5:
        res["gamma_H2_t1e5"] = float(10 ** np.interp(5.0, np.log10(t[ok]), np.log10(g[ok])))
    return res
