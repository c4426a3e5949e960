r"""Torch-free one-layer multi-head attention models with hand-written backprop.

Four models share one interface (docs/theory.md#full-model, #reduced-model, #predictors):

``"separate"``
    The full model of docs/theory.md#full-model. Head ``h`` has ``Q_h, K_h, V_h`` of shape
    ``(D, D)`` with ``D = d + 1`` and an output vector ``o_h`` of shape ``(D,)``:

    .. math::

        \hat y = \sum_h o_h^\top V_h \sum_{l=1}^{L} z_l\,
                 \mathrm{softmax}_l\big((K_h z_l)^\top (Q_h z_q)/\sqrt{D}\big),

    with ``z_l = (x_l, y_l)``, ``z_q = (x_q, 0)``; the query does not attend to
    itself and the prediction is read out at the query position.
``"merged"``
    The same function with the circuits as parameters:
    ``KQ_h = K_h^T Q_h / sqrt(D)`` and ``ov_h = V_h^T o_h`` (the effective last
    row of ``O_h V_h``), ``ŷ = Σ_h ov_hᵀ Σ_l z_l softmax_l(z_lᵀ KQ_h z_q)``.
``"linear"``
    Linear attention: the separate parameterisation with the softmax weights
    replaced by ``(1/L) · logit`` (normalisation hard-coded, docs/theory.md#predictors).
``"reduced"``
    The reduced (ω, μ) model of docs/theory.md#reduced-model,
    ``ŷ = Σ_h μ_h Σ_l y_l softmax_l(ω_h x_lᵀ x_q)``.

**Activation.** The softmax models (``separate``, ``merged``, ``reduced``) take an attention
activation ``f`` (``reduced_dynamics.activations``; ``exp`` by default): the weights become
``f(s_l) / Σ_j f(s_j)`` instead of ``softmax_l(s_l)`` (docs/theory.md#other-activations). The
trainer passes the one of its setting (``Setting.activation``). For ``f = 1 + Cx`` (``affine``)
single weights may be negative (documented, allowed) and the normaliser ``Σ_j f(s_j)`` can vanish or
turn negative: every forward pass checks it and raises :class:`NormaliserError` (a ``ValueError``
naming the normaliser) instead of dividing by ~0, so no NaN or inf is ever returned silently (the
trainer turns it into status 2 with that message).

Every model is a frozen dataclass with ``init(seed=...)``, ``predict(params,
batch)``, ``loss(params, batch)`` and ``loss_and_grad(params, batch)``;
``params`` is a ``dict`` of float64 arrays (see ``param_shapes()``) and
``batch`` is a :class:`~reduced_dynamics.Prompts` with covariates and responses
(the models read ``batch.tokens``, the embedded ``(n, L, d+1)`` array,
``batch.x_q`` and ``batch.y_q``). The loss is the mean squared error
``mean_n (ŷ_n − y_{q,n})²`` (an unbiased estimate of the risk, including σ²).

Numerics: everything is vectorised over the batch **and** the heads (stacked
head tensors, batched ``matmul``); the softmax subtracts the row maximum. The
gradients are checked against central finite differences in
``tests/reduced_dynamics/model/test_attention.py``.

References
----------
docs/theory.md#full-model (full model, init), #reduced-model (reduced model), #predictors (linear attention).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from reduced_dynamics._validation import check_nonnegative_float, check_positive_int
from reduced_dynamics.activations import Activation, as_activation, check_normaliser
from reduced_dynamics.estimation.prompts import Prompts, as_generator
from reduced_dynamics.estimation.prompts import sample_tokens as sample_tokens  # internal training sampler, re-exported
from reduced_dynamics.setting import D_MAX

__all__ = [
    "MODEL_KINDS",
    "NormaliserError",
    "AttentionModel",
    "ReducedModel",
    "make_model",
    "flatten_params",
    "unflatten_params",
]

#: Model names accepted by :func:`make_model` (and ``reduced-dynamics train --param``).
MODEL_KINDS = ("separate", "merged", "linear", "reduced")


def as_tokens(batch) -> Prompts:
    """Return ``batch`` if it is a :class:`Prompts` batch the attention models can read, else raise.

    The models read ``batch.tokens`` (shape ``(n, L, d+1)``), ``batch.x_q`` and,
    for the losses, ``batch.y_q``; a statistics-only batch has no covariates
    and is refused.
    """
    if not isinstance(batch, Prompts):
        raise ValueError(f"`batch` must be a reduced_dynamics.Prompts batch, got {type(batch).__name__}")
    if not batch.has_covariates or not batch.has_responses:
        raise ValueError("`batch` must have covariates and responses (not statistics-only or covariates-only)")
    return batch


def _is_count(n) -> bool:
    return isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 0


def flatten_params(params: dict) -> np.ndarray:
    """Concatenate a params dict (in key order) into one float64 vector."""
    if not isinstance(params, dict) or not params:
        raise ValueError(f"`params` must be a non-empty dict of arrays, got {type(params).__name__}")
    for k, v in params.items():
        try:
            a = np.asarray([] if isinstance(v, (str, bytes)) else v)
        except ValueError:  # a ragged sequence
            a = np.asarray([])
        if a.dtype.kind not in "biuf" or a.size == 0:
            raise ValueError(f"`params[{k!r}]` must be a non-empty array of real numbers")
    return np.concatenate([np.ravel(params[k]) for k in params]).astype(np.float64, copy=False)


def unflatten_params(flat: np.ndarray, shapes: dict) -> dict:
    """Views into ``flat`` shaped as ``shapes`` (a ``{name: shape}`` dict, in order)."""
    if not isinstance(flat, np.ndarray) or flat.ndim != 1 or flat.dtype.kind not in "fiu":
        raise ValueError(f"`flat` must be a 1-d numpy array of real numbers, got {flat!r}")
    if not isinstance(shapes, dict) or not all(
        isinstance(k, str) and isinstance(s, tuple) and all(_is_count(n) for n in s) for k, s in shapes.items()
    ):
        raise ValueError(f"`shapes` must be a dict {{name: shape tuple of ints >= 0}}, got {shapes!r}")
    total = sum(math.prod(shp) for shp in shapes.values())
    if total != flat.size:
        raise ValueError(f"`flat` must have {total} entries (the sizes of `shapes`), got {flat.size}")
    out, i = {}, 0
    for k, shp in shapes.items():
        size = math.prod(shp)
        out[k] = flat[i : i + size].reshape(shp)
        i += size
    return out


def _check_params(params, shapes, *, finite=True, name: str = "params") -> None:
    if not isinstance(params, dict) or list(params) != list(shapes):
        got = list(params) if isinstance(params, dict) else type(params).__name__
        raise ValueError(f"`{name}` must be a dict with keys {list(shapes)}, got {got}")
    for k, shp in shapes.items():
        v = params[k]
        try:
            shape = np.shape(v)
        except ValueError:  # a ragged sequence
            shape = None
        if isinstance(v, (str, bytes)) or shape != shp:
            raise ValueError(f"`{name}[{k!r}]` must have shape {shp}, got {shape}")
        a = np.asarray(v)
        if a.dtype.kind not in "biuf" or (finite and not np.all(np.isfinite(a))):
            raise ValueError(f"`{name}[{k!r}]` must hold finite real numbers")


_NO_PARAMS = object()


def check_model(model, params=_NO_PARAMS):
    """Return ``model`` if it is a model of this module (and ``params``, if given, fit it), else raise ``ValueError``."""
    if not isinstance(model, (AttentionModel, ReducedModel)):
        raise ValueError(
            f"`model` must be a model of reduced_dynamics.model.attention (make_model), got {type(model).__name__}"
        )
    if params is not _NO_PARAMS:
        _check_params(params, model.param_shapes())
    return model


#: |score| below which the softmax skips subtracting the row maximum (exp stays far from overflow/underflow)
_EXP_SAFE = 300.0


def _softmax_(S: np.ndarray) -> np.ndarray:
    """In-place stable softmax over the last axis."""
    S -= S.max(axis=-1, keepdims=True)
    np.exp(S, out=S)
    S /= S.sum(axis=-1, keepdims=True)
    return S


class NormaliserError(ValueError):
    """An attention normaliser ``Σ_j f(s_j)`` was not safely positive (``affine`` f) or not finite."""


def _as_activation(activation) -> Activation:
    """An :class:`Activation` from an Activation, a registry name, or ``None`` (``exp``)."""
    if activation is None:
        return Activation("exp")
    try:
        return as_activation(activation)
    except TypeError:  # this module's contract: a ValueError for every bad activation
        raise ValueError(
            f"`activation` must be an Activation or one of 'exp', 'affine', 'square', 'tanh', got {activation!r}"
        ) from None


def _weights(S: np.ndarray, act: Activation, where: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unnormalised weights ``E = f(S)``, their derivative ``f'(S)`` and the normalisers ``s = Σ_l E`` (non-exp f).

    Raises :class:`NormaliserError` when a normaliser is not finite or ``<= 1e-12`` (``f(0) = 1``).
    """
    with np.errstate(over="ignore", invalid="ignore"):
        E = act._f(S)
        dE = act._df(S)
        s = E.sum(axis=-1)
    try:
        check_normaliser(s, where)
    except ValueError as exc:
        raise NormaliserError(str(exc)) from None
    return E, dE, s


