"""Monte Carlo risk engine: samplers, determinism, paired differences, control variates.

Statistical tolerances are in units of the Monte Carlo standard error (Z). A
single check uses Z = 3; families of checks on one fixed seed use Z = 4.
"""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest

from reduced_dynamics.dynamics.manifold import eta_star, mu_gamma
from reduced_dynamics.estimation.predictors import (
    BayesRidge,
    DebiasedGD,
    LinearAttention,
    MultiHead,
    SingleHead,
    VanillaGD,
    Zero,
)
from reduced_dynamics.estimation.prompts import sample_prompts
from reduced_dynamics.estimation.risk import (
    DEFAULT_MEMORY_BUDGET,
    ChunkPlan,
    _bytes_per_prompt,
    control_variate_risk,
    estimate_risk,
    estimate_risks,
    plan_chunks,
)
from reduced_dynamics.setting import Setting

D, L, S2 = 5, 40, 0.1
SETTING = Setting(d=D, L=L, sigma2=S2)
ETA_STAR = 1 / (1 + (1 + S2) * D / L)  # η* = 1/(1 + (1+σ²)d/L), written out here
Z1 = 3.0  # one check
ZF = 4.0  # one of a family of checks


def vanilla_gd_exact(eta, d, L, sigma2):
    """Exact finite-L risk of vanilla GD, derived independently here.

    E[y_q ŷ] = η E[(βᵀx_q)(βᵀx_l)(x_lᵀx_q)] = η, and
    E[ŷ²] = η²/L² (L(L−1)·1 + L·E[y_l² s_l²]) with E[y_l² s_l²] = d + 2 + σ² d.
    """
    return 1 + sigma2 - 2 * eta + eta**2 * (L - 1 + d + 2 + sigma2 * d) / L


def manifold_point(gamma=0.1):
    m = mu_gamma(gamma, SETTING)
    return MultiHead((gamma, -gamma), (m, -m))


PREDICTORS = {
    "zero": Zero(),
    "multi_head": manifold_point(),
    "single_head": SingleHead.optimum(SETTING),
    "gd": VanillaGD(ETA_STAR),
    "debiased_gd": DebiasedGD(ETA_STAR),
    "linear_attention": LinearAttention((0.5, -0.2), (1.0, 0.3)),
}


@pytest.fixture(scope="module")
def both_samplers():
    """Independent runs with the stats sampler and the full sampler."""
    return (
        estimate_risks(PREDICTORS, SETTING, n_prompts=60_000, sampler="stats", seed=1),
        estimate_risks(PREDICTORS, SETTING, n_prompts=60_000, sampler="full", seed=2),
    )


# ------------------------------------------------------- sampler equivalence


@pytest.mark.parametrize("name", sorted(PREDICTORS))
def test_stats_sampler_risks_agree_with_full_sampler(both_samplers, name):
    a, b = both_samplers[0][name], both_samplers[1][name]
    z = (a.risk - b.risk) / math.hypot(a.stderr, b.stderr)
    assert abs(z) < ZF, f"{name}: stats {a.risk:.5f}±{a.stderr:.5f} vs full {b.risk:.5f}±{b.stderr:.5f}"


MOMENTS = {
    # name: (function of a Prompts batch -> per-prompt values, exact mean)
    "|xq|^2": (lambda t: t.xq_norm2, D),
    "s_l^2": (lambda t: (t.scores**2).mean(axis=1), D),
    "y_l^2": (lambda t: (t.y**2).mean(axis=1), 1 + S2),
    "yq^2": (lambda t: t.y_q**2, 1 + S2),
    "y_l s_l yq": (lambda t: (t.y * t.scores).mean(axis=1) * t.y_q, 1.0),
    "y_l s_l": (lambda t: (t.y * t.scores).mean(axis=1), 0.0),
    # E[y_1 y_2] = E[βᵀx_1 x_2ᵀβ] = 0 (x_1, x_2 independent, mean 0)
    "y_1 y_2": (lambda t: t.y[:, 0] * t.y[:, 1], 0.0),
    # E[y_q² s_1²] = E[(βᵀx_q)²|x_q|²] + σ² E|x_q|² = E|x_q|⁴/d + σ² d = d + 2 + σ² d
    "yq^2 s_1^2": (lambda t: t.y_q**2 * t.scores[:, 0] ** 2, D + 2 + S2 * D),
    "sbar yq y_1": (lambda t: t.scores.mean(axis=1) * t.y_q * t.y[:, 0], 1.0 / L),
}


