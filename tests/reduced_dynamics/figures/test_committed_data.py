"""The committed figures (figures/<name>.npz) are drawn by today's plot functions, and the trained ones
record the protocol that :func:`reduced_dynamics.figures._trained.trained_settings` documents.

Cheap (no figure is recomputed and no PNG is written): this is the fast lane's check of every figure
module; tests/test_golden.py and test_figures.py recompute the quick figures in ``make test``.
"""

from pathlib import Path

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from reduced_dynamics import Setting
from reduced_dynamics.figures import _trained
from reduced_dynamics.figures.registry import FIGURES, load_data

COMMITTED = Path(__file__).resolve().parents[3] / "figures"


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_committed_data_is_drawn(name):
    """Each registered figure has committed data, and its plot function draws that data into a new figure."""
    path = COMMITTED / f"{name}.npz"
    assert path.is_file(), f"figures/{name}.npz is not committed"
    fig = FIGURES[name].plot(load_data(path))
    try:
        assert fig.axes and any(ax.lines or ax.collections or ax.images or ax.patches for ax in fig.axes)
    finally:
        plt.close(fig)


@pytest.mark.parametrize("name", ["trained_risk_vs_L", "trained_dynamics"])
def test_committed_trained_figures_record_the_documented_protocol(name):
    """The committed trained-model figures were trained with the full (not the quick) protocol."""
    z = load_data(COMMITTED / f"{name}.npz")
    s = Setting(d=int(z["d"]), L=int(z["L_train"] if "L_train" in z else z["L"]), sigma2=float(z["sigma2"]))
    full = _trained.trained_settings(s, quick=False)
    quick = _trained.trained_settings(s, quick=True)
    lr = float(z["lr"] if "lr" in z else z["adam_lr"])
    assert (int(z["steps"]), int(z["batch"]), lr) == (full["steps"], full["batch"], full["lr"])
    assert (int(z["steps"]), lr) != (quick["steps"], quick["lr"])
    assert np.isfinite(float(z["sigma2"]))
