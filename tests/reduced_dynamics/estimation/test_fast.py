"""The risk engine's fused kernels (reduced_dynamics.estimation._fast) against independent routes.

* fused vs generic (``weights`` → loss) path on the same prompts, every predictor kind;
* the Gram sampler's Bartlett construction against the direct ``XᵀX`` (moments with SE, KS);
* ridge on the Gram sampler against the Rao–Blackwellised full-covariate reference;
* the unrolled ridge kernel against batched LAPACK on the same block;
* the single-precision stream: Box–Muller normals (moments, KS), float32 vs float64 arithmetic on
  identical normals, and the exact GD / debiased-GD risks (proofs_check.closed_forms.gd_risk) within 3 SE;
* the single-precision kernels: the float32 ridge kernel against a float64 LAPACK solve of the same block
  (with its float64 fallback for ill-conditioned prompts and λ outside its range), the heads ω, −ω
  (reciprocal rows) against float64.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from proofs_check.closed_forms import gd_risk
from reduced_dynamics.dynamics.manifold import eta_star
from reduced_dynamics.estimation import _fast
from reduced_dynamics.estimation.predictors import (
    BayesRidge,
    DebiasedGD,
    MultiHead,
    Predictor,
    VanillaGD,
    Zero,
    conditional_loss,
    ridge_weights,
)
from reduced_dynamics.estimation.prompts import sample_prompts
from reduced_dynamics.estimation.risk import STREAM_VERSION, estimate_risks
from reduced_dynamics.setting import Setting

from .conftest import stats_predictors

D, L, SIGMA2 = 5, 40, 0.1
SETTING = Setting(d=D, L=L, sigma2=SIGMA2)


class Generic(Predictor):
    """Wraps a predictor so that the engine takes the generic (weights) path."""

    def __init__(self, p):
        self.p = p

    def weights(self, prompts):
        return self.p.weights(prompts)


def _five():
    return stats_predictors(SETTING, hot_omega=(40.0, -25.0, 3.0))  # hot heads: rows needing the max shift


# ------------------------------------------------------------------ fused vs generic


@pytest.mark.parametrize("conditional", [False, True])
def test_fused_path_equals_generic_path_on_the_same_prompts(conditional):
    preds = _five()
    kw = dict(n_prompts=6000, seed=4, conditional=conditional, sampler="stats")
    fast = estimate_risks(preds, SETTING, precision="double", **kw)  # the generic path draws the double stream
    slow = estimate_risks({k: Generic(v) for k, v in preds.items()}, SETTING, **kw)
    np.testing.assert_allclose(fast.mean, slow.mean, rtol=1e-12)
    np.testing.assert_allclose(fast.cov, slow.cov, rtol=1e-10)


def test_fused_path_handles_overflowing_heads_like_the_generic_path():
    """Scores times ω far beyond exp's range: the per-row shift gives the same (finite) softmax."""
    p = MultiHead((900.0, -700.0), (1.0, 0.5))
    kw = dict(n_prompts=500, seed=2, conditional=True, sampler="stats")
    a = estimate_risks({"h": p}, SETTING, precision="double", **kw)
    b = estimate_risks({"h": Generic(p)}, SETTING, **kw)
    assert np.isfinite(a.mean).all()
    np.testing.assert_allclose(a.mean, b.mean, rtol=1e-12)


# ------------------------------------------------------------------ Gram sampler


def _gram_and_direct(n, seed):
    blk = _fast.draw_gram(np.random.default_rng(seed), n, d=D, L=L, conditional=True)
    X = np.random.default_rng(seed + 1).standard_normal((n, L, D))
    return blk.G, np.einsum("nld,nle->nde", X, X)


