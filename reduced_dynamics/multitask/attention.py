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
import json
import math
import os
import time
import zipfile
from pathlib import Path

import numpy as np

from reduced_dynamics._results import FrozenResult
from reduced_dynamics._validation import (
    check_finite_array,
    check_nonnegative_int,
    check_positive_float,
    check_positive_int,
)
from reduced_dynamics.estimation.prompts import MEMORY_BUDGET, as_generator
from reduced_dynamics.io import atomic_savez
from reduced_dynamics.model.training import (
    _adam_update,
    _rng_from_json,
    _rng_state_json,
    all_finite,
    check_resume_state,
)
from reduced_dynamics.multitask.flow import classify_heads
from reduced_dynamics.multitask.predictors import MultitaskPrompts, check_mt_prompts, support_mask
from reduced_dynamics.setting import Setting, as_setting

__all__ = [
    "MultitaskAttention",
    "MultitaskTrainResult",
    "init_mt_attention",
    "init_mt_params",
    "MT_PARAMETERISATIONS",
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
    setting = as_setting(setting, "init_mt_attention").require_softmax("init_mt_attention")
    s = check_positive_float("init_scale", init_scale)
    setting.require_scalar("init_mt_attention")
    check_mt_memory(H, setting, "circuit", where="init_mt_attention")
    rng = as_generator(seed)
    d, N = setting.d, setting.n_tasks
    return MultitaskAttention(KQ=s * rng.standard_normal((H, d + N, d)), OV=s * rng.standard_normal((H, N, d + N)))


def _check_model(model, setting):
    if not isinstance(model, MultitaskAttention):
        raise ValueError(f"`model` must be a MultitaskAttention, got {type(model).__name__}")
    d, N = setting.d, setting.n_tasks
    KQ = check_finite_array("model.KQ", model.KQ, ndim=3)
    OV = check_finite_array("model.OV", model.OV, ndim=3)
    H = KQ.shape[0]
    if KQ.shape != (H, d + N, d) or OV.shape != (H, N, d + N):
        raise ValueError(
            f"`model` must have KQ of shape (H, {d + N}, {d}) and OV of shape (H, {N}, {d + N}) for this setting, "
            f"got {model.KQ.shape} and {model.OV.shape}"
        )


def _forward(KQ, OV, Z, xq, ZT=None):
    """Forward pass on arrays; matmul forms (faster than the einsum forms for these small axes)."""
    B, L, D = Z.shape
    H, _, d = KQ.shape
    N = OV.shape[1]
    if ZT is None:
        ZT = np.ascontiguousarray(np.swapaxes(Z, 1, 2))
    Qx = (xq @ KQ.transpose(2, 0, 1).reshape(d, H * D)).reshape(B, H, D)
    S = np.matmul(Qx, ZT)  # (B, H, L)
    S -= S.max(axis=-1, keepdims=True)
    P = np.exp(S, out=S)
    P /= P.sum(axis=-1, keepdims=True)
    C = np.matmul(P, Z)  # context per head, (B, H, D)
    out = C.reshape(B, H * D) @ OV.transpose(0, 2, 1).reshape(H * D, N)
    return out, P, C


def mt_attention_predict(model: MultitaskAttention, prompts: MultitaskPrompts, setting: Setting) -> np.ndarray:
    """Predictions for all tasks, shape (n, N)."""
    setting = as_setting(setting, "mt_attention_predict").require_softmax("mt_attention_predict")
    _check_model(model, setting)
    check_mt_prompts(prompts, setting=setting)
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
    setting = as_setting(setting, "mt_attention_loss_grad").require_softmax("mt_attention_loss_grad")
    _check_model(model, setting)
    check_mt_prompts(prompts, setting=setting)
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


def _loss_grad(KQ, OV, Z, xq, yq, ZT=None):
    B, L, D = Z.shape
    H, _, d = KQ.shape
    N = OV.shape[1]
    if ZT is None:
        ZT = np.ascontiguousarray(np.swapaxes(Z, 1, 2))
    out, P, C = _forward(KQ, OV, Z, xq, ZT)
    r = out - yq
    loss = float((r * r).sum() / B)
    g = r * (2.0 / B)  # (B, N)
    Cf = C.reshape(B, H * D)
    gOV = (g.T @ Cf).reshape(N, H, D).transpose(1, 0, 2)
    gC = (g @ OV.transpose(1, 0, 2).reshape(N, H * D)).reshape(B, H, D)
    gP = np.matmul(gC, ZT)  # (B, H, L)
    gP -= (P * gP).sum(axis=-1, keepdims=True)
    gP *= P  # = gS
    gKQ = (np.matmul(gP, Z).reshape(B, H * D).T @ xq).reshape(H, D, d)
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
        Wall time (this call; a resumed run counts only the steps it took).
    cpu_seconds : float
    params : dict of ndarray
        The trained parameters (``Q, K, V, O`` or ``KQ, OV``).
    parameterisation : str
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
    params: dict = dataclasses.field(default_factory=dict)
    parameterisation: str = "circuit"


def _separate_circuits(Q, K, V, O, d):
    """Circuits of the separate form: ``KQ_h = (K_hᵀQ_h)[:, :d]/√D`` (H, D, d) and ``OV_h = O_h V_h`` (H, N, D)."""
    D = Q.shape[-1]
    KQ = np.matmul(K.transpose(0, 2, 1), Q[:, :, :d]) / math.sqrt(D)
    OV = np.matmul(O, V)
    return KQ, OV


class _Params:
    """Flat parameter vector <-> named arrays for one parameterisation (views, no copies)."""

    def __init__(self, parameterisation: str, H: int, d: int, N: int):
        D = d + N
        if parameterisation == "circuit":
            self.shapes = {"KQ": (H, D, d), "OV": (H, N, D)}
        else:
            self.shapes = {"Q": (H, D, D), "K": (H, D, D), "V": (H, D, D), "O": (H, N, D)}
        self.parameterisation, self.d = parameterisation, d
        self.size = sum(int(np.prod(v)) for v in self.shapes.values())

    def views(self, flat: np.ndarray) -> dict:
        out, i = {}, 0
        for k, shp in self.shapes.items():
            n = int(np.prod(shp))
            out[k] = flat[i : i + n].reshape(shp)
            i += n
        return out

    def circuits(self, p: dict) -> tuple[np.ndarray, np.ndarray]:
        if self.parameterisation == "circuit":
            return p["KQ"], p["OV"]
        return _separate_circuits(p["Q"], p["K"], p["V"], p["O"], self.d)

    def grad(self, p: dict, gKQ: np.ndarray, gOV: np.ndarray) -> np.ndarray:
        """Flat gradient from the circuit gradients (chain rule through ``KᵀQ/√D`` and ``O V``)."""
        if self.parameterisation == "circuit":
            return np.concatenate([gKQ.ravel(), gOV.ravel()])
        Q, K, V, O = p["Q"], p["K"], p["V"], p["O"]
        H, D, _ = Q.shape
        dA = np.zeros((H, D, D))
        dA[:, :, : self.d] = gKQ / math.sqrt(D)
        dQ = np.matmul(K, dA)
        dK = np.matmul(Q, dA.transpose(0, 2, 1))
        dV = np.matmul(O.transpose(0, 2, 1), gOV)
        dO = np.matmul(gOV, V.transpose(0, 2, 1))
        return np.concatenate([dQ.ravel(), dK.ravel(), dV.ravel(), dO.ravel()])


#: Parameterisations of :func:`train_mt_attention`.
MT_PARAMETERISATIONS = ("separate", "circuit")


def init_mt_params(
    n_heads: int, setting: Setting, *, parameterisation: str = "separate", init_scale=None, seed
) -> dict:
    """Initial parameters of the N-output model, as a dict of arrays.

    ``"separate"``: ``Q_h, K_h, V_h`` (D × D) and the output rows ``O_h`` (N × D), each entry
    ``U(−b, b)`` with the PyTorch-default ``b = 1/√D`` (fan_in ``D = d + N``; ``init_scale`` overrides ``b``).
    ``"circuit"``: ``KQ_h`` (D × d) and ``OV_h`` (N × D), entries ``N(0, init_scale²)``
    (default 0.01), as :func:`init_mt_attention`.

    Parameters
    ----------
    n_heads : int, in [1, 64]
    setting : Setting
    parameterisation : {"separate", "circuit"}
    init_scale : float > 0, optional
    seed : int >= 0 or numpy.random.Generator

    Returns
    -------
    dict of ndarray
    """
    _check_parameterisation(parameterisation)
    if parameterisation == "circuit":
        m = init_mt_attention(n_heads, setting, init_scale=0.01 if init_scale is None else init_scale, seed=seed)
        return {"KQ": m.KQ, "OV": m.OV}
    H = check_positive_int("n_heads", n_heads, hi=64)
    setting = as_setting(setting, "init_mt_params").require_softmax("init_mt_params").require_scalar("init_mt_params")
    check_mt_memory(H, setting, parameterisation, where="init_mt_params")
    d, N = setting.d, setting.n_tasks
    D = d + N
    b = 1.0 / math.sqrt(D) if init_scale is None else check_positive_float("init_scale", init_scale)
    rng = as_generator(seed)
    return {k: rng.uniform(-b, b, shp) for k, shp in _Params("separate", H, d, N).shapes.items()}


def _check_parameterisation(parameterisation) -> str:
    if not isinstance(parameterisation, str) or parameterisation not in MT_PARAMETERISATIONS:
        raise ValueError(
            f"`parameterisation` must be one of {', '.join(MT_PARAMETERISATIONS)}, got {parameterisation!r}"
        )
    return parameterisation


def check_mt_memory(n_heads: int, setting: Setting, parameterisation: str, *, batch: int = 0, where: str) -> int:
    """Bytes of the N-output model's parameters (and, with ``batch``, of training it: Adam's moments, the
    gradient, one batch's tokens and attention), refused above
    :data:`~reduced_dynamics.estimation.prompts.MEMORY_BUDGET` before anything is allocated."""
    d, L, N = setting.d, setting.L, setting.n_tasks
    P = _Params(parameterisation, n_heads, d, N).size
    D = d + N
    need = 8 * P
    if batch:
        need = 8 * (6 * P + batch * (3 * L * D + 3 * n_heads * L + 2 * n_heads * D + 2 * (d + N)))
    if need > MEMORY_BUDGET:
        what = "its parameters" if not batch else "training it (parameters, Adam moments, one batch)"
        raise ValueError(
            f"{where}: the N-output attention model at `setting.d` = {d}, N = {N} tasks, `n_heads` = {n_heads}"
            + (f", `batch` = {batch}, L = {L}" if batch else "")
            + f" needs {need / 2**30:.3g} GiB for {what}, more than the memory budget of "
            f"{MEMORY_BUDGET / 2**30:g} GiB (reduced_dynamics.estimation.prompts.MEMORY_BUDGET); use a smaller "
            "`setting.d`, `n_heads`" + (" or `batch`" if batch else "")
        )
    return need


def _draw_tokens(rng, n, setting, scale):
    """One training batch: the same draws, in the same order, as :func:`sample_mt_prompts`."""
    d, L, N = setting.d, setting.L, setting.n_tasks
    beta = rng.standard_normal((n, N, d)) * scale
    X = rng.standard_normal((n, L, d))
    xq = rng.standard_normal((n, d))
    sd = math.sqrt(setting.sigma2)
    Y = np.matmul(X, beta.transpose(0, 2, 1))
    Y += sd * rng.standard_normal((n, L, N))
    yq = np.matmul(beta, xq[:, :, None])[..., 0]
    yq += sd * rng.standard_normal((n, N))
    Z = np.concatenate([X, Y], axis=-1)
    return Z, np.ascontiguousarray(np.swapaxes(Z, 1, 2)), xq, yq


def _config(n_heads, setting, batch, lr, seed, parameterisation, init_scale):
    return {
        "n_heads": int(n_heads),
        "setting": setting.to_dict(),
        "batch": int(batch),
        "lr": float(lr),
        "seed": int(seed),
        "parameterisation": parameterisation,
        "init_scale": None if init_scale is None else float(init_scale),
    }


def _load_mt_checkpoint(path: Path, config: dict):
    try:
        with np.load(path) as z:
            data = {k: z[k] for k in z.files}
        saved = json.loads(str(data["config"]))
    except (OSError, EOFError, KeyError, ValueError, zipfile.BadZipFile) as exc:
        raise ValueError(
            f"`checkpoint`: {str(path)!r} is not a readable multi-task checkpoint ({type(exc).__name__}: {exc})"
        ) from None
    if saved != config:
        diff = sorted(k for k in config if saved.get(k) != config[k])
        raise ValueError(
            f"`checkpoint`: {str(path)!r} belongs to another run (differs in {', '.join(diff)}); "
            "use another path or delete it"
        )
    return data


def train_mt_attention(
    n_heads: int,
    setting: Setting,
    *,
    steps: int,
    seed: int,
    batch: int = 256,
    lr: float = 1e-3,
    parameterisation: str = "circuit",
    init_scale: float | None = None,
    checkpoint=None,
    checkpoint_every: int = 10_000,
    callback=None,
) -> MultitaskTrainResult:
    """Train the N-output attention model with Adam on fresh prompts each step.

    Parameters
    ----------
    n_heads : int, in [1, 64]
    setting : Setting
    steps : int, in [1, 10**7]
        Total Adam steps (a resumed run continues up to ``steps``).
    seed : int >= 0
        Seeds the initialisation and then the prompt stream (one Generator).
    batch : int, in [1, 10**5]
    lr : float > 0
    parameterisation : {"circuit", "separate"}
        ``"separate"``: ``Q, K, V`` and output rows ``O`` per head, PyTorch-default init (the paper's model);
        ``"circuit"``: the circuits ``KQ, OV`` as parameters, ``N(0, 0.01²)`` init (:func:`init_mt_params`).
    init_scale : float > 0, optional
        Overrides the parameterisation's default init scale.
    checkpoint : str or Path, optional
        Resumable state (atomic ``.npz``: parameters, Adam moments, step, generator state, losses), written
        every ``checkpoint_every`` steps and at the end. If the file exists and belongs to the same run
        (same arguments except ``steps``), training resumes from it; same seed -> the same numbers as an
        uninterrupted run.
    checkpoint_every : int, in [1, 10**7]
    callback : callable, optional
        ``callback(step, loss)`` every 1000 steps (progress).

    Returns
    -------
    MultitaskTrainResult
    """
    setting = (
        as_setting(setting, "train_mt_attention")
        .require_softmax("train_mt_attention")
        .require_isotropic("train_mt_attention")
    )
    setting.require_scalar("train_mt_attention")
    H = check_positive_int("n_heads", n_heads, hi=64)
    steps = check_positive_int("steps", steps, hi=10**7)
    batch = check_positive_int("batch", batch, hi=10**5)
    lr = check_positive_float("lr", lr)
    every = check_positive_int("checkpoint_every", checkpoint_every, hi=10**7)
    seed = check_nonnegative_int("seed", seed)
    if init_scale is not None:
        init_scale = check_positive_float("init_scale", init_scale)
    _check_parameterisation(parameterisation)
    if checkpoint is not None and not isinstance(checkpoint, (str, os.PathLike)):
        raise ValueError(f"`checkpoint` must be a path (str or os.PathLike) or None, got {type(checkpoint).__name__}")
    if callback is not None and not callable(callback):
        raise ValueError(f"`callback` must be callable or None, got {type(callback).__name__}")
    check_mt_memory(H, setting, parameterisation, batch=batch, where="train_mt_attention")
    config = _config(H, setting, batch, lr, seed, parameterisation, init_scale)
    d, N = setting.d, setting.n_tasks
    rng = as_generator(seed)
    params0 = init_mt_params(H, setting, parameterisation=parameterisation, init_scale=init_scale, seed=rng)
    spec = _Params(parameterisation, H, d, N)
    theta = np.concatenate([params0[k].ravel() for k in spec.shapes])
    m = np.zeros_like(theta)
    v = np.zeros_like(theta)
    losses = np.empty(steps)
    start = 0
    path = None if checkpoint is None else Path(checkpoint)
    if path is not None and path.exists():
        data = _load_mt_checkpoint(path, config)
        start = int(data["step"])
        if start > steps:
            raise ValueError(f"`steps` = {steps} is below the {start} steps already in the checkpoint {str(path)!r}")
        check_resume_state(data["theta"], data["m"], data["v"], where=repr(str(path)), name="checkpoint")
        theta, m, v = data["theta"].copy(), data["m"].copy(), data["v"].copy()
        losses[:start] = data["losses"]
        try:
            rng = _rng_from_json(str(data["rng_state"]))
        except (ValueError, TypeError, KeyError) as exc:
            raise ValueError(f"`checkpoint`: {str(path)!r} is not a readable multi-task checkpoint ({exc})") from None
    p = spec.views(theta)
    mask = support_mask(setting)
    scale = mask / np.sqrt(mask.sum(axis=1))[:, None]

    def save(t):
        if path is not None and all_finite(theta, m, v):  # never a non-finite state over the last finite one
            atomic_savez(
                path,
                config=np.array(json.dumps(config)),
                theta=theta,
                m=m,
                v=v,
                step=np.array(t),
                rng_state=np.array(_rng_state_json(rng)),
                losses=losses[:t],
            )

    t0, c0 = time.perf_counter(), time.process_time()
    status, message, done = 0, "completed", steps
    last = theta.copy()  # the parameters of the last finite loss (what a diverged run returns)
    for t in range(start + 1, steps + 1):
        Z, ZT, xq, yq = _draw_tokens(rng, batch, setting, scale)
        KQ, OV = spec.circuits(p)
        with np.errstate(over="ignore", invalid="ignore"):  # a diverging run is reported by its status
            loss, gKQ, gOV = _loss_grad(KQ, OV, Z, xq, yq, ZT)
        if not np.isfinite(loss):
            if t == 1:  # the initial parameters: the run cannot start
                raise ValueError(
                    "`init_scale`: the loss is not finite at the initial parameters (step 0); the run cannot start: "
                    "use a smaller `init_scale`"
                )
            if t == start + 1 and start > 0:  # the checkpoint's own parameters: nothing to continue, nothing written
                raise ValueError(
                    f"`checkpoint`: the loss is non-finite at the parameters of {str(path)!r} (step {start}): the "
                    "run it holds had diverged, or the file is corrupted; train again with a smaller `lr` or use "
                    "another path"
                )
            status, message, done = 1, f"the loss became non-finite at step {t}; lower `lr`", t - 1
            theta[:] = last  # the parameters of step t - 1 (the last finite loss), not the diverged ones
            break
        losses[t - 1] = loss
        last[:] = theta
        with np.errstate(over="ignore", invalid="ignore"):
            _adam_update(theta, spec.grad(p, gKQ, gOV), m, v, t, lr=lr)
        if callback is not None and t % 1000 == 0:
            callback(t, loss)
        if t % every == 0 and t < steps:
            save(t)
    if status == 0:
        save(steps)
    KQ, OV = spec.circuits(p)
    final = MultitaskAttention(KQ=np.array(KQ), OV=np.array(OV))
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
        params={k: np.array(a) for k, a in p.items()},
        parameterisation=parameterisation,
    )


__all__ += ["LossGrad", "ExtractedCircuits"]
