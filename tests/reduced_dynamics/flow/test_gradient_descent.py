"""Plain gradient descent on any model (``gradient_descent(model, y0, eta=, n_steps=)``): an Euler scheme of the
flow, its records, its result, its bounds and bad starts. Its divergence (status 3): test_status.py; the time
convention against the authors' update: test_time_convention.py."""

import numpy as np
import pytest

from reduced_dynamics import Flow, LossOverflowError, Setting, gradient_descent, integrate, reduced_model
from reduced_dynamics.precond.covariance import example_covariance

S = Setting(d=5, L=40, sigma2=0.1)
SIGMA = Setting(d=4, L=40, sigma2=0.1, Sigma=example_covariance(Setting(d=4, L=40, sigma2=0.1), seed=0))
CASES = {
    "isotropic": (S, "approx"),
    "corrected": (S, "corrected"),
    "precond": (SIGMA, "approx"),
    "activation": (Setting(d=5, L=40, sigma2=0.1, activation="square", activation_c=0.5), "approx"),
    "multitask": (Setting(d=4, L=40, sigma2=0.1, tasks=((0, 1, 2), (1, 2, 3))), "approx"),
    "precond_multitask": (SIGMA.replace(tasks=((0, 1, 2), (1, 2, 3))), "approx"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_descent_tracks_flow(name):
    """GD with step η is an Euler scheme of the flow: the gap at the end (t = 20 on L̃, t = 5 on the others,
    where the state moves by O(1)) shrinks ~linearly in η (slope 1 ± 0.2). The steps 8e-3, 4e-3, 2e-3 are in the
    linear regime (measured slopes 0.978-1.003 per model, as at 4e-3, 2e-3, 1e-3, which cost twice the steps)."""
    setting, objective = CASES[name]
    m = reduced_model(setting, n_heads=2, objective=objective)
    y0 = m.initial_state(seed=1, scale=0.05)
    t_end = 20.0 if name == "isotropic" else 5.0
    ref = integrate(m, y0, t_end=t_end, rtol=1e-11, atol=1e-13, n_times=3)
    assert ref.success and np.max(np.abs(ref.states[-1] - y0)) > 0.5
    errs = []
    etas = [8e-3, 4e-3, 2e-3]
    for eta in etas:
        gd = gradient_descent(m, y0, eta=eta, n_steps=int(round(t_end / eta)))
        assert gd.success and gd.t[-1] == pytest.approx(t_end)
        errs.append(np.max(np.abs(gd.y[:, -1] - ref.y[:, -1])))
    slope = np.polyfit(np.log(etas), np.log(errs), 1)[0]
    assert slope == pytest.approx(1.0, abs=0.2)


@pytest.mark.parametrize("n_steps,n_records", [(10000, 4001), (3000, 1503), (100, 101), (5, 2), (7, 3), (1, 2)])
def test_gradient_descent_records_exactly_what_is_asked(n_steps, n_records):
    """n_records distinct, increasing steps, starting at 0 and ending at n_steps (4001 of 10⁴ used to give 1503)."""
    m = reduced_model(S, n_heads=2)
    gd = gradient_descent(m, m.state([0.1, -0.1], [0.1, -0.1]), eta=1e-3, n_steps=n_steps, n_records=n_records)
    steps = np.round(gd.t / 1e-3).astype(int)
    assert len(gd.t) == n_records == gd.omega.shape[0] == gd.loss.shape[0]
    assert steps[0] == 0 and steps[-1] == n_steps and np.all(np.diff(steps) > 0)


def test_gradient_descent_result():
    m = reduced_model(S, n_heads=2)
    y0 = m.state([0.1, -0.1], [0.1, -0.1])
    gd = gradient_descent(m, y0, eta=1e-2, n_steps=10, n_records=11)
    assert isinstance(gd, Flow) and gd.method == "gd" and np.isnan(gd.rtol) and np.isnan(gd.atol)
    assert gd.status == 0 and gd.success and gd.message == "Completed all steps."
    assert gd.nfev == 11 and gd.njev == 0 and gd.model is m
    np.testing.assert_allclose(gd.t, 1e-2 * np.arange(11), rtol=1e-15)
    np.testing.assert_array_equal(gd.states[0], y0)
    # each record is the previous one moved by −η∇L (the model's gradient)
    np.testing.assert_allclose(gd.states[1:], gd.states[:-1] - 1e-2 * m.grad(gd.states[:-1]), rtol=1e-13, atol=1e-16)


def test_gradient_descent_too_many_records_is_a_clear_error():
    m = reduced_model(S, n_heads=2)
    with pytest.raises(ValueError, match=r"`n_records` must be an integer in \[2, n_steps \+ 1\] = \[2, 11\]"):
        gradient_descent(m, m.state([0.1, -0.1], [0.1, -0.1]), eta=1e-3, n_steps=10, n_records=12)


def test_gradient_descent_bounds_the_number_of_steps():
    m = reduced_model(S, n_heads=2)
    with pytest.raises(ValueError, match="`n_steps`"):
        gradient_descent(m, m.state([0.1, -0.1], [0.1, -0.1]), eta=0.01, n_steps=10**12)
    with pytest.raises(ValueError, match="`eta`"):
        gradient_descent(m, m.state([0.1, -0.1], [0.1, -0.1]), eta=0.0, n_steps=10)


def test_gradient_descent_rejects_a_tolerances_of_the_wrong_type_at_once():
    m = reduced_model(S, n_heads=2)
    with pytest.raises(TypeError, match="`tolerances`"):
        gradient_descent(m, m.state([0.1, -0.1], [0.1, -0.1]), eta=0.01, n_steps=2, tolerances="x")


def test_gradient_descent_bad_initial_state():
    m = reduced_model(S, n_heads=2)
    with pytest.raises(LossOverflowError):
        gradient_descent(m, m.state([20.0, 0.0], [0.0, 0.0]), eta=0.1, n_steps=3)
    m1 = reduced_model(S, n_heads=1)
    with pytest.raises(LossOverflowError, match="at the start"):
        gradient_descent(m1, m1.state([10.0], [1e200]), eta=0.1, n_steps=3)
    with pytest.raises(ValueError, match="`y0`"):
        gradient_descent(m, m.state([[0.1, 0.2]], [[0.1, 0.2]]), eta=0.1, n_steps=3)
    with pytest.raises(ValueError, match="`model`"):
        gradient_descent(S, np.zeros(4), eta=0.1, n_steps=3)
