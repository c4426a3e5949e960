"""Gradient flow on L̃: patterns, convergence, stage order, GD agreement, result objects, time convention, bad input.

Tolerances used for the pattern statements (StageTolerances defaults):
dummy head if |ω_h| ≤ 0.1 max|ω| and |μ_h| ≤ 0.1 max|μ|; zero-sum if
|Σμ|/Σ|μ| < 0.05; homogeneous if (max−min)/mean of |ω_h| < 0.05.
"""

import json

import numpy as np
import pytest

from reduced_dynamics import LossOverflowError
from reduced_dynamics.dynamics.diagnostics import (
    ManifoldGap,
    StageTimes,
    StageTolerances,
    TrajectoryDiagnostics,
    manifold_gap,
    stage_times,
    trajectory_diagnostics,
)
from reduced_dynamics.dynamics.flow import (
    FlowFinal,
    FlowResult,
    flow_at_times,
    gradient_descent,
    initial_state,
    integrate_flow,
)
from reduced_dynamics.dynamics.loss import approx_loss_grad, approx_loss_hessian
from reduced_dynamics.dynamics.manifold import drift_law_gamma, eta_star, inf_loss, mu_gamma, single_head_optimum
from reduced_dynamics.setting import Setting

S = Setting(d=5, L=40, sigma2=0.1)


@pytest.fixture(scope="module")
def flows():
    cache = {}

    def get(H, seed, t_end=1e4):
        key = (H, seed, t_end)
        if key not in cache:
            w0, m0 = initial_state(H, scale=0.01, seed=seed)
            cache[key] = integrate_flow(w0, m0, S, t_end=t_end)
        return cache[key]

    return get


@pytest.mark.parametrize("H", [2, 3, 4])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_flow_reaches_patterns(flows, H, seed):
    """Sign matching, zero-sum OV (|Σμ|/Σ|μ| < 1e-3 at t = 1e4), homogeneous |ω| (< 1e-3), both signs
    present, and the OV masses on the solution manifold (relative gap < 1e-2)."""
    res = flows(H, seed)
    assert res.success and res.status == 0
    diag = trajectory_diagnostics(res.omega[-1], res.mu[-1])
    assert diag.sign_matched is True
    assert diag.zero_sum_ratio < 1e-3
    assert diag.homogeneity < 1e-3
    assert diag.n_positive >= 1 and diag.n_negative >= 1
    assert (res.n_positive, res.n_negative) == (diag.n_positive, diag.n_negative)
    assert res.n_positive + res.n_negative == H
    assert manifold_gap(res.omega[-1], res.mu[-1], S).gap < 1e-2
    assert res.stage_times.all_reached


@pytest.mark.parametrize("H", [2, 3])
def test_eta_eff_approaches_eta_star(flows, H):
    """|η_eff − η*| decreases along the drift and the loss excess over inf L̃ decreases, from t = 1e2 to 1e4."""
    res = flows(H, 0)
    es, il = eta_star(S), inf_loss(S)
    idx = [np.searchsorted(res.t, t) for t in (1e2, 1e3, 1e4 - 1)]
    gaps = np.abs(res.eta_eff[idx] - es)
    excess = res.loss[idx] - il
    assert np.all(np.diff(gaps) < 0) and gaps[-1] < 5e-4
    assert np.all(excess > 0) and np.all(np.diff(excess) < 0)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_single_head_converges_to_optimum(seed):
    """H = 1 stops at a stationary point ω = ±1/√d, μ = ±√d/(1+(1+σ²)(d/L)e), with sign ω = sign μ."""
    w0, m0 = initial_state(1, scale=0.01, seed=seed)
    res = integrate_flow(w0, m0, S, t_end=1e4)
    opt = single_head_optimum(S)
    assert res.status == 1 and res.success
    assert abs(res.omega[-1, 0]) == pytest.approx(opt.omega, rel=1e-6)
    assert abs(res.mu[-1, 0]) == pytest.approx(opt.mu, rel=1e-6)
    assert np.sign(res.omega[-1, 0]) == np.sign(res.mu[-1, 0])
    assert res.loss[-1] == pytest.approx(opt.loss, abs=1e-12)
    assert res.final.inf_loss is None
    with pytest.raises(ValueError, match="`drift_law`"):
        res.drift_law()


