"""The figure of an analysis (:func:`plot_analysis`): circuits against the ideal pattern, risk against L.

Top: per head, the score matrix ``KQ_h`` (rows: key coordinates of ``z_l``, columns: query
coordinates of ``z_q``) and the output rows ``OV_h`` as heat maps, each beside the theory's pattern
at the extracted state (isotropic: ``ω_h I_d`` and ``μ_h`` on the response entry; under Σ:
``ω_h W*``, ``W*`` the direction of the optimal preconditioner; several tasks: ``diag(ω^{(h)})``
and ``μ^{(h)}_n``), one symmetric colour scale for all KQ panels and one for all OV panels. The
hatched columns of KQ multiply the zeros of ``z_q`` and never matter. Bottom: (a) the model's Monte
Carlo risk against the prompt length L (± 1 standard error) with the theory's predictors (exact
lines where derived, Monte Carlo markers otherwise), (b) the paired differences ``model − reference``
on common prompts (± 1 standard error).

References
----------
docs/theory.md#emergent-patterns, docs/theory.md#predictors
"""

from __future__ import annotations

import textwrap

import numpy as np

from reduced_dynamics.plots.style import OKABE_ITO, new_figure, styled

__all__ = ["plot_analysis", "MAX_HEADS_SHOWN"]

#: heads drawn at most (the heads with the largest |ω_h μ_h| first when there are more)
MAX_HEADS_SHOWN = 4

#: reference -> (label, colour index, line style) in the risk panels
_REFS = {
    "debiased_gd": ("debiased GD at the optimal step η*(L)", 7, "-"),
    "debiased_gd_own": ("debiased GD at the model's own step η_eff", 2, "--"),
    "reduced": ("reduced model at the extracted state", 1, ":"),
    "bayes_ridge": ("Bayes ridge (λ = σ²d)", 5, "-."),
    "limit": ("limit predictor of the reduced flow", 7, "-"),
    "debiased_gd_S": ("debiased GD on each support S_n", 2, "--"),
    "bayes_ridge_S": ("Bayes ridge on each support", 5, "-."),
}


def _get(report, key):
    if isinstance(report, dict):
        if key not in report:
            raise ValueError(f"`report` has no {key!r} (pass an AnalysisReport or its to_dict())")
        return report[key]
    return getattr(report, key)


def _heads_shown(report) -> list[int]:
    st = _get(report, "state")
    H = int(_get(report, "n_heads"))
    if H <= MAX_HEADS_SHOWN:
        return list(range(H))
    om, mu = np.asarray(st["omega"]), np.asarray(st["mu"])
    share = np.abs(mu).reshape(H, -1).sum(1) * np.abs(om).reshape(H, -1).sum(1)
    return sorted(np.argsort(-share, kind="stable")[:MAX_HEADS_SHOWN].tolist())


def _heat(ax, M, vmax, names_r, names_c, *, annotate, cmap="RdBu_r"):
    im = ax.imshow(M, cmap=cmap, vmin=-vmax, vmax=vmax, aspect="auto")
    ax.grid(False)
    ax.set_xticks(range(M.shape[1]))
    ax.set_xticklabels(names_c, fontsize=7)
    ax.set_yticks(range(M.shape[0]))
    ax.set_yticklabels(names_r, fontsize=7)
    if annotate:
        for (r, c), v in np.ndenumerate(M):
            ax.text(
                c,
                r,
                f"{v:.2f}",
                ha="center",
                va="center",
                fontsize=5.8,
                color="white" if abs(v) > 0.6 * vmax else "0.2",
            )
    return im


