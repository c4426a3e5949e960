"""The N-output attention model in its separate (Q, K, V, O) form: forward, gradient, checkpoints."""

import math

import numpy as np
import pytest

from reduced_dynamics import Setting
from reduced_dynamics.multitask.attention import (
    MultitaskAttention,
    _draw_tokens,
    _loss_grad,
    _Params,
    init_mt_params,
    mt_attention_predict,
    train_mt_attention,
)
from reduced_dynamics.multitask.predictors import sample_mt_prompts, support_mask

PAPER = Setting.paper_multitask()


def _scale(s):
    mask = support_mask(s)
    return mask / np.sqrt(mask.sum(axis=1))[:, None]


def _loop_predict(p, prompts, d):
    """Separate-form prediction written out head by head and prompt by prompt (independent route)."""
    Q, K, V, O = p["Q"], p["K"], p["V"], p["O"]
    H, D, _ = Q.shape
    Z = prompts.tokens
    out = np.zeros((Z.shape[0], O.shape[1]))
    for b in range(Z.shape[0]):
        zq = np.concatenate([prompts.xq[b], np.zeros(D - d)])
        for h in range(H):
            s = np.array([(K[h] @ z) @ (Q[h] @ zq) for z in Z[b]]) / math.sqrt(D)
            w = np.exp(s - s.max())
            w /= w.sum()
            out[b] += O[h] @ (V[h] @ (w @ Z[b]))
    return out


@pytest.mark.parametrize("H", [1, 3])
def test_separate_circuits_compute_the_separate_model(H):
    p = init_mt_params(H, PAPER, seed=3)
    spec = _Params("separate", H, PAPER.d, PAPER.n_tasks)
    KQ, OV = spec.circuits(p)
    prompts = sample_mt_prompts(7, PAPER, seed=4)
    got = mt_attention_predict(MultitaskAttention(KQ=KQ, OV=OV), prompts, PAPER)
    np.testing.assert_allclose(got, _loop_predict(p, prompts, PAPER.d), rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("parameterisation", ["separate", "circuit"])
def test_flat_gradient_matches_central_differences(parameterisation):
    H = 2
    spec = _Params(parameterisation, H, PAPER.d, PAPER.n_tasks)
    p0 = init_mt_params(H, PAPER, parameterisation=parameterisation, init_scale=0.4, seed=1)
    theta = np.concatenate([p0[k].ravel() for k in spec.shapes])
    Z, ZT, xq, yq = _draw_tokens(np.random.default_rng(2), 9, PAPER, _scale(PAPER))

    def loss(th):
        KQ, OV = spec.circuits(spec.views(th))
        return _loss_grad(KQ, OV, Z, xq, yq, ZT)

    _, gKQ, gOV = loss(theta)
    g = spec.grad(spec.views(theta), gKQ, gOV)
    idx = np.random.default_rng(0).choice(theta.size, 25, replace=False)
    h = 1e-6
    for i in idx:
        e = np.zeros_like(theta)
        e[i] = h
        fd = (loss(theta + e)[0] - loss(theta - e)[0]) / (2 * h)
        assert g[i] == pytest.approx(fd, rel=1e-5, abs=1e-8)


def test_training_batches_are_the_prompt_sampler_stream():
    a = sample_mt_prompts(5, PAPER, seed=11)
    Z, ZT, xq, yq = _draw_tokens(np.random.default_rng(11), 5, PAPER, _scale(PAPER))
    np.testing.assert_allclose(Z, a.tokens, rtol=1e-13, atol=1e-14)
    np.testing.assert_array_equal(ZT, np.swapaxes(Z, 1, 2))
    np.testing.assert_allclose(yq, a.yq, rtol=1e-13, atol=1e-14)
    np.testing.assert_array_equal(xq, a.xq)


def test_separate_init_is_pytorch_default():
    p = init_mt_params(4, PAPER, seed=0)
    D = PAPER.d + PAPER.n_tasks
    assert set(p) == {"Q", "K", "V", "O"} and p["O"].shape == (4, 2, D)
    for a in p.values():
        assert np.abs(a).max() <= 1 / math.sqrt(D)
        assert np.abs(a).max() > 0.9 / math.sqrt(D)


def test_resume_gives_the_uninterrupted_run(tmp_path):
    kw = dict(seed=5, batch=32, lr=3e-3, parameterisation="separate", checkpoint_every=40)
    full = train_mt_attention(2, PAPER, steps=120, **kw)
    ck = tmp_path / "ck.npz"
    first = train_mt_attention(2, PAPER, steps=80, checkpoint=ck, **kw)
    assert first.steps == 80 and ck.exists()
    resumed = train_mt_attention(2, PAPER, steps=120, checkpoint=ck, **kw)
    np.testing.assert_array_equal(resumed.losses, full.losses)
    for k in full.params:
        np.testing.assert_array_equal(resumed.params[k], full.params[k])


def test_checkpoint_of_another_run_is_refused(tmp_path):
    ck = tmp_path / "ck.npz"
    train_mt_attention(2, PAPER, steps=20, seed=0, batch=8, parameterisation="separate", checkpoint=ck)
    with pytest.raises(ValueError, match="`checkpoint`: .* belongs to another run \\(differs in lr\\)"):
        train_mt_attention(2, PAPER, steps=40, seed=0, batch=8, lr=0.1, parameterisation="separate", checkpoint=ck)
    with pytest.raises(ValueError, match="`steps` = 10 is below the 20 steps"):
        train_mt_attention(2, PAPER, steps=10, seed=0, batch=8, parameterisation="separate", checkpoint=ck)
    ck.write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not a readable multi-task checkpoint"):
        train_mt_attention(2, PAPER, steps=10, seed=0, batch=8, parameterisation="separate", checkpoint=ck)


def test_separate_training_decreases_loss():
    r = train_mt_attention(2, PAPER, steps=300, seed=0, batch=64, lr=3e-3, parameterisation="separate")
    assert r.success and r.parameterisation == "separate"
    assert r.losses[-50:].mean() < 0.9 * r.losses[:50].mean()


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"parameterisation": "merged"}, "`parameterisation` must be one of separate, circuit"),
        ({"checkpoint_every": 0}, "`checkpoint_every`"),
        ({"init_scale": -1.0}, "`init_scale`"),
        ({"seed": -1}, "`seed`"),
    ],
)
def test_bad_training_options_raise(kw, match):
    args = dict(steps=5, seed=0) | kw
    with pytest.raises(ValueError, match=match):
        train_mt_attention(1, PAPER, **args)