@pytest.mark.parametrize("H", [2, 3, 4])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_stage_order(flows, H, seed):
    """Measured order: sign matching holds first, before both zero-sum OV and homogeneous |ω|.

    docs/theory.md#stages puts zero-sum OV in stage I and homogeneity in stage II. With the default 5 % tolerances
    we find the two within a factor of ~10 of each other and in either order depending on the seed
    (e.g. H = 2, seed 0: homogeneous 16.5 before zero-sum 18.7); the test records only what holds for all.
    """
    st = flows(H, seed).stage_times
    assert st.sign_matching < st.zero_sum
    assert st.sign_matching < st.homogeneous
    assert max(st.zero_sum, st.homogeneous) < 100.0


@pytest.mark.parametrize("method", ["Radau", "BDF", "LSODA", "RK45"])
def test_methods_agree(method):
    """Different solve_ivp methods give the same state at t = 50 (to 1e-5 relative)."""
    w0, m0 = initial_state(2, scale=0.01, seed=5)
    ref = integrate_flow(w0, m0, S, t_end=50.0, method="Radau", rtol=1e-10, atol=1e-13)
    res = integrate_flow(w0, m0, S, t_end=50.0, method=method, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(res.y[:, -1], ref.y[:, -1], rtol=1e-5, atol=1e-7)


def test_gradient_descent_tracks_flow():
    """GD with step η is an Euler scheme of the flow: the gap at t = 20 shrinks ~linearly in η (slope 1 ± 0.2)."""
    w0, m0 = initial_state(2, scale=0.05, seed=1)
    ref = integrate_flow(w0, m0, S, t_end=20.0, rtol=1e-11, atol=1e-13)
    errs = []
    etas = [4e-3, 2e-3, 1e-3]
    for eta in etas:
        gd = gradient_descent(w0, m0, S, eta=eta, n_steps=int(round(20.0 / eta)))
        assert gd.success and gd.t[-1] == pytest.approx(20.0)
        errs.append(np.max(np.abs(gd.y[:, -1] - ref.y[:, -1])))
    slope = np.polyfit(np.log(etas), np.log(errs), 1)[0]
    assert slope == pytest.approx(1.0, abs=0.2)


@pytest.mark.parametrize("n_steps,n_records", [(10000, 4001), (3000, 1503), (100, 101), (5, 2), (7, 3), (1, 2)])
def test_gradient_descent_records_exactly_what_is_asked(n_steps, n_records):
    """n_records distinct, increasing steps, starting at 0 and ending at n_steps (4001 of 10⁴ used to give 1503)."""
    gd = gradient_descent([0.1, -0.1], [0.1, -0.1], S, eta=1e-3, n_steps=n_steps, n_records=n_records)
    steps = np.round(gd.t / 1e-3).astype(int)
    assert len(gd.t) == n_records == gd.omega.shape[0] == gd.loss.shape[0]
    assert steps[0] == 0 and steps[-1] == n_steps and np.all(np.diff(steps) > 0)


def test_gradient_descent_too_many_records_is_a_clear_error():
    with pytest.raises(ValueError, match=r"`n_records` must be an integer in \[2, n_steps \+ 1\] = \[2, 11\]"):
        gradient_descent([0.1, -0.1], [0.1, -0.1], S, eta=1e-3, n_steps=10, n_records=12)


def test_gradient_descent_divergence_is_reported():
    res = gradient_descent([0.5, -0.5], [1.0, -1.0], S, eta=50.0, n_steps=100)
    assert res.status == 3 and not res.success and "smaller step" in res.message
    assert np.all(np.isfinite(res.loss)) and np.all(np.isfinite(res.y))


# ------------------------------------------------------------------ time convention (factor 2)


def test_authors_gradient_descent_on_half_the_loss_is_ours_at_half_the_step():
    """θ ← θ − lr ∇(L̃/2) (the authors' update) after 50 steps equals our GD with eta = lr/2, iterate by iterate."""
    lr, n = 0.02, 50
    w, m = np.array([0.05, -0.03, 0.02]), np.array([0.04, -0.01, 0.03])
    ours = gradient_descent(w, m, S, eta=lr / 2, n_steps=n, n_records=n + 1)
    for k in range(n + 1):
        np.testing.assert_allclose(ours.omega[k], w, rtol=1e-13, atol=1e-16)
        np.testing.assert_allclose(ours.mu[k], m, rtol=1e-13, atol=1e-16)
        g = approx_loss_grad(w, m, S)
        w, m = w - lr * g.omega / 2, m - lr * g.mu / 2
    assert ours.t[-1] == pytest.approx(lr * n / 2)  # our time is half of the authors' lr × steps


def test_drift_law_constant_is_8_in_the_authors_time():
    """Integrate the authors' flow dθ/dτ = −∇(L̃/2) directly (a different ODE, not a rescaled output) from a
    point on S_γ: in their time τ, γ(τ) follows (8 c d³ (pn/H) τ)^(−1/6); the constant 16 of our time is off
    there by 2^(1/6) − 1 = 12.2 %. Measured (p = n = 1): γ/law₈ − 1 = −5.6e-3, 1.2e-4, 3.7e-5 at τ = 2e3, 2e5, 2e6."""
    g0 = 0.3
    w0, m0 = np.array([g0, -g0]), np.array([mu_gamma(g0, S), -mu_gamma(g0, S)])
    taus = np.array([0.0, 2e3, 2e5, 2e6])

    def half_grad(w, m):
        g = approx_loss_grad(w, m, S)
        return g.omega / 2, g.mu / 2

    path = flow_at_times(half_grad, w0, m0, taus, hessian=lambda w, m: approx_loss_hessian(w, m, S) / 2)
    gamma = np.abs(path.omega[1:]).mean(axis=1)
    c, d = S.c, S.d
    rel8 = gamma / (8 * c * d**3 * 0.5 * taus[1:]) ** (-1 / 6) - 1
    rel16 = gamma / (16 * c * d**3 * 0.5 * taus[1:]) ** (-1 / 6) - 1
    assert np.all(np.abs(rel8[1:]) < 3e-4) and abs(rel8[-1]) < abs(rel8[0]) / 10
    np.testing.assert_allclose(rel16[1:], 2 ** (1 / 6) - 1, atol=1e-3)
    # the package's law in our time, evaluated at t = τ/2, is the same statement
    np.testing.assert_allclose(
        drift_law_gamma(taus[1:] / 2, S), (8 * c * d**3 * 0.5 * taus[1:]) ** (-1 / 6), rtol=1e-14
    )
    # and our own flow at t = τ/2 reaches the γ of the authors' flow at τ
    ours = integrate_flow(w0, m0, S, t_end=taus[-1] / 2, rtol=1e-10, atol=1e-13)
    assert ours.gamma[-1] == pytest.approx(gamma[-1], rel=1e-5)


# ------------------------------------------------------------------ result objects


def test_flow_result_fields_and_properties(flows):
    res = flows(3, 1)
    assert isinstance(res, FlowResult)
    assert repr(res).startswith("FlowResult(success=True, status=0, message=")
    T, H = res.omega.shape
    assert res.y.shape == (2 * H, T) and res.n_heads == H
    for arr in (res.t, res.omega, res.mu, res.loss, res.grad_norm, res.gamma, res.eta_eff, res.sum_mu):
        assert not arr.flags.writeable
    with pytest.raises(ValueError):
        res.omega[0, 0] = 1.0
    with pytest.raises(AttributeError):
        res.status = 5
    assert res.setting == S
    assert isinstance(res.diagnostics, TrajectoryDiagnostics) and res.diagnostics.gamma.shape == (T,)
    assert isinstance(res.stage_times, StageTimes)
    np.testing.assert_allclose(res.eta_eff, np.sum(res.omega * res.mu, axis=1), rtol=1e-15)
    np.testing.assert_allclose(res.sum_mu, np.sum(res.mu, axis=1), rtol=1e-15)
    f = res.final
    assert isinstance(f, FlowFinal)
    assert f.t == res.t[-1] and f.loss == res.loss[-1] and f.eta_star == eta_star(S) and f.inf_loss == inf_loss(S)
    assert (f.n_positive, f.n_negative) == (res.n_positive, res.n_negative)
    json.dumps(res.to_dict())
    summary = res.summary()
    json.dumps(summary)
    assert (summary["d"], summary["L"], summary["sigma2"]) == (5, 40, 0.1)
    assert set(summary["stage_times"]) == {"sign_matching", "zero_sum", "homogeneous"}


@pytest.mark.parametrize("H,seed", [(2, 0), (3, 1), (4, 3)])
def test_result_drift_law_uses_end_state_head_counts(flows, H, seed):
    """res.drift_law() is drift_law_gamma with the end state's p and n, at the output times (inf at t = 0);
    at t = 1e4 it is within 2 % of the measured γ (the law is asymptotic)."""
    res = flows(H, seed)
    p, n = res.n_positive, res.n_negative
    law = res.drift_law()
    assert law.shape == res.t.shape and law[0] == np.inf
    np.testing.assert_array_equal(law[1:], drift_law_gamma(res.t[1:], S, n_positive=p, n_negative=n))
    assert res.drift_law(5e3) == drift_law_gamma(5e3, S, n_positive=p, n_negative=n)
    assert law[-1] == pytest.approx(res.gamma[-1], rel=0.02)


@pytest.mark.parametrize("H,seed", [(3, 0), (3, 1), (4, 3), (5, 0)])
def test_residual_sum_mu_law(flows, H, seed):
    """With unequal numbers of positive (p) and negative (n) heads, Σμ does not go to 0 but settles at
    the quasi-steady value Σμ = d³ η γ⁵ (p − n) / (3H) derived in docs/theory.md#deviations, within 2 %."""
    res = flows(H, seed)
    diag = trajectory_diagnostics(res.omega[-1], res.mu[-1])
    p, n = diag.n_positive, diag.n_negative
    assert p != n, "cases are chosen with p != n (for p = n the law gives Σμ → 0)"
    pred = 5**3 * diag.eta_eff * diag.gamma**5 * (p - n) / (3 * H)
    assert diag.sum_mu == pytest.approx(pred, rel=0.02)


def test_manifold_gap_result_on_the_manifold():
    """On S_γ exactly: both masses equal μ_γ (M_minus reported positive), gap ~ 0, floats for one state."""
    g, p, n = 0.1, 2, 1
    mg = mu_gamma(g, S)
    w = np.r_[[g] * p, [-g] * n]
    m = np.r_[[mg / p] * p, [-mg / n] * n]
    gap = manifold_gap(w, m, S)
    assert isinstance(gap, ManifoldGap)
    for v in (gap.gamma, gap.mu_gamma, gap.M_plus, gap.M_minus, gap.gap):
        assert isinstance(v, float)
    assert gap.M_plus == pytest.approx(mg, rel=1e-14) and gap.M_minus == pytest.approx(mg, rel=1e-14)
    assert gap.gap < 1e-14
    # off the manifold: M_minus 10 % too small
    gap2 = manifold_gap(w, np.r_[m[:p], 0.9 * m[p:]], S)
    assert gap2.M_minus == pytest.approx(0.9 * mg, rel=1e-14) and gap2.gap == pytest.approx(0.1, rel=1e-12)
    # a trajectory gives arrays
    traj = manifold_gap(np.stack([w, w]), np.stack([m, m]), S)
    assert traj.gap.shape == (2,) and traj.M_minus.shape == (2,)


def test_trajectory_diagnostics_and_stage_times_results():
    t = np.array([0.0, 1.0, 2.0])
    W = np.array([[0.1, 0.1], [0.1, -0.1], [0.2, -0.2]])
    M = np.array([[0.1, 0.1], [0.1, -0.05], [1.0, -1.0]])
    diag = trajectory_diagnostics(W, M)
    np.testing.assert_array_equal(diag.sign_matched, [True, True, True])
    np.testing.assert_array_equal(diag.zero_sum, [False, False, True])
    assert diag.n_positive.tolist() == [2, 1, 1]
    st = stage_times(t, W, M)
    assert (st.sign_matching, st.zero_sum, st.homogeneous) == (0.0, 2.0, 0.0)
    assert st.to_dict() == {"sign_matching": 0.0, "zero_sum": 2.0, "homogeneous": 0.0}
    with pytest.raises(ValueError, match="`t`"):
        stage_times(t[:2], W, M)


def test_symmetric_init_and_determinism():
    w0, m0 = initial_state(4, kind="symmetric", scale=0.1)
    np.testing.assert_array_equal(w0, [0.1, -0.1, 0.1, -0.1])
    a = integrate_flow(*initial_state(3, seed=7), S, t_end=100.0)
    b = integrate_flow(*initial_state(3, seed=7), S, t_end=100.0)
    np.testing.assert_array_equal(a.y, b.y)


def test_initial_state_needs_a_seed_when_random():
    with pytest.raises(ValueError, match="`seed`"):
        initial_state(2)
    np.testing.assert_array_equal(initial_state(2, seed=3), initial_state(2, seed=np.random.default_rng(3)))


def test_overflow_event_terminates():
    """With a low cap on d·max ω² (0.3, i.e. |ω| ≤ 0.245 at d = 5) the transient (which reaches |ω| ≈ 0.6)
    leaves the allowed region: the run stops there with status 2 and a message saying what to try."""
    res = integrate_flow([0.01, -0.01], [0.01, -0.01], S, t_end=1e3, exponent_cap=0.3)
    assert res.status == 2 and not res.success and "overflow" in res.message
    assert 5 * np.max(res.omega[-1] ** 2) == pytest.approx(0.3, rel=1e-6)


def test_initial_state_outside_safe_region():
    with pytest.raises(LossOverflowError):
        integrate_flow([20.0, 0.0], [0.0, 0.0], S)


@pytest.mark.parametrize(
    "kwargs,param",
    [
        (dict(t_end=0.0), "`t_end`"),
        (dict(t_end=float("nan")), "`t_end`"),
        (dict(rtol=-1.0), "`rtol`"),
        (dict(method="Euler"), "`method`"),
        (dict(n_eval=1), "`n_eval`"),
    ],
)
def test_bad_flow_arguments(kwargs, param):
    base = dict(t_end=10.0)
    base.update(kwargs)
    with pytest.raises(ValueError, match=param):
        integrate_flow([0.01, -0.01], [0.01, -0.01], S, **base)


def test_flow_needs_a_scalar_setting():
    with pytest.raises(ValueError, match="`setting` must be scalar"):
        integrate_flow([0.01, -0.01], [0.01, -0.01], Setting(d=5, L=[10, 40], sigma2=0.1), t_end=10.0)


@pytest.mark.parametrize(
    "kwargs,param",
    [
        (dict(n_heads=0, seed=0), "`n_heads`"),
        (dict(n_heads=2, scale=0.0, seed=0), "`scale`"),
        (dict(n_heads=2, kind="zeros"), "`kind`"),
        (dict(n_heads=2, kind="given", omega0=[0.1], mu0=[0.1]), "`omega0`"),
        (dict(n_heads=2, seed=-1), "`seed`"),
    ],
)
def test_bad_initial_state(kwargs, param):
    with pytest.raises(ValueError, match=param):
        initial_state(**kwargs)


def test_bad_tolerances():
    with pytest.raises(ValueError, match="tolerances.zero_sum"):
        StageTolerances(zero_sum=1.5)


def test_integrator_breakdown_near_the_cap_is_an_overflow_error():
    """At d·ω0² = 562 (just under the 570 cap) exp(dωωᵀ) ~ 1e244 makes Radau's step collapse; the
    failure is reported as LossOverflowError saying what to try, not as scipy's bare ValueError."""
    with pytest.raises(LossOverflowError, match="smaller \\|omega0\\|"):
        integrate_flow([10.6, -10.6], [1.0, -1.0], S, t_end=100.0)


def test_gradient_descent_bad_initial_state():
    with pytest.raises(LossOverflowError):
        gradient_descent([20.0, 0.0], [0.0, 0.0], S, eta=0.1, n_steps=3)
    with pytest.raises(LossOverflowError, match="initial state"):
        gradient_descent([10.0], [1e200], S, eta=0.1, n_steps=3)
    with pytest.raises(ValueError, match="`omega0`"):
        gradient_descent([[0.1, 0.2]], [[0.1, 0.2]], S, eta=0.1, n_steps=3)


# ---------------------------------------------------------------- issue 9: bounded, validated, honest messages
from reduced_dynamics.dynamics import flow as _flow_module  # noqa: E402


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"t_end": 1e308}, "`t_end`"),
        ({"t_end": 2e9}, "`t_end`"),
        ({"rtol": 2.5}, "`rtol`"),
        ({"rtol": 1e308}, "`rtol`"),
        ({"rtol": 1e-16}, "`rtol`"),
        ({"atol": 2.5}, "`atol`"),
        ({"atol": 0.0}, "`atol`"),
        ({"atol": float("nan")}, "`atol`"),
        ({"n_eval": 10**7}, "`n_eval`"),
    ],
)
def test_integrate_flow_rejects_unbounded_or_bad_solver_arguments_at_once(kwargs, name):
    """Issue 9: `run --t-end 1e308` ran forever and `--rtol 2.5` was blamed on overflow; now a named ValueError."""
    with pytest.raises(ValueError, match=name):
        integrate_flow([0.1, -0.1], [0.1, -0.1], S, **kwargs)


