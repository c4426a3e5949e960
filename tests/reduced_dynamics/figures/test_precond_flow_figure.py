"""Figure `precond_flow` (quick mode): its data are the library's flow end states and derived limit; the plot embeds."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
from matplotlib.figure import Figure

from reduced_dynamics import Setting
from reduced_dynamics.figures.precond_flow import _key_numbers, plot_precond_flow, precond_flow_data
from reduced_dynamics.precond.flow import precond_limit
from reduced_dynamics.precond.metrics import scale_free_distance


@pytest.fixture(scope="module")
def data(quick_figure_data):
    """``precond_flow_data(Setting(d=5, L=40, sigma2=0.1), quick=True, seed=0)``, made once per
    session by the ``quick_figure`` fixture (tests/conftest.py; shared with tests/test_golden.py) and read back
    from its ``.npz`` (what the plot draws)."""
    return quick_figure_data("precond_flow", precond_flow_data)


def test_end_states_sit_at_the_derived_limit(data):
    Sig = np.asarray(data["Sigma"])
    for k, L in enumerate(data["Ls"]):
        lim = precond_limit(Setting(d=5, L=int(L), sigma2=0.1, Sigma=Sig))
        assert data["dist_sigma_inv"][k] == pytest.approx(lim.distance_sigma_inv, abs=2e-3)
        assert data["dist_limit"][k] < 2e-3
        assert data["dist_identity"][k] > 0.3  # the control: W is not the identity
    assert np.all(np.diff(data["dist_sigma_inv"]) < 0)
    # the stored heat maps: W at L_w is close to the normalised limit and the normalised Σ⁻¹ is Σ⁻¹
    assert scale_free_distance(data["W40"], data["limit40"]) < 2e-3
    assert scale_free_distance(data["sigma_inv"], np.linalg.inv(Sig)) < 1e-12


def test_asymptote_is_the_large_L_slope(data):
    L, line = np.asarray(data["L_line"]), np.asarray(data["limit_dist_line"])
    assert line[-1] * L[-1] == pytest.approx(float(data["lam_coef"]), rel=0.02)


def test_plot_embeds_and_key_numbers(data):
    fig = Figure()
    out = plot_precond_flow(data, fig=fig)
    assert out is fig and len(fig.axes) == 6
    key = _key_numbers(data)
    assert set(key["distance_sigma_inv"]) == {20, 80, 320}
