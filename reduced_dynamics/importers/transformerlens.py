r"""TransformerLens: a one-layer, attention-only ``HookedTransformer`` (object or state dict).

Convention assumed (verified against transformer_lens 3.9):

* **Input.** The prompt enters as the residual stream ``resid = [z_1, …, z_L, z_q]`` of shape
  ``(n, L+1, D)``, ``D = d_model = d + n_out``, the query last, through
  ``model(resid, start_at_layer=0, stop_at_layer=1)`` (or ``model.blocks[0](resid)``):
  ``start_at_layer`` skips ``embed`` and ``pos_embed``, ``stop_at_layer`` skips ``ln_final`` and
  ``unembed``, so ``W_E``, ``W_pos``, ``W_U`` and ``b_U`` are never used (nonzero ``W_pos`` is
  allowed for that reason; ``"shortformer"`` positions are not used either, as no
  ``shortformer_pos_embed`` is passed).
* **Weights.** ``blocks.0.attn.W_Q, W_K, W_V`` of shape ``[n_heads, d_model, d_head]`` (``q = z W_Q``,
  so the package's ``Q_h = W_Q[h]ᵀ``), ``W_O`` of shape ``[n_heads, d_head, d_model]``; logits
  ``q·k / attn_scale`` (``attn_scale = √d_head`` unless the config says otherwise); every bias
  ``b_Q, b_K, b_V, b_O`` must be zero.
* **Read-out.** The prediction is the residual stream's response slot(s), coordinates
  ``d … d+n_out−1``, at the query position. The query's own response slots are 0, so the residual
  adds nothing there and ``ŷ_k = Σ_h (Σ_l p_{h,l} z_l W_V[h]) · W_O[h][:, d+k]``; ``W_O``'s other
  columns write to the covariate slots, which nothing reads.
* **Self-attention.** TransformerLens has no mask for the query's own position: with causal
  (query last) or bidirectional attention the query attends to itself and to every context token.
  The import keeps that term (``query_attends_self=True``, the forward pass of
  :class:`~reduced_dynamics.importers.ImportedAttention` includes ``z_qᵀ KQ_h z_q`` and ``z_q``),
  and says so in ``warnings``: the paper's model and the reduced theory exclude it.

Refused, with one line naming it: more than one layer, an MLP, LayerNorm (``ln*`` keys or
``normalization_type`` not None), positional schemes that act inside attention (rotary, ALiBi,
relative bias), grouped-query attention, QK normalisation, attention sinks, score soft-capping,
nonzero biases, and ``d_head < d``. A bare state dict cannot show weightless options
(``normalization_type="LNPre"``, ALiBi, a custom ``attn_scale``): it is read as a default
configuration with ``attn_scale = √d_head`` (pass ``attn_scale=`` otherwise), and the
``conventions`` say so; a ``HookedTransformer`` object is checked through its ``cfg``.

References
----------
docs/theory.md#full-model
"""

from __future__ import annotations

import math
import re

import numpy as np

from reduced_dynamics.importers._canonical import CheckpointError, ImportedAttention, check_counts, scale_note, slots
from reduced_dynamics.importers._state import StateDict, flatten_checkpoint

__all__ = ["from_transformerlens", "to_transformerlens", "is_transformerlens", "is_hooked_transformer"]

_WQ = re.compile(r"^(.*?)blocks\.(\d+)\.attn\.W_Q$")
_LAYER = re.compile(r"^blocks\.(\d+)\.")

#: TransformerLens config fields that change the attention block, with their neutral value and what they are
_CFG_REFUSED = (
    ("n_key_value_heads", None, "grouped-query attention"),
    ("use_qk_norm", False, "QK normalisation"),
    ("clip_qkv", None, "clipping of q, k, v"),
    ("use_logn_attn", False, "log-n query scaling"),
    ("use_local_attn", False, "local (windowed) attention"),
    ("attn_types", None, "per-layer attention types"),
    ("use_attention_sinks", False, "attention sinks"),
    ("load_in_4bit", False, "4-bit weights"),
    ("use_normalization_before_and_after", False, "a second normalisation after attention"),
)


