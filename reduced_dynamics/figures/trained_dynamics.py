"""Figure ``trained_dynamics``: training dynamics of the attention models against the reduced flow.

Top: (ω_h, μ_h) and η_eff along Adam training (snapshots; Adam has no exact time
map to a gradient flow). Bottom: plain SGD on the merged model after an Adam
warm-up against the reduced flow of L̃ (and of the Monte Carlo risk) at
t = lr × steps, with the flow at 2t as a control.

References
----------
docs/theory.md#gradient-flow, docs/theory.md#stages, docs/theory.md#solution-manifold
"""

from __future__ import annotations

import numpy as np

from reduced_dynamics.dynamics.manifold import eta_star, mu_gamma, single_head_optimum
from reduced_dynamics.figures._base import FigureData
from reduced_dynamics.figures._trained import TRAINED_MODELS, trained_runs, trained_settings
from reduced_dynamics.plots.style import OKABE_ITO, new_figure, styled_data, tight_layout
from reduced_dynamics.setting import Setting

__all__ = ["trained_dynamics_data", "plot_trained_dynamics"]


def _single_head_eta(setting) -> float:
    """ωμ of the H = 1 optimum of L̃ (as np.prod of the pair, for bit-identical data files)."""
    opt = single_head_optimum(setting)
    return float(np.prod([opt.omega, opt.mu]))


def _patterns_formed(KQ, ov, *, tol=0.05) -> np.ndarray:
    """Per snapshot: sign matching, zero-sum OV and clean KQ/OV patterns all hold within ``tol``."""
    from reduced_dynamics.model.circuits import circuits_from_arrays, pattern_metrics

    ok = []
    for A, v in zip(KQ, ov):
        m = pattern_metrics(circuits_from_arrays(A, v))
        ok.append(
            m.sign_match_fraction == 1.0
            and m.zero_sum_ratio < tol
            and m.kq_offdiag_fraction_max < tol
            and m.ov_offresponse_fraction_max < tol
            and m.n_positive >= 1
            and m.n_negative >= 1
        )
    return np.array(ok)


