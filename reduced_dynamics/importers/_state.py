"""State dicts as the importers read them: flat ``{key: float64 array}`` dicts, never needing torch.

A checkpoint arrives as a live torch module, a (possibly nested) dict of torch tensors or numpy
arrays, or a file. These helpers turn each into one flat dict of arrays and check weights (finite,
zero biases) with one-line :class:`~reduced_dynamics.importers.CheckpointError` messages that name
the key. torch is never imported here: a tensor is converted through its own methods.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from reduced_dynamics.importers._canonical import CheckpointError

__all__ = ["is_tensor", "to_f64", "flatten_checkpoint", "StateDict"]

#: keys under which a training checkpoint commonly nests the model's state dict, tried in this order
NESTED_KEYS = ("state_dict", "model_state_dict", "model", "module", "net", "network")


def is_tensor(value) -> bool:
    """Whether ``value`` is a torch tensor (checked without importing torch)."""
    return type(value).__module__.startswith("torch") and hasattr(value, "detach") and hasattr(value, "numpy")


def is_array(value) -> bool:
    """A torch tensor or a numpy array (the values a state dict holds)."""
    return is_tensor(value) or isinstance(value, np.ndarray)


def to_f64(key: str, value) -> np.ndarray:
    """``value`` (torch tensor or array-like of real numbers) as a C-ordered float64 numpy array.

    float32, float16 and bfloat16 tensors convert exactly; a float64 tensor keeps every bit.
    """
    if is_tensor(value):
        t = value.detach().cpu()
        if t.is_complex():
            raise CheckpointError(f"`{key}` must hold real numbers, got a complex tensor")
        return np.ascontiguousarray(t.double().numpy())
    arr = np.asarray(value)
    if arr.dtype.kind not in "biuf":
        raise CheckpointError(f"`{key}` must hold real numbers, got dtype {arr.dtype}")
    return np.ascontiguousarray(arr, dtype=np.float64)


def flatten_checkpoint(obj, where: str) -> tuple[dict, str | None]:
    """The flat state dict in ``obj`` and, if it was nested in a training checkpoint, a note saying where.

    ``obj`` is a mapping of keys to tensors or arrays, or a mapping that holds one under one of
    ``NESTED_KEYS`` (``{"model_state_dict": ..., "optimizer_state_dict": ..., "step": 100}``).
    """
    if not isinstance(obj, Mapping):
        raise CheckpointError(
            f"{where} must hold a state dict (a mapping of names to tensors), got {type(obj).__name__}"
        )
    if obj and all(is_array(v) for v in obj.values()):
        return dict(obj), None
    for key in NESTED_KEYS:
        inner = obj.get(key)
        if isinstance(inner, Mapping) and inner and all(is_array(v) for v in inner.values()):
            return dict(inner), f"the state dict was read from the checkpoint's entry {key!r}"
    if not obj:
        raise CheckpointError(f"{where} is an empty state dict")
    bad = next(k for k, v in obj.items() if not is_array(v))
    raise CheckpointError(
        f"{where} is not a state dict: entry {bad!r} is a {type(obj[bad]).__name__}, not a tensor "
        f"(and none of {list(NESTED_KEYS)} holds one)"
    )


class StateDict:
    """A flat state dict with the checks every importer makes (keys named in each message)."""

    def __init__(self, entries: Mapping, fmt: str):
        self.entries = dict(entries)
        self.fmt = fmt
        self.used: set[str] = set()

    def __contains__(self, key) -> bool:
        return key in self.entries

    def keys(self):
        return self.entries.keys()

    def array(self, key: str, shape: tuple | None = None, *, what: str = "") -> np.ndarray:
        """The entry ``key`` as float64, of ``shape`` if given, finite; marked as used."""
        if key not in self.entries:
            raise CheckpointError(f"not a {self.fmt} checkpoint: the key {key!r} is missing")
        arr = to_f64(key, self.entries[key])
        if shape is not None and arr.shape != tuple(shape):
            raise CheckpointError(f"`{key}` must have shape {tuple(shape)}{what}, got {arr.shape}")
        if not np.all(np.isfinite(arr)):
            raise CheckpointError(f"`{key}` has NaN or infinite weights")
        self.used.add(key)
        return arr

    def zero(self, key: str, shape: tuple | None = None) -> None:
        """Check the optional bias ``key`` is absent or exactly zero (the paper's model has no biases)."""
        if key not in self.entries:
            return
        arr = self.array(key, shape)
        if np.any(arr != 0):
            raise CheckpointError(
                f"`{key}` is a nonzero bias (largest |entry| {np.max(np.abs(arr)):.3g}); the paper's model has none"
            )

    def ignore(self, *keys: str) -> None:
        """Mark ``keys`` (where present) as read on purpose without being used."""
        self.used.update(k for k in keys if k in self.entries)

    def check_all_used(self, hint: str) -> None:
        """Refuse any key no rule read: it belongs to something outside the model."""
        rest = [k for k in self.entries if k not in self.used]
        if rest:
            more = f" (and {len(rest) - 1} more)" if len(rest) > 1 else ""
            raise CheckpointError(f"unexpected key {rest[0]!r}{more} in a {self.fmt} checkpoint: {hint}")
