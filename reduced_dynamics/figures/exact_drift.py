"""Figure ``exact_drift``: the exact risk on the solution manifold has a minimum at finite γ, and the flow stops there.

(a, b) R(γ; η*) − R_dgd(η*) on the two-sign manifold at L and 5L (the paper's L = 40 and 200):
the exact risk (deterministic evaluator) with paired Monte Carlo error bars, the small-γ series
A₂γ² + A₄γ⁴ + A₆γ⁶, and the excess of L̃ and of the corrected loss over their own γ → 0 values.
(c) γ(t) of the gradient flows of the exact risk, the corrected loss and L̃ from the same state
on the manifold, with the exact drift law (order 6) and L̃'s t^(−1/6) law.

References
----------
docs/theory.md#exact-risk, docs/theory.md#drift-law, docs/theory.md#corrected-loss
"""

from __future__ import annotations

import numpy as np

from reduced_dynamics.figures._base import FigureData
from reduced_dynamics.plots.style import OKABE_ITO, new_figure, styled_data, tight_layout
from reduced_dynamics.setting import Setting

__all__ = ["exact_drift_data", "plot_exact_drift"]


def _excess_curves(setting, gam, gam_mc, n_mc, seed, order):
    from reduced_dynamics.dynamics.corrected_loss import corrected_loss, corrected_manifold_coefficients
    from reduced_dynamics.exact.drift import manifold_excess_exact, manifold_excess_mc
    from reduced_dynamics.exact.expansion import (
        derive_manifold_expansion,
        exact_manifold_coefficients,
        expansion_symbols,
    )

    es = setting.eta_star
    ex = manifold_excess_exact(gam, setting)
    mc = manifold_excess_mc(gam_mc, setting, n_prompts=n_mc, seed=seed)
    c = exact_manifold_coefficients(es, setting)
    S = expansion_symbols()
    a6 = 0.0
    if order == 6:
        sub = {S.L: setting.L, S.d: setting.d, S.sigma2: setting.sigma2, S.eta: es}
        a6 = float(derive_manifold_expansion(6).coefficients[3].subs(sub))
    series = c.a2 * gam**2 + c.a4 * gam**4 + a6 * gam**6
    approx = setting.c * es**2 * (np.sinh(setting.d * gam**2) / gam**2 - setting.d)
    co = corrected_manifold_coefficients(es, setting)
    corr0 = setting.sigma2 + (1 - es) ** 2 + co.a0 / setting.L
    M = es / (2 * gam)
    corr = np.array([corrected_loss([g, -g], [m, -m], setting) for g, m in zip(gam, M)]) - corr0
    return ex.excess, ex.stderr, mc.excess, mc.stderr, series, approx, corr


def _gamma_at(flow, times):
    """γ = mean |ω_h| of ``flow`` at the output ``times`` it reached, NaN after a stop (its stop state is dropped)."""
    out = np.full(times.size, np.nan)
    k = min(len(flow.t), times.size)
    differ = np.flatnonzero(flow.t[:k] != times[:k])
    n = int(differ[0]) if differ.size else k
    out[:n] = np.abs(np.asarray(flow.omega[:n])).mean(axis=1)
    return out


def _flows(setting, t_end, n_eval, g0, rtol, order):
    from reduced_dynamics.crosscheck.sgd_flow import preconditioned_flow
    from reduced_dynamics.exact.drift import _profile_over_mass, exact_drift_gamma
    from reduced_dynamics.flow import integrate
    from reduced_dynamics.models import reduced_model

    _, M0, _ = _profile_over_mass(g0, setting, 1e-12)
    w0, m0 = np.array([g0, -g0]), np.array([M0, -M0])
    times = np.concatenate([[0.0], np.geomspace(1e-1, t_end, n_eval - 1)])
    exact = reduced_model(setting, n_heads=2, objective="exact")
    # as the exact flow has always run: BDF, atol 1e-10, a budget of 200000 gradients, no stationarity stop
    ex = integrate(
        exact,
        exact.state(w0, m0),
        times=times,
        method="BDF",
        rtol=rtol,
        atol=1e-10,
        budget=200_000,
        stationarity_tol=0,
    )
    ge = _gamma_at(ex, times)
    corrected = reduced_model(setting, n_heads=2, objective="corrected")
    # as the corrected flow has always run: Radau, 1e-9 / 1e-12, output at `times`
    co = integrate(
        corrected,
        corrected.state(w0, m0),
        times=times,
        method="Radau",
        rtol=1e-9,
        atol=1e-12,
        stationarity_tol=0,
    )
    gc = _gamma_at(co, times)
    ga = np.abs(preconditioned_flow(w0, m0, times, setting).omega).mean(axis=1)
    i0 = int(np.searchsorted(times, 10.0))
    law = np.full(times.size, np.nan)
    law[i0:] = exact_drift_gamma(times[i0:], setting, gamma0=ge[i0], t0=times[i0], order=order)
    lawa = np.full(times.size, np.nan)
    # L̃'s law started at the L̃ flow's own γ(10): (γ^-6 + 16cd³(pn/H)(t - 10))^(-1/6), p = n = 1
    lawa[i0:] = (ga[i0] ** -6 + 16 * setting.c * setting.d**3 * 0.5 * (times[i0:] - times[i0])) ** (-1 / 6)
    return times, ge, gc, ga, law, lawa, int(ex.status)


