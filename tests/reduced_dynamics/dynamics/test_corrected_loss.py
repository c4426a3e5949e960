"""Tests of the exact O(1/L) expansion of the reduced model's risk (reduced_dynamics.dynamics.corrected_loss)."""

import numpy as np
import pytest

from reduced_dynamics import Flow, integrate, reduced_model
from reduced_dynamics.dynamics.corrected_loss import (
    CorrectedLossTerms,
    ManifoldCoefficients,
    McRiskEstimates,
    corrected_drift_constant,
    corrected_drift_gamma,
    corrected_eta_star,
    corrected_loss,
    corrected_loss_grad,
    corrected_loss_terms,
    corrected_manifold_coefficients,
    mc_risk_cv,
)
from reduced_dynamics.dynamics.loss import approx_loss
from reduced_dynamics.setting import Setting

D, S2 = 5, 0.1


def _corrected_flow(w0, m0, times, setting):
    """The flow of R_0 + R_1/L at ``times`` (the recipe of docs/migration.md for the former corrected driver)."""
    m = reduced_model(setting, n_heads=len(w0), objective="corrected")
    return integrate(m, m.state(w0, m0), times=times, method="Radau", rtol=1e-9, atol=1e-12, stationarity_tol=0)


def S(L):
    return Setting(d=D, L=L, sigma2=S2)


@pytest.mark.parametrize("H", [1, 2, 3, 4])
def test_gradient_matches_central_differences(H):
    rng = np.random.default_rng(H)
    for _ in range(3):
        w, m = rng.uniform(-0.4, 0.4, H), rng.normal(0, 2, H)
        g = corrected_loss_grad(w, m, S(40))
        th = np.r_[w, m]
        fd = np.empty(2 * H)
        for i in range(2 * H):
            e = np.zeros(2 * H)
            e[i] = 1e-6
            fd[i] = (corrected_loss(*np.split(th + e, 2), S(40)) - corrected_loss(*np.split(th - e, 2), S(40))) / 2e-6
        np.testing.assert_allclose(g.theta, fd, rtol=1e-6, atol=1e-7)


def test_batched_equals_single():
    rng = np.random.default_rng(0)
    W, M = rng.uniform(-0.3, 0.3, (4, 3)), rng.normal(0, 1, (4, 3))
    batch = corrected_loss(W, M, S(50))
    g = corrected_loss_grad(W, M, S(50))
    for i in range(4):
        assert batch[i] == pytest.approx(corrected_loss(W[i], M[i], S(50)), rel=1e-13)
        g1 = corrected_loss_grad(W[i], M[i], S(50))
        np.testing.assert_allclose(g.omega[i], g1.omega, rtol=1e-12)
        np.testing.assert_allclose(g.mu[i], g1.mu, rtol=1e-12)


def test_omega_and_mu_broadcast():
    """One ω against a batch of μ equals the explicitly broadcast call."""
    rng = np.random.default_rng(1)
    w, M = rng.uniform(-0.3, 0.3, 3), rng.normal(0, 1, (5, 3))
    W = np.broadcast_to(w, M.shape).copy()
    np.testing.assert_array_equal(corrected_loss(w, M, S(50)), corrected_loss(W, M, S(50)))
    np.testing.assert_array_equal(corrected_loss_grad(w, M, S(50)).omega, corrected_loss_grad(W, M, S(50)).omega)


def test_terms_and_limits():
    # R0 = σ² + (1 − μᵀω)²; at ω = 0, R1 = (1+σ²)(Σμ)² (the sample mean of y: variance (1+σ²)/L)
    terms = corrected_loss_terms([0.0, 0.0], [1.0, 0.5], S(10))
    assert isinstance(terms, CorrectedLossTerms)
    assert terms.R0 == pytest.approx(S2 + 1.0)
    assert terms.R1 == pytest.approx((1 + S2) * 1.5**2)
    # manifold expansion at fixed η: R1 = a0 + a2 γ² + a4 γ⁴ + O(γ⁶)
    eta = 0.9
    co = corrected_manifold_coefficients(eta, S(10))
    assert isinstance(co, ManifoldCoefficients)
    for p, n in [(1, 1), (2, 1), (2, 3)]:
        rem = []
        for g in (0.02, 0.04):
            M = eta / (2 * g)
            w = np.r_[[g] * p, [-g] * n]
            m = np.r_[[M / p] * p, [-M / n] * n]
            R1 = corrected_loss_terms(w, m, S(10)).R1
            rem.append((R1 - co.a0 - co.a2 * g**2 - co.a4 * g**4) / g**6)
        assert abs(rem[0] - rem[1]) < 0.1 * abs(rem[1])  # the remainder is O(γ⁶)
    # drift constant: K = 96 a4/(L η²) = (16/L)(d+2)(d+4)[(1+σ²)d + 3 + 6(1−η)/η]
    L = 200
    es = corrected_eta_star(S(L))
    K = corrected_drift_constant(S(L))
    assert K == pytest.approx(16 / L * (D + 2) * (D + 4) * ((1 + S2) * D + 3 + 6 * (1 - es) / es), rel=1e-12)


