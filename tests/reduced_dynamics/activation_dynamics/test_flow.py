"""Flow of L̃_f (the activation model): end-state patterns, drift law, manifold excess Bγ², limit predictor,
effective step (docs/theory.md#other-activations). Its stops (a failed gradient, the budget) and a start
beyond the quadrature's range: the engine's flow/test_status.py and flow/test_integrate.py."""

import numpy as np
import pytest

from reduced_dynamics import integrate, reduced_model
from reduced_dynamics.activation_dynamics import flow as act_flow
from reduced_dynamics.activations import Activation
from reduced_dynamics.model.attention import ReducedModel
from reduced_dynamics.models.activation import ActivationModel
from reduced_dynamics.setting import Setting

act_limit, drift_gamma, tilt_cubic = act_flow.act_limit, act_flow.drift_gamma, act_flow.tilt_cubic
eta_claim, eta_tilt, eta_eff_regression = act_flow.eta_claim, act_flow.eta_tilt, act_flow.eta_eff_regression
manifold_profile, manifold_risk_scan = act_flow.manifold_profile, act_flow.manifold_risk_scan


def S(name="exp", c=1.0, **kw):
    return Setting(**({"d": 5, "L": 40, "sigma2": 0.1} | kw), activation=name, activation_c=c)


def _model(s, n_heads=2):
    """The activation model of ``s``; for f = exp too (L̃_f's own formulas, which the selector would hand to the
    isotropic model)."""
    return ActivationModel(s, n_heads=n_heads)


def _end_state(s, *, seed, t_end, n_heads=2, scale=0.01):
    """The flow of L̃_f from the model's seeded start, with the former driver's settings (docs/migration.md)."""
    m = _model(s, n_heads)
    y0 = m.initial_state(seed=seed, scale=scale)
    return integrate(m, y0, t_end=t_end, rtol=1e-9, atol=1e-12, n_times=60, t_first=1e-3 * t_end, stationarity_tol=0)


@pytest.mark.parametrize(
    "name, c, m3",
    [("exp", 1.0, 0.0), ("affine", 0.3, 0.0), ("square", 0.5, -0.25), ("square", 1.0, -2.0), ("tanh", 1.0, -1.0)],
)
def test_tilt_cubic_matches_the_series_of_the_tilt(name, c, m3):
    """m_3 = 3f_3 − f_1 f_2 against a numerical fit of m_f(t) − C_f t ≈ m_3 t³ at small t (quadrature route)."""
    from reduced_dynamics.activation_dynamics.loss import tilt_ratio

    act = Activation(name, c)
    assert tilt_cubic(act) == pytest.approx(m3, abs=1e-15)
    t = 1e-2
    m = tilt_ratio(t, act, method="quadrature").value
    assert (float(m) - act.c_f * t) / t**3 == pytest.approx(m3, rel=1e-3, abs=1e-3)


@pytest.mark.parametrize("name, c", [("square", 0.5), ("square", 1.0), ("tanh", 1.0)])
def test_manifold_excess_is_B_gamma_squared(name, c):
    """min_μ L̃_f on ω = (γ, −γ) exceeds 1 + σ² − η* by Bγ² (B = 4cdη*²(−m_3/C_f)): ratio → 1 like γ²."""
    s = S(name, c)
    B = act_limit(s).B
    prof = manifold_profile([0.02, 0.01, 0.005], s)
    ratio = prof.excess / (B * prof.gamma**2)
    assert abs(ratio[-1] - 1) < 1e-3
    assert abs(ratio[-1] - 1) < 0.3 * abs(ratio[0] - 1)


def test_exp_and_affine_have_no_gamma_squared_excess():
    pe = manifold_profile([0.02, 0.01], S())
    assert pe.excess[1] / pe.excess[0] == pytest.approx(1 / 16, rel=0.01)  # exp: O(γ⁴)
    pa = manifold_profile([0.01, 0.3, 3.0], S("affine", 0.2))
    np.testing.assert_allclose(pa.excess, 0.0, atol=1e-12)  # affine: flat along the manifold


