"""The one integrator on one trajectory, for every model: the methods agree with a tight reference, output
times, block rates, determinism, bad arguments and bad starts.

Stops and the status table: test_status.py; batches: test_batch.py; gradient descent: test_gradient_descent.py;
the result type: test_result.py; the time convention: test_time_convention.py.
"""

import inspect

import numpy as np
import pytest

from reduced_dynamics import LossOverflowError, Setting, integrate, reduced_model
from reduced_dynamics import flow as engine
from reduced_dynamics.precond.covariance import example_covariance

PAPER = Setting(d=5, L=40, sigma2=0.1)
SIGMA = Setting(d=4, L=40, sigma2=0.1, Sigma=example_covariance(Setting(d=4, L=40, sigma2=0.1), seed=0))

#: name -> (setting, objective); two heads each (the exact risk: d = 3, L = 8, where a gradient is cheap)
CASES = {
    "isotropic": (PAPER, "approx"),
    "corrected": (PAPER, "corrected"),
    "exact": (Setting(d=3, L=8, sigma2=0.1), "exact"),
    "precond": (SIGMA, "approx"),
    "activation": (Setting(d=5, L=40, sigma2=0.1, activation="square", activation_c=0.5), "approx"),
    "multitask": (Setting(d=4, L=40, sigma2=0.1, tasks=((0, 1, 2), (1, 2, 3))), "approx"),
    "precond_multitask": (SIGMA.replace(tasks=((0, 1, 2), (1, 2, 3))), "approx"),
}
#: the models whose flow to t = 50 costs at most a few seconds per method (not: the exact risk, ~0.1 s per
#: gradient; Σ with tasks, 36 variables: ~13 s for the four methods; the contract test checks its batched Radau
#: against LSODA)
CHEAP = sorted(n for n in CASES if n not in ("exact", "precond_multitask"))


def _model(name, n_heads=2):
    setting, objective = CASES[name]
    return reduced_model(setting, n_heads=n_heads, objective=objective)


@pytest.fixture(scope="module")
def references():
    """LSODA at rtol 1e-12, atol 1e-15 from the seed-5 start of scale 0.01 to t = 50, per model: tighter than the
    runs compared with it (1e-9, 1e-12), and 5-10x cheaper than the Radau reference at rtol 1e-10 it replaces
    (Radau builds the Jacobian by finite differences for the models without a Hessian: 3 s for precond). The
    reference is one of the four methods: each of the other three is compared with it across methods."""
    cache = {}

    def get(name):
        if name not in cache:
            m = _model(name)
            y0 = m.initial_state(seed=5, scale=0.01)
            cache[name] = (m, y0, integrate(m, y0, t_end=50.0, method="LSODA", rtol=1e-12, atol=1e-15, n_times=5))
        return cache[name]

    return get