@pytest.fixture(scope="module")
def stat_pairs():
    n = 40_000
    a = sample_prompts(n, SETTING, seed=3, stats_only=True)
    b = sample_prompts(n, SETTING, seed=4)
    return a, b


@pytest.mark.parametrize("moment", sorted(MOMENTS))
def test_stats_sampler_moments_match_full_sampler_and_exact(stat_pairs, moment):
    f, exact = MOMENTS[moment]
    va, vb = f(stat_pairs[0]), f(stat_pairs[1])
    sa, sb = va.std(ddof=1) / np.sqrt(va.size), vb.std(ddof=1) / np.sqrt(vb.size)
    assert abs(va.mean() - vb.mean()) < ZF * math.hypot(sa, sb)
    assert abs(va.mean() - exact) < ZF * sa
    assert abs(vb.mean() - exact) < ZF * sb


def test_stats_sampler_d1_has_no_perpendicular_part():
    """d = 1: y_l = β₁ a_l + ε_l exactly, so y_l/s_l·|x_q| is constant up to noise (σ² = 0)."""
    t = sample_prompts(50, Setting(d=1, L=6, sigma2=0.0), seed=0, stats_only=True)
    ratio = t.y * np.sqrt(t.xq_norm2)[:, None] / t.scores  # = β₁ for every l
    assert np.allclose(ratio, ratio[:, :1], rtol=1e-12, atol=1e-12)
    assert np.allclose(t.y_q, ratio[:, 0] * np.sqrt(t.xq_norm2), rtol=1e-12)


# ----------------------------------------------------------- exact anchors


@pytest.mark.parametrize("sampler", ["stats", "full"])
@pytest.mark.parametrize("conditional", [False, True])
def test_zero_predictor_risk_is_one_plus_sigma2(sampler, conditional):
    est = estimate_risk(Zero(), SETTING, n_prompts=50_000, seed=5, sampler=sampler, conditional=conditional)
    assert abs(est.risk - (1 + S2)) < Z1 * est.stderr
    assert est.n == 50_000


@pytest.mark.parametrize("conditional", [False, True])
@pytest.mark.parametrize("eta", [0.3, 0.88, 1.5])
def test_vanilla_gd_risk_matches_closed_form_derived_in_test(conditional, eta):
    est = estimate_risk(VanillaGD(eta), SETTING, n_prompts=50_000, seed=6, conditional=conditional)
    assert abs(est.risk - vanilla_gd_exact(eta, D, L, S2)) < Z1 * est.stderr


def test_debiased_gd_risk_matches_closed_forms_module():
    from proofs_check.closed_forms import gd_risk

    eta = eta_star(SETTING)
    est = estimate_risk(DebiasedGD(eta), SETTING, n_prompts=100_000, seed=7, conditional=True)
    assert abs(est.risk - gd_risk(eta, SETTING, debiased=True)) < Z1 * est.stderr


def test_conditional_and_plain_agree_and_conditional_is_more_precise():
    kw = dict(n_prompts=40_000, seed=8)
    plain = estimate_risk(manifold_point(), SETTING, **kw)
    cond = estimate_risk(manifold_point(), SETTING, conditional=True, **kw)
    assert abs(plain.risk - cond.risk) < Z1 * math.hypot(plain.stderr, cond.stderr)
    assert cond.stderr < plain.stderr / 2


def test_non_isotropic_zero_risk_is_trace_over_d_plus_sigma2():
    Sigma = np.diag([3.0, 1.0, 0.5, 0.5, 0.2])
    res = estimate_risks([Zero(), BayesRidge()], SETTING.replace(Sigma=Sigma), n_prompts=30_000, seed=9)
    assert res.sampler == "full"
    zero = res["zero"]
    assert abs(zero.risk - (np.trace(Sigma) / D + S2)) < Z1 * zero.stderr


# ------------------------------------------------------------ determinism


@pytest.mark.parametrize("conditional", [False, True])
@pytest.mark.parametrize("sampler", ["stats", "full"])
def test_results_are_bit_identical_across_chunk_sizes(sampler, conditional):
    from reduced_dynamics.estimation.risk import _block_size

    preds = [Zero(), manifold_point(), DebiasedGD(0.8)] + ([BayesRidge()] if sampler == "full" else [])
    B = _block_size(sampler, D, L, "single" if sampler == "stats" else "double")  # the stream these predictors get
    kw = dict(n_prompts=2 * B + 17, seed=10, sampler=sampler, conditional=conditional)  # three blocks
    first = estimate_risks(preds, SETTING, memory_budget=1, **kw)
    one_block = first.block_size * _bytes_per_prompt(sampler, D, L, len(preds) + 1, len(preds))  # MultiHead has 2 heads
    runs = [first] + [
        estimate_risks(preds, SETTING, memory_budget=mb, **kw) for mb in (2 * one_block, DEFAULT_MEMORY_BUDGET)
    ]
    assert [r.blocks_per_chunk for r in runs] == [1, 2, 3], "the budgets should give 1, 2 and 3 blocks per chunk"
    for r in runs[1:]:
        assert np.array_equal(r.mean, runs[0].mean)
        assert np.array_equal(r.cov, runs[0].cov)
        assert r.n == kw["n_prompts"]


