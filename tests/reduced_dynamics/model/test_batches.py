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


@pytest.mark.parametrize("n, d, L, aniso", [(1, 1, 1, False), (7, 3, 5, False), (256, 5, 40, False), (7, 3, 5, True)])
def test_sampler_bytes_counts_the_buffers(n, d, L, aniso):
    """sampler_bytes (TrainConfig's memory estimate) == the bytes the sampler allocates, raw words included."""
    s = Setting(d=d, L=L, Sigma=np.diag(np.arange(1.0, d + 1)) if aniso else None)
    ts = TokenSampler(n, s)
    bufs = [a for a in vars(ts).values() if isinstance(a, np.ndarray)]  # every array the sampler holds
    assert len(bufs) == (11 if aniso else 9)
    held = sum(a.nbytes for a in bufs)
    raw = stream_generator(0).bit_generator.random_raw(ts.words_per_batch)
    assert sampler_bytes(n, s) == held + raw.nbytes


def test_sampler_validates():
    with pytest.raises(ValueError, match="`n_prompts`"):
        TokenSampler(0, Setting(d=3, L=5))
    with pytest.raises(ValueError, match="`setting`"):
        TokenSampler(4, Setting(d=3, L=[5, 6]))
    with pytest.raises(ValueError, match="`setting`"):
        TokenSampler(4, "paper")


# ------------------------------------------------------------------ covariance Σ (issue 11)
def _sigma(d, seed):
    """A covariance with eigenvalues spread over [0.5, 4] in a random orthogonal basis (not diagonal)."""
    q, r = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, d)))
    q *= np.sign(np.diag(r))
    return (q * np.linspace(0.5, 4.0, d)) @ q.T


def _draws(setting, n, k, seed):
    ts, rng = TokenSampler(n, setting), stream_generator(seed)
    out = []
    for _ in range(k):
        b = ts.draw(rng)
        out.append(tuple(a.copy() for a in (b.tokens, b.tokens_t, b.x_q, b.y_q, b.beta)))
    return [np.concatenate(a) for a in zip(*out)], rng


def _layout(g, n, d, L, sigma2):
    """A batch rebuilt from its normals by the module docstring's layout (isotropic)."""
    D = d + 1
    n_ctx = n * L * D
    Z = g[:n_ctx].reshape(n, L, D).copy()
    q = g[n_ctx : n_ctx + n * D].reshape(n, D)
    beta = g[n_ctx + n * D : n_ctx + n * D + n * d].reshape(n, d) * (1.0 / math.sqrt(d))
    s = math.sqrt(sigma2)
    Z[..., d] = s * Z[..., d] + np.matmul(Z[..., :d], beta[:, :, None])[..., 0]
    xq = q[:, :d].copy()
    return Z, xq, np.einsum("nj,nj->n", xq, beta) + s * q[:, d], beta


