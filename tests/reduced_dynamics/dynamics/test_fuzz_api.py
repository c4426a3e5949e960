"""API fuzz suite for the dynamics, derive, setting and validation modules and the one engine (issue 9).

Every public function of ``reduced_dynamics.dynamics.*``, ``reduced_dynamics.derive.symbolic``,
``reduced_dynamics.setting`` and ``reduced_dynamics._validation.check_finite_array``, and the engine's
entry points (``reduced_model``, ``integrate`` on one start, a batch and the corrected model,
``gradient_descent``, ``initial_state`` and a model's ``state`` / ``pack`` / ``initial_state``) is called
from a small valid baseline with ONE argument replaced by a hostile value: numbers across all
magnitudes (1e-320 .. 1e300, 0, negative), NaN, inf, complex scalars and arrays, wrong and
mismatched shapes, wrong types, huge integers, and extreme but valid settings. The contract:

* the call returns a result whose every number is finite (None and bools allowed), or
* it raises ``ValueError`` / ``TypeError`` / ``OverflowError`` (the package's
  ``LossOverflowError``) whose message names a parameter of the function (or a field of
  the setting), and
* it emits no ``RuntimeWarning``/``ComplexWarning`` and finishes within a few seconds.

Hypothesis draws the examples (derandomised profile of tests/conftest.py, a bounded number
per function). ``python tests/reduced_dynamics/dynamics/test_fuzz_api.py`` prints the count of
calls tried and of calls that broke the contract, per function.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import re
import sys
import warnings
from collections import Counter

import api_fuzz
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reduced_dynamics import Flow, _validation, gradient_descent, initial_state, integrate, reduced_model
from reduced_dynamics.derive import symbolic
from reduced_dynamics.dynamics import corrected_loss as cl
from reduced_dynamics.dynamics import diagnostics as dg
from reduced_dynamics.dynamics import loss as ls
from reduced_dynamics.dynamics import manifold as mf
from reduced_dynamics.dynamics import portrait as pt
from reduced_dynamics.setting import Setting, as_setting

S = Setting(d=2, L=20, sigma2=0.1)
W2, M2 = [0.1, -0.1], [0.5, -0.5]
#: the isotropic and the corrected model of S with two heads, and the start (W2, M2)
ISO = reduced_model(S, n_heads=2)
CORR = reduced_model(S, n_heads=2, objective="corrected")
Y2 = ISO.state(W2, M2)

#: The fuzz gives a flow a budget of 5000 gradient evaluations so that a stiff extreme setting ends
#: (status -2) in well under a second instead of ~15 s; the contract is the same.
FUZZ_BUDGET = 5000


def _budgeted(fn):
    """``fn`` with every flow it integrates given :data:`FUZZ_BUDGET` gradient evaluations: the portrait data
    functions take no ``budget``, and at ``EXTREME_SETTINGS[0]`` (d = 1e5, σ² = 1e12) their flow ran to the default
    150,000 (3.4 s) before the same stop (status -2, NaN-padded trajectory). They import ``integrate`` at call
    time, so the budget is given through ``reduced_dynamics.flow.integrate`` for the duration of the call."""
    import functools

    import reduced_dynamics.flow as flow_package

    @functools.wraps(fn)
    def call(*args, **kwargs):
        real = flow_package.integrate
        flow_package.integrate = functools.partial(real, budget=FUZZ_BUDGET)
        try:
            return fn(*args, **kwargs)
        finally:
            flow_package.integrate = real

    return call


#: Extreme settings that ARE valid: the functions must cope with them too.
EXTREME_SETTINGS = [
    Setting(d=100_000, L=1, sigma2=1e12),
    Setting(d=1, L=10**9, sigma2=0.0),
    Setting(d=1, L=1, sigma2=0.0),
    Setting(d=100_000, L=10**9, sigma2=1e-300),
]

_SPECIAL = [
    0.0,
    -0.0,
    1e-320,
    -1e-320,
    1e-300,
    1e300,
    -1e300,
    1e200,
    -1e200,
    float("nan"),
    float("inf"),
    -float("inf"),
    1 + 1j,
    True,
    None,
    "x",
    "",
    [],
    0,
    -1,
    1,
    2,
    10**6,
    10**12,
    2**70,
    1.5,
]

_magnitude = st.builds(
    lambda sign, exp, mant: sign * mant * 10.0**exp,
    st.sampled_from([1.0, -1.0]),
    st.integers(-300, 300),
    st.sampled_from([1.0, 3.7]),
)
_small = st.sampled_from([0.0, 0.05, -0.05, 0.3, -0.3, 1.0, -2.0, 0.6])
_elem = st.one_of(_magnitude, _small, st.sampled_from([0.0, float("nan"), float("inf")]))


def _array(shape, vals, kind):
    arr = np.resize(np.array(vals, dtype=np.float64), shape) if shape else np.float64(vals[0])
    if kind == "complex":
        return np.asarray(arr) + 1j
    if kind == "list":
        return np.asarray(arr).tolist()
    return np.asarray(arr)


_arrays = st.builds(
    _array,
    st.sampled_from([(), (1,), (2,), (3,), (2, 2), (3, 2), (2, 3), (0,), (1, 2, 2)]),
    st.lists(_elem, min_size=1, max_size=4),
    st.sampled_from(["float", "float", "list", "complex"]),
)
VALUES = st.one_of(
    st.sampled_from(_SPECIAL),
    _magnitude,
    _small,
    _arrays,
    st.sampled_from(EXTREME_SETTINGS),
)


@dataclasses.dataclass
class Entry:
    """A public callable, its valid baseline call and the arguments to fuzz."""

    name: str
    fn: object
    args: dict  # name -> baseline value, in call order; the first `n_pos` are passed positionally
    n_pos: int
    fuzz: tuple

    def call(self, name, value):
        vals = dict(self.args)
        vals[name] = value
        items = list(vals.items())
        pos = [v for _, v in items[: self.n_pos]]
        kw = dict(items[self.n_pos :])
        return self.fn(*pos, **kw)


def E(name, fn, n_pos, fuzz=None, **args):
    return Entry(name, fn, args, n_pos, tuple(fuzz or args))


def _gen_fn():
    return symbolic.generated_loss_functions(1).loss


ENTRIES = [
    # loss.py
    E("max_exponent", ls.max_exponent, 2, omega=W2, setting=S),
    E("approx_loss", ls.approx_loss, 3, omega=W2, mu=M2, setting=S),
    E("approx_loss_grad", ls.approx_loss_grad, 3, omega=W2, mu=M2, setting=S),
    E("approx_loss_hessian", ls.approx_loss_hessian, 3, omega=W2, mu=M2, setting=S),
    E("optimal_mu", ls.optimal_mu, 2, omega=W2, setting=S, rcond=1e-12),
    # corrected_loss.py
    E("corrected_loss_terms", cl.corrected_loss_terms, 3, omega=W2, mu=M2, setting=S),
    E("corrected_loss", cl.corrected_loss, 3, omega=W2, mu=M2, setting=S),
    E("corrected_loss_grad", cl.corrected_loss_grad, 3, omega=W2, mu=M2, setting=S),
    E("corrected_loss_hessian_fd", cl.corrected_loss_hessian_fd, 3, omega=W2, mu=M2, setting=S, h=1e-6),
    E("corrected_eta_star", cl.corrected_eta_star, 1, setting=S),
    E("corrected_manifold_coefficients", cl.corrected_manifold_coefficients, 2, eta=0.8, setting=S),
    E("corrected_drift_constant", cl.corrected_drift_constant, 1, setting=S, eta=0.8),
    E(
        "corrected_drift_gamma",
        cl.corrected_drift_gamma,
        2,
        t=[1.0, 10.0],
        setting=S,
        n_positive=1,
        n_negative=1,
        gamma0=0.1,
        t0=0.0,
        include_gamma2=True,
    ),
    E(
        "mc_risk_cv",
        cl.mc_risk_cv,
        2,
        states=[(W2, M2)],
        setting=S,
        n_prompts=40,
        seed=0,
        cv=False,
        chunk_elems=4000,
    ),
    # manifold.py
    E("eta_star", mf.eta_star, 1, setting=S),
    E("inf_loss", mf.inf_loss, 1, setting=S),
    E("mu_gamma", mf.mu_gamma, 2, gamma=0.1, setting=S),
    E("manifold_loss", mf.manifold_loss, 2, gamma=0.1, setting=S),
    E("single_head_optimum", mf.single_head_optimum, 1, setting=S),
    E("drift_law_gamma", mf.drift_law_gamma, 2, t=10.0, setting=S, n_positive=1, n_negative=1),
    E("flow_eta_gap", mf.flow_eta_gap, 2, gamma=0.1, setting=S),
    E("flow_manifold_gap", mf.flow_manifold_gap, 2, gamma=0.1, setting=S),
    E("residual_sum_mu", mf.residual_sum_mu, 3, gamma=0.1, eta=0.8, setting=S, n_positive=2, n_negative=1),
    # the engine: models, integrator, gradient descent, starts
    E("initial_state", initial_state, 1, n_heads=2, kind="random", scale=0.01, seed=0),
    E("initial_state_given", initial_state, 1, n_heads=2, kind="given", omega0=W2, mu0=M2),
    E("reduced_model", reduced_model, 1, setting=S, n_heads=2, objective="approx"),
    E("reduced_model_cap", reduced_model, 1, fuzz=("exponent_cap",), setting=S, n_heads=2, exponent_cap=None),
    E(
        "reduced_model_exact",
        reduced_model,
        1,
        fuzz=("setting", "n_heads", "tol", "fd_step"),
        setting=S,
        n_heads=2,
        objective="exact",
        tol=1e-12,
        fd_step=1e-5,
    ),
    E("model.state", ISO.state, 2, omega=W2, mu=M2),
    E("model.pack", lambda omega, mu: ISO.pack(omega=omega, mu=mu), 0, omega=W2, mu=M2),
    E(
        "model.initial_state",
        lambda seed, scale, n: ISO.initial_state(seed=seed, scale=scale, n=n),
        0,
        seed=0,
        scale=0.01,
        n=None,
    ),
    E(
        "integrate",
        integrate,
        2,
        model=ISO,
        y0=Y2,
        t_end=10.0,
        method=None,
        rtol=1e-6,
        atol=1e-9,
        n_times=20,
        t_first=1e-2,
        times=None,
        stationarity_tol=1e-10,
        budget=FUZZ_BUDGET,
        rates=None,
        tolerances=None,
    ),
    E(
        "integrate_radau",
        integrate,
        2,
        fuzz=("y0", "t_end", "rtol", "atol", "n_times", "t_first", "stationarity_tol"),
        model=ISO,
        y0=Y2,
        t_end=10.0,
        method="Radau",
        rtol=1e-6,
        atol=1e-9,
        n_times=20,
        t_first=1e-2,
        stationarity_tol=1e-10,
        budget=FUZZ_BUDGET,
    ),
    E(
        "integrate_batch",
        integrate,
        2,
        fuzz=("y0", "t_end", "rtol", "atol", "n_times", "stationarity_tol", "budget"),
        model=ISO,
        y0=np.stack([Y2, -Y2]),
        t_end=10.0,
        method="batch-Radau",
        rtol=1e-6,
        atol=1e-9,
        n_times=20,
        stationarity_tol=1e-10,
        budget=FUZZ_BUDGET,
    ),
    E(
        "integrate_corrected",
        integrate,
        2,
        fuzz=("y0", "times", "method", "rtol", "atol"),
        model=CORR,
        y0=Y2,
        times=[0.0, 1.0],
        method="Radau",
        rtol=1e-6,
        atol=1e-9,
        stationarity_tol=0.0,
        budget=FUZZ_BUDGET,
    ),
    E(
        "integrate_rates",
        integrate,
        2,
        fuzz=("y0", "times", "rates", "rtol", "atol", "method"),
        model=ISO,
        y0=Y2,
        times=[0.0, 1.0],
        rates={"omega": 1.0},
        rtol=1e-6,
        atol=1e-9,
        method="RK45",
        stationarity_tol=0.0,
        budget=FUZZ_BUDGET,
    ),
    E(
        "gradient_descent",
        gradient_descent,
        2,
        model=ISO,
        y0=Y2,
        eta=0.01,
        n_steps=20,
        n_records=None,
        tolerances=None,
    ),
    # diagnostics.py
    E("StageTolerances", dg.StageTolerances, 0, dummy=0.1, zero_sum=0.05, homogeneous=0.05),
    E("trajectory_diagnostics", dg.trajectory_diagnostics, 2, omega=W2, mu=M2, tolerances=None),
    E("stage_times", dg.stage_times, 3, t=[0.0, 1.0], omega=[W2, W2], mu=[M2, M2], tolerances=None),
    E("manifold_gap", dg.manifold_gap, 3, omega=W2, mu=M2, setting=S, tolerances=None),
    # portrait.py
    E("embed_plane", pt.embed_plane, 2, gamma=0.1, m=0.5),
    E("project_plane", pt.project_plane, 2, omega=W2, mu=M2),
    E("plane_loss", pt.plane_loss, 3, gamma=0.1, m=0.5, setting=S),
    E("plane_vector_field", pt.plane_vector_field, 3, gamma=0.1, m=0.5, setting=S),
    E("gamma_nullcline", pt.gamma_nullcline, 2, gamma=0.1, setting=S),
    E("single_head_line", pt.single_head_line, 2, w=0.1, setting=S),
    E(
        "two_head_portrait_data",
        _budgeted(pt.two_head_portrait_data),
        1,
        setting=S,
        seed=0,
        gamma_range=(-0.5, 0.5),
        m_range=(-2.0, 2.0),
        resolution=10,
        n_traj=1,
        t_end=10.0,
        init_scale=0.1,
        n_eval=20,
    ),
    E(
        "general_portrait_data",
        _budgeted(pt.general_portrait_data),
        1,
        setting=S,
        seed=0,
        n_heads=2,
        n_traj=1,
        t_end=10.0,
        init_scale=0.01,
        n_eval=20,
    ),
    # derive/symbolic.py (sympy: only the cheap entry points and the argument checks)
    E("state_symbols", symbolic.state_symbols, 1, H=1),
    E("derive_approx_loss", symbolic.derive_approx_loss, 1, H=1),
    E("closed_form_loss", symbolic.closed_form_loss, 1, H=1),
    E("taylor_form_loss", symbolic.taylor_form_loss, 2, H=1, order=2),
    E("loss_gradient", symbolic.loss_gradient, 1, H=1),
    E("generated_loss_functions", symbolic.generated_loss_functions, 1, H=1),
    E(
        "GeneratedFunction",
        lambda omega, mu, setting: _gen_fn()(omega, mu, setting),
        3,
        omega=[0.1],
        mu=[0.5],
        setting=S,
    ),
    # setting.py and _validation.py
    E("Setting", Setting, 0, d=2, L=20, sigma2=0.1, Sigma=None),
    E("Setting.replace", lambda **kw: S.replace(**kw), 0, fuzz=("d", "L", "sigma2"), d=2, L=20, sigma2=0.1),
    E("as_setting", as_setting, 1, setting=S, where=None),
    E("theory_range_issues", lambda setting: as_setting(setting).theory_range_issues(), 1, setting=S),
    E("check_finite_array", lambda value: _validation.check_finite_array("value", value), 1, value=W2),
]

_BY_NAME = {e.name: e for e in ENTRIES}
_SYNTHETIC = {"value"}  # parameter names of the lambda wrappers above


def _finite(obj, depth=0) -> bool:
    """True if every number reachable in ``obj`` (result objects, mappings, sequences, arrays) is finite."""
    if depth > 6 or obj is None or isinstance(obj, (bool, str, np.bool_)):
        return True
    if isinstance(obj, (int, np.integer)):
        return True
    if isinstance(obj, (float, np.floating)):
        return math.isfinite(obj)
    if isinstance(obj, (complex, np.complexfloating)):
        return False
    if isinstance(obj, pt.PortraitData):  # documented NaN padding (ragged trajectories, "never"): no inf
        return all(not np.any(np.isinf(np.asarray(v, dtype=float))) for v in obj.values())
    if isinstance(obj, Flow) and obj.is_batch:
        # documented NaN: a batch's outputs after a trajectory stopped; each trajectory is finite
        return not np.any(np.isinf(obj.states)) and all(_finite(obj[i], depth + 1) for i in range(obj.n_traj))
    if isinstance(obj, Flow) and obj.method == "gd":
        # documented NaN: gradient descent has no solver tolerances (rtol, atol)
        return all(
            _finite(getattr(obj, f.name), depth + 1) for f in dataclasses.fields(obj) if f.name not in ("rtol", "atol")
        )
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind in "biuSUO":
            return obj.dtype.kind != "O" or all(_finite(v, depth + 1) for v in obj.ravel())
        return obj.dtype.kind == "f" and bool(np.all(np.isfinite(obj)))
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return all(_finite(getattr(obj, f.name), depth + 1) for f in dataclasses.fields(obj))
    if isinstance(obj, dict):
        return all(_finite(v, depth + 1) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return all(_finite(v, depth + 1) for v in obj)
    return True  # sympy objects, callables, Settings are not numbers


def _names(entry) -> set[str]:
    try:
        params = set(inspect.signature(entry.fn).parameters)
    except (TypeError, ValueError):
        params = set()
    return params | set(entry.args) | {"setting", "d", "L", "sigma2", "Sigma"} - _SYNTHETIC | {"value"}


#: CPU seconds a fuzzed call may take. It must sit above the library's own bound on a flow, else the suite
#: times that bound instead of catching a call that does not end: ``integrate`` stops every flow after
#: 150 000 gradient evaluations (status -2), and a flow that is stiff everywhere (e.g. the extreme valid
#: setting d = 1e5, L = 1, σ² = 1e12: ``general_portrait_data`` spends its whole budget before t = 10) takes
#: 150 000 × 30-45 µs = 4.5-7 s on these machines (AMD EPYC, under load); it was 4 s, which that call
#: passed on a faster host and failed on this one.
CALL_CPU_SECONDS = 12.0


def verdict(entry: Entry, name: str, value, *, timeout: float = CALL_CPU_SECONDS, wall_timeout: float = 60.0) -> str:
    """``"ok"`` if the call honours the contract of the module docstring, else what went wrong
    (``"timeout"``: past ``timeout`` s of CPU time or ``wall_timeout`` s of wall time, ``api_fuzz.start_budget``)."""
    old = api_fuzz.start_budget(timeout, wall_timeout)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                try:
                    result = entry.call(name, value)
                finally:
                    api_fuzz.stop_budget(old)
            except api_fuzz._Timeout:
                return "timeout"
            except (ValueError, TypeError, OverflowError) as exc:
                msg = str(exc)
                words = set(re.findall(r"[A-Za-z_][A-Za-z_0-9.]*", msg.replace("`", " ")))
                words |= {w.split(".")[-1] for w in words} | {w.split(".")[0] for w in words}
                if not words & _names(entry):
                    return f"unnamed {type(exc).__name__}: {msg[:120]}"
                result = None
            except Exception as exc:  # the fuzz reports every other exception
                return f"{type(exc).__name__}: {str(exc)[:120]}"
        noisy = [w for w in caught if issubclass(w.category, (RuntimeWarning, np.exceptions.ComplexWarning))]
        if noisy:
            return f"warning: {str(noisy[0].message)[:120]}"
        if result is not None and not _finite(result):
            return "non-finite result"
        return "ok"
    finally:
        api_fuzz.stop_budget(old)


def _fuzz_case(entry_name):
    entry = _BY_NAME[entry_name]
    return st.tuples(st.sampled_from(entry.fuzz), VALUES)


#: Set by the ``__main__`` block to collect verdicts instead of asserting.
RECORD: list | None = None


@pytest.mark.parametrize("entry_name", [e.name for e in ENTRIES])
def test_api_fuzz(entry_name):
    """Each hostile call returns finite numbers or raises a clear error naming a parameter."""
    entry = _BY_NAME[entry_name]

    @settings(max_examples=12, database=None, deadline=None, derandomize=True)
    @given(_fuzz_case(entry_name))
    def run(case):
        name, value = case
        out = verdict(entry, name, value)
        if RECORD is not None:
            RECORD.append((entry_name, name, repr(value)[:60], out))
        else:
            assert out == "ok", f"{entry_name}({name}={value!r}): {out}"

    run()


#: The fixed hostile values every fuzzable argument of every entry meets (besides the random draws).
HOSTILE = [
    0.0,
    -1.0,
    1e-320,
    1e300,
    -1e300,
    float("nan"),
    float("inf"),
    1 + 1j,
    np.array([0.1 + 1j, -0.1]),
    np.array([1e200, -1e200]),
    [0.1, 0.2, 0.3],
    [[0.1, -0.1], [0.2, -0.2], [0.3, -0.3]],
    "x",
    None,
    10**12,
    EXTREME_SETTINGS[0],
    EXTREME_SETTINGS[2],
]


@pytest.mark.parametrize("entry_name", [e.name for e in ENTRIES])
def test_api_hostile_values(entry_name):
    """Every fuzzable argument meets every value of HOSTILE: finite result or a clear, named error."""
    entry = _BY_NAME[entry_name]
    bad = []
    for name in entry.fuzz:
        for value in HOSTILE:
            out = verdict(entry, name, value)
            if RECORD is not None:
                RECORD.append((entry_name, name, repr(value)[:60], out))
            elif out != "ok":
                bad.append(f"{name}={value!r}: {out}")
    assert not bad, f"{entry_name}: " + "; ".join(bad)


if __name__ == "__main__":  # pragma: no cover - the measurement of the report
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (6 * 2**30, 6 * 2**30))  # a runaway allocation fails, not the machine
    RECORD = []
    for e in ENTRIES:
        test_api_fuzz(e.name)
        test_api_hostile_values(e.name)
    bad = [r for r in RECORD if r[3] != "ok"]
    print(f"calls tried: {len(RECORD)}, misbehaved: {len(bad)}")
    print(Counter(r[0] for r in bad))
    for r in bad:
        print(" ", *r)
    sys.exit(0)