@pytest.mark.parametrize("stat", ["mean_diag", "mean_off", "var_diag", "var_off", "cov_diag", "trace_inv"])
def test_bartlett_gram_moments_match_direct_construction(stat):
    """Wishart W_d(L, I) moments: E G_ii = L, E G_ij = 0, Var G_ii = 2L, Var G_ij = L, Cov(G_11, G_22) = 0,
    E tr G⁻¹ = d/(L-d-1); both constructions within 4 SE of the exact value and of each other."""
    Gb, Gd = _gram_and_direct(40_000, 11)
    f = {
        "mean_diag": (lambda G: G[:, 0, 0], L),
        "mean_off": (lambda G: G[:, 1, 3], 0.0),
        "var_diag": (lambda G: (G[:, 2, 2] - L) ** 2, 2 * L),
        "var_off": (lambda G: G[:, 0, 4] ** 2, L),
        "cov_diag": (lambda G: (G[:, 0, 0] - L) * (G[:, 1, 1] - L), 0.0),
        "trace_inv": (lambda G: np.trace(np.linalg.inv(G), axis1=1, axis2=2), D / (L - D - 1)),
    }[stat]
    fn, exact = f
    vals = [fn(Gb), fn(Gd)]
    ses = [v.std(ddof=1) / math.sqrt(v.size) for v in vals]
    for v, se in zip(vals, ses):
        assert abs(v.mean() - exact) < 4 * se, (stat, v.mean(), exact, se)
    assert abs(vals[0].mean() - vals[1].mean()) < 4 * math.hypot(*ses)


@pytest.mark.parametrize("entry", [(0, 0), (1, 2), (4, 4)])
def test_bartlett_gram_entries_have_the_direct_distribution_ks(entry):
    Gb, Gd = _gram_and_direct(20_000, 3)
    i, j = entry
    assert stats.ks_2samp(Gb[:, i, j], Gd[:, i, j]).pvalue > 1e-3


@pytest.mark.parametrize("conditional", [False, True])
def test_gram_ridge_losses_have_the_full_sampler_distribution_ks(conditional):
    """Per-prompt ridge losses: Gram sampler vs full covariates (two-sample KS) and their means within 4 SE."""
    n = 20_000
    blk = _fast.draw_gram(np.random.default_rng(7), n, d=D, L=L, conditional=conditional)
    out = np.empty((n, 1))
    lam = SIGMA2 * D
    _fast.gram_losses([("ridge", lam)], blk, d=D, sigma2=SIGMA2, out=out)
    p = sample_prompts(n, SETTING, seed=8)
    if conditional:
        ref = conditional_loss(p, ridge_weights(p.X, p.x_q, lam), setting=SETTING)
    else:
        ref = (p.y_q - BayesRidge(lam)(p)) ** 2
    assert stats.ks_2samp(out[:, 0], ref).pvalue > 1e-3
    se = math.hypot(out[:, 0].std() / math.sqrt(n), ref.std() / math.sqrt(n))
    assert abs(out[:, 0].mean() - ref.mean()) < 4 * se


def test_gram_ridge_risk_matches_rao_blackwellised_full_reference():
    """Engine: ridge on the Gram sampler (plain and conditional) vs the Rao–Blackwellised full-sampler estimate."""
    ridge = {"bayes_ridge": BayesRidge(), "zero": Zero()}
    ref = estimate_risks(ridge, SETTING, n_prompts=60_000, seed=1, sampler="full", conditional=True)
    for cond in (False, True):
        res = estimate_risks(ridge, SETTING, n_prompts=200_000, seed=2, conditional=cond)
        assert res.sampler == "gram"
        for name in ridge:
            a, b = res[name], ref[name]
            assert abs(a.risk - b.risk) < 3 * math.hypot(a.stderr, b.stderr), (cond, name, a, b)
    assert abs(res["zero"].risk - (1 + SIGMA2)) < 3 * res["zero"].stderr


def test_unrolled_ridge_kernel_equals_lapack_on_the_same_block():
    blk = _fast.draw_gram(np.random.default_rng(0), 3000, d=D, L=L, conditional=False)
    for lam in (0.0, 0.5, 30.0):
        h1, Rh1 = _fast.ridge_h(blk, lam, kernel="soa")
        h2, Rh2 = _fast.ridge_h(blk, lam, kernel="lapack")
        np.testing.assert_allclose(h1, h2, rtol=1e-9, atol=1e-13)
        np.testing.assert_allclose(Rh1, Rh2, rtol=1e-9, atol=1e-13)
        # h solves (G + λI) h = e1
        res = np.einsum("nij,jn->in", blk.G + lam * np.eye(D), h1)
        np.testing.assert_allclose(res, np.eye(D)[:, [0]] * np.ones(3000), atol=1e-10)


@pytest.mark.parametrize("sampler", ["gram", "stats"])
def test_fused_results_are_bit_identical_across_memory_budgets(sampler):
    preds = [Zero(), BayesRidge()] if sampler == "gram" else [Zero(), MultiHead((0.3, -0.2), (1.0, -1.0))]
    kw = dict(n_prompts=4100, seed=3, sampler=sampler)
    runs = [estimate_risks(preds, SETTING, memory_budget=b, **kw) for b in (1, 10_000, 2**28)]
    for r in runs[1:]:
        assert np.array_equal(r.mean, runs[0].mean) and np.array_equal(r.cov, runs[0].cov)
    assert runs[0].stream_version == STREAM_VERSION


