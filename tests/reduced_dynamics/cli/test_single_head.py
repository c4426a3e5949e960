"""The `single-head` CLI command, in-process through reduced_dynamics.cli.main."""

from __future__ import annotations

import json

import pytest

from reduced_dynamics.cli import main
from reduced_dynamics.exact.single_head import exact_single_head_profile, single_head_limit
from reduced_dynamics.setting import Setting


def run(capsys, *extra):
    rc = main(["single-head", "--quiet", *extra])
    out, err = capsys.readouterr()
    return rc, out, err


def test_json_schema_and_values(capsys, tmp_path):
    rc, out, err = run(
        capsys, "--d", "3", "--L", "20", "--sigma2", "0.2", "--omega-tol", "1e-4", "--json", "--out", str(tmp_path)
    )
    assert rc == 0 and err == ""
    doc = json.loads(out)
    assert set(doc) >= {"omega", "mu", "risk", "omega_limit", "error_estimate", "seconds", "file"}
    s = Setting(d=3, L=20, sigma2=0.2)
    prof = exact_single_head_profile(doc["omega"], s)  # the printed optimum is the profile's minimiser in μ
    assert doc["mu"] == pytest.approx(prof.mu_opt, rel=1e-9)
    assert doc["risk"] == pytest.approx(prof.risk_opt, abs=1e-9)
    assert doc["omega_limit"] == pytest.approx(single_head_limit(s).omega, rel=1e-12)
    assert json.loads(open(doc["file"]).read())["omega"] == doc["omega"]


def test_text_output(capsys):
    rc, out, err = run(capsys, "--d", "3", "--L", "20", "--omega-tol", "1e-3")
    assert rc == 0 and err == ""
    assert "exact optimum" in out and "limit" in out


@pytest.mark.parametrize(
    "args, flag",
    [(["--L", "1"], "L"), (["--omega-tol", "2"], "--omega-tol"), (["--sigma2", "nan"], "sigma2"), (["--d", "0"], "d")],
)
def test_bad_input_is_one_line_exit_2(capsys, args, flag):
    rc, out, err = run(capsys, *args)
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and flag in err


@pytest.mark.parametrize(
    "extra, flag",
    [
        (["--L", "1"], "`--L`"),  # the exact risk needs L >= 2
        (["--L", "2"], "`--L`"),  # too short: the risk still decreases at the end of the range (hard-max head)
        (["--d", "9", "--omega-tol", "0"], "`--omega-tol`"),  # checked before the range check
    ],
)
def test_one_error_line_names_the_flag(capsys, extra, flag):
    """Found by the CLI fuzz: L = 1 named `setting.L`, L = 2 ended in a RuntimeError traceback."""
    rc, out, err = run(capsys, *extra)
    assert rc == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0], err


def test_large_d_search_stays_inside_the_evaluator_range(capsys):
    """At d = 9 the evaluator allows |ω| <= 1.145 < 1.2: the default search range shrinks with it."""
    rc, out, err = run(capsys, "--d", "9", "--L", "40", "--omega-tol", "1e-3", "--json")
    assert rc == 0, err
    assert 0.05 < json.loads(out)["omega"] < 1.145
