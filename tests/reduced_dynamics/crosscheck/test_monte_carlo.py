"""The Monte Carlo risk of the reduced model on fixed covariates, its exact gradient and its flow (crosscheck.monte_carlo)."""

import math

import numpy as np
import pytest

from reduced_dynamics.crosscheck.monte_carlo import CovariateSample, RiskAndGrad, mc_flow, mc_risk_and_grad
from reduced_dynamics.estimation.predictors import MultiHead, conditional_loss, multi_head_weights
from reduced_dynamics.estimation.risk import estimate_risks
from reduced_dynamics.setting import Setting


def test_mc_risk_and_grad_value_and_gradient():
    """Value = mean of predictors.conditional_loss (1e-12), stderr = numpy's (1e-10 rel.); gradient = central differences (1e-6 relative).

    Three blocks (block_size 1000), so the blockwise reductions are exercised.
    """
    S = CovariateSample(3000, Setting(d=4, L=15, sigma2=0.2), seed=1, block_size=1000)
    w, m = np.array([0.3, -0.25]), np.array([1.1, -0.9])
    r = mc_risk_and_grad(w, m, S)
    assert isinstance(r, RiskAndGrad) and r.n == 3000
    losses = np.concatenate([conditional_loss(b, multi_head_weights(b.scores, w, m)) for b in S])
    assert abs(r.risk - losses.mean()) < 1e-12
    assert r.stderr == pytest.approx(losses.std(ddof=1) / math.sqrt(losses.size), rel=1e-10)
    h = 1e-6
    for i in range(2):
        e = np.eye(2)[i] * h
        fw = (mc_risk_and_grad(w + e, m, S).risk - mc_risk_and_grad(w - e, m, S).risk) / (2 * h)
        fm = (mc_risk_and_grad(w, m + e, S).risk - mc_risk_and_grad(w, m - e, S).risk) / (2 * h)
        assert abs(fw - r.grad_omega[i]) < 1e-6 * max(1.0, abs(r.grad_omega[i]))
        assert abs(fm - r.grad_mu[i]) < 1e-6 * max(1.0, abs(r.grad_mu[i]))


def test_mc_risk_agrees_with_engine():
    """Our fixed-sample risk vs risk.estimate_risks (independent seeds, full prompts): within 4 combined stderr."""
    w, m = (0.35, -0.35), (1.2, -1.2)
    s = Setting(d=5, L=40, sigma2=0.1)
    r = mc_risk_and_grad(w, m, CovariateSample(40_000, s, seed=3))
    e = estimate_risks({"mh": MultiHead(w, m)}, s, n_prompts=40_000, seed=4, conditional=True)["mh"]
    assert abs(r.risk - e.risk) < 4 * math.hypot(r.stderr, e.stderr)


def test_sample_is_deterministic_and_cached_or_redrawn_alike():
    """Same (n, setting, seed) -> the same covariates, whether cached or re-drawn on every pass."""
    s = Setting(d=3, L=10, sigma2=0.1)
    a = CovariateSample(50, s, seed=7, block_size=20)
    b = CovariateSample(50, s, seed=7, block_size=20)
    b._cache = None  # force the re-drawing path
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x.scores, y.scores)
        np.testing.assert_array_equal(x.xq_norm2, y.xq_norm2)
    assert [x.n for x in a] == [20, 20, 10]


def test_mc_flow_initial_velocity_is_minus_the_gradient():
    """(θ(h) − θ(0))/h → −P ∇Ê(θ0), P = diag(r, 1): at h = 1e-6 to 1e-4 relative."""
    S = CovariateSample(2000, Setting(d=3, L=10, sigma2=0.1), seed=0)
    w0, m0, h, rate = np.array([0.3, -0.2]), np.array([0.9, -1.1]), 1e-6, 0.5
    tr = mc_flow(w0, m0, [0.0, h], S, omega_rate=rate)
    g = mc_risk_and_grad(w0, m0, S)
    np.testing.assert_allclose((tr.omega[1] - w0) / h, -rate * g.grad_omega, rtol=1e-4)
    np.testing.assert_allclose((tr.mu[1] - m0) / h, -g.grad_mu, rtol=1e-4)
    assert not tr.omega.flags.writeable


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: CovariateSample(0, Setting(), seed=0), "`n_prompts`"),
        (lambda: CovariateSample(10, Setting(), seed=-1), "`seed`"),
        (lambda: CovariateSample(10, "paper", seed=0), "`setting`"),
        (lambda: CovariateSample(10, Setting(L=[10, 20]), seed=0), "`setting`"),
        (lambda: CovariateSample(10, Setting(d=2, Sigma=np.diag([1.0, 2.0])), seed=0), "`setting.Sigma`"),
        (lambda: mc_risk_and_grad([0.1], [1.0], "sample"), "`sample`"),
        (lambda: mc_risk_and_grad([[0.1]], [[1.0]], CovariateSample(10, Setting(), seed=0)), "`omega`"),
    ],
)
def test_validation(call, name):
    with pytest.raises(ValueError, match=name):
        call()
