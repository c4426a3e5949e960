"""Circuit extraction and pattern metrics on hand-built parameters with known values."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reduced_dynamics.dynamics.manifold import mu_gamma
from reduced_dynamics.model.attention import make_model
from reduced_dynamics.model.circuits import (
    Circuits,
    PatternMetrics,
    circuits_from_arrays,
    extract_circuits,
    pattern_metrics,
)
from reduced_dynamics.setting import Setting


def _ideal(omega, mu, d=3):
    H = len(omega)
    KQ = np.zeros((H, d + 1, d + 1))
    ov = np.zeros((H, d + 1))
    for h in range(H):
        KQ[h, :d, :d] = omega[h] * np.eye(d)
        KQ[h, :, d] = 5.0  # last column multiplies z_q's 0: must be ignored
        ov[h, d] = mu[h]
    return KQ, ov


def test_ideal_pattern_metrics():
    KQ, ov = _ideal([0.2, -0.2, 0.2], [1.0, -2.0, 1.0])
    c = circuits_from_arrays(KQ, ov)
    p = pattern_metrics(c)
    assert isinstance(p, PatternMetrics)
    np.testing.assert_allclose(c.omega, [0.2, -0.2, 0.2], rtol=1e-14)
    np.testing.assert_array_equal(c.mu, [1.0, -2.0, 1.0])
    assert p.kq_offdiag_fraction_max == 0.0
    assert p.kq_response_row_fraction_max == 0.0
    assert p.ov_offresponse_fraction_max == 0.0
    assert p.kq_diag_cv_max == pytest.approx(0.0, abs=1e-14)
    assert p.omega_cv == pytest.approx(0.0, abs=1e-14)
    assert p.zero_sum_ratio == 0.0
    assert p.sign_match_fraction == 1.0
    assert (p.n_positive, p.n_negative, p.n_dummy) == (2, 1, 0)
    assert c.eta_eff == pytest.approx(0.2 + 0.4 + 0.2)


def test_known_metric_values():
    """Perturbed circuits with hand-computed metrics."""
    KQ = np.zeros((2, 3, 3))
    KQ[0, :2, :2] = [[1.0, 1.0], [0.0, 3.0]]  # block energy 11, off-diagonal 1; diag (1, 3): cv = 1/2
    KQ[0, 2, :2] = [2.0, 0.0]  # response row energy 4 of first-d-columns energy 15
    KQ[1, :2, :2] = [[-1.0, 0.0], [0.0, -1.0]]
    ov = np.array([[3.0, 0.0, 4.0], [0.0, 0.0, -1.0]])  # head 0: off-response energy 9/25
    c = circuits_from_arrays(KQ, ov)
    p = pattern_metrics(c)
    np.testing.assert_allclose(c.omega, [2.0, -1.0])
    np.testing.assert_allclose(p.kq_offdiag_fraction, [1 / 11, 0.0])
    np.testing.assert_allclose(p.kq_response_row_fraction, [4 / 15, 0.0])
    np.testing.assert_allclose(p.kq_diag_cv, [0.5, 0.0])
    np.testing.assert_allclose(p.ov_offresponse_fraction, [9 / 25, 0.0])
    assert p.omega_cv == pytest.approx(0.5 / 1.5)  # |ω| = (2, 1): std 0.5, mean 1.5
    assert p.zero_sum_ratio == pytest.approx(3 / 5)
    assert p.sign_match_fraction == 1.0
    assert p.kq_offdiag_fraction_max == pytest.approx(1 / 11)
    assert not p.kq_diag_cv.flags.writeable
    assert p.to_dict()["kq_diag_cv"] == pytest.approx([0.5, 0.0])


def test_sign_mismatch_and_dummy_head():
    KQ, ov = _ideal([0.3, -0.3, 1e-4, 0.3], [1.0, -1.0, 1e-3, -0.5])
    c = circuits_from_arrays(KQ, ov, dummy_tol=0.05)
    assert c.dummy.tolist() == [False, False, True, False]
    p = pattern_metrics(c)
    assert p.n_dummy == 1
    assert p.sign_match_fraction == pytest.approx(2 / 3)  # head 3 has ω > 0, μ < 0
    assert p.zero_sum_ratio == pytest.approx(0.5 / 2.5)


def test_manifold_gap_on_exact_manifold():
    s, g = Setting(d=5, L=40, sigma2=0.1), 0.15
    mg = mu_gamma(g, s)
    KQ, ov = _ideal([g, -g, g], [0.4 * mg, -mg, 0.6 * mg], d=5)
    gap = circuits_from_arrays(KQ, ov).manifold_gap(s)
    assert gap.gamma == pytest.approx(g, rel=1e-14)
    assert gap.rel_gap_plus == pytest.approx(0.0, abs=1e-12)
    assert gap.rel_gap_minus == pytest.approx(0.0, abs=1e-12)
    assert gap.eta_eff == pytest.approx(2 * g * mg, rel=1e-12)


def test_manifold_gap_off_the_manifold():
    """μ₊ = 1.5 μ_γ, μ₋ = −0.5 μ_γ: relative gaps +0.5 and −0.5 (hand-computed)."""
    s, g = Setting(d=3, L=20, sigma2=0.2), 0.2
    mg = mu_gamma(g, s)
    gap = circuits_from_arrays(*_ideal([g, -g], [1.5 * mg, -0.5 * mg])).manifold_gap(s)
    assert gap.rel_gap_plus == pytest.approx(0.5, rel=1e-12)
    assert gap.rel_gap_minus == pytest.approx(-0.5, rel=1e-12)
    assert (gap.mu_plus, gap.mu_minus) == pytest.approx((1.5 * mg, -0.5 * mg), rel=1e-14)


def test_extract_from_separate_model_matches_definition():
    m = make_model("separate", n_heads=2, d=3)
    p = m.init(seed=0)
    c = extract_circuits(m, p)
    h = 1
    np.testing.assert_allclose(c.KQ[h], p["K"][h].T @ p["Q"][h] / math.sqrt(4), rtol=1e-13)
    np.testing.assert_allclose(c.ov[h], p["o"][h] @ p["V"][h], rtol=1e-13)
    assert c.mu[h] == pytest.approx((p["o"][h] @ p["V"][h])[3], rel=1e-13)
    assert c.omega[h] == pytest.approx(np.trace(c.KQ[h][:3, :3]) / 3, rel=1e-13)


@pytest.mark.parametrize(
    "KQ, ov, name",
    [
        (np.zeros((2, 3, 4)), np.zeros((2, 3)), "`KQ`"),
        (np.zeros((2, 3, 3)), np.zeros((2, 4)), "`KQ`"),
        (np.full((1, 3, 3), np.nan), np.zeros((1, 3)), "`KQ`"),
    ],
)
def test_bad_circuits(KQ, ov, name):
    with pytest.raises(ValueError, match=name):
        circuits_from_arrays(KQ, ov)


def test_bad_dummy_tol():
    KQ, ov = _ideal([0.1], [1.0])
    with pytest.raises(ValueError, match="`dummy_tol`"):
        circuits_from_arrays(KQ, ov, dummy_tol=1.5)


def test_manifold_gap_needs_a_live_head():
    c = circuits_from_arrays(*_ideal([0.0, 0.0], [0.0, 0.0]))
    assert c.dummy.all()
    with pytest.raises(ValueError, match="`circuits`"):
        c.manifold_gap(Setting(d=3, L=40, sigma2=0.1))


@pytest.mark.parametrize(
    "setting, name", [(Setting(d=4), "`setting.d`"), ("paper", "`setting`"), (Setting(d=3, L=[10, 20]), "`setting`")]
)
def test_manifold_gap_validates_setting(setting, name):
    with pytest.raises(ValueError, match=name):
        circuits_from_arrays(*_ideal([0.1], [1.0])).manifold_gap(setting)


def test_circuits_arrays_are_read_only_copies():
    KQ, ov = _ideal([0.2, -0.2], [1.0, -1.0])
    c = circuits_from_arrays(KQ, ov)
    assert isinstance(c, Circuits)
    for a in (c.KQ, c.ov, c.omega, c.mu, c.dummy):
        assert not a.flags.writeable
    KQ[0, 0, 0] = 9.0  # the caller's array stays the caller's
    assert c.KQ[0, 0, 0] == 0.2


def test_manifold_gap_at_huge_gamma_does_not_divide_by_zero():
    """γ = 30, d = 3: sinh(dγ²) overflows, μ_γ underflows to 0; the relative gaps are +inf, not an exception."""
    gap = circuits_from_arrays(*_ideal([30.0, -30.0], [1.0, -1.0])).manifold_gap(Setting(d=3, L=40, sigma2=0.1))
    assert gap.mu_gamma == 0.0 and gap.rel_gap_plus == math.inf and gap.rel_gap_minus == math.inf


@settings(max_examples=30)
@given(
    seed=st.integers(0, 2**32 - 1),
    H=st.integers(1, 4),
    d=st.integers(1, 5),
    a=st.floats(1e-3, 1e3),
    b=st.floats(1e-3, 1e3),
)
def test_pattern_metrics_are_scale_invariant(seed, H, d, a, b):
    """Every metric is a ratio: scaling KQ by a > 0 and ov by b > 0 changes none of them (and no dummy flag)."""
    rng = np.random.default_rng(seed)
    KQ, ov = rng.standard_normal((H, d + 1, d + 1)), rng.standard_normal((H, d + 1))
    p, q = pattern_metrics(circuits_from_arrays(KQ, ov)), pattern_metrics(circuits_from_arrays(a * KQ, b * ov))
    for name in ("kq_offdiag_fraction", "kq_response_row_fraction", "kq_diag_cv", "ov_offresponse_fraction"):
        np.testing.assert_allclose(getattr(q, name), getattr(p, name), rtol=1e-10, atol=1e-14)
    for name in ("omega_cv", "zero_sum_ratio", "sign_match_fraction"):
        assert getattr(q, name) == pytest.approx(getattr(p, name), rel=1e-10, abs=1e-14)
    assert (q.n_dummy, q.n_positive, q.n_negative) == (p.n_dummy, p.n_positive, p.n_negative)
