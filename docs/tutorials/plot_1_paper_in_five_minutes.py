"""
The paper in five minutes
=========================

He, Pan, Chen and Yang (ICML 2025) show that a one-layer multi-head softmax
attention model, trained on in-context linear regression, learns a simple
structure: each head keeps one key–query number :math:`\\omega_h` and one
output–value number :math:`\\mu_h`, the heads split into positive and negative
ones, and the model becomes *debiased one-step gradient descent* with the best
step size — within a constant of the Bayes-optimal risk. This page runs each
step of that story with the package, at the paper's setting :math:`d = 5`,
:math:`L = 40`, :math:`\\sigma^2 = 0.1` (theory: :doc:`/theory`).

The same numbers come from the command line: ``reduced-dynamics run --heads 3``
integrates this flow, ``reduced-dynamics risk`` measures the risks and
``reduced-dynamics check --quick`` checks every statement.
"""

# %%
# The data model and its constants
# --------------------------------
# One frozen :class:`~reduced_dynamics.Setting` carries the data model and
# the constants every formula uses: :math:`c = (1+\sigma^2)/L`,
# :math:`\xi = d/L` and the optimal step :math:`\eta^* = 1/(1 + cd)`.
import matplotlib.pyplot as plt
import numpy as np

from reduced_dynamics import (
    BayesRidge,
    DebiasedGD,
    MultiHead,
    Setting,
    bound_slack,
    estimate_risks,
    integrate,
    reduced_model,
    risk_ratio_excess,
    sample_prompts,
)

# sphinx_gallery_thumbnail_number = 2
setting = Setting(d=5, L=40, sigma2=0.1)
print(f"c = {setting.c:.4f}, xi = {setting.xi}, eta* = {setting.eta_star:.6f}")

# %%
# A gradient flow
# ---------------
# The reduced model is the approximate loss :math:`\tilde L(\omega, \mu)` of
# the :math:`2H` numbers. Its gradient flow, from a small random start, is one
# call to :func:`~reduced_dynamics.integrate`.
model = reduced_model(setting, n_heads=3)
res = integrate(model, model.initial_state(seed=0, scale=0.01), t_end=1e5)
print(res.message)
print(res.final)

# %%
# The patterns
# ------------
# Within a few time units the heads *match signs* (:math:`\operatorname{sign}
# \omega_h = \operatorname{sign} \mu_h`), then the output–value masses cancel
# (:math:`\sum_h \mu_h \to 0`, two positive heads against one negative) and the
# key–query scales become equal, :math:`|\omega_h| = \gamma`.
print(res.stage_times)

fig, (ax_w, ax_m) = plt.subplots(1, 2, figsize=(10, 3.6), sharex=True)
for h in range(model.n_heads):
    ax_w.plot(res.t, res.omega[:, h], label=f"head {h + 1}")
    ax_m.plot(res.t, res.mu[:, h], label=f"head {h + 1}")
ax_w.set(xscale="log", xlabel="flow time $t$", ylabel=r"key–query $\omega_h$")
ax_m.set(xscale="log", xlabel="flow time $t$", ylabel=r"output–value $\mu_h$")
ax_w.legend()
fig.suptitle("Three heads: sign matching, zero-sum OV, equal |ω|")
fig.tight_layout()

# %%
# The drift
# ---------
# The flow reaches the solution manifold but never stops: :math:`\gamma` keeps
# shrinking, along the drift law
# :math:`\gamma(t) \approx (16 c d^3 (pn/H) t)^{-1/6}` (theory:
# :theory:`drift-law`), while :math:`\eta_\mathrm{eff} = \mu^\top\omega`
# approaches :math:`\eta^*`.
late = res.t > 10
fig, (ax_g, ax_e) = plt.subplots(1, 2, figsize=(10, 3.6))
ax_g.loglog(res.t[late], res.gamma[late], label=r"flow $\gamma(t)$")
ax_g.loglog(res.t[late], res.drift_law()[late], "--", label="drift law")
ax_g.set(xlabel="flow time $t$", ylabel=r"$\gamma$")
ax_g.legend()
ax_e.loglog(res.t[late], setting.eta_star - res.eta_eff[late])
ax_e.set(xlabel="flow time $t$", ylabel=r"$\eta^* - \eta_\mathrm{eff}$")
fig.tight_layout()
print(f"gamma(t_end) / drift law = {res.gamma[-1] / res.drift_law()[-1]:.4f}")
print(f"eta* - eta_eff at t_end  = {setting.eta_star - res.final.eta_eff:.2e}")

# %%
# Debiased gradient descent
# -------------------------
# On fresh prompts the attention model at the end of the flow predicts what
# debiased one-step GD with step :math:`\eta_\mathrm{eff}` predicts,
# :math:`\hat y = \frac{\eta}{L}\sum_l y_l (x_l - \bar x)^\top x_q`, up to
# :math:`O(\gamma^2)`.
prompts = sample_prompts(5_000, setting, seed=1)
attention = MultiHead(res.omega[-1], res.mu[-1])
gap = np.mean((attention(prompts) - DebiasedGD(res.final.eta_eff)(prompts)) ** 2)
print(
    f"mean squared gap to debiased GD: {gap:.1e}  (gamma^2 = {res.final.gamma**2:.1e})"
)

# %%
# The Bayes bound
# ---------------
# Theorem 1: the risk of debiased GD at :math:`\eta^*` is within a constant
# factor of the Bayes-optimal (ridge) risk. Monte Carlo risks of the three
# predictors, with their standard errors:
risks = estimate_risks(
    {
        "attention": attention,
        "debiased GD (eta*)": DebiasedGD(setting.eta_star),
        "Bayes ridge": BayesRidge(setting),
    },
    setting,
    n_prompts=40_000,
    seed=0,
)
for name in risks.names:
    print(f"{name:>20}: {risks[name].risk:.4f} ± {risks[name].stderr:.4f}")
diff = risks.difference("attention", "debiased GD (eta*)")  # paired: the same prompts
print(f"attention - debiased GD: {diff.risk:.1e} ± {diff.stderr:.1e}")
ratio = risks["debiased GD (eta*)"].risk / risks["Bayes ridge"].risk
print(f"risk ratio debiased GD / Bayes at L = 40: {ratio:.3f}")

# %%
# Theorem 1(c) is a statement about the limit :math:`L, d \to \infty` with
# :math:`\xi = d/L` fixed: the ratio of the two risks tends to
# :math:`r(\xi, \sigma^2)`, which stays below the bound :math:`U`
# (theory: :theory:`bayes-ratio`; at finite :math:`L` the ratio differs, see
# :theory:`finite-l-results`). :func:`~reduced_dynamics.risk_ratio_excess` and
# :func:`~reduced_dynamics.bound_slack` give :math:`r - 1` and :math:`U - r`
# without cancellation.
print(
    f"r - 1 = {risk_ratio_excess(sigma2=0.1, xi=setting.xi):.5f}, U - r = {bound_slack(sigma2=0.1, xi=setting.xi):.5f}"
)
