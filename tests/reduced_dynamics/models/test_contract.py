"""One contract test for every registered reduced model (``reduced_dynamics.models.MODELS``).

Each model is checked the same way, against independent routes: its gradient against central
finite differences of its loss, its Hessian (where derived) against central differences of its
gradient, its reduction to the isotropic model where the mathematics says it reduces, a short
flow through the one integrator, and bad input. A model added to ``MODELS`` without a case here
fails ``test_every_registered_model_has_a_case``.
"""

from __future__ import annotations

import numpy as np
import pytest

from reduced_dynamics import Setting
from reduced_dynamics.flow import DomainError, Status, integrate
from reduced_dynamics.models import MODELS, model_class, reduced_model
from reduced_dynamics.precond.covariance import example_covariance

PAPER = Setting(d=5, L=40, sigma2=0.1)
SIGMA = Setting(d=4, L=40, sigma2=0.1, Sigma=example_covariance(Setting(d=4, L=40, sigma2=0.1), seed=0))

#: name -> (setting, objective, n_heads, scale of the random test state)
CASES = {
    "isotropic": (PAPER, "approx", 3, 0.3),
    "corrected": (PAPER, "corrected", 2, 0.15),
    "exact": (Setting(d=3, L=8, sigma2=0.1), "exact", 2, 0.3),
    "precond": (SIGMA, "approx", 2, 0.3),
    "activation": (Setting(d=5, L=40, sigma2=0.1, activation="square", activation_c=0.5), "approx", 2, 0.3),
    "multitask": (Setting(d=4, L=40, sigma2=0.1, tasks=((0, 1, 2), (1, 2, 3))), "approx", 2, 0.3),
    "precond_multitask": (SIGMA.replace(tasks=((0, 1, 2), (1, 2, 3))), "approx", 2, 0.1),
}


def _model(name):
    setting, objective, H, _ = CASES[name]
    return reduced_model(setting, n_heads=H, objective=objective)


def _state(name, seed=3):
    m = _model(name)
    rng = np.random.default_rng(seed)
    return m, CASES[name][3] * rng.standard_normal(m.size)


def test_every_registered_model_has_a_case():
    assert set(CASES) == set(MODELS)


@pytest.mark.parametrize("name", sorted(CASES))
def test_selector_picks_the_registered_class(name):
    assert isinstance(_model(name), model_class(name))
    assert _model(name).name == name


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_matches_central_differences(name):
    """grad(y)·e_i = (L(y + h e_i) − L(y − h e_i)) / 2h + O(h²): error in units of the FD error h²·|L|."""
    m, y = _state(name)
    g = m.grad(y)
    h = 1e-5
    fd = np.empty(m.size)
    for i in range(m.size):
        e = np.zeros(m.size)
        e[i] = h
        fd[i] = (m.loss(y + e) - m.loss(y - e)) / (2 * h)
    scale = max(1.0, float(np.max(np.abs(g))))
    assert np.max(np.abs(g - fd)) / scale < 1e-6


@pytest.mark.parametrize("name", sorted(n for n in CASES if model_class(n).has_hessian))
def test_hessian_matches_central_differences_of_the_gradient(name):
    m, y = _state(name)
    H = m.hessian(y)
    h = 1e-6
    fd = np.empty((m.size, m.size))
    for i in range(m.size):
        e = np.zeros(m.size)
        e[i] = h
        fd[:, i] = (m.grad(y + e) - m.grad(y - e)) / (2 * h)
    assert np.max(np.abs(H - H.T)) <= 1e-13 * max(1.0, float(np.max(np.abs(H))))
    assert np.max(np.abs(H - fd)) / max(1.0, float(np.max(np.abs(H)))) < 1e-6


