"""Figure ``trained_risk_vs_L``: length generalisation of attention models trained at one L.

Softmax attention (H = 1, 2, 4; separate Q, K, V, o) and linear attention trained
with Adam at L = 40, evaluated at L = 10 … 100 on common prompts, against exact
debiased GD at η*(L) and at the fixed η*(L_train), vanilla GD and Bayes ridge.

References
----------
docs/theory.md#full-model, docs/theory.md#predictors, docs/theory.md#finite-l-results
"""

from __future__ import annotations

import math

import numpy as np

from reduced_dynamics.dynamics.manifold import eta_star
from reduced_dynamics.figures._base import FigureData
from reduced_dynamics.figures._trained import TRAINED_MODELS, trained_runs, trained_settings
from reduced_dynamics.plots.style import OKABE_ITO, new_figure, styled_data, tight_layout

__all__ = ["trained_risk_vs_L_data", "plot_trained_risk_vs_L", "TRAINED_LABELS", "TRAINED_STYLE"]


def _paired_length_risks(models: dict, setting, *, Ls, n_prompts, seed, chunk=8192) -> dict:
    """Monte Carlo risk of each model at each ``L`` and its paired difference from debiased GD at ``η*(L)``.

    At each ``L`` every model and the debiased-GD reference see the same ``n_prompts``
    fresh prompts (common random numbers; length ``i`` uses child ``i`` of
    ``SeedSequence(seed)``), so the standard error of a difference is the
    standard error of the per-prompt differences.

    Parameters
    ----------
    models : dict
        ``name -> (model, params)``.

    Returns
    -------
    dict
        ``risk, stderr, diff, diff_stderr`` of shape ``(len(models), len(Ls))`` and
        ``dgd_mc, dgd_mc_stderr`` of shape ``(len(Ls),)`` (the reference's own MC risk).
    """
    from reduced_dynamics.estimation.predictors import debiased_gd
    from reduced_dynamics.model.attention import sample_tokens

    M, T = len(models), len(Ls)
    out = {k: np.zeros((M, T)) for k in ("risk", "stderr", "diff", "diff_stderr")}
    out["dgd_mc"], out["dgd_mc_stderr"] = np.zeros(T), np.zeros(T)
    for i, (L, ss) in enumerate(zip(Ls, np.random.SeedSequence(seed).spawn(T))):
        L = int(L)
        rng = np.random.default_rng(ss)
        at_L = setting.replace(L=L)
        eta = eta_star(at_L)
        sq = [[] for _ in range(M)]
        ref = []
        done = 0
        while done < n_prompts:
            k = min(chunk, n_prompts - done)
            done += k
            tok = sample_tokens(k, at_L, seed=rng)
            ref.append((debiased_gd(tok, eta) - tok.y_q) ** 2)
            for j, (model, params) in enumerate(models.values()):
                sq[j].append((model.predict(params, tok) - tok.y_q) ** 2)
        ref = np.concatenate(ref)
        rn = math.sqrt(n_prompts)
        out["dgd_mc"][i], out["dgd_mc_stderr"][i] = ref.mean(), ref.std(ddof=1) / rn
        for j in range(M):
            a = np.concatenate(sq[j])
            out["risk"][j, i], out["stderr"][j, i] = a.mean(), a.std(ddof=1) / rn
            out["diff"][j, i], out["diff_stderr"][j, i] = (a - ref).mean(), (a - ref).std(ddof=1) / rn
    return out