# ------------------------------------------------------------------ single precision


def test_box_muller_float32_normals_are_standard_normal():
    z = _fast.normals32(np.random.default_rng(5), np.empty(400_001, np.float32)).astype(np.float64)
    n = z.size
    for k, exact in ((1, 0.0), (2, 1.0), (3, 0.0), (4, 3.0)):
        v = z**k
        assert abs(v.mean() - exact) < 4 * v.std() / math.sqrt(n), k
    assert stats.kstest(z, "norm").pvalue > 1e-3
    # cos and sin halves independent
    k = (n + 1) // 2
    assert abs(np.corrcoef(z[: n - k], z[k:])[0, 1]) < 4 / math.sqrt(n - k)


@pytest.mark.parametrize("conditional", [False, True])
def test_float32_arithmetic_matches_float64_on_identical_normals(conditional):
    """Isolates the float32 rounding: the same drawn statistics evaluated in float32 and in float64."""
    m = 4096
    s32, y32 = np.empty((m, L), np.float32), np.empty((m, L), np.float32)
    yq, r2 = np.empty(m), np.empty(m)
    _fast.draw_stats32(np.random.default_rng(9), s32, y32, yq, r2, d=D, sigma2=SIGMA2, conditional=False)
    specs = [_fast.stats_spec(p) for p in _five().values()]
    args = (None, None) if conditional else (y32, yq)
    args64 = (None, None) if conditional else (y32.astype(np.float64), yq)
    a = _fast.stats_losses(specs, s32, r2, *args, d=D, sigma2=SIGMA2, out=np.empty((m, len(specs))), work=[])
    b = _fast.stats_losses(
        specs, s32.astype(np.float64), r2, *args64, d=D, sigma2=SIGMA2, out=np.empty((m, len(specs))), work=[]
    )
    # Each prompt's change against its own loss plus the risk: a plain loss (y_q − ŷ)² moves by
    # 2|y_q − ŷ||δŷ| <= (loss + risk)|δŷ|/√risk, so this bounds the float32 error of the prediction itself.
    # float32: a sum of L = 40 products is off by up to ~L·6e-8 ≈ 2.4e-6 of its absolute terms, and
    # exp(ω s_l) by |ω s_l|·6e-8. Over 16 seeds (both loss kinds) the largest per-prompt value was 1.8e-6 on
    # stream-3 inputs and 1.9e-6 on stream-4 inputs; "hot_heads" (ω = 40, |ω s| up to ~1000), the worst
    # case, 1.6e-5 and 7.5e-6. (Against the risk alone, as this test had it before stream version 4, the
    # largest values were 1.9e-5 and 2.8e-5: tail prompts with a large loss dominate that measure.)
    rel = np.max(np.abs(a - b) / (b + b.mean(axis=0)), axis=0)
    assert np.all(rel[:-1] < 5e-6), rel
    assert rel[-1] < 5e-5, rel
    # the effect on the mean is far below one standard error
    se = b.std(axis=0) / math.sqrt(m)
    assert np.all(np.abs(a.mean(axis=0) - b.mean(axis=0)) < 1e-3 * se)


@pytest.mark.parametrize("precision", ["auto", "double", "single"])
@pytest.mark.parametrize("conditional", [False, True])
def test_gd_risks_match_exact_closed_form(precision, conditional):
    eta = eta_star(SETTING)
    preds = {"gd": VanillaGD(eta), "debiased_gd": DebiasedGD(eta)}
    res = estimate_risks(preds, SETTING, n_prompts=200_000, seed=21, conditional=conditional, precision=precision)
    assert res.precision == {"auto": "single"}.get(precision, precision)
    for name, deb in (("gd", False), ("debiased_gd", True)):
        exact = float(gd_risk(eta, SETTING, debiased=deb))
        assert abs(res[name].risk - exact) < 3 * res[name].stderr, (name, res[name], exact)