@pytest.mark.parametrize("name", sorted(CASES))
def test_pack_unpack_round_trip(name):
    m, y = _state(name)
    parts = m.unpack(y)
    assert [p.name for p in m.parts] == list(parts)
    assert np.array_equal(m.pack(**parts), y)
    Y = np.stack([y, 2 * y])
    assert np.array_equal(m.pack(**m.unpack(Y)), Y)


@pytest.mark.parametrize("name", sorted(CASES))
def test_loss_is_vectorised_over_states(name):
    m, y = _state(name)
    Y = np.stack([y, 0.5 * y])
    assert np.allclose(m.loss(Y), [m.loss(y), m.loss(0.5 * y)], rtol=1e-13, atol=0)
    assert np.allclose(m.grad(Y), np.stack([m.grad(y), m.grad(0.5 * y)]), rtol=1e-12, atol=1e-15)


def _isotropic_value(omega, mu):
    iso = reduced_model(PAPER, n_heads=len(omega))
    return iso.loss(iso.state(omega, mu))


OMEGA, MU = np.array([0.12, -0.07]), np.array([2.5, -1.75])


def test_precond_reduces_to_isotropic_at_identity():
    """Σ = I and W = I: L̃_Σ is L̃ (both written independently)."""
    m = reduced_model(PAPER.replace(Sigma=np.eye(5)), n_heads=2)
    assert m.name == "precond"
    v = m.loss(m.state(OMEGA, MU, np.eye(5)))
    assert abs(v - _isotropic_value(OMEGA, MU)) < 1e-13


def test_multitask_reduces_to_isotropic_with_one_task_on_all_features():
    """One task on all features, ω⁽ʰ⁾_j = ω_h: the multi-task L̃ is L̃."""
    m = reduced_model(PAPER.replace(tasks=((0, 1, 2, 3, 4),)), n_heads=2)
    v = m.loss(m.state(np.repeat(OMEGA[:, None], 5, axis=1), MU[:, None]))
    assert abs(v - _isotropic_value(OMEGA, MU)) < 1e-13


def test_precond_multitask_reduces_to_multitask_at_identity():
    """Σ = I, B_h = diag(ω⁽ʰ⁾): the composed loss is the isotropic multi-task loss (written independently)."""
    tasks = ((0, 1, 2), (1, 2, 3))
    comp = reduced_model(Setting(d=4, L=40, sigma2=0.1, Sigma=np.eye(4), tasks=tasks), n_heads=2)
    mt = reduced_model(Setting(d=4, L=40, sigma2=0.1, tasks=tasks), n_heads=2)
    assert comp.name == "precond_multitask" and mt.name == "multitask"
    rng = np.random.default_rng(5)
    om, mu = 0.3 * rng.standard_normal((2, 4)), rng.standard_normal((2, 2))
    B = np.stack([np.diag(w) for w in om])
    assert abs(comp.loss(comp.state(B, mu)) - mt.loss(mt.state(om, mu))) < 1e-13


def test_precond_multitask_reduces_to_precond_with_one_task():
    """One task on all features, B_h = ω_h W: the composed loss is L̃_Σ of the preconditioned model."""
    S = SIGMA.Sigma
    comp = reduced_model(SIGMA.replace(tasks=((0, 1, 2, 3),)), n_heads=2)
    pre = reduced_model(SIGMA, n_heads=2)
    W = np.random.default_rng(6).standard_normal((4, 4)) / 2
    B = np.stack([OMEGA[0] * W, OMEGA[1] * W])
    assert abs(comp.loss(comp.state(B, MU[:, None])) - pre.loss(pre.state(OMEGA, MU, W))) < 1e-12
    assert S is not None


def test_isotropic_multitask_loss_refuses_sigma():
    """The isotropic multi-task formulas would ignore Σ: they refuse it, naming `setting.Sigma`."""
    from reduced_dynamics.multitask.loss import mt_loss

    with pytest.raises(ValueError, match="setting.Sigma"):
        mt_loss(np.zeros((2, 4)), np.zeros((2, 2)), SIGMA.replace(tasks=((0, 1, 2), (1, 2, 3))))