def exact_drift_data(setting, *, quick=False, seed) -> FigureData:
    """Manifold excess curves at L and 5L, and the drift of the three flows.

    Parameters
    ----------
    setting : Setting
        Scalar, isotropic data model (the registry uses the paper's); the second panel uses ``5 L``.
    quick : bool
        L only, 8 γ values, 2·10⁴ Monte Carlo prompts, the series and the law to order γ⁴,
        flows to t = 10² at rtol 1e-5 (full: to min(30 t_c, 1e9) at rtol 1e-7).
    seed : int
        Seed of the paired Monte Carlo.

    Returns
    -------
    FigureData
        ``d, sigma2, L (K,)``, ``gamma (K, G)``, ``exact, exact_err, series, approx, corrected (K, G)``,
        ``gamma_mc (K, M)``, ``mc, mc_se (K, M)``, ``gamma_min, depth (K,)``,
        ``t (T,)``, ``flow_exact, flow_corrected, flow_approx, law_exact, law_approx (K, T)``,
        ``flow_status (K,)`` (the exact flow's :class:`~reduced_dynamics.flow.Status` code).
    """
    from reduced_dynamics.exact.drift import drift_time_scales, exact_manifold_minimum

    Ls = (setting.L,) if quick else (setting.L, 5 * setting.L)
    rows = []
    for L in Ls:
        s = Setting(d=setting.d, L=L, sigma2=setting.sigma2)
        mn = exact_manifold_minimum(s, gamma_tol=1e-4 if quick else 1e-6, hessian=False)
        gmax = 3.2 * mn.gamma
        gam = np.linspace(gmax / 40, gmax, 8 if quick else 40)
        gam_mc = np.linspace(gmax / 8, gmax, 4 if quick else 8)
        n_mc = 20_000 if quick else (2_000_000 if L <= 60 else 4_000_000)
        curves = _excess_curves(s, gam, gam_mc, n_mc, seed, 4 if quick else 6)
        ts = drift_time_scales(s)
        t_end = 1e2 if quick else min(30 * ts.t_cross, 1e9)  # 1e9: the largest time of the L̃ and corrected flows
        flows = _flows(s, t_end, 10 if quick else 70, 0.2, 1e-5 if quick else 1e-7, 4 if quick else 6)
        rows.append((L, gam, gam_mc, curves, mn, flows))
    T = max(len(r[5][0]) for r in rows)

    def stack(get, n):
        out = np.full((len(rows), n), np.nan)
        for k, r in enumerate(rows):
            v = np.asarray(get(r))
            out[k, : v.size] = v
        return out

    G = max(r[1].size for r in rows)
    Mm = max(r[2].size for r in rows)
    return FigureData(
        "exact_drift",
        {
            "d": setting.d,
            "sigma2": setting.sigma2,
            "L": np.array([r[0] for r in rows]),
            "gamma": stack(lambda r: r[1], G),
            "exact": stack(lambda r: r[3][0], G),
            "exact_err": stack(lambda r: r[3][1], G),
            "gamma_mc": stack(lambda r: r[2], Mm),
            "mc": stack(lambda r: r[3][2], Mm),
            "mc_se": stack(lambda r: r[3][3], Mm),
            "series": stack(lambda r: r[3][4], G),
            "approx": stack(lambda r: r[3][5], G),
            "corrected": stack(lambda r: r[3][6], G),
            "gamma_min": np.array([r[4].gamma for r in rows]),
            "depth": np.array([r[4].depth for r in rows]),
            "t": stack(lambda r: r[5][0], T),
            "flow_exact": stack(lambda r: r[5][1], T),
            "flow_corrected": stack(lambda r: r[5][2], T),
            "flow_approx": stack(lambda r: r[5][3], T),
            "law_exact": stack(lambda r: r[5][4], T),
            "law_approx": stack(lambda r: r[5][5], T),
            "flow_status": np.array([r[5][6] for r in rows]),
        },
    )