def trained_dynamics_data(setting, *, quick=False, seed) -> FigureData:
    """(ω, μ) along Adam training of the trained models, and plain SGD vs the reduced flow of L̃.

    Parameters
    ----------
    setting : Setting
        Training problem (the registry: the paper's; quick: d = 2, L = 8).
    quick : bool
        300 training steps; 300 SGD steps, 2000 Monte Carlo covariates.
    seed : int
        Training and SGD seed (the Monte Carlo flow uses seed 12345).

    Returns
    -------
    FigureData
        ``d, L, sigma2, steps, batch, adam_lr, eta_star, eta_single_head``, ``heads (3,)``,
        ``snapshot_steps (S,)``; per H: ``omega_H{H}, mu_H{H} (S, H)``, ``formed_step_H{H}``
        (−1: never). SGD vs flow (R records, 2 heads): ``sgd_t, sgd_steps_rec (R,)``,
        ``omega_sgd, mu_sgd, omega_flow, mu_flow, omega_flow_2t, mu_flow_2t, omega_flow_mc,
        mu_flow_mc (R, 2)``, ``sgd_<option>`` (the SGD protocol), ``mc_n, omega_rate,
        unexplained, unexplained_mc, unexplained_2t, gamma_max, eta_max``.
    """
    from reduced_dynamics.crosscheck import (
        CovariateSample,
        mc_flow,
        preconditioned_flow,
        sgd_vs_flow,
        trajectory_discrepancy,
    )
    from reduced_dynamics.model.circuits import circuits_from_arrays

    kw = trained_settings(setting, quick=quick)
    d, L, s2 = kw["d"], kw["L"], kw["sigma2"]
    runs = trained_runs(setting, quick=quick, seed=seed)
    out = {
        "d": d,
        "L": L,
        "sigma2": s2,
        "steps": kw["steps"],
        "batch": kw["batch"],
        "adam_lr": kw["lr"],
        "eta_star": eta_star(setting),
        "eta_single_head": _single_head_eta(setting),
        "heads": [],
    }
    for label, H, param in TRAINED_MODELS:
        if param != "separate":
            continue
        r = runs[label]
        circ = [circuits_from_arrays(A, v) for A, v in zip(r.snapshot_KQ, r.snapshot_ov)]
        out["heads"].append(H)
        out["snapshot_steps"] = r.snapshot_steps
        out[f"omega_H{H}"] = np.array([c.omega for c in circ])
        out[f"mu_H{H}"] = np.array([c.mu for c in circ])
        formed = _patterns_formed(r.snapshot_KQ, r.snapshot_ov)
        # first snapshot from which the patterns hold until the end (-1: never)
        bad = np.where(~formed)[0]
        k = 0 if bad.size == 0 else bad[-1] + 1
        out[f"formed_step_H{H}"] = int(r.snapshot_steps[k]) if k < formed.size else -1
    out["heads"] = np.array(out["heads"])
    sk = (
        dict(lr=2e-2, sgd_steps=300, warmup_steps=150, warmup_lr=1e-2, batch=32, n_records=10)
        if quick
        else dict(lr=1e-2, sgd_steps=10_000, warmup_steps=1000, warmup_lr=1e-2, batch=256, n_records=40)
    )
    sv = sgd_vs_flow(setting, n_heads=2, parameterisation="merged", seed=seed, reference="approx", **sk)
    at_2t = preconditioned_flow(sv.omega_sgd[0], sv.mu_sgd[0], 2.0 * sv.t, setting, omega_rate=sv.omega_rate)
    w2, m2 = at_2t.omega, at_2t.mu
    mc_n = 2000 if quick else 50_000
    mc = mc_flow(
        sv.omega_sgd[0], sv.mu_sgd[0], sv.t, CovariateSample(mc_n, setting, seed=12345), omega_rate=sv.omega_rate
    )
    wmc, mmc = mc.omega, mc.mu
    out.update(omega_flow_mc=wmc, mu_flow_mc=mmc, mc_n=mc_n)
    out.update({f"sgd_{k}": v for k, v in sk.items()})
    out.update(
        sgd_t=sv.t,
        sgd_steps_rec=sv.steps,
        omega_sgd=sv.omega_sgd,
        mu_sgd=sv.mu_sgd,
        omega_flow=sv.omega_flow,
        mu_flow=sv.mu_flow,
        omega_flow_2t=w2,
        mu_flow_2t=m2,
        omega_rate=sv.omega_rate,
        unexplained=sv.discrepancy.unexplained,
        gamma_max=sv.discrepancy.gamma_max,
        eta_max=sv.discrepancy.eta_max,
    )
    out["unexplained_mc"] = trajectory_discrepancy(sv.omega_sgd, sv.mu_sgd, wmc, mmc).unexplained
    out["unexplained_2t"] = trajectory_discrepancy(
        sv.omega_sgd, sv.mu_sgd, w2, m2, omega_ref=sv.omega_flow, mu_ref=sv.mu_flow
    ).unexplained
    return FigureData("trained_dynamics", out)


