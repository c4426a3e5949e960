"""`risk` with a covariance (--sigma / --sigma-eigs): preconditioned GD risks, in-process."""

from __future__ import annotations

import json

import numpy as np
import pytest

from reduced_dynamics import Setting
from reduced_dynamics.cli import main
from reduced_dynamics.cli._setting import covariance_from_eigs
from reduced_dynamics.precond.exact import dpgd_risk, optimal_dpgd, precond_optimal_eta

EIGS = "0.5,1.375,2.25,3.125,4"
NAMES = ["dpgd_optimal", "dpgd_sigma_inv", "pgd_sigma_inv", "debiased_gd", "gd", "bayes_ridge"]
Z = 3.0


def run_json(capsys, *extra):
    rc = main(["risk", "--sigma-eigs", EIGS, "--prompts", "20000", "--json", *extra])
    out, err = capsys.readouterr()
    assert rc == 0 and err == ""
    return json.loads(out)


@pytest.mark.parametrize("conditional", [False, True])
def test_json_estimates_agree_with_closed_forms_and_the_library(capsys, conditional):
    doc = run_json(capsys, *(["--conditional"] if conditional else []))
    assert list(doc["estimators"]) == NAMES
    for name, e in doc["estimators"].items():
        if e["exact"] is not None:
            assert abs(e["risk"] - e["exact"]) <= Z * e["stderr"], name
    for key, v in doc["differences"].items():
        if v["exact"] is not None:
            assert abs(v["risk"] - v["exact"]) <= Z * v["stderr"], key
    # the numbers are those of the library for the same Σ (independent of the command's code path)
    S = covariance_from_eigs(np.array([float(x) for x in EIGS.split(",")]), seed=0)
    s = Setting(d=5, L=40, sigma2=0.1, Sigma=S)
    opt = optimal_dpgd(s)
    assert doc["estimators"]["dpgd_optimal"]["exact"] == pytest.approx(opt.risk, rel=1e-12)
    Sinv = np.linalg.inv(S)
    assert doc["estimators"]["dpgd_sigma_inv"]["exact"] == pytest.approx(
        dpgd_risk(Sinv, precond_optimal_eta(Sinv, s), s), rel=1e-10
    )
    assert doc["optimal"]["distance_to_sigma_inv"] == pytest.approx(opt.distance_to_sigma_inv, rel=1e-10)
    assert doc["limit"]["bound_holds"] is True
    # Bayes ridge is the floor and the optimum beats Σ⁻¹
    est = doc["estimators"]
    assert all(est["bayes_ridge"]["risk"] < est[n]["risk"] for n in NAMES[:-1])
    assert est["dpgd_optimal"]["exact"] < est["dpgd_sigma_inv"]["exact"] < est["debiased_gd"]["exact"]


def test_text_output_and_out_file(capsys, tmp_path):
    rc = main(["risk", "--sigma-eigs", EIGS, "--prompts", "2000", "--quiet", "--out", str(tmp_path)])
    out, err = capsys.readouterr()
    assert rc == 0 and err == ""
    assert "dpgd_optimal" in out and "paired differences" in out and "isotropic bound" in out
    (f,) = list(tmp_path.glob("risk_precond_*.json"))
    assert json.loads(f.read_text())["prompts"] == 2000


@pytest.mark.parametrize(
    "extra, flag",
    [
        (["--omega", "0.1,-0.1", "--mu", "1,-1"], "--omega"),
        (["--prompts", "1"], "prompts"),
        (["--L", "1"], "--L` must be >= 2"),
        (["--L", "3", "--sigma2", "0"], "--sigma2` must be > 0 when L < d"),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, extra, flag):
    rc = main(["risk", "--sigma-eigs", EIGS, *extra])
    out, err = capsys.readouterr()
    assert rc == 2
    assert len(err.strip().splitlines()) == 1 and flag in err