def test_corrected_eta_star_by_hand_and_broadcast():
    """η_c* = (L−1)/(L−1+(1+σ²)d); broadcasts over an array setting."""
    assert corrected_eta_star(S(40)) == pytest.approx(39 / (39 + 1.1 * 5), rel=1e-15)
    out = corrected_eta_star(Setting(d=D, L=[10, 40], sigma2=S2))
    np.testing.assert_allclose(out, [9 / (9 + 5.5), 39 / (39 + 5.5)], rtol=1e-15)
    co = corrected_manifold_coefficients(0.9, Setting(d=[[2], [5]], L=[10, 40, 50], sigma2=S2))
    assert co.a4.shape == (2, 3)


def test_array_setting_is_refused_by_the_loss():
    with pytest.raises(ValueError, match="`setting` must be scalar"):
        corrected_loss([0.1], [1.0], Setting(d=5, L=[10, 40], sigma2=0.1))


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(d=0, L=40, sigma2=0.1), "d"),
        (dict(d=5, L=0, sigma2=0.1), "L"),
        (dict(d=5, L=40, sigma2=-1.0), "sigma2"),
    ],
)
def test_invalid_problem_raises(kwargs, name):
    with pytest.raises(ValueError, match=f"`{name}`"):
        corrected_loss([0.1], [1.0], Setting(**kwargs))


def test_invalid_state_raises():
    with pytest.raises(ValueError, match="`omega`"):
        corrected_loss([0.7], [1.0], S(40))
    with pytest.raises(ValueError):
        corrected_loss([0.1, 0.2], [1.0], S(40))
    with pytest.raises(ValueError, match="`n_prompts`"):
        mc_risk_cv([([0.1], [1.0])], S(40), n_prompts=0, seed=0)
    with pytest.raises(ValueError, match="`seed`"):
        mc_risk_cv([([0.1], [1.0])], S(40), n_prompts=10, seed=-1)


def test_mc_risk_cv_seed_generator_and_result():
    """A Generator seed is accepted and reproducible; the result is frozen with one entry per state."""
    states = [([0.1], [1.0]), ([0.2, -0.1], [1.0, -0.5])]
    a = mc_risk_cv(states, S(40), n_prompts=500, seed=np.random.default_rng(3))
    b = mc_risk_cv(states, S(40), n_prompts=500, seed=np.random.default_rng(3))
    assert isinstance(a, McRiskEstimates) and a.mean.shape == a.stderr.shape == (2,)
    np.testing.assert_array_equal(a.mean, b.mean)
    assert not a.mean.flags.writeable


def test_error_against_monte_carlo_shrinks_like_inverse_L_squared():
    """corrected − MC ∝ L⁻² and L̃ − MC ∝ L⁻¹ (L = 160 → 640, errors resolved by ≥ 5 SE)."""
    states = [([0.25, -0.1], [2.0, -1.5]), ([0.2, -0.15, 0.1], [1.0, -2.0, 1.2])]
    err_c, err_a, se = {}, {}, {}
    for L, n in [(160, 60_000), (640, 30_000)]:
        mc = mc_risk_cv(states, S(L), n_prompts=n, seed=1)
        err_c[L] = np.array([corrected_loss(w, m, S(L)) - r for (w, m), r in zip(states, mc.mean)])
        err_a[L] = np.array([approx_loss(w, m, S(L)) - r for (w, m), r in zip(states, mc.mean)])
        se[L] = mc.stderr
    for L in err_c:
        assert np.all(np.abs(err_c[L]) > 5 * se[L])  # the O(1/L²) remainder is resolved
        assert np.all(np.abs(err_c[L]) < np.abs(err_a[L]) / 10)
    slope_c = np.log(np.abs(err_c[640] / err_c[160])) / np.log(4)
    slope_a = np.log(np.abs(err_a[640] / err_a[160])) / np.log(4)
    # SE of the slope ≈ 0.05 here; the long runs (scripts/corrected_drift.py) give −1.93…−2.02 at these L
    assert np.all(np.abs(slope_c + 2) < 0.3), slope_c
    assert np.all(np.abs(slope_a + 1) < 0.1), slope_a


