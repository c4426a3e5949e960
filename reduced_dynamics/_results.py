"""Frozen result objects with read-only arrays: the one return convention of the package.

Every public function returns a float, an ndarray, or an instance of a frozen
dataclass built on :class:`FrozenResult`. Its ndarray fields are read-only
(``arr.flags.writeable is False``); ``to_dict()`` gives a JSON-friendly copy.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

__all__ = ["FrozenResult", "readonly", "jsonable"]


def readonly(value):
    """Return ``value`` with every ndarray inside it (also in lists, tuples, dicts) read-only.

    Arrays are copied first when they are writeable, so the caller's array is untouched.
    """
    if isinstance(value, np.ndarray):
        if value.flags.writeable:
            value = value.copy()
            value.setflags(write=False)
        return value
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(readonly(v) for v in value)
    if isinstance(value, list):
        return [readonly(v) for v in value]
    if isinstance(value, dict):
        return {k: readonly(v) for k, v in value.items()}
    return value


def jsonable(value) -> Any:
    """A JSON-friendly copy: arrays -> lists, numpy scalars -> Python scalars, results -> dicts."""
    if isinstance(value, FrozenResult):
        return value.to_dict()
    if hasattr(value, "to_dict") and callable(value.to_dict):
        return value.to_dict()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if set(map(type, value)) <= {float, int, str}:  # plain items (ndarray.tolist()): copied as they are
            return list(value)
        return [jsonable(v) for v in value]
    return value


@dataclasses.dataclass(frozen=True)
class FrozenResult:
    """Base of the package's result dataclasses (declare subclasses with ``@dataclass(frozen=True)``).

    ``__post_init__`` makes every ndarray field read-only; subclasses that
    define their own ``__post_init__`` call ``super().__post_init__()``.
    """

    def __post_init__(self):
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, readonly(getattr(self, f.name)))

    def to_dict(self) -> dict[str, Any]:
        """Fields as a JSON-friendly dict (arrays become lists)."""
        return {f.name: jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}
