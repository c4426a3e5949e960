"""What every figure module shares: the :class:`FigureData` container and the data-file round trip."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from reduced_dynamics._results import FrozenResult
from reduced_dynamics.io import atomic_savez

__all__ = ["FigureData", "save_data", "load_data"]


@dataclasses.dataclass(frozen=True, eq=False)
class FigureData(FrozenResult, Mapping):
    """The arrays one figure draws, exactly as stored in its ``<name>.npz`` data file.

    Read-only mapping ``key -> ndarray or scalar`` (``data["gamma"]``); each
    figure module documents its keys in its data function.

    Attributes
    ----------
    name : str
        Figure name (the data file is ``<name>.npz``).
    arrays : dict of str to ndarray, int, float or str
        The data; arrays are read-only.
    """

    name: str
    arrays: dict

    def __getitem__(self, key: str) -> Any:
        return self.arrays[key]

    def __iter__(self):
        return iter(self.arrays)

    def __len__(self) -> int:
        return len(self.arrays)


def save_data(path, data: Mapping) -> Path:
    """Write ``data`` (a mapping of arrays and scalars) atomically to the ``.npz`` file ``path``."""
    return atomic_savez(Path(path), **{k: np.asarray(v) for k, v in data.items()})


def load_data(path) -> FigureData:
    """Load a figure's ``.npz`` data file (0-d arrays become Python scalars).

    Parameters
    ----------
    path : str or Path
        ``<out>/<name>.npz``.

    Returns
    -------
    FigureData
        Named after the file's stem.
    """
    path = Path(path)
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: (z[k].item() if z[k].ndim == 0 else z[k]) for k in z.files}
    return FigureData(path.stem, arrays)
