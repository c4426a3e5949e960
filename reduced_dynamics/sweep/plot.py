"""Plot a sweep: a metric against one axis, one line per value of the other axes, mean ± SE over seeds."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from reduced_dynamics._results import FrozenResult

__all__ = ["SweepCurves", "sweep_curves", "plot_sweep"]


@dataclasses.dataclass(frozen=True)
class SweepCurves(FrozenResult):
    """Mean ± standard error of a metric over seeds, one curve per combination of the ``by`` columns.

    Attributes
    ----------
    metric : str
        The metric column.
    x : str
        The axis column.
    by : tuple of str
        The columns that label the curves.
    labels : tuple of tuple
        Per curve, the values of ``by``.
    xs : tuple of ndarray
        Per curve, the sorted axis values, shape ``(m,)``.
    mean : tuple of ndarray
        Per curve, the mean of the metric over seeds at each x, shape ``(m,)``.
    se : tuple of ndarray
        Per curve, the standard error ``std(ddof=1) / sqrt(n)`` (NaN where ``n = 1``), shape ``(m,)``.
    n : tuple of ndarray
        Per curve, the number of seeds averaged at each x, shape ``(m,)``.
    """

    metric: str
    x: str
    by: tuple
    labels: tuple
    xs: tuple
    mean: tuple
    se: tuple
    n: tuple


def _frame(table):
    import os

    if isinstance(table, (str, os.PathLike)):
        from reduced_dynamics.sweep.table import load_table

        try:
            return load_table(table)
        except ValueError as exc:  # load_table names its `out`: here the folder is `table`
            raise ValueError(str(exc).replace("`out`", "`table`", 1)) from None
        except TypeError as exc:
            raise TypeError(str(exc).replace("`out`", "`table`", 1)) from None
    if not (hasattr(table, "columns") and hasattr(table, "groupby") and hasattr(table, "attrs")):
        raise TypeError(
            f"`table` must be a pandas DataFrame (load_table) or a sweep folder, got {type(table).__name__}"
        )
    return table


def sweep_curves(table, *, metric, x, by=(), over="seed") -> SweepCurves:
    """Group a sweep table by ``by`` and ``x`` and average ``metric`` over the seeds.

    Parameters
    ----------
    table : pandas.DataFrame or str or Path
        :func:`~reduced_dynamics.sweep.table.load_table`'s frame, or a sweep folder.
    metric : str
        Column to average (a numeric result, e.g. ``risk``).
    x : str
        Column on the horizontal axis (e.g. ``L``).
    by : str or sequence of str
        Columns that label the curves (e.g. ``heads``); every other parameter that
        varies in ``table`` must be one of ``x``, ``by`` or ``over``.
    over : str
        The column averaged over (default ``seed``).

    Returns
    -------
    SweepCurves

    Raises
    ------
    ValueError
        Naming ``metric``, ``x`` or ``by`` when a column is missing, ``metric``
        when it is not numeric, ``by`` when another parameter varies (averaging
        over it would mix configurations).
    """
    df = _frame(table)
    if "status" in df.columns:
        df = df[df["status"] == "done"]
    if isinstance(by, str):
        by = (by,)
    elif isinstance(by, (list, tuple)) and all(isinstance(b, str) for b in by):
        by = tuple(by)
    else:
        raise TypeError(f"`by` must be a column name or a list of them, got {by!r:.80}")
    for name, value in (("metric", metric), ("x", x), ("over", over)):
        if not isinstance(value, str):
            raise TypeError(f"`{name}` must be a column name (a str), got {value!r:.80}")
    # `over` need not be a column (a command without --seed has no `seed`), but another name is a typo
    over_cols = [over] if over != "seed" else []
    for name, cols in (("metric", [metric]), ("x", [x]), ("by", list(by)), ("over", over_cols)):
        missing = [c for c in cols if c not in df.columns]
        if missing:
            raise ValueError(f"`{name}` must name columns of the table, got {missing} (columns: {list(df.columns)})")
    if len(df) == 0:
        raise ValueError("`table` has no finished points")
    values = df[metric]
    try:
        values = values.astype(float)
    except (TypeError, ValueError):
        raise ValueError(f"`metric` must name a numeric column, got {metric!r}") from None
    df = df.assign(**{metric: values})
    params = df.attrs.get("params", [])
    varying = [
        c for c in params if c in df.columns and c not in {x, over, *by} and df[c].astype(str).nunique(dropna=False) > 1
    ]
    if varying:
        raise ValueError(f"`by` must include every other varying parameter, missing {varying} (or filter the table)")
    groups = df.groupby(list(by), sort=True, dropna=False) if by else [((), df)]
    labels, xs, means, ses, ns = [], [], [], [], []
    for label, g in groups:
        label = label if isinstance(label, tuple) else (label,)
        stats = g.groupby(x, sort=True)[metric].agg(["mean", "std", "count"])
        n = stats["count"].to_numpy(dtype=float)
        se = stats["std"].to_numpy(dtype=float) / np.sqrt(n)
        se[n < 2] = math.nan
        labels.append(tuple(v.item() if hasattr(v, "item") else v for v in label))
        xs.append(stats.index.to_numpy())
        means.append(stats["mean"].to_numpy(dtype=float))
        ses.append(se)
        ns.append(n.astype(int))
    return SweepCurves(metric, x, by, tuple(labels), tuple(xs), tuple(means), tuple(ses), tuple(ns))


def plot_sweep(table, *, metric, x, by=(), over="seed", ax=None, logx=False, logy=False, ylabel=None):
    """Draw ``metric`` against ``x``, one line per value of ``by``, mean ± SE over seeds as error bars.

    Parameters
    ----------
    table : pandas.DataFrame or str or Path
        A sweep table or a sweep folder (:func:`sweep_curves`).
    metric, x, by, over
        As in :func:`sweep_curves`.
    ax : matplotlib.axes.Axes, optional
        Where to draw (default: a new figure).
    logx, logy : bool
        Logarithmic axes.
    ylabel : str, optional
        Label of the vertical axis (default: the metric's name).

    Returns
    -------
    matplotlib.axes.Axes
    """
    import matplotlib.pyplot as plt
    from matplotlib.axes import Axes

    from reduced_dynamics._validation import check_bool

    logx, logy = check_bool("logx", logx), check_bool("logy", logy)
    if ax is not None and not isinstance(ax, Axes):
        raise TypeError(f"`ax` must be a matplotlib Axes or None, got {type(ax).__name__}")
    if ylabel is not None and not isinstance(ylabel, str):
        raise TypeError(f"`ylabel` must be a str or None, got {type(ylabel).__name__}")
    curves = sweep_curves(table, metric=metric, x=x, by=by, over=over)
    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 3.8), constrained_layout=True)
    n_seeds = sorted({int(v) for n in curves.n for v in n})
    for label, xv, m, se in zip(curves.labels, curves.xs, curves.mean, curves.se):
        text = ", ".join(f"{b}={v}" for b, v in zip(curves.by, label)) or metric
        yerr = np.where(np.isfinite(se), se, 0.0)
        ax.errorbar(np.asarray(xv, dtype=float), m, yerr=yerr, marker="o", ms=4, capsize=3, label=text)
    ax.set_xlabel(x)
    if all(np.all(np.mod(np.asarray(xv, dtype=float), 1) == 0) for xv in curves.xs) and not logx:
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    seeds = f"{n_seeds[0]}" if len(n_seeds) == 1 else f"{n_seeds[0]}–{n_seeds[-1]}"
    ax.set_ylabel(ylabel or metric)
    ax.set_title(f"{metric} vs {x}: mean ± SE over {seeds} seed(s)", fontsize=10)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    else:
        ax.ticklabel_format(axis="y", useOffset=False)  # values as they are, not "1e-5 + 1"
    if curves.by:
        ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return ax