def _check_param_bytes(n_heads: int, d: int, blocks: int) -> None:
    """Refuse a model whose parameters (``blocks`` (H, D, D) arrays, D = d + 1) exceed the memory budget."""
    from reduced_dynamics.estimation.prompts import MEMORY_BUDGET

    need = 8 * n_heads * (blocks * (d + 1) ** 2 + (d + 1))
    if need > MEMORY_BUDGET:
        raise ValueError(
            f"a model of `n_heads` = {n_heads} heads at `d` = {d} has {need / 2**30:.3g} GiB of parameters, more "
            f"than the memory budget of {MEMORY_BUDGET / 2**30:g} GiB (reduced_dynamics.estimation.prompts."
            "MEMORY_BUDGET); use a smaller `n_heads` or `d`"
        )


@dataclass(frozen=True)
class AttentionModel:
    r"""One-layer multi-head attention on embedded prompts (docs/theory.md#full-model).

    Parameters
    ----------
    n_heads : int, >= 1
    d : int, >= 1
        Covariate dimension; the embedding dimension is ``D = d + 1``.
    parameterisation : {"separate", "merged"}
        ``separate``: params ``Q, K, V`` of shape ``(H, D, D)`` and ``o`` of shape
        ``(H, D)``. ``merged``: params ``KQ`` of shape ``(H, D, D)`` and ``ov`` of
        shape ``(H, D)``.
    attention : {"softmax", "linear"}
        ``linear`` replaces ``softmax_l(s_l)`` by ``s_l / L``.
    norm_L : int, optional
        Linear attention only: hard-code the normalisation to ``1/norm_L`` (the
        training length, as in the paper) instead of ``1/L`` of each prompt. This
        is what makes linear attention fail to generalise in length (docs/theory.md#predictors).
    activation : Activation or str, default "exp"
        Softmax attention only: the activation ``f`` of the weights ``f(s_l) / Σ_j f(s_j)``
        (``reduced_dynamics.activations``; a name means ``C = 1``). Stored as an
        ``reduced_dynamics.activations.Activation``.

    Notes
    -----
    With the score matrix ``A_h = K_hᵀQ_h/√D`` (= ``KQ_h``) and ``v_h = V_hᵀo_h``
    (= ``ov_h``), the forward pass is, for a batch of n prompts,

    .. code-block:: text

        u[n,h]   = A_h z_q[n]                      (n, H, D)
        s[n,h,l] = z_l[n] · u[n,h]                 (n, H, L)
        p        = softmax_l(s)  or  s / L
        r[n,h]   = Σ_l p[n,h,l] z_l[n]             (n, H, D)
        ŷ[n]     = Σ_h v_h · r[n,h]

    and the backward pass applies the chain rule to the same quantities
    (``ds = p ⊙ (dp − Σ_l p dp)`` for the softmax), then ``dK = Q dAᵀ/√D``,
    ``dQ = K dA/√D``, ``dV_h = o_h dv_hᵀ``, ``do_h = V_h dv_h``.

    Examples
    --------
    >>> from reduced_dynamics import sample_prompts
    >>> from reduced_dynamics.setting import Setting
    >>> m = AttentionModel(2, 5)
    >>> p = m.init(seed=0)
    >>> b = sample_prompts(8, Setting(d=5, L=40, sigma2=0.1), seed=1)
    >>> m.predict(p, b).shape
    (8,)
    """

    n_heads: int
    d: int
    parameterisation: str = "separate"
    attention: str = "softmax"
    norm_L: int | None = None
    activation: Activation | str = "exp"

    def __post_init__(self):
        if not isinstance(self.attention, str) or self.attention not in ("softmax", "linear"):
            raise ValueError(f"`attention` must be one of 'softmax', 'linear', got {self.attention!r}")
        object.__setattr__(self, "activation", _as_activation(self.activation))
        if self.attention == "linear" and self.activation.name != "exp":
            raise ValueError("`activation` must be 'exp' (unused) for linear attention, got " + repr(self.activation))
        if self.norm_L is not None:
            object.__setattr__(self, "norm_L", check_positive_int("norm_L", self.norm_L))
        object.__setattr__(self, "n_heads", check_positive_int("n_heads", self.n_heads))
        object.__setattr__(self, "d", check_positive_int("d", self.d, hi=D_MAX))
        _check_param_bytes(self.n_heads, self.d, 3)
        if not isinstance(self.parameterisation, str) or self.parameterisation not in ("separate", "merged"):
            raise ValueError(f"`parameterisation` must be one of 'separate', 'merged', got {self.parameterisation!r}")
        if not isinstance(self.attention, str) or self.attention not in ("softmax", "linear"):
            raise ValueError(f"`attention` must be one of 'softmax', 'linear', got {self.attention!r}")

    @property
    def kind(self) -> str:
        """The :data:`MODEL_KINDS` name of this model."""
        return "linear" if self.attention == "linear" else self.parameterisation

    def param_shapes(self) -> dict:
        H, D = self.n_heads, self.d + 1
        if self.parameterisation == "separate":
            return {"Q": (H, D, D), "K": (H, D, D), "V": (H, D, D), "o": (H, D)}
        return {"KQ": (H, D, D), "ov": (H, D)}

    def init(self, *, seed) -> dict:
        """PyTorch-default init: every weight ``U(−1/√fan_in, 1/√fan_in)``, ``fan_in = D``.

        ``Q_h, K_h, V_h`` map ``R^D → R^D`` (fan_in ``D``); each head's output
        row ``o_h`` is treated as its own ``R^D → R`` map (fan_in ``D``). A single
        ``nn.Linear(H·D, D)`` output projection over the concatenated heads would
        instead have fan_in ``H·D`` (bound smaller by ``√H``); the two agree for
        ``H = 1``.

        The merged parameterisation draws the same separate weights and merges
        them, so ``separate`` and ``merged`` models with the same seed compute
        the same function at initialisation.
        """
        rng = as_generator(seed)
        H, D = self.n_heads, self.d + 1
        b = 1.0 / math.sqrt(D)
        Q = rng.uniform(-b, b, (H, D, D))
        K = rng.uniform(-b, b, (H, D, D))
        V = rng.uniform(-b, b, (H, D, D))
        o = rng.uniform(-b, b, (H, D))
        if self.parameterisation == "separate":
            return {"Q": Q, "K": K, "V": V, "o": o}
        KQ = np.matmul(K.transpose(0, 2, 1), Q) / math.sqrt(D)
        ov = np.einsum("hij,hi->hj", V, o)
        return {"KQ": KQ, "ov": ov}

    def circuits(self, params) -> tuple[np.ndarray, np.ndarray]:
        """Return ``(KQ, ov)``: ``KQ_h = K_hᵀQ_h/√D`` (H, D, D) and ``ov_h = V_hᵀo_h`` (H, D)."""
        _check_params(params, self.param_shapes())
        return self._circuits(params)

    def _circuits(self, params):
        """:meth:`circuits` of validated parameters (the forward pass's; no checks)."""
        if self.parameterisation == "merged":
            return np.asarray(params["KQ"]), np.asarray(params["ov"])
        D = self.d + 1
        KQ = np.matmul(params["K"].transpose(0, 2, 1), params["Q"]) / math.sqrt(D)
        ov = np.einsum("hij,hi->hj", params["V"], params["o"])
        return KQ, ov

    # ------------------------------------------------------------------ core
    def _check_batch(self, Z, xq):
        n, L, D = Z.shape
        if D != self.d + 1 or xq.shape != (n, self.d):
            raise ValueError(f"`batch` must have d = {self.d}, got Z shape {Z.shape}, xq shape {xq.shape}")

    def _forward(self, A, v, Zt, xq):
        """Forward pass on the feature-major tokens ``Zt`` (``(n, D, L)``, C-contiguous).

        Returns ``yhat`` and the cache ``(E, s, Rt)``: the unnormalised softmax weights
        ``E`` (``P = E / s``; linear attention: ``E = P``, ``s = None``), their row sums ``s``
        ``(n, H)`` and ``Rt = Σ_l z_l P_l`` ``(n, D, H)`` (``R = Σ_l P z_l`` transposed). For an
        activation other than ``exp``, ``E`` is replaced by the pair ``(f(S), f'(S))`` (the backward
        pass needs ``f'``).
        """
        n, D, L = Zt.shape
        d, H = self.d, self.n_heads
        # u[n,h,i] = Σ_j A[h,i,j] xq[n,j]  (z_q's last entry is 0)
        W = A[:, :, :d].transpose(2, 0, 1).reshape(d, H * D)
        U = (xq @ W).reshape(n, H, D)
        E = np.matmul(U, Zt)  # (n, H, L) scores; C-contiguous operands keep the batched products fast
        if self.attention == "softmax" and self.activation.name != "exp":
            F, dF, s = _weights(E, self.activation, "AttentionModel")
            Rt = np.matmul(Zt, F.transpose(0, 2, 1))  # (n, D, H); each Fᵀ is a column-major operand
            Rt /= s[:, None, :]
            E = (F, dF)
        elif self.attention == "softmax":
            # exp without the row maximum when every score is moderate (same softmax, one pass less);
            # otherwise the usual stable form. NaN scores fail the test and propagate.
            if not (E.max() < _EXP_SAFE and E.min() > -_EXP_SAFE):
                E -= E.max(axis=-1, keepdims=True)
            np.exp(E, out=E)
            s = (E.reshape(n * H, L) @ np.ones(L)).reshape(n, H)  # row sums as one product (E.sum is ~4x slower)
            Rt = np.matmul(Zt, E.transpose(0, 2, 1))  # (n, D, H)
            Rt /= s[:, None, :]
        else:
            E *= 1.0 / (self.norm_L or L)
            s = None
            Rt = np.matmul(Zt, E.transpose(0, 2, 1))
        yhat = Rt.reshape(n, D * H) @ v.T.reshape(D * H)
        return yhat, (E, s, Rt)

    def _backward(self, v, Zt, xq, g, cache):
        """Gradients ``(dA, dv)`` of ``Σ_n g_n ŷ_n`` from the cache of :meth:`_forward`.

        Softmax: ``dS = P ⊙ (dP − Σ_l P dP)`` with ``dP[n,h,l] = g_n z_l·v_h`` and
        ``Σ_l P dP = g_n v_h·R[n,h]``, so ``dS = g_n (E/s) ⊙ (z_l·v_h − v_h·R)``.
        """
        E, s, Rt = cache
        n, D, L = Zt.shape
        d, H = self.d, self.n_heads
        dv = np.ascontiguousarray((g @ Rt.reshape(n, D * H)).reshape(D, H).T)
        T = np.matmul(v, Zt)  # (n, H, L): z_l · v_h
        if self.attention == "softmax":
            # general f: dS = g_n (f'(S)/s) ⊙ (z_l·v_h − v_h·R); for exp f' = f = E
            T -= np.einsum("nih,hi->nh", Rt, v)[..., None]
            T *= E[1] if isinstance(E, tuple) else E
            scale = (g[:, None] / s)[:, None, :]  # (n, 1, H)
        else:
            scale = (g * (1.0 / (self.norm_L or L)))[:, None, None]
        dUt = np.matmul(Zt, T.transpose(0, 2, 1))  # (n, D, H); the per-prompt factor is applied to it, not to T
        dUt *= scale
        dA = np.zeros((H, D, D))
        dA[:, :, :d] = (dUt.reshape(n, D * H).T @ xq).reshape(D, H, d).transpose(1, 0, 2)
        return dA, dv

    def _loss_and_grad_arrays(self, params, Zt, xq, yq) -> tuple[float, dict]:
        """``loss_and_grad`` on validated arrays, ``Zt`` feature-major (the trainer's entry point; no checks)."""
        KQ, ov = self._circuits(params)
        yhat, cache = self._forward(KQ, ov, Zt, xq)
        r = yhat - yq
        n = r.size
        loss = float(r @ r / n)
        g = r * (2.0 / n)
        dA, dv = self._backward(ov, Zt, xq, g, cache)
        if self.parameterisation == "merged":
            return loss, {"KQ": dA, "ov": dv}
        c = 1.0 / math.sqrt(self.d + 1)
        Q, K, V, o = params["Q"], params["K"], params["V"], params["o"]
        dK = np.matmul(Q, dA.transpose(0, 2, 1))
        dK *= c
        dQ = np.matmul(K, dA)
        dQ *= c
        dV = o[:, :, None] * dv[:, None, :]
        do = np.matmul(V, dv[:, :, None])[..., 0]
        return loss, {"Q": dQ, "K": dK, "V": dV, "o": do}

    def _train_loss_and_grad(self, params, batch) -> tuple[float, dict]:
        """``loss_and_grad`` on a trainer batch (``reduced_dynamics.model._batches.TrainBatch``)."""
        return self._loss_and_grad_arrays(params, batch.tokens_t, batch.x_q, batch.y_q)

    @staticmethod
    def _transposed(Z):
        return np.ascontiguousarray(Z.transpose(0, 2, 1))

    # ------------------------------------------------------------- interface
    def predict(self, params, batch) -> np.ndarray:
        """Predictions ``ŷ`` on a :class:`~reduced_dynamics.Prompts` batch, shape ``(n,)``."""
        _check_params(params, self.param_shapes())
        KQ, ov = self._circuits(params)
        tok = as_tokens(batch)
        Z, xq = tok.tokens, tok.x_q
        self._check_batch(Z, xq)
        return self._forward(KQ, ov, self._transposed(Z), xq)[0]

    def loss(self, params, batch) -> float:
        """Mean squared error ``mean (ŷ − y_q)²`` on a :class:`~reduced_dynamics.Prompts` batch."""
        tok = as_tokens(batch)
        r = self.predict(params, tok) - tok.y_q
        return float(r @ r / r.size)

    def loss_and_grad(self, params, batch) -> tuple[float, dict]:
        """Return ``(loss, grads)`` with ``grads`` keyed and shaped like ``params`` (``batch``: a Prompts)."""
        _check_params(params, self.param_shapes())
        tok = as_tokens(batch)
        Z, xq = tok.tokens, tok.x_q
        self._check_batch(Z, xq)
        return self._loss_and_grad_arrays(params, self._transposed(Z), xq, tok.y_q)


