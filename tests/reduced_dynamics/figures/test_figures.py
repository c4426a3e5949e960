"""Each registered figure writes a non-empty PNG and data file on tiny settings and can be drawn into a
user's own figure; determinism; replot from data alone; CLI errors."""

import shutil
import subprocess
import sys

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from reduced_dynamics.cli import main
from reduced_dynamics.figures import _trained
from reduced_dynamics.figures.registry import FIGURES, FigureRun, FigureSpec, load_data, replot, run_figures

PNG = b"\x89PNG\r\n\x1a\n"


def _drawn(fig) -> bool:
    """True when some Axes of ``fig`` holds lines, collections, images or patches."""
    return any(ax.lines or ax.collections or ax.images or ax.patches for ax in fig.axes)


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_figure_quick_writes_png_and_data_and_embeds(name, quick_figure):
    """Quick run writes PNG + .npz and returns key numbers; the plot draws into a SubFigure of a user's figure.

    The run is the session's one quick run of the figure (``quick_figure``, tests/conftest.py), which the
    golden suite compares with the recorded data; :func:`test_run_figures_order_and_bad_names` checks
    the returned :class:`FigureRun` itself.
    """
    folder, run = quick_figure(name)
    assert run["name"] == name and run["key_numbers"]
    png = folder / f"{name}.png"
    assert run["png"] == str(png) and png.stat().st_size > 5000 and png.read_bytes()[:8] == PNG
    assert run["data_file"] == str(folder / f"{name}.npz") and (folder / f"{name}.npz").stat().st_size > 0
    # the user's own figure: two side-by-side subfigures, ours goes into the right one
    user = plt.figure(figsize=(20, 8))
    left, right = user.subfigures(1, 2)
    left.add_subplot().plot([0, 1], [1, 0])
    out = FIGURES[name].plot(load_data(folder / f"{name}.npz"), fig=right)
    try:
        assert out is right
        assert right.axes and all(ax.figure is right for ax in right.axes)
        assert _drawn(right)
        assert len(left.axes) == 1  # the user's panel is untouched
    finally:
        plt.close(user)


def test_plot_does_not_save_or_change_global_style(tmp_path, quick_figure):
    """A plot function returns a new Figure when none is given, writes no file and leaves rcParams alone."""
    shutil.copy(quick_figure("bayes_ratio")[0] / "bayes_ratio.npz", tmp_path)
    before = dict(plt.rcParams)
    files = set(tmp_path.iterdir())
    fig = FIGURES["bayes_ratio"].plot(load_data(tmp_path / "bayes_ratio.npz"))
    try:
        assert isinstance(fig, matplotlib.figure.Figure) and len(fig.axes) >= 3 and _drawn(fig)
        assert set(tmp_path.iterdir()) == files
        assert dict(plt.rcParams) == before
    finally:
        plt.close(fig)


def test_plot_rejects_non_figure():
    spec = FIGURES["bayes_ratio"]
    data = spec.data(quick=True, seed=0)
    with pytest.raises(ValueError, match="`fig`"):
        spec.plot(data, fig="not a figure")


def test_data_is_read_only_mapping():
    data = FIGURES["bayes_ratio"].data(quick=True, seed=0)
    assert set(data) >= {"xi", "sigma2", "ratio", "bound", "condition", "point_xi", "point_sigma2"}
    assert data["ratio"].shape == (40, 40) and not data["ratio"].flags.writeable
    assert data["point_xi"] == pytest.approx(5 / 40) and data["point_sigma2"] == 0.1


def test_every_figure_module_has_data_and_plot_functions():
    for name, spec in FIGURES.items():
        assert isinstance(spec, FigureSpec)
        assert callable(spec.data_function) and spec.data_function.__name__ == f"{name}_data"
        assert callable(spec.plot_function)
        assert spec.description and not spec.description.startswith("Figure")