@pytest.mark.parametrize("name, c", [("exp", 1.0), ("square", 1.0)])
def test_flow_end_state_patterns_and_drift_law(name, c):
    """From a small random start: sign matching, zero-sum, homogeneous; γ(t_end) = drift law within 2 %;
    the excess over 1 + σ² − η* is Bγ² (square) within 5 %."""
    s = S(name, c)
    res = _end_state(s, seed=0, t_end=1e5)
    r = res.final
    assert res.success and res.method == "LSODA" and r.t == 1e5
    assert r.sign_matched and r.zero_sum and r.homogeneous
    assert r.gamma == pytest.approx(drift_gamma(1e5, s), rel=0.02)
    if name != "exp":
        assert r.excess == pytest.approx(act_limit(s).B * r.gamma**2, rel=0.05)
    # effective step: the claim 2 C_f γ μ₊ and the exact slope μᵀT₁ both near η*; their ratio is 1 − m_3(d+2)γ²/C_f
    lim = act_limit(s)
    assert res.model.limit() == lim.to_dict()
    assert r.eta_tilt == pytest.approx(lim.eta_star, abs=2e-3)
    assert r.eta_claim / r.eta_tilt - 1 == pytest.approx(-lim.m3 * (s.d + 2) * r.gamma**2 / lim.c_f, rel=0.05, abs=1e-6)


def test_affine_flow_stops_on_the_flat_manifold():
    """affine: zero-sum and sign matching, C μᵀω = η*, loss exactly 1 + σ² − η*, but |ω_h| not equalised (flat)."""
    s = S("affine", 0.3)
    res = _end_state(s, seed=1, t_end=1e4)
    assert reduced_model(s, n_heads=2) == res.model  # the selector's model for f = affine
    r = res.final
    assert res.success and r.sign_matched and r.zero_sum
    assert r.excess == pytest.approx(0.0, abs=1e-9)
    assert 0.3 * float(res.mu[-1] @ res.omega[-1]) == pytest.approx(s.eta_star, abs=1e-6)
    assert drift_gamma(1e4, s) != drift_gamma(1e4, s)  # NaN: no drift law


def test_eta_claim_and_tilt_definitions():
    s = S("square", 0.5)
    om, mu = np.array([0.1, -0.1]), np.array([2.0, -2.0])
    assert eta_claim(om, mu, s) == pytest.approx(2 * 1.0 * 0.1 * 2.0)
    assert eta_tilt(om, mu, S()) == pytest.approx(0.4)  # exp: μᵀω


def test_eta_regression_measures_the_slope_of_a_near_debiased_gd_model():
    """Reduced model with f near the manifold at small γ: the regression slope on the debiased-GD direction
    equals C_f μᵀω within 3 SE + O(γ²) (here 2 % of η)."""
    s = S("tanh", 1.0, L=20)
    m = ReducedModel(2, 5, activation=s.activation_fn)
    p = {"omega": np.array([0.05, -0.05]), "mu": np.array([8.0, -8.0])}
    r = eta_eff_regression(m, p, s, n_prompts=4000, seed=3)
    assert r.eta == pytest.approx(0.8, abs=3 * r.stderr + 0.016)
    assert r.r2 > 0.95


def test_bad_input():
    m = _model(S(), n_heads=1)
    with pytest.raises(ValueError, match="`t_end`"):
        integrate(m, m.state([0.1], [0.1]), t_end=-1.0)
    with pytest.raises(ValueError, match="`omega`"):
        m.state([0.1, 0.2], [0.1])
    with pytest.raises(ValueError, match="`n_heads`"):
        reduced_model(S("tanh"), n_heads=65)
    with pytest.raises(ValueError, match="`gamma`"):
        manifold_profile([0.0], S())


def test_trained_report_from_a_checkpoint(tmp_path):
    """A short run with f: the report's claim is 2 C_f γ μ₊ of its extracted (ω, μ), the paired difference equals
    the difference of the two risks, and the history comes from the snapshots."""
    trained_activation_report = act_flow.trained_activation_report
    from reduced_dynamics.model.training import TrainConfig, train

    s = Setting(d=3, L=10, sigma2=0.1, activation="square", activation_c=0.5)
    train(TrainConfig(setting=s, seed=0, n_heads=2, steps=40, batch=16), out=tmp_path)
    r = trained_activation_report(tmp_path / "checkpoint.npz", n_prompts=500, seed=2)
    assert r.step == 40 and r.activation == "square" and r.c_f == 1.0
    assert r.eta_claim == pytest.approx(eta_claim(r.omega, r.mu, s))
    m, d = r.risks["model"][0], r.risks["debiased_gd_star"][0]
    assert r.risks["model-dgd_star"][0] == pytest.approx(m - d, abs=1e-12)
    assert r.claim_history == []  # no snapshot at step >= 1e4
    assert r.to_dict()["omega"] == list(r.omega)


