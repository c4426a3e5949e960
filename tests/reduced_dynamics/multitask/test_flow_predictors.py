"""Multi-task flow, head roles, limit predictors and per-task risks; the N-output attention model."""

from __future__ import annotations

import numpy as np
import pytest

from reduced_dynamics import Setting, integrate, reduced_model
from reduced_dynamics.exact.expansion import dgd_risk
from reduced_dynamics.multitask.attention import (
    extract_reduced,
    init_mt_attention,
    mt_attention_loss_grad,
    mt_attention_predict,
    train_mt_attention,
)
from reduced_dynamics.multitask.flow import antipodal_pairs, classify_heads, role_frequencies, role_kind
from reduced_dynamics.multitask.loss import mt_gradient, support_mask
from reduced_dynamics.multitask.predictors import (
    limit_predictor,
    per_task_risks,
    reduced_mt_predict,
    sample_mt_prompts,
    support_dgd_weights,
    support_ridge_predict,
    weighted_dgd_predict,
)

PAPER = Setting.paper_multitask()


def _flow(H, seed, t_end=2e4, s=PAPER):
    """The multi-task flow from the model's seeded start of scale 0.01 to ``t_end`` (docs/migration.md)."""
    m = reduced_model(s, n_heads=H)
    assert m.name == "multitask"
    return integrate(m, m.initial_state(seed=seed, scale=0.01), times=[t_end], stationarity_tol=0)


@pytest.mark.parametrize("H, regime", [(1, "kernel"), (2, "shared"), (3, "per-task")])
def test_flow_end_state_reaches_limit_predictor(H, regime):
    """The flow's effective weights and loss approach the regime's limit (derived independently)."""
    res = _flow(H, seed=7)
    f = res.final
    lim = limit_predictor(H, PAPER)
    assert res.success and res.t.tolist() == [2e4] and lim.regime == regime
    assert np.abs(f.A - lim.A).max() < 0.02
    np.testing.assert_allclose(f.loss_per_task, lim.loss_per_task, rtol=0.01)
    assert tuple(f.roles) == classify_heads(f.omega, f.mu, PAPER)
    if H >= 2:  # debiased: the OV weights of each task sum to ~0
        assert np.abs(f.mu.sum(axis=0)).max() < 0.05 * np.abs(f.mu).max()


def test_per_task_limit_is_support_dgd_and_h2_is_shared_weighted():
    lim3, lim2 = limit_predictor(3, PAPER), limit_predictor(2, PAPER)
    eta = 1 / (1 + PAPER.c * 4)
    np.testing.assert_allclose(lim3.A, support_mask(PAPER) * eta, rtol=1e-14)
    # H = 2: rank one, the same weights for both tasks by symmetry, shared features weighted more
    assert np.linalg.matrix_rank(lim2.A, tol=1e-6) == 1
    a = lim2.A[0]
    assert a[2] == pytest.approx(a[3], rel=1e-6) and a[2] > a[0] * 1.05
    assert lim2.loss_per_task.sum() > lim3.loss_per_task.sum()


def test_the_model_start_is_one_draw_of_heads_by_features_and_tasks():
    """``initial_state(seed=, scale=)``: one (H, d + N) standard-normal draw times scale, ω the first d columns
    (the numbers of the former multi-task start, so seeded runs keep their starts)."""
    m = reduced_model(PAPER, n_heads=3)
    z = 0.01 * np.random.default_rng(5).standard_normal((3, PAPER.d + PAPER.n_tasks))
    np.testing.assert_array_equal(m.initial_state(seed=5, scale=0.01), m.state(z[:, : PAPER.d], z[:, PAPER.d :]))


def test_four_heads_form_two_antipodal_pairs_and_three_heads_none():
    r4 = _flow(4, 1).final
    assert antipodal_pairs(r4.omega, r4.mu) == 2
    r3 = _flow(3, 1).final
    assert antipodal_pairs(r3.omega, r3.mu) == 0


@pytest.mark.parametrize(
    "omega, mu, roles",
    [
        ([[0.1] * 4 + [0, 0], [-0.1] * 4 + [0, 0]], [[3, 0], [-3, 0]], ("T1+", "T1-")),
        ([[0.1] * 6, [0.0] * 6], [[2, -2], [1, 1]], ("T1+T2-", "dummy")),
        ([[0.1] * 6], [[2, 2]], ("T1+T2+",)),
        ([[0.1] * 6, [0.1] * 6], [[1, 0.05], [-1, -1]], ("T1+", "T1-T2-")),
    ],
)
def test_classify_heads_hand_cases(omega, mu, roles):
    assert classify_heads(np.array(omega), np.array(mu), PAPER) == roles


def test_role_kind():
    assert [role_kind(x) for x in ("dummy", "T2-", "T1+T2-", "T1-T2-")] == [
        "dummy",
        "dedicated",
        "superposed",
        "shared",
    ]


