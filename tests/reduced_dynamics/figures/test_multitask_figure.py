"""The multitask figure's paper-scale models (figures/multitask_trained.npz) and its report."""

from __future__ import annotations

import json

import numpy as np
import pytest

from reduced_dynamics import Setting
from reduced_dynamics.figures.multitask import PAPER_MODELS, _paper_models
from reduced_dynamics.multitask.attention import extract_reduced, mt_attention_predict
from reduced_dynamics.multitask.predictors import per_task_risks, support_dgd_weights, weighted_dgd_predict

REPORT = PAPER_MODELS.with_suffix(".json")


def test_the_committed_models_are_present():
    """figures/multitask_trained.npz and its report are committed; without them the figure would retrain."""
    assert PAPER_MODELS.is_file() and REPORT.is_file()


def test_models_load_with_provenance():
    s = Setting.paper_multitask()
    p = _paper_models(0, s)
    assert p["param"] == "separate" and p["lr"] == 1e-3 and p["steps"] == 500_000
    assert sorted(p["models"]) == [1, 2, 3, 4]
    for H, m in p["models"].items():
        assert m.KQ.shape == (H, s.d + s.n_tasks, s.d) and m.OV.shape == (H, s.n_tasks, s.d + s.n_tasks)


@pytest.mark.parametrize(
    "setting",
    [
        Setting.paper_multitask().replace(tasks=((0, 1, 2), (3, 4, 5))),
        Setting.paper_multitask().replace(L=80),
        Setting.paper_multitask().replace(sigma2=0.5),
        Setting.paper(),
    ],
)
def test_other_settings_do_not_use_them(setting):
    assert _paper_models(0, setting) is None


def test_unknown_seed_is_not_used():
    assert _paper_models(12345, Setting.paper_multitask()) is None


def test_report_matches_the_models():
    """The committed report's roles are those of the committed models (extracted again here)."""
    s = Setting.paper_multitask()
    rep = json.loads(REPORT.read_text())
    for seed in (0, 1, 2):
        p = _paper_models(seed, s)
        for H, m in p["models"].items():
            assert list(extract_reduced(m, s).roles) == rep["seeds"][str(seed)]["models"][str(H)]["roles"]


def test_four_heads_are_near_per_task_debiased_gd_on_fresh_prompts():
    """Independent of the report: new prompts (another seed), paired with per-task debiased GD on S_n.

    The report measured +0.0006 ± 0.0003 and +0.0007 ± 0.0003 for seed 0; the test asks for
    < 0.01 (H = 2 is +0.04 above, so this separates the regimes) with 4000 prompts.
    """
    s = Setting.paper_multitask()
    m = _paper_models(0, s)["models"]
    A = support_dgd_weights(s)
    res = per_task_risks(
        {
            "H4": lambda p: mt_attention_predict(m[4], p, s),
            "H2": lambda p: mt_attention_predict(m[2], p, s),
            "dgd": lambda p: weighted_dgd_predict(p, A),
        },
        s,
        n_prompts=4000,
        seed=777,
        keep_losses=True,
    )
    for t in range(s.n_tasks):
        d4 = res.difference("H4", "dgd", t)
        d2 = res.difference("H2", "dgd", t)
        assert d4.risk + 3 * d4.stderr < 0.01
        assert d2.risk - 3 * d2.stderr > 0.02
    assert np.all(np.isfinite(res.risk))