def test_manifold_risk_scan_against_exact_risk_and_independent_monte_carlo():
    """exp: the scan's risk at its M equals the deterministic exact finite-L risk within 3 SE; square: it equals
    act_mc_risk on independent prompts within 3 combined SE; the fitted M minimises (on the same prompts, seed 2,
    the risk at 1.05 M is higher)."""
    manifold_risk_scan = act_flow.manifold_risk_scan
    from reduced_dynamics.activation_dynamics.loss import act_mc_risk
    from reduced_dynamics.exact.evaluator import exact_risk

    r = manifold_risk_scan([0.1], S(), n_prompts=20_000, seed=1)
    ex = exact_risk(np.array([0.1, -0.1]), np.array([r.M[0], -r.M[0]]), S())
    ex = float(getattr(ex, "risk", ex))
    assert abs(r.risk[0] - ex) < 3 * r.stderr[0]
    s = S("square", 1.0)
    r = manifold_risk_scan([0.146], s, n_prompts=20_000, seed=2)
    om, mu = np.array([0.146, -0.146]), np.array([r.M[0], -r.M[0]])
    mc = act_mc_risk(om, mu, s, n_prompts=20_000, seed=3)
    assert abs(r.risk[0] - mc.risk) < 3 * np.hypot(r.stderr[0], mc.stderr)
    assert act_mc_risk(om, 1.05 * mu, s, n_prompts=20_000, seed=2).risk > r.risk[0]


def test_tilt_cubic_takes_the_documented_name_or_an_activation():
    """``tilt_cubic("square")`` raised AttributeError ('str' has no attribute 'taylor'); the name is accepted."""
    from reduced_dynamics.activation_dynamics.flow import tilt_cubic
    from reduced_dynamics.activations import get_activation

    for name in ("exp", "affine", "square", "tanh"):
        assert tilt_cubic(name) == tilt_cubic(get_activation(name))
    # square: f(t) = (1 + t)^2 → f1 = 2, f2 = 1, f3 = 0, so m3 = 3·0 − 2·1 = −2 (by hand)
    assert tilt_cubic("square") == -2.0
    with pytest.raises(TypeError, match="`activation`"):
        tilt_cubic(None)
    with pytest.raises(ValueError, match="`activation`"):
        tilt_cubic("relu")


@pytest.mark.parametrize("t", [0.0, -1.0, float("nan"), float("inf")])
def test_drift_gamma_refuses_times_outside_its_law(t):
    """``drift_gamma(t=0)`` returned inf and ``t=-1`` NaN with a RuntimeWarning: now a ValueError naming `t`."""
    from reduced_dynamics.activation_dynamics.flow import drift_gamma

    with pytest.raises(ValueError, match="`t`"):
        drift_gamma(t, Setting(d=5, L=40, sigma2=0.1, activation="square"))


@pytest.mark.parametrize("mu", [None, [0.1], [float("nan"), 0.1]])
def test_eta_tilt_refuses_a_missing_or_mismatched_mu(mu):
    """``eta_tilt(mu=None)`` returned NaN silently."""
    from reduced_dynamics.activation_dynamics.flow import eta_tilt

    with pytest.raises(ValueError, match="`mu`"):
        eta_tilt([0.1, -0.1], mu, Setting(d=5, L=40, sigma2=0.1, activation="square"))


# ---------------------------------------------------------------- API contract (issue 23)


def test_manifold_scans_refuse_a_gamma_where_the_quadratic_cancels():
    """manifold_profile(1e-10): divide by zero (RuntimeWarning, NaN); at 1e-6 the excess was wrong in its first
    digit; manifold_risk_scan(1e-320) raised ZeroDivisionError."""
    for g in (1e-10, 1e-320):
        with pytest.raises(ValueError, match="`gamma`"):
            manifold_profile([0.1, g], S())
    with pytest.raises(ValueError, match="`gamma`"):
        manifold_risk_scan([1e-320], S(), n_prompts=20, seed=0)


def test_manifold_profile_overflow_names_gamma():
    """gamma = 1e300 with the square activation: an 'overflow encountered in multiply' RuntimeWarning."""
    from reduced_dynamics.dynamics.loss import LossOverflowError

    with pytest.raises(LossOverflowError, match="`gamma`"):
        manifold_profile([1e300], S("square", 0.5))


def test_manifold_risk_scan_at_one_example_is_refused():
    """L = 1 (both heads weight the one example 1): ZeroDivisionError."""
    with pytest.raises(ValueError, match="`setting.L`"):
        manifold_risk_scan([0.1], Setting(d=1, L=1, sigma2=0.0, activation="tanh"), n_prompts=20, seed=0)
