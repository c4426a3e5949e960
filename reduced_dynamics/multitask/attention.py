r"""The one-layer softmax attention model with ``N`` outputs and its Adam trainer (numpy).

Tokens :math:`z_l = (x_l, y_{l,1..N}) \in \mathbb R^{d+N}`, query :math:`z_q = (x_q, 0)`.
Parameters are the circuits of each head (the "merged" form of
docs/theory.md#full-model): :math:`KQ_h \in \mathbb R^{(d+N)\times d}` (the columns that meet
the non-zero part of :math:`z_q`) and :math:`OV_h \in \mathbb R^{N\times(d+N)}` (row ``n`` is
the output row of task ``n``):

.. math::
    \hat y_n = \sum_h OV_{h,n}^\top \sum_l z_l\,\operatorname{softmax}_l(z_l^\top KQ_h x_q).

Training minimises :math:`\frac1B\sum_b\sum_n(\hat y_{b,n} - y_{q,b,n})^2` on fresh prompts
each step with Adam (:func:`reduced_dynamics.model.training.adam_update`). The reduced
parameters are read off as :math:`\omega^{(h)}_j = KQ_h[j, j]` and
:math:`\mu^{(h)}_n = OV_h[n, d+n]`; the rest of each circuit (off-diagonal KQ, the other
OV entries) is reported relative to them.

References
----------
docs/theory.md#extensions
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from reduced_dynamics._results import FrozenResult
from reduced_dynamics._validation import check_positive_float, check_positive_int
from reduced_dynamics.estimation.prompts import as_generator
from reduced_dynamics.model.training import adam_update
from reduced_dynamics.multitask.flow import classify_heads
from reduced_dynamics.multitask.predictors import MultitaskPrompts, sample_mt_prompts
from reduced_dynamics.setting import Setting, as_setting

__all__ = [
    "MultitaskAttention",
    "MultitaskTrainResult",
    "init_mt_attention",
    "mt_attention_predict",
    "mt_attention_loss_grad",
    "extract_reduced",
    "train_mt_attention",
]


@dataclasses.dataclass(frozen=True)
class MultitaskAttention(FrozenResult):
    """Parameters of the N-output attention model.

    Attributes
    ----------
    KQ : ndarray, shape (H, d + N, d)
    OV : ndarray, shape (H, N, d + N)
    """

    KQ: np.ndarray
    OV: np.ndarray

    @property
    def n_heads(self) -> int:
        """Number of heads H."""
        return self.KQ.shape[0]


def init_mt_attention(n_heads: int, setting: Setting, *, init_scale: float = 0.01, seed) -> MultitaskAttention:
    """Random start: i.i.d. ``N(0, init_scale²)`` entries of every ``KQ_h`` and ``OV_h``.

    Parameters
    ----------
    n_heads : int, in [1, 64]
    setting : Setting
    init_scale : float > 0
    seed : int >= 0 or numpy.random.Generator

    Returns
    -------
    MultitaskAttention
    """
    H = check_positive_int("n_heads", n_heads, hi=64)
    setting = as_setting(setting, "init_mt_attention")
    s = check_positive_float("init_scale", init_scale)
    rng = as_generator(seed)
    d, N = setting.d, setting.n_tasks
    return MultitaskAttention(KQ=s * rng.standard_normal((H, d + N, d)), OV=s * rng.standard_normal((H, N, d + N)))


def _check_model(model, setting):
    if not isinstance(model, MultitaskAttention):
        raise ValueError(f"`model` must be a MultitaskAttention, got {type(model).__name__}")
    d, N = setting.d, setting.n_tasks
    H = model.KQ.shape[0]
    if model.KQ.shape != (H, d + N, d) or model.OV.shape != (H, N, d + N):
        raise ValueError(
            f"`model` must have KQ of shape (H, {d + N}, {d}) and OV of shape (H, {N}, {d + N}) for this setting, "
            f"got {model.KQ.shape} and {model.OV.shape}"
        )


def _forward(KQ, OV, Z, xq):
    Qx = np.einsum("hij,bj->bhi", KQ, xq)  # (B, H, d+N)
    ZT = np.swapaxes(Z, 1, 2)
    S = np.matmul(Qx, ZT)  # (B, H, L)
    S -= S.max(axis=-1, keepdims=True)
    P = np.exp(S)
    P /= P.sum(axis=-1, keepdims=True)
    C = np.matmul(P, Z)  # context per head, (B, H, d+N)
    out = np.einsum("bhi,hni->bn", C, OV)
    return out, P, C


def mt_attention_predict(model: MultitaskAttention, prompts: MultitaskPrompts, setting: Setting) -> np.ndarray:
    """Predictions for all tasks, shape (n, N)."""
    setting = as_setting(setting, "mt_attention_predict")
    _check_model(model, setting)
    out, _, _ = _forward(model.KQ, model.OV, prompts.tokens, prompts.xq)
    return out


def mt_attention_loss_grad(model: MultitaskAttention, prompts: MultitaskPrompts, setting: Setting):
    """Batch loss ``mean_b Σ_n (ŷ - y_q)²`` and its gradient (hand-written backpropagation).

    Returns
    -------
    MultitaskAttention
        The gradient, in the same container (fields ``KQ``, ``OV``); the loss is its attribute
        ``loss`` of the returned :class:`LossGrad`.
    """
    setting = as_setting(setting, "mt_attention_loss_grad")
    _check_model(model, setting)
    loss, gKQ, gOV = _loss_grad(model.KQ, model.OV, prompts.tokens, prompts.xq, prompts.yq)
    return LossGrad(loss=loss, KQ=gKQ, OV=gOV)


@dataclasses.dataclass(frozen=True)
class LossGrad(FrozenResult):
    """Loss and gradient of the N-output attention model.

    Attributes
    ----------
    loss : float
    KQ : ndarray, shape (H, d + N, d)
    OV : ndarray, shape (H, N, d + N)
    """

    loss: float
    KQ: np.ndarray
    OV: np.ndarray


def _loss_grad(KQ, OV, Z, xq, yq):
    B = Z.shape[0]
    out, P, C = _forward(KQ, OV, Z, xq)
    r = out - yq
    loss = float((r**2).sum() / B)
    g = 2.0 * r / B  # (B, N)
    gOV = np.einsum("bn,bhi->hni", g, C)
    gC = np.einsum("bn,hni->bhi", g, OV)  # (B, H, d+N)
    gP = np.matmul(gC, np.swapaxes(Z, 1, 2))  # (B, H, L)
    gS = P * (gP - (P * gP).sum(axis=-1, keepdims=True))
    gKQ = np.einsum("bhi,bj->hij", np.matmul(gS, Z), xq)
    return loss, gKQ, gOV


def extract_reduced(model: MultitaskAttention, setting: Setting):
    """Per-feature ω (H, d), per-task μ (H, N) and the relative size of the rest of the circuits.

    Returns
    -------
    ExtractedCircuits
    """
    setting = as_setting(setting, "extract_reduced")
    _check_model(model, setting)
    d, N = setting.d, setting.n_tasks
    H = model.KQ.shape[0]
    omega = np.stack([np.diag(model.KQ[h, :d, :d]) for h in range(H)])
    mu = np.stack([model.OV[h, np.arange(N), d + np.arange(N)] for h in range(H)])
    kq_off = model.KQ.copy()
    ov_off = model.OV.copy()
    for h in range(H):
        kq_off[h, np.arange(d), np.arange(d)] = 0.0
        ov_off[h, np.arange(N), d + np.arange(N)] = 0.0
    # the OV entries on x_l only shift the prediction by a multiple of the attention-weighted x; report them too
    kq_rel = float(np.abs(kq_off).max() / max(np.abs(omega).max(), 1e-300))
    ov_rel = float(np.abs(ov_off).max() / max(np.abs(mu).max(), 1e-300))
    return ExtractedCircuits(
        omega=omega, mu=mu, kq_offdiag_rel=kq_rel, ov_offdiag_rel=ov_rel, roles=classify_heads(omega, mu, setting)
    )


@dataclasses.dataclass(frozen=True)
class ExtractedCircuits(FrozenResult):
    """Reduced parameters read off a trained N-output model (:func:`extract_reduced`).

    Attributes
    ----------
    omega : ndarray, shape (H, d)
    mu : ndarray, shape (H, N)
    kq_offdiag_rel : float
        Largest |KQ entry off the diagonal of the x-block| / largest |ω|.
    ov_offdiag_rel : float
        Largest |OV entry other than μ| / largest |μ|.
    roles : tuple of str
        :func:`reduced_dynamics.multitask.flow.classify_heads` of ``(omega, mu)``.
    """

    omega: np.ndarray
    mu: np.ndarray
    kq_offdiag_rel: float
    ov_offdiag_rel: float
    roles: tuple


@dataclasses.dataclass(frozen=True)
class MultitaskTrainResult(FrozenResult):
    """Result of :func:`train_mt_attention`.

    Attributes
    ----------
    success : bool
        Finite loss at the end.
    status : int
        0 ok, 1 the loss became non-finite (training stopped).
    message : str
    model : MultitaskAttention
    steps : int
        Adam steps taken.
    losses : ndarray, shape (steps,)
        Batch loss per step.
    circuits : ExtractedCircuits
    seconds : float
        Wall time.
    cpu_seconds : float
    """

    success: bool
    status: int
    message: str
    model: MultitaskAttention
    steps: int
    losses: np.ndarray
    circuits: ExtractedCircuits
    seconds: float
    cpu_seconds: float


def train_mt_attention(
    n_heads: int,
    setting: Setting,
    *,
    steps: int,
    seed: int,
    batch: int = 256,
    lr: float = 1e-3,
    init_scale: float = 0.01,
    callback=None,
) -> MultitaskTrainResult:
    """Train the N-output attention model with Adam on fresh prompts each step.

    Parameters
    ----------
    n_heads : int, in [1, 64]
    setting : Setting
    steps : int, in [1, 10**7]
    seed : int >= 0
        Seeds the initialisation (``seed``) and the prompt stream (``seed + 1`` … via one Generator).
    batch : int, in [1, 10**5]
    lr : float > 0
    init_scale : float > 0
    callback : callable, optional
        ``callback(step, loss)`` every 1000 steps (progress).

    Returns
    -------
    MultitaskTrainResult
    """
    setting = as_setting(setting, "train_mt_attention")
    steps = check_positive_int("steps", steps, hi=10**7)
    batch = check_positive_int("batch", batch, hi=10**5)
    lr = check_positive_float("lr", lr)
    rng = as_generator(seed)
    model = init_mt_attention(n_heads, setting, init_scale=init_scale, seed=rng)
    KQ, OV = model.KQ.copy(), model.OV.copy()
    theta = np.concatenate([KQ.ravel(), OV.ravel()])
    nk = KQ.size
    m = np.zeros_like(theta)
    v = np.zeros_like(theta)
    losses = np.empty(steps)
    t0, c0 = time.perf_counter(), time.process_time()
    status, message, done = 0, "completed", steps
    for t in range(1, steps + 1):
        pr = sample_mt_prompts(batch, setting, seed=rng)
        loss, gKQ, gOV = _loss_grad(theta[:nk].reshape(KQ.shape), theta[nk:].reshape(OV.shape), pr.tokens, pr.xq, pr.yq)
        if not np.isfinite(loss):
            status, message, done = 1, f"the loss became non-finite at step {t}; lower `lr`", t - 1
            break
        losses[t - 1] = loss
        adam_update(theta, np.concatenate([gKQ.ravel(), gOV.ravel()]), m, v, t, lr=lr)
        if callback is not None and t % 1000 == 0:
            callback(t, loss)
    final = MultitaskAttention(KQ=theta[:nk].reshape(KQ.shape).copy(), OV=theta[nk:].reshape(OV.shape).copy())
    return MultitaskTrainResult(
        success=status == 0,
        status=status,
        message=message,
        model=final,
        steps=done,
        losses=losses[:done],
        circuits=extract_reduced(final, setting),
        seconds=time.perf_counter() - t0,
        cpu_seconds=time.process_time() - c0,
    )


__all__ += ["LossGrad", "ExtractedCircuits"]