def test_single_precision_heads_agree_with_double_within_monte_carlo_error():
    """Seven predictors' risks on the two streams (independent draws): each difference within 4 combined
    standard errors, a family-wise false-alarm rate of about 4e-4 for the seven comparisons. (At 3 per
    comparison the family fails by chance in a few percent of seeds: over 100 seeds the hot heads' largest
    |z| was 3.55 on stream 3 and 3.68 on stream 4, whose seed 30 gives 3.02; at 2,000,000 prompts the same
    comparison gives |z| <= 1.34 for all seven, and the ŷ = 0 risk, known exactly, has mean z 0.01 and
    sd 1.04 over 300 seeds of stream 4.)"""
    preds = _five()
    kw = dict(n_prompts=100_000, conditional=True)
    a = estimate_risks(preds, SETTING, seed=30, precision="single", **kw)
    b = estimate_risks(preds, SETTING, seed=31, precision="double", **kw)
    for name in preds:
        assert abs(a[name].risk - b[name].risk) < 4 * math.hypot(a[name].stderr, b[name].stderr), name


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(precision="half"),
        dict(precision="auto "),
        dict(precision="single", predictors={"g": Generic(Zero())}),
        dict(precision="single", sampler="full"),
        dict(sampler="gram", predictors={"g": VanillaGD(0.5)}),
        dict(sampler="gram", setting=Setting(d=8, L=5, sigma2=0.1)),
        dict(sampler="gram", setting=SETTING.replace(Sigma=np.eye(D))),
    ],
)
def test_bad_precision_or_gram_request_names_the_parameter(kwargs):
    kw = dict(predictors={"z": Zero()}, setting=SETTING, n_prompts=10, seed=0)
    kw.update(kwargs)
    name = "precision" if "precision" in kwargs else "sampler"
    with pytest.raises(ValueError, match=f"`{name}`"):
        estimate_risks(kw.pop("predictors"), kw.pop("setting"), **kw)


@pytest.mark.parametrize("shape", [(30, 6, 20), (30, 20, 6)])
def test_ridge_primal_and_dual_forms_agree_with_direct_solve(shape):
    """``L < d`` uses the L × L dual form, ``L >= d`` the d × d primal; both against a direct per-prompt solve."""
    n, L_, d = shape
    rng = np.random.default_rng(0)
    X, y, xq = rng.standard_normal(shape), rng.standard_normal((n, L_)), rng.standard_normal((n, d))
    lam = 0.7
    direct_w = np.stack([X[i] @ np.linalg.solve(X[i].T @ X[i] + lam * np.eye(d), xq[i]) for i in range(n)])
    np.testing.assert_allclose(ridge_weights(X, xq, lam), direct_w, rtol=1e-9, atol=1e-12)
    from reduced_dynamics.estimation.prompts import Prompts

    p = Prompts.from_arrays(X, y, xq)
    np.testing.assert_allclose(BayesRidge(lam)(p), np.einsum("nl,nl->n", direct_w, y), rtol=1e-9, atol=1e-12)


def test_unknown_backend_names_the_parameter():
    with pytest.raises(ValueError, match="`backend`"):
        estimate_risks({"z": Zero()}, SETTING, n_prompts=10, seed=0, backend="jax")


@pytest.mark.parametrize("conditional", [False, True])
def test_gram_ridge_with_huge_lambda_tends_to_the_zero_predictor(conditional):
    """λ → ∞ shrinks ridge to ŷ = 0: finite losses equal to the zero predictor's on the same prompts."""
    res = estimate_risks(
        {"r": BayesRidge(1e300), "z": Zero()}, SETTING, n_prompts=2000, seed=1, conditional=conditional
    )
    assert res.sampler == "gram"
    np.testing.assert_allclose(res["r"].risk, res["z"].risk, rtol=1e-12)


def test_single_blas_thread_nests_and_restores_only_at_the_outermost_level():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from reduced_dynamics.estimation._threads import single_blas_thread

    def blas():
        return [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]

    before = blas()
    with single_blas_thread():
        with single_blas_thread():
            assert all(n == 1 for n in blas())
        assert all(n == 1 for n in blas()), "the inner exit must not restore the pool"
    assert blas() == before


# ------------------------------------------------------------------ stream version 4 (precision="auto")


def _box_muller_from_words(raw, N):
    """Stream-3/4 normals rebuilt from the documented transform (independent of ``_fast.normals32``)."""
    W = (N + 1) // 2
    k = (raw.view("<u4") >> 9).astype(np.float64) * 2.0**-23  # the top 23 bits of each 32-bit word
    rho = np.sqrt(-2.0 * np.log(1.0 - k[:W]))
    theta = 2.0 * math.pi * k[W:]
    return np.concatenate([rho * np.cos(theta), rho * np.sin(theta)])[:N]


