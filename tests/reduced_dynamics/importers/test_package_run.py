"""The package's own `reduced-dynamics train --out` output is an importable checkpoint."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from reduced_dynamics import Setting, sample_prompts
from reduced_dynamics.cli import main
from reduced_dynamics.importers import CheckpointError, load
from reduced_dynamics.model.attention import make_model


def _train(tmp_path, capsys, *extra) -> tuple:
    out = tmp_path / "run"
    rc = main(["train", "--heads", "2", "--steps", "30", "--d", "3", "--L", "12", "--out", str(out), "--quiet", *extra])
    capsys.readouterr()
    assert rc == 0
    return out, json.loads((out / "final.json").read_text())


@pytest.mark.parametrize("param", ["separate", "merged"])
def test_train_output_imports_as_the_trained_model(tmp_path, capsys, param):
    out, final = _train(tmp_path, capsys, "--param", param)
    imp = load(out / "final.npz")
    assert imp.d == 3 and imp.n_heads == 2 and "train output" in imp.conventions[1]
    # the circuits the trainer itself reported at the end of the run (its own extraction, written to final.json)
    np.testing.assert_allclose(np.asarray(imp.KQ)[:, :3, :3], np.asarray(final["kq"]), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(np.asarray(imp.OV[:, 0]), np.asarray(final["ov"]), rtol=1e-12, atol=1e-15)
    # and the function: the package model with the file's parameters, read by numpy directly
    z = np.load(out / "final.npz")
    params = {k[len("param_") :]: z[k] for k in z.files if k.startswith("param_")}
    model = make_model(param, n_heads=2, d=3)
    b = sample_prompts(64, Setting(d=3, L=12, sigma2=0.1), seed=5)
    assert np.array_equal(imp.predict(b.tokens, b.x_q), model.predict(params, b))


def test_train_output_without_its_final_json_is_refused(tmp_path, capsys):
    out, _ = _train(tmp_path, capsys)
    lone = tmp_path / "lone"
    lone.mkdir()
    shutil.copy(out / "final.npz", lone / "final.npz")
    with pytest.raises(CheckpointError, match="final.json"):
        load(lone / "final.npz")


def test_linear_attention_train_output_is_refused(tmp_path, capsys):
    out, _ = _train(tmp_path, capsys, "--param", "linear")
    with pytest.raises(CheckpointError, match="'linear' parameterisation"):
        load(out / "final.npz")
