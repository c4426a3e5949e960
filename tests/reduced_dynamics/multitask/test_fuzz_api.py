"""API fuzz suite (harness tests/api_fuzz.py) for ``reduced_dynamics.multitask``: attention, derive, flow,
loss, predictors, sigma_loss, sigma_derive (issue 23).

Every public callable is called from a small valid baseline with ONE argument replaced by a hostile value
(all magnitudes, NaN, inf, complex, wrong shapes and types, extreme valid settings, and the harness's
hostile objects: a non-``Prompts`` object, prompts of the wrong class or shape, settings of the other data
models). The contract: a finite result, or a ``ValueError`` / ``TypeError`` naming a parameter; no
``RuntimeWarning``, a few seconds at most, bounded memory. The sympy derivations are fuzzed on one-head
two-feature cases, cached after their first call.

``python tests/reduced_dynamics/multitask/test_fuzz_api.py`` prints the count of calls tried and of calls
that broke the contract, per callable.
"""

from __future__ import annotations

import functools
import importlib
import sys

import numpy as np

from reduced_dynamics.multitask import attention as at
from reduced_dynamics.multitask import derive as dv
from reduced_dynamics.multitask import flow as fl
from reduced_dynamics.multitask import loss as ls
from reduced_dynamics.multitask import predictors as pr
from reduced_dynamics.multitask import sigma_derive as sd
from reduced_dynamics.multitask import sigma_loss as sl
from reduced_dynamics.setting import Setting

api_fuzz = importlib.import_module("api_fuzz")  # registered by tests/conftest.py
E = api_fuzz.E

#: two tasks on two features (nested supports), and the same with a Σ
T = Setting(d=2, L=6, sigma2=0.1, tasks=((0,), (0, 1)))
SIG = np.array([[2.0, 0.3], [0.3, 0.5]])
TS = Setting(d=2, L=6, sigma2=0.1, tasks=((0,), (0, 1)), Sigma=SIG)
OM = np.array([[0.2, -0.1], [-0.2, 0.1]])  # (H, d)
MU = np.array([[0.5, 0.4], [-0.5, -0.4]])  # (H, N)
BB = np.stack([np.eye(2) * 0.2, -np.eye(2) * 0.2])  # (H, d, d)
A = np.array([[0.3, 0.0], [0.2, 0.2]])  # (N, d)
PR = pr.sample_mt_prompts(4, T, seed=0)
#: the flows of the fuzz get a budget of 2000 gradient evaluations (a valid t_end = 1e12 then ends, status -2, in
#: well under a second instead of ~20 s with the default budget); the contract is the same
FUZZ_BUDGET = 2000
MODEL = at.init_mt_attention(2, T, init_scale=0.1, seed=0)


#: the generated (lambdified) one-head functions, made once, when their entries first run (not when the module is
#: collected: two sympy derivations, ~2.5 s in every pytest process): their entries fuzz the arguments of the callables
@functools.cache
def gen_mt():
    return dv.generated_mt_functions(1, T)


@functools.cache
def gen_smt():
    return sd.generated_sigma_mt_functions(1, TS)


#: the symbolic derivations are fuzzed in `setting` (and `C`), not in `H`: every valid H (1..8) is a
#: derivation of seconds to minutes; the checks of H are those of check_positive_int (tests of _validation)
NOT_H = ("setting",)


def _predict(KQ, OV, prompts):
    return at.mt_attention_predict(at.MultitaskAttention(KQ=KQ, OV=OV), prompts, T)