def test_replot_from_data_only(tmp_path, quick_figure):
    """A figure is redrawn from its .npz alone."""
    shutil.copy(quick_figure("bayes_ratio")[0] / "bayes_ratio.npz", tmp_path)
    assert replot("bayes_ratio", tmp_path) == tmp_path / "bayes_ratio.png"
    assert (tmp_path / "bayes_ratio.png").read_bytes()[:8] == PNG


def test_same_seed_same_data(tmp_path, quick_figure):
    """Same seed -> identical arrays in the data file (Monte Carlo figure): a second run in this process
    against the session's run of seed 0 (perhaps made by another worker)."""
    a, b = tmp_path / "a", quick_figure("approx_vs_mc")[0]
    FIGURES["approx_vs_mc"].run(quick=True, out=a, seed=0)
    da, db = load_data(a / "approx_vs_mc.npz"), load_data(b / "approx_vs_mc.npz")
    assert da.keys() == db.keys()
    for k in da:
        assert np.array_equal(np.asarray(da[k]), np.asarray(db[k])), k


def test_trained_figure_same_seed_same_data(tmp_path, quick_figure):
    """Trained-model figure: retraining from the same seed (cache cleared) -> the arrays of the session's
    run of seed 0 (perhaps made by another worker, or after other trained figures filled the cache)."""
    a, b = tmp_path / "a", quick_figure("trained_risk_vs_L")[0]
    _trained._TRAINED_CACHE.clear()
    FIGURES["trained_risk_vs_L"].run(quick=True, out=a, seed=0)
    da, db = load_data(a / "trained_risk_vs_L.npz"), load_data(b / "trained_risk_vs_L.npz")
    assert da.keys() == db.keys()
    for k in da:
        assert np.array_equal(np.asarray(da[k]), np.asarray(db[k])), k


@pytest.mark.parametrize("name", ["trained_risk_vs_L", "trained_circuits", "trained_dynamics"])
def test_trained_figures_replot(name, tmp_path, quick_figure):
    """Trained-model figures are redrawn from their .npz alone."""
    shutil.copy(quick_figure(name)[0] / f"{name}.npz", tmp_path)
    replot(name, tmp_path)
    assert (tmp_path / f"{name}.png").read_bytes()[:8] == PNG


def test_drift_quick_matches_law(quick_figure):
    """Even at t = 1e3 the measured γ is within 2 % of the derived drift law."""
    for r in quick_figure("drift")[1]["key_numbers"]["runs"]:
        assert r["gamma_over_law"] == pytest.approx(1.0, abs=0.02)


def test_run_figures_order_and_bad_names(tmp_path):
    runs = run_figures(out=tmp_path, quick=True, only=["bayes_ratio"], seed=0)
    assert [r.name for r in runs] == ["bayes_ratio"]
    run = runs[0]
    assert isinstance(run, FigureRun) and run.key_numbers
    assert run.png == str(tmp_path / "bayes_ratio.png") and run.data_file == str(tmp_path / "bayes_ratio.npz")
    assert (tmp_path / "bayes_ratio.png").read_bytes()[:8] == PNG
    with pytest.raises(ValueError, match="`only`"):
        run_figures(out=tmp_path, quick=True, only=["nosuchfigure"], seed=0)
    with pytest.raises(ValueError, match="`seed`"):
        run_figures(out=tmp_path, quick=True, only=["bayes_ratio"], seed=-1)


def test_unknown_figure_exit_2(capsys):
    rc = main(["figures", "--only", "nosuchfigure", "--out", "/nonexistent-should-not-be-created"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "`--only`" in err and len(err.strip().splitlines()) == 1


def test_unknown_figure_subprocess(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "reduced_dynamics", "figures", "--only", "nosuchfigure", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "nosuchfigure" in proc.stderr
    assert not any(tmp_path.iterdir())


def test_bad_seed_exit_2(capsys):
    rc = main(["figures", "--only", "bayes_ratio", "--seed", "-1", "--quick"])
    err = capsys.readouterr().err
    assert rc == 2 and "`--seed`" in err


def test_list(capsys):
    assert main(["figures", "--list"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [ln.split(":")[0] for ln in lines] == list(FIGURES)
