"""The batched Radau IIA (``method="batch-Radau"``) against an independent tight reference, for every reduced model
with a Hessian, and its per-trajectory summaries against the single path's.

The reference is :func:`scipy.integrate.solve_ivp` (LSODA, rtol 1e-12) called here directly on the model's
gradient and Hessian (LSODA: 20-40 times cheaper here than scipy's Radau at the same tolerance, and within
1.5e-11 of it on these flows), from each start to the time the batch trajectory stopped (``t_end``, or a located event):
it shares no code with the batched integrator. Every stop state must be within 1e-6 relative (Euclidean norm)
of it; at the default tolerances the batch is far closer (~1e-9).
"""

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from reduced_dynamics import Setting, integrate, reduced_model
from reduced_dynamics.models import MODELS, model_class

S = Setting(d=5, L=40, sigma2=0.1)
#: Σ and two tasks on d = 3 (the model with Σ and several tasks: B_h of shape (3, 3), μ of shape (2,) per head)
S_SIGMA_TASKS = Setting(d=3, L=40, sigma2=0.1, Sigma=np.diag([0.5, 1.0, 2.0]), tasks=((0, 1), (1, 2)))


def _reference(model, y0, t):
    """The state at time ``t`` from ``y0``: scipy's LSODA at rtol 1e-12 with the model's own Hessian."""
    if t == 0:
        return np.asarray(y0, dtype=float)
    sol = solve_ivp(
        lambda _t, y: -model.grad(y),
        (0.0, float(t)),
        y0,
        method="LSODA",
        rtol=1e-12,
        atol=1e-14,
        jac=lambda _t, y: -model.hessian(y),
    )
    assert sol.status == 0, sol.message
    return sol.y[:, -1]


def test_every_model_with_a_hessian_is_covered():
    """The cases below are the registered models with a derived Hessian (a new one must be added here)."""
    with_hessian = sorted(name for name in MODELS if model_class(name).has_hessian)
    assert with_hessian == ["isotropic", "precond_multitask"]


@pytest.mark.parametrize(
    "case",
    [
        # H = 2 from 6 random starts to t = 1e3: seeds 4, 5 stop at the one-sign stationary point (status 1)
        dict(setting=S, H=2, n=6, t_end=1e3, scale=0.01),
        dict(setting=S, H=3, n=3, t_end=1e3, scale=0.01),
        dict(setting=S_SIGMA_TASKS, H=2, n=2, t_end=30.0, scale=0.1),
    ],
    ids=["isotropic-H2", "isotropic-H3", "precond_multitask"],
)
def test_batch_stop_states_are_within_1e6_of_a_tight_scipy_reference(case):
    model = reduced_model(case["setting"], n_heads=case["H"])
    assert model.has_hessian
    Y0 = np.array([model.initial_state(seed=s, scale=case["scale"]) for s in range(case["n"])])
    res = integrate(model, Y0, t_end=case["t_end"], method="batch-Radau")
    assert res.method == "batch-Radau" and np.all(res.success)
    for i in range(case["n"]):
        ref = _reference(model, Y0[i], res.t_stop[i])
        rel = np.linalg.norm(res.y_stop[i] - ref) / np.linalg.norm(ref)
        assert rel < 1e-6, (i, rel)
        if res.status[i] == 0:
            assert res.t_stop[i] == case["t_end"]
            # the last output time is t_end: its state is the stop state
            np.testing.assert_array_equal(res.states[i, -1], res.y_stop[i])
    if case["H"] == 2 and case["setting"] is S:
        assert res.status.tolist() == [0, 0, 0, 0, 1, 1]


def test_batch_outputs_are_the_reference_at_every_output_time():
    """The dense output at the common output times (before each trajectory's stop), against the reference there."""
    model = reduced_model(S, n_heads=2)
    Y0 = model.initial_state(seed=3, n=2, scale=0.01)
    res = integrate(model, Y0, t_end=1e3, n_times=12, method="batch-Radau")
    for i in range(2):
        sol = solve_ivp(
            lambda _t, y: -model.grad(y),
            (0.0, 1e3),
            Y0[i],
            method="LSODA",
            rtol=1e-12,
            atol=1e-14,
            jac=lambda _t, y: -model.hessian(y),
            t_eval=res.t,
        )
        keep = ~np.isnan(res.states[i, :, 0])
        assert keep.sum() >= 2
        err = np.linalg.norm(res.states[i][keep] - sol.y.T[: keep.sum()], axis=1) / np.linalg.norm(
            sol.y.T[: keep.sum()], axis=1
        )
        assert np.max(err) < 1e-6


