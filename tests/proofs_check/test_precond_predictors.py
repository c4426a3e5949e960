"""Check `precond_risk`: passes at the paper's setting (quick), reports honest numbers, fails when it should."""

from __future__ import annotations

import numpy as np
import pytest

from proofs_check import precond_predictors as pp
from proofs_check.checks import CHECKS
from reduced_dynamics import Setting
from reduced_dynamics.precond.exact import dpgd_risk


def test_quick_check_passes_at_the_paper_setting_with_the_default_sigma():
    r = pp.check_precond_risk(Setting(d=5, L=40, sigma2=0.1), quick=True)
    assert r.status == "PASS", r.measured
    assert CHECKS["precond_risk"] is pp.check_precond_risk
    eigs = np.asarray(r.data["sigma_eigs"])
    np.testing.assert_allclose(eigs, np.linspace(0.5, 4.0, 5), rtol=1e-12)
    # the numbers in data are the closed forms (recomputed here from the library)
    s = pp.precond_setting(Setting(d=5, L=40, sigma2=0.1))
    Sinv = np.linalg.inv(s.Sigma)
    from reduced_dynamics.precond.exact import precond_optimal_eta

    assert r.data["mc"]["dpgd_sigma_inv"]["exact"] == pytest.approx(
        dpgd_risk(Sinv, precond_optimal_eta(Sinv, s), s), rel=1e-12
    )
    assert r.data["differences"]["dpgd_optimal-dpgd_sigma_inv"]["exact"] < 0
    assert r.data["bayes"]["limit"]["bound_holds"] is True


def test_uses_the_settings_own_sigma():
    S = np.diag([0.2, 1.0, 5.0])
    r = pp.check_precond_risk(Setting(d=3, L=12, sigma2=0.3, Sigma=S), quick=True)
    assert r.status == "PASS", r.measured
    np.testing.assert_allclose(r.data["sigma_eigs"], [0.2, 1.0, 5.0], rtol=1e-12)


def test_isotropic_sigma_gives_zero_distance_and_passes():
    r = pp.check_precond_risk(Setting(d=4, L=20, sigma2=0.2, Sigma=np.eye(4) * 2.0), quick=True)
    assert r.status == "PASS", r.measured
    assert max(r.data["distance"]["distance"]) < 1e-12


def test_fails_when_the_closed_form_is_wrong(monkeypatch):
    # a closed form that is off by 5 % must be caught by the quick Monte Carlo comparison (SE ≈ 0.7 %)
    real = pp.dpgd_risk
    monkeypatch.setattr(pp, "dpgd_risk", lambda P, eta, s: 1.05 * real(P, eta, s))
    r = pp.check_precond_risk(Setting(d=5, L=40, sigma2=0.1), quick=True)
    assert r.status == "FAIL"


@pytest.mark.parametrize(
    "setting, why",
    [(Setting(d=5, L=1, sigma2=0.1), "L = 1"), (Setting(d=5, L=40, sigma2=0.0), "σ² = 0"), (Setting(d=300, L=40), "d")],
)
def test_skips_outside_its_range(setting, why):
    r = pp.check_precond_risk(setting, quick=True)
    assert r.status == "SKIPPED" and why in r.skipped


def test_default_sigma_has_the_requested_spectrum():
    S = pp.default_sigma(Setting(d=6), lo=0.5, hi=4.0, seed=3)
    np.testing.assert_allclose(np.linalg.eigvalsh(S), np.linspace(0.5, 4.0, 6), rtol=1e-12)
    assert not np.allclose(S, np.diag(np.diag(S)))  # a random basis, not diagonal
