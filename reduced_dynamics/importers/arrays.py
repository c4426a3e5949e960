r"""Per-head arrays in a ``.safetensors`` or ``.npz`` file (readable without torch).

Two layouts, told apart by their keys:

``Q, K, V`` of shape ``(H, D, D)`` and ``o`` of shape ``(H, D)``
    The package's ``"separate"`` parameters (docs/theory.md#full-model): ``D = d + 1``, logits
    ``(K_h z_l)·(Q_h z_q)/√D``, ``ŷ = Σ_h o_hᵀ V_h Σ_l p_{h,l} z_l``, the query attending to the
    context only.
``KQ`` of shape ``(H, D, D)`` and ``ov`` of shape ``(H, D)`` or ``OV`` of shape ``(H, n_out, D)``
    The circuits, logit scale included: ``s_{h,l} = z_lᵀ KQ_h z_q``,
    ``ŷ_k = Σ_h OV_h[k] · Σ_l p_{h,l} z_l``; ``n_out`` is ``OV``'s middle axis and ``d = D − n_out``.

Optional scalars: ``d`` (checked against ``D − n_out``; ``to_arrays`` writes it when
``n_out > 1``) and ``query_attends_self`` (0 or 1, default 0; 1 adds the query's own term to the
forward pass, as for a model imported from TransformerLens). Any other key is refused. A
``.safetensors`` file is read with the ``safetensors`` package's numpy API, a ``.npz`` file with
``numpy.load(allow_pickle=False)``; neither needs torch.

**The package's own trained models.** ``reduced-dynamics train --out DIR`` writes ``DIR/final.npz``
with the parameters under ``param_Q, param_K, param_V, param_o`` (or ``param_KQ, param_ov``) beside
the loss history and circuit snapshots, and the run's configuration in ``DIR/final.json``. Such a
file is read too (``package_run_arrays``): the parameterisation comes from ``final.json``,
which must sit beside it; linear attention, the reduced (ω, μ) parameterisation and activations
other than ``exp`` are refused (they are not the softmax model the analysis is about).

References
----------
docs/theory.md#full-model
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from reduced_dynamics.importers._canonical import CheckpointError, ImportedAttention, require, scale_note
from reduced_dynamics.importers._state import StateDict

__all__ = ["from_arrays", "to_arrays", "read_arrays", "is_arrays", "is_package_run", "package_run_arrays", "ARRAY_KEYS"]

#: the keys of the two layouts and the optional scalars
ARRAY_KEYS = {"separate": ("Q", "K", "V", "o"), "merged": ("KQ", "ov", "OV"), "optional": ("d", "query_attends_self")}


def is_arrays(keys) -> bool:
    """Whether a flat dict's keys are one of the two per-head layouts (``Q, K, V, o`` or ``KQ`` with ``ov``/``OV``)."""
    keys = set(keys)
    return {"Q", "K", "V", "o"} <= keys or ("KQ" in keys and bool(keys & {"ov", "OV"}))


#: what ``reduced-dynamics train`` writes into final.npz beside the parameters
_RUN_EXTRAS = ("losses", "snapshot_steps", "snapshot_KQ", "snapshot_ov", "stream_version")


def is_package_run(arrays) -> bool:
    """Whether a ``.npz``'s arrays are a ``reduced-dynamics train --out`` ``final.npz`` (``param_*`` keys)."""
    return any(str(k).startswith("param_") for k in arrays)


