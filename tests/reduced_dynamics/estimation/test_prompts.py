"""The Prompts container: constructors, views, validation, samplers (no copies, shared covariates)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from reduced_dynamics.estimation.predictors import DebiasedGD, MultiHead
from reduced_dynamics.estimation.prompts import Prompts, sample_prompts, sample_tokens
from reduced_dynamics.setting import Setting

S = Setting(d=3, L=5, sigma2=0.2)


def raw(n=4, L=5, d=3, seed=0):
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((n, L, d)),
        rng.standard_normal((n, L)),
        rng.standard_normal((n, d)),
        rng.standard_normal(n),
    )


def test_from_arrays_views_equal_the_inputs_and_are_read_only():
    X, y, xq, yq = raw()
    p = Prompts.from_arrays(X, y, xq, yq)
    assert (p.n, p.L, p.d, p.has_covariates, p.has_responses) == (4, 5, 3, True, True)
    for view, want in ((p.X, X), (p.y, y), (p.x_q, xq), (p.y_q, yq)):
        assert np.array_equal(view, want) and not view.flags.writeable
    assert np.array_equal(p.tokens, np.concatenate([X, y[..., None]], axis=-1))
    # scores and |x_q|² by plain loops
    assert np.allclose(p.scores, [[X[i, l] @ xq[i] for l in range(5)] for i in range(4)], rtol=1e-14, atol=1e-14)
    assert np.allclose(p.xq_norm2, [xq[i] @ xq[i] for i in range(4)], rtol=1e-14)
    X[0, 0, 0] = 99.0  # the batch owns a copy
    assert p.X[0, 0, 0] != 99.0
    with pytest.raises(AttributeError):
        p.n = 3


def test_from_arrays_accepts_one_prompt_without_the_batch_axis():
    X, y, xq, yq = raw(n=1)
    one = Prompts.from_arrays(X[0], y[0], xq[0], yq[0])
    batch = Prompts.from_arrays(X, y, xq, yq)
    assert one.n == 1
    for v in ("X", "y", "x_q", "y_q", "tokens", "scores"):
        assert np.array_equal(getattr(one, v), getattr(batch, v))


@pytest.mark.parametrize(
    "args, param",
    [
        ((np.zeros((2, 3)), np.zeros(3), np.zeros(3)), "y"),  # one prompt (L=2, d=3), y of length 3
        ((np.zeros((2, 5, 3)), np.zeros((2, 4)), np.zeros((2, 3))), "y"),
        ((np.zeros((2, 5, 3)), np.zeros((2, 5)), np.zeros((2, 4))), "x_q"),
        ((np.zeros((2, 5, 3)), np.zeros((2, 5)), np.zeros((2, 3)), np.zeros(3)), "y_q"),
        ((np.zeros(5), np.zeros(5), np.zeros(1)), "X"),
        ((np.zeros((2, 0, 3)), np.zeros((2, 0)), np.zeros((2, 3))), "X"),
        ((np.full((2, 5, 3), np.nan), np.zeros((2, 5)), np.zeros((2, 3))), "X"),
        (("abc", np.zeros((2, 5)), np.zeros((2, 3))), "X"),
    ],
)
def test_from_arrays_bad_shapes_name_the_array(args, param):
    with pytest.raises(ValueError, match=f"`{param}`"):
        Prompts.from_arrays(*args)


def test_from_arrays_checks_setting_and_beta():
    X, y, xq, yq = raw()
    with pytest.raises(ValueError, match="`setting`"):
        Prompts.from_arrays(X, y, xq, yq, setting=Setting(d=4, L=5, sigma2=0.1))
    with pytest.raises(ValueError, match="`beta`"):
        Prompts.from_arrays(X, y, xq, yq, beta=np.zeros((4, 2)))
    assert Prompts.from_arrays(X, y, xq, setting=S).setting is S


def test_stats_only_batch_has_scores_but_no_covariates():
    st = Prompts.from_stats(np.ones((2, 5)), np.array([1.0, 2.0]), y=np.zeros((2, 5)), setting=S)
    assert not st.has_covariates and st.d == 3 and st.n == 2 and st.L == 5
    for view in ("X", "x_q", "tokens", "y_q"):
        with pytest.raises(ValueError, match="`prompts`"):
            getattr(st, view)
    with pytest.raises(ValueError, match="`xq_norm2`"):
        Prompts.from_stats(np.ones((2, 5)), np.array([1.0, 0.0]))
    with pytest.raises(ValueError, match="`scores`"):
        Prompts.from_stats(np.ones(5), np.array([1.0]))
    with pytest.raises(ValueError, match="`prompts`"):
        _ = Prompts.from_stats(np.ones((2, 5)), np.ones(2)).d


def test_to_stats_keeps_the_statistics():
    p = sample_prompts(6, S, seed=1)
    st = p.to_stats()
    assert not st.has_covariates
    for v in ("scores", "xq_norm2", "y", "y_q"):
        assert np.array_equal(getattr(st, v), getattr(p, v))


def test_training_sampler_stores_one_embedded_array_and_views():
    p = sample_tokens(8, S, seed=0)
    assert p.tokens.shape == (8, 5, 4)
    assert np.shares_memory(p.X, p.tokens) and np.shares_memory(p.y, p.tokens)
    # y_l = βᵀx_l + ε_l: with σ² = 0 exactly βᵀx_l, and y_q = βᵀx_q
    q = sample_tokens(8, S.replace(sigma2=0.0), seed=0)
    assert np.allclose(q.y, np.einsum("nld,nd->nl", q.X, q.beta), rtol=1e-13, atol=1e-13)
    assert np.allclose(q.y_q, np.einsum("nd,nd->n", q.x_q, q.beta), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("stats_only", [False, True])
def test_covariates_only_draws_the_same_covariates(stats_only):
    a = sample_prompts(5, S, seed=3, stats_only=stats_only)
    b = sample_prompts(5, S, seed=3, stats_only=stats_only, covariates_only=True)
    assert not b.has_responses
    assert np.array_equal(a.scores, b.scores) and np.array_equal(a.xq_norm2, b.xq_norm2)
    with pytest.raises(ValueError, match="`prompts`"):
        _ = b.y


def test_full_sampler_with_zero_noise_is_exactly_linear():
    p = sample_prompts(4, Setting(d=3, L=5, sigma2=0.0, Sigma=np.diag([2.0, 1.0, 0.5])), seed=2)
    assert np.allclose(p.y, np.einsum("nld,nd->nl", p.X, p.beta), rtol=1e-13, atol=1e-13)
    assert p.setting.Sigma is not None


def test_same_seed_same_prompts():
    a, b = sample_prompts(3, S, seed=7), sample_prompts(3, S, seed=np.random.default_rng(7))
    assert np.array_equal(a.X, b.X) and np.array_equal(a.y_q, b.y_q)


@given(n=st.integers(1, 4), L=st.integers(1, 6), d=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_full_and_statistics_only_forms_give_the_same_score_predictions(n, L, d, seed):
    """For any shapes: the from_arrays batch and its statistics-only form predict alike (debiased GD, two heads)."""
    X, y, xq, yq = raw(n=n, L=L, d=d, seed=seed)
    p = Prompts.from_arrays(X, y, xq, yq)
    st_ = p.to_stats()
    for pred in (DebiasedGD(0.7), MultiHead([0.3, -0.5], [1.2, -0.4])):
        assert np.array_equal(pred(p), pred(st_))
    ref = [0.7 / L * sum(y[i, l] * (X[i, l] - X[i].mean(axis=0)) @ xq[i] for l in range(L)) for i in range(n)]
    assert np.allclose(DebiasedGD(0.7)(p), ref, rtol=1e-12, atol=1e-12)


def test_pickle_round_trip_keeps_the_views():
    p = sample_prompts(3, S, seed=0)
    q = pickle.loads(pickle.dumps(p))
    assert np.array_equal(q.X, p.X) and np.array_equal(q.y_q, p.y_q) and q.setting == S
    assert not q.X.flags.writeable
