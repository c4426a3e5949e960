"""Figure ``activations``: effective step vs the claim 2 C_f γ μ₊ for each attention activation f.

(a) Per activation (exp, affine C = 0.1, square C = 1, 1 + tanh): the claimed ``η = 2 C_f γ μ₊`` and
the measured step, for the reduced flow's end state (slope ``μᵀT₁``, t = 10⁵) and for the H = 2 attention
model trained at the paper's scale (regression of its predictions on the debiased-GD direction, ± 1 SE;
read from ``figures/activations_trained.json``, written by ``scripts/activation_experiment.py``), with
``η* = 1/(1 + cd)``. (b) γ(t) of the reduced flow against the drift laws ``(64 c d C_f(−m₃) t)^{-1/4}``
(square, tanh) and ``(8 c d³ t)^{-1/6}`` (exp); affine does not drift. (c) Along the two-head manifold
(μ optimised at each γ): the excess of ``min_μ L̃_f`` over ``1 + σ² − η*`` (= ``Bγ²`` at small γ,
``B = 4 c d η*² (−m₃/C_f)``) next to the model's true finite-L risk minus debiased GD at η* (Monte Carlo,
paired, ± 1 SE; symlog axis), with the trained models' γ: at L = 40 the true risk of square and tanh has
its minimum at γ ≈ 0.15, below debiased GD, where the trained models sit; L̃_f instead drives γ → 0.

References
----------
docs/theory.md#other-activations
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from reduced_dynamics.activation_dynamics.flow import (
    act_limit,
    drift_gamma,
    eta_claim,
    eta_tilt,
    manifold_profile,
    manifold_risk_scan,
)
from reduced_dynamics.figures._base import FigureData
from reduced_dynamics.flow import integrate
from reduced_dynamics.models import reduced_model
from reduced_dynamics.plots.style import OKABE_ITO, checked_data, new_figure, tight_layout

__all__ = ["activations_data", "plot_activations", "ACTS", "TRAINED_FILE"]

#: (name, C) of the figure's activations (affine C = 0.1: the largest tried that trains without its
#: normaliser crossing 0; C = 0.3, 0.5, 1 broke within 260-3900 steps).
ACTS = (("exp", 1.0), ("affine", 0.1), ("square", 1.0), ("tanh", 1.0))
#: The trained-model numbers (scripts/activation_experiment.py --phase report writes it).
TRAINED_FILE = Path(__file__).resolve().parents[2] / "figures" / "activations_trained.json"


def _trained(names) -> np.ndarray:
    """``(A, 5)``: claim, measured, its SE, step count, γ per activation from :data:`TRAINED_FILE` (NaN if absent)."""
    out = np.full((len(names), 5), np.nan)
    if not TRAINED_FILE.is_file():
        return out
    rows = json.loads(TRAINED_FILE.read_text())
    for i, n in enumerate(names):
        r = rows.get(n)
        if r:
            gam = float(np.mean(np.abs(r["omega"]))) if "omega" in r else np.nan
            out[i] = [r["eta_claim"], r["eta_measured"], r["eta_measured_stderr"], r["step"], gam]
    return out


def activations_data(setting, *, quick=False, seed) -> FigureData:
    """Flow end states, γ(t), manifold profiles and the trained numbers.

    Parameters
    ----------
    setting : Setting
        Isotropic; each activation of :data:`ACTS` is applied to it.
    quick : bool
        Flows to t = 10³ without tanh, no trained points (full: t = 10⁵, trained points from the file).
    seed : int
        Seed of the flows' random start.

    Returns
    -------
    FigureData
        ``names`` (A,) str, ``c`` (A,), ``c_f`` (A,), ``eta_star``; ``flow_claim``, ``flow_tilt``, ``flow_gamma``
        (A,) (NaN where not run); ``t`` (T,), ``gamma_t`` (A, T), ``gamma_law`` (A, T); ``prof_gamma`` (G,),
        ``prof_excess`` (A, G), ``B`` (A,); ``scan_gamma`` (K,), ``scan_diff``, ``scan_se`` (A, K): true risk
        minus debiased GD at η* on the manifold; ``trained`` (A, 5): claim, measured, SE, steps, γ.
    """
    names = [n for n, _ in ACTS]
    t_end = 1e3 if quick else 1e5
    A = len(ACTS)
    T = 40
    t = np.logspace(np.log10(t_end) - 3, np.log10(t_end), T)
    claim, tilt, gam = np.full(A, np.nan), np.full(A, np.nan), np.full(A, np.nan)
    gamma_t, gamma_law = np.full((A, T), np.nan), np.full((A, T), np.nan)
    prof_g = np.logspace(-2.3, -0.5, 25)
    prof_ex, B, cf = np.full((A, prof_g.size), np.nan), np.zeros(A), np.zeros(A)
    scan_g = np.array([0.05, 0.146, 0.3]) if quick else np.array([0.02, 0.05, 0.1, 0.146, 0.2, 0.3])
    scan_d, scan_se = np.full((A, scan_g.size), np.nan), np.full((A, scan_g.size), np.nan)
    for i, (n, c) in enumerate(ACTS):
        s = setting.replace(activation=n, activation_c=c)
        lim = act_limit(s)
        B[i], cf[i] = lim.B, lim.c_f
        prof_ex[i] = manifold_profile(prof_g, s).excess
        if n != "affine":
            sc = manifold_risk_scan(scan_g, s, n_prompts=5000 if quick else 100_000, seed=seed + 7)
            scan_d[i], scan_se[i] = sc.diff_dgd, sc.diff_stderr
        if n != "affine":
            gamma_law[i] = drift_gamma(t, s)
        if quick and n == "tanh":
            continue
        model = reduced_model(s, n_heads=2)
        # as the activation flow has always run: 1e-9 / 1e-12, 60 output times from 1e-3 t_end, no stationarity stop
        r = integrate(
            model,
            model.initial_state(seed=seed, scale=0.01),
            t_end=t_end,
            rtol=1e-9,
            atol=1e-12,
            n_times=60,
            t_first=1e-3 * t_end,
            stationarity_tol=0,
        )
        # exp is the isotropic model (its summary has no claim / tilt): both from the end state, as before
        w_end, m_end = r.omega[-1], r.mu[-1]
        claim[i], tilt[i], gam[i] = eta_claim(w_end, m_end, s), eta_tilt(w_end, m_end, s), r.final.gamma
        keep = r.t > 0
        g_of_t = np.mean(np.abs(r.omega[keep]), axis=1)
        gamma_t[i] = np.interp(np.log(t), np.log(r.t[keep]), g_of_t)
    return FigureData(
        "activations",
        {
            "names": np.array(names),
            "c": np.array([c for _, c in ACTS]),
            "c_f": cf,
            "eta_star": float(setting.eta_star),
            "flow_claim": claim,
            "flow_tilt": tilt,
            "flow_gamma": gam,
            "t": t,
            "gamma_t": gamma_t,
            "gamma_law": gamma_law,
            "prof_gamma": prof_g,
            "prof_excess": prof_ex,
            "B": B,
            "scan_gamma": scan_g,
            "scan_diff": scan_d,
            "scan_se": scan_se,
            "trained": np.full((A, 5), np.nan) if quick else _trained(names),
            "t_end": t_end,
        },
    )


@checked_data
def plot_activations(data, *, fig=None):
    """Three panels (module docstring); returns the Figure."""
    fig = new_figure(fig, figsize=(15.0, 4.6))
    ax1, ax2, ax3 = fig.subplots(1, 3)
    names = [str(n) for n in np.asarray(data["names"])]
    labels = [f"{n}" + (f" (C={c:g})" if n in ("affine", "square") else "") for n, c in zip(names, data["c"])]
    x = np.arange(len(names))
    tr = np.asarray(data["trained"])
    ax1.axhline(data["eta_star"], color="0.4", ls="--", lw=1, label=f"η* = 1/(1+cd) = {data['eta_star']:.4f}")
    ax1.plot(x - 0.15, data["flow_claim"], "o", mfc="none", color=OKABE_ITO[0], ms=8, label="flow: claim 2C_fγμ₊")
    ax1.plot(x - 0.15, data["flow_tilt"], "x", color=OKABE_ITO[0], ms=8, label="flow: measured μᵀT₁")
    if np.isfinite(tr[:, 0]).any():
        ax1.plot(x + 0.15, tr[:, 0], "s", mfc="none", color=OKABE_ITO[1], ms=8, label="trained: claim 2C_fγμ₊")
        ax1.errorbar(
            x + 0.15,
            tr[:, 1],
            yerr=tr[:, 2],
            fmt="D",
            color=OKABE_ITO[1],
            ms=5,
            capsize=3,
            label="trained: measured (regression ± SE)",
        )
    ax1.set_xticks(x, labels)
    ax1.set_ylabel("effective step η_eff")
    ax1.set_title(f"(a) η_eff vs the claim (flow t = {data['t_end']:.0e}; trained H = 2)")
    ax1.legend(fontsize=7, loc="best")
    t = np.asarray(data["t"])
    for i in range(len(names)):
        col = OKABE_ITO[i % len(OKABE_ITO)]
        if np.isfinite(data["gamma_t"][i]).any():
            ax2.loglog(t, data["gamma_t"][i], color=col, lw=2, label=f"{labels[i]}: flow")
        if np.isfinite(data["gamma_law"][i]).any():
            ax2.loglog(t, data["gamma_law"][i], color=col, ls=":", lw=1.5, label=f"{labels[i]}: drift law")
    ax2.set_xlabel("flow time t")
    ax2.set_ylabel("γ = mean |ω_h|")
    ax2.set_title("(b) γ(t): t^(-1/4) (square, tanh), t^(-1/6) (exp)")
    ax2.legend(fontsize=7)
    g = np.asarray(data["prof_gamma"])
    sg = np.asarray(data["scan_gamma"])
    for i, n in enumerate(names):
        col = OKABE_ITO[i % len(OKABE_ITO)]
        if n == "affine":
            ax3.plot([], [], color=col, label=f"{labels[i]}: L̃_f excess = 0 (flat)")
            continue
        ax3.plot(g, data["prof_excess"][i], color=col, lw=1.5, label=f"{labels[i]}: min_μ L̃_f − (1+σ²−η*)")
        ax3.errorbar(
            sg,
            data["scan_diff"][i],
            yerr=data["scan_se"][i],
            fmt="o",
            color=col,
            ms=4,
            capsize=2,
            label=f"{labels[i]}: true risk − debiased GD (MC)",
        )
        if np.isfinite(tr[i, 4]):
            ax3.axvline(tr[i, 4], color=col, ls=":", lw=1)
    ax3.axhline(0.0, color="0.5", lw=0.8)
    ax3.set_xscale("log")
    ax3.set_yscale("symlog", linthresh=1e-4)
    ax3.set_xlabel("γ (two heads, ω = (γ, −γ); dotted: trained γ)")
    ax3.set_ylabel("loss or risk relative to the limit (L = 40)")
    ax3.set_title("(c) along the manifold: L̃_f vs the true risk")
    ax3.legend(fontsize=6)
    tight_layout(fig)
    return fig


def _key_numbers(data) -> dict:
    names = [str(n) for n in np.asarray(data["names"])]
    tr = np.asarray(data["trained"])
    return {
        n: {
            "flow_claim": float(data["flow_claim"][i]),
            "flow_tilt": float(data["flow_tilt"][i]),
            "flow_gamma": float(data["flow_gamma"][i]),
            "trained_claim": float(tr[i, 0]),
            "trained_measured": float(tr[i, 1]),
            "trained_measured_se": float(tr[i, 2]),
        }
        for i, n in enumerate(names)
    } | {"eta_star": float(data["eta_star"])}
