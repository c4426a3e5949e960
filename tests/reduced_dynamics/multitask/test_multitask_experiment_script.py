"""scripts/multitask_experiment.py: train and save, evaluate the saved models, pack them for the figure."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from reduced_dynamics import Setting
from reduced_dynamics.multitask.attention import extract_reduced, train_mt_attention

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "multitask_experiment.py"


def _load():
    spec = importlib.util.spec_from_file_location("multitask_experiment", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_save_evaluate_and_pack(tmp_path, capsys):
    mod = _load()
    common = ["--param", "separate", "--heads", "2,3", "--seeds", "0", "--lr", "1e-3"]
    assert mod.main([*common, "--steps", "40", "--save", str(tmp_path), "--train-only"]) == 0
    capsys.readouterr()
    packed = tmp_path / "models.npz"
    argv = [*common, "--models", str(tmp_path), "--n-eval", "500", "--figure-data", str(packed)]
    assert mod.main(argv) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["steps"] == {"H2_s0": 40, "H3_s0": 40} and rep["lr"] == 1e-3
    # the saved model is the one train_mt_attention makes with the same options (independent run)
    s = Setting.paper_multitask()
    ref = train_mt_attention(3, s, steps=40, seed=0, lr=1e-3, parameterisation="separate")
    with np.load(packed) as z:
        np.testing.assert_array_equal(z["KQ_H3_s0"], ref.model.KQ)
        assert str(z["param"]) == "separate" and int(z["steps_H3_s0"]) == 40
    assert rep["seeds"]["0"]["models"]["3"]["roles"] == list(extract_reduced(ref.model, s).roles)
    d = rep["seeds"]["0"]["paired"]["H3_minus_H4"] if "H3_minus_H4" in rep["seeds"]["0"]["paired"] else None
    assert d is None  # H = 4 was not trained: no H3 − H4 difference is reported


def test_figure_data_needs_models(capsys):
    mod = _load()
    with pytest.raises(SystemExit) as e:
        mod.main(["--figure-data", "x.npz"])
    assert e.value.code == 2 and "--models" in capsys.readouterr().err