@pytest.mark.parametrize(
    "call",
    [
        lambda s: train_mt_attention(2, s, steps=2, seed=0),
        lambda s: init_mt_params(2, s, seed=0),
    ],
)
def test_library_refuses_another_activation(call):
    s = Setting.paper_multitask().replace(activation="tanh")
    with pytest.raises(ValueError, match="activation"):
        call(s)


# ---------------------------------------------------------------- API contract (issue 23)


def test_prompts_of_another_type_are_refused_naming_prompts():
    """A non-MultitaskPrompts argument raised AttributeError ('Prompts' object has no attribute 'tokens')."""
    from reduced_dynamics import sample_prompts
    from reduced_dynamics.multitask.attention import init_mt_attention
    from reduced_dynamics.multitask.predictors import reduced_mt_predict

    s = Setting(d=2, L=6, sigma2=0.1, tasks=((0,), (0, 1)))
    model = init_mt_attention(2, s, init_scale=0.1, seed=0)
    single = sample_prompts(2, Setting(d=2, L=6, sigma2=0.1), seed=0)
    with pytest.raises(ValueError, match="`prompts` must be a MultitaskPrompts"):
        mt_attention_predict(model, single, s)
    with pytest.raises(ValueError, match="`prompts` must be a MultitaskPrompts"):
        reduced_mt_predict(single, np.zeros((2, 2)), np.zeros((2, 2)), s)
    wrong_d = sample_mt_prompts(2, Setting(d=3, L=6, sigma2=0.1, tasks=((0,), (1, 2))), seed=0)
    with pytest.raises(ValueError, match="`prompts` has d = 3"):
        mt_attention_predict(model, wrong_d, s)


def test_model_sizes_are_refused_before_allocating():
    """d = 1e5: init_mt_attention/train_mt_attention asked numpy for 160 GB (MemoryError under a memory limit)."""
    import importlib

    from reduced_dynamics.multitask.attention import init_mt_attention

    api_fuzz = importlib.import_module("api_fuzz")
    big = Setting(d=100_000, L=2, sigma2=0.1, tasks=((0,), (1,)))
    with api_fuzz._memory_limit():
        with pytest.raises(ValueError, match="`setting.d`"):
            init_mt_attention(2, big, seed=0)
        with pytest.raises(ValueError, match="`setting.d`"):
            train_mt_attention(2, big, steps=1, seed=0, batch=2)


def test_role_frequencies_bounded_by_budget():
    """A valid t_end = 1e12 took ~20 s per seed (no way to bound it); `budget` stops each flow, counted as failed."""
    import time

    from reduced_dynamics.multitask.flow import role_frequencies

    s = Setting(d=2, L=6, sigma2=0.1, tasks=((0,), (0, 1)))
    t0 = time.process_time()
    r = role_frequencies(2, s, n_seeds=1, seed=0, t_end=1e12, budget=2000)
    assert r.failures == 1
    assert time.process_time() - t0 < 5.0
    with pytest.raises(ValueError, match="`budget`"):
        role_frequencies(2, s, n_seeds=1, seed=0, budget=0)
