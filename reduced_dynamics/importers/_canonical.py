r"""The one form every importer produces: :class:`ImportedAttention`.

A one-layer multi-head attention model for in-context regression, whatever framework trained it,
is read into its **circuits** (docs/theory.md#full-model): for head ``h``

* the score matrix ``KQ_h`` of shape ``(D, D)``, ``D = d + n_out``, with the logit scale folded in,
  so that the query ``z_q = (x_q, 0)`` scores context token ``z_l = (x_l, y_l)`` as
  ``s_{h,l} = z_lᵀ KQ_h z_q``;
* the output rows ``OV_h`` of shape ``(n_out, D)``: task ``k``'s prediction is
  ``ŷ_k = Σ_h OV_h[k] · Σ_l p_{h,l} z_l`` with ``p_{h,·} = softmax(s_{h,·})``.

When the checkpoint stores square per-head factors with the package's own logit scale ``1/√D``
(and one output), the factors ``Q, K, V`` ``(H, D, D)`` and ``o`` ``(H, D)`` are kept too, and
:meth:`ImportedAttention.attention_model` returns the package's ``"separate"``
:class:`~reduced_dynamics.model.attention.AttentionModel` with exactly those parameters: a package
model exported and imported again predicts bit for bit the same in float64.

``query_attends_self`` records a model whose query also scores itself (causal or bidirectional
self-attention, as a TransformerLens block computes it): its forward pass then includes the term
``s_{h,q} = z_qᵀ KQ_h z_q`` and the token ``z_q`` among the attended ones. The paper's model (and the
reduced theory) exclude it; the analysis reports the model's own risk with it and says so.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from reduced_dynamics._results import FrozenResult

__all__ = ["ImportedAttention", "CheckpointError", "FORMATS"]

#: The checkpoint formats the importers read (``reduced-dynamics analyze --format``).
FORMATS = ("authors", "transformerlens", "mha", "safetensors", "npz")


class CheckpointError(ValueError):
    """A checkpoint that is not a one-layer attention model of the paper's kind (one-line message)."""


