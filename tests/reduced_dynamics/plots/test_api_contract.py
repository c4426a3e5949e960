"""The plot functions meet the API contract (issue 23): a wrong argument is an error naming it."""

import pytest

from reduced_dynamics.plots import analysis, portrait, style


@pytest.mark.parametrize("fn", [portrait.plot_two_head_portrait, portrait.plot_general_portrait])
def test_portrait_plots_name_data(fn):
    with pytest.raises(TypeError, match="`data` of plot_"):  # was "'NoneType' object is not subscriptable"
        fn(None)
    with pytest.raises(ValueError, match="`data` of plot_.* has no key"):  # was KeyError
        fn({"x": 1.0})


def test_plot_flow_summary_and_plot_analysis_name_their_argument():
    with pytest.raises(TypeError, match="`result` must be a Flow"):  # was AttributeError: no .is_batch
        style.plot_flow_summary(1.0)
    with pytest.raises(TypeError, match="`report` must be an AnalysisReport"):  # was AttributeError: no .circuits
        analysis.plot_analysis(1.0)
    with pytest.raises(ValueError, match="`report` has no 'circuits'"):  # was KeyError
        analysis.plot_analysis({})


def test_save_figure_names_fig_and_path(tmp_path):
    import matplotlib.pyplot as plt

    with pytest.raises(TypeError, match="`fig` must be a matplotlib Figure"):  # was AttributeError: no .figure
        style.save_figure(None, tmp_path / "a.png")
    fig = plt.figure(figsize=(1, 1))
    try:
        (tmp_path / "folder.png").mkdir()
        with pytest.raises(ValueError, match="`path` must be a file to write"):  # was IsADirectoryError
            style.save_figure(fig, tmp_path / "folder.png")
        with pytest.raises(TypeError, match="`path` must be a path"):
            style.save_figure(fig, 3)
    finally:
        plt.close(fig)
