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
from proofs_check.result import CheckResult
from reduced_dynamics.cli import main
from reduced_dynamics.setting import Setting

PAPER = Setting.paper()

REQUIRED = {"manifold", "drift_law", "approximation", "optimality", "bayes_ratio", "approx_vs_exact", "single_head"}


def test_registry_has_required_names():
    assert REQUIRED <= set(CHECKS)


@pytest.mark.parametrize("check", [check_approximation, check_optimality, check_approx_vs_exact, check_single_head])
def test_quick_checks_pass(quick_check, check):
    """``check(PAPER, quick=True)`` passes, read from the session's run of ``check --quick --only NAME`` (the
    golden case check_quick_NAME, tests/conftest.py; PAPER is the CLI's default setting)."""
    name = check.__name__.removeprefix("check_")
    assert CHECKS[name] is check and PAPER == Setting()
    res = quick_check(name)
    assert res["error"] is None and res["passed"], res


def test_approximation_error_is_second_order_in_gamma():
    """Halving γ divides the 99 % quantile of |ŷ − ŷ_dgd| by ≈ 4 (between 3.5 and 4.5): O(γ²), not O(γ)."""
    a = approximation_error(0.02, 0.879, PAPER, n_prompts=20000, seed=1)
    b = approximation_error(0.01, 0.879, PAPER, n_prompts=20000, seed=1)
    assert 3.5 < a / b < 4.5


def test_approximation_error_detects_wrong_step():
    """With μ± = ±η/(2γ) but compared against GD at a different step, the gap does not vanish."""
    from reduced_dynamics.estimation.predictors import debiased_gd, multi_head
    from reduced_dynamics.estimation.prompts import sample_prompts

    st = sample_prompts(5000, PAPER, seed=2, stats_only=True)
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

    monkeypatch.setitem(mod.CHECKS, "optimality", lambda setting, **kw: CheckResult("optimality", False, "p", "m", "t"))
    rc = main(["check", "--quick", "--only", "optimality"])
    assert rc == 1 and "[FAIL] optimality" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args,param", [(["--only", "nosuch"], "`--only`"), (["--d", "0"], "`--d`"), (["--sigma2", "-1"], "`--sigma2`")]
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
        run_checks(PAPER, only=["nope"])


@pytest.mark.parametrize("setting", [Setting(d=[3, 5]), (5, 40, 0.1), Setting(d=2, Sigma=[[2.0, 0.0], [0.0, 1.0]])])
def test_run_checks_bad_setting(setting):
    with pytest.raises(ValueError, match="`setting"):
        run_checks(setting, only=["optimality"])


def test_optimality_at_d200_is_a_failed_result_with_the_reason():
    """At d = 200 the minimisation over S̄ cannot run (BFGS and the linear solve disagree): FAIL + reason."""
    res = check_optimality(Setting(d=200, L=40, sigma2=0.1), quick=True)
    assert isinstance(res, CheckResult) and res.name == "optimality"
    assert not res.passed and res.status == "ERROR"
    assert "BFGS and the linear solve disagree" in res.error and "BFGS and the linear solve disagree" in res.measured
    assert res.data["setting"]["d"] == 200


def test_run_checks_reports_a_crashing_check_and_runs_the_rest(monkeypatch):
    from proofs_check import checks as mod

    def boom(setting, *, quick=False):
        raise FloatingPointError("overflow in the test double")

    seen = []
    monkeypatch.setitem(mod.CHECKS, "manifold", boom)
    monkeypatch.setitem(mod.CHECKS, "drift_law", lambda setting, **kw: CheckResult("drift_law", True, "p", "m", "t"))
    out = run_checks(PAPER, quick=True, only=["manifold", "drift_law"], progress=lambda n, s, r: seen.append(n))
    assert [r.name for r in out] == ["manifold", "drift_law"] == seen
    assert not out[0].passed and out[0].error == "FloatingPointError: overflow in the test double"
    assert out[1].passed and out[1].error is None


