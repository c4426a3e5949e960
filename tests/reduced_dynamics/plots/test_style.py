"""plot_flow_summary draws into a user's figure and does not save; save_figure writes a PNG atomically."""

import io

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


def _decoded(png: bytes) -> np.ndarray:
    from matplotlib.image import imread

    return imread(io.BytesIO(png))[..., :3]  # floats in [0, 1]


def _savefig_tight(fig) -> np.ndarray:
    buf = io.BytesIO()
    with style():
        fig.savefig(buf, format="png", bbox_inches="tight")
    return _decoded(buf.getvalue())


def _styled_figure(extra=None):
    with style():
        fig = plt.figure(figsize=(5.0, 3.0))
        ax = fig.add_subplot()
        x = np.linspace(1.0, 100.0, 50)
        ax.loglog(x, x**-0.5, label=r"$t^{-1/2}$")
        ax.set_xlabel(r"t ($\omega$ units)")
        ax.set_ylabel("loss")
        ax.set_title("a title")
        ax.legend()
        fig.tight_layout()
        if extra is not None:
            extra(fig, ax)
    return fig


def _near_the_right_edge(fig, ax):
    ax.set_xlim(1.0, 300.0)  # no tick label at the right end: the spine is the rightmost artist
    fig.subplots_adjust(right=0.995)


@pytest.mark.parametrize(
    "extra",
    [
        None,  # the padded box inside the canvas
        _near_the_right_edge,  # the artists inside, the padded box passing the canvas's right edge
    ],
    ids=["inside", "padding_beyond_edge"],
)
def test_crop_is_the_tight_savefig_picture(extra):
    """save_figure's one-draw crop has savefig's tight picture size to the pixel and the same pixels up to the
    antialiasing of savefig's half-pixel shift (measured on the package's quick figures: 0.04 % to 1.6 % of the
    pixels differ by more than half the range; 0.7 % here); the same crop misplaced by two pixels differs in more
    than twice as many (checked, so that the comparison can fail)."""
    from reduced_dynamics.plots.style import _tight_png_by_crop

    fig = _styled_figure(extra)
    try:
        with style():
            png = _tight_png_by_crop(fig)
        assert png is not None
        with style():
            tight = fig.get_tightbbox(fig.canvas.get_renderer())
        beyond = tight.x1 + matplotlib.rcParams["savefig.pad_inches"] > fig.get_size_inches()[0]
        assert beyond == (extra is _near_the_right_edge)
        crop, ref = _decoded(png), _savefig_tight(fig)
        assert crop.shape == ref.shape
        far = np.abs(crop - ref).max(axis=-1) > 0.5
        assert far.mean() < 0.02
        for axis in (0, 1):
            shifted = np.abs(np.roll(crop, 2, axis=axis) - ref).max(axis=-1) > 0.5
            assert shifted.mean() > 2 * far.mean()
    finally:
        plt.close(fig)


@pytest.mark.parametrize(
    "case",
    ["text_above_the_canvas", "another_dpi", "transparent"],
)
def test_crop_falls_back_to_savefig(case, tmp_path):
    """Where a crop of the canvas is not savefig's tight picture the helper declines and save_figure writes
    savefig's: an artist beyond the canvas (the tight picture grows to hold it), a figure drawn at another
    resolution than it is saved at, a transparent background."""
    from reduced_dynamics.plots.style import _tight_png_by_crop

    def above(fig, ax):
        fig.text(0.5, 1.04, "a note above the canvas", ha="center")

    fig = _styled_figure(above if case == "text_above_the_canvas" else None)
    if case == "another_dpi":
        fig.set_dpi(90)
    rc = {"savefig.transparent": True} if case == "transparent" else {}
    with style(), matplotlib.rc_context(rc):
        declined = _tight_png_by_crop(fig) is None
        ref = _savefig_tight(fig)
        save_figure(fig, tmp_path / "f.png")  # closes fig
    assert declined
    saved = _decoded((tmp_path / "f.png").read_bytes())
    assert saved.shape == ref.shape and np.array_equal(saved, ref)  # savefig's own picture
    if case == "text_above_the_canvas":
        assert ref.shape[0] > fig.get_size_inches()[1] * STYLE["savefig.dpi"]  # the note is in the picture
