"""Attention models: gradients vs central finite differences, forward vs naive loops."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from reduced_dynamics.activations import Activation
from reduced_dynamics.estimation.prompts import Prompts, sample_prompts, sample_tokens
from reduced_dynamics.model.attention import (
    MODEL_KINDS,
    AttentionModel,
    ReducedModel,
    flatten_params,
    make_model,
    unflatten_params,
)
from reduced_dynamics.setting import Setting


def setting(d, L, sigma2):
    return Setting(d=d, L=L, sigma2=sigma2)


FD_H = 1e-6
FD_RTOL, FD_ATOL = 1e-6, 1e-8  # central differences in float64: error O(h²) + O(eps/h) ~ 1e-10


def _fd_grad(model, params, batch):
    """Central finite differences of ``model.loss`` w.r.t. every entry of ``params``."""
    out = {}
    for k in params:
        g = np.zeros_like(params[k])
        for idx in np.ndindex(params[k].shape):
            q = {kk: v.copy() for kk, v in params.items()}
            q[k][idx] += FD_H
            lp = model.loss(q, batch)
            q[k][idx] -= 2 * FD_H
            lm = model.loss(q, batch)
            g[idx] = (lp - lm) / (2 * FD_H)
        out[k] = g
    return out


@pytest.mark.parametrize("kind", MODEL_KINDS)
@pytest.mark.parametrize("n_heads", [1, 2, 3])
def test_gradient_matches_finite_differences(kind, n_heads):
    """Hand-written backprop equals central finite differences within FD_RTOL·|g| + FD_ATOL."""
    model = make_model(kind, n_heads=n_heads, d=3, init_scale=0.7)
    params = model.init(seed=10 + n_heads)
    batch = sample_tokens(6, setting(3, 5, 0.1), seed=n_heads)
    _, grad = model.loss_and_grad(params, batch)
    fd = _fd_grad(model, params, batch)
    for k in params:
        err = np.abs(grad[k] - fd[k]) / (FD_ATOL + FD_RTOL * np.abs(fd[k]))
        assert err.max() < 1.0, (k, err.max())


def _naive_predict(KQ, ov, tok, *, linear=False):
    """Per-sample, per-head loops straight from docs/theory.md#full-model (independent of the vectorised code)."""
    n, L, D = tok.tokens.shape
    out = np.zeros(n)
    for i in range(n):
        zq = np.append(tok.x_q[i], 0.0)
        for h in range(KQ.shape[0]):
            s = np.array([tok.tokens[i, l] @ KQ[h] @ zq for l in range(L)])
            if linear:
                p = s / L
            else:
                p = np.exp(s - s.max())
                p /= p.sum()
            out[i] += ov[h] @ sum(p[l] * tok.tokens[i, l] for l in range(L))
    return out


