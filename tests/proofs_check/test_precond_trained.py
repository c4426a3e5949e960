"""Check `precond_trained` (quick variant): passes at the paper's d, L, σ² and its verdict follows its numbers."""

from __future__ import annotations

import numpy as np

from proofs_check.precond_trained import check_precond_trained
from reduced_dynamics import Setting
from reduced_dynamics.precond.covariance import example_covariance


def test_quick_check_passes_and_agrees_with_its_numbers(quick_check):
    """``check_precond_trained(Setting.paper(), quick=True)`` (Setting.paper() is the CLI's default setting), read
    from the session's run of ``check --quick --only precond_trained`` (tests/conftest.py: the golden case
    check_quick_precond_trained, its --out file in full precision)."""
    from proofs_check.checks import CHECKS

    assert CHECKS["precond_trained"] is check_precond_trained and Setting.paper() == Setting()
    r = quick_check("precond_trained")
    assert r["error"] is None and r["passed"], r["measured"]
    (run,) = r["data"]["runs"]
    cs, ci = np.array(run["cos_sigma_inv"]), np.array(run["cos_identity"])
    live = ~np.array(run["dummy"])
    assert run["heads_closer"] == bool(np.all(cs[live] > ci[live])) and run["heads_closer"]
    assert run["W_closer"] == (run["W_distance_sigma_inv"] < run["W_distance_identity"])
    assert np.all((0 <= cs) & (cs <= 1)) and np.all((0 <= ci) & (ci <= 1))
    np.testing.assert_allclose(np.array(r["data"]["Sigma"]), example_covariance(Setting(d=5, L=40, sigma2=0.1), seed=0))
    assert np.allclose(np.linalg.eigvalsh(np.array(r["data"]["Sigma"])), np.linspace(0.5, 4.0, 5))
    assert run["W_distance_optimal"] < run["W_distance_sigma_inv"]  # the finite-L optimum, not Σ⁻¹ itself


def test_fails_when_the_model_never_saw_sigma(monkeypatch):
    """The check can fail: a model trained on isotropic covariates (blocks ∝ I) is judged against Σ⁻¹."""
    import reduced_dynamics.figures.precond_trained as fpt

    real = fpt.train_under_sigma
    monkeypatch.setattr(fpt, "train_under_sigma", lambda s, **kw: real(s.replace(Sigma=None), **kw))
    r = check_precond_trained(Setting.paper(), quick=True)
    assert r.error is None and not r.passed
    (run,) = r.data["runs"]
    assert not run["heads_closer"]