@pytest.mark.parametrize("p, n", [(1, 1), (2, 1)])
def test_corrected_drift_law_matches_corrected_flow(p, n):
    L, g0 = 200, 0.2
    H = p + n
    eta = corrected_eta_star(S(L))
    M = eta / (2 * g0)
    w0 = np.r_[[g0] * p, [-g0] * n]
    m0 = np.r_[[M / p] * p, [-M / n] * n]
    ts = np.array([0.0, 10.0, 1e2, 1e3, 1e4, 1e5])
    path = _corrected_flow(w0, m0, ts, S(L))
    assert isinstance(path, Flow) and path.success and path.model.name == "corrected"
    np.testing.assert_array_equal(path.t, ts)
    W, Mu = path.omega, path.mu
    g = np.abs(W).mean(axis=1)
    # homogeneous |ω| and η in quasi-equilibrium at the end
    assert np.ptp(np.abs(W[-1])) < 1e-4 * g[-1]
    assert abs(W[-1] @ Mu[-1] - eta) < 1e-3
    # (a) two-term law started at γ(10) follows the flow (measured ≤ 1.6e-3)
    law = corrected_drift_gamma(ts[1:], S(L), n_positive=p, n_negative=n, gamma0=g[1], t0=ts[1])
    np.testing.assert_allclose(law, g[1:], rtol=4e-3)
    # (b) local rate: γ̇ / (−κ(Aγ⁵ + Bγ⁷)) → 1 as γ → 0 (measured 1.0031 at γ ≈ 0.125, 0.9974 at 0.085)
    co = corrected_manifold_coefficients(eta, S(L))
    kappa, A, B = 4 * p * n / H, 2 * co.a2 / (L * eta**2), 4 * co.a4 / (L * eta**2)
    for k in (-2, -1):
        gw = corrected_loss_grad(W[k], Mu[k], S(L)).omega
        rate = np.mean(-np.sign(W[k]) * gw)
        assert rate / (-kappa * (A * g[k] ** 5 + B * g[k] ** 7)) == pytest.approx(1.0, abs=1e-2)
    # (c) the γ⁴-only law (γ² term dropped) is already off by several % in this window
    law4 = corrected_drift_gamma(ts[-1], S(L), n_positive=p, n_negative=n, include_gamma2=False)
    assert 0.01 < law4 / g[-1] - 1 < 0.1


# ---------------------------------------------------------------- issue 9: no silent NaN/inf
from reduced_dynamics.dynamics import corrected_loss as _cl  # noqa: E402
from reduced_dynamics.dynamics.loss import LossOverflowError  # noqa: E402


@pytest.mark.parametrize("fn", [_cl.corrected_loss, _cl.corrected_loss_grad, _cl.corrected_loss_terms])
@pytest.mark.parametrize(
    ("omega", "mu", "setting"),
    [
        ([0.1, -0.1], [1e200, -1e200], Setting(d=5, L=40, sigma2=0.1)),  # μ overflows
        ([0.3, -0.3], [1.0, -1.0], Setting(d=100_000, L=40, sigma2=0.1)),  # (1 − 2ω²)^(−d/2) overflows
    ],
)
def test_corrected_loss_overflow_is_an_error_not_nan(fn, omega, mu, setting):
    """Issue 9: corrected_loss(_grad) returned NaN/inf for μ = 1e200; approx_loss raised. Now both raise."""
    with pytest.raises(LossOverflowError, match="`mu`"):
        fn(omega, mu, setting)


def test_corrected_loss_at_the_largest_noise_is_finite_and_sigma2_1e308_is_refused():
    big = Setting(d=5, L=40, sigma2=1e12)
    assert np.isfinite(_cl.corrected_loss([0.1, -0.1], [1.0, -1.0], big))
    with pytest.raises(ValueError, match="`sigma2`"):
        Setting(d=5, L=40, sigma2=1e308)