def is_hooked_transformer(obj) -> bool:
    """Whether ``obj`` is a TransformerLens model object (checked without importing transformer_lens)."""
    return type(obj).__module__.startswith("transformer_lens") and hasattr(obj, "cfg") and hasattr(obj, "blocks")


def is_transformerlens(keys) -> bool:
    """Whether a flat state dict's keys look like a HookedTransformer's (``blocks.<i>.attn.W_Q``)."""
    return any(_WQ.match(k) for k in keys)


def _check_cfg(model) -> list[str]:
    """Refuse a HookedTransformer whose config leaves the paper's model; return notes on what it allows."""
    if type(model).__name__ != "HookedTransformer":
        raise CheckpointError(f"a TransformerLens {type(model).__name__} is not a HookedTransformer")
    cfg = model.cfg
    if cfg.n_layers != 1:
        raise CheckpointError(f"n_layers = {cfg.n_layers}: more than one layer (the paper's model has one)")
    if not cfg.attn_only:
        raise CheckpointError("attn_only = False: the block has an MLP (the paper's model is attention only)")
    if cfg.normalization_type is not None:
        raise CheckpointError(
            f"normalization_type = {cfg.normalization_type!r}: LayerNorm (the paper's model has none)"
        )
    if cfg.positional_embedding_type not in ("standard", "shortformer"):
        raise CheckpointError(
            f"positional_embedding_type = {cfg.positional_embedding_type!r} acts inside attention "
            "(only 'standard' or 'shortformer', which the continuous input skips)"
        )
    for name, neutral, what in _CFG_REFUSED:
        value = getattr(cfg, name, neutral)
        if (value is not None) if neutral is None else bool(value):
            raise CheckpointError(f"{name} = {value!r}: {what} (not in the paper's model)")
    cap = getattr(cfg, "attn_scores_soft_cap", -1.0)
    if cap is not None and cap > 0:
        raise CheckpointError(f"attn_scores_soft_cap = {cap}: soft-capped scores (not in the paper's model)")
    if getattr(cfg, "original_architecture", None) in ("OlmoeForCausalLM", "Olmo2ForCausalLM", "Olmo3ForCausalLM"):
        raise CheckpointError(f"original_architecture = {cfg.original_architecture!r}: QK normalisation")
    return [
        f"HookedTransformer config checked: attention_dir = {cfg.attention_dir!r}, "
        f"positional_embedding_type = {cfg.positional_embedding_type!r} (not used by the continuous input)"
    ]


