r"""One entry point for every checkpoint: :func:`~reduced_dynamics.importers.load`, and its inverse for round trips, :func:`~reduced_dynamics.importers.export`.

``load`` takes a path (``.pt``/``.pth``/``.bin`` through ``torch.load(path, map_location="cpu",
weights_only=True)``, ``.safetensors``, ``.npz``), a state dict, or a live object
(``HookedTransformer``, ``nn.MultiheadAttention``, :class:`~reduced_dynamics.importers.AuthorsAttention` or any module whose
state dict is in the authors' layout) and returns an :class:`~reduced_dynamics.importers.ImportedAttention`. With
``format="auto"`` the layout is read off the keys, in this order:

=================== ==========================================================
layout              recognised by
=================== ==========================================================
``transformerlens`` a key ``blocks.<i>.attn.W_Q``
``mha``             a key ``in_proj_weight`` (or ``q_proj_weight``)
``authors``         a key ending in ``q_proj.weight``
arrays              ``Q, K, V, o`` or ``KQ`` with ``ov``/``OV`` (``safetensors``/``npz``)
=================== ==========================================================

and the choice is the first entry of the import's ``conventions``.

``export`` writes a package model (or an import) in any of the formats; the import of what it
writes predicts bit for bit as the model did whenever the format can hold the model's own
parameters (see :func:`~reduced_dynamics.importers.export`).
"""

from __future__ import annotations

import dataclasses
import io
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from reduced_dynamics.importers import arrays as _arrays
from reduced_dynamics.importers import authors as _authors
from reduced_dynamics.importers import mha as _mha
from reduced_dynamics.importers import transformerlens as _tl
from reduced_dynamics.importers._canonical import FORMATS, CheckpointError, ImportedAttention, check_counts, require
from reduced_dynamics.importers._state import flatten_checkpoint

__all__ = ["load", "export", "detect_format", "TORCH_SUFFIXES", "ARRAY_SUFFIXES"]

#: file suffixes read with ``torch.load(weights_only=True)``
TORCH_SUFFIXES = (".pt", ".pth", ".bin")
#: file suffixes read without torch
ARRAY_SUFFIXES = (".safetensors", ".npz")
_TORCH_FORMATS = ("authors", "transformerlens", "mha")


def _check_format(fmt) -> str:
    if not isinstance(fmt, str) or fmt not in ("auto", *FORMATS):
        raise CheckpointError(f"`format` must be one of {['auto', *FORMATS]}, got {fmt!r}")
    return fmt


def detect_format(state) -> str:
    """The layout of a state dict: ``"transformerlens"``, ``"mha"``, ``"authors"`` or ``"arrays"``.

    Parameters
    ----------
    state : mapping
        A flat state dict, or a training checkpoint nesting one.

    Returns
    -------
    str

    Raises
    ------
    CheckpointError
        When no layout matches (the message shows the first keys).

    Examples
    --------
    >>> import numpy as np
    >>> detect_format({"KQ": np.zeros((1, 4, 4)), "ov": np.zeros((1, 4))})
    'arrays'
    """
    return _detect_format(state, "state")


def _detect_format(state, what: str) -> str:
    """:func:`detect_format`, naming the argument ``what`` in errors."""
    flat, _ = flatten_checkpoint(state, f"`{what}`")
    keys = list(flat)
    for name, test in (
        ("transformerlens", _tl.is_transformerlens),
        ("mha", _mha.is_mha),
        ("authors", _authors.is_authors),
        ("arrays", _arrays.is_arrays),
    ):
        if test(keys):
            return name
    shown = ", ".join(repr(k) for k in keys[:5]) + (", ..." if len(keys) > 5 else "")
    raise CheckpointError(f"`{what}` is not a one-layer attention checkpoint of a known layout (keys {shown})")


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    msg = lines[0] if lines else type(exc).__name__
    return (msg[:160] + "...") if len(msg) > 160 else msg