@pytest.mark.parametrize("method", ["batch-Radau", "LSODA"])
def test_batch_summary_holds_the_single_path_summaries_of_each_trajectory(method):
    """``summary()`` of a batch lists, per trajectory, the summaries a single flow reports (loss, γ, η_eff, ...):
    the values of ``flow[i].final`` (the model's summary of the stop state; to 1e-13: the vectorised evaluation
    over the batch may round the last bit differently), and within the solvers' accuracy those of the
    single-trajectory run from the same start."""
    model = reduced_model(S, n_heads=2)
    Y0 = model.initial_state(seed=0, n=6, scale=0.01)
    res = integrate(model, Y0, t_end=1e3, method=method)
    summary = res.summary()
    keys = ("loss", "grad_norm", "gamma", "eta_eff", "sum_mu", "zero_sum_ratio", "n_positive", "n_negative")
    for i in range(6):
        final = res[i].final.values
        for k in keys + ("eta_star", "inf_loss", "n_dummy"):
            if isinstance(final[k], float):
                assert summary[k][i] == pytest.approx(final[k], rel=1e-13, abs=1e-300), (k, i)
            else:
                assert summary[k][i] == final[k], (k, i)
        single = integrate(model, Y0[i], t_end=1e3).summary()
        assert summary["status"][i] == single["status"]
        for k in ("loss", "gamma", "eta_eff"):
            assert summary[k][i] == pytest.approx(single[k], rel=1e-6, abs=1e-12), (k, i)
        assert summary["n_positive"][i] == single["n_positive"] and summary["n_negative"][i] == single["n_negative"]


def test_batch_summary_of_a_model_without_a_vectorised_summary():
    """The model with Σ and tasks summarises state by state (the generic ``summarize_many``): the same values."""
    model = reduced_model(S_SIGMA_TASKS, n_heads=2)
    Y0 = model.initial_state(seed=1, n=2, scale=0.1)
    res = integrate(model, Y0, t_end=10.0, method="batch-Radau")
    summary = res.summary()
    for i in range(2):
        final = res[i].final.values
        for k in ("loss", "grad_norm", "loss_per_task", "distance_limit", "A"):
            assert summary[k][i] == final[k], (k, i)


def test_output_times_after_0_hold_the_states_at_those_times():
    """``times`` starting after t = 0: every output is the state at its time (the start is not an output)."""
    model = reduced_model(S, n_heads=2)
    Y0 = np.array([model.initial_state(seed=s, scale=0.01) for s in range(3)])
    times = [1.0, 10.0, 100.0]
    res = integrate(model, Y0, times=times, method="batch-Radau")
    for i in range(3):
        single = integrate(model, Y0[i], times=times)
        np.testing.assert_array_equal(single.t, times)
        np.testing.assert_allclose(res.states[i], single.states, rtol=0, atol=1e-7)
        assert not np.allclose(res.states[i, 0], Y0[i], rtol=0, atol=1e-6)


def test_a_start_already_stationary_with_output_times_after_0():
    """The saddle ω = μ = 0 stops at t = 0, before the first output time 1: its trajectory is the stop alone."""
    model = reduced_model(S, n_heads=2)
    Y0 = model.pack(omega=[[0.0, 0.0], [0.01, -0.01]], mu=[[0.0, 0.0], [0.01, -0.01]])
    res = integrate(model, Y0, times=[1.0, 10.0], method="batch-Radau")
    assert res.status.tolist() == [1, 0] and res.t_stop[0] == 0.0
    assert np.isnan(res.states[0]).all()
    one = res[0]
    np.testing.assert_array_equal(one.t, [0.0])
    np.testing.assert_array_equal(one.states, Y0[:1])
