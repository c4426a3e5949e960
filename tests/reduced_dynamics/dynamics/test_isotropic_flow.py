"""Gradient flow of the isotropic model on L̃ (``reduced_model(setting)``): patterns, convergence, stage order,
the drift law of a result, the residual Σμ law, and the starts (``initial_state``).

The integrator itself (methods, output times, statuses, batches, gradient descent, the time convention)
is tested on every model in the engine's tests (flow/test_*.py).

Tolerances used for the pattern statements (StageTolerances defaults):
dummy head if |ω_h| ≤ 0.1 max|ω| and |μ_h| ≤ 0.1 max|μ|; zero-sum if
|Σμ|/Σ|μ| < 0.05; homogeneous if (max−min)/mean of |ω_h| < 0.05.
"""

import numpy as np
import pytest

from reduced_dynamics import initial_state, integrate, reduced_model
from reduced_dynamics.dynamics.diagnostics import manifold_gap, trajectory_diagnostics
from reduced_dynamics.dynamics.manifold import drift_law_gamma, eta_star, inf_loss, single_head_optimum
from reduced_dynamics.setting import Setting

S = Setting(d=5, L=40, sigma2=0.1)


@pytest.fixture(scope="module")
def flows():
    cache = {}

    def get(H, seed, t_end=1e4):
        key = (H, seed, t_end)
        if key not in cache:
            model = reduced_model(S, n_heads=H)
            cache[key] = integrate(model, model.initial_state(seed=seed, scale=0.01), t_end=t_end)
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
    model = reduced_model(S, n_heads=1)
    res = integrate(model, model.initial_state(seed=seed, scale=0.01), t_end=1e4)
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


# ------------------------------------------------------------------ starts


def test_symmetric_init_and_the_model_start_are_the_documented_numbers():
    w0, m0 = initial_state(4, kind="symmetric", scale=0.1)
    np.testing.assert_array_equal(w0, [0.1, -0.1, 0.1, -0.1])
    model = reduced_model(S, n_heads=4)
    np.testing.assert_array_equal(model.symmetric_state(0.1), np.concatenate([w0, m0]))
    # the model's random start draws the same numbers as initial_state(kind="random")
    np.testing.assert_array_equal(model.initial_state(seed=7, scale=0.01), initial_state(4, seed=7).ravel())


def test_initial_state_needs_a_seed_when_random():
    with pytest.raises(ValueError, match="`seed`"):
        initial_state(2)
    np.testing.assert_array_equal(initial_state(2, seed=3), initial_state(2, seed=np.random.default_rng(3)))
    with pytest.raises(ValueError, match="`seed`"):
        reduced_model(S, n_heads=2).initial_state(seed=None)


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


def test_the_isotropic_model_needs_a_scalar_setting():
    with pytest.raises(ValueError, match="`setting` must be scalar"):
        reduced_model(Setting(d=5, L=[10, 40], sigma2=0.1), n_heads=2)
