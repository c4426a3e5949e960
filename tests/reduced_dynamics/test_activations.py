"""Activation registry: f, f', C_f and the Taylor coefficients agree with each other and with sympy."""

import numpy as np
import pytest
import sympy as sp
from hypothesis import given
from hypothesis import strategies as st

from reduced_dynamics import Setting
from reduced_dynamics.activations import ACTIVATIONS, check_normaliser, get_activation

CASES = [("exp", 1.0), ("affine", 1.0), ("affine", 0.5), ("square", 1.0), ("square", 0.3), ("tanh", 1.0)]


@pytest.mark.parametrize("name,c", CASES)
def test_derivative_matches_central_differences(name, c):
    a = get_activation(name, c)
    x = np.linspace(-0.9, 0.9, 13)
    h = 1e-6
    fd = (a.f(x + h) - a.f(x - h)) / (2 * h)
    np.testing.assert_allclose(a.df(x), fd, rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize("name,c", CASES)
def test_c_f_is_log_slope_at_zero(name, c):
    a = get_activation(name, c)
    assert a.c_f == pytest.approx(float(a.df(0.0) / a.f(0.0)), rel=1e-14)


@pytest.mark.parametrize("name,c", CASES)
def test_taylor_matches_sympy_series(name, c):
    a = get_activation(name, c)
    x = sp.Symbol("x")
    f = a.sympy(x)
    ser = sp.series(f / f.subs(x, 0), x, 0, 8).removeO()
    want = [float(ser.coeff(x, k)) for k in range(8)]
    np.testing.assert_allclose(a.taylor(7), want, rtol=1e-14, atol=1e-15)


@given(x=st.floats(-0.3, 0.3))
@pytest.mark.parametrize("name,c", CASES)
def test_taylor_series_approximates_f(name, c, x):
    a = get_activation(name, c)
    coef = a.taylor(9)
    approx = sum(ck * x**k for k, ck in enumerate(coef))
    assert approx == pytest.approx(float(a.f(x) / a.f(0.0)), rel=1e-6)


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"activation": "relu"}, "`activation` must be one of"),
        ({"activation": 3}, "`activation` must be one of"),
        ({"activation": "tanh", "activation_c": 2.0}, "`activation_c` must be 1.0"),
        ({"activation": "affine", "activation_c": 0.0}, r"`activation_c` must be in \(0, 1e6\]"),
        ({"activation": "affine", "activation_c": float("nan")}, "`activation_c` must be in"),
        ({"activation": "affine", "activation_c": "1"}, "`activation_c` must be a real number"),
    ],
)
def test_setting_rejects_bad_activation(kw, match):
    with pytest.raises(ValueError, match=match):
        Setting(**kw)


def test_setting_carries_activation_and_keeps_default_dict():
    s = Setting(activation="square", activation_c=0.5)
    assert s.activation_fn.c_f == 1.0
    assert s.to_dict()["activation"] == "square" and s.to_dict()["activation_c"] == 0.5
    assert "activation" not in Setting().to_dict()
    assert s != Setting() and s == Setting(activation="square", activation_c=0.5)
    with pytest.raises(ValueError, match="`setting.activation` 'square' is not supported by here"):
        s.require_softmax("here")
    assert Setting().require_softmax("here") == Setting()


def test_all_names_registered():
    assert ACTIVATIONS == ("exp", "affine", "square", "tanh")
    assert [get_activation(n).can_be_negative for n in ACTIVATIONS] == [False, True, False, False]


def test_check_normaliser_refuses_vanishing_and_nonfinite():
    check_normaliser(np.array([0.5, 3.0]), "w")
    with pytest.raises(ValueError, match="w: the attention normaliser"):
        check_normaliser(np.array([0.5, -1e-3]), "w")
    with pytest.raises(ValueError, match="overflowed"):
        check_normaliser(np.array([np.inf]), "w")


def _softmax_only_calls():
    import reduced_dynamics as rd
    from reduced_dynamics.exact.evaluator import exact_risk
    from reduced_dynamics.models import model_class

    om, mu = np.array([0.1, -0.1]), np.array([4.0, -4.0])
    # the softmax's models taken directly (the selector hands such a setting to the activation model)
    return {
        "approx_loss": lambda s: rd.approx_loss(om, mu, s),
        "corrected_loss": lambda s: rd.corrected_loss(om, mu, s),
        "exact_risk": lambda s: exact_risk(om, mu, s),
        "isotropic_model": lambda s: model_class("isotropic")(s, n_heads=2),
        "corrected_model": lambda s: model_class("corrected")(s, n_heads=2),
        "exact_model": lambda s: model_class("exact")(s, n_heads=2),
        "precond_model": lambda s: model_class("precond")(s.replace(Sigma=np.eye(5)), n_heads=2),
        "multitask_model": lambda s: model_class("multitask")(s.replace(tasks=((0, 1), (2, 3, 4))), n_heads=2),
    }


@pytest.mark.parametrize("name", sorted(_softmax_only_calls()))
@pytest.mark.parametrize("activation", ["affine", "square", "tanh"])
def test_softmax_only_functions_refuse_another_activation(name, activation):
    """The softmax reduced model never silently evaluates exp for a setting that asks for f."""
    s = Setting(d=5, L=40, sigma2=0.1, activation=activation)
    with pytest.raises(ValueError, match=r"`setting.activation`.*activation_dynamics"):
        _softmax_only_calls()[name](s)


@pytest.mark.parametrize("activation", ["affine", "square", "tanh"])
def test_the_selector_gives_another_activation_its_own_model_and_flow(activation):
    """reduced_model routes a setting with f ≠ exp to the activation model, whose loss is L̃_f (not L̃), and the
    objectives derived for the softmax only are refused, naming the field."""
    from reduced_dynamics import integrate, reduced_model
    from reduced_dynamics.activation_dynamics.loss import act_loss

    s = Setting(d=5, L=40, sigma2=0.1, activation=activation)
    m = reduced_model(s, n_heads=2)
    assert m.name == "activation"
    y = m.state([0.1, -0.1], [4.0, -4.0])
    assert m.loss(y) == act_loss([0.1, -0.1], [4.0, -4.0], s)
    res = integrate(m, y, t_end=1.0, n_times=3)
    assert res.success and res.loss[0] == m.loss(y)
    for objective in ("corrected", "exact"):
        with pytest.raises(ValueError, match="`setting.activation`"):
            reduced_model(s, n_heads=2, objective=objective)


@pytest.mark.parametrize(
    ("normalisers", "names"), [([-1.0, 2.0], ("`omega`", "`activation_c`")), ([np.inf], ("`omega`",))]
)
def test_a_bad_normaliser_names_the_parameters(normalisers, names):
    """The refusal named "ω or C" without backticks, so `risk --activation affine --activation-c 1e6` printed a line
    naming no flag: it names `omega` and `activation_c` (the command line maps them to its flags)."""
    from reduced_dynamics.activations import check_normaliser

    with pytest.raises(ValueError) as err:
        check_normaliser(np.array(normalisers), "here")
    assert all(n in str(err.value) for n in names), str(err.value)
