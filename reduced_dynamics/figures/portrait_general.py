"""Figure ``portrait_general``: trajectories of the 2H-dimensional flow (H = 3) on informative planes.

Per-head paths (ω_h, μ_h), the KQ scales of two heads, (η_eff, Σμ) and
(γ, η* − η_eff) during the drift, coloured by log t, with the stage times.

References
----------
docs/theory.md#gradient-flow, docs/theory.md#stages, docs/theory.md#drift-law
"""

from __future__ import annotations

import numpy as np

from reduced_dynamics.dynamics.portrait import general_portrait_data
from reduced_dynamics.figures._base import FigureData
from reduced_dynamics.plots.portrait import plot_general_portrait

__all__ = ["portrait_general_data", "plot_portrait_general"]

#: Number of heads of the figure.
N_HEADS = 3


def portrait_general_data(setting, *, quick=False, seed) -> FigureData:
    """H = 3 flow from 5 random inits (scale 0.01) to t = 1e5 (quick: 2 inits to 1e3).

    Parameters
    ----------
    setting : Setting
        Scalar data model (the registry uses the paper's).
    quick : bool
        Two short trajectories.
    seed : int
        Trajectory ``k`` starts from the random init of seed ``seed + k``.

    Returns
    -------
    FigureData
        The keys of :func:`reduced_dynamics.dynamics.portrait.general_portrait_data`.
    """
    kw = dict(n_traj=2, t_end=1e3, n_eval=120) if quick else dict(n_traj=5, t_end=1e5, n_eval=400)
    data = general_portrait_data(setting, seed=seed, n_heads=N_HEADS, **kw)
    return FigureData("portrait_general", dict(data.arrays))


#: The plot of this figure (see :func:`reduced_dynamics.plots.portrait.plot_general_portrait`).
plot_portrait_general = plot_general_portrait


def _key_numbers(data) -> dict:
    """Head signs per trajectory and median stage times."""
    st = data["stage"]
    return {
        "n_heads": int(data["n_heads"]),
        "n_pos": data["n_pos"].tolist(),
        "n_neg": data["n_neg"].tolist(),
        "n_dummy": data["n_dummy"].tolist(),
        "median_stage_times": {
            k: float(np.nanmedian(st[:, j])) for j, k in enumerate(("sign_matching", "zero_sum", "homogeneous"))
        },
    }