def test_integrate_flow_rejects_a_tolerances_of_the_wrong_type_at_once():
    """Issue 9: `integrate_flow(tolerances="x")` was accepted and failed later."""
    with pytest.raises(TypeError, match="`tolerances`"):
        integrate_flow([0.1, -0.1], [0.1, -0.1], S, t_end=1.0, tolerances="x")
    with pytest.raises(TypeError, match="`tolerances`"):
        gradient_descent([0.1, -0.1], [0.1, -0.1], S, eta=0.01, n_steps=2, tolerances="x")


def test_gradient_descent_bounds_the_number_of_steps():
    with pytest.raises(ValueError, match="`n_steps`"):
        gradient_descent([0.1, -0.1], [0.1, -0.1], S, eta=0.01, n_steps=10**12)


@pytest.mark.parametrize("H", [1, 2, 3])
def test_exact_saddle_start_is_reported_stationary_with_finite_diagnostics(H):
    """Issue 9: `run --omega0 0,0 --mu0 0,0` said "reached t_end" and |Σμ|/Σ|μ| = inf (null in JSON)."""
    res = integrate_flow(np.zeros(H), np.zeros(H), S)
    assert res.status == 1 and res.success
    assert res.t.tolist() == [0.0]
    assert "saddle" in res.message if H >= 2 else "expected for H = 1" in res.message
    summary = res.summary()
    assert summary["zero_sum_ratio"] == 0.0
    numbers = [v for v in summary.values() if isinstance(v, float)]
    assert all(np.isfinite(numbers))
    assert np.isfinite(res.diagnostics.homogeneity).all()