def test_same_seed_same_numbers_other_seed_other_numbers():
    kw = dict(n_prompts=3_000)
    a = estimate_risks([Zero(), DebiasedGD(0.8)], SETTING, seed=11, **kw)
    b = estimate_risks([Zero(), DebiasedGD(0.8)], SETTING, seed=11, **kw)
    c = estimate_risks([Zero(), DebiasedGD(0.8)], SETTING, seed=12, **kw)
    assert np.array_equal(a.mean, b.mean) and np.array_equal(a.cov, b.cov)
    assert not np.any(a.mean == c.mean)


def test_block_streams_follow_the_documented_seeding():
    """Block i is drawn from Generator(SFC64(SeedSequence(seed, spawn_key=(i,)))), whatever n is.

    Rebuilt here from that contract with the public sampler: the engine's mean for n = B
    (one block) and n = 3B (three blocks) equals the mean of yq² (the zero predictor's
    loss) over the rebuilt blocks, to rounding.
    """
    from reduced_dynamics.estimation.risk import _block_size

    B = _block_size("stats", D, L, "double")

    def block(i):
        rng = np.random.Generator(np.random.SFC64(np.random.SeedSequence(13, spawn_key=(i,))))
        return sample_prompts(B, SETTING, seed=rng, stats_only=True).y_q ** 2

    blocks = [block(i) for i in range(3)]
    one = estimate_risks([Zero()], SETTING, n_prompts=B, seed=13, precision="double")
    three = estimate_risks([Zero()], SETTING, n_prompts=3 * B, seed=13, memory_budget=1, precision="double")
    assert one.mean[0] == pytest.approx(blocks[0].mean(), rel=1e-13)
    assert three.mean[0] == pytest.approx(np.concatenate(blocks).mean(), rel=1e-13)
    assert three.cov[0, 0] == pytest.approx(np.concatenate(blocks).var(ddof=1), rel=1e-11)


def test_standard_errors_are_calibrated_across_independent_seeds():
    """Reported stderr (plain, paired difference, control variate) = spread of the estimates over seeds.

    K = 400 independent runs of n = 500 prompts: the ratio of the empirical standard deviation
    of each estimator to its root-mean-square reported stderr is 1 within 4 of its own standard
    errors, sd(ratio) ≈ 1/√(2(K−1)) = 0.035 (the estimates are means of 500 losses, nearly normal).
    """
    K, n = 400, 500
    preds = {"mh": manifold_point(), "gd": VanillaGD(0.9), "zero": Zero()}
    plain, diff, cv = [], [], []
    for seed in range(1000, 1000 + K):
        r = estimate_risks(preds, SETTING, n_prompts=n, seed=seed, conditional=True)
        plain.append((r["mh"].risk, r["mh"].stderr))
        d_ = r.difference("mh", "gd")
        diff.append((d_.risk, d_.stderr))
        c = r.control_variate("gd", "zero", control_risk=1 + S2)
        cv.append((c.risk, c.stderr))
    tol = 4 / math.sqrt(2 * (K - 1))
    for name, rows in (("plain", plain), ("difference", diff), ("control variate", cv)):
        est, se = np.array(rows).T
        ratio = est.std(ddof=1) / math.sqrt(np.mean(se**2))
        assert abs(ratio - 1) < tol, (name, ratio)


# ---------------------------------------------------------------- memory


