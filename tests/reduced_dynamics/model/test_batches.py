"""The trainer's prompt sampler (stream version 2): the documented transform, the stream, the prompt distribution.

Every moment is checked within 4 standard errors of its exact value (independent
route: the Gaussian data model, not the sampler).
"""

import math

import numpy as np
import pytest
from scipy import stats

from reduced_dynamics.model._batches import STREAM_VERSION, TokenSampler, sampler_bytes, stream_generator
from reduced_dynamics.model.attention import make_model
from reduced_dynamics.setting import Setting


def _within(samples, exact, k=4.0):
    """Sample mean of ``samples`` (1-d) within ``k`` standard errors of ``exact``."""
    m, se = samples.mean(), samples.std(ddof=1) / math.sqrt(samples.size)
    assert abs(m - exact) < k * se, (m, exact, se)


def test_stream_version_and_words_per_batch():
    """A batch consumes exactly ceil(M/2) raw words (M normals), so the stream position is known."""
    s = Setting(d=3, L=7, sigma2=0.2)
    ts = TokenSampler(5, s)
    m = 5 * (7 * 4 + 4 + 3)
    assert STREAM_VERSION == 2 and ts.n_normals == m and ts.words_per_batch == (m + 1) // 2
    a, b = stream_generator(11), stream_generator(11)
    ts.draw(a)
    b.bit_generator.random_raw(ts.words_per_batch)
    assert a.bit_generator.state["state"]["state"].tolist() == b.bit_generator.state["state"]["state"].tolist()
    assert type(a.bit_generator).__name__ == "SFC64"