def test_termination_messages_depend_on_the_number_of_heads():
    """Issue 9: an H = 1 run that reached t_end said "The flow of H >= 2 never stops"."""
    one = integrate_flow([0.01], [0.01], S, t_end=1.0)
    two = integrate_flow([0.01, -0.01], [0.01, -0.01], S, t_end=1.0)
    assert one.status == two.status == 0
    assert "H >= 2" not in one.message and "H = 1" in one.message
    assert "H >= 2 never stops" in two.message
    assert _flow_module.status_message(0, 1) == one.message
    for status in (0, 1, 2, 3, -1):  # one table, an entry for each kind
        assert _flow_module.status_message(status, 1) and _flow_module.status_message(status, 5)


def test_a_flow_that_exceeds_the_evaluation_budget_ends_with_status_minus_1(monkeypatch):
    """A stiff extreme setting (d = 1e5, c = 1e12) ran for minutes; now it stops at NFEV_MAX evaluations."""
    monkeypatch.setattr(_flow_module, "NFEV_MAX", 2000)
    s = Setting(d=100_000, L=1, sigma2=1e12)
    res = integrate_flow([0.01, -0.012], [0.01, -0.01], s, t_end=10.0, n_eval=20)
    assert res.status == -1 and not res.success
    assert "2000 gradient evaluations" in res.message
    assert np.all(np.isfinite(res.loss)) and res.t[0] == 0.0