def from_transformerlens(
    source, *, n_out: int | None = None, n_heads: int | None = None, attn_scale: float | None = None
) -> ImportedAttention:
    r"""Import a one-layer attention-only ``HookedTransformer`` or its state dict (convention: module docstring).

    Parameters
    ----------
    source : HookedTransformer or mapping
        The model object (its ``cfg`` is checked and its block's ``attn_scale`` used) or its
        ``state_dict()`` (a training checkpoint nesting one is unwrapped). Only the
        ``blocks.0.attn`` weights are read.
    n_out : int, optional
        Number of response slots read out (default 1): ``d = d_model − n_out``.
    n_heads : int, optional
        If given, must equal the heads of ``W_Q``.
    attn_scale : float, optional
        The logit divisor, for a state dict from a model configured with a non-default
        ``attn_scale`` (default: the object's, else ``√d_head``).

    Returns
    -------
    ImportedAttention
        ``source_format="transformerlens"``, ``query_attends_self=True`` (see ``warnings``),
        ``head_factors`` kept (``Q_h = W_Q[h]ᵀ``, ``O_h = W_O[h][:, d:d+n_out]ᵀ``).

    Raises
    ------
    CheckpointError
        For anything outside the paper's model (module docstring), wrong shapes, NaN weights.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> sd = {f"blocks.0.attn.{w}": rng.standard_normal((2, 4, 4)) for w in ("W_Q", "W_K", "W_V", "W_O")}
    >>> imp = from_transformerlens(sd)
    >>> imp.n_heads, imp.d, imp.query_attends_self
    (2, 3, True)
    """
    n_out, n_heads = check_counts(n_out, n_heads)
    notes = []
    if is_hooked_transformer(source):
        notes += _check_cfg(source)
        if attn_scale is None:
            attn_scale = float(source.blocks[0].attn.attn_scale)
            notes.append(f"attn_scale = {attn_scale:.6g} read from the model's attention block")
        source = source.state_dict()
    elif hasattr(source, "state_dict") and callable(source.state_dict):
        source = source.state_dict()
    flat, nested = flatten_checkpoint(source, "`source`")
    hits = [m for m in map(_WQ.match, flat) if m]
    if not hits:
        raise CheckpointError("not a TransformerLens checkpoint: no key 'blocks.<i>.attn.W_Q'")
    prefix = hits[0].group(1)
    outside = [k for k in flat if not k.startswith(prefix)]
    if outside:
        raise CheckpointError(f"unexpected key {outside[0]!r} beside the HookedTransformer's {prefix + 'blocks'}")
    keys = {k[len(prefix) :]: v for k, v in flat.items()}
    layers = sorted({int(m.group(1)) for m in map(_LAYER.match, keys) if m})
    if layers != [0]:
        raise CheckpointError(f"n_layers = {max(layers) + 1}: more than one layer (keys of blocks {layers})")
    for test, what in (
        (lambda k: k.startswith("blocks.0.mlp."), "an MLP"),
        (lambda k: k.startswith("blocks.0.ln") or k.startswith("ln_final."), "LayerNorm"),
        (lambda k: "rotary_" in k, "rotary positional embeddings (they act inside attention)"),
        (lambda k: k.startswith("blocks.0.attn.q_norm") or k.startswith("blocks.0.attn.k_norm"), "QK normalisation"),
        (lambda k: k in ("blocks.0.attn._W_K", "blocks.0.attn._W_V"), "grouped-query attention"),
        (lambda k: k == "blocks.0.attn.sinks", "attention sinks"),
    ):
        bad = next((k for k in keys if test(k)), None)
        if bad is not None:
            raise CheckpointError(f"key {prefix + bad!r}: {what} (not in the paper's model)")
    sd = StateDict({prefix + k: v for k, v in keys.items()}, "TransformerLens")
    a = prefix + "blocks.0.attn."
    WQ = sd.array(a + "W_Q")
    if WQ.ndim != 3 or min(WQ.shape) < 1:
        raise CheckpointError(f"`{a}W_Q` must have shape [n_heads, d_model, d_head], got {WQ.shape}")
    H, D, r = WQ.shape
    shape = f" [n_heads, d_model, d_head] = [{H}, {D}, {r}]"
    WK = sd.array(a + "W_K", (H, D, r), what=shape)
    WV = sd.array(a + "W_V", (H, D, r), what=shape)
    WO = sd.array(a + "W_O", (H, r, D), what=f" [n_heads, d_head, d_model] = [{H}, {r}, {D}]")
    for b in ("b_Q", "b_K", "b_V"):
        sd.zero(a + b, (H, r))
    sd.zero(a + "b_O", (D,))
    sd.ignore(
        a + "mask", a + "IGNORE", *(prefix + k for k in ("embed.W_E", "pos_embed.W_pos", "unembed.W_U", "unembed.b_U"))
    )
    sd.check_all_used(
        "a one-layer attention-only HookedTransformer has only embed, pos_embed, blocks.0.attn and unembed"
    )
    N = 1 if n_out is None else int(n_out)
    d = D - N
    if N < 1 or d < 1:
        raise CheckpointError(f"`n_out` must be in [1, d_model - 1] = [1, {D - 1}], got {n_out}")
    if n_heads is not None and int(n_heads) != H:
        raise CheckpointError(f"`n_heads` = {n_heads} disagrees with `{a}W_Q` ({H} heads)")
    if r < d:
        raise CheckpointError(
            f"d_head = {r} < d = {d}: KQ_h has rank <= {r} and cannot become omega_h I_d (need d_head >= d)"
        )
    if attn_scale is None:
        attn_scale = math.sqrt(r)
        notes.append(f"attn_scale = sqrt(d_head) = {attn_scale:.6g} assumed (a state dict does not store it)")
        notes.append(
            "a state dict cannot show weightless options (normalization_type='LNPre', ALiBi): a default "
            "configuration is assumed"
        )
    Q, K, V = (np.ascontiguousarray(W.transpose(0, 2, 1)) for W in (WQ, WK, WV))
    O = np.ascontiguousarray(WO[:, :, d : d + N].transpose(0, 2, 1))  # (H, n_out, r)
    conventions = [
        f"TransformerLens HookedTransformer (one attention-only layer): H = {H}, d_model = D = {D}, d_head = {r}, "
        f"d = {d}, n_out = {N}",
        "input: resid = [z_1..z_L, z_q] (query last) through model(resid, start_at_layer=0, stop_at_layer=1), "
        "which skips embed, pos_embed, ln_final and unembed: W_E, W_pos, W_U, b_U are not used",
        f"prediction: the residual stream's {slots(d, N)} at the query position (0 in z_q itself); "
        f"W_O columns 0..{d - 1} write to covariate slots nobody reads",
        "Q_h = W_Q[h]^T, K_h = W_K[h]^T, V_h = W_V[h]^T (TransformerLens multiplies on the right)",
        scale_note(D, 1.0 / float(attn_scale))
        + f"; TransformerLens divides q.k by attn_scale = {float(attn_scale):.6g}",
        "the query attends to itself and to every context token: the self term is kept",
        *notes,
    ]
    if nested:
        conventions.append(nested)
    warnings = (
        "the query attends to itself (TransformerLens has no mask for the query's own position): the forward pass "
        "includes the self term z_q^T KQ_h z_q, which the paper's model and the reduced theory exclude",
    )
    return ImportedAttention.from_factors(
        Q,
        K,
        V,
        O,
        d=d,
        attn_scale=float(attn_scale),
        source_format="transformerlens",
        conventions=tuple(conventions),
        warnings=warnings,
        query_attends_self=True,
    )