def test_normals_are_the_documented_box_muller_transform():
    """Normals i and i + M/2 recomputed in float64 from the raw words viewed as little-endian 32-bit words.

    32-bit word i gives the radius, word i + M/2 the angle (top 23 bits of each).
    """
    ts = TokenSampler(3, Setting(d=2, L=4, sigma2=0.1))
    raw = stream_generator(5).bit_generator.random_raw(ts.words_per_batch)
    g = ts.normals(stream_generator(5))
    half = ts.words_per_batch
    words = raw.view("<u4")
    for i in (0, 1, half // 2, half - 1):
        k_r, k_t = int(words[i]) >> 9, int(words[i + half]) >> 9
        r = math.sqrt(-2.0 * math.log(1.0 - k_r * 2.0**-23))
        t = 2.0 * math.pi * k_t * 2.0**-23
        np.testing.assert_allclose([g[i], g[i + half]], [r * math.cos(t), r * math.sin(t)], rtol=2e-6, atol=2e-6)


def test_normals_are_standard_normal():
    """5·10⁵ normals: moments 1..6 within 4 SE, Box–Muller partners uncorrelated (and their squares), a KS test."""
    ts = TokenSampler(64, Setting(d=5, L=40, sigma2=0.1))
    rng = stream_generator(2026)
    half = ts.words_per_batch
    z = np.concatenate([ts.normals(rng).copy() for _ in range(30)])
    for p, exact in ((1, 0.0), (2, 1.0), (3, 0.0), (4, 3.0), (6, 15.0)):
        _within(z**p, exact)
    pairs = z.reshape(30, 2, half)
    _within((pairs[:, 0] ** 2 * pairs[:, 1] ** 2).ravel(), 1.0)  # r cos θ, r sin θ independent
    _within((pairs[:, 0] * pairs[:, 1]).ravel(), 0.0)
    assert stats.kstest(z, "norm").pvalue > 1e-3
    assert np.abs(z).max() <= math.sqrt(46 * math.log(2)) + 1e-5  # the documented radius bound (23 bits)


@pytest.mark.parametrize("d, L, sigma2", [(5, 40, 0.1), (2, 3, 1.5)])
def test_prompts_have_the_data_model_distribution(d, L, sigma2):
    """x ~ N(0, I), β ~ N(0, I/d), y = βᵀx + σε, one β per prompt: moments within 4 SE of their exact values."""
    s = Setting(d=d, L=L, sigma2=sigma2)
    ts = TokenSampler(1000, s)
    rng = stream_generator(7)
    X, Y, XQ, YQ, B = [], [], [], [], []
    for _ in range(10):
        b = ts.draw(rng)
        np.testing.assert_array_equal(b.tokens, b.tokens_t.transpose(0, 2, 1))
        assert b.tokens.flags.c_contiguous and b.tokens_t.flags.c_contiguous
        X.append(b.tokens[..., :d].copy())
        Y.append(b.tokens[..., d].copy())
        XQ.append(b.x_q.copy())
        YQ.append(b.y_q.copy())
        B.append(b.beta.copy())
    X, Y, XQ, YQ, B = (np.concatenate(a) for a in (X, Y, XQ, YQ, B))
    _within(X[..., 0].ravel(), 0.0)
    _within((X[..., 0] ** 2).ravel(), 1.0)
    _within((X[..., 0] * X[..., d - 1]).ravel(), 0.0 if d > 1 else 1.0)
    _within((XQ[:, -1] ** 2), 1.0)
    _within(B[:, 0] ** 2, 1.0 / d)
    _within(B[:, 0] ** 4, 3.0 / d**2)
    noise = Y - np.einsum("nld,nd->nl", X, B)
    _within((noise**2).ravel(), sigma2)
    _within((noise * X[..., 0]).ravel(), 0.0)
    _within(((YQ - np.einsum("nd,nd->n", XQ, B)) ** 2), sigma2)
    _within((Y**2).ravel(), 1.0 + sigma2)
    _within(YQ**2, 1.0 + sigma2)
    if L > 1:  # one task per prompt: E[y_1 y_2 x_1·x_2] = E|β|² = 1, while E[y_1 y_2] = 0
        _within(Y[:, 0] * Y[:, 1] * np.einsum("nd,nd->n", X[:, 0], X[:, 1]), 1.0)
        _within(Y[:, 0] * Y[:, 1], 0.0)
    _within(YQ * Y[:, 0] * np.einsum("nd,nd->n", XQ, X[:, 0]), 1.0)


@pytest.mark.parametrize("kind", ["separate", "merged", "linear", "reduced"])
def test_trainer_entry_equals_the_public_gradient(kind):
    """model._train_loss_and_grad on a TrainBatch == model.loss_and_grad on the same batch as Prompts, bit for bit."""
    s = Setting(d=3, L=9, sigma2=0.1)
    m = make_model(kind, n_heads=2, d=3, norm_L=9 if kind == "linear" else None)
    p = m.init(seed=1)
    b = TokenSampler(17, s).draw(stream_generator(3))
    la, ga = m._train_loss_and_grad(p, b)
    lb, gb = m.loss_and_grad(p, b.prompts())
    assert la == lb and list(ga) == list(gb)
    for k in ga:
        np.testing.assert_array_equal(ga[k], gb[k])


@pytest.mark.parametrize("n, d, L", [(1, 1, 1), (7, 3, 5), (256, 5, 40)])
def test_sampler_bytes_counts_the_buffers(n, d, L):
    """sampler_bytes (TrainConfig's memory estimate) == the bytes the sampler allocates, raw words included."""
    s = Setting(d=d, L=L)
    ts = TokenSampler(n, s)
    held = sum(a.nbytes for a in (ts._g, ts._Zt, ts._w, ts._r, ts._t, ts._xq, ts._yq))
    raw = stream_generator(0).bit_generator.random_raw(ts.words_per_batch)
    assert sampler_bytes(n, s) == held + raw.nbytes


def test_sampler_validates():
    with pytest.raises(ValueError, match="`n_prompts`"):
        TokenSampler(0, Setting(d=3, L=5))
    with pytest.raises(ValueError, match="`setting"):
        TokenSampler(4, Setting(d=2, Sigma=np.diag([1.0, 2.0])))
