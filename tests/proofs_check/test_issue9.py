"""Issue 9 regressions of proofs_check: domains of the limit formulas, SKIPPED outside the theory's
range, ``L = 1`` handled alike by ``risk`` and ``check``."""

from __future__ import annotations

import json

import pytest

from proofs_check import CheckResult, run_checks
from proofs_check import closed_forms as cf
from reduced_dynamics.cli import main
from reduced_dynamics.setting import Setting


@pytest.mark.parametrize(
    "sigma2, xi, param",
    [(1e308, 0.125, "sigma2"), (0.1, 1e-320, "xi"), (1e-320, 0.125, "sigma2"), (0.1, 1e308, "xi")],
)
@pytest.mark.parametrize(
    "fn", [cf.risk_ratio_limit, cf.bayes_risk_limit, cf.gd_risk_limit, cf.risk_ratio_bound, cf.bound_slack]
)
def test_limit_formulas_refuse_values_outside_their_domain(fn, sigma2, xi, param):
    """Before: risk_ratio_limit(1e308, .125) = 0.0, NaN at ξ = 1e-320, inf at σ² = 1e308."""
    with pytest.raises(ValueError, match=f"`{param}` must be .*\\[1e-15, 1e\\+15\\]"):
        fn(sigma2=sigma2, xi=xi)


def test_limit_ratio_is_never_below_one():
    """The plain quotient G/B rounded to 1 − 1.1e-16 at σ² = ξ = 1e3; r ≥ 1 now, everywhere in the domain."""
    assert cf.risk_ratio_limit(sigma2=1e3, xi=1e3) >= 1.0
    assert cf.risk_ratio_limit(sigma2=1e6, xi=1e-3) >= 1.0
    assert cf.risk_ratio_limit(sigma2=1e-15, xi=1e15) >= 1.0


def test_gd_risk_step_is_bounded():
    with pytest.raises(ValueError, match="`eta`"):
        cf.gd_risk(1e308, Setting())


def test_gd_risk_debiased_at_L1_is_the_zero_predictor():
    """At L = 1 debiased GD predicts 0 for every step: its risk is 1 + σ² (accepted, like `risk --L 1`)."""
    assert cf.gd_risk([0.3, 5.0], Setting(d=3, L=1, sigma2=0.2), debiased=True).tolist() == [1.2, 1.2]
    with pytest.raises(ValueError, match="`L`"):
        cf.gd_optimal_eta(Setting(d=3, L=1), debiased=True)


def test_risk_cli_accepts_L1_like_check(capsys):
    rc = main(["risk", "--L", "1", "--prompts", "200", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["estimators"]["debiased_gd"]["exact"] == pytest.approx(1.1)


@pytest.mark.parametrize(
    "setting, names, word",
    [
        (Setting(d=5, L=1, sigma2=0.1), ["manifold", "drift_law", "approximation", "optimality"], "L = 1"),
        (Setting(d=1, L=40, sigma2=0.1), ["manifold", "drift_law"], "d = 1"),
        (Setting(d=5, L=40, sigma2=0.0), ["approx_vs_exact"], "σ² = 0"),
    ],
)
def test_checks_outside_the_theory_range_are_skipped_not_failed(setting, names, word):
    """Before: FAIL (at L = 1 with 'order nan'); now SKIPPED with the reason, nothing run."""
    res = run_checks(setting, quick=True, only=names)
    assert [r.status for r in res] == ["SKIPPED"] * len(names)
    for r in res:
        assert word in r.skipped and word in r.measured and not r.passed and r.error is None
        assert "nan" not in r.measured


def test_skipped_status_in_the_cli_table(capsys):
    main(["check", "--quick", "--L", "1", "--only", "optimality"])
    assert "[SKIPPED] optimality" in capsys.readouterr().out


def test_check_result_skip_is_distinct_from_fail_and_error():
    r = CheckResult.skip("demo", "d = 1 is outside", Setting(d=1))
    assert r.status == "SKIPPED" and r.to_dict()["skipped"] == "d = 1 is outside"
    with pytest.raises(ValueError, match="`passed`"):
        CheckResult("demo", True, "p", "m", "t", skipped="why")


def test_run_checks_refuses_an_empty_only():
    with pytest.raises(ValueError, match="`only`"):
        run_checks(Setting(), quick=True, only=[])


def test_skipped_checks_do_not_fail_the_command(capsys):
    """Only SKIPPED checks (L = 1 is outside the theory) -> exit 0, the summary counts them as skipped."""
    rc = main(["check", "--quick", "--L", "1", "--only", "optimality"])
    out = capsys.readouterr().out
    assert rc == 0 and "1 skipped" in out and "[SKIPPED] optimality" in out