@pytest.mark.parametrize("d, L, sigma2", [(5, 40, 0.1), (2, 3, 1.5)])
def test_isotropic_batches_are_the_documented_layout_bit_for_bit(d, L, sigma2):
    """Without Σ (and with Σ = I exactly) a batch is its normals in the documented layout, unchanged bit for bit."""
    n = 9
    s = Setting(d=d, L=L, sigma2=sigma2)
    (tok, tok_t, xq, yq, beta), _ = _draws(s, n, 1, 4)
    g = TokenSampler(n, s).normals(stream_generator(4)).copy()
    Z, xq0, yq0, beta0 = _layout(g, n, d, L, sigma2)
    for a, b in ((tok[..., :d], Z[..., :d]), (xq, xq0), (beta, beta0), (tok_t, tok.transpose(0, 2, 1))):
        np.testing.assert_array_equal(a, b)
    # the responses: the sampler forms y_l = (β, σ)·(x_l, ε_l) as one product, the layout above as
    # σ ε_l + βᵀx_l; the two orders of a six-term sum agree to float64 rounding
    np.testing.assert_allclose(tok[..., d], Z[..., d], rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(yq, yq0, rtol=1e-14, atol=1e-14)  # einsum vs the sampler's in-place sum
    (tok_i, _, xq_i, yq_i, beta_i), _ = _draws(s.replace(Sigma=np.eye(d)), n, 1, 4)  # cholesky(I) = I: exact
    for a, b in ((tok_i, tok), (xq_i, xq), (yq_i, yq), (beta_i, beta)):
        np.testing.assert_array_equal(a, b)


def test_sigma_batch_is_cholesky_map_of_the_isotropic_normals():
    """With Σ, x = C z (C = cholesky Σ) of the same normals, β unchanged, y formed from the mapped x."""
    d, L, n, sigma2 = 4, 6, 5, 0.3
    S = _sigma(d, 1)
    C = np.linalg.cholesky(S)
    (tok0, _, xq0, _, beta0), rng0 = _draws(Setting(d=d, L=L, sigma2=sigma2), n, 1, 8)
    (tok, tok_t, xq, yq, beta), rng1 = _draws(Setting(d=d, L=L, sigma2=sigma2, Sigma=S), n, 1, 8)
    np.testing.assert_array_equal(beta, beta0)
    np.testing.assert_allclose(tok[..., :d], tok0[..., :d] @ C.T, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(xq, xq0 @ C.T, rtol=1e-13, atol=1e-13)
    eps0 = (tok0[..., d] - np.einsum("nld,nd->nl", tok0[..., :d], beta0)) / math.sqrt(sigma2)  # the noise normals
    y = np.einsum("nld,nd->nl", tok[..., :d], beta) + math.sqrt(sigma2) * eps0
    np.testing.assert_allclose(tok[..., d], y, rtol=1e-10, atol=1e-10)
    np.testing.assert_array_equal(tok_t, tok.transpose(0, 2, 1))
    # same number of raw words: the stream position after a batch does not depend on Σ
    st0, st1 = rng0.bit_generator.state["state"], rng1.bit_generator.state["state"]
    assert st0["state"].tolist() == st1["state"].tolist()


def test_sigma_same_seed_same_stream():
    """Same Σ and seed: identical batches; another seed: different ones."""
    s = Setting(d=3, L=7, sigma2=0.1, Sigma=_sigma(3, 2))
    a, _ = _draws(s, 11, 3, 21)
    b, _ = _draws(s, 11, 3, 21)
    c, _ = _draws(s, 11, 3, 22)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[0], c[0])


@pytest.mark.parametrize("d, L, sigma2", [(5, 20, 0.1), (3, 4, 0.5)])
def test_sigma_prompts_have_the_data_model_distribution(d, L, sigma2):
    """x ~ N(0, Σ) for context and query: every entry of the sample covariance within 4 SE of Σ; the responses'
    moments within 4 SE of their exact values under Σ (E y² = tr Σ/d + σ², E[y₁y₂ x₁ᵀx₂] = tr Σ²/d)."""
    S = _sigma(d, 3)
    s = Setting(d=d, L=L, sigma2=sigma2, Sigma=S)
    (tok, _, XQ, YQ, B), _ = _draws(s, 1000, 8, 17)
    X, Y = tok[..., :d], tok[..., d]
    Xf = X.reshape(-1, d)
    for i in range(d):
        _within(Xf[:, i], 0.0)
        for j in range(i, d):
            _within(Xf[:, i] * Xf[:, j], S[i, j])
            _within(XQ[:, i] * XQ[:, j], S[i, j])
    _within(X[:, 0, 0] * X[:, 1, 0], 0.0)  # examples independent
    _within(B[:, 0] ** 2, 1.0 / d)
    noise = Y - np.einsum("nld,nd->nl", X, B)
    _within((noise**2).ravel(), sigma2)
    _within((noise * X[..., 0]).ravel(), 0.0)
    _within((Y**2).mean(axis=1), np.trace(S) / d + sigma2)  # one β per prompt: average within a prompt first
    _within(YQ**2, np.trace(S) / d + sigma2)
    _within(Y[:, 0] * Y[:, 1] * np.einsum("nd,nd->n", X[:, 0], X[:, 1]), np.trace(S @ S) / d)
    _within(YQ - np.einsum("nd,nd->n", XQ, B), 0.0)
