"""Check `multitask` (quick variant): passes at the default setting (paper supports) and reports its numbers."""

from __future__ import annotations

from proofs_check.multitask import check_multitask, multitask_setting
from reduced_dynamics import Setting


def test_quick_check_passes_with_numbers(quick_check):
    """``check_multitask(Setting(), quick=True)``, read from the session's run of ``check --quick --only
    multitask`` (tests/conftest.py: the golden case check_quick_multitask, its --out file in full precision)."""
    from proofs_check.checks import CHECKS

    assert CHECKS["multitask"] is check_multitask
    r = quick_check("multitask")
    assert r["error"] is None and r["passed"], r["measured"]
    assert [list(t) for t in r["data"]["setting"]["tasks"]] == [[0, 1, 2, 3], [2, 3, 4, 5]]
    assert list(r["data"]["pairs"]) == [2, 2]
    assert r["data"]["a_err"]["3"] < 0.02 and r["data"]["grad_rel_err"] < 1e-10


def test_multitask_setting_keeps_given_tasks():
    s = Setting(d=4, L=30, sigma2=0.2, tasks=((0, 1), (2, 3)))
    assert multitask_setting(s) is s
    assert multitask_setting(Setting(L=80)).L == 80