@styled
def plot_analysis(report, *, fig=None):
    """Draw an analysis: circuits beside the ideal pattern, risk and paired differences against L.

    Parameters
    ----------
    report : AnalysisReport or dict
        From :func:`reduced_dynamics.importers.analysis.analyze` (or its ``to_dict()``, e.g. a
        ``report.json`` read back).
    fig : Figure or SubFigure, optional
        Where to draw; default a new figure sized to the number of heads.

    Returns
    -------
    Figure or SubFigure
        ``fig`` (not saved: see :func:`reduced_dynamics.plots.style.save_figure`).
    """
    import matplotlib.pyplot as plt
    import matplotlib.ticker as mticker

    needed = ("circuits", "ideal", "state", "source", "setting")
    if not isinstance(report, dict) and not all(hasattr(report, k) for k in needed):
        raise TypeError(f"`report` must be an AnalysisReport or its to_dict(), got {type(report).__name__}")
    circ, ideal, st = _get(report, "circuits"), _get(report, "ideal"), _get(report, "state")
    src, setting = _get(report, "source"), _get(report, "setting")
    setting = setting if isinstance(setting, dict) else setting.to_dict()
    risks = _get(report, "risks")
    risks = risks if isinstance(risks, dict) else risks.to_dict()
    KQ, OV = np.asarray(circ["KQ"], dtype=float), np.asarray(circ["OV"], dtype=float)
    iKQ, iOV = np.asarray(ideal["KQ"], dtype=float), np.asarray(ideal["OV"], dtype=float)
    dist = np.asarray(ideal["distance"], dtype=float)
    H, D, _ = KQ.shape
    n_out = OV.shape[1]
    d = D - n_out
    heads = _heads_shown(report)
    k = len(heads)
    ys = ["$y$"] if n_out == 1 else [f"$y_{{{n + 1}}}$" for n in range(n_out)]
    names = [f"$x_{{{i + 1}}}$" for i in range(d)] + ys
    annotate = D <= 7
    kq_max = float(max(np.abs(KQ[heads][:, :, :d]).max(), np.abs(iKQ[heads]).max())) or 1.0
    ov_max = float(max(np.abs(OV[heads]).max(), np.abs(iOV[heads]).max())) or 1.0

    width = max(11.0, 2.1 * 2 * k + 1.6)
    fig = new_figure(fig, figsize=(width, 4.1 + 0.32 * D + 0.35 * n_out + 4.2))
    outer = fig.add_gridspec(2, 1, height_ratios=[0.32 * D + 0.35 * n_out + 1.6, 4.0], hspace=0.32)
    top = outer[0].subgridspec(
        2, 2 * k + 1, height_ratios=[D, max(n_out, 1) * 1.15], width_ratios=[1] * (2 * k) + [0.08]
    )
    im_k = im_o = None
    for j, h in enumerate(heads):
        for side, (K, O, what) in enumerate(((KQ[h], OV[h], "trained"), (iKQ[h], iOV[h], "ideal"))):
            a = fig.add_subplot(top[0, 2 * j + side])
            b = fig.add_subplot(top[1, 2 * j + side])
            im_k = _heat(a, K, kq_max, names, names, annotate=annotate)
            im_o = _heat(
                b,
                O,
                ov_max,
                ["OV"] if n_out == 1 else [f"OV$_{{{n + 1}}}$" for n in range(n_out)],
                names,
                annotate=annotate,
            )
            a.add_patch(plt.Rectangle((d - 0.5, -0.5), n_out, D, fill=False, hatch="///", ec="0.55", lw=0))
            a.tick_params(bottom=False, labelbottom=False, top=True, labeltop=True)
            if side == 0:
                tag = " (dummy)" if bool(np.asarray(st["dummy"])[h]) else ""
                a.set_title(f"head {h + 1}{tag}: {what}\ndistance to ideal {dist[h]:.3f}", fontsize=8.5)
                if j == 0:
                    a.set_ylabel("key coordinate of $z_l$", fontsize=7.5)
            else:
                a.set_title(f"head {h + 1}: theory's pattern\nat the extracted state", fontsize=8.5)
            b.set_xlabel("value coordinate of $z_l$", fontsize=7)
    cb = fig.colorbar(im_k, cax=fig.add_subplot(top[0, 2 * k]))
    cb.set_label("$KQ_h$ entry (logit scale included)", fontsize=7.5)
    cb.ax.tick_params(labelsize=7)
    cb2 = fig.colorbar(im_o, cax=fig.add_subplot(top[1, 2 * k]))
    cb2.ax.tick_params(labelsize=6)
    cb2.set_label("$OV_h$", fontsize=7)

    bottom = outer[1].subgridspec(1, 2, wspace=0.22)
    a0, a1 = fig.add_subplot(bottom[0, 0]), fig.add_subplot(bottom[0, 1])
    Ls = np.asarray(risks["L"], dtype=float)
    names_ref = list(risks["names"])
    risk, se = risks["risk"], risks["stderr"]
    diff, dse = risks["diff"], risks["diff_stderr"]
    exact = risks.get("exact", {}) or {}
    multi = np.ndim(risk["model"]) == 2
    n_tasks = np.shape(risk["model"])[1] if multi else 1
    markers = ["o", "s", "^", "D"]
    span = Ls.max() / Ls.min() if Ls.min() > 0 else 2.0
    off = np.linspace(-1, 1, len(names_ref) + 1) * 0.012 * np.log(max(span, 2.0))
    for t in range(n_tasks):
        sel = (slice(None), t) if multi else slice(None)
        # one legend entry per predictor; the markers tell the tasks apart (panel titles)
        first = t == 0
        mk = markers[t % len(markers)]
        a0.errorbar(
            Ls * np.exp(off[0]),
            np.asarray(risk["model"])[sel],
            yerr=np.asarray(se["model"])[sel],
            color=OKABE_ITO[0],
            marker=mk,
            ms=5,
            lw=1.6,
            capsize=3,
            label="the model (Monte Carlo ± 1 s.e.)" if first else None,
        )
        for r, name in enumerate(names_ref):
            lab, ci, ls = _REFS.get(name, (name, 6, "-"))
            col = OKABE_ITO[ci]
            if name in exact and not multi:
                a0.plot(Ls, exact[name], color=col, ls=ls, lw=1.3, label=f"{lab} (exact)")
            else:
                a0.errorbar(
                    Ls * np.exp(off[r + 1]),
                    np.asarray(risk[name])[sel],
                    yerr=np.asarray(se[name])[sel],
                    color=col,
                    ls=ls,
                    marker=mk,
                    ms=3.5,
                    mfc="white",
                    lw=1.1,
                    capsize=2,
                    label=f"{lab} (Monte Carlo)" if first else None,
                )
            if name.startswith("bayes"):
                continue  # far below: its difference would squash the others
            a1.errorbar(
                Ls * np.exp(off[r + 1]),
                np.asarray(diff[name])[sel],
                yerr=np.asarray(dse[name])[sel],
                color=col,
                ls=ls,
                marker=mk,
                ms=4.5,
                lw=1.2,
                capsize=3,
                label=f"model − {lab}" if first else None,
            )
    L0 = float(setting["L"])
    for ax in (a0, a1):
        ax.set_xscale("log")
        ax.set_xticks(Ls)
        ax.set_xticklabels([str(int(x)) for x in Ls])
        ax.minorticks_off()
        ax.axvline(L0, color="0.6", lw=0.8, ls=":", zorder=0)
        ax.set_xlabel("prompt length $L$ (log scale)")
    right = L0 >= Ls.max()
    a0.text(
        L0,
        0.02,
        f"judged at L = {int(L0)} " if right else f" judged at L = {int(L0)}",
        transform=a0.get_xaxis_transform(),
        fontsize=7.5,
        va="bottom",
        ha="right" if right else "left",
        color="0.35",
    )
    a0.set_yscale("log")
    a0.yaxis.set_major_formatter(mticker.FormatStrFormatter("%g"))
    lo, hi = a0.get_ylim()
    if hi / lo < 10:  # less than a decade: label the minor ticks too (else they crowd)
        a0.yaxis.set_minor_formatter(mticker.FormatStrFormatter("%g"))
        a0.tick_params(axis="y", which="minor", labelsize=7)
    else:
        a0.yaxis.set_minor_formatter(mticker.NullFormatter())
    a0.set_ylabel(r"risk $E(y_q-\hat y)^2$, noise $\sigma^2$ included (log scale)")
    tasks_key = ""
    if multi:
        tasks_key = "; markers: " + ", ".join(f"{markers[t % len(markers)]} task {t + 1}" for t in range(n_tasks))
    a0.set_title(f"(a) risk vs prompt length ({int(risks['n'])} fresh prompts per L{tasks_key})", fontsize=9.5)
    a0.legend(fontsize=7, loc="best")
    a1.axhline(0, color="k", lw=0.7)
    a1.set_ylabel("risk difference, model − reference")
    a1.set_title(f"(b) paired on the same prompts (± 1 s.e.{tasks_key})", fontsize=9.5)
    a1.legend(fontsize=7, loc="best")
    s2 = float(setting["sigma2"])
    kind = "x ~ N(0, Σ)" if setting.get("Sigma") is not None else "isotropic x"
    if setting.get("tasks") is not None:
        kind += f", {len(setting['tasks'])} tasks"
    self_note = "; the query attends to itself (risks include the self term)" if src["query_attends_self"] else ""
    shown = "" if k == H else f"; heads {', '.join(str(h + 1) for h in heads)} of {H} shown"
    head = (
        f"Imported model ({src['format']}, H = {H}, d = {d}, {n_out} output{'s' if n_out > 1 else ''}) against the "
        f"theory at d = {d}, L = {int(L0)}, σ² = {s2:g} ({kind}){self_note}{shown}"
    )
    fig.suptitle(textwrap.fill(head, 130) + "\n" + textwrap.fill(str(_get(report, "message")), 130), fontsize=10.5)
    return fig