def trained_risk_vs_L_data(setting, *, quick=False, seed) -> FigureData:
    """Risks vs evaluation length L of the models of ``TRAINED_MODELS`` (``reduced_dynamics.figures._trained``) trained at ``setting.L``.

    Parameters
    ----------
    setting : Setting
        Training problem (the registry: the paper's; quick: d = 2, L = 8).
    quick : bool
        300 training steps, L = 4 … 16, 400 prompts.
    seed : int
        Training seed; prompts use ``seed + 777`` (models) and ``seed + 31 L`` (Bayes ridge).

    Returns
    -------
    FigureData
        ``d, L_train, sigma2, n, n_bayes, steps, batch, lr, eta_star_Ltrain``; ``L (K,)``,
        ``labels (M,)``, ``eta_eff (M,)``; ``risk, stderr, diff, diff_stderr (M, K)`` (``diff``:
        paired difference from debiased GD at η*(L)); ``dgd_mc, dgd_mc_stderr, dgd_eta_star_L,
        dgd_eta_star_Ltrain, gd_eta_Ltrain, bayes, bayes_stderr (K,)``.
    """
    from reduced_dynamics.estimation.closed_forms import bayes_risk_finite, gd_optimal_eta, gd_risk
    from reduced_dynamics.model.attention import make_model
    from reduced_dynamics.model.circuits import extract_circuits

    kw = trained_settings(setting, quick=quick)
    d, L0, s2 = kw["d"], kw["L"], kw["sigma2"]
    runs = trained_runs(setting, quick=quick, seed=seed)
    Ls = np.array([4, 8, 12, 16]) if quick else np.arange(10, 101, 10)
    n = 400 if quick else 40_000
    n_bayes = 400 if quick else 40_000
    models, eta_eff = {}, []
    for label, H, param in TRAINED_MODELS:
        r = runs[label]
        model = r.config.model()
        models[label] = (model, r.params)
        eta_eff.append(extract_circuits(model, r.params).eta_eff)
        if param == "linear":  # the same weights, normalised by each prompt's own L
            models[label + "_ownL"] = (make_model("linear", n_heads=H, d=d, norm_L=None), r.params)
            eta_eff.append(eta_eff[-1])
    mc = _paired_length_risks(models, setting, Ls=Ls, n_prompts=n, seed=seed + 777)
    bayes = [bayes_risk_finite(setting.replace(L=int(L)), n_prompts=n_bayes, seed=seed + 31 * int(L)) for L in Ls]
    es0 = eta_star(setting)
    return FigureData(
        "trained_risk_vs_L",
        {
            "d": d,
            "L_train": L0,
            "sigma2": s2,
            "n": n,
            "n_bayes": n_bayes,
            "steps": kw["steps"],
            "batch": kw["batch"],
            "lr": kw["lr"],
            "L": Ls,
            "labels": np.array(list(models)),
            "eta_eff": np.array(eta_eff),
            **mc,
            "dgd_eta_star_L": np.array(
                [gd_risk(eta_star(setting.replace(L=int(L))), setting.replace(L=int(L)), debiased=True) for L in Ls]
            ),
            "dgd_eta_star_Ltrain": np.array([gd_risk(es0, setting.replace(L=int(L)), debiased=True) for L in Ls]),
            "gd_eta_Ltrain": np.array([gd_risk(gd_optimal_eta(setting), setting.replace(L=int(L))) for L in Ls]),
            "bayes": np.array([b.risk for b in bayes]),
            "bayes_stderr": np.array([b.stderr for b in bayes]),
            "eta_star_Ltrain": es0,
        },
    )


TRAINED_LABELS = {
    "softmax_H1": "softmax, H = 1",
    "softmax_H2": "softmax, H = 2",
    "softmax_H4": "softmax, H = 4",
    "linear_H1": "linear attention, 1/L fixed at $L_{\\rm train}$",
    "linear_H1_ownL": "same linear weights, 1/L of each prompt",
}

TRAINED_STYLE = {
    "softmax_H1": (3, "s", "-"),
    "softmax_H2": (0, "o", "-"),
    "softmax_H4": (2, "^", "-"),
    "linear_H1": (1, "D", "-"),
    "linear_H1_ownL": (1, "d", "--"),
}


