r"""The one form every importer produces: :class:`~reduced_dynamics.importers.ImportedAttention`.

A one-layer multi-head attention model for in-context regression, whatever framework trained it,
is read into its **circuits** (docs/theory.md#full-model): for head ``h``

* the score matrix ``KQ_h`` of shape ``(D, D)``, ``D = d + n_out``, with the logit scale folded in,
  so that the query ``z_q = (x_q, 0)`` scores context token ``z_l = (x_l, y_l)`` as
  ``s_{h,l} = z_lᵀ KQ_h z_q``;
* the output rows ``OV_h`` of shape ``(n_out, D)``: task ``k``'s prediction is
  ``ŷ_k = Σ_h OV_h[k] · Σ_l p_{h,l} z_l`` with ``p_{h,·} = softmax(s_{h,·})``.

When the checkpoint stores square per-head factors with the package's own logit scale ``1/√D``
(and one output), the factors ``Q, K, V`` ``(H, D, D)`` and ``o`` ``(H, D)`` are kept too, and
:meth:`~reduced_dynamics.importers.ImportedAttention.attention_model` returns the package's
``"separate"`` :class:`~reduced_dynamics.model.attention.AttentionModel` with exactly those
parameters: a package model exported and imported again predicts bit for bit the same in float64.

Whatever the checkpoint stores per head is kept as ``head_factors``: ``Q, K, V`` of shape
``(H, r, D)`` (``r`` the head dimension), ``O`` of shape ``(H, n_out, r)`` and the logit divisor
``attn_scale``, with ``KQ_h = K_hᵀ Q_h / attn_scale`` and ``OV_h = O_h V_h``
(:meth:`~reduced_dynamics.importers.ImportedAttention.from_factors` computes both, with the
package's own expressions). An exporter writes them back unchanged, so a checkpoint imported,
exported to its own format and imported again gives the same circuits bit for bit.

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

__all__ = ["ImportedAttention", "CheckpointError", "MissingExtraError", "FORMATS"]

#: The checkpoint formats the importers read (``reduced-dynamics analyze --format``).
FORMATS = ("authors", "transformerlens", "mha", "safetensors", "npz")


class CheckpointError(ValueError):
    """A checkpoint that is not a one-layer attention model of the paper's kind (one-line message)."""


class MissingExtraError(CheckpointError, ImportError):
    """Reading (or writing) this checkpoint needs an optional dependency that is not installed.

    The one-line message names the extra to install, e.g. ``pip install 'reduced-dynamics[torch]'``.
    """


#: the optional dependency -> the extra of ``pyproject.toml`` that installs it
EXTRAS = {"torch": "torch", "safetensors": "torch", "transformer_lens": "lens"}


def check_counts(n_out, n_heads) -> tuple[int | None, int | None]:
    """``n_out`` and ``n_heads`` of an importer: each None or a positive integer (a ``CheckpointError`` naming it)."""
    from reduced_dynamics._validation import check_positive_int

    out = []
    for name, value in (("n_out", n_out), ("n_heads", n_heads)):
        try:
            out.append(None if value is None else check_positive_int(name, value))
        except ValueError as exc:
            raise CheckpointError(f"{exc} (or None)") from None
    return out[0], out[1]