def to_transformerlens(imp: ImportedAttention) -> tuple[dict, bool]:
    """The ``blocks.0.attn`` state dict of ``imp`` (numpy arrays, zero biases) and whether it is exact.

    Load it with ``model.load_state_dict(sd, strict=False)`` into a ``HookedTransformer`` with
    ``n_layers=1, attn_only=True, normalization_type=None, d_model=D, n_heads=H`` and ``d_head``
    the exported head dimension (``W_Q.shape[2]``), default ``attn_scale``. Exact when ``imp`` keeps
    head factors with ``attn_scale == math.sqrt(d_head)`` and ``d_head >= d`` (what the importer
    accepts); otherwise ``d_head = D`` and the
    circuits are factored as ``W_K = W_V = I``, ``W_Q[h] = (√D · KQ_h)ᵀ``, which reproduces ``KQ``
    to one rounding.
    """
    if not imp.query_attends_self:
        raise CheckpointError(
            "a TransformerLens block lets the query attend to itself and this model excludes that term: "
            "exporting it would change its predictions (use dataclasses.replace(model, query_attends_self=True) "
            "to export the self-attending variant on purpose)"
        )
    H, D, d, N = imp.n_heads, imp.D, imp.d, imp.n_out
    g = imp.head_factors
    exact = g is not None and g["attn_scale"] == math.sqrt(g["Q"].shape[1]) and g["Q"].shape[1] >= d
    if exact:
        Q, K, V, O = g["Q"], g["K"], g["V"], g["O"]
    else:
        eye = np.broadcast_to(np.eye(D), (H, D, D))
        Q, K, V, O = imp.KQ * math.sqrt(D), eye, eye, imp.OV
    r = Q.shape[1]
    WO = np.zeros((H, r, D))
    WO[:, :, d : d + N] = np.asarray(O).transpose(0, 2, 1)
    a = "blocks.0.attn."
    sd = {
        a + n: np.ascontiguousarray(np.asarray(M).transpose(0, 2, 1)) for n, M in (("W_Q", Q), ("W_K", K), ("W_V", V))
    }
    sd[a + "W_O"] = WO
    for b in ("b_Q", "b_K", "b_V"):
        sd[a + b] = np.zeros((H, r))
    sd[a + "b_O"] = np.zeros(D)
    return sd, exact
