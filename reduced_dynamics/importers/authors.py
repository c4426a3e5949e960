r"""The paper authors' PyTorch layout: one attention layer of ``q_proj, k_proj, v_proj`` and ``o_proj``.

Convention assumed (He, Pan, Chen, Yang 2025, and :class:`~reduced_dynamics.importers.AuthorsAttention`, which writes it):

* tokens ``z_l = (x_l, y_l) ∈ R^D``, query ``z_q = (x_q, 0)``, ``D = d + n_out``
  (``n_embd = D``);
* ``attention_layer.{q,k,v}_proj.weight`` of shape ``(H·D, D)`` (``nn.Linear(D, H·D)``, no bias):
  head ``h`` owns rows ``[hD, (h+1)D)``, so ``Q_h = q_proj.weight[hD:(h+1)D]`` maps ``z ↦ Q_h z``;
* ``attention_layer.o_proj.weight`` of shape ``(n_out, H·D)`` over the concatenated head outputs
  (``o_proj`` beside ``attention_layer``, key ``o_proj.weight``, is read too; ``to_authors``
  writes it inside, as :class:`~reduced_dynamics.importers.AuthorsAttention` holds it);
* logits ``(K_h z_l)·(Q_h z_q) / √n_embd`` over the context only (the query does not attend to
  itself), prediction ``ŷ_k = Σ_h o_proj.weight[k, hD:(h+1)D] · V_h Σ_l p_{h,l} z_l``.

The authors' own read-out of ω from a trained checkpoint divides by ``√(d+2)`` while their forward
pass scales the logits by ``1/√(d+1)``: the import follows the forward pass (what the model
computes), and says so in ``conventions``.

For one output the factors are the package's ``"separate"`` parameters exactly (``Q_h, K_h, V_h``
and ``o_h = o_proj.weight[0, hD:(h+1)D]``, logit scale ``1/√D``), so a package model exported in
this layout and imported again predicts bit for bit the same.

References
----------
docs/theory.md#full-model
"""

from __future__ import annotations

import math

import numpy as np

from reduced_dynamics.importers._canonical import CheckpointError, ImportedAttention, check_counts, scale_note
from reduced_dynamics.importers._state import StateDict

__all__ = ["from_authors", "to_authors", "is_authors"]

_PROJ = ("q_proj", "k_proj", "v_proj")


def _q_keys(keys) -> list[str]:
    return [k for k in keys if k == "q_proj.weight" or k.endswith(".q_proj.weight")]


def is_authors(keys) -> bool:
    """Whether a flat state dict's keys look like the authors' layout (a key ending in ``q_proj.weight``)."""
    return bool(_q_keys(keys))


