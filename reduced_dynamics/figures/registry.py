"""Registry of the project's figures: compose each figure module's data and plot functions and write the files.

Each figure lives in its own module ``reduced_dynamics.figures.<name>`` with a
data function ``<name>_data(setting, *, quick, seed) -> FigureData`` (computes
everything the figure shows; ``quick=True``: tiny settings, seconds) and a plot
function ``plot_<name>(data, *, fig=None) -> Figure`` (draws, never saves). The
registry runs the data function, writes ``<out>/<name>.npz``, reloads it, draws
the PNG from the file's contents only and saves ``<out>/<name>.png``, so a
figure can be re-styled from its data without recomputing (:func:`replot`).
Same seed -> same data files.

``reduced-dynamics figures [--quick] [--only NAME] [--out DIR] [--seed S]`` runs
the registry (:data:`FIGURES`).

References
----------
docs/theory.md#reduced-model, docs/theory.md#gradient-flow, docs/theory.md#predictors, docs/theory.md#theorem-1;
He, Pan, Chen, Yang (ICML 2025).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reduced_dynamics._results import FrozenResult
from reduced_dynamics._validation import check_nonnegative_int
from reduced_dynamics.figures._base import FigureData, load_data, save_data
from reduced_dynamics.setting import PAPER_SETTING, Setting

__all__ = ["FigureSpec", "FigureRun", "FIGURES", "run_figures", "replot", "load_data", "FigureData"]

#: Problem of the trained-model figures in quick mode (tiny: seconds of training).
QUICK_TRAINED_SETTING = Setting(d=2, L=8, sigma2=0.1)


@dataclasses.dataclass(frozen=True)
class FigureRun(FrozenResult):
    """What running one figure produced.

    Attributes
    ----------
    name : str
        Figure name.
    seconds : float
        Wall time (data, files and plot), rounded to 0.01 s.
    png : str
        Path of the PNG written.
    data_file : str
        Path of the ``.npz`` data file written.
    key_numbers : dict
        The figure's key numbers (JSON-friendly), as indexed in ``figures/README.md``.
    """

    name: str
    seconds: float
    png: str
    data_file: str
    key_numbers: dict


@dataclasses.dataclass(frozen=True)
class FigureSpec:
    """One registered figure: where its code lives and the settings it is made at.

    Attributes
    ----------
    name : str
        Figure name; its module is ``reduced_dynamics.figures.<name>``.
    setting : Setting
        Data model of the full figure.
    quick_setting : Setting
        Data model in quick mode.
    group : str or None
        Figures of one group share an in-process cache (the trained models) and
        run one after the other in one worker when ``run_figures`` runs in parallel.
    """

    name: str
    _: dataclasses.KW_ONLY
    setting: Setting = PAPER_SETTING
    quick_setting: Setting = PAPER_SETTING
    group: str | None = None

    @property
    def module(self):
        """The figure's module (imported on first use)."""
        return importlib.import_module(f"reduced_dynamics.figures.{self.name}")

    @property
    def description(self) -> str:
        """First line of the module's docstring, without the ``Figure ``name``:`` prefix."""
        line = (self.module.__doc__ or "").strip().splitlines()[0]
        return line.split(":", 1)[1].strip() if line.startswith("Figure ") else line

    @property
    def data_function(self) -> Callable[..., FigureData]:
        """``<name>_data(setting, *, quick, seed)``."""
        return getattr(self.module, f"{self.name}_data")

    @property
    def plot_function(self) -> Callable[..., Any]:
        """``plot_<name>(data, *, fig=None)``."""
        return getattr(self.module, f"plot_{self.name}")

    def data(self, *, quick: bool = False, seed: int) -> FigureData:
        """Compute the figure's data at its (quick) setting."""
        setting = self.quick_setting if quick else self.setting
        fn = self.data_function
        if "seed" not in inspect.signature(fn).parameters:  # closed forms only: no randomness
            return fn(setting, quick=bool(quick))
        return fn(setting, quick=bool(quick), seed=seed)

    def plot(self, data, *, fig=None):
        """Draw ``data`` (a :class:`FigureData` or a loaded ``.npz``) and return the Figure."""
        return self.plot_function(data, fig=fig)

    def key_numbers(self, data) -> dict:
        """The figure's key numbers read off ``data`` (JSON-friendly)."""
        return self.module._key_numbers(data)

    def run(self, *, out, quick: bool = False, seed: int) -> FigureRun:
        """Compute the data, write ``<out>/<name>.npz``, draw ``<out>/<name>.png`` from the file."""
        from reduced_dynamics._validation import check_bool, check_path
        from reduced_dynamics.plots.style import save_figure

        seed = check_nonnegative_int("seed", seed)
        quick = check_bool("quick", quick)
        out = check_path("out", out, kind="out")  # before the data are computed
        t0 = time.perf_counter()
        data = self.data(quick=quick, seed=seed)
        data_file = save_data(out / f"{self.name}.npz", data)
        png = out / f"{self.name}.png"
        save_figure(self.plot(load_data(data_file)), png)
        key = self.key_numbers(data)
        return FigureRun(self.name, round(time.perf_counter() - t0, 2), str(png), str(data_file), key)