def test_check_cli_reports_a_check_that_cannot_run(capsys):
    """The command line prints the failure and its reason and exits 1, without a traceback."""
    rc = main(["check", "--quick", "--d", "200", "--only", "optimality"])
    out, err = capsys.readouterr()
    assert rc == 1 and "[ERROR] optimality" in out and "BFGS" in out and "Traceback" not in out + err


def test_check_result_is_frozen_and_json_friendly():
    import json

    data = {"x": np.arange(3.0), "n": np.int64(4), "rows": [{"a": np.float64(0.5)}], "ok": np.bool_(True)}
    r = CheckResult("demo", np.bool_(True), "p", "m", "t", data=data)
    assert r.passed is True and r.status == "PASS" and r.error is None
    assert r.data == {"x": (0.0, 1.0, 2.0), "n": 4, "rows": ({"a": 0.5},), "ok": True}
    assert type(r.data["n"]) is int and type(r.data["rows"][0]["a"]) is float
    with pytest.raises(TypeError):
        r.data["x"] = 1
    with pytest.raises(TypeError):
        r.data["rows"][0]["a"] = 1.0
    with pytest.raises(AttributeError):
        r.passed = False
    data["x"][0] = 99.0  # the caller's array is not shared
    assert r.data["x"][0] == 0.0
    d = r.to_dict()
    assert json.loads(json.dumps(d)) == d and d["data"]["x"] == [0.0, 1.0, 2.0]
    d["data"]["x"].append(3.0)  # a mutable copy
    assert len(r.data["x"]) == 3
    assert json.loads(json.dumps(r.data))["rows"] == [{"a": 0.5}]


def test_check_result_error_implies_failure():
    with pytest.raises(ValueError, match="`passed`"):
        CheckResult("demo", True, "p", "m", "t", error="RuntimeError: x")
    r = CheckResult.could_not_run("demo", RuntimeError("no convergence"), PAPER)
    assert not r.passed and r.status == "ERROR" and r.error == "RuntimeError: no convergence"
    assert "ERROR" in repr(r) and "no convergence" in r.measured
    with pytest.raises(TypeError, match="JSON-friendly"):
        CheckResult("demo", True, "p", "m", "t", data={"f": object()})


@pytest.mark.parametrize(
    "args,kwargs,name",
    [
        ((0.0, 0.88), {}, "gamma"),
        ((0.01, float("nan")), {}, "eta"),
        ((0.01, 0.88), {"quantile": 1.5}, "quantile"),
        ((0.01, 0.88), {"n_positive": 0}, "n_positive"),
        ((0.01, 0.88), {"seed": None}, "seed"),
    ],
)
def test_approximation_error_bad_input(args, kwargs, name):
    kw = {"n_prompts": 100, "seed": 0, **kwargs}
    with pytest.raises(ValueError, match=f"`{name}`"):
        approximation_error(*args, PAPER, **kw)


def test_run_checks_in_parallel_equals_serial():
    """`workers=2` runs each check in its own process; every result equals the serial run's (timing aside)."""
    only = ["approximation", "optimality"]
    seen = []
    serial = run_checks(PAPER, quick=True, only=only)
    parallel = run_checks(PAPER, quick=True, only=only, workers=2, progress=lambda n, s, r: seen.append(n))
    assert [r.name for r in parallel] == only and sorted(seen) == sorted(only)
    for a, b in zip(serial, parallel):
        assert (a.status, a.predicted, a.measured, a.tolerance) == (b.status, b.predicted, b.measured, b.tolerance)


@pytest.mark.parametrize("workers", [0, -1, 1.5, True, 10**6])
def test_run_checks_workers_validated(workers):
    with pytest.raises(ValueError, match="`workers`"):
        run_checks(PAPER, quick=True, only=["approximation"], workers=workers)
