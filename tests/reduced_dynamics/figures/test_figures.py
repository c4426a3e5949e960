"""Each registered figure writes a non-empty PNG and data file on tiny settings; determinism; CLI errors."""

import subprocess
import sys

import numpy as np
import pytest

from reduced_dynamics.cli import main
from reduced_dynamics.figures.registry import FIGURES, load_data, replot

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_figure_quick_writes_png_and_data(name, tmp_path):
    key = FIGURES[name](quick=True, out=tmp_path, seed=0)
    png = tmp_path / f"{name}.png"
    data = [p for p in (tmp_path / f"{name}.npz", tmp_path / f"{name}.csv") if p.exists()]
    assert png.stat().st_size > 5000 and png.read_bytes()[:8] == PNG
    assert data and data[0].stat().st_size > 0
    assert isinstance(key, dict) and key


def test_replot_from_data_only(tmp_path):
    """A figure is redrawn from its .npz alone."""
    FIGURES["bayes_ratio"](quick=True, out=tmp_path, seed=0)
    (tmp_path / "bayes_ratio.png").unlink()
    replot("bayes_ratio", tmp_path)
    assert (tmp_path / "bayes_ratio.png").read_bytes()[:8] == PNG


def test_same_seed_same_data(tmp_path):
    """Same seed -> identical arrays in the data file (Monte Carlo figure)."""
    a, b = tmp_path / "a", tmp_path / "b"
    FIGURES["approx_vs_mc"](quick=True, out=a, seed=3)
    FIGURES["approx_vs_mc"](quick=True, out=b, seed=3)
    da, db = load_data(a / "approx_vs_mc.npz"), load_data(b / "approx_vs_mc.npz")
    assert da.keys() == db.keys()
    for k in da:
        assert np.array_equal(np.asarray(da[k]), np.asarray(db[k])), k


def test_trained_figure_same_seed_same_data(tmp_path):
    """Trained-model figure: retraining from the same seed (cache cleared) -> identical arrays."""
    import reduced_dynamics.figures.registry as F

    a, b = tmp_path / "a", tmp_path / "b"
    F._TRAINED_CACHE.clear()
    F.FIGURES["trained_risk_vs_L"](quick=True, out=a, seed=2)
    F._TRAINED_CACHE.clear()
    F.FIGURES["trained_risk_vs_L"](quick=True, out=b, seed=2)
    da, db = load_data(a / "trained_risk_vs_L.npz"), load_data(b / "trained_risk_vs_L.npz")
    assert da.keys() == db.keys()
    for k in da:
        assert np.array_equal(np.asarray(da[k]), np.asarray(db[k])), k


@pytest.mark.parametrize("name", ["trained_risk_vs_L", "trained_circuits", "trained_dynamics"])
def test_trained_figures_replot(name, tmp_path):
    """Trained-model figures are redrawn from their .npz alone."""
    FIGURES[name](quick=True, out=tmp_path, seed=0)
    (tmp_path / f"{name}.png").unlink()
    replot(name, tmp_path)
    assert (tmp_path / f"{name}.png").read_bytes()[:8] == PNG


def test_drift_quick_matches_law(tmp_path):
    """Even at t = 1e3 the measured γ is within 2 % of the derived drift law."""
    key = FIGURES["drift"](quick=True, out=tmp_path, seed=0)
    for run in key["runs"]:
        assert run["gamma_over_law"] == pytest.approx(1.0, abs=0.02)


def test_unknown_figure_exit_2(capsys):
    rc = main(["figures", "--only", "nosuchfigure", "--out", "/nonexistent-should-not-be-created"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "`only`" in err and len(err.strip().splitlines()) == 1


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
    assert rc == 2 and "`seed`" in err