def _readonly_f64(name: str, value, shape: tuple) -> np.ndarray:
    arr = np.array(value, dtype=np.float64)
    if arr.shape != shape:
        raise CheckpointError(f"`{name}` must have shape {shape}, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise CheckpointError(f"`{name}` has NaN or infinite weights")
    arr.setflags(write=False)
    return arr


@dataclasses.dataclass(frozen=True)
class ImportedAttention(FrozenResult):
    r"""A trained one-layer attention model in the package's parameterisation.

    Attributes
    ----------
    KQ : ndarray, shape (H, D, D)
        Score matrices, logit scale included: ``s_{h,l} = z_lᵀ KQ_h z_q``.
    OV : ndarray, shape (H, n_out, D)
        Output rows: ``ŷ_k = Σ_h OV_h[k] · Σ_l p_{h,l} z_l``.
    d : int
        Covariate dimension; ``D = d + n_out``.
    n_out : int
        Number of outputs (tasks); 1 for the paper's single-task model.
    source_format : str
        One of :data:`FORMATS` (or ``"package"`` for a model built here).
    conventions : tuple of str
        Every convention the importer assumed, one sentence each (token layout, logit scale, read-out).
    warnings : tuple of str
        Things that are allowed but limit the comparison with the theory (for example a head
        dimension below ``d``).
    query_attends_self : bool
        Whether the query token scores itself (see the module docstring).
    factors : dict or None
        ``{"Q", "K", "V": (H, D, D), "o": (H, D)}`` when the checkpoint stores square per-head
        factors with logit scale ``1/√D`` and ``n_out == 1``; else ``None``.
    """

    KQ: np.ndarray
    OV: np.ndarray
    d: int
    n_out: int = 1
    source_format: str = "package"
    conventions: tuple = ()
    warnings: tuple = ()
    query_attends_self: bool = False
    factors: dict | None = None

    def __post_init__(self):
        d, n_out = int(self.d), int(self.n_out)
        if d < 1 or n_out < 1:
            raise CheckpointError(f"`d` and `n_out` must be >= 1, got d = {d}, n_out = {n_out}")
        D = d + n_out
        KQ = np.asarray(self.KQ)
        if KQ.ndim != 3 or KQ.shape[1:] != (D, D) or KQ.shape[0] < 1:
            raise CheckpointError(f"`KQ` must have shape (H, {D}, {D}) for d = {d}, n_out = {n_out}, got {KQ.shape}")
        H = KQ.shape[0]
        object.__setattr__(self, "KQ", _readonly_f64("KQ", KQ, (H, D, D)))
        object.__setattr__(self, "OV", _readonly_f64("OV", self.OV, (H, n_out, D)))
        if self.factors is not None:
            if n_out != 1:
                raise CheckpointError("`factors` are kept for single-output models only")
            shapes = {"Q": (H, D, D), "K": (H, D, D), "V": (H, D, D), "o": (H, D)}
            if set(self.factors) != set(shapes):
                raise CheckpointError(f"`factors` must have the keys {sorted(shapes)}, got {sorted(self.factors)}")
            object.__setattr__(self, "factors", {k: _readonly_f64(k, self.factors[k], s) for k, s in shapes.items()})
        object.__setattr__(self, "d", d)
        object.__setattr__(self, "n_out", n_out)
        object.__setattr__(self, "conventions", tuple(self.conventions))
        object.__setattr__(self, "warnings", tuple(self.warnings))
        object.__setattr__(self, "query_attends_self", bool(self.query_attends_self))

    # ------------------------------------------------------------------ shape
    @property
    def n_heads(self) -> int:
        """Number of heads H."""
        return self.KQ.shape[0]

    @property
    def D(self) -> int:
        """Token dimension ``d + n_out``."""
        return self.d + self.n_out

    # ---------------------------------------------------------- package forms
    def attention_model(self):
        """The package's own model and parameters for this import: ``(AttentionModel, params)``.

        ``"separate"`` with the imported factors when they were kept, else ``"merged"`` with
        ``KQ`` and ``ov = OV[:, 0]``.

        Raises
        ------
        ValueError
            For ``n_out > 1`` (use :meth:`multitask_model`) or a self-attending query (the package's
            ``AttentionModel`` excludes the self term; use :meth:`predict`).
        """
        from reduced_dynamics.model.attention import AttentionModel

        if self.n_out != 1:
            raise ValueError(f"attention_model() needs n_out = 1, got n_out = {self.n_out}; use multitask_model()")
        if self.query_attends_self:
            raise ValueError("attention_model() excludes the query's self term, which this model has; use predict()")
        if self.factors is not None:
            return AttentionModel(self.n_heads, self.d, "separate"), {k: np.array(v) for k, v in self.factors.items()}
        return AttentionModel(self.n_heads, self.d, "merged"), {"KQ": np.array(self.KQ), "ov": np.array(self.OV[:, 0])}

    def multitask_model(self):
        """The package's N-output model (:class:`~reduced_dynamics.multitask.attention.MultitaskAttention`)."""
        from reduced_dynamics.multitask.attention import MultitaskAttention

        if self.query_attends_self:
            raise ValueError("multitask_model() excludes the query's self term, which this model has; use predict()")
        return MultitaskAttention(KQ=np.array(self.KQ[:, :, : self.d]), OV=np.array(self.OV))

    # --------------------------------------------------------------- forward
    def predict(self, tokens, x_q) -> np.ndarray:
        """Predictions on embedded prompts.

        Parameters
        ----------
        tokens : array, shape (n, L, D)
            Context tokens ``z_l = (x_l, y_l)``.
        x_q : array, shape (n, d)
            Query covariates (the query token is ``(x_q, 0)``).

        Returns
        -------
        ndarray, shape (n,) for ``n_out == 1``, else (n, n_out)
        """
        Z = np.asarray(tokens, dtype=np.float64)
        xq = np.asarray(x_q, dtype=np.float64)
        if Z.ndim != 3 or Z.shape[2] != self.D or xq.shape != (Z.shape[0], self.d):
            raise ValueError(
                f"`tokens` must have shape (n, L, {self.D}) and `x_q` shape (n, {self.d}), got {Z.shape} and {xq.shape}"
            )
        if not self.query_attends_self:
            if self.n_out == 1:
                model, params = self.attention_model()
                return model._forward(*model.circuits(params), Z, model._transposed(Z), xq)[0]
            from reduced_dynamics.multitask.attention import _forward

            return _forward(np.ascontiguousarray(self.KQ[:, :, : self.d]), np.array(self.OV), Z, xq)[0]
        n = Z.shape[0]
        zq = np.concatenate([xq, np.zeros((n, self.n_out))], axis=1)
        Zs = np.concatenate([Z, zq[:, None, :]], axis=1)  # (n, L + 1, D): the query attends to itself too
        U = np.einsum("hij,nj->nhi", self.KQ, zq)  # (n, H, D)
        S = np.matmul(U, np.swapaxes(Zs, 1, 2))  # (n, H, L + 1)
        S -= S.max(axis=-1, keepdims=True)
        P = np.exp(S)
        P /= P.sum(axis=-1, keepdims=True)
        C = np.matmul(P, Zs)  # (n, H, D)
        out = np.einsum("nhi,hki->nk", C, self.OV)
        return out[:, 0] if self.n_out == 1 else out

    def describe(self) -> dict:
        """JSON-friendly summary (shapes, format, conventions, warnings; not the weights)."""
        return {
            "format": self.source_format,
            "n_heads": self.n_heads,
            "d": self.d,
            "n_out": self.n_out,
            "query_attends_self": self.query_attends_self,
            "factors_kept": self.factors is not None,
            "conventions": list(self.conventions),
            "warnings": list(self.warnings),
        }

    @classmethod
    def from_package(cls, model, params) -> ImportedAttention:
        """Wrap a package :class:`~reduced_dynamics.model.attention.AttentionModel` (softmax, f = exp)."""
        if getattr(model, "attention", None) != "softmax" or model.activation.name != "exp":
            raise ValueError("`model` must be a softmax AttentionModel with f = exp")
        KQ, ov = model.circuits(params)
        factors = None
        if model.parameterisation == "separate":
            factors = {k: np.asarray(params[k]) for k in ("Q", "K", "V", "o")}
        return cls(
            KQ=KQ,
            OV=np.asarray(ov)[:, None, :],
            d=model.d,
            source_format="package",
            conventions=(
                f"package AttentionModel ({model.parameterisation}); logits scaled by 1/sqrt(D) = 1/sqrt({model.d + 1})",
            ),
            factors=factors,
        )


def scale_note(D: int, scale: float) -> str:
    """The one sentence on a logit scale (``scale`` multiplies ``q·k``)."""
    if math.isclose(scale, 1.0 / math.sqrt(D), rel_tol=1e-12):
        return f"logits q·k scaled by 1/sqrt(D) = 1/sqrt({D}) (the package's own scale)"
    return f"logits q·k scaled by {scale:.6g} (folded into KQ; the package's own scale is 1/sqrt({D}))"
