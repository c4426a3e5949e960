"""The derived approximate loss equals the closed form; generated code matches numerics."""

import numpy as np
import pytest
import sympy as sp
from hypothesis import given
from hypothesis import strategies as st

from reduced_dynamics import approx_loss, approx_loss_grad, approx_loss_hessian
from reduced_dynamics.derive.symbolic import (
    GeneratedLossFunctions,
    ProblemSymbols,
    StateSymbols,
    closed_form_loss,
    derive_approx_loss,
    fluctuation_kernel,
    gaussian_mgf,
    generated_loss_functions,
    problem_symbols,
    state_symbols,
    taylor_form_loss,
    tilted_mean,
)
from reduced_dynamics.setting import Setting


def test_tilted_mean_is_omega():
    """E[a e^{ω r a}] / (r E[e^{ω r a}]) = ω for a ~ N(0,1): the softmax tilt is ω x_q."""
    assert sp.simplify(tilted_mean() - sp.Symbol("omega", real=True)) == 0


def test_gaussian_mgf():
    """E[e^{ts}] = exp(t² v/2) for s ~ N(0, v)."""
    t, v = sp.Symbol("t", real=True), sp.Symbol("v", positive=True)
    assert sp.simplify(gaussian_mgf() - sp.exp(t**2 * v / 2)) == 0


def test_fluctuation_kernel_is_exp_of_product():
    """MGF(ω_h+ω_k)/(MGF(ω_h) MGF(ω_k)) = exp(ω_h ω_k v)."""
    a, b = sp.symbols("a b", real=True)
    v = sp.Symbol("v", positive=True)
    assert sp.simplify(fluctuation_kernel(a, b, v) - sp.exp(a * b * v)) == 0


@pytest.mark.parametrize("H", [1, 2, 3, 4])
def test_derived_equals_closed_form(H):
    """derive_approx_loss(H) − closed_form_loss(H) simplifies to exactly 0."""
    diff = sp.expand(derive_approx_loss(H) - closed_form_loss(H))
    assert sp.simplify(diff) == 0


@pytest.mark.parametrize("H,order", [(1, 3), (2, 3), (3, 2), (4, 2)])
def test_taylor_form_matches_to_order(H, order):
    """Closed form and the Taylor form truncated at k = order agree through O(ε^(2·order+1))
    under ω → εω, and differ at O(ε^(2·order+2)) by exactly the first omitted term."""
    eps = sp.Symbol("eps", positive=True)
    ss, ps = state_symbols(H), problem_symbols()
    omega, mu = ss.omega, ss.mu
    d, L, sigma2 = ps.d, ps.L, ps.sigma2
    scale = {w: eps * w for w in omega}
    closed = closed_form_loss(H).subs(scale, simultaneous=True)
    taylor = taylor_form_loss(H, order).subs(scale, simultaneous=True)
    series = sp.series(closed - taylor, eps, 0, 2 * order + 3).removeO()
    k = order + 1
    first_omitted = (1 + sigma2) / L * d**k / sp.factorial(k) * sum(mu[h] * omega[h] ** k for h in range(H)) ** 2
    assert sp.simplify(sp.expand(series - first_omitted * eps ** (2 * k))) == 0


states = st.integers(min_value=1, max_value=6).flatmap(
    lambda H: st.tuples(
        st.lists(st.floats(-1.0, 1.0), min_size=H, max_size=H),
        st.lists(st.floats(-3.0, 3.0), min_size=H, max_size=H),
    )
)
problems = st.builds(
    lambda d, L, s2: Setting(d=d, L=L, sigma2=s2), st.integers(1, 8), st.integers(1, 100), st.floats(0.0, 2.0)
)


@given(state=states, setting=problems)
def test_generated_matches_vectorised(state, setting):
    """sympy-generated loss, gradient and Hessian equal the hand-written numpy ones (rtol 1e-11)."""
    omega, mu = map(np.array, state)
    H = len(omega)
    fns = generated_loss_functions(H)
    num_loss = approx_loss(omega, mu, setting)
    num_grad = approx_loss_grad(omega, mu, setting).theta
    num_hess = approx_loss_hessian(omega, mu, setting)
    for sym, num in [
        (fns.loss(omega, mu, setting), num_loss),
        (fns.gradient(omega, mu, setting).ravel(), num_grad),
        (fns.hessian(omega, mu, setting), num_hess),
    ]:
        err = np.abs(np.asarray(sym) - num) / (1e-11 + 1e-11 * np.abs(num))
        assert np.max(err) <= 1.0


def test_generated_raw_signature_equals_setting_call():
    """The raw lambdified form f.func(ω_1..ω_H, μ_1..μ_H, d, L, σ²) gives the same number as f(ω, μ, setting)."""
    fns = generated_loss_functions(2)
    s = Setting(d=3, L=17, sigma2=0.4)
    w, m = [0.2, -0.3], [1.5, -0.7]
    assert float(fns.loss.func(*w, *m, 3, 17, 0.4)) == float(fns.loss(w, m, s))
    with pytest.raises(ValueError, match="`omega` and `mu` must have shape"):
        fns.loss([0.1], [0.2], s)
    with pytest.raises(ValueError, match="`setting` must be scalar"):
        fns.loss(w, m, Setting(d=3, L=[17, 18], sigma2=0.4))


def test_symbol_containers():
    ps, ss = problem_symbols(), state_symbols(3)
    assert isinstance(ps, ProblemSymbols) and isinstance(ss, StateSymbols)
    assert str(ps.d) == "d" and ps.d.is_positive and ps.sigma2.is_nonnegative
    assert [str(s) for s in ss.theta] == ["omega_1", "omega_2", "omega_3", "mu_1", "mu_2", "mu_3"]


def test_generated_functions_are_cached_and_show_expression():
    a = generated_loss_functions(2)
    assert isinstance(a, GeneratedLossFunctions)
    assert generated_loss_functions(2) is a
    text = repr(a.loss).replace(" ", "")
    assert "exp(d*omega_1*omega_2)" in text or "exp(d*omega_1**2)" in text


@pytest.mark.parametrize("H", [0, 9, 10**12, 3.7e179, np.array([1.0, 2.0]), "2", 1.5])
def test_symbolic_entry_points_reject_a_bad_number_of_heads_by_name(H):
    """Issue 9: an array H gave 'unhashable type' (from the cache) and H = 3.7e179 ran forever."""
    from reduced_dynamics.derive.symbolic import loss_gradient, loss_hessian

    for fn in (
        derive_approx_loss,
        closed_form_loss,
        loss_gradient,
        loss_hessian,
        generated_loss_functions,
        state_symbols,
    ):
        with pytest.raises(ValueError, match="`H`"):
            fn(H)


def test_generated_function_overflow_is_an_error_not_inf():
    from reduced_dynamics.dynamics.loss import LossOverflowError

    f = generated_loss_functions(1).loss
    with pytest.raises(LossOverflowError, match="`omega`"):
        f([1e168], [1.0], Setting(d=5, L=40, sigma2=0.1))
    with pytest.raises(ValueError, match="`omega`"):
        f([0.1 + 1j], [1.0], Setting(d=5, L=40, sigma2=0.1))