def _uniforms_from_words(raw, n):
    """Stream-4 uniforms rebuilt from their documented form: (2t + 1) 2⁻²⁴, t the top 23 bits of a 32-bit word."""
    t = (raw.view("<u4")[:n] >> 9).astype(np.float64)
    return (2.0 * t + 1.0) * 2.0**-24


def _chi2_even(rng, k, m):
    """The even part of a stream-4 χ²_k (k <= 8), rebuilt in float64 from the raw words; (values, odd)."""
    j = k // 2
    if j == 0:
        return np.zeros(m), k % 2 == 1
    u = _uniforms_from_words(rng.bit_generator.random_raw((j * m + 1) // 2), j * m).reshape(j, m)
    return -2.0 * np.log(u).sum(axis=0), k % 2 == 1


def _block0(seed):
    return np.random.Generator(np.random.SFC64(np.random.SeedSequence(seed, spawn_key=(0,))))


def test_uniforms32_are_the_documented_cell_midpoints():
    raw = _block0(3).bit_generator.random_raw(500)
    got = _fast.uniforms32(_block0(3), 999).astype(np.float64)
    np.testing.assert_array_equal(got, _uniforms_from_words(raw, 999))  # exact: float32 holds (2t + 1) 2⁻²⁴
    assert got.min() > 0 and got.max() < 1


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 7, 8, 9, 12])
def test_single_precision_chi2_is_chi2(k):
    """χ²_k of the stream-4 rule (uniforms up to 8 degrees of freedom, plus a squared normal when k is odd;
    Gamma beyond) against scipy's χ²_k: mean, variance (their standard errors) and a KS test."""
    m = 200_000
    rng = np.random.Generator(np.random.SFC64(100 + k))
    x = np.empty(m)
    odd = _fast.chi2_32(rng, k, m, x)
    assert odd == (k % 2 == 1 and k <= _fast.CHI2_SMALL_MAX)
    if odd:
        _fast._add_squares(x, _fast.normals32(rng, np.empty(m, np.float32)))
    assert abs(x.mean() - k) < 4 * math.sqrt(2 * k / m)
    assert abs(x.var() - 2 * k) < 4 * math.sqrt((48 * k + 8 * k * k) / m)  # Var of the sample variance ≈ (μ4 − σ⁴)/m
    assert stats.kstest(x, stats.chi2(k).cdf).pvalue > 1e-3


