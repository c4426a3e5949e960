"""The `risk` CLI command, in-process through reduced_dynamics.cli.main and once as a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from reduced_dynamics import Setting
from reduced_dynamics.cli import main
from reduced_dynamics.estimation.closed_forms import gd_risk

NAMES = ["multi_head", "single_head", "gd", "debiased_gd", "bayes_ridge"]
Z = 4.0  # family of five checks on one seed, in standard errors


def run_json(capsys, *extra):
    rc = main(["risk", "--prompts", "4000", "--json", *extra])
    out, err = capsys.readouterr()
    assert rc == 0 and err == ""
    return json.loads(out)


def test_json_schema_and_values(capsys):
    doc = run_json(capsys)
    assert set(doc) >= {"estimators", "prompts", "seconds"}
    assert list(doc["estimators"]) == NAMES
    assert doc["prompts"] == 4000 and doc["seconds"] > 0
    for name, e in doc["estimators"].items():
        assert set(e) == {"risk", "stderr", "exact"}
        assert 0.1 <= e["risk"] < 1.5 and 0 < e["stderr"] < 0.05, name
    for name in NAMES:
        exact = doc["estimators"][name]["exact"]
        assert (exact is not None) == (name in ("gd", "debiased_gd")), name
    s = Setting(d=5, L=40, sigma2=0.1)
    assert doc["estimators"]["gd"]["exact"] == gd_risk(s.eta_star, s, debiased=False)
    assert doc["estimators"]["debiased_gd"]["exact"] == gd_risk(s.eta_star, s, debiased=True)
    assert doc["model"] == "isotropic" and doc["differences"] == {}


@pytest.mark.parametrize("conditional", [False, True])
def test_gd_estimates_agree_with_exact(capsys, conditional):
    doc = run_json(capsys, *(["--conditional"] if conditional else []))
    for name in ("gd", "debiased_gd"):
        e = doc["estimators"][name]
        assert abs(e["risk"] - e["exact"]) < Z * e["stderr"], name


def test_bayes_ridge_beats_the_others(capsys):
    doc = run_json(capsys, "--conditional")
    est = doc["estimators"]
    ridge = est["bayes_ridge"]["risk"]
    for name in ("multi_head", "single_head", "gd", "debiased_gd"):
        assert est[name]["risk"] - ridge > Z * (est[name]["stderr"] + est["bayes_ridge"]["stderr"]), name


def test_same_seed_same_json_numbers(capsys):
    a, b = run_json(capsys, "--seed", "3"), run_json(capsys, "--seed", "3")
    assert a["estimators"] == b["estimators"]
    c = run_json(capsys, "--seed", "4")
    assert c["estimators"]["multi_head"]["risk"] != a["estimators"]["multi_head"]["risk"]


def test_custom_heads_change_only_multi_head(capsys):
    a = run_json(capsys)
    b = run_json(capsys, "--omega", "0.5", "-0.5", "0.0", "--mu", "1.0", "-1.0", "0.2")
    assert b["estimators"]["multi_head"]["risk"] != a["estimators"]["multi_head"]["risk"]
    for name in NAMES[1:]:
        assert b["estimators"][name] == a["estimators"][name]
    assert b["config"]["omega"] == [0.5, -0.5, 0.0]


def test_table_output(capsys):
    rc = main(["risk", "--prompts", "2000", "--d", "3", "--L", "10"])
    out, err = capsys.readouterr()
    assert rc == 0 and err == ""
    for name in NAMES:
        assert any(line.startswith(name) for line in out.splitlines()), name


@pytest.mark.parametrize(
    "argv, param",
    [
        (["--d", "0"], "d"),
        (["--L", "-3"], "L"),
        (["--sigma2", "-0.1"], "sigma2"),
        (["--prompts", "0"], "prompts"),
        (["--prompts", "1"], "prompts"),  # no standard error from one prompt
        (["--mu", "1.0", "nan", "--omega", "1.0", "2.0"], "mu"),
        (["--seed", "-1"], "seed"),
        (["--omega", "1.0"], "omega"),
        (["--omega", "1.0", "2.0", "--mu", "1.0"], "omega"),
        # noiseless with fewer examples than features: Bayes ridge is undefined (the lines named `lam`, or no flag)
        (["--sigma2", "0", "--L", "3"], "sigma2"),
        (["--sigma2", "0", "--L", "3", "--d", "6", "--tasks", "1-4,3-6"], "sigma2"),
        # a tiny C leaves the default state of `risk --activation` without a finite μ (the line named `w`)
        (["--activation", "affine", "--activation-c", "1e-10"], "activation-c"),
    ],
)
def test_bad_input_is_one_stderr_line_and_exit_2(capsys, argv, param):
    rc = main(["risk", "--prompts", "100", *argv]) if "--prompts" not in argv else main(["risk", *argv])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and f"`--{param}`" in err


def test_subprocess_bad_d_exits_2_without_traceback():
    proc = subprocess.run(
        [sys.executable, "-m", "reduced_dynamics", "risk", "--d", "0"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr and "`--d`" in proc.stderr
