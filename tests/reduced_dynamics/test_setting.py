"""Setting: validation of every field, derived properties, identity, and the theory's range."""

import re

import numpy as np
import pytest

from reduced_dynamics._validation import check_finite_array, check_positive_int
from reduced_dynamics.setting import PAPER_SETTING, THEORY_STATEMENTS, Setting, as_setting


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"d": 0}, "`d`"),
        ({"d": 100_001}, "`d`"),
        ({"d": 2.5}, "`d`"),
        ({"d": True}, "`d`"),
        ({"d": np.array([2 + 1j])}, "`d`"),
        ({"L": 0}, "`L`"),
        ({"L": 10**9 + 1}, "`L`"),
        ({"L": float("inf")}, "`L`"),
        ({"sigma2": -0.1}, "`sigma2`"),
        ({"sigma2": 1e308}, "`sigma2`"),
        ({"sigma2": float("nan")}, "`sigma2`"),
        ({"sigma2": 0.1 + 1j}, "`sigma2`"),
        ({"sigma2": np.array([0.1 + 1j, 0.2])}, "`sigma2`"),
        ({"d": [2, 3], "L": [10, 20, 30]}, "broadcast"),
        ({"d": 2, "Sigma": np.eye(3)}, "`Sigma`"),
        ({"d": 2, "Sigma": [[1.0, 2.0], [0.0, 1.0]]}, "`Sigma`"),
        ({"d": 2, "Sigma": -np.eye(2)}, "`Sigma`"),
        ({"d": 2, "Sigma": np.eye(2) * (1 + 1j)}, "`Sigma`"),
    ],
)
def test_setting_rejects_each_bad_field_by_name(kwargs, name):
    with pytest.raises(ValueError, match=name):
        Setting(**kwargs)


def test_setting_bounds_are_inclusive_and_its_constants_finite_there():
    for s in (Setting(d=100_000, L=1, sigma2=1e12), Setting(d=1, L=10**9, sigma2=0.0)):
        for value in (s.c, s.xi, s.eta_star, s.inf_loss):
            assert np.isfinite(value)


def test_setting_properties_identity_and_replace():
    s = Setting(d=5, L=40, sigma2=0.1)
    assert s == PAPER_SETTING and hash(s) == hash(Setting.paper())
    assert s.c == pytest.approx(1.1 / 40) and s.xi == 0.125
    assert s.eta_star == pytest.approx(1 / (1 + 1.1 * 5 / 40))
    assert s.is_scalar and s.isotropic and s.shape == ()
    arr = Setting(d=5, L=[10, 40], sigma2=0.1)
    assert arr.shape == (2,) and not arr.is_scalar
    with pytest.raises(ValueError, match="`setting` must be scalar"):
        arr.require_scalar("here")
    assert s.replace(L=160).L == 160
    with pytest.raises(ValueError, match="`L`"):
        s.replace(L=0)
    with pytest.raises(ValueError, match="`setting`"):
        as_setting({"d": 5})
    assert s.to_dict() == {"d": 5, "L": 40, "sigma2": 0.1, "Sigma": None}


def test_theory_range_issues_names_each_reason_and_is_empty_inside():
    """Issue 9: at d = 1, L = 1 or σ² = 0 some statements do not apply: the setting says which, and why."""
    assert PAPER_SETTING.theory_range_issues() == ()
    for statement in THEORY_STATEMENTS:
        assert PAPER_SETTING.theory_range_issues(statement) == ()
    L1 = Setting(d=5, L=1, sigma2=0.1)
    assert any("L = 1" in r for r in L1.theory_range_issues("approximate-loss"))
    assert L1.theory_range_issues("approximation-error") == ()
    d1 = Setting(d=1, L=40, sigma2=0.1)
    assert d1.theory_range_issues("approximate-loss") == ()
    assert any("d = 1" in r for r in d1.theory_range_issues("drift-law"))
    s0 = Setting(d=5, L=40, sigma2=0.0)
    assert any("σ² = 0" in r for r in s0.theory_range_issues("approximation-error"))
    everything = Setting(d=1, L=1, sigma2=0.0).theory_range_issues()
    assert len(everything) == 3 and len(set(everything)) == 3  # each reason once
    with pytest.raises(ValueError, match="`statement`"):
        PAPER_SETTING.theory_range_issues("no-such-statement")
    with pytest.raises(ValueError, match="`setting` must be scalar"):
        Setting(d=5, L=[1, 40], sigma2=0.1).theory_range_issues()


def test_validation_rejects_complex_input_instead_of_truncating_it():
    """Issue 9: complex input was silently truncated to its real part (with a ComplexWarning)."""
    with pytest.raises(ValueError, match="`omega`.*complex"):
        check_finite_array("omega", np.array([0.1 + 1j, -0.1]))
    with pytest.raises(ValueError, match="`omega`"):
        check_finite_array("omega", [0.1 + 0j, -0.1])
    with pytest.raises(ValueError, match=r"`n` must be an integer in \[1, 10\]"):
        check_positive_int("n", 11, hi=10)
    assert check_positive_int("n", 10.0, hi=10) == 10


@pytest.mark.parametrize(
    "module, d_max",
    [
        ("reduced_dynamics.precond.loss", 1000),
        ("reduced_dynamics.precond.exact", 2000),
        ("reduced_dynamics.multitask.sigma_loss", 1000),
    ],
)
def test_covariance_is_the_one_sigma_accessor_with_each_modules_bound(module, d_max):
    """Setting.covariance: I_d without Σ, a copy of Σ with it; each Σ module refuses d > its D_MAX, naming
    `setting.d` and what the matrices are for."""
    import importlib

    mod = importlib.import_module(module)
    assert mod.D_MAX == d_max
    S = np.array([[2.0, 0.3], [0.3, 0.5]])
    s = Setting(d=2, L=10, Sigma=S)
    got = s.covariance(d_max=mod.D_MAX, where=mod.COVARIANCE_WHERE)
    assert np.array_equal(got, S)
    got[0, 0] = 99.0  # a copy: the setting keeps its Σ
    assert s.covariance()[0, 0] == 2.0
    assert np.array_equal(Setting(d=3).covariance(), np.eye(3))
    with pytest.raises(ValueError, match=re.escape(f"`setting.d` must be <= {d_max} for {mod.COVARIANCE_WHERE}")):
        Setting(d=d_max + 1).covariance(d_max=mod.D_MAX, where=mod.COVARIANCE_WHERE)
    with pytest.raises(ValueError, match="scalar `d`"):
        Setting(d=[2, 3]).covariance(d_max=mod.D_MAX, where=mod.COVARIANCE_WHERE)