@styled_data
def plot_trained_risk_vs_L(data, *, fig=None):
    """(a) risk vs evaluation length with exact GD / Bayes references; (b) paired excess over debiased GD at η*(L).

    Parameters
    ----------
    data : FigureData or mapping
        From :func:`trained_risk_vs_L_data` (or its ``.npz``).
    fig : Figure or SubFigure, optional
        Where to draw; default a new 14 × 5.4 in figure.

    Returns
    -------
    Figure or SubFigure
        ``fig``.
    """
    import matplotlib.ticker as mticker

    Ls = data["L"].astype(float)
    labels = [str(s) for s in data["labels"]]
    d, L0, s2 = int(data["d"]), int(data["L_train"]), float(data["sigma2"])
    ref = data["dgd_eta_star_L"]
    fig = new_figure(fig, figsize=(14, 5.4))
    a0, a1 = fig.subplots(1, 2)
    for ax, yt, va in ((a0, 0.98, "top"), (a1, 0.02, "bottom")):
        ax.axvline(L0, color="0.55", lw=0.8, ls=":", zorder=0)
        ax.text(L0, yt, f" trained at $L={L0}$", transform=ax.get_xaxis_transform(), fontsize=8, va=va, color="0.35")
        ax.set_xlabel("prompt length $L$ at evaluation")
    es0 = float(data["eta_star_Ltrain"])
    refs = [
        (
            "dgd_eta_star_L",
            dict(color="k", lw=1.4),
            r"debiased GD at $\eta^*(L)$ (exact; the best debiased GD at each $L$)",
        ),
        (
            "dgd_eta_star_Ltrain",
            dict(color="0.35", lw=1.3, ls=(0, (1, 1.2))),
            rf"debiased GD at fixed $\eta^*(L_{{\rm train}})={es0:.3f}$ (exact)",
        ),
        (
            "gd_eta_Ltrain",
            dict(color=OKABE_ITO[1], lw=0.9, ls=(0, (4, 1.5, 1, 1.5)), alpha=0.8),
            r"vanilla GD at its fixed optimal $\eta(L_{\rm train})$ (exact)",
        ),
    ]
    for key, st, lab in refs:
        a0.plot(Ls, data[key], label=lab, **st)
        a1.plot(Ls, data[key] - ref, **st)
    a0.plot(
        Ls,
        data["bayes"],
        color="k",
        lw=1.0,
        ls="-.",
        label=rf"Bayes ridge $\lambda=\sigma^2 d$ (MC, n={int(data['n_bayes'])}; s.e. < 0.3 %)",
    )
    off = dict(zip(labels, np.linspace(-1.0, 1.0, len(labels)) * (Ls[1] - Ls[0]) * 0.06))
    for j, nm in enumerate(labels):
        ci, mk, ls = TRAINED_STYLE.get(nm, (7, "o", "-"))
        kw = dict(
            color=OKABE_ITO[ci],
            marker=mk,
            ms=5,
            lw=1.2,
            ls=ls,
            capsize=2.5,
            mfc="white" if ls == "--" else OKABE_ITO[ci],
        )
        a0.errorbar(Ls + off[nm], data["risk"][j], yerr=data["stderr"][j], label=TRAINED_LABELS.get(nm, nm), **kw)
        if nm not in ("softmax_H1", "linear_H1"):
            a1.errorbar(Ls + off[nm], data["diff"][j], yerr=data["diff_stderr"][j], **kw)
    a0.set_yscale("log")
    a0.yaxis.set_major_formatter(mticker.FormatStrFormatter("%g"))
    a0.yaxis.set_minor_formatter(mticker.FormatStrFormatter("%g"))
    a0.set_ylabel(r"risk $E(y_q-\hat y)^2$ (incl. $\sigma^2$; log scale)")
    a0.set_title(
        f"(a) Risk vs L; markers: Monte Carlo ± 1 s.e. (n={int(data['n'])} prompts per L, common to all models)",
        fontsize=9.5,
    )
    a1.axhline(0, color="k", lw=0.6)
    a1.set_ylabel(r"risk − risk of debiased GD at $\eta^*(L)$")
    a1.set_title(
        "(b) Excess over debiased GD at $\\eta^*(L)$: markers paired on the same prompts (± 1 s.e.),\n"
        "lines exact; off scale: softmax H=1, linear attention with fixed 1/L",
        fontsize=9.5,
    )
    # y-range from L > L_min (the shortest prompts are far off; their values are written in the panel instead)
    zoom = ["softmax_H2", "softmax_H4", "linear_H1_ownL"]
    rows = [labels.index(nm) for nm in zoom if nm in labels]
    sel = slice(1, None) if Ls.size > 2 else slice(None)
    vals = [data["diff"][j, sel] + sg * data["diff_stderr"][j, sel] for j in rows for sg in (-1, 1)]
    vals += [(data[k] - ref)[sel] for k in ("dgd_eta_star_Ltrain", "gd_eta_Ltrain")] + [np.zeros(1)]
    lo, hi = float(np.min(np.concatenate(vals))), float(np.max(np.concatenate(vals)))
    pad = 0.1 * (hi - lo) or 1e-3
    a1.set_ylim(lo - pad, hi + 2.5 * pad)
    if sel.start:
        txt = [f"off scale at L={int(Ls[0])}:"]
        for j in rows:
            txt.append(f"  {TRAINED_LABELS[labels[j]]}: {data['diff'][j, 0]:+.3f} ± {data['diff_stderr'][j, 0]:.3f}")
        txt.append(f"  debiased GD at fixed η*(L_train): {float((data['dgd_eta_star_Ltrain'] - ref)[0]):+.3f}")
        txt.append(f"  vanilla GD at fixed η(L_train): {float((data['gd_eta_Ltrain'] - ref)[0]):+.3f}")
        a1.set_xlim(Ls[1] - 0.4 * (Ls[1] - Ls[0]), Ls[-1] + 0.4 * (Ls[1] - Ls[0]))
        a1.text(
            0.2,
            0.97,
            "\n".join(txt).replace("$L_{\\rm train}$", "L_train"),
            transform=a1.transAxes,
            va="top",
            ha="left",
            fontsize=7.5,
            bbox=dict(fc="white", ec="0.7", alpha=0.9),
        )
    fig.suptitle(
        f"Models trained at L={L0} (Adam, lr {float(data['lr']):g}, {int(data['steps'])} steps, batch {int(data['batch'])}; "
        f"d={d}, σ²={s2:g}) evaluated at other prompt lengths",
        fontsize=11,
    )
    tight_layout(fig)
    fig.subplots_adjust(bottom=0.25)
    h, lab = a0.get_legend_handles_labels()
    fig.legend(h, lab, loc="lower center", ncol=3, fontsize=8, frameon=True)
    return fig


def _key_numbers(data) -> dict:
    """Risks and paired excesses at the shortest, the training and the longest L."""
    labels = [str(s) for s in data["labels"]]
    Ls = data["L"]
    pick = [int(np.argmin(Ls)), int(np.argmin(np.abs(Ls - data["L_train"]))), int(np.argmax(Ls))]
    return {
        "L": [int(Ls[i]) for i in pick],
        "risk": {
            nm: [[float(data["risk"][j, i]), float(data["stderr"][j, i])] for i in pick] for j, nm in enumerate(labels)
        },
        "eta_eff": {nm: float(data["eta_eff"][j]) for j, nm in enumerate(labels)},
        "excess_over_dgd_eta_star_L_paired": {
            nm: [[float(data["diff"][j, i]), float(data["diff_stderr"][j, i])] for i in pick]
            for j, nm in enumerate(labels)
        },
        "dgd_eta_star_L": [float(data["dgd_eta_star_L"][i]) for i in pick],
        "dgd_eta_star_L_mc": [float(data["dgd_mc"][i]) for i in pick],
        "dgd_eta_star_Ltrain": [float(data["dgd_eta_star_Ltrain"][i]) for i in pick],
        "bayes": [float(data["bayes"][i]) for i in pick],
    }
