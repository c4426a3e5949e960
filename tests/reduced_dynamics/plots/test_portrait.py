"""Portrait plots draw into a user's own figure (cheap data); the `portrait` command: files, bad input."""

import subprocess
import sys

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from reduced_dynamics.cli import main
from reduced_dynamics.dynamics.portrait import general_portrait_data, two_head_portrait_data
from reduced_dynamics.plots.portrait import plot_general_portrait, plot_two_head_portrait
from reduced_dynamics.setting import Setting

P = Setting(d=5, L=40, sigma2=0.1)


@pytest.fixture(scope="module")
def two_head():
    return two_head_portrait_data(P, seed=0, resolution=12, n_traj=1, t_end=20.0, n_eval=30)


@pytest.fixture(scope="module")
def general():
    return general_portrait_data(P, seed=0, n_heads=3, n_traj=2, t_end=30.0, n_eval=40)


def _drawn(fig) -> bool:
    return any(ax.lines or ax.collections or ax.images or ax.patches for ax in fig.axes)


@pytest.mark.parametrize("which", ["two_head", "general"])
def test_portrait_into_users_subfigure(which, two_head, general):
    """The plot goes into the SubFigure it is given, returns it, and leaves the user's other panel alone."""
    plot, data, n_axes = {
        "two_head": (plot_two_head_portrait, two_head, 2),
        "general": (plot_general_portrait, general, 4),
    }[which]
    user = plt.figure(figsize=(22, 9))
    mine, theirs = user.subfigures(1, 2, width_ratios=[1, 2])
    mine.add_subplot().plot([0, 1], [0, 1])
    try:
        out = plot(data, fig=theirs)
        assert out is theirs
        panels = [ax for ax in theirs.axes if ax.get_label() != "<colorbar>"]
        assert len(panels) == n_axes and _drawn(theirs)
        assert all(ax.get_xlabel() for ax in panels)
        assert len(mine.axes) == 1
    finally:
        plt.close(user)


@pytest.mark.parametrize("which", ["two_head", "general"])
def test_portrait_new_figure_when_none_given(which, two_head, general):
    plot, data = {"two_head": (plot_two_head_portrait, two_head), "general": (plot_general_portrait, general)}[which]
    fig = plot(data)
    try:
        assert isinstance(fig, matplotlib.figure.Figure) and _drawn(fig)
    finally:
        plt.close(fig)


@pytest.mark.parametrize(
    "args,param",
    [
        (["--d", "0"], "`--d`"),
        (["--L", "0"], "`--L`"),
        (["--sigma2", "-1"], "`--sigma2`"),
        (["--heads", "1"], "`--heads`"),
        (["--gamma-range", "0.5,0.1"], "`--gamma-range`"),
        (["--m-range", "x"], "`--m-range`"),
        (["--resolution", "3"], "`--resolution`"),
        (["--t-end", "0"], "`--t-end`"),
        (["--m-range=-1e200,1e200"], "`--m-range`"),
        (["--seed", "-1"], "`--seed`"),
    ],
)
def test_portrait_bad_input_exit_2(capsys, args, param):
    rc = main(["portrait", *args])
    err = capsys.readouterr().err
    assert rc == 2
    assert param in err and len(err.strip().splitlines()) == 1


def test_portrait_bad_input_subprocess():
    proc = subprocess.run(
        [sys.executable, "-m", "reduced_dynamics", "portrait", "--d", "0"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "`--d`" in proc.stderr