def require(module: str, what: str):
    """Import ``module`` (one of ``EXTRAS``) or raise a ``MissingExtraError`` naming its extra."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        extra = EXTRAS[module.split(".")[0]]
        raise MissingExtraError(
            f"{what} needs {module.split('.')[0]}, which is not installed: pip install 'reduced-dynamics[{extra}]'"
        ) from None


def _readonly_f64(name: str, value, shape: tuple) -> np.ndarray:
    arr = np.array(value, dtype=np.float64, order="C")
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
        One of :data:`~reduced_dynamics.importers.FORMATS` (or ``"package"`` for a model built here).
    conventions : tuple of str
        Every convention the importer assumed, one sentence each (token layout, logit scale, read-out).
    warnings : tuple of str
        Things that are allowed but limit the comparison with the theory (for example a head
        dimension below ``d``).
    query_attends_self : bool
        Whether the query token scores itself (see the module docstring).
    factors : dict or None
        ``{"Q", "K", "V": (H, D, D), "o": (H, D)}`` when the checkpoint stores square per-head
        factors with logit scale ``1/√D`` and ``n_out == 1``; else ``None``. Derived from
        ``head_factors`` when those qualify (and the other way round).
    head_factors : dict or None
        The per-head factors as the checkpoint stores them: ``"Q", "K", "V"`` arrays of shape
        ``(H, r, D)``, ``"O"`` of shape ``(H, n_out, r)`` and the float ``"attn_scale"`` (logits are
        ``(K_h z_l)·(Q_h z_q) / attn_scale``); ``None`` for a checkpoint of circuits.
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
    head_factors: dict | None = None

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
        if self.head_factors is not None:
            object.__setattr__(self, "head_factors", _check_head_factors(self.head_factors, H, D, n_out))
        if self.head_factors is None and self.factors is not None:
            f = self.factors
            object.__setattr__(
                self,
                "head_factors",
                _check_head_factors(
                    {"Q": f["Q"], "K": f["K"], "V": f["V"], "O": f["o"][:, None, :], "attn_scale": math.sqrt(D)},
                    H,
                    D,
                    n_out,
                ),
            )
        if self.factors is None and self.head_factors is not None:
            g = self.head_factors
            if n_out == 1 and g["Q"].shape[1] == D and g["attn_scale"] == math.sqrt(D):
                o = _readonly_f64("o", g["O"][:, 0, :], (H, D))
                object.__setattr__(self, "factors", {"Q": g["Q"], "K": g["K"], "V": g["V"], "o": o})
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

    @property
    def head_dim(self) -> int:
        """The head dimension ``r`` of the stored factors (``D`` for a checkpoint of circuits)."""
        return self.D if self.head_factors is None else int(self.head_factors["Q"].shape[1])

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
        from reduced_dynamics._validation import check_finite_array

        Z = check_finite_array("tokens", tokens)
        xq = check_finite_array("x_q", x_q)
        if Z.ndim != 3 or Z.shape[2] != self.D or xq.shape != (Z.shape[0], self.d):
            raise ValueError(
                f"`tokens` must have shape (n, L, {self.D}) and `x_q` shape (n, {self.d}), got {Z.shape} and {xq.shape}"
            )
        if not self.query_attends_self:
            if self.n_out == 1:
                model, params = self.attention_model()
                return model._forward(*model.circuits(params), model._transposed(Z), xq)[0]
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
            "head_dim": self.head_dim,
            "factors_kept": self.factors is not None,
            "head_factors_kept": self.head_factors is not None,
            "conventions": list(self.conventions),
            "warnings": list(self.warnings),
        }

    @classmethod
    def from_factors(cls, Q, K, V, O, *, d: int, attn_scale: float, **fields) -> ImportedAttention:
        r"""Build from per-head factors: ``KQ_h = K_hᵀ Q_h / attn_scale`` and ``OV_h = O_h V_h``.

        The circuits are computed with the expressions of
        :meth:`AttentionModel.circuits <reduced_dynamics.model.attention.AttentionModel.circuits>`
        (``np.matmul(K.transpose(0, 2, 1), Q) / attn_scale`` and, for one output,
        ``np.einsum("hij,hi->hj", V, o)``), so square factors with ``attn_scale = math.sqrt(D)`` give
        the package's own circuits bit for bit.

        Parameters
        ----------
        Q, K, V : array, shape (H, r, D)
            Query, key and value maps of each head (``q_h = Q_h z``), ``r`` the head dimension.
        O : array, shape (H, n_out, r)
            Output rows of each head: ``ŷ_k = Σ_h O_h[k] · V_h Σ_l p_{h,l} z_l``.
        d : int
            Covariate dimension; ``D = d + n_out``.
        attn_scale : float, > 0
            The logit divisor: ``s_{h,l} = (K_h z_l)·(Q_h z_q) / attn_scale``.
        **fields
            The other fields of :class:`~reduced_dynamics.importers.ImportedAttention` (``source_format``, ``conventions``,
            ``warnings``, ``query_attends_self``).

        Returns
        -------
        ImportedAttention
            With ``head_factors`` kept (and ``factors`` when they are square, ``n_out == 1`` and
            ``attn_scale == math.sqrt(D)``).

        Examples
        --------
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> Q, K, V = rng.standard_normal((3, 2, 4, 4))
        >>> imp = ImportedAttention.from_factors(Q, K, V, rng.standard_normal((2, 1, 4)), d=3, attn_scale=2.0)
        >>> imp.KQ.shape, imp.OV.shape, imp.factors is not None
        ((2, 4, 4), (2, 1, 4), True)
        """
        if np.ndim(O) != 3 or np.shape(O)[1] < 1 or np.ndim(Q) != 3 or np.shape(Q)[0] < 1:
            raise CheckpointError(
                f"`Q` and `O` must have shapes (H, r, D) and (H, n_out, r), got {np.shape(Q)}, {np.shape(O)}"
            )
        H, n_out = np.shape(Q)[0], np.shape(O)[1]
        g = _check_head_factors({"Q": Q, "K": K, "V": V, "O": O, "attn_scale": attn_scale}, H, int(d) + n_out, n_out)
        KQ = np.matmul(g["K"].transpose(0, 2, 1), g["Q"]) / g["attn_scale"]
        if n_out == 1:
            OV = np.einsum("hij,hi->hj", g["V"], g["O"][:, 0, :])[:, None, :]
        else:
            OV = np.einsum("hij,hki->hkj", g["V"], g["O"])
        return cls(KQ=KQ, OV=OV, d=int(d), n_out=n_out, head_factors=g, **fields)

    @classmethod
    def from_package(cls, model, params=None) -> ImportedAttention:
        """Wrap a package model: a softmax :class:`~reduced_dynamics.model.attention.AttentionModel`
        (f = exp) with its ``params``, or a
        :class:`~reduced_dynamics.multitask.attention.MultitaskAttention` (no ``params``)."""
        from reduced_dynamics.multitask.attention import MultitaskAttention

        if isinstance(model, MultitaskAttention):
            if params is not None:
                raise ValueError("`params` must be None for a MultitaskAttention (its weights are its fields)")
            KQc, OV = np.asarray(model.KQ, dtype=np.float64), np.asarray(model.OV, dtype=np.float64)
            H, D, d = KQc.shape
            KQ = np.zeros((H, D, D))
            KQ[:, :, :d] = KQc
            return cls(
                KQ=KQ,
                OV=OV,
                d=d,
                n_out=D - d,
                source_format="package",
                conventions=(
                    f"package MultitaskAttention (circuits, N = {D - d} tasks); KQ's columns for the response "
                    "slots multiply the zeros of z_q and are set to 0",
                ),
            )
        if getattr(model, "attention", None) != "softmax" or model.activation.name != "exp":
            raise ValueError("`model` must be a softmax AttentionModel with f = exp, or a MultitaskAttention")
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


def _check_head_factors(g, H: int, D: int, n_out: int) -> dict:
    """Validated, read-only, C-ordered float64 head factors (``attn_scale`` a positive float)."""
    if not isinstance(g, dict) or set(g) != {"Q", "K", "V", "O", "attn_scale"}:
        got = sorted(g) if isinstance(g, dict) else type(g).__name__
        raise CheckpointError(f"`head_factors` must have the keys ['K', 'O', 'Q', 'V', 'attn_scale'], got {got}")
    Qs = np.shape(g["Q"])
    if len(Qs) != 3 or Qs[0] != H or Qs[2] != D or Qs[1] < 1:
        raise CheckpointError(f"`Q` must have shape ({H}, r, {D}) with r >= 1, got {Qs}")
    r = Qs[1]
    out = {k: _readonly_f64(k, g[k], (H, r, D)) for k in ("Q", "K", "V")}
    out["O"] = _readonly_f64("O", g["O"], (H, n_out, r))
    scale = g["attn_scale"]
    try:
        scale = float(scale)
    except (TypeError, ValueError):
        raise CheckpointError(f"`attn_scale` must be a positive number, got {scale!r}") from None
    if not (math.isfinite(scale) and scale > 0):
        raise CheckpointError(f"`attn_scale` must be a positive number, got {scale!r}")
    out["attn_scale"] = scale
    return out


def slots(d: int, n_out: int) -> str:
    """The response slots ``d … d+n_out−1`` of a token, in words."""
    return f"slot {d}" if n_out == 1 else f"slots {d}..{d + n_out - 1}"


def scale_note(D: int, scale: float) -> str:
    """The one sentence on a logit scale (``scale`` multiplies ``q·k``)."""
    if math.isclose(scale, 1.0 / math.sqrt(D), rel_tol=1e-12):
        return f"logits q·k scaled by 1/sqrt(D) = 1/sqrt({D}) (the package's own scale)"
    return f"logits q·k scaled by {scale:.6g} (folded into KQ; the package's own scale is 1/sqrt({D}))"