def test_single_statistics_stream_follows_the_documented_draw_order():
    """Block 0 of ``precision="single"`` rebuilt from the contract of ``draw_stats32``: the ŷ = 0 loss y_q²."""
    from reduced_dynamics.estimation.risk import _block_size

    m = _block_size("stats", D, L)
    rng = _block0(17)
    r2, odd_r = _chi2_even(rng, D, m)  # |x_q|² ~ χ²_5: two uniforms and, below, one normal per prompt
    _, odd_b = _chi2_even(rng, D - 1, m)  # |β_⊥|² d ~ χ²_4
    assert odd_r and not odd_b
    N = 2 * m * L + 3 * m
    g = _box_muller_from_words(rng.bit_generator.random_raw((N + 1) // 2), N)
    r2 += g[2 * m * L + 2 * m :] ** 2
    beta1, eps_q = g[2 * m * L : 2 * m * L + m] / math.sqrt(D), g[2 * m * L + m : 2 * m * L + 2 * m]
    yq = beta1 * np.sqrt(r2) + math.sqrt(SIGMA2) * eps_q
    res = estimate_risks([Zero()], SETTING, n_prompts=m, seed=17, sampler="stats", precision="single")
    # float32 Box-Muller (the engine) against float64 evaluation of the same words: ~1e-7 per normal
    assert res.mean[0] == pytest.approx(np.mean(yq**2), rel=1e-5)
    assert res.stream_version == STREAM_VERSION == 4
    cond = estimate_risks([Zero()], SETTING, n_prompts=m, seed=17, sampler="stats", conditional=True)
    rng = _block0(17)
    r2c, _ = _chi2_even(rng, D, m)
    N = m * L + m
    r2c += _box_muller_from_words(rng.bit_generator.random_raw((N + 1) // 2), N)[m * L :] ** 2
    assert cond.mean[0] == pytest.approx(np.mean(r2c / D + SIGMA2), rel=1e-6)  # E[y_q² | x_q] = r²/d + σ²


@pytest.mark.parametrize("conditional", [False, True])
def test_single_gram_stream_follows_the_documented_draw_order(conditional):
    """Block 0 of the single-precision Gram stream rebuilt from the contract of ``draw_gram32`` (ŷ = 0 loss)."""
    from reduced_dynamics.estimation.risk import _block_size

    m = _block_size("gram", D, L)
    assert m == 4096 and _block_size("gram", D, L, "double") == 2048
    rng = _block0(5)
    r2, odd = _chi2_even(rng, D, m)
    assert odd
    for i in range(D):  # χ²_{40}, …, χ²_{36}: Gamma variates
        rng.standard_gamma((L - i) / 2.0, size=m)
    rows = D * (D - 1) // 2 + (0 if conditional else 2 * D + 1)
    N = (rows + 1) * m
    g = _box_muller_from_words(rng.bit_generator.random_raw((N + 1) // 2), N).reshape(rows + 1, m)
    r2 += g[rows] ** 2
    if conditional:
        want = r2 / D + SIGMA2
    else:
        off = D * (D - 1) // 2
        want = (np.sqrt(r2) * g[off] / math.sqrt(D) + math.sqrt(SIGMA2) * g[off + 2 * D]) ** 2
    res = estimate_risks([Zero(), BayesRidge()], SETTING, n_prompts=m, seed=5, conditional=conditional)
    assert res.sampler == "gram" and res.precision == "single" and res.block_size == m
    # r² is a float32 χ²_4 part plus a float64 square: ~1e-7 relative
    assert res.mean[0] == pytest.approx(np.mean(want), rel=1e-5 if not conditional else 1e-6)


def _chi2_stream4(rng, k, m):
    """A stream-4 χ²_k's draws in order: its even part from uniforms (k <= 8) or 2 Γ(k/2); (values, odd)."""
    if k > _fast.CHI2_SMALL_MAX:
        return 2.0 * rng.standard_gamma(k / 2.0, size=m), False
    return _chi2_even(rng, k, m)


@pytest.mark.parametrize("d", [1, 2, 4, 8, 9])
def test_single_statistics_stream_at_small_d_follows_the_documented_draw_order(d):
    """Block 0 rebuilt from the contract of ``draw_stats32`` where |β_⊥|² d ~ χ²_{d−1} is the odd one (d = 2, 4,
    8), neither is (d = 9: χ²_9 from Gamma, χ²_8 from uniforms) or χ²_0 vanishes (d = 1): the GD loss, which
    reads a, the context noise through c = √(|β_⊥|² + σ²), β₁, ε_q and |x_q|."""
    from reduced_dynamics.estimation.risk import _block_size

    setting, eta = Setting(d=d, L=L, sigma2=SIGMA2), 0.7
    m = _block_size("stats", d, L)
    rng = _block0(23)
    r2, odd_r = _chi2_stream4(rng, d, m)
    b2, odd_b = _chi2_stream4(rng, d - 1, m)
    assert not (odd_r and odd_b)
    nm = m * L
    N = 2 * nm + (2 + odd_r + odd_b) * m
    g = _box_muller_from_words(rng.bit_generator.random_raw((N + 1) // 2), N)
    if odd_r:
        r2 = r2 + g[2 * nm + 2 * m :] ** 2
    elif odd_b:
        b2 = b2 + g[2 * nm + 2 * m :] ** 2
    a, noise = g[:nm].reshape(m, L), g[nm : 2 * nm].reshape(m, L)
    beta1, eps_q = g[2 * nm : 2 * nm + m] / math.sqrt(d), g[2 * nm + m : 2 * nm + 2 * m]
    c = np.sqrt(b2 / d + SIGMA2)
    s, y = np.sqrt(r2)[:, None] * a, c[:, None] * noise + beta1[:, None] * a
    yq = beta1 * np.sqrt(r2) + math.sqrt(SIGMA2) * eps_q
    want = np.mean((yq - eta / L * (s * y).sum(axis=1)) ** 2)
    res = estimate_risks([VanillaGD(eta)], setting, n_prompts=m, seed=23, sampler="stats", precision="single")
    assert res.block_size == m
    # float32 normals and sums (the engine) against float64 on the same words
    assert res.mean[0] == pytest.approx(want, rel=1e-5)


@pytest.mark.parametrize("conditional", [False, True])
@pytest.mark.parametrize("d, L_", [(1, 1), (2, 3), (3, 4), (4, 9)])
def test_single_gram_stream_at_small_L_follows_the_documented_draw_order(d, L_, conditional):
    """Block 0 of the single-precision Gram stream where the Bartlett rows χ²_{L−i} come from uniforms (L − i <= 8),
    several of them odd: rebuilt from the contract of ``draw_gram32`` and evaluated by LAPACK in float64 (Bayes
    ridge reads r², every R_ii, the strict upper triangle and, plain, β, u, ε_q)."""
    from reduced_dynamics.estimation.risk import _block_size

    setting = Setting(d=d, L=L_, sigma2=SIGMA2)
    m = _block_size("gram", d, L_)
    rng = _block0(7)
    parts = [_chi2_stream4(rng, k, m) for k in [d] + [L_ - i for i in range(d)]]
    n_off = d * (d - 1) // 2
    rows = n_off + (0 if conditional else 2 * d + 1)
    n_odd = sum(odd for _, odd in parts)
    N = (rows + n_odd) * m
    g = _box_muller_from_words(rng.bit_generator.random_raw((N + 1) // 2), N).reshape(rows + n_odd, m)
    x2, j = [], rows
    for v, odd in parts:  # the completing rows, in the order r², R_00², R_11², ...
        x2.append(v + g[j] ** 2 if odd else v)
        j += odd
    blk = _fast.GramBlock(x2[0], np.sqrt(np.array(x2[1:])), g[:n_off], None if conditional else g[n_off:rows])
    want = _ridge_losses_by_lapack(blk, SIGMA2 * d, d, SIGMA2).mean()
    res = estimate_risks([BayesRidge()], setting, n_prompts=m, seed=7, conditional=conditional)
    assert res.sampler == "gram" and res.precision == "single" and res.block_size == m
    assert res.mean[0] == pytest.approx(want, rel=1e-5)


def test_auto_precision_is_single_on_the_fused_numpy_path_and_double_elsewhere():
    kw = dict(n_prompts=10, seed=0)
    assert estimate_risks([Zero(), VanillaGD(0.5)], SETTING, **kw).precision == "single"
    assert estimate_risks([BayesRidge()], SETTING, **kw).precision == "single"
    assert estimate_risks([Zero()], SETTING, sampler="full", **kw).precision == "double"
    assert estimate_risks({"g": Generic(Zero())}, SETTING, **kw).precision == "double"
    a = estimate_risks([Zero()], SETTING, **kw)
    b = estimate_risks([Zero()], SETTING, precision="single", **kw)
    assert np.array_equal(a.mean, b.mean) and np.array_equal(a.cov, b.cov)


@pytest.mark.parametrize("conditional", [False, True])
def test_default_ridge_agrees_with_the_double_stream_within_monte_carlo_error(conditional):
    """Bayes ridge on the default (single-precision Gram) stream vs the double stream, independent seeds."""
    kw = dict(n_prompts=100_000, conditional=conditional)
    a = estimate_risks([BayesRidge()], SETTING, seed=40, **kw)["bayes_ridge"]
    b = estimate_risks([BayesRidge()], SETTING, seed=41, precision="double", **kw)["bayes_ridge"]
    assert abs(a.risk - b.risk) < 3 * math.hypot(a.stderr, b.stderr)


# ------------------------------------------------------------------ single-precision kernels (float32 ridge, ±ω heads)


def _ridge_losses_by_lapack(blk, lam, d, sigma2):
    """Per-prompt ridge losses of a Gram block in float64 by np.linalg.solve on G + λI (independent of _fast's kernels)."""
    b = blk.astype64()
    R = b.R
    G = np.matmul(np.swapaxes(R, 1, 2), R)
    m = G.shape[0]
    h = np.linalg.solve(G + lam * np.eye(d), np.broadcast_to(np.eye(d)[:, :1], (m, d, 1)))[..., 0]
    Rh = np.einsum("nij,nj->ni", R, h)
    if b.g is None:
        return b.r2 * lam**2 * (h * h).sum(1) / d + sigma2 * (1 + b.r2 * (Rh * Rh).sum(1))
    g = b.g.T
    beta, u, eps_q = g[:, :d] / math.sqrt(d), g[:, d : 2 * d] * math.sqrt(sigma2), g[:, 2 * d] * math.sqrt(sigma2)
    e = np.sqrt(b.r2) * (lam * (h * beta).sum(1) - (Rh * u).sum(1)) + eps_q
    return e * e


@pytest.mark.parametrize("conditional", [False, True])
@pytest.mark.parametrize(
    "L_, lam, plain_tol, cond_tol",
    [
        (L, SIGMA2 * D, 2e-5, 1e-6),  # the paper's point: M well conditioned, nothing recomputed
        (D, 1e-4, 1e-3, 1e-4),  # L = d, tiny λ: many prompts ill-conditioned, recomputed in float64
    ],
)
def test_float32_ridge_kernel_matches_a_float64_solve_on_the_same_numbers(conditional, L_, lam, plain_tol, cond_tol):
    """The float32 ridge kernel of the default stream against LAPACK in float64 on the same drawn block.

    Plain losses (y_q − ŷ)² can be ~0, so their change is measured against the risk; conditional losses are
    bounded below by σ², so against themselves. The flagged (ill-conditioned) prompts take the float64 kernel.
    """
    m = 20_000
    blk = _fast.draw_gram32(np.random.default_rng(11), m, d=D, L=L_, conditional=conditional)
    assert blk.diag.dtype == np.float32
    got = _fast.gram_losses([("ridge", lam)], blk, d=D, sigma2=SIGMA2, out=np.empty((m, 1)))[:, 0]
    ref = _ridge_losses_by_lapack(blk, lam, D, SIGMA2)
    flagged = _fast._ridge_soa32(blk, lam)[2].mean()
    assert (flagged > 0.1) if L_ == D else (flagged == 0.0), flagged
    if conditional:
        assert np.max(np.abs(got - ref) / ref) < cond_tol
    else:
        assert np.max(np.abs(got - ref)) < plain_tol * ref.mean()
    assert abs(got.mean() - ref.mean()) < 1e-3 * ref.std() / math.sqrt(m)


@pytest.mark.parametrize("conditional", [False, True])
@pytest.mark.parametrize("omega", [0.1, 0.4, 300.0])  # 300: rows beyond exp's range, max-shifted
def test_single_precision_pair_of_opposite_heads_matches_float64(conditional, omega):
    """Heads ω, −ω (the manifold's two-head points): float32 takes exp(−ω s) as 1/exp(ω s); float64 computes both."""
    m = 4096
    s32, y32 = np.empty((m, L), np.float32), np.empty((m, L), np.float32)
    yq, r2 = np.empty(m), np.empty(m)
    _fast.draw_stats32(np.random.default_rng(12), s32, y32, yq, r2, d=D, sigma2=SIGMA2, conditional=False)
    specs = [_fast.stats_spec(MultiHead((omega, -omega), (1.3, -0.7)))]
    args = (None, None) if conditional else (y32, yq)
    args64 = (None, None) if conditional else (y32.astype(np.float64), yq)
    a = _fast.stats_losses(specs, s32, r2, *args, d=D, sigma2=SIGMA2, out=np.empty((m, 1)), work=[])
    b = _fast.stats_losses(
        specs, s32.astype(np.float64), r2, *args64, d=D, sigma2=SIGMA2, out=np.empty((m, 1)), work=[]
    )
    assert np.all(np.isfinite(a))
    # as test_float32_arithmetic_matches_float64_on_identical_normals: exp loses |ω s|·6e-8 in float32
    tol = 2e-5 if omega < 1 else 2e-4
    assert np.max(np.abs(a - b)) / b.mean() < tol
    assert abs(a.mean() - b.mean()) < 1e-3 * b.std() / math.sqrt(m)


@pytest.mark.parametrize("lam", [1e-7, 3e6])
def test_float32_gram_block_outside_the_kernels_lambda_range_is_evaluated_in_float64(lam):
    """λ outside [2⁻²⁰, 2²⁰] (λ²|h|² or |h|² would leave float32's normal range): the float64 kernel."""
    m = 3000
    blk = _fast.draw_gram32(np.random.default_rng(13), m, d=D, L=L, conditional=True)
    setting0 = dict(d=D, sigma2=0.0)  # no noise: the loss is r²λ²|h|²/d alone
    got = _fast.gram_losses([("ridge", lam)], blk, out=np.empty((m, 1)), **setting0)[:, 0]
    ref = _ridge_losses_by_lapack(blk, lam, D, 0.0)
    np.testing.assert_allclose(got, ref, rtol=1e-9)
