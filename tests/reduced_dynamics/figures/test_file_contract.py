"""The figures' file and data paths meet the API contract (issue 23): named errors, nothing read that could hang or blow up."""

import importlib
import os
import zipfile
from pathlib import Path

import pytest

from reduced_dynamics.figures import registry
from reduced_dynamics.figures._base import load_data

REPO = Path(__file__).resolve().parents[3]
HUGE = importlib.import_module("api_fuzz").HUGE_NPY  # a tiny .npy declaring 80 GB (registered by tests/conftest.py)


def test_load_data_refuses_a_huge_header_instead_of_allocating(tmp_path):
    with zipfile.ZipFile(tmp_path / "bayes_ratio.npz", "w") as z:
        z.writestr("gamma.npy", HUGE)
    with pytest.raises(
        ValueError, match="`path` is not a readable .npz file.*declares 80000000000 bytes"
    ):  # was MemoryError
        load_data(tmp_path / "bayes_ratio.npz")


def test_load_data_refuses_a_named_pipe_and_a_wrong_type(tmp_path, no_hang):
    os.mkfifo(tmp_path / "bayes_ratio.npz")
    with pytest.raises(ValueError, match="`path` must be a regular file.*a named pipe"):  # was a hang
        load_data(tmp_path / "bayes_ratio.npz")
    with pytest.raises(TypeError, match="`path` must be a path"):
        load_data(3.0)


def test_replot_names_out_and_name(tmp_path):
    with pytest.raises(TypeError, match="`out` must be a path"):
        registry.replot("bayes_ratio", None)
    with pytest.raises(ValueError, match="`out` folder not found"):  # was FileNotFoundError
        registry.replot("bayes_ratio", tmp_path / "missing")
    with pytest.raises(ValueError, match="`out` file not found"):
        registry.replot("bayes_ratio", tmp_path)
    with pytest.raises(ValueError, match="`name` must be one of"):  # was "`only` must be one of"
        registry.replot("nope", tmp_path)
    with pytest.raises(ValueError, match="`name` must be one of"):  # was TypeError: 'float' object is not iterable
        registry.replot(1.0, tmp_path)


def test_check_names_refuses_a_non_list():
    with pytest.raises(TypeError, match="`only`"):
        registry.check_names(1.0)
    with pytest.raises(ValueError, match="`only`"):
        registry.check_names([["bayes_ratio"]])


def test_run_figures_refuses_a_file_as_out_before_computing(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="`out` must be a folder to write into"):  # was FileExistsError
        registry.run_figures(out=tmp_path / "file", only=["bayes_ratio"], seed=0)
    with pytest.raises(TypeError, match="`quick` must be True or False"):
        registry.run_figures(out=tmp_path, only=["bayes_ratio"], seed=0, quick="no")


@pytest.mark.parametrize("name", list(registry.FIGURES))
def test_plot_functions_name_data(name):
    plot = registry.FIGURES[name].plot_function
    with pytest.raises(TypeError, match="`data` of plot_"):  # was "'float' object is not subscriptable"
        plot(1.0)
    with pytest.raises(ValueError, match="`data` of plot_.* has no key"):  # was KeyError
        plot({})
