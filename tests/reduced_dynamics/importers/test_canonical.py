"""ImportedAttention: circuits from factors, the forward pass with and without the self term, package models.

The circuits and predictions are checked against per-head, per-prompt Python loops written from the
definitions (docs/theory.md#full-model), not against the vectorised code under test.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from reduced_dynamics.importers import CheckpointError, ImportedAttention
from reduced_dynamics.model.attention import AttentionModel


def _factors(H, r, d, n_out, seed):
    rng = np.random.default_rng(seed)
    D = d + n_out
    return (*rng.standard_normal((3, H, r, D)) / math.sqrt(D), rng.standard_normal((H, n_out, r)))


def _loop_predict(Q, K, V, O, attn_scale, Z, xq, self_term):
    """ŷ_k = Σ_h O_h[k]·V_h Σ_l p_hl z_l with p_h = softmax_l((K_h z_l)·(Q_h z_q)/attn_scale), one prompt at a time."""
    H, n_out = Q.shape[0], O.shape[1]
    n, L, D = Z.shape
    out = np.zeros((n, n_out))
    for i in range(n):
        zq = np.concatenate([xq[i], np.zeros(n_out)])
        toks = list(Z[i]) + ([zq] if self_term else [])
        for h in range(H):
            q = Q[h] @ zq
            s = [float((K[h] @ z) @ q) / attn_scale for z in toks]
            m = max(s)
            w = [math.exp(v - m) for v in s]
            tot = sum(w)
            ctx = sum(wi / tot * z for wi, z in zip(w, toks))
            out[i] += O[h] @ (V[h] @ ctx)
    return out


CASES = [  # (H, r, d, n_out, attn_scale)
    (1, 4, 3, 1, 2.0),
    (2, 4, 3, 1, 2.0),
    (2, 2, 3, 1, math.sqrt(2)),
    (3, 5, 3, 2, 1.0),
    (2, 6, 4, 2, math.sqrt(6)),
]


@pytest.mark.parametrize(("H", "r", "d", "n_out", "attn_scale"), CASES)
def test_circuits_from_factors_match_definition(H, r, d, n_out, attn_scale):
    """KQ_h[i, j] = Σ_a K_h[a, i] Q_h[a, j] / attn_scale and OV_h[k, j] = Σ_a O_h[k, a] V_h[a, j], entry by entry."""
    Q, K, V, O = _factors(H, r, d, n_out, seed=H + 10 * r)
    imp = ImportedAttention.from_factors(Q, K, V, O, d=d, attn_scale=attn_scale)
    D = d + n_out
    for h in range(H):
        for i in range(D):
            for j in range(D):
                kq = sum(K[h, a, i] * Q[h, a, j] for a in range(r)) / attn_scale
                assert imp.KQ[h, i, j] == pytest.approx(kq, rel=1e-13, abs=1e-15)
            for k in range(n_out):
                assert imp.OV[h, k, i] == pytest.approx(
                    sum(O[h, k, a] * V[h, a, i] for a in range(r)), rel=1e-13, abs=1e-15
                )
    assert imp.head_dim == r and imp.n_heads == H and imp.n_out == n_out


@pytest.mark.parametrize("self_term", [False, True])
@pytest.mark.parametrize(("H", "r", "d", "n_out", "attn_scale"), CASES)
def test_predict_matches_per_prompt_loop(H, r, d, n_out, attn_scale, self_term, tokens):
    """The vectorised forward pass (with or without the query's own term) equals the loop over prompts and heads."""
    Q, K, V, O = _factors(H, r, d, n_out, seed=7 * H + r)
    imp = ImportedAttention.from_factors(Q, K, V, O, d=d, attn_scale=attn_scale, query_attends_self=self_term)
    Z, xq = tokens(6, 9, d, n_out, seed=3)
    want = _loop_predict(Q, K, V, O, attn_scale, Z, xq, self_term)
    got = imp.predict(Z, xq)
    np.testing.assert_allclose(got, want[:, 0] if n_out == 1 else want, rtol=1e-12, atol=1e-13)


def test_self_term_changes_the_prediction(tokens):
    """Control for the test above: the self term is not a no-op (so the flag is read)."""
    Q, K, V, O = _factors(2, 4, 3, 1, seed=0)
    a = ImportedAttention.from_factors(Q, K, V, O, d=3, attn_scale=2.0)
    b = dataclasses.replace(a, query_attends_self=True)
    Z, xq = tokens(20, 9, 3, 1, seed=0)
    assert np.max(np.abs(a.predict(Z, xq) - b.predict(Z, xq))) > 1e-3


@pytest.mark.parametrize(
    ("r", "attn_scale", "n_out", "kept"),
    [(4, 2.0, 1, True), (4, 1.9, 1, False), (3, 2.0, 1, False), (5, math.sqrt(5), 2, False)],
)
def test_package_factors_kept_only_when_square_with_package_scale(r, attn_scale, n_out, kept):
    """``factors`` (the 'separate' parameters) are derived exactly when r = D, n_out = 1 and attn_scale = √D."""
    d = 4 - n_out if n_out == 1 else 3
    Q, K, V, O = _factors(2, r, d, n_out, seed=1)
    imp = ImportedAttention.from_factors(Q, K, V, O, d=d, attn_scale=attn_scale)
    assert (imp.factors is not None) is kept
    if kept:
        assert np.array_equal(imp.factors["o"], O[:, 0, :]) and np.array_equal(imp.factors["Q"], Q)


@pytest.mark.parametrize("parameterisation", ["separate", "merged"])
def test_from_package_predicts_bit_for_bit_as_the_package_model(parameterisation):
    """The wrapped AttentionModel's predictions are the package's own, bit for bit (and factors go both ways)."""
    from reduced_dynamics import Setting, sample_prompts

    m = AttentionModel(3, 4, parameterisation)
    p = m.init(seed=5)
    b = sample_prompts(50, Setting(d=4, L=15, sigma2=0.1), seed=6)
    imp = ImportedAttention.from_package(m, p)
    assert np.array_equal(imp.predict(b.tokens, b.x_q), m.predict(p, b))
    assert (imp.head_factors is not None) is (parameterisation == "separate")
    if parameterisation == "separate":
        g = ImportedAttention.from_factors(p["Q"], p["K"], p["V"], p["o"][:, None], d=4, attn_scale=math.sqrt(5))
        assert np.array_equal(g.KQ, imp.KQ) and np.array_equal(g.OV, imp.OV)


def test_from_package_multitask_predicts_bit_for_bit():
    """A MultitaskAttention wrapped (KQ padded with zero response columns) predicts as mt_attention_predict."""
    from reduced_dynamics import Setting
    from reduced_dynamics.multitask.attention import init_mt_attention, mt_attention_predict
    from reduced_dynamics.multitask.predictors import sample_mt_prompts

    s = Setting(d=4, L=12, sigma2=0.1, tasks=((0, 1), (2, 3)))
    model = init_mt_attention(3, s, init_scale=0.5, seed=0)
    pr = sample_mt_prompts(40, s, seed=1)
    imp = ImportedAttention.from_package(model)
    assert imp.n_out == 2 and imp.d == 4
    assert np.array_equal(imp.predict(pr.tokens, pr.xq), mt_attention_predict(model, pr, s))


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"head_factors": {"Q": np.zeros((2, 4, 4))}}, "head_factors"),
        (
            {"head_factors": {"Q": np.zeros((2, 4, 3)), "K": 0, "V": 0, "O": 0, "attn_scale": 1.0}},
            "`Q` must have shape",
        ),
    ],
)
def test_bad_head_factors_are_refused(fields, match, refused):
    """Malformed head factors: one-line CheckpointError."""
    refused(ImportedAttention, KQ=np.zeros((2, 4, 4)), OV=np.zeros((2, 1, 4)), d=3, match=match, **fields)


@pytest.mark.parametrize("scale", [0.0, -1.0, float("nan"), "x"])
def test_bad_attn_scale_is_refused(scale, refused):
    Q, K, V, O = _factors(1, 4, 3, 1, seed=0)
    refused(ImportedAttention.from_factors, Q, K, V, O, d=3, attn_scale=scale, match="attn_scale")


def test_nan_factors_are_refused(refused):
    Q, K, V, O = _factors(1, 4, 3, 1, seed=0)
    Q[0, 1, 2] = np.nan
    refused(ImportedAttention.from_factors, Q, K, V, O, d=3, attn_scale=2.0, match="`Q` has NaN")


def test_checkpoint_error_is_a_value_error():
    assert issubclass(CheckpointError, ValueError)
