"""One contract test for every registered reduced model (``reduced_dynamics.models.MODELS``).

Each model is checked the same way, against independent routes: its gradient against central
finite differences of its loss, its Hessian (where derived) against central differences of its
gradient, its reduction to the isotropic model where the mathematics says it reduces, a short
flow through the one integrator, and bad input. A model added to ``MODELS`` without a case here
fails ``test_every_registered_model_has_a_case``.
"""

from __future__ import annotations

import functools

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


def _outcome(fn, y):
    """``fn(y)`` as ``("value", array)`` or ``("error", type, message)`` (overflow warnings of a huge state aside)."""
    try:
        with np.errstate(all="ignore"):
            return ("value", np.asarray(fn(y), dtype=np.float64))
    except (ValueError, ArithmeticError) as exc:
        return ("error", type(exc), str(exc))


def _float_margin(model, y) -> float:
    return float(model.margin(y))


def _same(a, b) -> bool:
    if a[0] != b[0]:
        return False
    return (
        a[1:] == b[1:] if a[0] == "error" else a[1].shape == b[1].shape and np.array_equal(a[1], b[1], equal_nan=True)
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_integrator_hooks_are_the_public_formulas_bit_for_bit(name):
    """The kernel's ``_grad_one`` / ``_margin_one`` (a model may skip its checks there) give the numbers of
    ``grad`` / ``margin`` exactly, and the same error, inside the domain, at its edge, beyond and at NaN/inf."""
    m, y = _state(name)
    models = [m]
    if name == "precond":
        models.append(model_class(name)(CASES[name][0], n_heads=CASES[name][2], per_head=True))
    for model in models:
        rng = np.random.default_rng(7)
        states = [scale * rng.standard_normal(model.size) for scale in (0.01, 0.3, 1.0, 3.0, 30.0, 1e3, 1e200)]
        bad = states[1].copy()
        bad[0] = np.nan
        states += [bad, np.where(np.arange(model.size) == 1, np.inf, states[1])]
        for v in states if name != "exact" else states[:2] + states[-2:]:  # exact: a quadrature per gradient
            assert _same(_outcome(model._grad_one, v), _outcome(model.grad, v)), (model, v)
            assert _same(_outcome(model._margin_one, v), _outcome(functools.partial(_float_margin, model), v)), (
                model,
                v,
            )


@pytest.mark.parametrize("name", ["precond", "multitask", "corrected"])
def test_a_subclass_that_replaces_grad_or_margin_is_what_the_integrator_calls(name):
    """The kernel takes a model's unchecked hooks only where they mirror its own grad / margin: a subclass
    (or an instance attribute) replacing one of them is what the integrator calls."""
    setting, objective, H, _ = CASES[name]
    base = model_class(name)

    class Doubled(base):
        def grad(self, y):
            return 2.0 * super().grad(y)

        def margin(self, y):
            return -3.0

    m, y = _state(name)
    sub = Doubled(setting, n_heads=H)
    k = sub.kernels(stationarity_tol=1e-10, budget=100)
    assert np.array_equal(k.rhs_array(0.0, y), -2.0 * m.grad(y)) and k.margin(y) == -3.0
    m.margin = lambda y: -4.0
    assert m.kernels(stationarity_tol=1e-10, budget=100).margin(y) == -4.0


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


# ---------------------------------------------------------------------------------------------------- risk hooks
#: Monte Carlo checks of the risk plans: prompts per estimate, and the allowed |MC − exact| in standard errors
#: (a family of about twenty comparisons on fixed seeds)
N_RISK, Z_RISK = 4000, 4.0


def _risk_state(name):
    """The state a risk plan evaluates: the two-head point of the solution manifold (models with a state)."""
    m = reduced_model(CASES[name][0], n_heads=2, objective=CASES[name][1])
    return m, (m.manifold_point(0.1) if m.scalar_heads else None)


def test_every_model_declares_its_risks_and_its_trainer():
    """A model either has risk estimators and a registered trainer, or refuses both in one place."""
    from reduced_dynamics.models._train import TRAINERS

    for name in CASES:
        cls = model_class(name)
        assert cls.trainer is None or cls.trainer in TRAINERS, name
    assert {n for n in CASES if not model_class(n).has_risks} == {"precond_multitask"}
    assert {n for n in CASES if model_class(n).trainer is None} == {"precond_multitask"}
    m = _model("precond_multitask")
    with pytest.raises(NotImplementedError, match="precond_multitask"):
        m.risk_plan()
    with pytest.raises(NotImplementedError, match="precond_multitask"):
        m.train(None)


@pytest.mark.parametrize("name", sorted(n for n in CASES if model_class(n).has_risks))
def test_risk_plan_exact_risks_agree_with_monte_carlo(name):
    """Every reference with a closed-form risk (GD and debiased GD at η*, preconditioned GD by Wishart moments,
    per-support debiased GD and zero per task) against the model's own Monte Carlo estimate of it, within
    Z_RISK standard errors; the paired differences are the differences of the estimates (same prompts)."""
    m, y = _risk_state(name)
    plan = m.risk_plan(y)
    assert list(plan.predictors) == list(plan.exact)
    assert (plan.state is None) == (y is None)
    conditional = True if plan.conditional is None else plan.conditional  # Rao–Blackwellised where derived
    res = m.estimate_risks(plan, n_prompts=N_RISK, seed=11, conditional=conditional)
    assert res.names == tuple(plan.predictors) and res.n == N_RISK
    checked = 0
    for i, key in enumerate(res.names):
        exact = plan.exact[key]
        ex = np.array([np.nan if e is None else e for e in np.ravel(exact)], dtype=float) if exact is not None else None
        if ex is None or np.all(np.isnan(ex)):
            continue
        ok = ~np.isnan(ex)
        z = (np.ravel(res.risk[i])[ok] - ex[ok]) / np.ravel(res.stderr[i])[ok]
        assert np.all(np.abs(z) < Z_RISK), (key, z)
        checked += 1
    assert checked >= (0 if name == "activation" else 2)
    for a, b in plan.pairs:
        r, s = res.differences[f"{a}-{b}"]
        ia, ib = res.names.index(a), res.names.index(b)
        assert r == pytest.approx(res.risk[ia] - res.risk[ib], abs=1e-12)
        assert 0 < s < res.stderr[ia] + res.stderr[ib]  # paired: no larger than the unpaired bound


@pytest.mark.parametrize("name", ["isotropic", "corrected"])
def test_risk_plan_state_predictor_matches_the_exact_quadrature(name):
    """The state's predictor of the softmax models (MultiHead at the manifold point) against the exact finite-L risk
    by deterministic quadrature (reduced_dynamics.exact), an independent route: within Z_RISK standard errors."""
    from reduced_dynamics.exact.evaluator import exact_risk

    m, y = _risk_state(name)
    plan = m.risk_plan(y)
    res = m.estimate_risks(plan, n_prompts=N_RISK, seed=5, conditional=True)
    r, s = res.estimate(plan.state)
    w, mu = m.split(y)
    assert abs(r - exact_risk(w, mu, m.setting).risk) < Z_RISK * s


def test_activation_risk_plan_is_act_mc_risk_on_the_same_stream():
    """The activation model's stream is that of act_mc_risk (its own per-prompt loop) for the same seed."""
    from reduced_dynamics.activation_dynamics.loss import act_mc_risk

    m, y = _risk_state("activation")
    plan = m.risk_plan(y)
    assert plan.conditional is True and plan.pairs == (
        ("reduced_f", "debiased_gd_star"),
        ("reduced_f", "debiased_gd_claim"),
    )
    res = m.estimate_risks(plan, n_prompts=N_RISK, seed=7)
    w, mu = m.split(y)
    assert res.estimate("reduced_f")[0] == pytest.approx(
        act_mc_risk(w, mu, m.setting, n_prompts=N_RISK, seed=7).risk, rel=1e-12
    )


@pytest.mark.parametrize("name", ["isotropic", "activation"])
def test_manifold_point_minimises_the_loss_along_the_manifold(name):
    """ω = (γ, −γ), μ = (M, −M): d/dM of the model's loss vanishes at the manifold point (central differences)."""
    m, y = _risk_state(name)
    w, mu = m.split(y)
    h = 1e-5 * abs(mu[0])
    up, down = m.loss(m.state(w, mu + [h, -h])), m.loss(m.state(w, mu - [h, -h]))
    assert abs(up - down) / (2 * h) < 1e-7
    with pytest.raises(ValueError, match="`n_heads`"):
        reduced_model(CASES[name][0], n_heads=3).manifold_point(0.1)


# ---------------------------------------------------------------------------------------------------- train hooks
#: per trainer family: a small setting, and where its summary holds the trained model's risk
TRAIN_CASES = {
    "isotropic": (Setting(d=3, L=10, sigma2=0.1), lambda s: s["risk"]),
    "precond": (Setting(d=3, L=10, sigma2=0.1, Sigma=np.diag([0.5, 1.0, 2.0])), lambda s: s["risks"]["model"]["risk"]),
    "multitask": (Setting(d=4, L=10, sigma2=0.1, tasks=((0, 1, 2), (1, 2, 3))), lambda s: s["risk"]["trained"]["risk"]),
}


@pytest.mark.parametrize("name", sorted(TRAIN_CASES))
def test_trainer_trains_and_hands_the_run_to_the_model(name, tmp_path):
    """A few steps of each registered trainer family: the run's files appear and the summary is the model's,
    with a finite risk of the trained model, at least the noise σ² (the Bayes floor is above it)."""
    from reduced_dynamics.models._train import TRAINERS, TrainSpec

    setting, risk_of = TRAIN_CASES[name]
    m = reduced_model(setting, n_heads=2)
    out = m.train(TrainSpec(steps=5, batch=8, eval_prompts=200, seed=1), out=tmp_path)
    assert not out.diverged and out.step == 5
    assert all((tmp_path / f).exists() for f in TRAINERS[m.trainer].files[1:])
    risk = np.ravel(risk_of(out.summary))
    assert np.all(np.isfinite(risk)) and np.all(risk > setting.sigma2)


def test_a_diverging_run_is_an_outcome_not_an_exception():
    """SGD at lr 10 on linear attention blows up: the outcome says diverged, names `lr`, and has no summary."""
    from reduced_dynamics.models._train import TrainSpec

    m = reduced_model(Setting(d=3, L=10, sigma2=0.1), n_heads=2)
    out = m.train(TrainSpec(steps=200, batch=8, lr=10.0, optimizer="sgd", param="linear", eval_prompts=200))
    assert out.diverged and "`lr`" in out.message and out.summary == {} and out.step < 200


@pytest.mark.parametrize(
    "bad, name",
    [
        (dict(steps=0), "`steps`"),
        (dict(steps=10**7 + 1), "`steps`"),
        (dict(batch=0), "`batch`"),
        (dict(lr=0.0), "`lr`"),
        (dict(eval_prompts=1), "`eval_prompts`"),
        (dict(checkpoint_every=0), "`checkpoint_every`"),
        (dict(seed=-1), "`seed`"),
    ],
)
def test_train_spec_bounds_are_the_same_for_every_model(bad, name):
    from reduced_dynamics.models._train import TrainSpec

    with pytest.raises(ValueError, match=name):
        TrainSpec(**{"steps": 1, **bad})


# ---------------------------------------------------------------- API contract (issue 23)


@pytest.mark.parametrize("name", ["isotropic", "precond", "multitask"])
def test_a_bad_state_is_refused_naming_y(name):
    """model.loss(0.0) raised IndexError, loss("x") 'could not convert string', loss(nan) named `omega`."""
    m = reduced_model(CASES[name][0], n_heads=2)
    for bad in (0.0, "x", np.full(m.size, np.nan), np.zeros(m.size + 1)):
        with pytest.raises(ValueError, match="`y`"):
            m.loss(bad)
        with pytest.raises(ValueError, match="`y`"):
            m.grad(bad)


def test_margin_of_a_nonfinite_state_is_outside_and_finite():
    """The margin of a NaN state was NaN (isotropic) and of a huge one -inf; both are -1 / finite negatives."""
    m = reduced_model(PAPER, n_heads=2)
    assert m.margin(np.full(4, np.nan)) == -1.0
    assert m.margin(np.array([1e200, 0.0, 0.0, 0.0])) == -np.finfo(np.float64).max
    assert np.array_equal(m.margin(np.array([[np.inf, 0, 0, 0], [0.1, 0.1, 0, 0]])) > 0, [False, True])
    assert not m.in_range(np.full(4, np.nan))


def test_estimate_risks_refuses_a_plan_of_another_type():
    """estimate_risks(0.0) raised AttributeError ('float' object has no attribute 'predictors')."""
    m = reduced_model(PAPER, n_heads=2)
    with pytest.raises(ValueError, match="`plan` must be a RiskPlan"):
        m.estimate_risks({"model": None}, n_prompts=10, seed=0)