def package_run_arrays(arrays, path) -> tuple[dict, str]:
    """The per-head arrays of a ``reduced-dynamics train`` ``final.npz`` and a note on how they were read.

    Parameters
    ----------
    arrays : dict of str to ndarray
        The file's arrays (``param_*`` parameters, loss history, snapshots, stream version).
    path : Path
        The file; its run's ``final.json`` (the configuration) must sit beside it.

    Returns
    -------
    (dict, str)
        ``Q, K, V, o`` or ``KQ, ov`` (the arrays layout) and the note for ``conventions``.

    Raises
    ------
    CheckpointError
        No ``final.json`` beside the file, a configuration without its parameterisation, or a model
        that is not softmax attention with ``f = exp`` (linear attention, the reduced
        parameterisation, another activation).
    """
    import json

    path = Path(path)
    cfg_path = path.with_name("final.json")
    try:
        config = json.loads(cfg_path.read_text())["config"]
        kind = config["parameterisation"]
    except FileNotFoundError:
        raise CheckpointError(
            f"`source` {path.name!r} is a reduced-dynamics train output: its final.json (the configuration) "
            "must sit beside it"
        ) from None
    except (OSError, ValueError, KeyError, TypeError):
        raise CheckpointError(
            f"`source` {path.name!r}: {cfg_path.name} beside it has no config.parameterisation"
        ) from None
    activation = (config.get("setting") or {}).get("activation") or "exp"
    activation = activation.get("name", "exp") if isinstance(activation, dict) else activation
    if kind not in ("separate", "merged"):
        raise CheckpointError(
            f"`source` {path.name!r} is a reduced-dynamics train output of the {kind!r} parameterisation; "
            "only the softmax models 'separate' and 'merged' are imported"
        )
    if activation != "exp":
        raise CheckpointError(
            f"`source` {path.name!r} was trained with activation {activation!r}; only f = exp is imported"
        )
    out = {}
    for key, value in arrays.items():
        if str(key).startswith("param_"):
            out[str(key)[len("param_") :]] = value
        elif key not in _RUN_EXTRAS:
            raise CheckpointError(
                f"`source` {path.name!r}: unexpected array {key!r} in a reduced-dynamics train output"
            )
    stream = arrays.get("stream_version")
    note = (
        f"read {path.name} as a reduced-dynamics train output (parameterisation {kind!r} from {cfg_path.name}"
        + (f", prompt stream version {int(np.asarray(stream))}" if stream is not None else "")
        + "; numpy arrays, no torch)"
    )
    return out, note