def test_diagnostics_at_zero_are_defined_and_finite():
    """|Σμ|/Σ|μ| at μ = 0 is 0 (Σμ = 0 exactly) and the spread of |ω| at ω = 0 is 0: never inf."""
    diag = trajectory_diagnostics([[0.0, 0.0], [0.1, -0.1]], [[0.0, 0.0], [0.0, 0.0]])
    assert diag.zero_sum_ratio.tolist() == [0.0, 0.0]
    assert diag.homogeneity.tolist() == [0.0, 0.0]
    assert trajectory_diagnostics([0.1, -0.1], [1e300, 1e300]).zero_sum_ratio == 1.0
    with pytest.raises(ValueError, match="`omega` and `mu`"):  # Σμ overflows: an error, not inf
        trajectory_diagnostics([0.1, -0.1], [1.5e308, 1.5e308])


def test_diagnostics_reject_a_bad_tolerances_and_manifold_gap_at_gamma_zero():
    with pytest.raises(TypeError, match="`tolerances`"):
        trajectory_diagnostics([0.1, -0.1], [0.1, -0.1], tolerances=0.05)
    with pytest.raises(ValueError, match="`omega`"):
        manifold_gap([0.0, 0.0], [0.1, -0.1], S)
    with pytest.raises(ValueError, match="`t`"):
        stage_times([0.0, 1.0, 2.0], [[0.1, -0.1]] * 2, [[0.1, -0.1]] * 2)
    with pytest.raises(ValueError, match="`t`"):
        stage_times([0.0, 1j], [[0.1, -0.1]] * 2, [[0.1, -0.1]] * 2)
