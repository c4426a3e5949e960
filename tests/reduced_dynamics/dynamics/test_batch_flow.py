"""The batched flow integrator: agreement with the single-trajectory path, per-trajectory events, results, bad input."""

import numpy as np
import pytest

from reduced_dynamics import LossOverflowError
from reduced_dynamics.dynamics.batch_flow import BATCH_MIN, FlowBatchResult, integrate_flow_batch
from reduced_dynamics.dynamics.flow import FlowResult, initial_state, integrate_flow
from reduced_dynamics.dynamics.loss import approx_loss_grad
from reduced_dynamics.dynamics.manifold import mu_gamma, single_head_optimum
from reduced_dynamics.setting import Setting

S = Setting(d=5, L=40, sigma2=0.1)


def _starts(H, seeds, scale=0.01):
    st = np.array([initial_state(H, scale=scale, seed=s) for s in seeds])
    return st[:, 0], st[:, 1]


@pytest.mark.parametrize("H", [1, 2, 3])
def test_batched_radau_matches_the_single_trajectory_reference_to_1e8(H):
    """Default t_end = 1e5: every stop state of the batched Radau within 1e-8 of integrate_flow (LSODA,
    a different method with its own error control), and (H = 2) trajectory 0 within 1e-8 of a Radau run at
    rtol 1e-12; the statuses agree (H = 2 seed 4 stops at the single-head-like stationary point)."""
    seeds = range(5)
    w0, m0 = _starts(H, seeds)
    res = integrate_flow_batch(w0, m0, S, method="radau")
    assert res.method == "radau" and res.omega.shape == (5, 400, H)
    for i in seeds:
        ref = integrate_flow(w0[i], m0[i], S)
        assert res.status[i] == ref.status
        stop = np.concatenate([res.omega_stop[i], res.mu_stop[i]])
        assert np.max(np.abs(stop - ref.y[:, -1])) < 1e-8
        if res.status[i] == 1:
            # the located event: |∇L̃| = 1e-10 at the stop state (its time is ill-conditioned: |∇L̃| decays
            # exponentially there, so a 1e-10 state error moves it by a few time units; 121.5 against 116.2)
            assert approx_loss_grad(res.omega_stop[i], res.mu_stop[i], S).norm == pytest.approx(1e-10, rel=1e-3)
    if H != 2:
        return
    tight = integrate_flow(w0[0], m0[0], S, method="Radau", rtol=1e-12, atol=1e-15)
    assert np.max(np.abs(np.concatenate([res.omega_stop[0], res.mu_stop[0]]) - tight.y[:, -1])) < 1e-8


def test_radau_and_lsoda_batches_agree_at_every_output_time():
    w0, m0 = _starts(3, range(4))
    a = integrate_flow_batch(w0, m0, S, t_end=1e3, method="radau")
    b = integrate_flow_batch(w0, m0, S, t_end=1e3, method="lsoda")
    np.testing.assert_array_equal(a.t, b.t)
    np.testing.assert_allclose(a.omega, b.omega, atol=1e-7, rtol=0)
    np.testing.assert_allclose(a.mu, b.mu, atol=1e-7, rtol=0)


@pytest.mark.parametrize("method", ["radau", "lsoda"])
def test_overflow_in_one_trajectory_is_reported_for_it_and_the_others_run_on(method):
    """Cap d·max ω² at 0.3: the start (0.01, −0.01) overshoots it in its transient (status 2, stopped on the
    cap, outputs after the stop NaN); the starts on S_γ at γ = 0.1, 0.15 drift inwards and reach t_end, equal
    to their single-trajectory runs."""
    gammas = [0.1, 0.15]
    w0 = np.array([[0.01, -0.01]] + [[g, -g] for g in gammas])
    m0 = np.array([[0.01, -0.01]] + [[mu_gamma(g, S), -mu_gamma(g, S)] for g in gammas])
    res = integrate_flow_batch(w0, m0, S, t_end=1e3, exponent_cap=0.3, method=method)
    assert res.status.tolist() == [2, 0, 0] and res.success.tolist() == [False, True, True]
    assert "overflow" in res.messages[0]
    assert 5 * np.max(res.omega_stop[0] ** 2) == pytest.approx(0.3, rel=1e-6)
    assert np.isnan(res.omega[0, -1]).all() and np.isfinite(res.omega[1:]).all()
    one = res.trajectory(0)
    assert one.status == 2 and one.t[-1] == res.t_stop[0] < 1e3
    for i in (1, 2):
        ref = integrate_flow(w0[i], m0[i], S, t_end=1e3, exponent_cap=0.3)
        assert np.max(np.abs(np.concatenate([res.omega_stop[i], res.mu_stop[i]]) - ref.y[:, -1])) < 1e-8


