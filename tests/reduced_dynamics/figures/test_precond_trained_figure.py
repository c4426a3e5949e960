"""Figure ``precond_trained``: the exact curves' invariants, the trained points, the paper-scale overlay file."""

from __future__ import annotations

import json

import numpy as np
import pytest

from reduced_dynamics.figures import precond_trained as fig_mod


@pytest.fixture(scope="module")
def quick(quick_figure_data):
    """``precond_trained_data(PAPER_SETTING, quick=True, seed=0)``, made once per
    session by the ``quick_figure`` fixture (tests/conftest.py; shared with tests/test_golden.py) and read back
    from its ``.npz`` (what the plot draws)."""
    return quick_figure_data("precond_trained", fig_mod.precond_trained_data)


def test_exact_curves(quick):
    """P* approaches Σ⁻¹ as L grows; the optimum is below Σ⁻¹ and plain debiased GD; I is far from Σ⁻¹."""
    dist = np.asarray(quick["opt_dist_grid"])
    assert np.all(np.diff(dist) < 0) and dist[-1] < 0.05
    r_opt, r_si, r_i = (np.asarray(quick[k]) for k in ("risk_opt_grid", "risk_sigma_inv_grid", "risk_identity_grid"))
    assert np.all(r_opt <= r_si + 1e-12) and np.all(r_si < r_i)
    Si = np.asarray(quick["sigma_inv"])
    np.testing.assert_allclose(Si @ np.asarray(quick["Sigma"]), np.eye(5), atol=1e-12)
    assert quick["identity_dist"] > 0.5


def test_trained_points(quick):
    """Every trained W is closer to Σ⁻¹ than the identity is; the risk points have standard errors."""
    assert np.all(np.asarray(quick["W_dist_sigma_inv"]) < quick["identity_dist"])
    assert np.all(np.asarray(quick["P_eff_dist_sigma_inv"]) < quick["identity_dist"])
    assert np.all(np.asarray(quick["risk_se"]) > 0) and np.asarray(quick["kq_last"]).shape == (2, 5, 5)
    assert np.asarray(quick["paper_L"]).size == 0  # quick mode never reads the paper-scale report


def test_paper_overlay_is_read_from_the_report(tmp_path, monkeypatch):
    run = {
        "L": 40,
        "H": 3,
        "steps": 500000,
        "W_distance_sigma_inv": 0.12,
        "P_eff_distance_sigma_inv": 0.11,
        "risks": {"model": {"risk": 0.4, "stderr": 0.002}},
        "diffs": {"model-dpgd_optimal": {"risk": 0.001, "stderr": 0.0005}},
    }
    (tmp_path / "r.json").write_text(json.dumps({"runs": [run]}))
    monkeypatch.setattr(fig_mod, "PAPER_RUNS", tmp_path / "r.json")
    p = fig_mod._paper_runs()
    assert p["paper_L"].tolist() == [40] and p["paper_H"].tolist() == [3] and p["paper_W_dist"].tolist() == [0.12]
    assert p["paper_diff_opt_se"].tolist() == [0.0005] and p["paper_P_eff_dist"].tolist() == [0.11]
    monkeypatch.setattr(fig_mod, "PAPER_RUNS", tmp_path / "absent.json")
    assert fig_mod._paper_runs()["paper_L"].size == 0
