"""One set of raw arrays, through ``Prompts.from_arrays``, into every consumer of prompts.

The arrays are drawn here with a seeded numpy Generator (not with the package's
samplers). Every predictor, the reduced model (``ReducedModel`` and the
``MultiHead`` predictor) and the attention models set to the reduced pattern
(``KQ_h = ω_h I_d`` in the top-left block, OV reading ``μ_h`` off the response)
are compared with per-prompt formulas written out below with plain loops.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from reduced_dynamics.estimation.predictors import (
    BayesRidge,
    DebiasedGD,
    LinearAttention,
    MultiHead,
    SingleHead,
    VanillaGD,
    Zero,
    conditional_loss,
)
from reduced_dynamics.estimation.prompts import Prompts
from reduced_dynamics.model.attention import AttentionModel, ReducedModel
from reduced_dynamics.setting import Setting

N, L, D, SIGMA2 = 6, 7, 3, 0.3
TOL = 1e-12  # relative to max(1, max |reference|)

_rng = np.random.default_rng(20250)
X = _rng.standard_normal((N, L, D))
BETA = _rng.standard_normal((N, D)) / math.sqrt(D)
Y = np.einsum("nld,nd->nl", X, BETA) + math.sqrt(SIGMA2) * _rng.standard_normal((N, L))
XQ = _rng.standard_normal((N, D))
YQ = np.einsum("nd,nd->n", XQ, BETA) + math.sqrt(SIGMA2) * _rng.standard_normal(N)

OMEGA = np.array([0.7, -0.4, 0.15])
MU = np.array([1.3, -0.8, 2.1])
ETA = 0.85


@pytest.fixture(scope="module")
def prompts():
    return Prompts.from_arrays(X, Y, XQ, YQ, setting=Setting(d=D, L=L, sigma2=SIGMA2))


def close(got, ref):
    got, ref = np.asarray(got, dtype=float), np.asarray(ref, dtype=float)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    err = np.max(np.abs(got - ref)) / max(1.0, np.max(np.abs(ref)))
    assert err < TOL, err


# ----------------------------------------------------- per-prompt references (plain loops)


def ref_softmax_heads(omega, mu):
    out = np.zeros(N)
    for i in range(N):
        for o, m in zip(omega, mu):
            a = [o * float(X[i, l] @ XQ[i]) for l in range(L)]
            top = max(a)
            e = [math.exp(v - top) for v in a]
            tot = sum(e)
            out[i] += m * sum(e[l] / tot * Y[i, l] for l in range(L))
    return out


def ref_gd(eta):
    return np.array([eta / L * sum(Y[i, l] * float(X[i, l] @ XQ[i]) for l in range(L)) for i in range(N)])


def ref_debiased_gd(eta):
    out = np.zeros(N)
    for i in range(N):
        xbar = X[i].sum(axis=0) / L
        out[i] = eta / L * sum(Y[i, l] * float((X[i, l] - xbar) @ XQ[i]) for l in range(L))
    return out


def ref_ridge(lam):
    out = np.zeros(N)
    for i in range(N):
        A = X[i].T @ X[i] + lam * np.eye(D)
        out[i] = XQ[i] @ np.linalg.solve(A, X[i].T @ Y[i])
    return out


def ref_linear_attention(omega, mu):
    out = np.zeros(N)
    for i in range(N):
        for o, m in zip(omega, mu):
            out[i] += m / L * sum(Y[i, l] * o * float(X[i, l] @ XQ[i]) for l in range(L))
    return out


def ref_conditional_loss(w):
    """E[(y_q − wᵀy)² | X, x_q] = |x_q − Xᵀw|²/d + σ²(1 + |w|²), per prompt."""
    out = np.zeros(N)
    for i in range(N):
        r = XQ[i] - sum(w[i, l] * X[i, l] for l in range(L))
        out[i] = float(r @ r) / D + SIGMA2 * (1 + float(w[i] @ w[i]))
    return out


# ------------------------------------------------------------------------ checks


def test_views_are_the_raw_arrays(prompts):
    for view, raw in ((prompts.X, X), (prompts.y, Y), (prompts.x_q, XQ), (prompts.y_q, YQ)):
        assert np.array_equal(view, raw)
    close(prompts.scores, [[X[i, l] @ XQ[i] for l in range(L)] for i in range(N)])
    for i in range(N):
        for l in range(L):
            assert np.array_equal(prompts.tokens[i, l], np.append(X[i, l], Y[i, l]))


PREDICTORS = {
    "multi_head": (lambda: MultiHead(OMEGA, MU), lambda: ref_softmax_heads(OMEGA, MU)),
    "single_head": (lambda: SingleHead(0.6, 1.7), lambda: ref_softmax_heads([0.6], [1.7])),
    "vanilla_gd": (lambda: VanillaGD(ETA), lambda: ref_gd(ETA)),
    "debiased_gd": (lambda: DebiasedGD(ETA), lambda: ref_debiased_gd(ETA)),
    "linear_attention": (lambda: LinearAttention(OMEGA, MU), lambda: ref_linear_attention(OMEGA, MU)),
    "bayes_ridge(setting)": (lambda: BayesRidge(Setting(d=D, L=L, sigma2=SIGMA2)), lambda: ref_ridge(SIGMA2 * D)),
    "bayes_ridge(batch setting)": (lambda: BayesRidge(), lambda: ref_ridge(SIGMA2 * D)),
    "ridge(lam=2.5)": (lambda: BayesRidge(2.5), lambda: ref_ridge(2.5)),
    "zero": (lambda: Zero(), lambda: np.zeros(N)),
}


@pytest.mark.parametrize("name", sorted(PREDICTORS))
def test_every_predictor_matches_its_per_prompt_formula(prompts, name):
    make, ref = PREDICTORS[name]
    pred = make()
    want = ref()
    close(pred(prompts), want)
    # the smoother-weights route gives the same predictions, and the conditional loss its formula
    w = pred.weights(prompts)
    close([w[i] @ Y[i] for i in range(N)], want)
    close(conditional_loss(prompts, w), ref_conditional_loss(w))


def test_score_predictors_agree_on_the_statistics_only_form(prompts):
    """The same predictions from the scores alone (Prompts.from_stats of s_l = x_lᵀx_q, |x_q|², y)."""
    s = [[float(X[i, l] @ XQ[i]) for l in range(L)] for i in range(N)]
    r2 = [float(XQ[i] @ XQ[i]) for i in range(N)]
    st = Prompts.from_stats(s, r2, Y, YQ, setting=Setting(d=D, L=L, sigma2=SIGMA2))
    for name in ("multi_head", "single_head", "vanilla_gd", "debiased_gd", "linear_attention", "zero"):
        make, ref = PREDICTORS[name]
        close(make()(st), ref())


def test_reduced_model_matches_softmax_formula(prompts):
    model = ReducedModel(len(OMEGA), D)
    params = {"omega": OMEGA.copy(), "mu": MU.copy()}
    want = ref_softmax_heads(OMEGA, MU)
    close(model.predict(params, prompts), want)
    assert abs(model.loss(params, prompts) - np.mean((want - YQ) ** 2)) < TOL


def reduced_pattern(kind):
    """Attention parameters with KQ_h = ω_h I_d (top-left block, zero elsewhere) and OV_h = μ_h on the response."""
    H, Dm = len(OMEGA), D + 1
    if kind == "merged":
        KQ = np.zeros((H, Dm, Dm))
        ov = np.zeros((H, Dm))
        for h in range(H):
            KQ[h, :D, :D] = OMEGA[h] * np.eye(D)
            ov[h, D] = MU[h]
        return {"KQ": KQ, "ov": ov}
    # separate: K_h = I, Q_h = √D ω_h diag(I_d, 0) so K_hᵀQ_h/√D = ω_h diag(I_d, 0); V_h = I, o_h = μ_h e_D
    Q = np.zeros((H, Dm, Dm))
    for h in range(H):
        Q[h, :D, :D] = math.sqrt(Dm) * OMEGA[h] * np.eye(D)
    K = np.broadcast_to(np.eye(Dm), (H, Dm, Dm)).copy()
    V = K.copy()
    o = np.zeros((H, Dm))
    o[:, D] = MU
    return {"Q": Q, "K": K, "V": V, "o": o}


@pytest.mark.parametrize("kind", ["merged", "separate"])
def test_softmax_attention_at_the_reduced_pattern_is_the_reduced_model(prompts, kind):
    model = AttentionModel(len(OMEGA), D, parameterisation=kind)
    params = reduced_pattern(kind)
    want = ref_softmax_heads(OMEGA, MU)
    close(model.predict(params, prompts), want)
    close(MultiHead(OMEGA, MU)(prompts), want)
    assert abs(model.loss(params, prompts) - np.mean((want - YQ) ** 2)) < TOL


def test_linear_attention_model_at_the_reduced_pattern_is_the_linear_attention_predictor(prompts):
    model = AttentionModel(len(OMEGA), D, parameterisation="separate", attention="linear")
    want = ref_linear_attention(OMEGA, MU)
    close(model.predict(reduced_pattern("separate"), prompts), want)
    close(LinearAttention(OMEGA, MU)(prompts), want)