@dataclass(frozen=True)
class ReducedModel:
    r"""The reduced (ω, μ) model (docs/theory.md#reduced-model).

    .. math:: \hat y = \sum_h \mu_h \sum_l y_l\, \mathrm{softmax}_l(\omega_h\, x_l^\top x_q)

    Parameters
    ----------
    n_heads, d : int, >= 1
    init_scale : float, >= 0
        ``init`` draws ``ω, μ ~ U(−init_scale, init_scale)`` (small random init).
    activation : Activation or str, default "exp"
        The weights are ``f(ω_h s_l) / Σ_j f(ω_h s_j)`` (docs/theory.md#other-activations).

    Examples
    --------
    >>> from reduced_dynamics import sample_prompts
    >>> from reduced_dynamics.setting import Setting
    >>> m = ReducedModel(2, 5)
    >>> p = {"omega": np.array([0.1, -0.1]), "mu": np.array([1.0, -1.0])}
    >>> m.predict(p, sample_prompts(4, Setting(d=5, L=40, sigma2=0.1), seed=0)).shape
    (4,)
    """

    n_heads: int
    d: int
    init_scale: float = 0.1
    activation: Activation | str = "exp"

    def __post_init__(self):
        object.__setattr__(self, "activation", _as_activation(self.activation))
        object.__setattr__(self, "n_heads", check_positive_int("n_heads", self.n_heads))
        object.__setattr__(self, "d", check_positive_int("d", self.d, hi=D_MAX))
        _check_param_bytes(self.n_heads, self.d, 1)  # its merged circuits are (H, D, D)
        object.__setattr__(self, "init_scale", check_nonnegative_float("init_scale", self.init_scale))

    kind = "reduced"

    def param_shapes(self) -> dict:
        return {"omega": (self.n_heads,), "mu": (self.n_heads,)}

    def init(self, *, seed) -> dict:
        """Small random init ``ω_h, μ_h ~ U(−init_scale, init_scale)`` (ω drawn first)."""
        rng = as_generator(seed)
        s = self.init_scale
        return {"omega": rng.uniform(-s, s, self.n_heads), "mu": rng.uniform(-s, s, self.n_heads)}

    def circuits(self, params) -> tuple[np.ndarray, np.ndarray]:
        """The equivalent merged circuits: ``KQ_h = diag(ω_h I_d, 0)``, ``ov_h = μ_h e_{d+1}``."""
        _check_params(params, self.param_shapes())
        return self._circuits(params)

    def _circuits(self, params):
        """:meth:`circuits` of validated parameters (no checks)."""
        H, d = self.n_heads, self.d
        KQ = np.zeros((H, d + 1, d + 1))
        KQ[:, np.arange(d), np.arange(d)] = np.asarray(params["omega"])[:, None]
        ov = np.zeros((H, d + 1))
        ov[:, d] = params["mu"]
        return KQ, ov

    def _forward(self, omega, mu, tok: Prompts):
        Z, xq = tok.tokens, tok.x_q
        n, L, D = Z.shape
        if D != self.d + 1 or xq.shape != (n, self.d):
            raise ValueError(f"`batch` must have d = {self.d}, got Z shape {Z.shape}, xq shape {xq.shape}")
        s = np.matmul(Z[..., : self.d], xq[:, :, None])  # (n, L, 1): x_lᵀ x_q
        S = s.transpose(0, 2, 1) * omega[None, :, None]  # (n, H, L)
        if self.activation.name == "exp":
            P = _softmax_(S)
            Q = P  # dP/dS weights: f'(S)/Σf = P for exp
        else:
            F, dF, norm = _weights(S, self.activation, "ReducedModel")
            P = F / norm[..., None]
            Q = dF / norm[..., None]
        y = Z[..., self.d]
        R = np.matmul(P, y[:, :, None])[..., 0]  # (n, H)
        return R @ mu, (s, P, R, y, Q)

    def predict(self, params, batch) -> np.ndarray:
        """Predictions ``ŷ`` on a :class:`~reduced_dynamics.Prompts` batch, shape ``(n,)``."""
        _check_params(params, self.param_shapes())
        return self._forward(np.asarray(params["omega"]), np.asarray(params["mu"]), as_tokens(batch))[0]

    def loss(self, params, batch) -> float:
        """Mean squared error ``mean (ŷ − y_q)²`` on a :class:`~reduced_dynamics.Prompts` batch."""
        tok = as_tokens(batch)
        r = self.predict(params, tok) - tok.y_q
        return float(r @ r / r.size)

    def loss_and_grad(self, params, batch) -> tuple[float, dict]:
        """Return ``(loss, {"omega": dω, "mu": dμ})``, gradients of shape ``(H,)``."""
        _check_params(params, self.param_shapes())
        tok = as_tokens(batch)
        omega, mu = np.asarray(params["omega"], dtype=np.float64), np.asarray(params["mu"], dtype=np.float64)
        yhat, (s, P, R, y, Q) = self._forward(omega, mu, tok)
        r = yhat - tok.y_q
        n = r.size
        g = r * (2.0 / n)
        dmu = g @ R
        # dP[n,h,l] = g_n μ_h y_l ; dS = (f'(S)/Σf) ⊙ (dP − Σ_l P dP)  (= P ⊙ (...) for exp)
        dP = (g[:, None] * mu[None, :])[:, :, None] * y[:, None, :]
        dP -= np.einsum("nhl,nhl->nh", P, dP)[..., None]
        dP *= Q
        domega = np.einsum("nhl,nl->h", dP, s[..., 0])
        return float(r @ r / n), {"omega": domega, "mu": dmu}

    def _train_loss_and_grad(self, params, batch) -> tuple[float, dict]:
        """``loss_and_grad`` on a trainer batch (``reduced_dynamics.model._batches.TrainBatch``)."""
        return self.loss_and_grad(params, batch.prompts())


