"""Tests of the named check `exact_dynamics` (proofs_check.exact)."""

import pytest

import reduced_dynamics.exact.drift as drift_mod
from proofs_check.exact import SIGN_GRID, check_exact_dynamics
from reduced_dynamics.exact.expansion import ExactManifoldCoefficients, exact_manifold_coefficients
from reduced_dynamics.setting import Setting

SMALL = Setting(d=3, L=12, sigma2=0.5)


def test_quick_check_passes_at_a_small_setting():
    r = check_exact_dynamics(SMALL, quick=True)
    assert r.passed, r.measured
    assert r.data["sign_grid"]["points"] == len(SIGN_GRID["d"]) * len(SIGN_GRID["L"]) * len(SIGN_GRID["sigma2"])
    assert r.data["sign_grid"]["a2_negative"] == r.data["sign_grid"]["points"]
    assert r.data["minimum"]["depth"] < 0


def test_check_fails_when_the_closed_form_A2_is_wrong(monkeypatch):
    """Negative control: the corrected loss's positive γ² coefficient in place of the exact one."""

    def wrong(eta, setting):
        c = exact_manifold_coefficients(eta, setting)
        return ExactManifoldCoefficients(a0=c.a0, a2=-c.a2, a4=c.a4)

    monkeypatch.setattr(drift_mod, "exact_manifold_coefficients", wrong)
    r = check_exact_dynamics(SMALL, quick=True)
    assert not r.passed and "Richardson" in r.measured


def test_bad_setting_raises():
    with pytest.raises(ValueError, match="setting"):
        check_exact_dynamics(Setting(d=[2, 3], L=12))