ENTRIES = [
    # loss.py
    E("support_mask", ls.support_mask, 1, setting=T),
    E("check_state", ls.check_state, 3, omega=OM, mu=MU, setting=T),
    E("effective_weights", ls.effective_weights, 3, omega=OM, mu=MU, setting=T),
    E("mt_loss", ls.mt_loss, 3, omega=OM, mu=MU, setting=T),
    E("mt_loss_per_task", ls.mt_loss_per_task, 3, omega=OM, mu=MU, setting=T),
    E("mt_gradient", ls.mt_gradient, 3, omega=OM, mu=MU, setting=T),
    E("limit_loss_per_task", ls.limit_loss_per_task, 2, A=A, setting=T),
    # flow.py
    E("classify_heads", fl.classify_heads, 3, omega=OM, mu=MU, setting=T, rel_tol=0.1),
    E("role_kind", fl.role_kind, 1, label="T1+T2-"),
    E("pattern_of", fl.pattern_of, 1, roles=("T1+", "dummy")),
    E("antipodal_pairs", fl.antipodal_pairs, 2, omega=OM, mu=MU, rel_tol=0.05),
    E(
        "role_frequencies",
        fl.role_frequencies,
        2,
        n_heads=2,
        setting=T,
        n_seeds=1,
        seed=0,
        t_end=5.0,
        scale=0.01,
        budget=FUZZ_BUDGET,
    ),
    # predictors.py
    E("sample_mt_prompts", pr.sample_mt_prompts, 2, n_prompts=4, setting=T, seed=0),
    E("reduced_mt_predict", pr.reduced_mt_predict, 4, prompts=PR, omega=OM, mu=MU, setting=T),
    E("weighted_dgd_predict", pr.weighted_dgd_predict, 2, prompts=PR, A=A),
    E("support_dgd_weights", pr.support_dgd_weights, 1, setting=T, eta=None),
    E("support_ridge_predict", pr.support_ridge_predict, 2, prompts=PR, setting=T),
    E("limit_predictor", pr.limit_predictor, 2, n_heads=3, setting=T),
    E("limit_predictor_H2", pr.limit_predictor, 2, fuzz=("setting",), n_heads=2, setting=T),
    E(
        "per_task_risks",
        pr.per_task_risks,
        2,
        predictors={"dgd": lambda p: pr.weighted_dgd_predict(p, A)},
        setting=T,
        n_prompts=20,
        seed=0,
        chunk=8,
        keep_losses=False,
    ),
    E(
        "TaskRisks.difference",
        lambda first, second, task: pr.per_task_risks(
            {"a": lambda p: p.yq * 0, "b": lambda p: p.yq * 0.5}, T, n_prompts=10, seed=0, keep_losses=True
        ).difference(first, second, task),
        3,
        first="a",
        second="b",
        task=0,
    ),
    # attention.py
    E("init_mt_attention", at.init_mt_attention, 2, n_heads=2, setting=T, init_scale=0.1, seed=0),
    E(
        "init_mt_params",
        at.init_mt_params,
        2,
        n_heads=2,
        setting=T,
        parameterisation="separate",
        init_scale=None,
        seed=0,
    ),
    E("mt_attention_predict", at.mt_attention_predict, 3, model=MODEL, prompts=PR, setting=T),
    E("mt_attention_predict_arrays", _predict, 3, KQ=MODEL.KQ, OV=MODEL.OV, prompts=PR),
    E("mt_attention_loss_grad", at.mt_attention_loss_grad, 3, model=MODEL, prompts=PR, setting=T),
    E("extract_reduced", at.extract_reduced, 2, model=MODEL, setting=T),
    E(
        "train_mt_attention",
        at.train_mt_attention,
        2,
        n_heads=2,
        setting=T,
        steps=3,
        seed=0,
        batch=4,
        lr=1e-3,
        parameterisation="circuit",
        init_scale=None,
        checkpoint=None,
        checkpoint_every=10,
        callback=None,
    ),
    # sigma_loss.py (Σ with tasks)
    E("task_constants", sl.task_constants, 1, setting=TS),
    E("check_sigma_mt_state", sl.check_sigma_mt_state, 3, B=BB, mu=MU, setting=TS),
    E("sigma_mt_effective", sl.sigma_mt_effective, 3, B=BB, mu=MU, setting=TS),
    E("sigma_mt_loss_per_task", sl.sigma_mt_loss_per_task, 3, B=BB, mu=MU, setting=TS),
    E("sigma_mt_loss", sl.sigma_mt_loss, 3, B=BB, mu=MU, setting=TS),
    E("sigma_mt_gradient", sl.sigma_mt_gradient, 3, B=BB, mu=MU, setting=TS),
    E("sigma_mt_hessian", sl.sigma_mt_hessian, 3, B=BB, mu=MU, setting=TS),
    E(
        "sigma_mt_limit_loss_per_task",
        sl.sigma_mt_limit_loss_per_task,
        2,
        A=np.stack([np.eye(2) * 0.3] * 2),
        setting=TS,
    ),
    E("sigma_mt_limit", sl.sigma_mt_limit, 1, setting=TS),
    E("sigma_mt_dpgd_risk", sl.sigma_mt_dpgd_risk, 2, A=np.stack([np.eye(2) * 0.3] * 2), setting=TS),
    E("sigma_mt_risk_expansion", sl.sigma_mt_risk_expansion, 3, B=BB, mu=MU, setting=TS),
    # derive.py and sigma_derive.py (sympy; H = 1, two features: cached after the first call)
    E("mt_symbols", dv.mt_symbols, 2, H=1, setting=T),
    E("derive_mt_loss", dv.derive_mt_loss, 2, fuzz=NOT_H, H=1, setting=T),
    E("closed_form_mt_loss", dv.closed_form_mt_loss, 2, H=1, setting=T),
    E("mt_loss_gradient", dv.mt_loss_gradient, 2, fuzz=NOT_H, H=1, setting=T),
    E("reduction_to_single_task", dv.reduction_to_single_task, 2, H=1, n_features=2),
    E("generated_mt_functions", dv.generated_mt_functions, 2, fuzz=NOT_H, H=1, setting=T),
    E(
        "GeneratedMultitask.loss",
        lambda omega, mu: gen_mt().loss(omega, mu),
        2,
        omega=[[0.2, -0.1]],
        mu=[[0.5, 0.4]],
    ),
    E("rational_cholesky", sd.rational_cholesky, 1, C=[[2, 0], [0, 1]]),
    E("sigma_mt_symbols", sd.sigma_mt_symbols, 2, H=1, setting=TS, C=None),
    E("derive_sigma_mt_loss", sd.derive_sigma_mt_loss, 2, fuzz=("setting", "C"), H=1, setting=TS, C=None),
    E("closed_form_sigma_mt_loss", sd.closed_form_sigma_mt_loss, 2, H=1, setting=TS, C=None),
    E("sigma_mt_loss_gradient", sd.sigma_mt_loss_gradient, 2, fuzz=("setting", "C"), H=1, setting=TS, C=None),
    E("difference_to_closed_form", sd.difference_to_closed_form, 2, fuzz=("setting", "C"), H=1, setting=TS, C=None),
    E("reduction_to_multitask", sd.reduction_to_multitask, 2, fuzz=NOT_H, H=1, setting=T),
    E("reduction_to_isotropic", sd.reduction_to_isotropic, 2, H=1, n_features=2),
    E("closed_form_limit_minimiser", sd.closed_form_limit_minimiser, 1, setting=TS, C=None),
    E(
        "generated_sigma_mt_functions",
        sd.generated_sigma_mt_functions,
        2,
        fuzz=("setting", "hessian"),
        H=1,
        setting=TS,
        hessian=False,
    ),
    E(
        "GeneratedSigmaTasks.loss",
        lambda B, mu, Sigma: gen_smt().loss(B, mu, Sigma),
        3,
        B=[np.eye(2) * 0.2],
        mu=[[0.5, 0.4]],
        Sigma=SIG,
    ),
]

test_api_fuzz, test_api_hostile_values = api_fuzz.make_suite(ENTRIES, extra=api_fuzz.hostile_objects(), overflow=True)


if __name__ == "__main__":  # pragma: no cover - the measurement of the report
    sys.exit(api_fuzz.count(ENTRIES, extra=api_fuzz.hostile_objects(), overflow=True))