def test_role_frequencies_small_run_counts_every_seed():
    rf = role_frequencies(3, PAPER, n_seeds=2, seed=0, t_end=500.0)
    assert sum(rf.patterns.values()) == 2 and rf.failures == 0
    assert sum(rf.kinds.values()) == pytest.approx(1.0)
    assert rf.omega.shape == (2, 3, 6) and rf.mu.shape == (2, 3, 2)


def test_support_dgd_risk_matches_single_task_closed_form():
    """Debiased GD on S_n is the single-task problem at d = |S_n|: Monte Carlo vs the exact closed form."""
    s = Setting(d=5, L=20, sigma2=0.1, tasks=((0, 1), (1, 2, 3, 4)))
    A = support_dgd_weights(s)
    res = per_task_risks({"dgd": lambda p: weighted_dgd_predict(p, A)}, s, n_prompts=20_000, seed=3)
    for n, S in enumerate(s.supports):
        exact = dgd_risk(A[n].max(), Setting(d=len(S), L=20, sigma2=0.1))
        assert abs(res.risk[0, n] - exact) < 3.5 * res.stderr[0, n]


def test_reduced_prediction_tends_to_weighted_dgd_as_omega_shrinks():
    """ŷ(γΩ, M/γ) - weighted dGD(MᵀΩ) = O(γ) per prompt when Σ_h μ_n = 0 (second order cancels only for pairs)."""
    rng = np.random.default_rng(2)
    Om, M = rng.standard_normal((3, 6)), rng.standard_normal((3, 2))
    M -= M.mean(axis=0)
    p = sample_mt_prompts(200, PAPER, seed=4)
    ref = weighted_dgd_predict(p, M.T @ Om)
    errs = [np.sqrt(np.mean((reduced_mt_predict(p, g * Om, M / g, PAPER) - ref) ** 2)) for g in (0.01, 0.005)]
    assert errs[0] < 0.05 and 1.8 < errs[0] / errs[1] < 2.2


def test_prompt_moments():
    p = sample_mt_prompts(40_000, PAPER, seed=0)
    var = p.yq.var(axis=0)
    np.testing.assert_allclose(var, 1 + PAPER.sigma2, rtol=0.03)
    # the tasks share features 3, 4: cov(y1, y2) = E[β1ᵀβ2-overlap] = 0 (independent tasks)
    assert abs(np.corrcoef(p.yq.T)[0, 1]) < 0.02


def test_ridge_on_support_beats_dgd_and_is_below_zero_predictor():
    A = support_dgd_weights(PAPER)
    res = per_task_risks(
        {"ridge": lambda p: support_ridge_predict(p, PAPER), "dgd": lambda p: weighted_dgd_predict(p, A)},
        PAPER,
        n_prompts=4000,
        seed=1,
        keep_losses=True,
    )
    for n in range(2):
        diff = res.difference("ridge", "dgd", n)
        assert diff.risk + 4 * diff.stderr < 0


def test_attention_gradient_matches_finite_differences():
    m = init_mt_attention(2, PAPER, init_scale=0.3, seed=1)
    p = sample_mt_prompts(5, PAPER, seed=2)
    g = mt_attention_loss_grad(m, p, PAPER)
    rng = np.random.default_rng(0)
    for field, shape in (("KQ", m.KQ.shape), ("OV", m.OV.shape)):
        for _ in range(3):
            idx = tuple(int(rng.integers(k)) for k in shape)
            vals = []
            for sgn in (1, -1):
                arr = getattr(m, field).copy()
                arr[idx] += sgn * 1e-6
                kw = {"KQ": m.KQ, "OV": m.OV, field: arr}
                mm = type(m)(**kw)
                vals.append(float(((mt_attention_predict(mm, p, PAPER) - p.yq) ** 2).sum() / 5))
            assert (vals[0] - vals[1]) / 2e-6 == pytest.approx(getattr(g, field)[idx], rel=1e-5, abs=1e-8)


def test_attention_on_reduced_circuits_equals_reduced_model():
    """KQ = diag(ω) on the x-block, OV = μ on the y-entries: the full model is the reduced model."""
    rng = np.random.default_rng(5)
    om, mu = 0.3 * rng.standard_normal((3, 6)), rng.standard_normal((3, 2))
    KQ = np.zeros((3, 8, 6))
    OV = np.zeros((3, 2, 8))
    for h in range(3):
        KQ[h, :6, :6] = np.diag(om[h])
        OV[h, [0, 1], [6, 7]] = mu[h]
    model = type(init_mt_attention(1, PAPER, seed=0))(KQ=KQ, OV=OV)
    p = sample_mt_prompts(50, PAPER, seed=6)
    np.testing.assert_allclose(mt_attention_predict(model, p, PAPER), reduced_mt_predict(p, om, mu, PAPER), rtol=1e-12)
    ex = extract_reduced(model, PAPER)
    np.testing.assert_allclose(ex.omega, om) and np.testing.assert_allclose(ex.mu, mu)
    assert ex.kq_offdiag_rel == 0 and ex.ov_offdiag_rel == 0