def test_corrected_drift_and_mc_arguments_are_named():
    with pytest.raises(ValueError, match="`setting.L`"):
        _cl.corrected_drift_gamma(10.0, Setting(d=5, L=1, sigma2=0.1), gamma0=0.1)
    with pytest.raises(ValueError, match="`eta`"):
        _cl.corrected_drift_constant(S(40), eta=0.0)
    with pytest.raises(ValueError, match="`eta`"):
        _cl.corrected_manifold_coefficients(1e300, S(40))
    with pytest.raises(ValueError, match="`gamma0`"):
        _cl.corrected_drift_gamma(10.0, S(40), gamma0=1e-320)
    with pytest.raises(ValueError, match="`states`"):
        _cl.mc_risk_cv(0.0, S(40), n_prompts=10, seed=0)
    with pytest.raises(ValueError, match="`states`"):
        _cl.mc_risk_cv([[0.1, -0.1], [0.2, -0.2]], S(40), n_prompts=10, seed=0)
    with pytest.raises(ValueError, match="`n_prompts`"):
        _cl.mc_risk_cv([([0.1, -0.1], [1.0, -1.0])], S(40), n_prompts=10**300, seed=0)
    with pytest.raises(ValueError, match="`n_prompts`"):  # the standard error needs n > dof (was NaN)
        _cl.mc_risk_cv([([0.1, -0.1], [1.0, -1.0])], S(40), n_prompts=1, seed=0, cv=False)
    with pytest.raises(ValueError, match="`setting.L`"):  # one prompt of L = 1e9 scores is 8 GB
        _cl.mc_risk_cv([([0.1, -0.1], [1.0, -1.0])], S(10**9), n_prompts=1, seed=0)
    m = reduced_model(S(40), n_heads=1, objective="corrected")
    with pytest.raises(ValueError, match="`omega`"):
        m.state(0.0, [1.0])
    with pytest.raises(ValueError, match="`rtol`"):
        integrate(m, m.state([0.1], [1.0]), times=[0.0, 1.0], method="Radau", rtol=2.5)


@pytest.mark.parametrize("cv", [True, False])
def test_mc_risk_cv_running_sums_equal_the_full_regression(cv):
    """Memory independent of n_prompts: the running normal-equation sums give the same mean and standard
    error as a least-squares fit on every per-prompt loss kept in memory (the former route), to 1e-10."""
    from reduced_dynamics.dynamics.corrected_loss import _mc_chunk

    s = Setting(d=5, L=40, sigma2=0.1)
    states = [((0.2, -0.2), (2.0, -2.0)), ((0.5,), (1.5,))]
    n, chunk = 3000, 20_000
    got = mc_risk_cv(states, s, n_prompts=n, seed=3, cv=cv, chunk_elems=chunk)
    ss = np.random.SeedSequence([3, s.L])
    parts = [[] for _ in states]
    done, m = 0, chunk // s.L
    while done < n:
        mm = min(m, n - done)
        rng = np.random.Generator(np.random.SFC64(ss.spawn(1)[0]))
        for p, o in zip(parts, _mc_chunk(rng, mm, s.d, s.L, s.sigma2, states, cv)):
            p.append(o)
        done += mm
    for i, p in enumerate(parts):
        y = np.concatenate([a for a, _ in p])
        if cv:
            X = np.concatenate([x for _, x in p])
            coef = np.linalg.lstsq(np.c_[np.ones(n), X], y, rcond=None)[0]
            y, dof = y - X @ coef[1:], 1 + X.shape[1]
        else:
            dof = 1
        assert abs(got.mean[i] - y.mean()) <= 1e-10 * abs(y.mean())
        assert abs(got.stderr[i] - y.std(ddof=dof) / np.sqrt(n)) <= 1e-10 * got.stderr[i]


def test_mc_risk_cv_memory_does_not_grow_with_n_prompts():
    """Peak traced memory at 10x the prompts stays within 1.5x (it grew 10x when every loss was kept)."""
    import tracemalloc

    s = Setting(d=5, L=40, sigma2=0.1)
    states = [((0.2, -0.2), (2.0, -2.0))]

    def peak(n):
        tracemalloc.start()
        mc_risk_cv(states, s, n_prompts=n, seed=0, chunk_elems=20_000)
        out = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return out

    assert peak(40_000) < 1.5 * peak(4_000)
