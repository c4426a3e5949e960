"""Pattern diagnostics of a trajectory (dynamics.diagnostics): manifold gap, per-time diagnostics, stage times,
their tolerances and their values at zero (no flow is integrated here)."""

import numpy as np
import pytest

from reduced_dynamics.dynamics.diagnostics import (
    ManifoldGap,
    StageTolerances,
    manifold_gap,
    stage_times,
    trajectory_diagnostics,
)
from reduced_dynamics.dynamics.manifold import mu_gamma
from reduced_dynamics.setting import Setting

S = Setting(d=5, L=40, sigma2=0.1)


def test_manifold_gap_result_on_the_manifold():
    """On S_γ exactly: both masses equal μ_γ (M_minus reported positive), gap ~ 0, floats for one state."""
    g, p, n = 0.1, 2, 1
    mg = mu_gamma(g, S)
    w = np.r_[[g] * p, [-g] * n]
    m = np.r_[[mg / p] * p, [-mg / n] * n]
    gap = manifold_gap(w, m, S)
    assert isinstance(gap, ManifoldGap)
    for v in (gap.gamma, gap.mu_gamma, gap.M_plus, gap.M_minus, gap.gap):
        assert isinstance(v, float)
    assert gap.M_plus == pytest.approx(mg, rel=1e-14) and gap.M_minus == pytest.approx(mg, rel=1e-14)
    assert gap.gap < 1e-14
    # off the manifold: M_minus 10 % too small
    gap2 = manifold_gap(w, np.r_[m[:p], 0.9 * m[p:]], S)
    assert gap2.M_minus == pytest.approx(0.9 * mg, rel=1e-14) and gap2.gap == pytest.approx(0.1, rel=1e-12)
    # a trajectory gives arrays
    traj = manifold_gap(np.stack([w, w]), np.stack([m, m]), S)
    assert traj.gap.shape == (2,) and traj.M_minus.shape == (2,)


def test_trajectory_diagnostics_and_stage_times_results():
    t = np.array([0.0, 1.0, 2.0])
    W = np.array([[0.1, 0.1], [0.1, -0.1], [0.2, -0.2]])
    M = np.array([[0.1, 0.1], [0.1, -0.05], [1.0, -1.0]])
    diag = trajectory_diagnostics(W, M)
    np.testing.assert_array_equal(diag.sign_matched, [True, True, True])
    np.testing.assert_array_equal(diag.zero_sum, [False, False, True])
    assert diag.n_positive.tolist() == [2, 1, 1]
    st = stage_times(t, W, M)
    assert (st.sign_matching, st.zero_sum, st.homogeneous) == (0.0, 2.0, 0.0)
    assert st.to_dict() == {"sign_matching": 0.0, "zero_sum": 2.0, "homogeneous": 0.0}
    with pytest.raises(ValueError, match="`t`"):
        stage_times(t[:2], W, M)


def test_bad_tolerances():
    with pytest.raises(ValueError, match="tolerances.zero_sum"):
        StageTolerances(zero_sum=1.5)


def test_diagnostics_at_zero_are_defined_and_finite():
    """|Σμ|/Σ|μ| at μ = 0 is 0 (Σμ = 0 exactly) and the spread of |ω| at ω = 0 is 0: never inf."""
    diag = trajectory_diagnostics([[0.0, 0.0], [0.1, -0.1]], [[0.0, 0.0], [0.0, 0.0]])
    assert diag.zero_sum_ratio.tolist() == [0.0, 0.0]
    assert diag.homogeneity.tolist() == [0.0, 0.0]
    assert trajectory_diagnostics([0.1, -0.1], [1e300, 1e300]).zero_sum_ratio == 1.0
    with pytest.raises(ValueError, match="`omega` and `mu`"):  # Σμ overflows: an error, not inf
        trajectory_diagnostics([0.1, -0.1], [1.5e308, 1.5e308])


def test_diagnostics_reject_a_bad_tolerances_and_manifold_gap_at_gamma_zero():
    with pytest.raises(TypeError, match="`tolerances`"):
        trajectory_diagnostics([0.1, -0.1], [0.1, -0.1], tolerances=0.05)
    with pytest.raises(ValueError, match="`omega`"):
        manifold_gap([0.0, 0.0], [0.1, -0.1], S)
    with pytest.raises(ValueError, match="`t`"):
        stage_times([0.0, 1.0, 2.0], [[0.1, -0.1]] * 2, [[0.1, -0.1]] * 2)
    with pytest.raises(ValueError, match="`t`"):
        stage_times([0.0, 1j], [[0.1, -0.1]] * 2, [[0.1, -0.1]] * 2)
