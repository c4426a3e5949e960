"""Figure `activations`: the trained numbers come from the script's JSON (read when present, NaN otherwise)."""

from __future__ import annotations

import json

import numpy as np

import reduced_dynamics.figures.activations as fa


def test_trained_numbers_are_read_from_the_script_file(tmp_path, monkeypatch):
    f = tmp_path / "activations_trained.json"
    f.write_text(
        json.dumps({"square": {"eta_claim": 0.9, "eta_measured": 0.87, "eta_measured_stderr": 0.01, "step": 5}})
    )
    monkeypatch.setattr(fa, "TRAINED_FILE", f)
    out = fa._trained(["exp", "square"])
    assert np.isnan(out[0]).all()
    np.testing.assert_array_equal(out[1, :4], [0.9, 0.87, 0.01, 5])
    assert np.isnan(out[1, 4])  # no omega in the file: no γ
    monkeypatch.setattr(fa, "TRAINED_FILE", tmp_path / "missing.json")
    assert np.isnan(fa._trained(["exp"])).all()