@styled_data
def plot_trained_dynamics(data, *, fig=None):
    """(a–c) Adam snapshots of ω_h, μ_h, η_eff; (d–f) plain SGD vs the reduced flow at t = lr × steps.

    Parameters
    ----------
    data : FigureData or mapping
        From :func:`trained_dynamics_data` (or its ``.npz``).
    fig : Figure or SubFigure, optional
        Where to draw; default a new 16 × 9.2 in figure.

    Returns
    -------
    Figure or SubFigure
        ``fig``.
    """
    from matplotlib.lines import Line2D

    d, L, s2 = int(data["d"]), int(data["L"]), float(data["sigma2"])
    fig = new_figure(fig, figsize=(16, 9.2))
    axes = fig.subplots(2, 3)
    (a0, a1, a2), (b0, b1, b2) = axes
    st = data["snapshot_steps"].astype(float)
    pos = st > 0
    hc = OKABE_ITO
    # ---- top row: Adam, separate parameterisation (the full model), snapshots only
    w, m = data["omega_H2"], data["mu_H2"]
    fs = int(data["formed_step_H2"])
    for h in range(w.shape[1]):
        a0.semilogx(st[pos], w[pos, h], "o-", color=hc[h], ms=3, lw=1.2, label=f"head {h + 1}")
        a1.semilogx(st[pos], m[pos, h], "o-", color=hc[h], ms=3, lw=1.2, label=f"head {h + 1}")
    gam = np.abs(w).mean(1)
    mg = mu_gamma(np.maximum(gam, 1e-12), Setting(d=d, L=L, sigma2=s2))
    after = pos & (st >= fs) if fs >= 0 else np.zeros_like(pos)
    a1.semilogx(
        st[after],
        mg[after],
        color="k",
        ls="--",
        lw=1.0,
        label=r"$\pm\mu_\gamma(\gamma)$ at measured $\gamma$ ($S_\gamma$)",
    )
    a1.semilogx(st[after], -mg[after], color="k", ls="--", lw=1.0)
    for ax in (a0, a1):
        ax.axhline(0, color="k", lw=0.5)
        if fs > 0:
            ax.axvline(fs, color="0.5", ls=":", lw=1.0)
            ax.text(fs, 0.02, " patterns\n formed", transform=ax.get_xaxis_transform(), fontsize=7.5, color="0.3")
        ax.set_xlabel("Adam step")
    a0.set_ylabel(r"$\omega_h$ = mean of the $x$-diagonal of $KQ_h$")
    a1.set_ylabel(r"$\mu_h$ = $y$ entry of $OV_h$")
    a0.set_title("(a) Adam, full model (separate Q,K,V,o), H=2: $\\omega_h$", fontsize=10)
    a1.set_title("(b) Adam, H=2: $\\mu_h$, with the solution manifold", fontsize=10)
    a0.legend(loc="upper left")
    a1.legend(loc="upper left")
    mk = {1: "s", 2: "o", 4: "^"}
    cH = {1: hc[3], 2: hc[0], 4: hc[2]}
    for H in (int(h) for h in data["heads"]):
        eta = np.sum(data[f"omega_H{H}"] * data[f"mu_H{H}"], axis=1)
        a2.semilogx(st[pos], eta[pos], marker=mk.get(H, "o"), color=cH.get(H, "0.3"), ms=3, lw=1.2, label=f"H = {H}")
    a2.axhline(
        float(data["eta_star"]),
        color="k",
        lw=1.0,
        ls="--",
        label=rf"$\eta^*={float(data['eta_star']):.3f}$ (inf of $\tilde L$, H≥2)",
    )
    a2.axhline(
        float(data["eta_single_head"]),
        color=hc[3],
        lw=1.0,
        ls=":",
        label=rf"H=1 optimum of $\tilde L$: $\omega\mu={float(data['eta_single_head']):.3f}$",
    )
    a2.set_xlabel("Adam step")
    a2.set_ylabel(r"$\eta_{\rm eff}=\mu^\top\omega$")
    a2.set_title("(c) Adam, full model, H = 1, 2, 4: effective step", fontsize=10)
    a2.legend(loc="upper left", fontsize=8)
    # ---- bottom row: merged model, Adam warm-up then plain SGD vs the reduced flow at t = lr·steps
    t = data["sgd_t"]
    tp = t > 0
    lr = float(data["sgd_lr"])
    curves = [
        ("sgd", dict(ls="none", marker="o", ms=4, mfc="none")),
        ("flow", dict(ls="-", lw=1.5)),
        ("flow_mc", dict(ls="--", lw=1.2)),
        ("flow_2t", dict(ls=":", lw=1.2)),
    ]
    H2 = data["omega_sgd"].shape[1]
    for key, st in curves:
        w, m = data[f"omega_{key}"], data[f"mu_{key}"]
        for h in range(H2):
            b0.semilogx(t[tp], np.abs(w[tp, h]), color=hc[h], **st)
            b1.semilogx(t[tp], np.abs(m[tp, h]), color=hc[h], **st)
        b2.semilogx(t[tp], np.sum(w * m, 1)[tp], color="0.15", **st)
    b2.axhline(float(data["eta_star"]), color=hc[1], lw=1.0, ls="-.")
    for ax in (b0, b1, b2):
        ax.set_xlabel(rf"flow time $t$ = lr × SGD steps (lr = {lr:g}; {int(data['sgd_sgd_steps'])} steps)")
    sgn = ", ".join(f"head {h + 1}: {'+' if data['omega_sgd'][0, h] > 0 else '−'}" for h in range(H2))
    b0.set_ylabel(rf"$|\omega_h|$ (signs: {sgn})")
    b1.set_ylabel(r"$|\mu_h|$")
    b2.set_ylabel(r"$\eta_{\rm eff}=\mu^\top\omega$")
    b0.set_title(
        rf"(d) merged model: plain SGD after {int(data['sgd_warmup_steps'])} Adam steps vs reduced flow: $|\omega_h|$",
        fontsize=10,
    )
    b1.set_title(r"(e) same run: $|\mu_h|$", fontsize=10)
    b2.set_title(
        "(f) same run: $\\eta_{\\rm eff}$;  unexplained motion: "
        f"{float(data['unexplained']):.2f} ($\\tilde L$ flow), {float(data['unexplained_mc']):.2f} (MC flow), "
        f"{float(data['unexplained_2t']):.2f} (at 2t)",
        fontsize=9.5,
    )
    key = [
        Line2D([], [], color="0.3", marker="o", mfc="none", ls="none", label="SGD (extracted from the circuits)"),
        Line2D(
            [],
            [],
            color="0.3",
            lw=1.5,
            label=r"flow of $\tilde L$ at $t$: $\dot\omega=-\frac{1}{d}\nabla_\omega\tilde L$, $\dot\mu=-\nabla_\mu\tilde L$",
        ),
        Line2D(
            [], [], color="0.3", lw=1.2, ls="--", label=f"same flow of the true risk (MC, n={int(data['mc_n'])}) at $t$"
        ),
        Line2D([], [], color="0.3", lw=1.2, ls=":", label=r"flow of $\tilde L$ at $2t$ (wrong time map: control)"),
    ]
    b0.legend(
        handles=key + [Line2D([], [], color=hc[h], lw=3, label=f"head {h + 1}") for h in range(H2)],
        fontsize=7.5,
        loc="lower left",
    )
    b2.legend(
        handles=[
            Line2D([], [], color="0.15", marker="o", mfc="none", ls="none", label="SGD"),
            Line2D([], [], color="0.15", lw=1.5, label=r"flow of $\tilde L$ at $t$"),
            Line2D([], [], color="0.15", lw=1.2, ls="--", label="flow of the true risk (MC) at $t$"),
            Line2D([], [], color="0.15", lw=1.2, ls=":", label=r"flow of $\tilde L$ at $2t$ (control)"),
            Line2D(
                [],
                [],
                color=hc[1],
                ls="-.",
                lw=1.0,
                label=rf"$\eta^*={float(data['eta_star']):.3f}$ (inf of $\tilde L$)",
            ),
        ],
        fontsize=7.5,
        loc="upper right",
    )
    fig.suptitle(
        f"Training dynamics of the trained models (d={d}, L={L}, σ²={s2:g}, batch {int(data['batch'])}).  "
        f"Top: Adam (lr {float(data['adam_lr']):g}) snapshots alone; Adam has no exact time map to a gradient flow.\n"
        f"Bottom: plain SGD (batch {int(data['sgd_batch'])}) on the merged model (KQ, OV as parameters) from the "
        f"warm-up state, vs the reduced flow of $\\tilde L$ from the (ω, μ) extracted at the start, "
        f"$t$ = lr × steps, ω preconditioned by 1/d (crosscheck.sgd_vs_flow)",
        fontsize=10,
        y=1.0,
    )
    tight_layout(fig)
    return fig