@styled_data
def plot_exact_drift(data, *, fig=None):
    """Excess panels (one per L) and the drift panel.

    Parameters
    ----------
    data : FigureData or mapping
        From :func:`exact_drift_data` (or its ``.npz``).
    fig : Figure or SubFigure, optional
        Where to draw; default a new figure.

    Returns
    -------
    Figure or SubFigure
        ``fig``.
    """
    Ls = np.atleast_1d(data["L"]).astype(int)
    K = Ls.size
    fig = new_figure(fig, figsize=(5.2 * (K + 1), 4.6))
    axes = fig.subplots(1, K + 1)
    col = {"exact": OKABE_ITO[0], "mc": "k", "series": OKABE_ITO[1], "approx": OKABE_ITO[2], "corr": OKABE_ITO[3]}
    d, s2 = int(data["d"]), float(data["sigma2"])
    for k in range(K):
        ax = axes[k]
        g = data["gamma"][k]
        ok = np.isfinite(g)
        depth = float(data["depth"][k])
        scale = 10.0 ** np.floor(np.log10(abs(depth)))
        ax.plot(g[ok], data["exact"][k][ok] / scale, color=col["exact"], lw=2, label="exact risk (evaluator)")
        ax.plot(
            g[ok],
            data["series"][k][ok] / scale,
            color=col["series"],
            lw=1.2,
            ls="--",
            label="small-γ series (order 6; order 4 in quick mode)",
        )
        ax.plot(
            g[ok],
            data["corrected"][k][ok] / scale,
            color=col["corr"],
            lw=1.2,
            ls="-.",
            label="corrected loss (own γ→0 value subtracted)",
        )
        ax.plot(
            g[ok],
            data["approx"][k][ok] / scale,
            color=col["approx"],
            lw=1.2,
            ls=":",
            label=r"$\tilde L$ (own γ→0 value subtracted)",
        )
        gm = data["gamma_mc"][k]
        okm = np.isfinite(gm)
        ax.errorbar(
            gm[okm],
            data["mc"][k][okm] / scale,
            yerr=data["mc_se"][k][okm] / scale,
            fmt="o",
            ms=4,
            color=col["mc"],
            capsize=2,
            label="paired Monte Carlo ± 1 SE",
        )
        ax.axhline(0, color="0.5", lw=0.8)
        ax.axvline(float(data["gamma_min"][k]), color=col["exact"], lw=0.8, ls=(0, (2, 2)))
        ax.set_ylim(2.0 * depth / scale, -4.0 * depth / scale)
        ax.set_xlim(0, float(np.nanmax(g)))
        ax.set_xlabel(r"$\gamma$ (KQ scale $|\omega_h|$ on the manifold)")
        ax.set_ylabel(
            rf"$\mathcal{{E}}(\gamma;\eta^*) - R_{{\rm dgd}}(\eta^*)$  [$\times 10^{{{int(np.log10(scale))}}}$]"
        )
        ax.set_title(
            rf"({chr(97 + k)}) L = {Ls[k]}: minimum at $\gamma$ = {float(data['gamma_min'][k]):.4f}, depth {depth:.2e}"
        )
        ax.legend(loc="upper left", fontsize=7.5)
    ax = axes[K]
    lw = {0: 1.8, 1: 1.2}
    for k in range(K):
        t = data["t"][k]
        ok = np.isfinite(t) & (t > 0)
        ls = "-" if k == 0 else "--"
        for key, c, lab in (
            ("flow_exact", col["exact"], "exact risk"),
            ("flow_corrected", col["corr"], "corrected loss"),
            ("flow_approx", col["approx"], r"$\tilde L$"),
        ):
            y = data[key][k]
            m = ok & np.isfinite(y)
            ax.loglog(t[m], y[m], color=c, lw=lw.get(k, 1.2), ls=ls, label=f"{lab} flow, L = {Ls[k]}")
        y = data["law_exact"][k]
        m = ok & np.isfinite(y)
        ax.loglog(t[m], y[m], color="k", lw=0.9, ls=":", label="exact drift law" if k == 0 else None)
        ax.axhline(float(data["gamma_min"][k]), color=col["exact"], lw=0.7, ls=(0, (2, 2)))
    ax.set_xlabel("time $t$ (gradient-flow units)")
    ax.set_ylabel(r"$\gamma(t)$ = mean $|\omega_h|$")
    ax.set_title(
        f"({chr(97 + K)}) Drift from $\\gamma$ = 0.2: the exact flow stops at $\\gamma_{{\\min}}$ (dashed lines)"
    )
    ax.legend(fontsize=7, loc="lower left")
    fig.suptitle(
        f"Exact finite-L risk on the two-sign manifold (d = {d}, σ² = {s2:g}; η* = L/(L + (1+σ²)d); two heads)", y=1.02
    )
    tight_layout(fig)
    return fig


def _key_numbers(data) -> dict:
    """γ_min, depth and the final γ of each flow."""
    out = {"runs": []}
    Ls = np.atleast_1d(data["L"]).astype(int)
    for k in range(Ls.size):
        t = data["t"][k]
        last = int(np.where(np.isfinite(data["flow_exact"][k]))[0][-1])
        out["runs"].append(
            {
                "L": int(Ls[k]),
                "gamma_min": float(data["gamma_min"][k]),
                "depth": float(data["depth"][k]),
                "t_end": float(t[last]),
                "gamma_exact_flow_end": float(data["flow_exact"][k][last]),
                "gamma_corrected_flow_end": float(data["flow_corrected"][k][last]),
                "gamma_approx_flow_end": float(data["flow_approx"][k][last]),
                "flow_status": int(data["flow_status"][k]),
            }
        )
    return out
