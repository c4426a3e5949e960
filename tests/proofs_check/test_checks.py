"""`reduced-dynamics check`: registry, JSON contract, exit codes; approximation helpers."""

import json
import subprocess
import sys

import numpy as np
import pytest

from proofs_check.approximation import (
    approximation_error,
    check_approx_vs_exact,
    check_approximation,
    check_single_head,
)
from proofs_check.checks import CHECKS, check_optimality, run_checks
from reduced_dynamics.cli import main

REQUIRED = {"manifold", "drift_law", "approximation", "optimality", "bayes_ratio", "approx_vs_exact", "single_head"}


def test_registry_has_required_names():
    assert REQUIRED <= set(CHECKS)


@pytest.mark.parametrize("check", [check_approximation, check_optimality, check_approx_vs_exact, check_single_head])
def test_quick_checks_pass(check):
    res = check(quick=True)
    assert res.passed, res


def test_approximation_error_is_second_order_in_gamma():
    """Halving γ divides the 99 % quantile of |ŷ − ŷ_dgd| by ≈ 4 (between 3.5 and 4.5): O(γ²), not O(γ)."""
    a = approximation_error(0.02, 0.879, d=5, L=40, sigma2=0.1, n=20000, seed=1)
    b = approximation_error(0.01, 0.879, d=5, L=40, sigma2=0.1, n=20000, seed=1)
    assert 3.5 < a / b < 4.5


def test_approximation_error_detects_wrong_step():
    """With μ± = ±η/(2γ) but compared against GD at a different step, the gap does not vanish."""
    from reduced_dynamics.estimation.predictors import debiased_gd, multi_head, sample_prompt_stats

    st = sample_prompt_stats(5000, d=5, L=40, sigma2=0.1, seed=2)
    g = 0.005
    ok = multi_head(st, [g, -g], [0.879 / (2 * g), -0.879 / (2 * g)]) - debiased_gd(st, 0.879)
    bad = multi_head(st, [g, -g], [0.879 / (2 * g), -0.879 / (2 * g)]) - debiased_gd(st, 0.8)
    assert np.sqrt(np.mean(bad**2)) > 100 * np.sqrt(np.mean(ok**2))


def test_check_cli_json(capsys):
    rc = main(["check", "--quick", "--json", "--only", "optimality,bayes_ratio"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["passed"] is True
    assert [c["name"] for c in out["checks"]] == ["optimality", "bayes_ratio"]
    for c in out["checks"]:
        assert {"name", "passed", "predicted", "measured", "tolerance"} <= set(c)


def test_check_cli_table(capsys):
    rc = main(["check", "--quick", "--only", "optimality"])
    text = capsys.readouterr().out
    assert rc == 0 and "[PASS] optimality" in text and "predicted" in text and "tolerance" in text


def test_failing_check_exits_1(capsys, monkeypatch):
    from proofs_check import checks as mod
    from proofs_check.result import CheckResult

    monkeypatch.setitem(mod.CHECKS, "optimality", lambda **kw: CheckResult("optimality", False, "p", "m", "t"))
    rc = main(["check", "--quick", "--only", "optimality"])
    assert rc == 1 and "[FAIL] optimality" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args,param", [(["--only", "nosuch"], "`only`"), (["--d", "0"], "`d`"), (["--sigma2", "-1"], "`sigma2`")]
)
def test_check_bad_input(capsys, args, param):
    rc = main(["check", "--quick", *args])
    err = capsys.readouterr().err
    assert rc == 2 and param in err and len(err.strip().splitlines()) == 1


def test_check_subprocess_bad_input():
    proc = subprocess.run(
        [sys.executable, "-m", "reduced_dynamics", "check", "--only", "nosuch"], capture_output=True, text=True
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_run_checks_bad_only():
    with pytest.raises(ValueError, match="`only`"):
        run_checks(only=["nope"])
