"""One status table for every model and path (``Status``), and a test of each way a flow stops.

| code | meaning | paths tested here |
|---|---|---|
| 0 | reached t_end | every test that runs to the end |
| 1 | stationary | a start at the saddle (every model), the stationarity event of H = 1 (each method) |
| 2 | left the domain | the margin event (each model, each path), a solver step outside the domain |
| 3 | gradient descent diverged | a too large step |
| −1 | the solver failed | the batched Radau's step-size collapse (test_batch.py) |
| −2 | budget exhausted | each model, the LSODA, solve_ivp and batched paths |
"""

import json
import math

import numpy as np
import pytest

from reduced_dynamics import Setting, Status, gradient_descent, integrate, reduced_model
from reduced_dynamics import flow as engine
from reduced_dynamics.dynamics.loss import LossOverflowError
from reduced_dynamics.precond.covariance import example_covariance

PAPER = Setting(d=5, L=40, sigma2=0.1)
SIGMA = Setting(d=4, L=40, sigma2=0.1, Sigma=example_covariance(Setting(d=4, L=40, sigma2=0.1), seed=0))
CASES = {
    "isotropic": (PAPER, "approx"),
    "corrected": (PAPER, "corrected"),
    "exact": (Setting(d=3, L=8, sigma2=0.1), "exact"),
    "precond": (SIGMA, "approx"),
    "activation": (Setting(d=5, L=40, sigma2=0.1, activation="square", activation_c=0.5), "approx"),
    "multitask": (Setting(d=4, L=40, sigma2=0.1, tasks=((0, 1, 2), (1, 2, 3))), "approx"),
    "precond_multitask": (SIGMA.replace(tasks=((0, 1, 2), (1, 2, 3))), "approx"),
}


def _model(name, n_heads=2, **layout):
    setting, objective = CASES[name]
    return reduced_model(setting, n_heads=n_heads, objective=objective, **layout)


def test_the_status_codes_are_one_documented_table():
    assert {s.name: int(s) for s in Status} == {
        "REACHED_T_END": 0,
        "STATIONARY": 1,
        "LEFT_DOMAIN": 2,
        "DIVERGED": 3,
        "SOLVER_FAILED": -1,
        "BUDGET_EXHAUSTED": -2,
    }
    assert sorted(int(s) for s in engine.SUCCESS) == [0, 1]


def test_termination_messages_depend_on_the_number_of_heads():
    """Issue 9: an H = 1 run that reached t_end said "The flow of H >= 2 never stops"."""
    m1, m2, m5 = (reduced_model(PAPER, n_heads=H) for H in (1, 2, 5))
    one = integrate(m1, m1.state([0.01], [0.01]), t_end=1.0)
    two = integrate(m2, m2.state([0.01, -0.01], [0.01, -0.01]), t_end=1.0)
    assert one.status == two.status == 0
    assert "H >= 2" not in one.message and "H = 1" in one.message
    assert "H >= 2 heads never stops" in two.message
    assert engine.status_message(0, m1) == one.message and engine.status_message(0, m2) == two.message
    for status in Status:  # one table, an entry for each kind
        assert engine.status_message(status, m1) and engine.status_message(status, m5)
    assert m1.domain_text in engine.status_message(2, m1)
    with pytest.raises(ValueError, match="`status`"):
        engine.status_message(4, m1)


# ------------------------------------------------------------------ 1: stationary