#: name -> :class:`FigureSpec`, in the order ``reduced-dynamics figures`` makes them.
FIGURES: dict[str, FigureSpec] = {
    spec.name: spec
    for spec in (
        FigureSpec("portrait_two_head"),
        FigureSpec("portrait_general"),
        FigureSpec("drift"),
        FigureSpec("exact_drift"),
        FigureSpec("risk_vs_L"),
        FigureSpec("bayes_ratio"),
        FigureSpec("approx_vs_mc"),
        FigureSpec("trained_risk_vs_L", quick_setting=QUICK_TRAINED_SETTING, group="trained"),
        FigureSpec("trained_circuits", quick_setting=QUICK_TRAINED_SETTING, group="trained"),
        FigureSpec("trained_dynamics", quick_setting=QUICK_TRAINED_SETTING, group="trained"),
        FigureSpec("multitask", setting=Setting.paper_multitask(), quick_setting=Setting.paper_multitask()),
        FigureSpec("precond_risk"),
        FigureSpec("precond_flow"),
        FigureSpec("activations"),
        FigureSpec("precond_trained"),
    )
}


def check_names(only) -> list[str]:
    """Validate figure names (``None``: all) and return them as a list."""
    if only is None:
        return list(FIGURES)
    if not isinstance(only, (str, list, tuple)):
        raise TypeError(f"`only` must be a figure name or a list of them, got {type(only).__name__}")
    names = [only] if isinstance(only, str) else list(only)
    for nm in names:
        if not isinstance(nm, str) or nm not in FIGURES:
            raise ValueError(f"`only` must be one of {sorted(FIGURES)}, got {nm!r}")
    return names


def replot(name, out) -> Path:
    """Redraw ``<out>/<name>.png`` from ``<out>/<name>.npz`` without recomputing.

    Returns
    -------
    Path
        The PNG written.
    """
    from reduced_dynamics._validation import check_path
    from reduced_dynamics.plots.style import save_figure

    if not isinstance(name, str) or name not in FIGURES:
        raise ValueError(f"`name` must be one of {sorted(FIGURES)}, got {name!r:.60}")
    out = check_path("out", out, kind="dir")
    check_path("out", out / f"{name}.npz", kind="file")
    save_figure(FIGURES[name].plot(load_data(out / f"{name}.npz")), out / f"{name}.png")
    return out / f"{name}.png"


def _run_group(names, out, quick, seed) -> list[FigureRun]:
    """Run the figures ``names`` one after the other (one piece of a parallel ``run_figures``)."""
    return [FIGURES[nm].run(out=out, quick=quick, seed=seed) for nm in names]


def _pieces(names) -> list[list[str]]:
    """The independent pieces: one per figure, except that a group's figures form one piece."""
    pieces: list[list[str]] = []
    where: dict[str, list[str]] = {}
    for nm in names:
        group = FIGURES[nm].group
        if group is None:
            pieces.append([nm])
        elif group in where:
            where[group].append(nm)
        else:
            where[group] = [nm]
            pieces.append(where[group])
    return pieces


def run_figures(*, out, quick=False, only=None, seed, log=None, workers=1) -> list[FigureRun]:
    """Make the figures: for each, its data file and PNG under ``out``.

    Parameters
    ----------
    out : str or Path
        Output folder (created).
    quick : bool
        Tiny settings (seconds per figure).
    only : str or list of str, optional
        Names from :data:`FIGURES` (default: all).
    seed : int >= 0
        Seed shared by every figure (the committed figures use 0).
    log : callable, optional
        Called with one line of progress per figure.
    workers : int >= 1
        Run the independent pieces (each figure; a ``group`` of figures together)
        on this many local processes (:class:`reduced_dynamics.sweep.LocalExecutor`,
        one BLAS thread each; a serial run uses one BLAS thread too), so the
        files do not depend on it, bit for bit.

    Returns
    -------
    list of FigureRun
        In the order of ``only`` (default: the registry's order).
    """
    from reduced_dynamics._validation import check_bool, check_path

    names = list(dict.fromkeys(check_names(only)))  # each figure once (one file each)
    seed = check_nonnegative_int("seed", seed)
    quick = check_bool("quick", quick)
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 512:
        raise ValueError(f"`workers` must be an integer in [1, 512], got {workers!r}")
    if log is not None and not callable(log):
        raise TypeError(f"`log` must be callable or None, got {type(log).__name__}")
    out = check_path("out", out, kind="out")
    out.mkdir(parents=True, exist_ok=True)
    pieces = _pieces(names)
    if workers == 1 or len(pieces) == 1:
        from threadpoolctl import threadpool_limits

        runs = []
        with threadpool_limits(1):  # as each parallel worker: the files do not depend on `workers`
            for nm in names:
                run = FIGURES[nm].run(out=out, quick=quick, seed=seed)
                runs.append(run)
                if log is not None:
                    log(f"{nm}: {run.seconds:.1f} s -> {run.png}")
        return runs
    from reduced_dynamics.sweep.executors import LocalExecutor

    with LocalExecutor(min(workers, len(pieces))) as ex:
        futures = [ex.submit(_run_group, piece, out, bool(quick), seed) for piece in pieces]
        for fut in ex.as_completed(futures):
            for run in fut.result():
                if log is not None:
                    log(f"{run.name}: {run.seconds:.1f} s -> {run.png}")
        done = {run.name: run for fut in futures for run in fut.result()}
    return [done[nm] for nm in names]
