r"""``torch.nn.MultiheadAttention`` (object or state dict).

Convention assumed:

* **Usage.** ``mha(query=z_q[:, None], key=Z, value=Z)`` with ``batch_first=True`` (or the same
  tensors transposed): the query token ``z_q = (x_q, 0)`` attends to the ``L`` context tokens
  ``z_l = (x_l, y_l)`` only, ``embed_dim E = D = d + n_out``.
* **Weights.** ``in_proj_weight`` of shape ``(3E, E)`` is split into ``W_q, W_k, W_v``; head ``h``
  owns rows ``[h·r, (h+1)·r)`` of each, ``r = E/H`` the head dimension, so
  ``Q_h = W_q[h·r:(h+1)·r]`` ``(r, D)``. Logits ``(K_h z_l)·(Q_h z_q)/√r`` (torch's scale, folded
  into ``KQ``).
* **Read-out.** The prediction is the output's response slot(s): rows ``d … d+n_out−1`` of
  ``out_proj.weight`` applied to the concatenated heads,
  ``ŷ_k = Σ_h out_proj.weight[d+k, h·r:(h+1)·r] · V_h Σ_l p_{h,l} z_l``; the other rows are not read.
* **Refused** (one line): nonzero ``in_proj_bias`` or ``out_proj.bias``, separate
  ``q/k/v_proj_weight`` (``kdim``/``vdim`` differ from ``embed_dim``), ``bias_k``/``bias_v``
  (``add_bias_kv``) and, on an object, ``add_zero_attn``. Dropout acts in training mode only; the
  import describes the module in eval mode.
* **Warned** (allowed): a head dimension ``E/H < d``, for which ``KQ_h`` has rank at most ``E/H``
  and cannot become ``ω_h I_d``.

A state dict does not store the number of heads: pass ``n_heads`` (an object gives its own).

References
----------
docs/theory.md#full-model
"""

from __future__ import annotations

import math

import numpy as np

from reduced_dynamics.importers._canonical import CheckpointError, ImportedAttention, check_counts, scale_note, slots
from reduced_dynamics.importers._state import StateDict, flatten_checkpoint

__all__ = ["from_mha", "to_mha", "is_mha"]


def _prefix(keys) -> str | None:
    for k in keys:
        for tail in ("in_proj_weight", "q_proj_weight"):
            if k == tail or k.endswith("." + tail):
                return k[: -len(tail)]
    return None


def is_mha(keys) -> bool:
    """Whether a flat state dict's keys look like an ``nn.MultiheadAttention``'s (``in_proj_weight``)."""
    return _prefix(keys) is not None


