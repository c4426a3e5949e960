"""scripts/analyze_checkpoints.py on the checkpoints of a --quick run of scripts/train_torch_paper.py: the extracted
(ω, μ) against the state dicts read directly (ω_h = tr(K_hᵀQ_h)_{:d,:d} / (d√D), μ_h = (V_hᵀo_h)_d), η_eff = μᵀω, the
drift exponent column, and one-line refusals of bad flags."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

SCRIPTS = Path(__file__).resolve().parents[3] / "scripts"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


TRAIN, ANALYZE = _load("train_torch_paper"), _load("analyze_checkpoints")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("quick") / "run"
    assert TRAIN.main(["--quick", "--out", str(out), "--print-every", "40"]) == 0  # d=3, L=8, H=2, steps 10..40
    return out


def _direct(path, d=3, H=2):
    sd = {k.split(".")[1]: v.double().numpy() for k, v in torch.load(path, weights_only=True).items()}
    D = d + 1
    Q, K, V = (sd[p].reshape(H, D, D) for p in ("q_proj", "k_proj", "v_proj"))
    o = sd["o_proj"].reshape(H, D)
    KQ = np.einsum("hji,hjk->hik", K, Q) / math.sqrt(D)
    omega = np.einsum("hii->h", KQ[:, :d, :d]) / d
    mu = np.einsum("hji,hj->hi", V, o)[:, d]
    return omega, mu


def test_rows_match_the_state_dicts(quick_run, capsys):
    assert ANALYZE.main([str(quick_run), "--L", "8", "--n-prompts", "400", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["step"] for r in rows] == [10, 20, 30, 40]
    for r in rows:
        omega, mu = _direct(quick_run / f"model_step{r['step']}.pt")
        np.testing.assert_allclose(r["omega"], omega, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(r["mu"], mu, rtol=1e-12, atol=1e-15)
        assert r["eta_eff"] == pytest.approx(float(omega @ mu), rel=1e-12)
        live = ~np.array(r["dummy"])
        if live.any():
            assert r["gamma"] == pytest.approx(float(np.abs(omega[live]).mean()), rel=1e-12)
        assert r["minus_debiased_gd_stderr"] > 0 and r["verdicts_passed"] <= r["verdicts"]


def test_text_table_drift_exponent(quick_run, capsys):
    assert ANALYZE.main([str(quick_run), "--steps", "10,40", "--L", "8", "--n-prompts", "200"]) == 0
    text = capsys.readouterr().out
    assert ANALYZE.main([str(quick_run), "--steps", "10,40", "--L", "8", "--n-prompts", "200", "--json"]) == 0
    a, b = json.loads(capsys.readouterr().out)
    assert a["gamma"] > 0 and b["gamma"] > 0
    want = math.log(b["gamma"] / a["gamma"]) / math.log(40 / 10)
    line = next(ln for ln in text.splitlines() if ln.split()[0] == "40")
    assert f" {want:+.3f} " in line


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--steps", "15"], "`--steps` 15"),
        (["--steps", "1,x"], "`--steps`"),
        (["--L", "1"], "`--L`"),
        (["--sigma2", "-1"], "`--sigma2`"),
        (["--n-prompts", "1"], "`--n-prompts`"),
        (["--seed", "-1"], "`--seed`"),
    ],
)
def test_bad_flag_is_one_line_and_exit_2(quick_run, capsys, argv, flag):
    assert ANALYZE.main([str(quick_run), "--n-prompts", "200", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and flag in err


def test_directory_without_checkpoints_is_refused(tmp_path, capsys):
    assert ANALYZE.main([str(tmp_path)]) == 2
    assert "holds no model_step{N}.pt" in capsys.readouterr().err
    assert ANALYZE.main([str(tmp_path / "missing")]) == 2
    assert "is not a directory" in capsys.readouterr().err
