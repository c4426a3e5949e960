"""Shared plotting style, figure helpers and the trajectory summary drawn by ``reduced-dynamics run``.

Matplotlib runs headless (Agg, selected when the package first draws or applies its style:
matplotlib is imported then, not with this module, so the figure modules' data functions do
not load it). The palette is Okabe–Ito (colour-blind safe).
Plot functions of the package draw inside :func:`style` (a ``rc_context``: the
caller's global rcParams are left alone), take ``ax=None`` (or ``fig=None`` for
multi-panel plots: a :class:`~matplotlib.figure.Figure` or a
:class:`~matplotlib.figure.SubFigure` of the caller's figure) and return what
they drew on. They never save; :func:`save_figure` does.
"""

from __future__ import annotations

import contextlib
import functools
import io
import math
from collections.abc import Mapping

import numpy as np
from cycler import cycler  # matplotlib's own dependency, light: STYLE without importing matplotlib

from reduced_dynamics.io import atomic_write_bytes

__all__ = [
    "OKABE_ITO",
    "STYLE",
    "style",
    "styled",
    "apply_style",
    "new_figure",
    "new_axes",
    "tight_layout",
    "save_figure",
    "plot_flow_summary",
]

OKABE_ITO = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"]

#: The package's matplotlib rcParams (readable at README size).
STYLE = {
    # one resolution for drawing and saving: the layout's text extents are measured once and reused by the
    # saved draw (save_figure); a figure drawn at another dpi than it is saved at measures them again
    "figure.dpi": 130,
    "savefig.dpi": 130,
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "legend.fontsize": 8.5,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.prop_cycle": cycler(color=OKABE_ITO),
}


@functools.cache
def _pyplot():
    """``matplotlib.pyplot``, imported on first use with the headless Agg backend selected."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def style() -> contextlib.AbstractContextManager:
    """Context manager applying :data:`STYLE` temporarily (``with style(): ...``)."""
    return _pyplot().rc_context(STYLE)


def styled(func):
    """Decorator: run a plot function inside :func:`style`."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        with style():
            return func(*args, **kwargs)

    return wrapper


class _DataView(Mapping):
    """A plot function's ``data`` whose missing key is a ``ValueError`` naming ``data`` (not a ``KeyError``)."""

    def __init__(self, data, where: str):
        self._data, self._where = data, where

    def __getitem__(self, key):
        try:
            return self._data[key]
        except (KeyError, IndexError, TypeError):
            raise ValueError(
                f"`data` of {self._where} has no key {key!r} (pass the data of its figure, e.g. its .npz file "
                f"loaded with reduced_dynamics.figures.registry.load_data)"
            ) from None

    def __contains__(self, key) -> bool:
        return key in self._data

    def get(self, key, default=None):
        return self._data[key] if key in self._data else default

    def __iter__(self):
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __getattr__(self, name):  # a FigureData's / PortraitData's own attributes (name, arrays)
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._data, name)


def checked_data(func):
    """Decorator of a plot function ``f(data, *, fig=None)``: ``data`` checked before drawing.

    ``data`` must be a mapping (a ``FigureData``, a ``PortraitData``, a dict or a loaded ``.npz``):
    another type is a ``TypeError`` naming ``data``, and a missing key a ``ValueError`` naming ``data``
    and the key (instead of a ``KeyError`` or "object is not subscriptable" from inside the plot).
    """

    @functools.wraps(func)
    def wrapper(data, *args, **kwargs):
        if not isinstance(data, Mapping):
            raise TypeError(
                f"`data` of {func.__name__} must be a mapping of arrays (its figure's data), got {type(data).__name__}"
            )
        return func(_DataView(data, func.__name__), *args, **kwargs)

    return wrapper


def styled_data(func):
    """:func:`styled` and :func:`checked_data`: the decorator of a figure's plot function."""
    return styled(checked_data(func))


def apply_style() -> None:
    """Set :data:`STYLE` globally (for scripts that want the package's look everywhere)."""
    _pyplot().rcParams.update(STYLE)


def new_figure(fig=None, *, figsize):
    """Return ``fig`` if given (a Figure or SubFigure to draw into), else a new Figure of size ``figsize``."""
    plt = _pyplot()
    from matplotlib.figure import FigureBase

    if fig is None:
        return plt.figure(figsize=figsize)
    if not isinstance(fig, FigureBase):
        raise ValueError(f"`fig` must be a matplotlib Figure or SubFigure, got {type(fig).__name__}")
    return fig


def new_axes(ax=None, *, figsize):
    """Return ``ax`` if given, else the Axes of a new Figure of size ``figsize``."""
    plt = _pyplot()
    from matplotlib.axes import Axes

    if ax is None:
        return plt.figure(figsize=figsize).add_subplot()
    if not isinstance(ax, Axes):
        raise ValueError(f"`ax` must be a matplotlib Axes, got {type(ax).__name__}")
    return ax