def from_authors(state, *, n_out: int | None = None, n_heads: int | None = None) -> ImportedAttention:
    r"""Import a state dict in the paper authors' layout (see the module docstring for the convention).

    Parameters
    ----------
    state : mapping or torch.nn.Module
        A flat state dict (torch tensors or numpy arrays), a training checkpoint that nests one
        (``{"model_state_dict": ...}``), or a module whose ``state_dict()`` is in this layout (for
        example :class:`~reduced_dynamics.importers.AuthorsAttention`). Keys may carry a wrapper prefix (``module.``,
        ``_orig_mod.``, ...); ``o_proj`` may sit inside or beside ``attention_layer``.
    n_out : int, optional
        Number of outputs, if known: must equal the rows of ``o_proj.weight``.
    n_heads : int, optional
        Number of heads, if known: must equal ``q_proj.weight.shape[0] / D``.

    Returns
    -------
    ImportedAttention
        ``source_format="authors"``; ``head_factors`` always kept, and ``factors`` (the package's
        ``"separate"`` parameters) when ``n_out == 1``.

    Raises
    ------
    CheckpointError
        Missing or unexpected keys, more than one attention layer, shapes that do not fit
        ``(H·D, D)`` and ``(n_out, H·D)``, ``d = D − n_out < 1``, NaN weights or nonzero biases.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> sd = {f"attention_layer.{p}.weight": rng.standard_normal((8, 4)) for p in ("q_proj", "k_proj", "v_proj")}
    >>> sd["o_proj.weight"] = rng.standard_normal((1, 8))
    >>> imp = from_authors(sd)
    >>> imp.n_heads, imp.d, imp.n_out, imp.factors is not None
    (2, 3, 1, True)
    """
    n_out, n_heads = check_counts(n_out, n_heads)
    from reduced_dynamics.importers._state import flatten_checkpoint

    if hasattr(state, "state_dict") and callable(state.state_dict):
        state = state.state_dict()
    flat, nested = flatten_checkpoint(state, "`state`")
    sd = StateDict(flat, "authors-layout")
    qk = _q_keys(sd.keys())
    if not qk:
        raise CheckpointError("not an authors-layout checkpoint: no key ends in 'q_proj.weight'")
    if len(qk) > 1:
        raise CheckpointError(f"more than one attention layer: keys {qk[0]!r} and {qk[1]!r} (one layer expected)")
    pre = qk[0][: -len("q_proj.weight")]  # e.g. "module.attention_layer."
    parent = pre[: -len("attention_layer.")] if pre.endswith("attention_layer.") else None
    o_candidates = [pre + "o_proj.weight"] + ([parent + "o_proj.weight"] if parent is not None else [])
    o_key = next((k for k in o_candidates if k in sd), None)
    if o_key is None:
        raise CheckpointError(f"not an authors-layout checkpoint: no {' or '.join(map(repr, o_candidates))}")
    W = {}
    first = sd.array(pre + "q_proj.weight")
    if first.ndim != 2 or first.shape[1] < 2 or first.shape[0] < first.shape[1] or first.shape[0] % first.shape[1]:
        raise CheckpointError(
            f"`{pre}q_proj.weight` must have shape (H·D, D) with H·D a multiple of D >= 2, got {first.shape}"
        )
    HD, D = first.shape
    H = HD // D
    for p in _PROJ:
        W[p] = sd.array(pre + p + ".weight", (HD, D), what=f" (H·D, D) with H = {H}, D = {D}")
        sd.zero(pre + p + ".bias", (HD,))
    Wo = sd.array(o_key)
    if Wo.ndim != 2 or Wo.shape[1] != HD:
        raise CheckpointError(f"`{o_key}` must have shape (n_out, H·D) = (n_out, {HD}), got {Wo.shape}")
    sd.zero(o_key[: -len("weight")] + "bias", (Wo.shape[0],))
    N = Wo.shape[0]
    d = D - N
    if d < 1:
        raise CheckpointError(
            f"`{o_key}` has {N} rows (outputs) but tokens have D = {D} entries: d = D - n_out must be >= 1"
        )
    if n_out is not None and int(n_out) != N:
        raise CheckpointError(f"`n_out` = {n_out} disagrees with the {N} rows of `{o_key}`")
    if n_heads is not None and int(n_heads) != H:
        raise CheckpointError(
            f"`n_heads` = {n_heads} disagrees with `{pre}q_proj.weight` ({HD} rows = {H} heads of D = {D})"
        )
    sd.check_all_used("the authors' layout holds only attention_layer.{q,k,v}_proj and o_proj (weights, zero biases)")
    Q, K, V = (W[p].reshape(H, D, D) for p in _PROJ)
    O = Wo.reshape(N, H, D).transpose(1, 0, 2)  # O[h, k] = o_proj.weight[k, hD:(h+1)D]
    conventions = [
        f"authors' layout (keys {pre}{{q,k,v}}_proj.weight, {o_key}); H = {H} heads, D = n_embd = {D}, "
        f"d = {d}, n_out = {N} (rows of o_proj)",
        "tokens z_l = (x_l, y_l), query z_q = (x_q, 0); head h owns rows [hD, (h+1)D) of each projection; "
        "the query attends to the context only",
        scale_note(D, 1.0 / math.sqrt(D)) + "; the authors' forward pass scales by 1/sqrt(n_embd)",
        "imported by the forward pass: the authors' own omega read-out divides by sqrt(d+2), "
        "their forward pass scales logits by 1/sqrt(d+1); KQ here is what the forward pass computes",
        f"prediction y_k = sum_h o_proj.weight[k, hD:(h+1)D] . V_h sum_l p_hl z_l (k < {N})",
    ]
    if nested:
        conventions.append(nested)
    return ImportedAttention.from_factors(
        Q, K, V, O, d=d, attn_scale=math.sqrt(D), source_format="authors", conventions=tuple(conventions)
    )


def to_authors(imp: ImportedAttention) -> tuple[dict, bool]:
    """The authors'-layout state dict of ``imp`` as numpy arrays, and whether it is exact.

    Exact (the stored factors written as they are) when ``imp`` keeps square head factors with
    ``attn_scale == math.sqrt(D)``; otherwise the circuits are factored as ``K_h = V_h = I``,
    ``Q_h = √D · KQ_h`` and ``O_h = OV_h``, which reproduces ``KQ`` to one rounding.
    """
    if imp.query_attends_self:
        raise CheckpointError(
            "this model's query attends to itself; the authors' layout excludes that term, so exporting it "
            "would change its predictions"
        )
    H, D, N = imp.n_heads, imp.D, imp.n_out
    g = imp.head_factors
    exact = g is not None and g["Q"].shape[1] == D and g["attn_scale"] == math.sqrt(D)
    if exact:
        Q, K, V, O = g["Q"], g["K"], g["V"], g["O"]
    else:
        eye = np.broadcast_to(np.eye(D), (H, D, D))
        Q, K, V, O = imp.KQ * math.sqrt(D), eye, eye, imp.OV
    sd = {f"attention_layer.{p}.weight": np.ascontiguousarray(M).reshape(H * D, D) for p, M in zip(_PROJ, (Q, K, V))}
    sd["attention_layer.o_proj.weight"] = np.ascontiguousarray(np.asarray(O).transpose(1, 0, 2)).reshape(N, H * D)
    return sd, exact