@pytest.mark.parametrize(
    "name,H",
    [("isotropic", 1), ("isotropic", 2), ("isotropic", 3)] + [(n, 2) for n in sorted(CASES) if n != "isotropic"],
)
def test_exact_saddle_start_is_reported_stationary_with_finite_diagnostics(name, H):
    """Issue 9: `run --omega0 0,0 --mu0 0,0` said "reached t_end" and |Σμ|/Σ|μ| = inf (null in JSON). The start
    ω = μ = 0 is stationary for every model (whatever the Σ model's W): status 1 at once, the one-point
    trajectory t = [0]."""
    m = _model(name, n_heads=H)
    y0 = np.zeros(m.size)
    if name == "precond":
        y0 = m.pack(omega=np.zeros(H), mu=np.zeros(H), W=m.unpack(m.initial_state(seed=0))["W"])
    res = integrate(m, y0)
    assert res.status == 1 and res.success
    assert res.t.tolist() == [0.0] and res.states.shape == (1, m.size)
    assert ("saddle" in res.message) if H >= 2 else ("expected for H = 1" in res.message)
    summary = res.summary()
    json.dumps(summary)
    numbers = [v for v in summary.values() if isinstance(v, float)]
    assert all(np.isfinite(numbers))
    if m.scalar_heads:
        assert summary["zero_sum_ratio"] == 0.0
        assert np.isfinite(res.diagnostics.homogeneity).all()


@pytest.mark.parametrize("method", ["LSODA", "Radau", "BDF"])
def test_the_stationarity_event_is_located_on_every_path(method):
    """H = 1 converges to the kernel regressor: the flow stops where |∇L̃| crosses stationarity_tol = 1e-10."""
    m = reduced_model(PAPER, n_heads=1)
    res = integrate(m, m.initial_state(seed=0), t_end=1e4, method=method)
    assert res.status == 1 and res.success and 50 < res.t[-1] < 1e4
    assert res.grad_norm[-1] == pytest.approx(1e-10, rel=1e-3)
    assert np.all(res.grad_norm[:-1] > 1e-10)


# ------------------------------------------------------------------ 2: left the domain


@pytest.mark.parametrize("method", ["LSODA", "Radau", "BDF", "RK45"])
def test_overflow_event_terminates(method):
    """With a low cap on d·max ω² (0.3, i.e. |ω| ≤ 0.245 at d = 5) the transient (which reaches |ω| ≈ 0.6)
    leaves the allowed region: the run stops there with status 2 and a message saying what to try."""
    m = reduced_model(PAPER, n_heads=2, exponent_cap=0.3)
    res = integrate(m, m.state([0.01, -0.01], [0.01, -0.01]), t_end=1e3, method=method)
    assert res.status == 2 and not res.success and "overflow" in res.message
    assert 5 * np.max(res.omega[-1] ** 2) == pytest.approx(0.3, rel=1e-6)
    assert res.t_stop == res.t[-1] < 1e3 and np.array_equal(res.y_stop, res.states[-1])


@pytest.mark.parametrize("method", ["LSODA", "Radau"])
@pytest.mark.parametrize("name", ["corrected", "precond", "activation", "multitask", "precond_multitask"])
def test_the_margin_event_ends_every_model_at_the_edge(monkeypatch, name, method):
    """The integrator stops any model where its margin reaches 0 (status 2, the model's domain in the message),
    located on the path: here a margin 0.5 − max|μ| that the escape from the saddle crosses."""
    m = _model(name)
    monkeypatch.setattr(m, "margin", lambda y: 0.5 - float(np.max(np.abs(m.unpack(y)["mu"]))))
    res = integrate(m, m.initial_state(seed=3, scale=0.01), t_end=1e3, method=method)
    assert res.status == 2 and not res.success and m.domain_text in res.message
    assert np.max(np.abs(res.mu[-1])) == pytest.approx(0.5, rel=1e-6)
    assert np.all(np.max(np.abs(res.mu[:-1]), axis=(1, 2) if res.mu.ndim == 3 else 1) < 0.5)


def test_the_exact_model_stops_at_the_edge_of_the_evaluator(monkeypatch):
    """|ω_h| may not exceed 0.999·omega_max (the exact evaluator's range): the flow of H = 1 from (0.3, 0.5)
    passes |ω| = 0.7 on its way; with the range cut to 0.5 it stops at |ω| = 0.4995 with status 2."""
    import reduced_dynamics.models.exact as exact_model

    monkeypatch.setattr(exact_model, "omega_max", lambda setting: 0.5)
    m = reduced_model(PAPER, n_heads=1, objective="exact")
    res = integrate(m, m.state([0.3], [0.5]), t_end=100.0, n_times=20, rtol=1e-8, atol=1e-10, stationarity_tol=0)
    assert res.status == 2 and not res.success and "0.4995" in res.message
    assert abs(res.omega[-1, 0]) == pytest.approx(0.4995, rel=1e-6)
    assert res.t[-1] < 100.0 and np.all(np.isfinite(res.loss))


