"""The one result type ``Flow`` (and ``Final``): fields, views of the model's state parts, the scalar-heads
diagnostics, frozen read-only arrays, JSON summaries, for every model."""

import json

import numpy as np
import pytest

from reduced_dynamics import Final, Flow, Setting, integrate, reduced_model
from reduced_dynamics.dynamics.diagnostics import StageTimes, TrajectoryDiagnostics
from reduced_dynamics.dynamics.manifold import eta_star, inf_loss
from reduced_dynamics.precond.covariance import example_covariance

S = Setting(d=5, L=40, sigma2=0.1)
SIGMA = Setting(d=4, L=40, sigma2=0.1, Sigma=example_covariance(Setting(d=4, L=40, sigma2=0.1), seed=0))
CASES = {
    "isotropic": (S, "approx"),
    "corrected": (S, "corrected"),
    "exact": (Setting(d=3, L=8, sigma2=0.1), "exact"),
    "precond": (SIGMA, "approx"),
    "activation": (Setting(d=5, L=40, sigma2=0.1, activation="square", activation_c=0.5), "approx"),
    "multitask": (Setting(d=4, L=40, sigma2=0.1, tasks=((0, 1, 2), (1, 2, 3))), "approx"),
    "precond_multitask": (SIGMA.replace(tasks=((0, 1, 2), (1, 2, 3))), "approx"),
}


@pytest.fixture(scope="module")
def flow_h3():
    m = reduced_model(S, n_heads=3)
    return integrate(m, m.initial_state(seed=1, scale=0.01), t_end=1e4)


def test_flow_result_fields_and_properties(flow_h3):
    res = flow_h3
    assert isinstance(res, Flow)
    assert repr(res).startswith("Flow(success=True, status=0, message=")
    T, H = res.omega.shape
    assert res.y.shape == (2 * H, T) and res.n_heads == H and res.states.shape == (T, 2 * H)
    for arr in (res.t, res.omega, res.mu, res.states, res.loss, res.grad_norm, res.gamma, res.eta_eff, res.sum_mu):
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
    assert isinstance(f, Final)
    assert f.t == res.t[-1] and f.loss == res.loss[-1] and f.eta_star == eta_star(S) and f.inf_loss == inf_loss(S)
    assert (f.n_positive, f.n_negative) == (res.n_positive, res.n_negative)
    np.testing.assert_array_equal(f.omega, res.omega[-1])
    json.dumps(res.to_dict())
    summary = res.summary()
    json.dumps(summary)
    assert (summary["d"], summary["L"], summary["sigma2"]) == (5, 40, 0.1)
    assert (summary["model"], summary["n_heads"], summary["method"]) == ("isotropic", 3, "LSODA")
    assert set(summary["stage_times"]) == {"sign_matching", "zero_sum", "homogeneous"}
    assert summary["status"] == 0 and summary["success"] is True


def test_final_has_the_documented_keys_and_refuses_others(flow_h3):
    f = flow_h3.final
    assert {"omega", "mu", "loss", "grad_norm", "gamma", "eta_eff", "eta_star", "inf_loss", "sum_mu"} <= set(f.values)
    assert {"zero_sum_ratio", "n_dummy", "n_positive", "n_negative"} <= set(f.values)
    assert f.grad_norm == pytest.approx(flow_h3.grad_norm[-1], rel=1e-12)
    assert f.to_dict()["t"] == f.t and repr(f).startswith("Final(t=")
    with pytest.raises(AttributeError, match="gamma"):
        _ = f.gamma_star


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_result_of_every_model(name):
    """The parts of the model's state as attributes of shape (T, *part), y = statesᵀ, the loss and |∇| along the
    path recomputed from the model, the final summaries, a JSON summary."""
    setting, objective = CASES[name]
    m = reduced_model(setting, n_heads=2, objective=objective)
    res = integrate(m, m.initial_state(seed=0, scale=0.05), t_end=0.2, n_times=4, rtol=1e-6, atol=1e-9)
    assert res.success and res.model is m and res.n_traj == 1 and not res.is_batch
    T = res.t.size
    for p in m.parts:
        assert getattr(res, p.name).shape == (T, *p.shape)
        np.testing.assert_array_equal(res.parts[p.name], m.unpack(res.states)[p.name])
    np.testing.assert_array_equal(res.y, res.states.T)
    np.testing.assert_allclose(res.loss, [m.loss(y) for y in res.states], rtol=1e-13)
    np.testing.assert_allclose(res.grad_norm, [np.linalg.norm(m.grad(y)) for y in res.states], rtol=1e-12)
    assert res.final.loss == pytest.approx(res.loss[-1], rel=1e-14) and res.final.t == res.t[-1]
    assert res.t_stop == res.t[-1] and np.array_equal(res.y_stop, res.states[-1])
    summary = res.summary()
    json.dumps(summary)
    assert json.loads(json.dumps(res.to_dict()))["model"] == m.describe()
    assert summary["model"] == name and summary["objective"] == objective and summary["n_heads"] == 2
    with pytest.raises(AttributeError, match="no attribute 'W0'"):
        _ = res.W0
    if not m.scalar_heads:
        with pytest.raises(ValueError, match="`diagnostics`"):
            _ = res.diagnostics
    elif name != "isotropic":
        with pytest.raises(ValueError, match="`drift_law`"):
            res.drift_law()


def test_a_batch_evaluates_its_path_values_on_first_access():
    """A batch's loss and gradient norm along the path are evaluated when first read (its summary never needs
    them): then they equal the model's loss and |∇| at every stored state, NaN after a trajectory stopped."""
    from reduced_dynamics import Setting, integrate, reduced_model

    m = reduced_model(Setting(d=5, L=40, sigma2=0.1), n_heads=2)
    f = integrate(m, m.initial_state(seed=0, scale=0.01, n=3), t_end=100.0, n_times=6, method="LSODA")
    assert f.__dict__["loss"] is None and f.__dict__["grad_norm"] is None
    f.summary()
    assert f.__dict__["loss"] is None  # the summary did not evaluate them
    for b in range(3):
        for k in range(6):
            y = f.states[b, k]
            if np.isnan(y[0]):
                assert np.isnan(f.loss[b, k]) and np.isnan(f.grad_norm[b, k])
            else:
                assert f.loss[b, k] == pytest.approx(m.loss(y), rel=1e-14)
                assert f.grad_norm[b, k] == pytest.approx(np.linalg.norm(m.grad(y)), rel=1e-12)
    assert not f.loss.flags.writeable
    k = int(np.sum(~np.isnan(f.loss[1])))  # trajectory 1: its stored outputs, then its stop state
    assert f[1].loss[:k] == pytest.approx(f.loss[1][:k], rel=1e-14)
    assert f[1].loss[-1] == pytest.approx(m.loss(f.y_stop[1]), rel=1e-14)