def _torch_load(path: Path):
    torch = require("torch", f"reading {path.suffix} files")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # UnpicklingError, RuntimeError (not a zip / pickle), EOFError...
        raise CheckpointError(
            f"`source` is not a readable PyTorch file: torch.load(weights_only=True) failed ({_first_line(exc)})"
        ) from None


def _read_path(source, fmt: str) -> tuple[Mapping, str, str]:
    """``(state, file kind, note)`` for a path."""
    from reduced_dynamics._validation import check_path

    path = check_path("source", source)
    suffix = path.suffix.lower()
    if suffix not in TORCH_SUFFIXES + ARRAY_SUFFIXES:
        raise CheckpointError(
            f"`source` must be a {', '.join(TORCH_SUFFIXES + ARRAY_SUFFIXES[:-1])} or {ARRAY_SUFFIXES[-1]} file, "
            f"got {path.name!r}"
        )
    try:
        check_path("source", path, kind="file")  # a named pipe would block, a device be read
    except ValueError as exc:
        raise CheckpointError(str(exc)) from None
    kind = suffix[1:]
    if fmt in ("safetensors", "npz") and kind != fmt:
        raise CheckpointError(f"`format` = {fmt!r} reads .{fmt} files, got {path.name!r}")
    if suffix in TORCH_SUFFIXES:
        state = _torch_load(path)
        note = f"read {path.name} with torch.load(map_location='cpu', weights_only=True)"
    else:
        state = _arrays._read_arrays(path, "source")
        note = f"read {path.name} as .{kind} (numpy arrays; no torch)"
        if kind == "npz" and _arrays.is_package_run(state):
            state, note = _arrays.package_run_arrays(state, path)
    if not isinstance(state, Mapping):
        raise CheckpointError(f"`source` holds a {type(state).__name__}, not a state dict")
    return state, kind, note


