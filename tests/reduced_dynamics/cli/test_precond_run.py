"""`reduced-dynamics run --sigma ...`: the preconditioned flow's JSON, files, and bad input (exit 2, one line)."""

import json

import numpy as np
import pytest

from reduced_dynamics.cli import main
from reduced_dynamics.cli._setting import covariance_from_eigs
from reduced_dynamics.precond.flow import precond_limit
from reduced_dynamics.precond.metrics import scale_free_distance
from reduced_dynamics.setting import Setting

EIGS = "0.5,1.375,2.25,3.125,4"


def test_json_reports_w_and_distance(capsys, tmp_path):
    rc = main(
        ["run", "--sigma-eigs", EIGS, "--sigma-seed", "0", "--init", "symmetric", "--t-end", "1e3", "--json"]
        + ["--out", str(tmp_path)]
    )
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["success"] is True
    Sig = covariance_from_eigs([0.5, 1.375, 2.25, 3.125, 4.0], seed=0)
    W = np.array(out["W"])
    assert W.shape == (5, 5) and len(out["omega"]) == len(out["mu"]) == 2
    # the reported distance is the distance of the reported W (independent recomputation)
    assert out["distance_sigma_inv"] == pytest.approx(scale_free_distance(W, np.linalg.inv(Sig)), abs=1e-12)
    lim = precond_limit(Setting(d=5, L=40, sigma2=0.1, Sigma=Sig))
    assert out["limit"]["distance_sigma_inv"] == pytest.approx(lim.distance_sigma_inv, rel=1e-12)
    assert out["distance_limit"] < 2e-3
    assert out["sign_matched"] is True
    data = np.load(out["files"]["trajectory"])
    np.testing.assert_allclose(data["W"][-1], W)
    np.testing.assert_allclose(data["Sigma"], Sig)


def test_text_output(capsys):
    rc = main(["run", "--sigma-eigs", EIGS, "--init", "symmetric", "--t-end", "100", "--quiet"])
    text = capsys.readouterr().out
    assert rc == 0
    assert "distance of W to Σ⁻¹" in text and "η_eff" in text


@pytest.mark.parametrize(
    "extra, flag",
    [
        (["--t-end", "-1"], "--t-end"),
        (["--n-init", "3"], "--n-init"),
        (["--omega0", "0.1,-0.1"], "--omega0"),
        (["--method", "RK45"], "--method"),
    ],
)
def test_bad_input_exit_2_one_line(capsys, extra, flag):
    rc = main(["run", "--sigma-eigs", EIGS, "--quiet"] + extra)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and flag in err[0]
