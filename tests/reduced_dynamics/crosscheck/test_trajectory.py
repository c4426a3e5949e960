"""Trajectories and their discrepancy (crosscheck.trajectory), on hand-computed values."""

import math

import numpy as np
import pytest

from reduced_dynamics.crosscheck.trajectory import trajectory_discrepancy


def test_discrepancy_hand_computed():
    """Two-time, two-head trajectories whose relative differences are known exactly."""
    wb = np.array([[0.1, -0.1], [0.2, -0.2]])
    mb = np.array([[1.0, -1.0], [2.0, -2.0]])
    wa = np.array([[0.1, -0.1], [0.22, -0.2]])  # head 0's ω off by 10 % at t1
    ma = np.array([[1.0, -1.0], [2.0, -1.5]])  # head 1's μ off by 25 % at t1
    r = trajectory_discrepancy(wa, ma, wb, mb)
    np.testing.assert_allclose(r.omega_max, [0.1, 0.0], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(r.mu_final, [0.0, 0.25], rtol=1e-12, atol=1e-15)
    assert r.gamma_final == pytest.approx(0.01 / 0.2, rel=1e-12)  # γ_a = 0.21, γ_b = 0.2
    # η_b = 0.2·2 + 0.2·2 = 0.8, η_a = 0.22·2 + 0.2·1.5 = 0.74
    assert r.eta_max == pytest.approx(0.06 / 0.8, rel=1e-12) and r.eta_final == r.eta_max
    motion = math.sqrt(0.1**2 * 2 + 1.0**2 * 2)
    assert r.motion == pytest.approx(motion, rel=1e-12)
    assert r.unexplained == pytest.approx(math.hypot(0.02, 0.5) / motion, rel=1e-12)
    assert not r.omega_max.flags.writeable
    assert r.to_dict()["omega_max"] == pytest.approx([0.1, 0.0])


def test_reference_motion_and_static_reference():
    w = np.array([[0.1, -0.1], [0.2, -0.2]])
    m = np.array([[1.0, -1.0], [2.0, -2.0]])
    still = np.repeat(w[:1], 2, axis=0), np.repeat(m[:1], 2, axis=0)
    assert trajectory_discrepancy(w, m, *still).unexplained == math.inf
    r = trajectory_discrepancy(*still, *still, omega_ref=w, mu_ref=m)
    assert r.unexplained == 0.0 and r.motion > 0


def test_shapes_must_agree():
    with pytest.raises(ValueError, match="`omega_a`"):
        trajectory_discrepancy(np.zeros((2, 2)), np.zeros((2, 2)), np.ones((3, 2)), np.ones((3, 2)))
