"""Dynamics checkers (manifold, drift law, optimality, single head) pass and can fail."""

import pytest

from proofs_check.dynamics import check_drift_law, check_manifold, check_optimality_loss, check_single_head_flow
from proofs_check.result import CheckResult
from reduced_dynamics import integrate, reduced_model
from reduced_dynamics.dynamics.manifold import drift_law_gamma, eta_star, flow_eta_gap
from reduced_dynamics.setting import Setting

PAPER = Setting.paper()


def _two_head_flow(setting, *, seed, t_end):
    """The H = 2 flow of L̃ from ``model.initial_state(seed=seed)`` (the integrator's defaults: LSODA, 1e-11)."""
    model = reduced_model(setting, n_heads=2)
    return integrate(model, model.initial_state(seed=seed), t_end=t_end)


@pytest.mark.parametrize("check", [check_manifold, check_drift_law, check_optimality_loss, check_single_head_flow])
def test_quick_checks_pass_at_paper_setting(check):
    res = check(PAPER, quick=True)
    assert isinstance(res, CheckResult) and res.error is None
    assert res.passed, res
    assert res.predicted and res.measured and res.tolerance


def test_drift_law_detects_a_wrong_law():
    """The law with the wrong head factor (pn/H → 1 for H = 2) is off by 2^(1/6) − 1 ≈ 12 %, far outside 1e-3."""
    res = _two_head_flow(PAPER, seed=0, t_end=1e5)
    right = drift_law_gamma(res.t[-1], PAPER, n_positive=1, n_negative=1)
    wrong = drift_law_gamma(res.t[-1], PAPER, n_positive=2, n_negative=2)
    assert abs(res.gamma[-1] / right - 1) < 1e-3
    assert abs(res.gamma[-1] / wrong - 1) > 0.1


@pytest.mark.parametrize("d,L,s2", [(3, 20, 0.5), (8, 100, 0.1)])
def test_drift_law_other_problems(d, L, s2):
    """γ(1e6) within 2e-4 of the law away from the paper's setting (measured 5e-5 .. 1.3e-4)."""
    setting = Setting(d=d, L=L, sigma2=s2)
    res = _two_head_flow(setting, seed=1, t_end=1e6)
    assert abs(res.gamma[-1] / drift_law_gamma(1e6, setting, n_positive=1, n_negative=1) - 1) < 2e-4


def test_eta_gap_constant():
    """η* − η_eff ≈ η*² c d³ γ⁴/2 along the flow (the S_γ value /6 would be 3× off)."""
    res = _two_head_flow(PAPER, seed=2, t_end=1e5)
    gap = eta_star(PAPER) - res.eta_eff[-1]
    assert gap / flow_eta_gap(res.gamma[-1], PAPER) == pytest.approx(1.0, abs=0.01)


@pytest.mark.parametrize("p,n", [(0, 1), (1, 0)])
def test_drift_law_bad_input(p, n):
    with pytest.raises(ValueError, match="`n_positive`|`n_negative`"):
        drift_law_gamma(1.0, PAPER, n_positive=p, n_negative=n)


def test_optimality_loss_reports_a_setting_where_it_cannot_run():
    """At d = 200 the BFGS route and the linear solve disagree: a failed result with the reason, not a traceback."""
    res = check_optimality_loss(Setting(d=200, L=40, sigma2=0.1), quick=True)
    assert isinstance(res, CheckResult)
    assert not res.passed and res.status == "ERROR"
    assert res.error.startswith("RuntimeError: BFGS and the linear solve disagree")
    assert "could not run" in res.measured and "d=200" in res.measured


@pytest.mark.parametrize("check", [check_manifold, check_drift_law, check_optimality_loss, check_single_head_flow])
def test_checkers_reject_bad_arguments_instead_of_reporting_them(check):
    """Argument errors still raise (only failures while running become results)."""
    with pytest.raises(ValueError, match="`setting`"):
        check(Setting(d=[3, 5]), quick=True)
    with pytest.raises(ValueError, match="`setting`"):
        check((5, 40, 0.1), quick=True)
    with pytest.raises(TypeError):
        check(PAPER, quikc=True)


@pytest.mark.parametrize(
    "setting", [PAPER.replace(activation="tanh"), Setting.paper_multitask()], ids=["activation", "tasks"]
)
def test_flow_checks_refuse_a_setting_of_another_model(setting):
    """The flow checks are statements about the isotropic L̃ flow: a setting that selects another model is an
    ERROR naming the reason, never a result computed on another loss (the old batch driver ignored `tasks`)."""
    res = check_drift_law(setting, quick=True)
    assert res.status == "ERROR" and not res.passed
    assert res.error.startswith("ValueError: ") and ("activation" in res.error or "MultitaskModel" in res.error)
