"""Check `activations` (quick variant): passes at the paper setting with its numbers; a wrong loss fails it."""

from __future__ import annotations

import pytest

import proofs_check.activations as pa
from reduced_dynamics import Setting


def test_quick_check_passes_with_numbers(quick_check):
    """``check_activations(Setting(), quick=True)``, read from the session's run of ``check --quick --only
    activations`` (tests/conftest.py: the golden case check_quick_activations, its --out file in full precision)."""
    from proofs_check.checks import CHECKS

    assert CHECKS["activations"] is pa.check_activations
    r = quick_check("activations")
    assert r["error"] is None and r["passed"], r["measured"]
    per = r["data"]["per_activation"]
    assert set(per) == {"exp", "affine", "square", "tanh"}
    assert per["tanh"]["flow"]["gamma"] == pytest.approx(per["tanh"]["flow"]["gamma_drift_law"], rel=0.03)
    assert r["data"]["reduction_rel_err"] < 1e-10 and r["data"]["moments_rel_err"] < 1e-9
    assert per["square"]["flow"]["gamma"] == pytest.approx(per["square"]["flow"]["gamma_drift_law"], rel=0.03)


def test_a_wrong_fluctuation_constant_fails_the_check(monkeypatch):
    """The check can fail: an O(1) error of 0.01 in L̃_f (one that does not vanish as L grows) is caught by the MC part."""
    real = pa.act_loss
    monkeypatch.setattr(pa, "act_loss", lambda om, mu, s: real(om, mu, s) + 0.01)
    monkeypatch.setattr(
        pa, "_flow", lambda s: {"ok": True, "gamma": 0.0, "gamma_drift_law": None, "eta_tilt": 0.0, "eta_claim": 0.0}
    )
    r = pa.check_activations(Setting(), quick=True)
    assert not r.passed and r.error is None