@pytest.mark.parametrize("method", ["Radau", "BDF", "LSODA", "RK45"])
@pytest.mark.parametrize("name", CHEAP)
def test_methods_agree(references, name, method):
    """Different methods give the same state at t = 50 (to 1e-5 relative, 1e-7 absolute) as an LSODA run at
    rtol 1e-12 (the state moves by O(1) in between: the escape from the saddle and the sign matching)."""
    m, y0, ref = references(name)
    assert ref.success and np.max(np.abs(ref.states[-1] - y0)) > 0.5
    res = integrate(m, y0, t_end=50.0, method=method, rtol=1e-9, atol=1e-12, n_times=5)
    assert res.success and res.method == method and res.t[-1] == 50.0
    np.testing.assert_allclose(res.y[:, -1], ref.y[:, -1], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", sorted(CASES))
def test_same_input_same_output(name):
    m = _model(name, n_heads=3 if name == "isotropic" else 2)
    t_end, tol = (100.0, {}) if name == "isotropic" else (0.05 if name == "exact" else 1.0, dict(rtol=1e-5, atol=1e-8))
    y0 = m.initial_state(seed=7)
    a = integrate(m, y0, t_end=t_end, n_times=5, **tol)
    b = integrate(m, y0, t_end=t_end, n_times=5, **tol)
    assert a.success
    np.testing.assert_array_equal(a.y, b.y)


def test_default_method_and_tolerances_per_model():
    """Each model's default method (docs/migration.md) and the per-method default tolerances."""
    want = {"isotropic": "LSODA", "corrected": "Radau", "exact": "BDF"}
    want.update({"precond": "LSODA", "activation": "LSODA", "multitask": "LSODA", "precond_multitask": "LSODA"})
    assert {n: _model(n).default_method for n in CASES} == want
    m = _model("isotropic")
    y0 = m.initial_state(seed=0)
    assert (integrate(m, y0, t_end=1.0).rtol, integrate(m, y0, t_end=1.0).atol) == (1e-11, 1e-14)
    r = integrate(m, y0, t_end=1.0, method="Radau")
    assert (r.rtol, r.atol) == (1e-8, 1e-11)
    batch = integrate(m, np.stack([y0, -y0]), t_end=1.0, method="batch-Radau")
    assert (batch.rtol, batch.atol) == (1e-6, 1e-10)


# ------------------------------------------------------------------ output times


@pytest.mark.parametrize("name", sorted(CASES))
def test_log_spaced_default_times(name):
    """0, then n_times − 1 log-spaced times from t_first to t_end."""
    # the exact risk as in its former driver's test: H = 1 at the paper's setting, from (0.3, 0.5)
    m = reduced_model(PAPER, n_heads=1, objective="exact") if name == "exact" else _model(name)
    y0 = m.state([0.3], [0.5]) if name == "exact" else m.initial_state(seed=0)
    res = integrate(m, y0, t_end=1.0, n_times=4, t_first=0.01, rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(res.t, [0.0, 0.01, 0.1, 1.0], rtol=1e-15)
    assert res.states.shape == (4, m.size) and res.loss.shape == (4,) and res.grad_norm.shape == (4,)


def test_explicit_times_are_returned_as_given_and_the_flow_starts_at_zero():
    m = _model("isotropic")
    y0 = m.initial_state(seed=0)
    times = np.array([0.5, 1.0, 3.0])
    res = integrate(m, y0, times=times, method="Radau", rtol=1e-10, atol=1e-13)
    np.testing.assert_array_equal(res.t, times)
    # the state at 0.5 is the flow's from y0 at t = 0, not y0 itself
    full = integrate(m, y0, times=[0.0, 0.5, 1.0, 3.0], method="Radau", rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(res.states, full.states[1:], rtol=1e-8, atol=1e-12)
    assert np.max(np.abs(res.states[0] - y0)) > 1e-4


@pytest.mark.parametrize("method", ["LSODA", "Radau"])
def test_a_tiny_interval_stays_at_the_start(method):
    """Over t_end = 1e-200 the state does not move; odeint returns NaN there while reporting success (LSODA then
    hands over to Radau): a finite flow that reached t_end, not an error from evaluating NaN states."""
    m = _model("isotropic")
    y0 = m.initial_state(seed=0)
    res = integrate(m, y0, t_end=1e-200, method=method)
    assert res.status == 0 and res.t.tolist() == [0.0, 1e-200]
    np.testing.assert_array_equal(res.states, [y0, y0])


def test_a_first_time_beyond_t_end_gives_the_two_end_points():
    m = _model("isotropic")
    res = integrate(m, m.initial_state(seed=0), t_end=1.0, t_first=5.0)
    np.testing.assert_array_equal(res.t, [0.0, 1.0])


# ------------------------------------------------------------------ block rates


@pytest.mark.parametrize("name", sorted(n for n in CASES if n != "exact"))
def test_rates_scale_the_initial_velocity_of_each_block(name):
    """θ̇ = −P∇L with P = diag(r on the first block (ω, or B of Σ with tasks), 1 elsewhere): (θ(h) − θ(0))/h →
    −P∇L(θ0), at h = 1e-6 to 1e-4 relative."""
    m = _model(name)
    first = m.parts[0].name
    # Σ with tasks: its 32 entries of B at the contract test's scale 0.1 (at 0.3 the O(h) term of the difference
    # quotient reaches 1e-4 relative)
    y0 = m.initial_state(seed=2, scale=0.1 if name == "precond_multitask" else 0.3)
    h, r = 1e-6, 0.2
    res = integrate(m, y0, times=[0.0, h], rates={first: r}, method="Radau", rtol=1e-9, atol=1e-12)
    g = m.unpack(m.grad(y0))
    v = m.unpack((res.states[1] - y0) / h)
    np.testing.assert_allclose(v[first], -r * g[first], rtol=1e-4)
    for p in m.parts[1:]:
        np.testing.assert_allclose(v[p.name], -g[p.name], rtol=1e-4)


@pytest.mark.parametrize(
    "rates,param",
    [
        ({"omegaa": 0.5}, "`rates`"),
        ({"omega": 0.0}, "`rates['omega']`"),
        ({"omega": 1e7}, "`rates['omega']`"),
        ({"mu": float("nan")}, "`rates['mu']`"),
        ([0.5, 1.0], "`rates`"),
    ],
)
def test_bad_rates_are_named(rates, param):
    m = _model("isotropic")
    with pytest.raises(ValueError, match=param.replace("[", r"\[").replace("]", r"\]")):
        integrate(m, m.initial_state(seed=0), t_end=1.0, rates=rates)


def test_rates_apply_to_single_trajectories_only():
    m = _model("isotropic")
    with pytest.raises(ValueError, match="`rates`"):
        integrate(m, m.initial_state(seed=0, n=2), t_end=1.0, rates={"omega": 0.5})


# ------------------------------------------------------------------ bad arguments and starts


@pytest.mark.parametrize(
    "kwargs,param",
    [
        (dict(t_end=0.0), "`t_end`"),
        (dict(t_end=float("nan")), "`t_end`"),
        (dict(t_end=1e308), "`t_end`"),
        (dict(t_end=2 * engine.T_END_MAX), "`t_end`"),
        # subnormal: the solver's first step would be subnormal and fail (formerly status 2, "left the domain")
        (dict(t_end=1e-310), "`t_end` must be a number in \\[2.22507e-308"),
        (dict(t_end=1e-310, method="Radau"), "`t_end`"),
        (dict(t_first=1e-320), "`t_first`"),
        (dict(times=[0.0, 1e-320, 1.0]), "`times` must be 0 or >= 2.22507e-308"),
        (dict(rtol=-1.0), "`rtol`"),
        (dict(rtol=2.5), "`rtol`"),
        (dict(rtol=1e308), "`rtol`"),
        (dict(rtol=1e-16), "`rtol`"),
        (dict(atol=2.5), "`atol`"),
        (dict(atol=0.0), "`atol`"),
        (dict(atol=float("nan")), "`atol`"),
        (dict(method="Euler"), "`method`"),
        (dict(method=["LSODA"]), "`method`"),
        (dict(method="batch-Radau"), "`method`"),  # a single start is not a batch
        (dict(n_times=1), "`n_times`"),
        (dict(n_times=10**7), "`n_times`"),
        (dict(t_first=0.0), "`t_first`"),
        (dict(times=[0.0, 2.0, 1.0]), "`times`"),
        (dict(times=[-1.0, 1.0]), "`times`"),
        (dict(times=[0.0]), "`times`"),
        (dict(stationarity_tol=-1.0), "`stationarity_tol`"),
        (dict(budget=0), "`budget`"),
        (dict(budget=10**9), "`budget`"),
    ],
)
def test_bad_arguments_are_named_at_once(kwargs, param):
    """Issue 9: `run --t-end 1e308` ran forever and `--rtol 2.5` was blamed on overflow; now a named ValueError."""
    m = _model("isotropic")
    base = dict(t_end=10.0) | kwargs
    with pytest.raises(ValueError, match=param):
        integrate(m, m.state([0.01, -0.01], [0.01, -0.01]), **base)


def test_the_model_must_be_a_reduced_model():
    with pytest.raises(ValueError, match="`model`"):
        integrate(PAPER, np.zeros(4))
    with pytest.raises(ValueError, match="`model`"):
        integrate("isotropic", np.zeros(4))


def test_a_tolerances_of_the_wrong_type_is_refused_at_once():
    """Issue 9: `tolerances="x"` was accepted and failed later."""
    m = _model("isotropic")
    with pytest.raises(TypeError, match="`tolerances`"):
        integrate(m, m.state([0.1, -0.1], [0.1, -0.1]), t_end=1.0, tolerances="x")


def test_the_default_budget_is_150000_gradient_evaluations():
    """The paper's setting needs ~6e4 evaluations to t = 1e9; by default a flow stops beyond 150000."""
    assert engine.BUDGET == 150_000
    assert inspect.signature(integrate).parameters["budget"].default == 150_000


def test_initial_state_outside_safe_region():
    m = _model("isotropic")
    with pytest.raises(LossOverflowError):
        integrate(m, m.state([20.0, 0.0], [0.0, 0.0]))
    with pytest.raises(engine.DomainError, match="`y0`"):
        integrate(m, m.state([20.0, 0.0], [0.0, 0.0]))


@pytest.mark.parametrize("stationarity_tol", [0.0, 1e-10])
def test_a_start_whose_gradient_cannot_be_evaluated_is_a_domain_error(stationarity_tol):
    """The activation model has no smooth domain edge: a start beyond its quadrature's range (tanh, |ω| = 9) is
    refused by the formulas; integrate says so (engine.DomainError, a ValueError) whether or not it evaluates the
    gradient for stationarity first, and never returns a flow built on a failed evaluation."""
    m = reduced_model(Setting(d=5, L=40, sigma2=0.1, activation="tanh"), n_heads=2)
    assert m.name == "activation" and m.in_range(m.state([9.0, -9.0], [1.0, -1.0]))
    with pytest.raises(engine.DomainError, match="quadrature"):
        integrate(m, m.state([9.0, -9.0], [1.0, -1.0]), t_end=10.0, stationarity_tol=stationarity_tol)


def test_the_smallest_normal_t_end_is_integrated_and_a_batch_refuses_a_subnormal_one():
    """t_end = T_END_MIN (the smallest normal float) is a run that reaches it; a subnormal one is refused for a
    batch too (batch-Radau used to report the breakdown as a solver failure, status -1)."""
    m = _model("isotropic")
    f = integrate(m, m.initial_state(seed=0), t_end=engine.T_END_MIN, n_times=3)
    assert f.status == 0 and f.t[-1] == engine.T_END_MIN
    with pytest.raises(ValueError, match="`t_end`"):
        integrate(m, m.initial_state(seed=0, n=48), t_end=1e-310, method="batch-Radau")


# ------------------------------------------------------------------ issue 23: sizes decided before work

MT_HUGE = Setting(d=100_000, L=40, sigma2=0.1, tasks=((0, 1, 2, 3), (2, 3, 4, 5)))


@pytest.mark.parametrize("method", ["LSODA", "Radau", "BDF"])
def test_an_implicit_method_refuses_a_state_too_large_for_its_dense_jacobian(method):
    """``run --tasks 1-4,3-6 --d 100000`` asked LSODA for a 298 GiB work array (200004² doubles): refused before
    any allocation, naming `method` and `setting.d` (the sizes: 8·n² bytes per dense copy > JACOBIAN_MAX_BYTES)."""
    import resource

    m = reduced_model(MT_HUGE, n_heads=2)
    assert m.size == 2 * (100_000 + 2) and 8 * m.size**2 > engine.JACOBIAN_MAX_BYTES
    y0 = m.initial_state(seed=0, scale=0.01)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (vm + 512 * 2**20, hard))
    try:
        with pytest.raises(ValueError) as err:
            integrate(m, y0, t_end=1.0, method=method)
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    assert "`method`" in str(err.value) and "`setting.d`" in str(err.value) and "200004 x 200004" in str(err.value)


def test_the_dense_jacobian_bound_leaves_explicit_methods_and_small_states_alone():
    from reduced_dynamics.flow._integrate import _check_dense_size

    big = reduced_model(MT_HUGE, n_heads=2)
    for method in ("RK45", "RK23", "DOP853"):
        _check_dense_size(big, method, 1)  # O(size) memory: not refused
    # the largest state LSODA may take: 8·n² <= 1 GiB, n = 11585; one more is refused
    n_ok = int((engine.JACOBIAN_MAX_BYTES / 8) ** 0.5)
    assert 8 * n_ok**2 <= engine.JACOBIAN_MAX_BYTES < 8 * (n_ok + 1) ** 2
    mt = lambda d: reduced_model(Setting(d=d, L=40, tasks=((0, 1), (1, 2))), n_heads=1)  # noqa: E731  size d + 2
    _check_dense_size(mt(n_ok - 2), "LSODA", 1)
    with pytest.raises(ValueError, match="`method`"):
        _check_dense_size(mt(n_ok - 1), "LSODA", 1)


@pytest.mark.parametrize("t_end", [1.0, 1e3])
def test_two_output_times_are_zero_and_t_end(t_end):
    """With n_times = 2 the output times were [0, t_first] (numpy's geomspace of one point is its start): the
    flow stopped at 0.01 and reported success, `run --n-times 2 --t-end 1000` printed t = 0.01. They are
    [0, t_end]; the end state equals that of a run with more output times (same solver, same tolerance)."""
    m = _model("isotropic")
    y0 = m.initial_state(seed=0)
    two = integrate(m, y0, t_end=t_end, n_times=2, method="Radau", rtol=1e-10, atol=1e-13)
    assert two.t.tolist() == [0.0, t_end] and two.final.t == t_end
    many = integrate(m, y0, t_end=t_end, n_times=50, method="Radau", rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(two.states[-1], many.states[-1], rtol=1e-7, atol=1e-10)


def test_lsoda_stationary_flag_after_the_last_output_time():
    """LSODA's first evaluation below the stationarity threshold can come after the last output time (its steps
    overshoot t_end): the Jacobian count of the outputs before it was read one row past odeint's info arrays
    (an IndexError from `integrate`). Found on this start of the paper's setting at rtol 1e-6; the run now stops
    as stationary with the state of a tight Radau run."""
    m = reduced_model(Setting(d=5, L=40, sigma2=0.1), n_heads=2)
    y0 = np.array([-0.01738266398496882, -0.013366427931811324, -0.01361106708564987, -0.003516171312784098])
    r = integrate(m, y0, t_end=1e3, method="LSODA", rtol=1e-6, atol=1e-10)
    tight = integrate(m, y0, t_end=1e3, method="Radau", rtol=1e-12, atol=1e-15)
    assert r.status == tight.status == 1
    assert r.grad_norm[-1] == pytest.approx(1e-10, rel=1e-3)
    assert np.max(np.abs(r.y_stop - tight.y_stop)) < 1e-6
    assert 1 <= r.njev <= r.nfev
