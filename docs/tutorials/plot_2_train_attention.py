"""
Train the attention model and watch the patterns form
=====================================================

The paper's full model is one layer of :math:`H` softmax attention heads with
key, query, value and output weights; its claim is that training finds the
patterns of the reduced model on its own. This page trains the package's numpy
model (hand-written backpropagation, Adam, fresh prompts at every step), reads
the circuits :math:`KQ_h = K_h^\\top Q_h/\\sqrt{d+1}` and :math:`ov_h = V_h^\\top o_h`
at logarithmically spaced steps, and watches them become the paper's patterns
(theory: :theory:`emergent-patterns`).

Sizes are small so that the page builds in seconds: :math:`d = 5`,
:math:`L = 20`, two heads, 20 000 Adam steps of 128 prompts (the paper:
:math:`L = 40`, batch 256, :math:`5 \\cdot 10^5` steps; ``reduced-dynamics train``
runs those).
"""

# %%
# One training run
# ----------------
import matplotlib.pyplot as plt
import numpy as np

from reduced_dynamics import (
    DebiasedGD,
    Setting,
    TrainConfig,
    estimate_risks,
    extract_circuits,
    mc_risk,
    pattern_metrics,
    train,
)
from reduced_dynamics.model.circuits import circuits_from_arrays

# sphinx_gallery_thumbnail_number = 2
setting = Setting(d=5, L=20, sigma2=0.1)
config = TrainConfig(
    setting, seed=0, n_heads=2, steps=20_000, batch=128, lr=3e-3, n_snapshots=40
)
result = train(config)
print(result.message, f"{result.step} steps at {result.steps_per_second:,.0f} steps/s")

fig, ax = plt.subplots(figsize=(6, 3.2))
window = 200
smooth = np.convolve(result.losses, np.ones(window) / window, mode="valid")
ax.semilogx(np.arange(window, result.step + 1), smooth)
ax.axhline(
    1 + setting.sigma2 - setting.eta_star,
    ls="--",
    c="k",
    lw=1,
    label=r"$1 + \sigma^2 - \eta^*$",
)
ax.set(xlabel="Adam step", ylabel="training loss (running mean)")
ax.legend()
fig.tight_layout()

# %%
# The circuits at a few steps
# ---------------------------
# Each key–query circuit starts as noise and becomes :math:`\omega_h I_d` on
# its covariate block, with nothing on the response row; the two heads take
# opposite signs.
picks = [0, 10, 20, len(result.snapshot_steps) - 1]
fig, axes = plt.subplots(
    config.n_heads, len(picks), figsize=(10, 5), constrained_layout=True
)
vmax = np.abs(result.snapshot_KQ[picks]).max()
for j, s in enumerate(picks):
    for h in range(config.n_heads):
        im = axes[h, j].imshow(
            result.snapshot_KQ[s, h], cmap="RdBu_r", vmin=-vmax, vmax=vmax
        )
        axes[h, j].set_xticks([])
        axes[h, j].set_yticks([])
        axes[h, j].set_title(
            f"head {h + 1}, step {result.snapshot_steps[s]}", fontsize=9
        )
fig.colorbar(im, ax=axes, shrink=0.8, label=r"$KQ_h$ entry")

# %%
# The reduced numbers over training
# ---------------------------------
# :math:`\omega_h` is the mean of the diagonal of the covariate block of
# :math:`KQ_h`, :math:`\mu_h` the response entry of :math:`ov_h`; their product
# sums to the effective step :math:`\eta_\mathrm{eff} = \mu^\top\omega`, which
# climbs to the optimal step :math:`\eta^*`.
circuits = [
    circuits_from_arrays(kq, ov)
    for kq, ov in zip(result.snapshot_KQ, result.snapshot_ov)
]
steps = np.maximum(result.snapshot_steps, 1)
fig, (ax_w, ax_e) = plt.subplots(1, 2, figsize=(10, 3.4))
for h in range(config.n_heads):
    ax_w.semilogx(steps, [c.omega[h] for c in circuits], label=rf"$\omega_{h + 1}$")
    ax_w.semilogx(steps, [c.mu[h] for c in circuits], ls="--", label=rf"$\mu_{h + 1}$")
ax_w.set(xlabel="Adam step", ylabel="circuit value")
ax_w.legend(ncol=2, fontsize=8)
ax_e.semilogx(
    steps, [c.eta_eff for c in circuits], label=r"$\eta_\mathrm{eff} = \mu^\top\omega$"
)
ax_e.axhline(setting.eta_star, ls="--", c="k", lw=1, label=r"$\eta^*$")
ax_e.set(xlabel="Adam step", ylabel="effective step")
ax_e.legend()
fig.tight_layout()

# %%
# How close to the patterns
# -------------------------
# :func:`~reduced_dynamics.pattern_metrics` measures each pattern; every one is
# 0 for the exact pattern (sign matching: 1).
final = extract_circuits(config.model(), result.params)
metrics = pattern_metrics(final)
print(f"omega = {np.round(final.omega, 4)}, mu = {np.round(final.mu, 4)}")
print(f"eta_eff = {final.eta_eff:.4f}   (eta* = {setting.eta_star:.4f})")
for name in (
    "kq_offdiag_fraction_max",
    "kq_response_row_fraction_max",
    "kq_diag_cv_max",
    "ov_offresponse_fraction_max",
    "omega_cv",
    "zero_sum_ratio",
    "sign_match_fraction",
):
    print(f"{name:>30}: {getattr(metrics, name):.4f}")

# %%
# The trained model is debiased GD
# --------------------------------
# On fresh prompts the trained network's risk is that of debiased one-step GD
# at its own :math:`\eta_\mathrm{eff}` (and close to the optimum at
# :math:`\eta^*`), up to Monte Carlo error.
trained = mc_risk(config.model(), result.params, setting, n_prompts=20_000, seed=1)
gd = estimate_risks(
    {"own": DebiasedGD(final.eta_eff), "optimal": DebiasedGD(setting.eta_star)},
    setting,
    n_prompts=20_000,
    seed=1,
)
print(f"trained network     : {trained.risk:.4f} ± {trained.stderr:.4f}")
print(f"debiased GD, eta_eff: {gd['own'].risk:.4f} ± {gd['own'].stderr:.4f}")
print(f"debiased GD, eta*   : {gd['optimal'].risk:.4f} ± {gd['optimal'].stderr:.4f}")