def make_model(kind: str, *, n_heads, d, init_scale: float = 0.1, norm_L: int | None = None, activation=None):
    """Build a model by name: one of :data:`MODEL_KINDS`.

    Parameters
    ----------
    kind : {"separate", "merged", "linear", "reduced"}
        Parameterisation: separate ``Q, K, V`` per head, merged ``KQ``/``OV``
        circuits, linear attention (separate, no softmax), or the reduced
        ``(omega, mu)`` model.
    n_heads : int
        Number of heads ``H >= 1``.
    d : int
        Covariate dimension of the model (its embedding has ``d + 1`` rows).
    init_scale : float, default 0.1
        Scale of the reduced model's random initialisation (``kind="reduced"`` only).
    norm_L : int, optional
        Linear attention only: hard-codes the ``1/L`` normalisation at this
        length (``None``: use each prompt's own length).
    activation : Activation or str, optional
        The attention activation of the softmax models (``None``: ``exp``; docs/theory.md#other-activations).
        Linear attention has none (only ``None`` / ``exp`` is accepted).

    Returns
    -------
    AttentionModel or ReducedModel

    Examples
    --------
    >>> make_model("merged", n_heads=2, d=5).param_shapes()["KQ"]
    (2, 6, 6)
    """
    if not isinstance(kind, str) or kind not in MODEL_KINDS:
        raise ValueError(f"`kind` must be one of {', '.join(MODEL_KINDS)}, got {kind!r}")
    act = _as_activation(activation)
    if kind == "separate":
        return AttentionModel(n_heads, d, "separate", "softmax", activation=act)
    if kind == "merged":
        return AttentionModel(n_heads, d, "merged", "softmax", activation=act)
    if kind == "linear":
        if act.name != "exp":
            raise ValueError(
                f"`activation` must be None or 'exp' for kind 'linear' (no weights to apply it to), got {act!r}"
            )
        return AttentionModel(n_heads, d, "separate", "linear", norm_L)
    if kind == "reduced":
        return ReducedModel(n_heads, d, init_scale, act)
    raise ValueError(f"`kind` must be one of {', '.join(MODEL_KINDS)}, got {kind!r}")
