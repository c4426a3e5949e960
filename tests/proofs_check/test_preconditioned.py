"""Check `preconditioned` (quick variant): passes at the default covariance and reports its numbers; fails honestly."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from proofs_check.checks import CHECKS
from proofs_check.preconditioned import check_preconditioned, check_sigma
from reduced_dynamics import Setting


def test_quick_check_passes_with_numbers(quick_check):
    """``check_preconditioned(Setting(), quick=True)``, read from the session's run of ``check --quick --only
    preconditioned`` (tests/conftest.py: the golden case check_quick_preconditioned, its --out file in full
    precision)."""
    assert CHECKS["preconditioned"] is check_preconditioned
    r = quick_check("preconditioned")
    assert r["error"] is None and r["passed"], r["measured"]
    rows = r["data"]["flow"]
    assert [row["L"] for row in rows] == [40, 160]
    assert rows[0]["distance_sigma_inv"] > rows[1]["distance_sigma_inv"]
    assert all(row["distance_limit"] < 2e-3 for row in rows)
    mc = r["data"]["mc"]
    assert abs(mc["risk"] - mc["expansion"]) < 3 * mc["stderr"]
    lp = r["data"]["limit_predictor"]
    assert abs(lp["reduced_minus_limit"]) < 1e-3  # the end state is the limit predictor up to O(γ⁴)
    assert lp["sigma_inv_minus_limit"] > 3 * lp["sigma_inv_minus_limit_se"]  # Σ⁻¹ itself is worse at L = 40


def test_default_covariance_and_given_covariance():
    S = check_sigma(Setting(d=4))
    np.testing.assert_allclose(np.linalg.eigvalsh(S), np.linspace(0.5, 4.0, 4), rtol=1e-12)
    given = np.diag([1.0, 2.0, 3.0])
    assert check_sigma(Setting(d=3, Sigma=given)) is not None
    np.testing.assert_array_equal(check_sigma(Setting(d=3, Sigma=given)), given)


def test_array_setting_is_refused():
    with pytest.raises(ValueError, match="`setting` must be scalar"):
        check_preconditioned(Setting(L=[40, 80]), quick=True)


def test_fails_when_the_risk_expansion_is_wrong(monkeypatch):
    """The check can fail: an expansion of the true risk that is off by 0.01 is caught by the Monte Carlo part."""
    import proofs_check.preconditioned as pp

    real = pp.precond_risk_expansion

    def shifted(*a, **k):
        e = real(*a, **k)
        return dataclasses.replace(e, risk=e.risk + 0.01)

    monkeypatch.setattr(pp, "precond_risk_expansion", shifted)
    # the sympy parts (2 s; checked by the session's quick check and tests/reduced_dynamics/precond/test_derive.py)
    # report zero here, so what fails is the Monte Carlo comparison, and it fails by more than its bound
    monkeypatch.setattr(pp, "difference_to_closed_form", lambda *a, **k: 0)
    monkeypatch.setattr(pp, "reduction_to_isotropic", lambda *a, **k: 0)
    r = check_preconditioned(Setting(), quick=True)
    assert r.error is None and not r.passed
    mc = r.data["mc"]
    assert abs(mc["risk"] - mc["expansion"]) > pp.MC_SE * mc["stderr"]