def test_activation_model_with_exp_is_the_isotropic_model():
    """f = exp: L̃_f (tilt and fluctuation terms by its own formulas) is L̃."""
    m = model_class("activation")(PAPER, n_heads=2)
    assert abs(m.loss(m.state(OMEGA, MU)) - _isotropic_value(OMEGA, MU)) < 1e-12


def test_corrected_model_tends_to_isotropic_bias_as_L_grows():
    """R_0 + R_1/L and L̃ share the L → ∞ limit σ² + (1 − μᵀω)²: both gaps shrink like 1/L."""
    gaps = []
    for L in (10**3, 10**4):
        s = PAPER.replace(L=L)
        c = reduced_model(s, n_heads=2, objective="corrected")
        i = reduced_model(s, n_heads=2)
        y = c.state(OMEGA, MU)
        gaps.append(abs(c.loss(y) - i.loss(y)))
    assert gaps[1] < 0.2 * gaps[0]


@pytest.mark.parametrize("name", sorted(CASES))
def test_short_flow_descends(name):
    m = _model(name)
    y0 = m.initial_state(seed=0, scale=0.05)
    # the exact risk costs ~0.1 s per gradient at d = 3: a shorter flow keeps the test cheap
    f = integrate(m, y0, t_end=0.5 if name == "exact" else 5.0, n_times=5, stationarity_tol=0)
    assert f.status == Status.REACHED_T_END and f.success
    assert f.states.shape == (5, m.size) and np.array_equal(f.states[0], y0)
    assert np.all(np.diff(f.loss) <= 1e-12)
    assert f.final.loss == pytest.approx(f.loss[-1], rel=1e-14)


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_is_a_value_error_naming_it(name):
    m = _model(name)
    with pytest.raises(ValueError, match="`y0`"):
        integrate(m, np.zeros(m.size + 1))
    with pytest.raises(ValueError, match="`y0`"):
        integrate(m, np.full(m.size, np.nan))
    with pytest.raises(ValueError, match="`t_end`"):
        integrate(m, m.initial_state(seed=0), t_end=-1.0)
    with pytest.raises(ValueError, match="`n_heads`"):
        reduced_model(CASES[name][0], n_heads=0, objective=CASES[name][1])


@pytest.mark.parametrize("name", sorted(n for n in CASES if n != "activation"))
def test_start_outside_the_domain_is_refused(name):
    """A start beyond the model's domain edge: DomainError (a ValueError), not a run."""
    m = _model(name)
    y = np.full(m.size, 1.0 if name == "corrected" else 20.0)
    assert not m.in_range(y)
    with pytest.raises(DomainError):
        integrate(m, y)


@pytest.mark.parametrize("name", sorted(n for n in CASES if model_class(n).has_hessian))
def test_batched_radau_serves_every_model_with_a_hessian(name):
    """batch-Radau (vectorised over trajectories) ends where single LSODA runs at tight tolerance end,
    within its tolerance: |Δy| <= 100·rtol·(1 + |y|) at rtol 1e-9 (an independent solver and path; measured
    ~5e-12)."""
    m = _model(name)
    Y0 = m.initial_state(seed=1, scale=0.05, n=3)
    batch = integrate(m, Y0, t_end=20.0, n_times=5, method="batch-Radau", rtol=1e-9, atol=1e-12)
    assert batch.method == "batch-Radau" and batch.states.shape == (3, 5, m.size)
    for i in range(3):
        one = integrate(m, Y0[i], t_end=20.0, n_times=5, method="LSODA", rtol=1e-12, atol=1e-14)
        assert batch.status[i] == one.status == Status.REACHED_T_END
        err = np.abs(batch.y_stop[i] - one.states[-1]) / (1.0 + np.abs(one.states[-1]))
        assert err.max() < 100 * 1e-9