def test_precond_overflow_cap_is_a_margin_event(monkeypatch):
    """The Σ model's margin 0.95·MAX_EXPONENT − max ω_hω_kτ_hk: with MAX_EXPONENT lowered to 0.05 the flow from
    ω = μ = ±0.05, W = I stops on the cap 0.0475 (status 2) with a finite path."""
    import reduced_dynamics.models.precond as precond_model

    monkeypatch.setattr(precond_model, "MAX_EXPONENT", 0.05)
    m = reduced_model(Setting(d=5, L=40, sigma2=0.1, Sigma=np.eye(5)), n_heads=2)
    res = integrate(m, m.state([0.05, -0.05], [0.05, -0.05], np.eye(5)), t_end=1e3, n_times=30)
    assert res.status == 2 and not res.success and "overflow" in res.message
    assert m.exponents(res.states[-1]) == pytest.approx(0.95 * 0.05, rel=1e-6)
    assert 0 < res.t[-1] < 1e3 and np.all(np.isfinite(res.loss)) and np.all(np.isfinite(res.W))


def test_precond_overflow_inside_the_loss_is_a_status(monkeypatch):
    """With the cap of the Σ loss itself lowered below where the flow goes, the solver's step fails inside the
    formulas: the run ends with status 2 (not an exception) and a finite path."""
    import reduced_dynamics.precond.loss as loss_mod

    monkeypatch.setattr(loss_mod, "MAX_EXPONENT", 0.05)
    m = reduced_model(Setting(d=5, L=40, sigma2=0.1, Sigma=np.eye(5)), n_heads=2)
    r = integrate(m, m.state([0.05, -0.05], [0.05, -0.05], np.eye(5)), t_end=1e3, n_times=30)
    assert r.status == 2 and not r.success
    assert "overflow" in r.message and "a solver step left the domain" in r.message
    assert 0 < r.t[-1] < 1e3
    assert np.all(np.isfinite(r.loss)) and np.all(np.isfinite(r.W))


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_integrator_breakdown_near_the_cap_is_a_status():
    """At d·ω0² = 562 (just under the 570 cap) exp(dωωᵀ) ~ 1e244 makes the implicit solver's step collapse; the
    failure is a status-2 flow saying what to try (formerly a LossOverflowError), not scipy's bare ValueError."""
    m = reduced_model(PAPER, n_heads=2)
    y0 = m.state([10.6, -10.6], [1.0, -1.0])
    for method in ("LSODA", "Radau", "BDF"):
        res = integrate(m, y0, t_end=100.0, method=method)
        assert res.status == 2 and not res.success, method
        assert "smaller |ω| in `omega0`" in res.message and "a solver step left the domain" in res.message
        assert np.all(np.isfinite(res.states)) and np.all(np.isfinite(res.loss))
        # |∇L̃| ~ 4e244 there: its norm, not the overflow of its squares
        assert res.grad_norm[-1] == pytest.approx(math.hypot(*m.grad(res.states[-1])), rel=1e-12)