def _key_numbers(data) -> dict:
    """Pattern-formation steps, final (ω, μ) and the SGD-vs-flow discrepancies."""
    res = {"formed_step": {f"H{int(H)}": int(data[f"formed_step_H{int(H)}"]) for H in data["heads"]}}
    for H in data["heads"]:
        H = int(H)
        res[f"final_H{H}"] = {"omega": data[f"omega_H{H}"][-1].tolist(), "mu": data[f"mu_H{H}"][-1].tolist()}
    res["sgd_vs_flow"] = {
        "lr": float(data["sgd_lr"]),
        "t_end": float(data["sgd_t"][-1]),
        "omega_rate": float(data["omega_rate"]),
        "omega_start": data["omega_sgd"][0].tolist(),
        "mu_start": data["mu_sgd"][0].tolist(),
        "omega_sgd_end": data["omega_sgd"][-1].tolist(),
        "omega_flow_end": data["omega_flow"][-1].tolist(),
        "mu_sgd_end": data["mu_sgd"][-1].tolist(),
        "mu_flow_end": data["mu_flow"][-1].tolist(),
        "unexplained": float(data["unexplained"]),
        "unexplained_flow_at_2t": float(data["unexplained_2t"]),
        "unexplained_mc_flow": float(data["unexplained_mc"]),
        "mu_mc_flow_end": data["mu_flow_mc"][-1].tolist(),
        "omega_mc_flow_end": data["omega_flow_mc"][-1].tolist(),
        "gamma_max_rel": float(data["gamma_max"]),
        "eta_max_rel": float(data["eta_max"]),
    }
    return res
