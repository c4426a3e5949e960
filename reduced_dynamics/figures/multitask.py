"""Figure ``multitask``: head roles and per-task risks of the multi-task model (N = 2 tasks, d = 6).

(a) The reduced flow's end state for H = 2, 3, 4 (one start each): per head, ω per feature and
μ per task as a signed heat map, with the head roles. (b) The same for the trained N-output
attention model (extracted diagonal ω and task μ). The full figure uses the paper-scale models of
``figures/multitask_trained.npz`` when that file holds the figure's seed (separate Q, K, V, O, Adam
lr 1e-3, batch 256, 5·10⁵ steps; written by ``scripts/multitask_experiment.py --figure-data``), and
otherwise trains the circuit form for :data:`TRAIN_STEPS` steps at :data:`TRAIN_LR`. (c) Role frequencies over random
starts of the reduced flow, per H (dedicated / superposed / shared / dummy, fraction of heads).
(d) Per-task risk (mean of the two tasks) vs H: trained model, reduced flow end state, per-task
debiased GD on S_n (η_n) and Bayes ridge on S_n, on common prompts, ± 1 SE.

References
----------
docs/theory.md#multi-task-regression
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from reduced_dynamics.figures._base import FigureData
from reduced_dynamics.flow import integrate
from reduced_dynamics.models import reduced_model
from reduced_dynamics.multitask.attention import (
    MultitaskAttention,
    extract_reduced,
    mt_attention_predict,
    train_mt_attention,
)
from reduced_dynamics.multitask.flow import role_frequencies
from reduced_dynamics.multitask.predictors import (
    per_task_risks,
    reduced_mt_predict,
    support_dgd_weights,
    support_ridge_predict,
    weighted_dgd_predict,
)
from reduced_dynamics.plots.style import OKABE_ITO, new_figure, styled_data, tight_layout
from reduced_dynamics.setting import Setting

__all__ = ["multitask_data", "plot_multitask", "TRAIN_STEPS", "TRAIN_LR", "PAPER_MODELS"]

#: Adam steps and learning rate of the trained models in the full figure (quick: 300 steps)
TRAIN_STEPS = 20_000
TRAIN_LR = 5e-3
KINDS = ("dedicated", "superposed", "shared", "dummy")
#: the paper-scale trained models (KQ_H{H}_s{seed}, OV_H{H}_s{seed}, steps_H{H}_s{seed}, param, lr, batch)
PAPER_MODELS = Path(__file__).resolve().parents[2] / "figures" / "multitask_trained.npz"


def _paper_models(seed: int, setting: Setting) -> dict | None:
    """The committed paper-scale models of ``seed`` for H = 1..4 with their provenance, or None."""
    if not PAPER_MODELS.is_file() or setting.to_dict() != Setting.paper_multitask().to_dict():
        return None  # the models were trained at the paper's multi-task setting only
    with np.load(PAPER_MODELS) as z:
        if any(f"KQ_H{H}_s{seed}" not in z for H in range(1, 5)):
            return None
        return {
            "models": {H: MultitaskAttention(KQ=z[f"KQ_H{H}_s{seed}"], OV=z[f"OV_H{H}_s{seed}"]) for H in range(1, 5)},
            "steps": int(z[f"steps_H4_s{seed}"]),
            "lr": float(z["lr"]),
            "param": str(z["param"]),
        }


def multitask_data(setting, *, quick=False, seed) -> FigureData:
    """Flows, role frequencies, trained models and per-task risks for the figure.

    Parameters
    ----------
    setting : Setting
        With ``tasks`` (the registry uses :meth:`Setting.paper_multitask`); without tasks the
        paper's supports at its ``L`` and ``σ²``.
    quick : bool
        2 starts per H (flows to t = 300), 100 training steps, 1000 risk prompts, end states at
        t = 2000 (full: 100 starts to t = 2000, 20000 prompts, end states at t = 2e4, and the
        paper-scale models of :data:`PAPER_MODELS` when present, else 20000 training steps).
    seed : int

    Returns
    -------
    FigureData
        ``Hs_roles (6,)``, ``kind_freq (6, 4)`` (columns dedicated, superposed, shared, dummy);
        ``Hs (4,)`` = 1..4; for H in 2..4 ``red_omega_H (H, d)``, ``red_mu_H (H, N)``,
        ``tr_omega_H``, ``tr_mu_H``, ``red_roles_H``, ``tr_roles_H`` (str);
        ``risk (4, 4, N)`` and ``stderr (4, 4, N)`` for (trained, reduced, dgd_S, bayes_S) × H × task;
        ``n_seeds``, ``steps``, ``lr``, ``param`` (parameterisation of the trained models), ``n_prompts``.
    """
    s = setting if setting.tasks is not None else Setting.paper_multitask().replace(L=setting.L, sigma2=setting.sigma2)
    n_seeds, steps, n_prompts = (2, 100, 1000) if quick else (100, TRAIN_STEPS, 20_000)
    t_roles, t_flow = (300.0, 2000.0) if quick else (2000.0, 2e4)
    N = s.n_tasks
    paper = None if quick else _paper_models(seed, s)
    arrays: dict = {"n_seeds": n_seeds, "steps": steps, "lr": TRAIN_LR, "param": "circuit", "n_prompts": n_prompts}
    if paper is not None:
        arrays.update(steps=paper["steps"], lr=paper["lr"], param=paper["param"])
    Hs_roles = np.arange(1, 7)
    freq = np.zeros((6, 4))
    for i, H in enumerate(Hs_roles):
        rf = role_frequencies(int(H), s, n_seeds=n_seeds, seed=seed, t_end=t_roles)
        freq[i] = [rf.kinds[k] for k in KINDS]
    arrays["Hs_roles"], arrays["kind_freq"] = Hs_roles, freq
    Hs = np.arange(1, 5)
    risk = np.zeros((4, 4, N))
    err = np.zeros((4, 4, N))
    A = support_dgd_weights(s)
    for j, H in enumerate(Hs):
        flow_model = reduced_model(s, n_heads=int(H))
        # as the multi-task end states have always been computed: LSODA at 1e-8 / 1e-10, the end state only
        red = integrate(
            flow_model,
            flow_model.initial_state(seed=seed),
            times=[t_flow],
            method="LSODA",
            rtol=1e-8,
            atol=1e-10,
            stationarity_tol=0,
        ).final
        if paper is not None:
            model = paper["models"][int(H)]
            circ = extract_reduced(model, s)
        else:
            tr = train_mt_attention(int(H), s, steps=steps, seed=seed, lr=TRAIN_LR)
            model, circ = tr.model, tr.circuits
        if H >= 2:
            arrays[f"red_omega_{H}"], arrays[f"red_mu_{H}"] = red.omega, red.mu
            arrays[f"tr_omega_{H}"], arrays[f"tr_mu_{H}"] = circ.omega, circ.mu
            arrays[f"red_roles_{H}"] = " ".join(red.roles)
            arrays[f"tr_roles_{H}"] = " ".join(circ.roles)
        res = per_task_risks(
            {
                "trained": lambda p, m=model: mt_attention_predict(m, p, s),
                "reduced": lambda p, r=red: reduced_mt_predict(p, r.omega, r.mu, s),
                "dgd_S": lambda p: weighted_dgd_predict(p, A),
                "bayes_S": lambda p: support_ridge_predict(p, s),
            },
            s,
            n_prompts=n_prompts,
            seed=seed + 1000,  # the same prompts for every H
        )
        risk[:, j], err[:, j] = res.risk, res.stderr
    arrays.update(Hs=Hs, risk=risk, stderr=err, tasks=np.array([len(t) for t in s.supports]))
    return FigureData("multitask", arrays)


def _heat(ax, omega, mu, title, roles, vmax_w, vmax_m):
    H, d = omega.shape
    N = mu.shape[1]
    M = np.concatenate([omega / vmax_w, np.full((H, 1), np.nan), mu / vmax_m], axis=1)
    im = ax.imshow(M, cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto")
    ax.set_xticks(list(range(d)) + [d + 1 + n for n in range(N)])
    ax.set_xticklabels([f"ω{j + 1}" for j in range(d)] + [f"μ{n + 1}" for n in range(N)], fontsize=7)
    ax.set_yticks(range(H))
    ax.set_yticklabels([f"h{h + 1}: {r}" for h, r in enumerate(roles.split())], fontsize=7)
    ax.set_title(title, fontsize=9)
    return im


@styled_data
def plot_multitask(data, *, fig=None):
    """Draw the four panels (see the module docstring); returns the figure."""
    fig = new_figure(fig, figsize=(16, 9))
    gs = fig.add_gridspec(3, 5, width_ratios=[1, 1, 1, 0.06, 1.1])
    im = None
    for k, H in enumerate((2, 3, 4)):
        for row, (pre, label) in enumerate((("red", "reduced flow"), ("tr", "trained"))):
            ax = fig.add_subplot(gs[row, k])
            om, mu = np.asarray(data[f"{pre}_omega_{H}"]), np.asarray(data[f"{pre}_mu_{H}"])
            im = _heat(
                ax,
                om,
                mu,
                f"({'ab'[row]}) {label}, H = {H}",
                str(data[f"{pre}_roles_{H}"]),
                max(np.abs(om).max(), 1e-12),
                max(np.abs(mu).max(), 1e-12),
            )
    fig.colorbar(im, cax=fig.add_subplot(gs[0:2, 3]), label="ω / max|ω|  and  μ / max|μ|  (per state)")
    ax = fig.add_subplot(gs[0:2, 4])
    Hs, freq = np.asarray(data["Hs_roles"]), np.asarray(data["kind_freq"])
    bottom = np.zeros(len(Hs))
    for i, kind in enumerate(KINDS):
        ax.bar(Hs, freq[:, i], bottom=bottom, color=OKABE_ITO[i], label=kind)
        bottom += freq[:, i]
    ax.set_xticks(Hs)
    ax.set_xlabel("heads H")
    ax.set_ylabel("fraction of heads")
    ax.set_title(f"(c) head roles, reduced flow, {int(data['n_seeds'])} starts per H", fontsize=9)
    ax.legend(fontsize=8, loc="lower right")
    ax = fig.add_subplot(gs[2, :])
    Hs4, risk, err = np.asarray(data["Hs"]), np.asarray(data["risk"]), np.asarray(data["stderr"])
    labels = [
        f"trained ({_param_label(data)}, Adam, {int(data['steps']):,} steps, lr {float(data['lr']):g})",
        "reduced flow end state",
        "debiased GD on S_n (η_n)",
        "Bayes ridge on S_n",
    ]
    for i, lab in enumerate(labels):
        mean = risk[i].mean(axis=-1)
        se = np.sqrt((err[i] ** 2).sum(axis=-1)) / risk.shape[-1]
        ax.errorbar(Hs4 + 0.04 * (i - 1.5), mean, yerr=se, marker="o", capsize=3, color=OKABE_ITO[i], label=lab)
    ax.set_xticks(Hs4)
    ax.set_xlabel("heads H")
    ax.set_ylabel("risk, mean over tasks (± 1 SE)")
    ax.set_title(f"(d) per-task risk vs H ({int(data['n_prompts'])} common prompts; includes σ²)", fontsize=9)
    ax.legend(fontsize=8)
    tight_layout(fig)
    return fig


def _param_label(data) -> str:
    """``separate Q, K, V, O`` or ``circuit form`` (data written before ``param`` existed: circuit form)."""
    return "separate Q, K, V, O" if "param" in data and str(data["param"]) == "separate" else "circuit form"


def _key_numbers(data) -> dict:
    """Role frequencies per H and the risks per H (mean over tasks)."""
    freq = np.asarray(data["kind_freq"])
    risk = np.asarray(data["risk"]).mean(axis=-1)
    return {
        "kind_freq": {int(H): dict(zip(KINDS, map(float, freq[i]))) for i, H in enumerate(data["Hs_roles"])},
        "risk_mean_over_tasks": {
            name: [float(x) for x in risk[i]] for i, name in enumerate(("trained", "reduced", "dgd_S", "bayes_S"))
        },
    }
