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
    from reduced_dynamics._validation import check_path

    path = check_path("path", path, kind="new")
    if not isinstance(data, Mapping):
        raise TypeError(f"`data` must be a mapping of name -> array, got {type(data).__name__}")
    return atomic_savez(path, **{k: np.asarray(v) for k, v in data.items()})


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

    Raises
    ------
    TypeError
        ``path`` not a path.
    ValueError
        Naming ``path``: a missing or non-regular file (a folder, a named pipe, a device), a file that
        is not an ``.npz`` of numeric or text arrays, a member whose header declares more than
        ``reduced_dynamics.io.NPY_MAX_BYTES`` bytes or more data than the file holds.
    """
    from reduced_dynamics._validation import check_path

    path = check_path("path", path, kind="file")
    from reduced_dynamics.io import read_npz

    return FigureData(path.stem, read_npz(path, name="path"))
