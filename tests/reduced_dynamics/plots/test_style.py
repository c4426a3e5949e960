"""plot_flow_summary draws into a user's figure and does not save; save_figure writes a PNG atomically."""

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from reduced_dynamics.flow import integrate
from reduced_dynamics.models import reduced_model
from reduced_dynamics.plots.style import STYLE, new_axes, new_figure, plot_flow_summary, save_figure, style
from reduced_dynamics.setting import Setting


@pytest.fixture(scope="module")
def model():
    return reduced_model(Setting(d=5, L=40, sigma2=0.1), n_heads=2)


@pytest.fixture(scope="module")
def flow(model):
    return integrate(model, model.initial_state(seed=0, scale=0.01), t_end=50.0, n_times=40)


def test_flow_summary_into_users_figure(flow, tmp_path):
    user = plt.figure(figsize=(16, 5))
    left, right = user.subfigures(1, 2)
    try:
        out = plot_flow_summary(flow, fig=right)
        assert out is right
        panels = [ax for ax in right.axes if ax.get_label() != "<colorbar>"]
        assert len(panels) == 2 and all(ax.collections or ax.lines for ax in panels)
        assert panels[0].get_xlabel() and panels[1].get_xlabel()
        assert not left.axes and not list(tmp_path.iterdir())
    finally:
        plt.close(user)


def test_flow_summary_new_figure_and_save(flow, tmp_path):
    fig = plot_flow_summary(flow)
    assert isinstance(fig, matplotlib.figure.Figure) and len(fig.axes) >= 2
    save_figure(fig, tmp_path / "flow.png")
    assert (tmp_path / "flow.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not plt.fignum_exists(fig.number)  # closed after saving


def test_flow_summary_refuses_a_batch_and_other_layouts(model):
    before = set(plt.get_fignums())  # other tests of this worker may have left figures open
    batch = integrate(model, model.initial_state(seed=0, n=2), t_end=5.0, n_times=5)
    with pytest.raises(ValueError, match="one trajectory"):
        plot_flow_summary(batch)
    mt = reduced_model(Setting.paper_multitask(), n_heads=2)
    with pytest.raises(ValueError, match="scalar"):
        plot_flow_summary(integrate(mt, mt.initial_state(seed=0), t_end=5.0, n_times=5))
    assert set(plt.get_fignums()) == before  # a refusal opens no figure


def test_style_is_temporary():
    before = plt.rcParams["savefig.dpi"]
    with style():
        assert plt.rcParams["savefig.dpi"] == STYLE["savefig.dpi"]
    assert plt.rcParams["savefig.dpi"] == before


def test_new_figure_and_axes_pass_through_or_reject():
    fig = plt.figure()
    try:
        ax = fig.add_subplot()
        assert new_figure(fig, figsize=(1, 1)) is fig and new_axes(ax, figsize=(1, 1)) is ax
        with pytest.raises(ValueError, match="`fig`"):
            new_figure(np.zeros(2), figsize=(1, 1))
        with pytest.raises(ValueError, match="`ax`"):
            new_axes(fig, figsize=(1, 1))
    finally:
        plt.close(fig)