def test_training_is_deterministic_and_decreases_loss():
    a = train_mt_attention(2, PAPER, steps=300, seed=0, batch=64, lr=3e-3)
    b = train_mt_attention(2, PAPER, steps=300, seed=0, batch=64, lr=3e-3)
    np.testing.assert_array_equal(a.model.KQ, b.model.KQ)
    assert a.success and a.losses[-50:].mean() < 0.9 * a.losses[:50].mean()


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: reduced_model(PAPER, n_heads=0), "`n_heads`"),
        (lambda: reduced_model(PAPER, n_heads=2).initial_state(seed=None), "`seed`"),
        (lambda: integrate(reduced_model(PAPER, n_heads=2), np.zeros(16), t_end=-1), "`t_end`"),
        (lambda: integrate(reduced_model(PAPER, n_heads=2), np.zeros(16), times=[-1.0]), "`times`"),
        (lambda: reduced_model(PAPER, n_heads=2).state(np.zeros((2, 5)), np.zeros((2, 2))), "`omega`"),
        (lambda: classify_heads(np.zeros((2, 6)), np.zeros((2, 2)), PAPER, rel_tol=2), "`rel_tol`"),
        (lambda: sample_mt_prompts(0, PAPER, seed=0), "`n_prompts`"),
        (lambda: per_task_risks({}, PAPER, n_prompts=10, seed=0), "`predictors`"),
        (lambda: train_mt_attention(2, PAPER, steps=0, seed=0), "`steps`"),
        (lambda: weighted_dgd_predict(sample_mt_prompts(2, PAPER, seed=0), np.zeros((3, 6))), "`A`"),
    ],
)
def test_bad_input_raises_naming_parameter(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_gradient_zero_at_origin_is_a_saddle_for_h2():
    g = mt_gradient(np.zeros((2, 6)), np.zeros((2, 2)), PAPER)
    assert np.all(g.omega == 0) and np.all(g.mu == 0)


@pytest.mark.parametrize("t_end", [1e300, 1e30, 1e13, 1e-320, 5e-324, 0.0, -1.0, float("nan"), float("inf")])
def test_role_frequencies_t_end_outside_the_engines_range_is_named(t_end):
    """t_end = 1e300, 1e30 or 1e-320 hung (issue 23), then named the engine's `times`: the one error names
    `t_end` and its range, before any flow runs."""
    import time

    from reduced_dynamics.multitask.flow import role_frequencies

    s = Setting(d=6, L=40, sigma2=0.1, tasks=((0, 1, 2, 3), (2, 3, 4, 5)))
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="`t_end`") as err:
        role_frequencies(3, s, n_seeds=2, seed=0, t_end=t_end)
    assert "`times`" not in str(err.value) and time.perf_counter() - t0 < 1.0


def test_limit_predictor_large_factorisations_use_limited_memory(monkeypatch):
    """With 64 tasks and 64 heads the shared-regime factorisation has 8064 variables: BFGS's dense inverse Hessian
    (0.5 GB a copy) ran out of memory inside `train`. From LBFGS_FROM variables on L-BFGS-B is used; on a problem
    both can solve (8 tasks, 4 heads: 51 variables) the two reach the same minimum (to 1e-10 relative)."""
    import reduced_dynamics.multitask.predictors as P

    s = Setting(d=9, L=40, sigma2=0.1, tasks=tuple((i, i + 1) for i in range(8)))
    dense = P.limit_predictor(4, s)
    monkeypatch.setattr(P, "LBFGS_FROM", 0)
    limited = P.limit_predictor(4, s)
    assert dense.regime == limited.regime == "shared"
    assert limited.loss_per_task.sum() == pytest.approx(dense.loss_per_task.sum(), rel=1e-10)
    np.testing.assert_allclose(limited.A, dense.A, atol=1e-5)


def test_limit_predictor_one_head_at_a_huge_noise_is_a_named_refusal():
    """At σ² = 1e12 the one-head minimisation of L̃ stepped ω past exp's range (a ValueError blaming `omega`, which
    `risk --tasks --sigma2 1e12` printed as `--omega`) or ended above the μ = 0 loss: a ValueError naming `sigma2`.
    At σ² = 1e4 it still answers, below the μ = 0 loss 1 + σ² per task."""
    s = Setting(d=6, L=40, sigma2=1e12, tasks=((0, 1, 2, 3), (2, 3, 4, 5)))
    with pytest.raises(ValueError, match="`sigma2`") as err:
        limit_predictor(1, s)
    assert "`omega`" not in str(err.value)
    ok = limit_predictor(1, s.replace(sigma2=1e4))
    assert np.all(ok.loss_per_task < 1 + 1e4)
