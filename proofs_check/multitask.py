r"""Check ``multitask``: the multi-task reduced model (docs/theory.md#extensions).

Compared, at the check's multi-task setting (the given setting's ``tasks``, or the paper's
supports :math:`S_1 = \{1,2,3,4\}`, :math:`S_2 = \{3,4,5,6\}` on ``d = 6`` with the given
``L`` and ``σ²`` when it has none):

1. **Derivation.** The loss derived with sympy from the moment statements equals the closed
   form (difference simplifies to 0), and for one task on all features with equal per-feature
   weights it reduces to :math:`\tilde L` (difference 0).
2. **Gradient.** The numpy gradient equals the lambdified symbolic gradient (relative 1e-10)
   at a random state.
3. **Superposition (H = N + 1).** From random starts the flow's effective weights
   :math:`A = M^\top\Omega` reach the per-task debiased-GD limit (max error < 0.02) and the loss
   the limit :math:`\sum_n(1 + \sigma^2 - \eta_n)` (within 1 %): N + 1 heads match the 2N-head
   predictor. The fraction of starts with a superposed head (mixed signs) is reported.
4. **Pairs (H = 2N).** The end states consist of N antipodal head pairs and reach the same
   limit.
"""

from __future__ import annotations

import numpy as np
import sympy as sp

from reduced_dynamics import integrate, reduced_model
from reduced_dynamics.multitask.derive import (
    closed_form_mt_loss,
    derive_mt_loss,
    generated_mt_functions,
    reduction_to_single_task,
)
from reduced_dynamics.multitask.flow import antipodal_pairs, role_kind
from reduced_dynamics.multitask.loss import mt_gradient
from reduced_dynamics.multitask.predictors import limit_predictor
from reduced_dynamics.setting import Setting

from .result import CheckResult, reports_errors

__all__ = ["check_multitask", "multitask_setting"]

#: tolerances
A_TOL = 0.02
LOSS_RTOL = 0.01
GRAD_RTOL = 1e-10
#: flow time of the end states (the limit is approached as the KQ weights shrink; t = 2000 is not yet within A_TOL)
T_END = 20_000.0


def multitask_setting(setting: Setting) -> Setting:
    """The check's multi-task setting: ``setting`` if it has ``tasks``, else the paper's supports at its ``L``, ``σ²``."""
    if setting.tasks is not None:
        return setting
    return Setting.paper_multitask().replace(L=setting.L, sigma2=setting.sigma2)


def _flows(H, s, seeds, t_end):
    """The flows from ``model.initial_state(seed=i, scale=0.01)`` for each seed, recorded at ``t_end`` only.

    The tolerances (``rtol=1e-8, atol=1e-10``) and the absence of a stationarity stop are those of the
    former multi-task flow driver.
    """
    model = reduced_model(s, n_heads=H)
    return [
        integrate(
            model,
            model.initial_state(seed=i, scale=0.01),
            times=[t_end],
            rtol=1e-8,
            atol=1e-10,
            stationarity_tol=0,
        )
        for i in seeds
    ]


@reports_errors("multitask")
def check_multitask(setting: Setting, *, quick: bool = False) -> CheckResult:
    """Run the ``multitask`` check (see the module docstring); ``quick``: H = 2 symbolic, 2 starts per H (full: H = 1..3, 20 starts).

    Parameters
    ----------
    setting : Setting
    quick : bool

    Returns
    -------
    CheckResult
    """
    s = multitask_setting(setting)
    N = s.n_tasks
    Hs_sym = (2,) if quick else (1, 2, 3)
    sym_zero = all(
        sp.simplify(sp.powsimp(sp.expand(derive_mt_loss(H, s) - closed_form_mt_loss(H, s)), force=True)) == 0
        for H in Hs_sym
    )
    red_zero = all(reduction_to_single_task(H, 3 if quick else 5) == 0 for H in Hs_sym)
    rng = np.random.default_rng(0)
    H = 2
    om, mu = 0.3 * rng.standard_normal((H, s.d)), 2.0 * rng.standard_normal((H, N))
    gen = generated_mt_functions(H, s)
    g = mt_gradient(om, mu, s)
    gnum = np.concatenate([g.omega.ravel(), g.mu.ravel()])
    gsym = gen.gradient(om, mu)
    grad_err = float(np.abs(gnum - gsym).max() / max(np.abs(gsym).max(), 1e-300))

    seeds = range(2) if quick else range(20)
    t_end = T_END
    target = limit_predictor(N + 1, s)
    limit_loss = float(target.loss_per_task.sum())
    res_sup = _flows(N + 1, s, seeds, t_end)
    res_pair = _flows(2 * N, s, seeds, t_end)
    end_sup = [r.final for r in res_sup]
    end_pair = [r.final for r in res_pair]
    a_err_sup = max(float(np.abs(e.A - target.A).max()) for e in end_sup)
    a_err_pair = max(float(np.abs(e.A - target.A).max()) for e in end_pair)
    loss_err_sup = max(abs(e.loss - limit_loss) / limit_loss for e in end_sup)
    loss_err_pair = max(abs(e.loss - limit_loss) / limit_loss for e in end_pair)
    superposed = sum(any(role_kind(x) == "superposed" for x in e.roles) for e in end_sup) / len(end_sup)
    pairs = [antipodal_pairs(e.omega, e.mu) for e in end_pair]
    all_ok = [r.success for r in res_sup + res_pair]
    passed = bool(
        sym_zero
        and red_zero
        and grad_err < GRAD_RTOL
        and a_err_sup < A_TOL
        and a_err_pair < A_TOL
        and loss_err_sup < LOSS_RTOL
        and loss_err_pair < LOSS_RTOL
        and all(p == N for p in pairs)
        and all(all_ok)
    )
    return CheckResult(
        name="multitask",
        passed=passed,
        predicted=(
            f"derived − closed form = 0 and reduction to L̃ = 0; H = {N + 1} and H = {2 * N} reach "
            f"A = η_n 1_(S_n), η = {np.round(target.A.max(axis=1), 4).tolist()}, loss {limit_loss:.5f}; "
            f"H = {2 * N}: {N} antipodal pairs"
        ),
        measured=(
            f"symbolic {'0' if sym_zero else '≠ 0'} (H = {list(Hs_sym)}), reduction {'0' if red_zero else '≠ 0'}; "
            f"grad rel err {grad_err:.1e}; H = {N + 1}: max|A − A*| {a_err_sup:.2e}, loss rel err {loss_err_sup:.1e}, "
            f"superposed head in {superposed:.0%} of {len(res_sup)} starts; H = {2 * N}: max|A − A*| {a_err_pair:.2e}, "
            f"loss rel err {loss_err_pair:.1e}, pairs {pairs}"
        ),
        tolerance=f"max|A − A*| < {A_TOL}, loss rel < {LOSS_RTOL}, grad rel < {GRAD_RTOL}",
        explanation=(
            f"Multi-task reduced model at {s!r}: sympy derivation vs closed form and vs the single-task L̃; "
            f"flow end states (t = {t_end:g}) from {len(res_sup)} random starts per H against the limit predictor."
        ),
        data={
            "setting": s.to_dict(),
            "grad_rel_err": grad_err,
            "a_err": {str(N + 1): a_err_sup, str(2 * N): a_err_pair},
            "loss_rel_err": {str(N + 1): loss_err_sup, str(2 * N): loss_err_pair},
            "superposed_fraction": superposed,
            "pairs": pairs,
            "roles": {str(N + 1): [list(e.roles) for e in end_sup], str(2 * N): [list(e.roles) for e in end_pair]},
        },
    )