@pytest.mark.parametrize("kind", ["separate", "merged", "linear"])
def test_forward_matches_naive_loops(kind):
    model = make_model(kind, n_heads=3, d=4)
    params = model.init(seed=3)
    tok = sample_tokens(5, setting(4, 7, 0.2), seed=4)
    if kind == "merged":
        KQ, ov = params["KQ"], params["ov"]
    else:
        D = 5
        KQ = np.stack([params["K"][h].T @ params["Q"][h] / math.sqrt(D) for h in range(3)])
        ov = np.stack([params["o"][h] @ params["V"][h] for h in range(3)])
    ref = _naive_predict(KQ, ov, tok, linear=kind == "linear")
    np.testing.assert_allclose(model.predict(params, tok), ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("scale", [0.5, 30.0, 400.0])
def test_forward_matches_naive_loops_at_any_score_scale(scale):
    """Scores from O(1) to beyond the no-max-shift window (|s| < 300) and past exp's float64 range: naive loops."""
    model = make_model("merged", n_heads=2, d=3)
    p = model.init(seed=5)
    p = {"KQ": p["KQ"] * (scale / np.abs(p["KQ"]).max()), "ov": p["ov"]}
    tok = sample_tokens(6, setting(3, 8, 0.1), seed=6)
    ref = _naive_predict(p["KQ"], p["ov"], tok)
    np.testing.assert_allclose(model.predict(p, tok), ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", ["separate", "merged"])
def test_skipping_the_row_max_changes_nothing_but_rounding(kind, monkeypatch):
    """Moderate scores take the exp-without-row-max path; forcing the max-shifted path gives the same loss/grads."""
    import reduced_dynamics.model.attention as att

    model = make_model(kind, n_heads=2, d=4, init_scale=0.7)
    p = model.init(seed=2)
    tok = sample_tokens(32, setting(4, 20, 0.1), seed=3)
    la, ga = model.loss_and_grad(p, tok)
    monkeypatch.setattr(att, "_EXP_SAFE", 0.0)  # every score now fails the window test
    lb, gb = model.loss_and_grad(p, tok)
    assert la == pytest.approx(lb, rel=1e-13)
    for k in ga:
        np.testing.assert_allclose(ga[k], gb[k], rtol=1e-11, atol=1e-14 * np.abs(gb[k]).max())


def test_separate_and_merged_agree_at_init():
    """Merged init is the merge of the separate init with the same seed, so the functions agree."""
    sep, mer = make_model("separate", n_heads=2, d=5), make_model("merged", n_heads=2, d=5)
    tok = sample_tokens(16, setting(5, 40, 0.1), seed=0)
    np.testing.assert_allclose(
        sep.predict(sep.init(seed=7), tok), mer.predict(mer.init(seed=7), tok), rtol=1e-12, atol=1e-13
    )


@given(
    omega=st.lists(st.floats(-2, 2), min_size=1, max_size=4),
    seed=st.integers(0, 2**16),
)
def test_reduced_model_equals_merged_model_on_reduced_circuits(omega, seed):
    """ReducedModel(ω, μ) ≡ merged model with KQ_h = diag(ω_h I_d, 0), ov_h = μ_h e_D (two code paths)."""
    H = len(omega)
    rng = np.random.default_rng(seed)
    p = {"omega": np.array(omega), "mu": rng.standard_normal(H)}
    red = ReducedModel(H, 3)
    KQ, ov = red.circuits(p)
    mer = AttentionModel(H, 3, "merged")
    tok = sample_tokens(4, setting(3, 9, 0.1), seed=rng)
    np.testing.assert_allclose(red.predict(p, tok), mer.predict({"KQ": KQ, "ov": ov}, tok), rtol=1e-11, atol=1e-12)


def test_every_route_to_a_batch_gives_the_same_prediction():
    """Full sampler, training sampler and from_arrays: the models read the same `tokens`, `x_q`."""
    pr = sample_prompts(5, setting(3, 8, 0.1), seed=1)
    tok = sample_tokens(5, setting(3, 8, 0.1), seed=1)
    m = make_model("separate", n_heads=2, d=3)
    p = m.init(seed=0)
    for batch in (pr, tok):
        again = Prompts.from_arrays(batch.X, batch.y, batch.x_q, batch.y_q)
        assert again.tokens.shape == (5, 8, 4)
        np.testing.assert_array_equal(m.predict(p, batch), m.predict(p, again))
        assert m.loss(p, batch) == m.loss(p, again)


@pytest.mark.parametrize("kind", MODEL_KINDS)
def test_models_refuse_statistics_only_batches(kind):
    m = make_model(kind, n_heads=2, d=3)
    st = sample_prompts(4, setting(3, 6, 0.1), seed=0, stats_only=True)
    with pytest.raises(ValueError, match="`batch`"):
        m.predict(m.init(seed=0), st)


def test_softmax_is_stable_for_huge_scores():
    m = make_model("merged", n_heads=1, d=2)
    p = {"KQ": np.full((1, 3, 3), 1e4), "ov": np.ones((1, 3))}
    loss, g = m.loss_and_grad(p, sample_tokens(4, setting(2, 6, 0.1), seed=0))
    assert np.isfinite(loss) and all(np.all(np.isfinite(v)) for v in g.values())


TOKEN_MOMENTS = {
    # name: (per-prompt statistic of an embedded batch (prompts.tokens) with d = 4, exact mean); y = βᵀx + ε, β ~ N(0, I/d)
    "y_l^2": (lambda t: (t.tokens[..., 4] ** 2).mean(axis=1), lambda s2: 1 + s2),
    "yq^2": (lambda t: t.y_q**2, lambda s2: 1 + s2),
    # E[y_1 y_2 x_1ᵀx_2] = E|β|² = 1: the same β in every context pair
    "y_1 y_2 x_1.x_2": (
        lambda t: t.tokens[:, 0, 4] * t.tokens[:, 1, 4] * np.einsum("nd,nd->n", t.tokens[:, 0, :4], t.tokens[:, 1, :4]),
        lambda s2: 1.0,
    ),
    # E[y_1 y_q x_1ᵀx_q] = 1: the same β in the context and the query
    "y_1 yq x_1.xq": (
        lambda t: t.tokens[:, 0, 4] * t.y_q * np.einsum("nd,nd->n", t.tokens[:, 0, :4], t.x_q),
        lambda s2: 1.0,
    ),
    "y_1 y_2": (lambda t: t.tokens[:, 0, 4] * t.tokens[:, 1, 4], lambda s2: 0.0),
    "y_l x_l1": (lambda t: (t.tokens[..., 4] * t.tokens[..., 0]).mean(axis=1), lambda s2: 0.0),
}


@pytest.mark.parametrize("name", sorted(TOKEN_MOMENTS))
def test_sample_tokens_moments(name):
    """Moments of sample_tokens vs their exact values, within 4 empirical standard errors (one family, one seed)."""
    s2 = 0.3
    tok = sample_tokens(20_000, setting(4, 10, s2), seed=0)
    f, exact = TOKEN_MOMENTS[name]
    v = f(tok)  # one value per prompt: independent across prompts
    se = v.std(ddof=1) / math.sqrt(v.size)
    assert abs(v.mean() - exact(s2)) < 4 * se, (v.mean(), exact(s2), se)


def test_init_is_pytorch_default_uniform():
    """Every separate weight ~ U(−b, b), b = 1/√D: inside [−b, b], mean 0 and variance b²/3 within 4 SE.

    SE of the sample variance of a uniform: (b²/3)·√(0.8/n) (fourth moment b⁴/5).
    """
    H, d = 40, 5
    b = 1 / math.sqrt(d + 1)
    p = make_model("separate", n_heads=H, d=d).init(seed=0)
    w = np.concatenate([p[k].ravel() for k in ("Q", "K", "V", "o")])
    n = w.size
    assert np.all(np.abs(w) <= b) and np.abs(w).max() > b * (1 - 10 / n)
    var = b * b / 3
    assert abs(w.mean()) < 4 * math.sqrt(var / n)
    assert abs(w.var() - var) < 4 * var * math.sqrt(0.8 / n)
    r = make_model("reduced", n_heads=50, d=d, init_scale=0.3).init(seed=1)
    assert all(np.all(np.abs(r[k]) <= 0.3) for k in ("omega", "mu"))


def test_flatten_roundtrip_and_views():
    m = make_model("separate", n_heads=2, d=3)
    p = m.init(seed=0)
    flat = flatten_params(p)
    views = unflatten_params(flat, m.param_shapes())
    for k in p:
        np.testing.assert_array_equal(views[k], p[k])
    flat[0] += 1.0
    assert views["Q"].flat[0] == p["Q"].flat[0] + 1.0


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: make_model("nope", n_heads=2, d=3), "`kind`"),
        (lambda: make_model("separate", n_heads=0, d=3), "`n_heads`"),
        (lambda: make_model("merged", n_heads=2, d=0), "`d`"),
        (lambda: AttentionModel(2, 3, attention="relu"), "`attention`"),
        (lambda: sample_tokens(0, setting(3, 5, 0.1), seed=0), "`n_prompts`"),
        (lambda: sample_tokens(2, setting(3, 5, 0.1), seed=None), "`seed`"),
        (lambda: make_model("separate", n_heads=2, d=3).predict({"Q": 1}, None), "`params`"),
        (
            lambda: make_model("reduced", n_heads=2, d=3).predict({"omega": np.zeros(3), "mu": np.zeros(2)}, None),
            "`params['omega']`",
        ),
    ],
)
def test_bad_input_names_parameter(call, name):
    with pytest.raises(ValueError, match=name.replace("[", r"\[").replace("]", r"\]")):
        call()


