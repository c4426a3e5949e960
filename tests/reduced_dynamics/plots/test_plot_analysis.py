"""The analysis figure draws what the report holds (from the report and from its JSON read back)."""

import json

import numpy as np
import pytest

from reduced_dynamics import Setting, mu_gamma
from reduced_dynamics.importers import ImportedAttention
from reduced_dynamics.importers.analysis import analyze
from reduced_dynamics.io import to_jsonable
from reduced_dynamics.plots.analysis import MAX_HEADS_SHOWN, plot_analysis

PAPER = Setting(d=5, L=40, sigma2=0.1)


def _report(H):
    """H heads on S_γ (γ = 0.1), the positive mass on the first half, the last head dummy when H > 4."""
    g, m = 0.1, float(mu_gamma(0.1, PAPER))
    n_plus = H // 2
    KQ = np.zeros((H, 6, 6))
    OV = np.zeros((H, 1, 6))
    for h in range(H):
        sg = 1.0 if h < n_plus else -1.0
        KQ[h, :5, :5] = sg * g * np.eye(5)
        OV[h, 0, 5] = sg * m / (n_plus if sg > 0 else H - n_plus)
    if H > MAX_HEADS_SHOWN:
        OV[-1, 0, 5] = 1e-6  # a dummy head: left out of the figure
    return analyze(ImportedAttention(KQ=KQ, OV=OV, d=5), setting=PAPER, lengths=[10, 80], n_prompts=200, seed=0)


@pytest.mark.parametrize("H, as_json", [(2, False), (6, True)])
def test_draws_each_shown_head_beside_its_ideal_and_the_risks(H, as_json):
    import matplotlib.pyplot as plt

    rep = _report(H)
    src = json.loads(json.dumps(to_jsonable(rep.to_dict()))) if as_json else rep
    fig = plot_analysis(src)
    k = min(H, MAX_HEADS_SHOWN)
    axes = fig.get_axes()
    assert len(axes) == 4 * k + 2 + 2  # KQ and OV, trained and ideal, per head; two colour bars; two risk panels
    heat = [ax for ax in axes if ax.images]
    trained_kq = heat[0].images[0].get_array()
    np.testing.assert_allclose(trained_kq, rep.circuits["KQ"][0])
    np.testing.assert_allclose(heat[2].images[0].get_array(), rep.ideal["KQ"][0])
    titles = " ".join(ax.get_title() for ax in axes)
    if H > MAX_HEADS_SHOWN:
        assert f"head {H}" not in titles and f"of {H} shown" in " ".join(fig._suptitle.get_text().split())
    risk_ax = axes[-2]
    model_line = risk_ax.containers[0].lines[0]
    np.testing.assert_allclose(model_line.get_ydata(), rep.risks.risk["model"])
    assert risk_ax.get_xlabel().startswith("prompt length") and "risk" in risk_ax.get_ylabel()
    plt.close(fig)
