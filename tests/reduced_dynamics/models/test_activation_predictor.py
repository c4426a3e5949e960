"""The predictor of the activation model is the H-head model with f, not the softmax it would inherit."""

import numpy as np
import pytest

from reduced_dynamics import MultiHead, Setting, estimate_risks, reduced_model, sample_prompts
from reduced_dynamics.activation_dynamics.loss import act_mc_risk
from reduced_dynamics.models.activation import ActivationHeads, ActivationModel

OMEGA, MU = [0.1, -0.1], [4.0, -4.0]


def test_exp_is_the_softmax_multi_head():
    m = ActivationModel(Setting(d=5, L=40, sigma2=0.1), n_heads=2)
    p = sample_prompts(200, m.setting, seed=0, stats_only=True)
    assert np.max(np.abs(m.predictor(m.state(OMEGA, MU))(p) - MultiHead(OMEGA, MU)(p))) < 1e-12


@pytest.mark.parametrize(("name", "c"), [("square", 0.5), ("affine", 1.0), ("tanh", 1.0)])
def test_weights_match_a_per_prompt_loop(name, c):
    """w_l = Σ_h μ_h f(ω_h s_l) / Σ_k f(ω_h s_k), written out prompt by prompt with f from its formula."""
    s = Setting(d=5, L=40, sigma2=0.1, activation=name, activation_c=c)
    f = {"square": lambda x: (1 + c * x) ** 2, "affine": lambda x: 1 + c * x, "tanh": lambda x: 1 + np.tanh(x)}[name]
    p = sample_prompts(20, s, seed=1, stats_only=True)
    w = reduced_model(s, n_heads=2).predictor(np.array(OMEGA + MU)).weights(p)
    for i in range(20):
        ref = sum(m_h * f(w_h * p.scores[i]) / np.sum(f(w_h * p.scores[i])) for w_h, m_h in zip(OMEGA, MU))
        assert np.allclose(w[i], ref, rtol=1e-12, atol=1e-14)


def test_monte_carlo_risk_agrees_with_act_mc_risk():
    """Two independent estimates of the same risk (other prompts): within 4 combined standard errors."""
    s = Setting(d=5, L=40, sigma2=0.1, activation="square", activation_c=0.5)
    pred = reduced_model(s, n_heads=2).predictor(np.array(OMEGA + MU))
    assert isinstance(pred, ActivationHeads)
    a = estimate_risks({"m": pred}, s, n_prompts=40_000, seed=3).estimates["m"]
    b = act_mc_risk(np.array(OMEGA), np.array(MU), s, n_prompts=40_000, seed=4)
    assert abs(a.risk - b.risk) < 4 * np.hypot(a.stderr, b.stderr)
    # and the softmax predictor it used to inherit has a measurably different risk (paired on common prompts)
    both = estimate_risks({"f": pred, "softmax": MultiHead(OMEGA, MU)}, s, n_prompts=40_000, seed=3)
    diff = both.difference("f", "softmax")
    assert abs(diff.risk) > 4 * diff.stderr
