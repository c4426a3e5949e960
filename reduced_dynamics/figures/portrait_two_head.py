"""Figure ``portrait_two_head``: the exact flow on the invariant plane of two heads.

The plane ω = (γ, −γ), μ = (m, −m) of H = 2 is invariant under the gradient flow
of L̃: streamlines, nullclines (ṁ = 0 is the solution manifold), contours of
L̃ − inf L̃, and 4-D trajectories from random inits projected onto the plane.

References
----------
docs/theory.md#gradient-flow, docs/theory.md#solution-manifold, docs/theory.md#drift-law
"""

from __future__ import annotations

import numpy as np

from reduced_dynamics.dynamics.portrait import two_head_portrait_data
from reduced_dynamics.figures._base import FigureData
from reduced_dynamics.plots.portrait import plot_two_head_portrait

__all__ = ["portrait_two_head_data", "plot_portrait_two_head"]


def portrait_two_head_data(setting, *, quick=False, seed) -> FigureData:
    """The two-head portrait's data: 90 × 90 grids, 4 trajectories to t = 1e5 (quick: 30 × 30, 2 to 1e3).

    Parameters
    ----------
    setting : Setting
        Scalar data model (the registry uses the paper's).
    quick : bool
        Coarse grid, two short trajectories.
    seed : int
        Trajectory ``k`` starts from the random init of seed ``seed + k``.

    Returns
    -------
    FigureData
        The keys of :func:`reduced_dynamics.dynamics.portrait.two_head_portrait_data`.
    """
    kw = (
        dict(resolution=30, n_traj=2, t_end=1e3, n_eval=120)
        if quick
        else dict(resolution=90, n_traj=4, t_end=1e5, n_eval=400)
    )
    return FigureData("portrait_two_head", dict(two_head_portrait_data(setting, seed=seed, **kw).arrays))


#: The plot of this figure (see :func:`reduced_dynamics.plots.portrait.plot_two_head_portrait`).
plot_portrait_two_head = plot_two_head_portrait


def _key_numbers(data) -> dict:
    """Final |γ| and η_eff of each trajectory, distance from the plane, projected H = 1 optimum."""
    gam = np.abs(data["traj_gamma"][:, -1])
    off = data["traj_offplane"]
    return {
        "t_end": data["t_end"],
        "final_abs_gamma": gam.tolist(),
        "final_eta_eff": (2 * data["traj_gamma"][:, -1] * data["traj_m"][:, -1]).tolist(),
        "eta_star": data["eta_star"],
        "max_final_distance_from_plane": float(np.nanmax(off[:, -1])),
        "h1_optimum_projected": data["single_opt"][:2].tolist(),
    }