def load(source, *, format: str = "auto", n_out: int | None = None, n_heads: int | None = None) -> ImportedAttention:
    r"""Import a trained one-layer attention model into the package's parameterisation.

    Parameters
    ----------
    source : str, Path, mapping or torch object
        A ``.pt``/``.pth``/``.bin`` file (``torch.load(..., weights_only=True)``), a ``.safetensors``
        or ``.npz`` file, a state dict (or a training checkpoint nesting one under
        ``state_dict``/``model_state_dict``/``model``...), a ``HookedTransformer``, an
        ``nn.MultiheadAttention``, an :class:`~reduced_dynamics.importers.AuthorsAttention` or any module whose state dict is in
        one of the layouts. An :class:`~reduced_dynamics.importers.ImportedAttention` is returned as it is.
    format : {"auto", "authors", "transformerlens", "mha", "safetensors", "npz"}
        The layout; ``"auto"`` reads it off the keys (module docstring). ``"safetensors"`` and
        ``"npz"`` are the per-head arrays layout of :mod:`~reduced_dynamics.importers.arrays`.
    n_out : int, optional
        Number of outputs: needed for a multi-output TransformerLens or MultiheadAttention model
        (default 1), checked against the checkpoint otherwise.
    n_heads : int, optional
        Number of heads: needed for a MultiheadAttention state dict, checked otherwise.

    Returns
    -------
    ImportedAttention
        Its ``conventions`` start with the layout chosen (and how the file was read).

    Raises
    ------
    CheckpointError
        An unknown ``format``, a file that is missing, unreadable or not a one-layer attention model
        of the paper's kind, wrong shapes, NaN weights (one line each).
    MissingExtraError
        A ``.pt`` file without torch, a ``.safetensors`` file without safetensors (the message names
        the extra to install).

    Examples
    --------
    >>> import numpy as np
    >>> from reduced_dynamics.model.attention import AttentionModel
    >>> m = AttentionModel(2, 3)
    >>> p = m.init(seed=0)
    >>> imp = load(p)                     # the package's own parameters are the arrays layout
    >>> imp.conventions[0]
    "format npz (auto-detected from the keys: ['Q', 'K', 'V', 'o'])"
    """
    fmt = _check_format(format)
    n_out, n_heads = check_counts(n_out, n_heads)
    if isinstance(source, ImportedAttention):
        return source
    notes = []
    kind = None
    if isinstance(source, (str, os.PathLike)):
        source, kind, note = _read_path(source, fmt)
        notes.append(note)
    elif _tl.is_hooked_transformer(source):
        if fmt not in ("auto", "transformerlens"):
            raise CheckpointError(f"`format` = {fmt!r} does not read a TransformerLens {type(source).__name__}")
        imp = _tl.from_transformerlens(source, n_out=n_out, n_heads=n_heads)
        return _with_notes(
            imp, [f"format transformerlens ({'given' if fmt != 'auto' else 'a HookedTransformer object'})"]
        )
    elif type(source).__name__ == "MultiheadAttention" and type(source).__module__.startswith("torch"):
        if fmt not in ("auto", "mha"):
            raise CheckpointError(f"`format` = {fmt!r} does not read an nn.MultiheadAttention")
        imp = _mha.from_mha(source, n_out=n_out, n_heads=n_heads)
        return _with_notes(imp, [f"format mha ({'given' if fmt != 'auto' else 'an nn.MultiheadAttention object'})"])
    elif hasattr(source, "state_dict") and callable(source.state_dict) and not isinstance(source, Mapping):
        notes.append(f"read {type(source).__name__}.state_dict()")
        source = source.state_dict()
    elif not isinstance(source, Mapping):
        raise CheckpointError(f"`source` must be a path, a state dict or a torch model, got {type(source).__name__}")
    if fmt == "auto":
        layout = _detect_format(source, "source")
        flat, _ = flatten_checkpoint(source, "`source`")
        shown = list(flat)[:4]
        name = (kind if kind in ("safetensors", "npz") else "npz") if layout == "arrays" else layout
        notes.insert(0, f"format {name} (auto-detected from the keys: {shown})")
    else:
        layout = "arrays" if fmt in ("safetensors", "npz") else fmt
        name = fmt
        notes.insert(0, f"format {fmt} (given)")
    if layout == "authors":
        imp = _authors.from_authors(source, n_out=n_out, n_heads=n_heads)
    elif layout == "transformerlens":
        imp = _tl.from_transformerlens(source, n_out=n_out, n_heads=n_heads)
    elif layout == "mha":
        imp = _mha.from_mha(source, n_out=n_out, n_heads=n_heads)
    else:
        flat, nested = flatten_checkpoint(source, "`source`")
        if nested:
            notes.append(nested)
        if kind not in (None, "safetensors", "npz"):
            notes.append(f"the per-head arrays layout (of .npz/.safetensors files) read from a .{kind} file")
        imp = _arrays.from_arrays(flat, source_format=name, n_out=n_out, n_heads=n_heads)
    return _with_notes(imp, notes)


def _with_notes(imp: ImportedAttention, notes) -> ImportedAttention:
    return dataclasses.replace(imp, conventions=(*notes, *imp.conventions))


def _as_imported(model, params) -> ImportedAttention:
    if isinstance(model, ImportedAttention):
        if params is not None:
            raise CheckpointError("`params` must be None when `model` is an ImportedAttention")
        return model
    from reduced_dynamics.model.attention import AttentionModel
    from reduced_dynamics.multitask.attention import MultitaskAttention

    if isinstance(model, AttentionModel):
        from reduced_dynamics.model.attention import check_model

        if params is None:
            raise CheckpointError("`params` is required to export an AttentionModel (its weights are not in it)")
        check_model(model, params)
        return ImportedAttention.from_package(model, params)
    if isinstance(model, MultitaskAttention):
        return ImportedAttention.from_package(model, params)
    raise CheckpointError(
        f"`model` must be an ImportedAttention, an AttentionModel (with `params`) or a MultitaskAttention, "
        f"got {type(model).__name__}"
    )