def test_batch_dimension_mismatch():
    m = make_model("separate", n_heads=2, d=3)
    with pytest.raises(ValueError, match="`batch`"):
        m.predict(m.init(seed=0), sample_tokens(2, setting(4, 5, 0.1), seed=0))


def test_linear_hard_coded_normalisation():
    """With 1/norm_L hard-coded, predictions on length-L prompts are (L/norm_L) × the adaptive ones."""
    ada = make_model("linear", n_heads=2, d=3)
    hard = make_model("linear", n_heads=2, d=3, norm_L=40)
    p = ada.init(seed=0)
    tok = sample_tokens(6, setting(3, 10, 0.1), seed=0)
    np.testing.assert_allclose(hard.predict(p, tok), (10 / 40) * ada.predict(p, tok), rtol=1e-12)
    model = make_model("linear", n_heads=2, d=3, norm_L=7)
    _, grad = model.loss_and_grad(p, tok)
    fd = _fd_grad(model, p, tok)
    for k in p:
        assert (np.abs(grad[k] - fd[k]) / (FD_ATOL + FD_RTOL * np.abs(fd[k]))).max() < 1.0


# ---------------------------------------------------------------- activations (docs/theory.md#other-activations)
ACTS = [Activation("affine", 0.3), Activation("square", 0.7), Activation("tanh"), Activation("exp")]