def from_mha(source, *, n_out: int | None = None, n_heads: int | None = None) -> ImportedAttention:
    r"""Import an ``nn.MultiheadAttention`` or its state dict (convention: module docstring).

    Parameters
    ----------
    source : torch.nn.MultiheadAttention, torch.nn.Module or mapping
        The attention object, a module holding one (read through its ``state_dict()``), or a state
        dict (keys ``in_proj_weight``, ``in_proj_bias``, ``out_proj.weight``, ``out_proj.bias``,
        under a common prefix).
    n_out : int, optional
        Number of response slots read out (default 1): ``d = E − n_out``.
    n_heads : int, optional
        Number of heads: required for a state dict, checked against an object's ``num_heads``.

    Returns
    -------
    ImportedAttention
        ``source_format="mha"``, ``head_factors`` kept (head dimension ``E/H``).

    Raises
    ------
    CheckpointError
        For the refused cases of the module docstring, a missing ``n_heads``, ``E`` not divisible by
        ``n_heads``, wrong shapes or NaN weights.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> sd = {"in_proj_weight": rng.standard_normal((12, 4)), "out_proj.weight": rng.standard_normal((4, 4))}
    >>> imp = from_mha(sd, n_heads=1)
    >>> imp.n_heads, imp.d, imp.head_dim
    (1, 3, 4)
    """
    n_out, n_heads = check_counts(n_out, n_heads)
    notes = []
    if type(source).__name__ == "MultiheadAttention" and type(source).__module__.startswith("torch"):
        if source.add_zero_attn:
            raise CheckpointError("add_zero_attn = True: an extra zero key and value (not in the paper's model)")
        if n_heads is not None and int(n_heads) != source.num_heads:
            raise CheckpointError(f"`n_heads` = {n_heads} disagrees with the module's num_heads = {source.num_heads}")
        n_heads = source.num_heads
        notes.append(f"nn.MultiheadAttention object: num_heads = {n_heads}, batch_first = {source.batch_first}")
        if source.dropout:
            notes.append(f"dropout = {source.dropout} acts in training mode only; imported as in eval mode")
    if hasattr(source, "state_dict") and callable(source.state_dict):
        source = source.state_dict()
    flat, nested = flatten_checkpoint(source, "`source`")
    pre = _prefix(flat)
    if pre is None:
        raise CheckpointError("not a MultiheadAttention checkpoint: no key 'in_proj_weight'")
    outside = [k for k in flat if not k.startswith(pre)]
    if outside:
        raise CheckpointError(
            f"unexpected key {outside[0]!r} beside the MultiheadAttention at {pre or 'the top level'!r}"
        )
    if pre + "q_proj_weight" in flat:
        raise CheckpointError(
            f"`{pre}q_proj_weight`: separate q/k/v projections (kdim or vdim differ from embed_dim); "
            "the paper's model reads keys and values from the same tokens"
        )
    for b in ("bias_k", "bias_v"):
        if pre + b in flat:
            raise CheckpointError(f"`{pre}{b}`: add_bias_kv appends a learned key/value (not in the paper's model)")
    sd = StateDict(flat, "MultiheadAttention")
    W = sd.array(pre + "in_proj_weight")
    if W.ndim != 2 or W.shape[0] != 3 * W.shape[1] or W.shape[1] < 2:
        raise CheckpointError(f"`{pre}in_proj_weight` must have shape (3E, E) with E >= 2, got {W.shape}")
    E = W.shape[1]
    sd.zero(pre + "in_proj_bias", (3 * E,))
    Wout = sd.array(pre + "out_proj.weight", (E, E), what=" (E, E)")
    sd.zero(pre + "out_proj.bias", (E,))
    sd.check_all_used("a MultiheadAttention holds only in_proj_weight, in_proj_bias, out_proj.weight and out_proj.bias")
    if n_heads is None:
        raise CheckpointError("`n_heads` is required for a MultiheadAttention state dict (it does not store num_heads)")
    H = int(n_heads)
    if H < 1 or E % H:
        raise CheckpointError(f"`n_heads` must divide embed_dim E = {E}, got {n_heads}")
    N = 1 if n_out is None else int(n_out)
    d = E - N
    if N < 1 or d < 1:
        raise CheckpointError(f"`n_out` must be in [1, E - 1] = [1, {E - 1}], got {n_out}")
    r = E // H
    Q, K, V = (W[i * E : (i + 1) * E].reshape(H, r, E) for i in range(3))
    O = Wout[d : d + N].reshape(N, H, r).transpose(1, 0, 2)  # O[h, k] = out_proj.weight[d+k, h r:(h+1) r]
    warnings = []
    if r < d:
        warnings.append(f"head dimension E/H = {r} < d = {d}: each KQ_h has rank <= {r} and cannot become omega_h I_d")
    conventions = [
        f"nn.MultiheadAttention: embed_dim E = D = {E}, H = {H} heads of dimension E/H = {r}, d = {d}, n_out = {N}",
        "usage: mha(query=z_q[:, None], key=Z, value=Z) (batch_first): the query attends to the context only",
        "in_proj_weight split into W_q, W_k, W_v (rows [0, E), [E, 2E), [2E, 3E)); head h owns rows [h r, (h+1) r)",
        scale_note(E, 1.0 / math.sqrt(r)) + f"; torch scales by 1/sqrt(E/H) = 1/sqrt({r})",
        f"prediction: the output's {slots(d, N)} (those rows of out_proj.weight); the other rows are not read",
        *notes,
    ]
    if nested:
        conventions.append(nested)
    return ImportedAttention.from_factors(
        Q,
        K,
        V,
        O,
        d=d,
        attn_scale=math.sqrt(r),
        source_format="mha",
        conventions=tuple(conventions),
        warnings=tuple(warnings),
    )


def to_mha(imp: ImportedAttention) -> tuple[dict, bool]:
    """The ``nn.MultiheadAttention(D, H)`` state dict of ``imp`` (numpy arrays, zero biases) and whether it is exact.

    Exact when ``imp`` keeps head factors of dimension ``D/H`` with ``attn_scale == math.sqrt(D/H)``
    (a model imported from this format). With one head and no such factors the circuits are
    factored as ``W_k = W_v = I``, ``W_q = √D · KQ``, which reproduces ``KQ`` to one rounding. Any
    other model is refused: with ``H > 1`` the heads of ``nn.MultiheadAttention(D, H)`` have
    dimension ``D/H < D`` and cannot hold a general ``KQ_h``.
    """
    if imp.query_attends_self:
        raise CheckpointError(
            "this model's query attends to itself; mha(query=z_q, key=Z, value=Z) excludes that term, "
            "so exporting it would change its predictions"
        )
    H, D, d, N = imp.n_heads, imp.D, imp.d, imp.n_out
    g = imp.head_factors
    r = D // H
    exact = g is not None and D % H == 0 and g["Q"].shape[1] == r and g["attn_scale"] == math.sqrt(r)
    if exact:
        Q, K, V, O = g["Q"], g["K"], g["V"], g["O"]
    elif H == 1:
        eye = np.eye(D)[None]
        Q, K, V, O = imp.KQ * math.sqrt(D), eye, eye, imp.OV
    else:
        raise CheckpointError(
            f"cannot export to mha: nn.MultiheadAttention({D}, {H}) has heads of dimension {D}/{H}, which cannot hold "
            "this model's KQ_h (export a model imported from mha, one with 1 head, or use another format)"
        )
    Wout = np.zeros((D, D))
    Wout[d : d + N] = np.asarray(O).transpose(1, 0, 2).reshape(N, H * r)
    sd = {
        "in_proj_weight": np.concatenate([np.asarray(M).reshape(H * r, D) for M in (Q, K, V)]),
        "in_proj_bias": np.zeros(3 * D),
        "out_proj.weight": Wout,
        "out_proj.bias": np.zeros(D),
    }
    return sd, exact