def test_plan_for_ten_million_prompts_fits_in_one_gib():
    for sampler, heads in (("stats", 7), ("full", 7)):
        plan = plan_chunks(10**7, SETTING, sampler=sampler, n_heads=heads, n_predictors=5)
        assert isinstance(plan, ChunkPlan) and plan.n_blocks == -(-(10**7) // plan.block_size)
        B, k = plan.block_size, plan.blocks_per_chunk
        assert B * k * _bytes_per_prompt(sampler, D, L, heads, 5) <= DEFAULT_MEMORY_BUDGET < 2**30


@pytest.mark.parametrize("sampler, single, double", [("stats", 3072, 2048), ("gram", 4096, 2048), ("full", 2048, 2048)])
def test_plan_block_size_is_the_one_each_stream_draws(sampler, single, double):
    """The plan's block size per precision, and the one a run of that stream records (stream version 4)."""
    assert plan_chunks(10**6, SETTING, sampler=sampler).block_size == single  # default: the single-precision stream
    assert plan_chunks(10**6, SETTING, sampler=sampler, precision="double").block_size == double
    preds = {"stats": [Zero()], "gram": [BayesRidge()], "full": [Zero()]}[sampler]
    for precision, B in (("auto", single), ("double", double)):
        if sampler == "full" and precision == "auto":
            continue  # the full sampler has no single-precision stream
        res = estimate_risks(preds, SETTING, n_prompts=10_000, seed=1, sampler=sampler, precision=precision)
        assert res.block_size == B
    with pytest.raises(ValueError, match="`precision` must be 'single' or 'double'"):
        plan_chunks(10, SETTING, precision="half")


@pytest.mark.parametrize("sampler", ["stats", "full"])
def test_measured_peak_memory_respects_budget(sampler):
    budget = 8 * 2**20
    preds = [manifold_point(), DebiasedGD(0.8), Zero()]
    tracemalloc.start()
    try:
        estimate_risks(preds, SETTING, n_prompts=60_000, seed=14, sampler=sampler, memory_budget=budget)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    unbounded = 60_000 * L * (D if sampler == "full" else 2) * 8  # one full-size array of the sample
    assert peak <= budget < unbounded


# ------------------------------------------- paired differences and CV


def test_paired_difference_is_exact_on_common_numbers_and_tighter():
    res = estimate_risks([manifold_point(), DebiasedGD(ETA_STAR)], SETTING, n_prompts=20_000, seed=15)
    diff = res.difference("multi_head", "debiased_gd")
    a, b = res["multi_head"], res["debiased_gd"]
    assert diff.risk == pytest.approx(a.risk - b.risk, abs=1e-12)
    assert diff.stderr < 0.1 * math.hypot(a.stderr, b.stderr)
    same = res.difference("multi_head", "multi_head")
    assert same.risk == 0.0 and same.stderr == 0.0


@pytest.mark.parametrize("eta", [0.4, 1.2])
def test_paired_difference_matches_exact_difference(eta):
    res = estimate_risks([VanillaGD(eta), Zero()], SETTING, n_prompts=40_000, seed=16)
    diff = res.difference("gd", "zero")
    exact = vanilla_gd_exact(eta, D, L, S2) - (1 + S2)
    assert abs(diff.risk - exact) < Z1 * diff.stderr


@pytest.mark.parametrize("conditional", [False, True])
def test_control_variate_with_zero_control_is_unbiased_and_tighter(conditional):
    """Target vanilla GD (exact risk known), control ŷ = 0 with exact risk 1 + σ²."""
    eta = 0.9
    kw = dict(n_prompts=40_000, seed=17, conditional=conditional)
    cv = control_variate_risk(VanillaGD(eta), Zero(), SETTING, control_risk=1 + S2, **kw)
    exact = vanilla_gd_exact(eta, D, L, S2)
    assert abs(cv.risk - exact) < Z1 * cv.stderr
    assert abs(cv.risk - cv.plain_risk) < Z1 * math.hypot(cv.stderr, cv.plain_stderr)
    assert cv.stderr < cv.plain_stderr
    assert cv.variance_reduction == pytest.approx(cv.plain_stderr**2 / cv.stderr**2)
    assert cv.name == "gd" and cv.control == "zero" and cv.n == kw["n_prompts"]


def test_control_variate_coefficient_is_regression_slope():
    """c* = Cov(ℓ, ℓ_c)/Var(ℓ_c); with the target as its own control, c* = 1 and the CV estimate is exact."""
    res = estimate_risks({"a": VanillaGD(0.5), "b": VanillaGD(0.5)}, SETTING, n_prompts=2_000, seed=18)
    exact = vanilla_gd_exact(0.5, D, L, S2)
    cv = res.control_variate("a", "b", control_risk=exact)
    assert cv.coefficient == pytest.approx(1.0, abs=1e-12)
    assert cv.risk == pytest.approx(exact, abs=1e-12)


def test_control_variate_with_gd_control_reduces_variance_a_lot():
    """Debiased GD at η* is a near-copy of the small-γ two-head model (Theorem 1a)."""
    res = estimate_risks([manifold_point(), DebiasedGD(ETA_STAR)], SETTING, n_prompts=20_000, seed=19)
    # the exact control value only shifts the estimate; the variance reduction depends on ρ alone
    cv = res.control_variate("multi_head", "debiased_gd", control_risk=0.0)
    assert cv.variance_reduction > 50


# ------------------------------------------------------------ validation


@pytest.mark.parametrize(
    "kwargs, param",
    [
        (dict(n_prompts=0), "n_prompts"),
        (dict(n_prompts=-5), "n_prompts"),
        (dict(n_prompts=2.5), "n_prompts"),
        (dict(setting=(5, 40, 0.1)), "setting"),
        (dict(setting=Setting(d=5, L=[10, 40], sigma2=0.1)), "setting"),
        (dict(seed=-1), "seed"),
        (dict(seed=None), "seed"),
        (dict(seed=1.5), "seed"),
        (dict(memory_budget=0), "memory_budget"),
        (dict(sampler="fast"), "sampler"),
        (dict(sampler="stats", predictors=[BayesRidge()]), "sampler"),
        (dict(sampler="stats", setting=SETTING.replace(Sigma=np.eye(D))), "sampler"),
        (dict(predictors=[]), "predictors"),
        (dict(predictors=[Zero(), Zero()]), "predictors"),
        (dict(predictors=[lambda b: 0]), "predictors"),
        (dict(predictors=[VanillaGD([0.5, 0.8])]), "predictors"),
    ],
)
def test_bad_engine_input_names_the_parameter(kwargs, param):
    kw = dict(predictors=[Zero()], setting=SETTING, n_prompts=100, seed=0)
    kw.update(kwargs)
    with pytest.raises(ValueError, match=f"`{param}`"):
        estimate_risks(kw.pop("predictors"), kw.pop("setting"), **kw)


def test_seed_may_be_a_generator_and_required():
    a = estimate_risks([Zero()], SETTING, n_prompts=500, seed=np.random.default_rng(3))
    b = estimate_risks([Zero()], SETTING, n_prompts=500, seed=a.seed)
    assert np.array_equal(a.mean, b.mean)
    with pytest.raises(TypeError, match="seed"):
        estimate_risks([Zero()], SETTING, n_prompts=500)  # type: ignore[call-arg]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "x"])
def test_bad_control_risk_names_the_parameter(bad):
    with pytest.raises(ValueError, match="`control_risk`"):
        control_variate_risk(VanillaGD(0.5), Zero(), SETTING, control_risk=bad, n_prompts=100, seed=0)


def test_unknown_name_in_result_names_the_parameter():
    res = estimate_risks([Zero()], SETTING, n_prompts=100, seed=0)
    with pytest.raises(ValueError, match="`name`"):
        res["nope"]


def test_results_are_frozen_with_read_only_arrays():
    est = estimate_risk(Zero(), SETTING, n_prompts=100, seed=0)
    with pytest.raises(AttributeError):
        est.risk = 0.0  # type: ignore[misc]
    res = estimate_risks([Zero(), DebiasedGD(0.8)], SETTING, n_prompts=100, seed=0)
    with pytest.raises(ValueError):
        res.mean[0] = 0.0
    with pytest.raises(ValueError):
        res.cov[0, 0] = 0.0
    d = res.to_dict()
    assert d["names"] == ["zero", "debiased_gd"] and d["setting"] == SETTING.to_dict() and len(d["cov"]) == 2


def test_loose_problem_keywords_are_rejected():
    """The data model travels only as a Setting: the former d=, L=, sigma2=, n= keywords are a TypeError."""
    with pytest.raises(TypeError):
        estimate_risks([Zero()], n=300, d=D, L=L, sigma2=S2, seed=4)


def test_cli_exact_column_is_the_librarys_closed_form(monkeypatch):
    """The CLI's `exact` column (the model's reference_risks) calls the library's own closed form, not the checker's."""
    import reduced_dynamics.estimation.closed_forms as cf
    from reduced_dynamics.models import reduced_model

    calls = []
    real = cf.gd_risk

    def spy(eta, setting, *, debiased):
        calls.append(debiased)
        return real(eta, setting, debiased=debiased)

    monkeypatch.setattr(cf, "gd_risk", spy)
    risks = reduced_model(SETTING, n_heads=2).reference_risks()
    assert sorted(calls) == [False, True]
    assert risks["debiased_gd"] == real(float(SETTING.eta_star), SETTING, debiased=True)