def export(model, path=None, *, format: str, params: dict | None = None):
    r"""Write ``model`` as a checkpoint of ``format`` (the inverse of :func:`~reduced_dynamics.importers.load`, for round trips).

    Parameters
    ----------
    model : ImportedAttention, AttentionModel or MultitaskAttention
        What to write; an :class:`~reduced_dynamics.model.attention.AttentionModel` (softmax,
        f = exp) needs its ``params``.
    path : str or Path, optional
        Where to write (atomically): ``.pt``/``.pth``/``.bin`` for the torch layouts, ``.safetensors``
        or ``.npz`` for the arrays. ``None`` returns the state dict instead.
    format : {"authors", "transformerlens", "mha", "safetensors", "npz"}
        ``authors``: ``attention_layer.{q,k,v,o}_proj.weight`` (loads into
        :class:`~reduced_dynamics.importers.AuthorsAttention`). ``transformerlens``: the ``blocks.0.attn`` weights of a
        ``HookedTransformer`` (``load_state_dict(sd, strict=False)``; only for a model whose query
        attends to itself). ``mha``: an ``nn.MultiheadAttention(D, H)`` state dict (refused for a
        self-attending query). ``safetensors``/``npz``: the per-head arrays.
    params : dict, optional
        The parameters of an ``AttentionModel``.

    Returns
    -------
    dict or Path
        Without ``path``: the state dict (float64 torch tensors for the torch layouts, numpy
        arrays for the arrays). With ``path``: the path written.

    Raises
    ------
    CheckpointError
        An unknown ``format``, a suffix that does not fit it, or a model the format cannot hold.
    MissingExtraError
        A torch layout without torch, ``.safetensors`` without safetensors.

    Notes
    -----
    Importing what ``export`` wrote gives bit for bit the same predictions in float64 when the
    format holds the model's own parameters: the ``"separate"`` factors in every format (for
    ``mha`` only with one head), circuits (``"merged"``, ``MultitaskAttention``) in
    ``safetensors``/``npz``, and a model imported from any format exported back to that format.
    Otherwise the circuits are factored as ``K_h = V_h = I``, ``Q_h = √D · KQ_h``, which gives
    ``KQ`` back to one rounding (relative error ~1e-16).

    Examples
    --------
    >>> import numpy as np
    >>> from reduced_dynamics.model.attention import AttentionModel
    >>> m = AttentionModel(2, 3)
    >>> p = m.init(seed=0)
    >>> arrays = export(m, format="npz", params=p)
    >>> np.array_equal(load(arrays).KQ, m.circuits(p)[0])
    True
    """
    if not isinstance(format, str) or format not in FORMATS:
        raise CheckpointError(f"`format` must be one of {list(FORMATS)}, got {format!r}")
    imp = _as_imported(model, params)
    if format in _TORCH_FORMATS:
        to = {"authors": _authors.to_authors, "transformerlens": _tl.to_transformerlens, "mha": _mha.to_mha}[format]
        state, _exact = to(imp)
    else:
        state = _arrays.to_arrays(imp)
    if path is not None:
        from reduced_dynamics._validation import check_path

        try:
            path = check_path("path", path, kind="new")
        except ValueError as exc:
            raise CheckpointError(str(exc)) from None
        allowed = TORCH_SUFFIXES if format in _TORCH_FORMATS else (f".{format}",)
        if path.suffix.lower() not in allowed:
            raise CheckpointError(f"`path` must end in {' or '.join(allowed)} for format {format!r}, got {path.name!r}")
    if format in _TORCH_FORMATS:
        torch = require("torch", f"exporting the {format} layout")
        state = {k: torch.tensor(np.ascontiguousarray(v), dtype=torch.float64) for k, v in state.items()}
        if path is None:
            return state
        buf = io.BytesIO()
        torch.save(state, buf)
        data = buf.getvalue()
    elif path is None:
        return state
    elif format == "safetensors":
        st = require("safetensors.numpy", "writing a .safetensors file")
        data = st.save({k: np.ascontiguousarray(v) for k, v in state.items()})
    else:
        buf = io.BytesIO()
        np.savez(buf, **state)
        data = buf.getvalue()
    from reduced_dynamics.io import atomic_write_bytes

    return atomic_write_bytes(path, data)