def tight_layout(fig) -> None:
    """``fig.tight_layout()`` for a top-level Figure; a SubFigure is laid out by its parent (no-op)."""
    from matplotlib.figure import Figure

    if isinstance(fig, Figure):
        fig.tight_layout()


def save_figure(fig, path) -> None:
    """Save ``fig`` (a Figure, or the Figure holding a SubFigure) as PNG atomically and close it."""
    plt = _pyplot()
    from matplotlib.figure import Figure, FigureBase

    from reduced_dynamics._validation import check_path

    if not isinstance(fig, FigureBase):
        raise TypeError(f"`fig` must be a matplotlib Figure or SubFigure, got {type(fig).__name__}")
    path = check_path("path", path, kind="new")
    fig = fig.figure if not isinstance(fig, Figure) else fig
    with style():
        png = _tight_png_by_crop(fig)
        if png is None:
            buf = io.BytesIO()
            fig.savefig(buf, format="png", bbox_inches="tight")
            png = buf.getvalue()
    plt.close(fig)
    atomic_write_bytes(path, png)


def _tight_png_by_crop(fig) -> bytes | None:
    """The PNG of ``fig.savefig(format="png", bbox_inches="tight")`` from one draw, or None where it cannot be.

    ``savefig`` with a tight box draws the figure twice at the saving resolution (once without output, to measure
    the box; once more on a canvas of the box's size, which measures every text again). When every artist lies
    on the figure's canvas, the tight picture is the canvas cropped to the box (padded by ``savefig.pad_inches``
    and clipped to the canvas, where only the white margin is lost): this draws once, on the canvas the layout
    already measured the texts on (``figure.dpi`` equals ``savefig.dpi`` in :data:`STYLE`). The crop starts on
    whole pixels where ``savefig`` shifts the figure by the box's fraction of a pixel, so the antialiasing of
    edges can differ; the size is the same to a pixel (tests/reduced_dynamics/plots/test_style.py compares both).
    None (the caller uses ``savefig``): another canvas than Agg, a saving resolution other than the figure's,
    savefig colours or transparency set in rcParams, or an artist beyond the canvas.
    """
    import matplotlib as mpl
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.image import imsave

    rc = mpl.rcParams
    dpi = fig.dpi if rc["savefig.dpi"] == "figure" else float(rc["savefig.dpi"])
    canvas = fig.canvas
    plain = rc["savefig.facecolor"] == "auto" and rc["savefig.edgecolor"] == "auto" and not rc["savefig.transparent"]
    if type(canvas) is not FigureCanvasAgg or dpi != fig.dpi or not plain or canvas.device_pixel_ratio != 1:
        return None
    canvas.draw()
    tight = fig.get_tightbbox(canvas.get_renderer())  # inches
    width, height = fig.get_size_inches()
    if not (tight.x0 >= 0 and tight.y0 >= 0 and tight.x1 <= width and tight.y1 <= height):
        return None
    box = tight.padded(rc["savefig.pad_inches"])
    rgba = np.asarray(canvas.buffer_rgba())
    rows, cols = rgba.shape[:2]
    # as savefig: the picture is int(box size x dpi) pixels, its lower-left corner the box's, to the nearest pixel of
    # the canvas (rows counted from the top; a half pixel, which tight_layout's pads give, rounds up: nearest to
    # savefig's drawing shifted by that half pixel); where the padded box passes the canvas's edge there is no
    # artist (checked above), only the figure's background
    c0, r1 = math.floor(box.x0 * dpi + 0.5 + 1e-6), math.floor(rows - box.y0 * dpi + 0.5 + 1e-6)
    c1, r0 = c0 + int(box.width * dpi + 1e-8), r1 - int(box.height * dpi + 1e-8)
    crop = np.empty((r1 - r0, c1 - c0, 4), dtype=np.uint8)
    crop[...] = np.round(np.asarray(fig.get_facecolor()) * 255.0)
    top, left = max(r0, 0), max(c0, 0)
    bottom, right = min(r1, rows), min(c1, cols)
    crop[top - r0 : bottom - r0, left - c0 : right - c0] = rgba[top:bottom, left:right]
    buf = io.BytesIO()
    imsave(buf, crop, format="png", dpi=dpi)
    return buf.getvalue()