def test_single_head_batch_stops_at_the_optimum():
    w0, m0 = _starts(1, range(BATCH_MIN))  # auto -> the batched Radau
    res = integrate_flow_batch(w0, m0, S, t_end=1e4)
    opt = single_head_optimum(S)
    assert res.method == "radau" and (res.status == 1).all()
    np.testing.assert_allclose(np.abs(res.omega_stop[:, 0]), opt.omega, rtol=1e-6)
    np.testing.assert_allclose(np.abs(res.mu_stop[:, 0]), opt.mu, rtol=1e-6)
    assert (np.sign(res.omega_stop) == np.sign(res.mu_stop)).all()


def test_result_object_and_trajectory_view():
    w0, m0 = _starts(2, range(3))
    res = integrate_flow_batch(w0, m0, S, t_end=100.0, n_eval=50, method="radau")
    assert isinstance(res, FlowBatchResult) and res.n_traj == 3 and res.n_heads == 2
    assert repr(res).startswith("FlowBatchResult(success=3/3")
    for arr in (res.t, res.omega, res.status, res.omega_stop, res.nfev):
        assert not arr.flags.writeable
    tr = res.trajectory(1)
    assert isinstance(tr, FlowResult) and tr.method == "batch-Radau" and tr.t.shape == (50,)
    np.testing.assert_array_equal(tr.omega, res.omega[1])
    assert tr.stage_times.all_reached
    s = res.summary()
    assert np.array(s["omega0"]).shape == (3, 2) and np.array(s["mu"]).shape == (3, 2)
    np.testing.assert_array_equal(s["omega0"], w0)
    with pytest.raises(ValueError, match="`i`"):
        res.trajectory(3)


def test_saddle_start_is_stationary_at_once_and_same_input_same_output():
    w0 = np.array([[0.0, 0.0], [0.01, -0.01]])
    res = integrate_flow_batch(w0, w0, S, t_end=10.0, method="radau")
    assert res.status.tolist() == [1, 0] and res.t_stop[0] == 0.0
    again = integrate_flow_batch(w0, w0, S, t_end=10.0, method="radau")
    np.testing.assert_array_equal(res.omega, again.omega)


@pytest.mark.parametrize(
    "kwargs,param",
    [
        (dict(t_end=0.0), "`t_end`"),
        (dict(t_end=2e9), "`t_end`"),
        (dict(rtol=5.0), "`rtol`"),
        (dict(atol=0.0), "`atol`"),
        (dict(n_eval=1), "`n_eval`"),
        (dict(method="Radau5"), "`method`"),
        (dict(exponent_cap=1e3), "`exponent_cap`"),
        (dict(stationarity_tol=-1.0), "`stationarity_tol`"),
    ],
)
def test_bad_arguments_are_named(kwargs, param):
    with pytest.raises(ValueError, match=param):
        integrate_flow_batch([[0.01, -0.01]], [[0.01, -0.01]], S, **kwargs)


def test_bad_states():
    with pytest.raises(ValueError, match="`omega0`"):
        integrate_flow_batch([0.01, -0.01], [0.01, -0.01], S)
    with pytest.raises(ValueError, match="`omega0` and `mu0`"):
        integrate_flow_batch([[0.01, -0.01]], [[0.01, -0.01, 0.0]], S)
    with pytest.raises(LossOverflowError, match="row 1"):
        integrate_flow_batch([[0.01, -0.01], [20.0, 0.0]], [[0.0, 0.0], [0.0, 0.0]], S)
    with pytest.raises(ValueError, match="`setting` must be scalar"):
        integrate_flow_batch([[0.01, -0.01]], [[0.01, -0.01]], Setting(d=5, L=[10, 40], sigma2=0.1))


@pytest.mark.parametrize("method", ["radau", "lsoda"])
def test_a_solver_breakdown_in_one_trajectory_does_not_kill_the_others(method):
    """d·ω0² = 562 (just under the cap) makes the stiff solvers break down (integrate_flow raises there); in a
    batch that trajectory ends with status -1 and a message saying so, the other one reaches t_end."""
    w0 = np.array([[10.6, -10.6], [0.01, -0.01]])
    m0 = np.array([[1.0, -1.0], [0.01, -0.01]])
    res = integrate_flow_batch(w0, m0, S, t_end=100.0, method=method)
    assert res.status.tolist() == [-1, 0] and res.success.tolist() == [False, True]
    assert "failed" in res.messages[0] and np.isfinite(res.omega_stop).all()
    ref = integrate_flow(w0[1], m0[1], S, t_end=100.0)
    assert np.max(np.abs(np.concatenate([res.omega_stop[1], res.mu_stop[1]]) - ref.y[:, -1])) < 1e-8