def _naive_predict_f(KQ, ov, tok, f):
    """Per-sample, per-head loops with weights f(s_l)/Σ_j f(s_j) (independent of the vectorised code)."""
    n, L, D = tok.tokens.shape
    out = np.zeros(n)
    for i in range(n):
        zq = np.append(tok.x_q[i], 0.0)
        for h in range(KQ.shape[0]):
            s = np.array([tok.tokens[i, l] @ KQ[h] @ zq for l in range(L)])
            w = np.array([f(v) for v in s])
            out[i] += ov[h] @ sum(w[l] / w.sum() * tok.tokens[i, l] for l in range(L))
    return out


_SCALAR_F = {
    "affine": lambda c: lambda x: 1.0 + c * x,
    "square": lambda c: lambda x: (1.0 + c * x) ** 2,
    "tanh": lambda c: lambda x: 1.0 + math.tanh(x),
    "exp": lambda c: lambda x: math.exp(x),
}


@pytest.mark.parametrize("act", ACTS, ids=lambda a: a.name)
@pytest.mark.parametrize("kind", ["separate", "merged", "reduced"])
def test_activation_gradient_matches_finite_differences(act, kind):
    """Backprop with f(s)/Σf weights (dS = f'(S)/Σf ⊙ (…)) equals central differences, every model and f."""
    model = make_model(kind, n_heads=2, d=3, init_scale=0.4, activation=act)
    params = model.init(seed=4)
    batch = sample_tokens(6, setting(3, 5, 0.1), seed=5)
    _, grad = model.loss_and_grad(params, batch)
    fd = _fd_grad(model, params, batch)
    for k in params:
        err = np.abs(grad[k] - fd[k]) / (FD_ATOL + FD_RTOL * np.abs(fd[k]))
        assert err.max() < 1.0, (k, err.max())


@pytest.mark.parametrize("act", ACTS, ids=lambda a: a.name)
def test_activation_forward_matches_naive_loops(act):
    model = make_model("separate", n_heads=2, d=3, activation=act)
    params = model.init(seed=3)
    tok = sample_tokens(4, setting(3, 6, 0.2), seed=4)
    KQ, ov = model.circuits(params)
    ref = _naive_predict_f(KQ, ov, tok, _SCALAR_F[act.name](act.c))
    np.testing.assert_allclose(model.predict(params, tok), ref, rtol=1e-11, atol=1e-12)
    # the reduced model with f equals the merged model with f on its circuits
    red = ReducedModel(2, 3, activation=act)
    p = {"omega": np.array([0.3, -0.2]), "mu": np.array([1.1, -0.9])}
    KQr, ovr = red.circuits(p)
    mer = AttentionModel(2, 3, "merged", activation=act)
    np.testing.assert_allclose(red.predict(p, tok), mer.predict({"KQ": KQr, "ov": ovr}, tok), rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("kind", ["separate", "merged", "reduced"])
def test_affine_normaliser_that_vanishes_raises_not_nan(kind):
    """f = 1 + Cx with C ω s < -1 on average: Σ_j f(s_j) <= 0; a NormaliserError naming it, never NaN/inf."""
    from reduced_dynamics.model.attention import NormaliserError

    model = make_model(kind, n_heads=1, d=3, activation=Activation("affine", 5.0))
    tok = sample_tokens(64, setting(3, 4, 0.1), seed=1)
    if kind == "reduced":
        p = {"omega": np.array([-3.0]), "mu": np.array([1.0])}
    else:
        p = model.init(seed=0)
        big = {k: v * 30.0 for k, v in p.items()}
        p = big
    with pytest.raises(NormaliserError, match="normaliser"):
        model.loss_and_grad(p, tok)
    assert issubclass(NormaliserError, ValueError)


def test_activation_argument_is_validated():
    with pytest.raises(ValueError, match="`activation`"):
        make_model("merged", n_heads=1, d=2, activation="relu")
    with pytest.raises(ValueError, match="`activation`"):
        make_model("linear", n_heads=1, d=2, activation="tanh")
    assert make_model("merged", n_heads=1, d=2, activation="tanh").activation == Activation("tanh")