def test_a_gradient_that_fails_mid_run_is_a_status_not_nan(monkeypatch):
    """A gradient that overflows mid-run (injected at the 51st evaluation of the activation model's formulas)
    ends the run with status 2, the reason, and the last good state: finite, no NaN."""
    import reduced_dynamics.activation_dynamics.loss as act_loss
    import reduced_dynamics.models.activation as act_model

    # the gradient from L̃_f's terms, which act_loss_grad and the integrator's hook (_grad_one) both call
    real, calls = act_loss._grad_of_terms, {"n": 0}

    def flaky(T, mu, c):
        calls["n"] += 1
        if calls["n"] == 51:
            raise LossOverflowError("injected overflow")
        return real(T, mu, c)

    monkeypatch.setattr(act_loss, "_grad_of_terms", flaky)
    m = act_model.ActivationModel(Setting(d=5, L=40, sigma2=0.1), n_heads=2)  # f = exp through L̃_f's formulas
    r = integrate(m, m.state([0.01, -0.02], [0.01, 0.02]), t_end=100.0, rtol=1e-9, atol=1e-12, stationarity_tol=0)
    assert calls["n"] > 51
    assert r.status == 2 and not r.success and "injected overflow" in r.message
    assert r.t[-1] > 0 and np.all(np.isfinite(r.loss)) and np.all(np.isfinite(r.omega))


# ------------------------------------------------------------------ 3: gradient descent diverged


def test_gradient_descent_divergence_is_reported():
    m = reduced_model(PAPER, n_heads=2)
    res = gradient_descent(m, m.state([0.5, -0.5], [1.0, -1.0]), eta=50.0, n_steps=100)
    assert res.status == 3 and not res.success and "smaller step" in res.message
    assert np.all(np.isfinite(res.loss)) and np.all(np.isfinite(res.y))


# ------------------------------------------------------------------ -2: budget exhausted


def test_a_flow_that_exceeds_the_evaluation_budget_ends_with_status_minus_2():
    """A stiff extreme setting (d = 1e5, c = 1e12) ran for minutes; now it stops at its budget of evaluations."""
    s = Setting(d=100_000, L=1, sigma2=1e12)
    m = reduced_model(s, n_heads=2)
    res = integrate(m, m.state([0.01, -0.012], [0.01, -0.01]), t_end=10.0, n_times=20, budget=2000)
    assert res.status == -2 and not res.success
    assert "2000 gradient evaluations" in res.message and res.nfev == 2000
    assert np.all(np.isfinite(res.loss)) and res.t[0] == 0.0


def test_budget_exhaustion_of_the_exact_risk_returns_the_path_so_far():
    """The exact risk (BDF with a finite-difference Jacobian) after 12 gradient evaluations: status −2 (its
    former driver's 2), the outputs reached and the stop state."""
    m = reduced_model(PAPER, n_heads=1, objective="exact")
    res = integrate(
        m, m.state([0.3], [0.5]), t_end=100.0, n_times=20, rtol=1e-8, atol=1e-10, stationarity_tol=0, budget=12
    )
    assert res.status == -2 and not res.success and "12 gradient evaluations" in res.message
    assert 1 <= res.t.size < 20
    assert res.omega.shape == (res.t.size, 1) and res.loss.shape == (res.t.size,)
    assert res.nfev == 12


def test_the_activation_flow_stops_after_the_evaluation_budget():
    """A flow that needs more than 40 gradient evaluations stops with status −2 (its former driver's −3) and the
    last state; ``nfev`` counts the evaluations done, the budget."""
    m = reduced_model(Setting(d=5, L=40, sigma2=0.1, activation="square"), n_heads=2)
    r = integrate(
        m, m.state([0.01, -0.02], [0.01, 0.02]), t_end=1e4, rtol=1e-9, atol=1e-12, stationarity_tol=0, budget=40
    )
    assert r.status == -2 and not r.success and "40 gradient evaluations" in r.message
    assert r.nfev == 40 and np.all(np.isfinite(r.omega))


@pytest.mark.parametrize("method", ["LSODA", "Radau"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_every_model_stops_at_its_budget(name, method):
    m = _model(name)
    res = integrate(m, m.initial_state(seed=1), t_end=1e3, method=method, budget=30)
    assert res.status == Status.BUDGET_EXHAUSTED and not res.success and res.nfev == 30
    assert "30 gradient evaluations" in res.message and f"Stopped at t = {res.t[-1]:.4g}" in res.message
    assert 0 < res.t_stop == res.t[-1] < 1e3 and np.all(np.isfinite(res.states)) and np.all(np.isfinite(res.loss))