@styled
def plot_flow_summary(result, *, fig=None):
    """Two-panel picture of a flow run.

    Left: each head's path in the (ω_h, μ_h) plane, coloured by log10 t, with
    the solution-manifold curve ``μ = ±μ_γ(γ)/n±`` for reference. Right:
    γ(t), η_eff(t) and L̃(t) − inf L̃ against t on log axes, with η* and the
    stage times marked.

    Parameters
    ----------
    result : Flow
        One trajectory (not a batch: pass ``flows[i]``) of a model with one scalar ω and μ per
        head, from :func:`reduced_dynamics.integrate` (e.g. on ``reduced_model(setting, n_heads=H)``).
    fig : Figure or SubFigure, optional
        Where to draw (two panels); default a new 11 × 4.4 in figure.

    Returns
    -------
    Figure or SubFigure
        ``fig``, with the two panels drawn (not saved: see :func:`save_figure`).

    Raises
    ------
    ValueError
        ``result`` is a batch, or its model has no scalar ω_h, μ_h per head.
    """
    from reduced_dynamics.dynamics.manifold import eta_star, inf_loss, mu_gamma
    from reduced_dynamics.flow import Flow

    if not isinstance(result, Flow):
        raise TypeError(f"`result` must be a Flow (from reduced_dynamics.integrate), got {type(result).__name__}")
    if result.is_batch or not result.model.scalar_heads:
        raise ValueError(
            "`result` must be one trajectory of a model with one scalar ω and μ per head "
            f"(index a batch: flows[i]), got {result!r}"
        )
    setting = result.setting
    d, L, s2 = setting.d, setting.L, setting.sigma2
    t = result.t
    pos = t > 0
    fig = new_figure(fig, figsize=(11, 4.4))
    ax0, ax1 = fig.subplots(1, 2)
    logt = np.log10(np.where(pos, t, np.nan))
    vmin, vmax = np.nanmin(logt), np.nanmax(logt)
    for h in range(result.n_heads):
        sc = ax0.scatter(
            result.omega[pos, h], result.mu[pos, h], c=logt[pos], s=7, cmap="viridis", vmin=vmin, vmax=vmax
        )
        ax0.plot(result.omega[:, h], result.mu[:, h], lw=0.6, color="0.5", alpha=0.6)
        ax0.annotate(
            f"head {h + 1}",
            (result.omega[-1, h], result.mu[-1, h]),
            fontsize=8,
            xytext=(4, 4),
            textcoords="offset points",
        )
    fig.colorbar(sc, ax=ax0, label=r"$\log_{10} t$")
    diag = result.diagnostics
    if result.n_heads >= 2:
        n_pos = max(int(diag.n_positive[-1]), 1)
        n_neg = max(int(diag.n_negative[-1]), 1)
        gmax = max(float(np.max(np.abs(result.omega))), 1e-3)
        g = np.linspace(gmax * 0.02, gmax * 1.05, 200)
        mg = mu_gamma(g, setting)
        ax0.plot(g, mg / n_pos, "k--", lw=1, label=r"$S_\gamma$: $\mu_h=\mu_\gamma/n_+$")
        ax0.plot(-g, -mg / n_neg, "k:", lw=1, label=r"$S_\gamma$: $\mu_h=-\mu_\gamma/n_-$")
        ax0.set_ylim(np.min(result.mu) * 1.15 - 0.05, np.max(result.mu) * 1.15 + 0.05)
        ax0.legend(loc="best")
    ax0.axhline(0, color="k", lw=0.5)
    ax0.axvline(0, color="k", lw=0.5)
    ax0.set_xlabel(r"KQ scale $\omega_h$")
    ax0.set_ylabel(r"OV value $\mu_h$")
    ax0.set_title(f"Head paths, H={result.n_heads}, d={d}, L={L}, σ²={s2:g}")

    ax1.loglog(t[pos], diag.gamma[pos], label=r"$\gamma(t)$ (mean $|\omega_h|$)")
    ax1.loglog(t[pos], np.abs(result.eta_eff[pos]), label=r"$\eta_{\rm eff}=\mu^\top\omega$")
    es = eta_star(setting)
    ax1.axhline(es, color="k", ls="--", lw=0.8, label=rf"$\eta^*={es:.4f}$")
    if result.n_heads >= 2:
        excess = result.loss[pos] - inf_loss(setting)
        ax1.loglog(t[pos], np.where(excess > 0, excess, np.nan), label=r"$\tilde L-\inf\tilde L$")
    from matplotlib.transforms import blended_transform_factory

    trans = blended_transform_factory(ax1.transData, ax1.transAxes)
    for k, (name, ts) in enumerate(result.stage_times.to_dict().items()):
        if ts is not None and ts > 0:
            ax1.axvline(ts, color="0.4", lw=0.7, ls=":")
            ax1.text(
                ts,
                0.62 - 0.1 * k,
                f" {name.replace('_', ' ')}\n t={ts:.3g}",
                transform=trans,
                fontsize=7,
                va="top",
                ha="left",
                bbox=dict(fc="white", ec="none", alpha=0.7, pad=0.5),
            )
    ax1.set_xlabel("time $t$ (gradient-flow units)")
    ax1.set_ylabel("value (log scale)")
    ax1.set_title("Stages and slow drift")
    ax1.legend(loc="lower left", framealpha=0.9)
    tight_layout(fig)
    return fig