def read_arrays(path) -> dict:
    """The arrays of a ``.safetensors`` or ``.npz`` file as a dict of numpy arrays.

    Parameters
    ----------
    path : str or Path
        Ends in ``.safetensors`` or ``.npz``.

    Returns
    -------
    dict of str to ndarray

    Raises
    ------
    CheckpointError
        A file that does not exist or cannot be read as its suffix says.
    MissingExtraError
        ``.safetensors`` without the ``safetensors`` package.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".safetensors", ".npz"):
        raise CheckpointError(f"`source` must end in .safetensors or .npz for the arrays layout, got {path.name!r}")
    if not path.is_file():
        raise CheckpointError(f"`source` file not found: {str(path)!r}")
    if suffix == ".safetensors":
        st = require("safetensors.numpy", "reading a .safetensors file")
        try:
            return dict(st.load_file(str(path)))
        except Exception as exc:  # safetensors raises its own SafetensorError, OSError, ValueError...
            raise CheckpointError(f"`source` is not a readable .safetensors file ({_first_line(exc)})") from None
    from reduced_dynamics.io import read_npz

    try:  # members' headers checked before reading (a 200-byte member declaring 74.5 GiB was allocated)
        return read_npz(path, name="source")
    except ValueError as exc:
        raise CheckpointError(f"`source` is not a readable .npz file ({_first_line(exc)})") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    msg = text[0] if text else type(exc).__name__
    return (msg[:160] + "...") if len(msg) > 160 else msg


def _scalar(sd: StateDict, key: str) -> float | None:
    if key not in sd:
        return None
    v = sd.array(key)
    if v.size != 1:
        raise CheckpointError(f"`{key}` must be a scalar, got shape {v.shape}")
    return float(v.reshape(()))


def from_arrays(
    arrays, *, source_format: str = "npz", n_out: int | None = None, n_heads: int | None = None
) -> ImportedAttention:
    r"""Import per-head arrays (the layouts of the module docstring).

    Parameters
    ----------
    arrays : mapping of str to array
        The file's arrays (numpy arrays or torch tensors).
    source_format : {"npz", "safetensors"}
        Recorded as the import's ``source_format``.
    n_out, n_heads : int, optional
        If given, must agree with the arrays.

    Returns
    -------
    ImportedAttention
        With ``factors`` (and ``head_factors``) for the ``Q, K, V, o`` layout; circuits only for
        ``KQ`` with ``ov``/``OV``.

    Raises
    ------
    CheckpointError
        Mixed or incomplete layouts, unexpected keys, wrong shapes, NaN weights, an inconsistent ``d``.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> imp = from_arrays({"KQ": rng.standard_normal((2, 5, 5)), "OV": rng.standard_normal((2, 2, 5))})
    >>> imp.d, imp.n_out
    (3, 2)
    """
    sd = StateDict(dict(arrays), f".{source_format}")
    keys = set(sd.keys())
    sep, mer = keys & set(ARRAY_KEYS["separate"]), keys & set(ARRAY_KEYS["merged"])
    if sep and mer:
        raise CheckpointError(f"mixed layouts: both {sorted(sep)} (separate) and {sorted(mer)} (merged)")
    if not is_arrays(keys):
        raise CheckpointError(
            f"not a per-head arrays file: need Q, K, V, o or KQ with ov or OV, got keys {sorted(keys)[:8]}"
        )
    d_given = _scalar(sd, "d")
    self_flag = _scalar(sd, "query_attends_self")
    if self_flag not in (None, 0.0, 1.0):
        raise CheckpointError(f"`query_attends_self` must be 0 or 1, got {self_flag}")
    conventions = []
    if sep:
        Q = sd.array("Q")
        if Q.ndim != 3 or Q.shape[1] != Q.shape[2] or Q.shape[1] < 2 or Q.shape[0] < 1:
            raise CheckpointError(f"`Q` must have shape (H, D, D) with D >= 2, got {Q.shape}")
        H, D = Q.shape[0], Q.shape[1]
        K = sd.array("K", (H, D, D))
        V = sd.array("V", (H, D, D))
        o = sd.array("o", (H, D), what=" (H, D): one output")
        N = 1
        conventions += [
            f"per-head factors Q, K, V (H, D, D) and o (H, D): the package's 'separate' model, H = {H}, D = {D}",
            scale_note(D, 1.0 / math.sqrt(D)),
        ]
    else:
        if "ov" in keys and "OV" in keys:
            raise CheckpointError("both `ov` and `OV` given: keep one (ov for one output, OV for several)")
        KQ = sd.array("KQ")
        if KQ.ndim != 3 or KQ.shape[1] != KQ.shape[2] or KQ.shape[1] < 2 or KQ.shape[0] < 1:
            raise CheckpointError(f"`KQ` must have shape (H, D, D) with D >= 2, got {KQ.shape}")
        H, D = KQ.shape[0], KQ.shape[1]
        if "ov" in keys:
            OV = sd.array("ov", (H, D), what=" (H, D)")[:, None, :]
        else:
            OV = sd.array("OV")
            if OV.ndim != 3 or OV.shape[0] != H or OV.shape[2] != D or not 1 <= OV.shape[1] < D:
                raise CheckpointError(f"`OV` must have shape (H, n_out, D) = ({H}, n_out, {D}), got {OV.shape}")
        N = OV.shape[1]
        conventions.append(
            f"circuits KQ (H, D, D) and {'ov' if 'ov' in keys else 'OV'}: H = {H}, D = {D}, n_out = {N}, "
            "logit scale included in KQ"
        )
    d = D - N
    if d_given is not None and d_given != d:
        raise CheckpointError(f"`d` = {d_given:g} disagrees with D - n_out = {D} - {N} = {d}")
    if n_out is not None and int(n_out) != N:
        raise CheckpointError(f"`n_out` = {n_out} disagrees with the arrays ({N} outputs)")
    if n_heads is not None and int(n_heads) != H:
        raise CheckpointError(f"`n_heads` = {n_heads} disagrees with the arrays ({H} heads)")
    sd.check_all_used(f"the arrays layout has only {ARRAY_KEYS}")
    conventions.append(
        "tokens z_l = (x_l, y_l), query z_q = (x_q, 0); the query "
        + ("attends to itself too (query_attends_self = 1)" if self_flag else "attends to the context only")
    )
    fields = dict(source_format=source_format, conventions=tuple(conventions), query_attends_self=bool(self_flag))
    if self_flag:
        fields["warnings"] = ("the query attends to itself (query_attends_self = 1): the paper's model excludes it",)
    if sep:
        return ImportedAttention.from_factors(Q, K, V, o[:, None, :], d=d, attn_scale=math.sqrt(D), **fields)
    return ImportedAttention(KQ=KQ, OV=OV, d=d, n_out=N, **fields)


def to_arrays(imp: ImportedAttention) -> dict:
    """The arrays of ``imp`` in the layouts of the module docstring (always exact).

    ``Q, K, V, o`` when ``imp`` keeps the package's ``"separate"`` factors, else ``KQ`` with ``ov``
    (one output) or ``OV`` and ``d``; ``query_attends_self = 1`` when it does.
    """
    if imp.factors is not None:
        out = {k: np.array(imp.factors[k]) for k in ("Q", "K", "V", "o")}
    else:
        out = {"KQ": np.array(imp.KQ)}
        if imp.n_out == 1:
            out["ov"] = np.array(imp.OV[:, 0, :])
        else:
            out["OV"] = np.array(imp.OV)
            out["d"] = np.array(imp.d, dtype=np.int64)
    if imp.query_attends_self:
        out["query_attends_self"] = np.array(1, dtype=np.int64)
    return out
