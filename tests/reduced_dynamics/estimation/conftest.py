"""Shared pieces of the estimation tests."""

from __future__ import annotations

from reduced_dynamics.dynamics.manifold import eta_star, mu_gamma
from reduced_dynamics.estimation.predictors import (
    DebiasedGD,
    LinearAttention,
    MultiHead,
    SingleHead,
    VanillaGD,
    Zero,
)


def stats_predictors(setting, *, hot_omega):
    """One predictor of every kind the sufficient-statistics ("stats") sampler serves, at ``setting``.

    ``hot_omega`` are the KQ scales of a three-head ``"hot_heads"`` predictor whose scores overflow
    ``exp`` without the per-row max shift (OV values fixed at 1, -0.5, 0.2).
    """
    m = mu_gamma(0.1, setting)
    eta = eta_star(setting)
    return {
        "multi_head": MultiHead((0.1, -0.1), (m, -m)),
        "single_head": SingleHead.optimum(setting),
        "gd": VanillaGD(eta),
        "debiased_gd": DebiasedGD(eta),
        "linear_attention": LinearAttention([0.3, 1.2], [0.5, 0.4]),
        "zero": Zero(),
        "hot_heads": MultiHead(hot_omega, (1.0, -0.5, 0.2)),
    }
