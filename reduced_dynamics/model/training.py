r"""Seeded, resumable training of the attention models (docs/theory.md#full-model, docs/theory.md#emergent-patterns) and cross-checks.

The trainer follows the paper's protocol: fresh prompts every step, Adam
(PyTorch's update rule, lr 1e-3, batch 256) or plain SGD, on the mean squared
error. The prompts come from the trainer's own sampler and random stream,
version ``reduced_dynamics.model.training.STREAM_VERSION`` (``reduced_dynamics.model._batches``: one seeded
SFC64 generator, Box–Muller normals from its raw 64-bit words; version 1, before
it, was ``numpy.random.default_rng`` with numpy's ziggurat normals). It is
deterministic: the same :class:`TrainConfig` gives bit-identical parameters, and
a run interrupted at a checkpoint and resumed ends with exactly the parameters
of an uninterrupted run (the checkpoint stores parameters, optimizer moments,
step counter, the stream version and the generator's ``bit_generator.state``; a
checkpoint of another stream version is refused). The training steps run with
one BLAS thread (small batched products; see ``estimation._threads``).

Cross-checks against the reduced theory (docs/theory.md#reduced-model, docs/theory.md#gradient-flow,
docs/theory.md#predictors, docs/theory.md#theorem-1) are here too: :func:`mc_risk` (Monte Carlo
risk with standard error), :func:`cross_check` (trained model vs the reduced model at the
extracted (ω, μ) vs debiased GD at ``η = μᵀω``, on common prompts; debiased GD is
:class:`~reduced_dynamics.DebiasedGD`, the package's one implementation,
on the same :class:`~reduced_dynamics.Prompts`) and :func:`length_generalisation`. The SGD-vs-flow
and single-head checks live in :mod:`reduced_dynamics.crosscheck`.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import threading
import time
import zipfile
from dataclasses import KW_ONLY, dataclass, field, fields
from pathlib import Path

import numpy as np

from reduced_dynamics._results import FrozenResult
from reduced_dynamics._validation import (
    check_finite_array,
    check_finite_float,
    check_nonnegative_float,
    check_nonnegative_int,
    check_positive_float,
    check_positive_int,
    check_probability,
)
from reduced_dynamics.estimation._threads import single_blas_thread
from reduced_dynamics.estimation.predictors import debiased_gd
from reduced_dynamics.estimation.prompts import (
    MEMORY_BUDGET,
    Prompts,
    as_generator,
    check_n_prompts,
    chunk_sizes,
    prompt_bytes,
    sample_tokens,
)
from reduced_dynamics.estimation.risk import RiskDifference, RiskEstimate, _Moments
from reduced_dynamics.io import atomic_savez, atomic_write_json
from reduced_dynamics.model._batches import STREAM_VERSION, TokenSampler, sampler_bytes, stream_generator
from reduced_dynamics.model.attention import (
    MODEL_KINDS,
    NormaliserError,
    _check_params,
    flatten_params,
    make_model,
    unflatten_params,
)
from reduced_dynamics.model.circuits import CircuitManifoldGap, PatternMetrics, extract_circuits, pattern_metrics
from reduced_dynamics.setting import Setting, as_setting

__all__ = [
    "OPTIMIZERS",
    "STREAM_VERSION",
    "TrainConfig",
    "TrainResult",
    "Checkpoint",
    "CrossCheck",
    "LengthGeneralisation",
    "RunSummary",
    "adam_update",
    "sgd_update",
    "snapshot_steps",
    "train",
    "save_checkpoint",
    "load_checkpoint",
    "check_resume_state",
    "BIT_GENERATORS",
    "mc_risk",
    "cross_check",
    "length_generalisation",
    "summarize_run",
    "write_outputs",
]

OPTIMIZERS = ("adam", "sgd")

#: status -> message (what happened and what to try next)
MESSAGES = {
    0: "Completed all `steps`.",
    1: "Stopped at `stop_after`; continue with `resume=True` (CLI: --resume).",
    2: "Loss became non-finite; try a smaller `lr`.",
}

#: message of status 2 when the attention normaliser broke (``affine`` activation), followed by the model's reason
NORMALISER_MESSAGE = (
    "The attention normaliser Σ_j f(s_j) stopped being safely positive (status 2, like a divergence; "
    "the checkpoint holds the last good step); try a smaller `lr` or `activation_c`. "
)


#: Largest number of training steps of one run (the loss history alone is 8 bytes a step).
STEPS_MAX = 10**8
#: Largest number of circuit snapshots of a run (each one an (H, D, D) array).
N_SNAPSHOTS_MAX = 10**5


@dataclass(frozen=True)
class TrainConfig:
    """Configuration of one training run (``setting``, then keyword-only fields; validated when built).

    Parameters
    ----------
    setting : Setting
        Scalar data model of the training prompts (``Sigma``: the trainer's sampler draws correlated
        covariates); its ``activation`` is the attention activation of the model
        (docs/theory.md#other-activations; ``linear`` accepts only ``exp``).
    seed : int, >= 0
        Seeds the initialisation and (through an independent child stream) the prompts.
    n_heads : int, >= 1
    steps : int, in [0, 1e8]
    batch : int, >= 1
        Prompts per step; one step's working set must fit in
        :data:`~reduced_dynamics.estimation.prompts.MEMORY_BUDGET` (1 GiB).
    lr : float, > 0
    optimizer : {"adam", "sgd"}
    parameterisation : {"separate", "merged", "linear", "reduced"}
        The model (:data:`reduced_dynamics.MODEL_KINDS`; CLI ``--param``).
    beta1, beta2 : float in (0, 1); eps : float > 0
        Adam constants (PyTorch defaults).
    n_snapshots : int, >= 1
        Circuit snapshots at about this many log-spaced steps (plus step 0).
    init_scale : float, >= 0
        Init scale of the reduced model only.

    Examples
    --------
    >>> cfg = TrainConfig(setting=Setting(d=3, L=10), seed=0, steps=5)
    >>> cfg.model().kind, TrainConfig.from_dict(cfg.to_dict()) == cfg
    ('separate', True)
    """

    setting: Setting
    _: KW_ONLY
    seed: int
    n_heads: int = 2
    steps: int = 10_000
    batch: int = 256
    lr: float = 1e-3
    optimizer: str = "adam"
    parameterisation: str = "separate"
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    n_snapshots: int = 40
    init_scale: float = 0.1

    def __post_init__(self):
        s = object.__setattr__
        as_setting(self.setting, "training")
        s(self, "seed", check_nonnegative_int("seed", self.seed))
        s(self, "n_heads", check_positive_int("n_heads", self.n_heads))
        s(self, "steps", check_nonnegative_int("steps", self.steps))
        s(self, "batch", check_positive_int("batch", self.batch))
        s(self, "lr", check_positive_float("lr", self.lr))
        s(self, "beta1", check_probability("beta1", self.beta1))
        s(self, "beta2", check_probability("beta2", self.beta2))
        s(self, "eps", check_positive_float("eps", self.eps))
        s(self, "n_snapshots", check_positive_int("n_snapshots", self.n_snapshots, hi=N_SNAPSHOTS_MAX))
        s(self, "init_scale", check_nonnegative_float("init_scale", self.init_scale))
        if not isinstance(self.optimizer, str) or self.optimizer not in OPTIMIZERS:
            raise ValueError(f"`optimizer` must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}")
        if not isinstance(self.parameterisation, str) or self.parameterisation not in MODEL_KINDS:
            raise ValueError(
                f"`parameterisation` must be one of {', '.join(MODEL_KINDS)}, got {self.parameterisation!r}"
            )
        if self.parameterisation == "linear" and self.setting.activation != "exp":
            raise ValueError(
                f"`setting.activation` must be 'exp' for parameterisation 'linear' (linear attention has no "
                f"weights to apply it to), got {self.setting.activation!r}"
            )
        if self.steps > STEPS_MAX:
            raise ValueError(f"`steps` must be an integer in [0, {STEPS_MAX:.0e}], got {self.steps}")
        # one step's working set: the sampler's buffers (the batch in both layouts and the raw words),
        # the (H, L) scores, weights and their gradients, and the parameters with their gradients and
        # the optimiser's two moments (H (D, D) blocks each)
        L, D, H = self.setting.L, self.setting.d + 1, self.n_heads
        need = sampler_bytes(self.batch, self.setting) + self.batch * 8 * (L * (4 * H + 2) + 4 * H * D)
        need += 8 * 5 * H * (3 * D * D + D)
        if need > MEMORY_BUDGET:
            raise ValueError(
                f"`batch` = {self.batch} prompts of L={L}, d={D - 1} with {H} heads need about {need / 2**20:,.0f} MiB "
                f"per training step, more than the memory budget of {MEMORY_BUDGET / 2**20:,.0f} MiB "
                "(reduced_dynamics.estimation.prompts.MEMORY_BUDGET); use a smaller `batch` (or `L`)"
            )

    def model(self):
        """The model this configuration trains (linear attention: ``1/L`` hard-coded to the training ``L``;
        softmax models: the activation of ``setting``)."""
        linear = self.parameterisation == "linear"
        return make_model(
            self.parameterisation,
            n_heads=self.n_heads,
            d=self.setting.d,
            init_scale=self.init_scale,
            norm_L=self.setting.L if linear else None,
            activation=None if linear else self.setting.activation_fn,
        )

    def to_dict(self) -> dict:
        """JSON-friendly fields (``setting`` as :meth:`Setting.to_dict`)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["setting"] = self.setting.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: dict) -> TrainConfig:
        """Inverse of :meth:`to_dict`.

        Also reads the configuration format of checkpoints written before the
        :class:`Setting` existed (flat ``d``, ``L``, ``sigma2`` and ``param``),
        so those runs resume unchanged.
        """
        if not isinstance(data, dict):
            raise ValueError(f"`data` must be a dict (TrainConfig.to_dict), got {type(data).__name__}")
        data = dict(data)
        try:
            if "setting" in data:
                if not isinstance(data["setting"], dict):
                    raise TypeError("its `setting` is not a dict")
                data["setting"] = Setting(**data["setting"])
            else:  # checkpoint format of package versions <= 0.1.0
                data["setting"] = Setting(d=data.pop("d"), L=data.pop("L"), sigma2=data.pop("sigma2"))
                data["parameterisation"] = data.pop("param")
            return cls(**data)
        except (KeyError, TypeError) as exc:
            raise ValueError(f"`data` is not a TrainConfig.to_dict() mapping ({type(exc).__name__}: {exc})") from None

    def same_run(self, other: TrainConfig) -> bool:
        """True if ``other`` describes the same run up to ``steps`` / ``n_snapshots``."""
        a, b = self.to_dict(), other.to_dict()
        for k in ("steps", "n_snapshots"):
            a.pop(k), b.pop(k)
        return a == b


@dataclass(frozen=True)
class TrainResult(FrozenResult):
    """Outcome of :func:`train` (fields in the spirit of scipy's ``OdeResult``; arrays read-only).

    Attributes
    ----------
    success : bool
    status : int
        Key of ``MESSAGES``: 0 done, 1 stopped at ``stop_after``, 2 diverged (the loss became
        non-finite, or the attention normaliser of an ``affine`` activation reached ~0: see ``message``).
    message : str
    config : TrainConfig
    params : dict of ndarray
        Final parameters, keyed and shaped as ``config.model().param_shapes()``.
    step : int
        Steps completed.
    losses : ndarray, shape (step,)
        Training (batch) loss at each step.
    snapshot_steps : ndarray of int, shape (S,)
    snapshot_KQ : ndarray, shape (S, H, D, D)
    snapshot_ov : ndarray, shape (S, H, D)
    seconds : float
        Wall time of this call (excluding evaluation).
    steps_per_second : float
        Steps done in this call divided by ``seconds``.
    stream_version : int
        Version of the training prompt stream (``reduced_dynamics.model.training.STREAM_VERSION``).
    """

    success: bool
    status: int
    message: str
    config: TrainConfig = field(repr=False)
    params: dict = field(repr=False)
    step: int = 0
    losses: np.ndarray = field(default=None, repr=False)
    snapshot_steps: np.ndarray = field(default=None, repr=False)
    snapshot_KQ: np.ndarray = field(default=None, repr=False)
    snapshot_ov: np.ndarray = field(default=None, repr=False)
    seconds: float = 0.0
    steps_per_second: float = 0.0
    stream_version: int = STREAM_VERSION


# ---------------------------------------------------------------- optimisers
def adam_update(theta, grad, m, v, t, *, lr, beta1=0.9, beta2=0.999, eps=1e-8):
    r"""One Adam step, in place on ``theta``, ``m``, ``v`` (PyTorch's formula), validated.

    .. math::

        m \leftarrow \beta_1 m + (1-\beta_1) g,\quad v \leftarrow \beta_2 v + (1-\beta_2) g^2,\quad
        \theta \leftarrow \theta - \frac{\mathrm{lr}}{1-\beta_1^t}\,\frac{m}{\sqrt{v}/\sqrt{1-\beta_2^t} + \epsilon}

    ``t`` is the 1-based step count after this update (an integer >= 1: at ``t = 0`` the bias corrections
    divide by zero). ``theta``, ``m``, ``v`` are float64 arrays of one shape (updated in place), ``grad`` finite
    of that shape, ``v >= 0``; ``lr``, ``eps`` > 0, ``beta1``, ``beta2`` in [0, 1). A step that would overflow
    float64 raises ``ValueError`` and leaves the arrays unchanged. Returns ``theta``.
    """
    t = check_positive_int("t", t)
    lr, eps = check_positive_float("lr", lr), check_positive_float("eps", eps)
    beta1, beta2 = _check_beta("beta1", beta1), _check_beta("beta2", beta2)
    theta, m, v = _inplace("theta", theta), _inplace("m", m), _inplace("v", v)
    grad = check_finite_array("grad", grad)
    for name, a in (("grad", grad), ("m", m), ("v", v)):
        if a.shape != theta.shape:
            raise ValueError(f"`{name}` must have the shape of `theta` {theta.shape}, got {a.shape}")
    if np.any(v < 0):
        raise ValueError("`v` (the second moments) must be >= 0")
    new = theta.copy(), m.copy(), v.copy()
    with np.errstate(over="ignore", invalid="ignore"):
        _adam_update(*new[:1], grad, *new[1:], t, lr=lr, beta1=beta1, beta2=beta2, eps=eps)
    if not all_finite(*new):
        raise ValueError(f"`lr` = {lr!r}: the Adam step overflows float64; use a smaller `lr` (or `grad`)")
    for a, b in zip((theta, m, v), new):
        a[...] = b
    return theta


def _check_beta(name, value) -> float:
    out = check_finite_float(name, value)
    if not 0 <= out < 1:
        raise ValueError(f"`{name}` must be a number in [0, 1), got {value!r}")
    return out


def _inplace(name, a) -> np.ndarray:
    """An array updated in place: a writeable float64 ndarray of finite values."""
    if not isinstance(a, np.ndarray) or a.dtype != np.float64 or not a.flags.writeable:
        raise ValueError(f"`{name}` must be a writeable float64 numpy array (it is updated in place)")
    check_finite_array(name, a)
    return a


def _adam_update(theta, grad, m, v, t, *, lr, beta1=0.9, beta2=0.999, eps=1e-8):
    """:func:`adam_update` without the checks (the trainers' step: their arrays are valid by construction)."""
    m *= beta1
    m += (1.0 - beta1) * grad
    v *= beta2
    v += (1.0 - beta2) * (grad * grad)
    bc1 = 1.0 - beta1**t
    bc2 = 1.0 - beta2**t
    denom = np.sqrt(v)
    denom *= 1.0 / math.sqrt(bc2)
    denom += eps
    np.divide(m, denom, out=denom)
    denom *= lr / bc1
    theta -= denom
    return theta


def sgd_update(theta, grad, *, lr):
    """One plain SGD step in place: ``θ ← θ − lr·g``, validated (as :func:`adam_update`). Returns ``theta``."""
    lr = check_positive_float("lr", lr)
    theta = _inplace("theta", theta)
    grad = check_finite_array("grad", grad)
    if grad.shape != theta.shape:
        raise ValueError(f"`grad` must have the shape of `theta` {theta.shape}, got {grad.shape}")
    with np.errstate(over="ignore", invalid="ignore"):
        new = theta - lr * grad
    if not all_finite(new):
        raise ValueError(f"`lr` = {lr!r}: the SGD step overflows float64; use a smaller `lr` (or `grad`)")
    theta[...] = new
    return theta


def _sgd_update(theta, grad, *, lr):
    """:func:`sgd_update` without the checks (the trainer's step)."""
    theta -= lr * grad
    return theta


def snapshot_steps(steps: int, n_snapshots: int) -> np.ndarray:
    """Steps ``0`` and about ``n_snapshots`` log-spaced steps in ``[1, steps]`` (always incl. ``steps``)."""
    steps = check_nonnegative_int("steps", steps, hi=STEPS_MAX)
    n_snapshots = check_positive_int("n_snapshots", n_snapshots, hi=N_SNAPSHOTS_MAX)
    if steps == 0:
        return np.array([0])
    s = np.unique(np.round(np.logspace(0, math.log10(steps), n_snapshots)).astype(np.int64))
    return np.unique(np.concatenate([[0], s, [steps]]))


# --------------------------------------------------------------- checkpoints
def _rng_state_json(rng: np.random.Generator) -> str:
    # SFC64 keeps its state in a uint64 array: stored as a list of ints (exact), read back by its setter
    return json.dumps(rng.bit_generator.state, default=lambda a: np.asarray(a).tolist())


#: the bit generators a checkpoint's generator state may name (a file naming anything else is refused: the
#: name used to be passed to ``getattr(np.random, name)()``, so a file saying "seed" called ``np.random.seed()``)
BIT_GENERATORS = ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")


def _rng_from_json(text: str) -> np.random.Generator:
    state = json.loads(text)
    name = state.get("bit_generator") if isinstance(state, dict) else None
    if not isinstance(name, str) or name not in BIT_GENERATORS:
        raise ValueError(f"its generator state names the bit generator {name!r}, not one of {list(BIT_GENERATORS)}")
    bitgen = getattr(np.random, name)()
    bitgen.state = state
    return np.random.Generator(bitgen)


def check_resume_state(theta, m, v, *, where: str, name: str = "resume") -> None:
    """Refuse a resumable state that no training run writes, before any step (``ValueError`` naming ``name``).

    The parameters ``theta`` and the Adam moments ``m``, ``v`` must be 1-d float arrays of one size, every
    entry finite, ``v >= 0``: a run never checkpoints NaN or inf (:func:`train` keeps the last finite
    checkpoint), so such a file is corrupted, and resuming from it would write NaN over it.
    """
    try:
        theta, m, v = (np.asarray(a) for a in (theta, m, v))
    except ValueError:  # a ragged sequence
        raise ValueError(
            f"`{name}`: {where} holds parameters and Adam moments (`theta`, `m`, `v`) that are not arrays"
        ) from None
    if not (theta.ndim == m.ndim == v.ndim == 1 and theta.shape == m.shape == v.shape):
        raise ValueError(
            f"`{name}`: {where} holds parameters and Adam moments (`theta`, `m`, `v`) of shapes {theta.shape}, "
            f"{m.shape}, {v.shape}; a checkpoint holds three flat arrays of one size"
        )
    for label, a in (
        ("parameters (theta)", theta),
        ("first Adam moments (m)", m),
        ("second Adam moments (v)", v),
    ):
        if a.dtype.kind != "f" or not np.all(np.isfinite(a)):
            raise ValueError(
                f"`{name}`: {where} holds non-finite {label} (NaN or inf), which no training run writes: the file "
                "is corrupted; train again (`force`) or use another `out`"
            )
    if np.any(v < 0):
        raise ValueError(
            f"`{name}`: {where} holds negative second Adam moments (v), which no training run writes: the file is "
            "corrupted; train again (`force`) or use another `out`"
        )


def all_finite(*arrays) -> bool:
    """True when every entry of every array is finite (the state may be checkpointed); ``arrays`` are real."""
    try:
        return all(bool(np.all(np.isfinite(a))) for a in arrays)
    except (TypeError, ValueError):
        raise ValueError("`arrays` must be arrays of real numbers") from None


def _check_checkpoint_layout(out: dict, *, where: str, name: str = "resume") -> None:
    """Refuse a checkpoint whose step, losses or snapshots are not what :func:`save_checkpoint` writes."""

    def bad(what):
        return ValueError(f"`{name}`: {where} {what}, which no training run writes: the file is corrupted")

    step = out["step"]
    if step.shape != () or step.dtype.kind not in "iu" or int(step) < 0:
        raise bad(f"holds the step {step!r} (a checkpoint holds one integer >= 0)")
    losses = out["losses"]
    if losses.ndim != 1 or losses.dtype.kind != "f" or losses.shape[0] < int(step):
        raise bad(f"holds losses of shape {losses.shape} and dtype {losses.dtype} for step {int(step)}")
    s_steps, s_KQ, s_ov = out["snapshot_steps"], out["snapshot_KQ"], out["snapshot_ov"]
    n = s_steps.shape[0] if s_steps.ndim == 1 else -1
    if (
        n < 0
        or s_steps.dtype.kind not in "iu"
        or s_KQ.ndim != 4
        or s_ov.ndim != 3
        or s_KQ.shape[0] != n
        or s_ov.shape[0] != n
        or s_KQ.dtype.kind != "f"
        or s_ov.dtype.kind != "f"
        or s_KQ.shape[1:3] != (s_ov.shape[1], s_ov.shape[2])
        or s_KQ.shape[3] != s_ov.shape[2]
    ):
        raise bad(
            f"holds snapshots of shapes {s_steps.shape}, {s_KQ.shape}, {s_ov.shape} "
            "(a checkpoint holds S steps, S x H x D x D and S x H x D circuits)"
        )


@dataclass(frozen=True)
class Checkpoint(FrozenResult):
    """A resumable training state read by :func:`load_checkpoint` (arrays read-only).

    Attributes
    ----------
    config : TrainConfig
    theta, m, v : ndarray, shape (P,)
        Flat float64 parameters and Adam moments.
    step : int
        Steps completed.
    rng : numpy.random.Generator
        The prompt generator in its saved state.
    losses : ndarray, shape (step,)
    snapshot_steps : ndarray of int, shape (S,)
    snapshot_KQ : ndarray, shape (S, H, D, D)
    snapshot_ov : ndarray, shape (S, H, D)
    stream_version : int
        Version of the prompt stream that wrote it (1 for checkpoints written before versions were recorded).
    """

    config: TrainConfig
    theta: np.ndarray
    m: np.ndarray
    v: np.ndarray
    step: int
    rng: np.random.Generator
    losses: np.ndarray
    snapshot_steps: np.ndarray
    snapshot_KQ: np.ndarray
    snapshot_ov: np.ndarray
    stream_version: int = 1


def save_checkpoint(path, *, config: TrainConfig, theta, m, v, step, rng, losses, snaps) -> Path:
    """Write a resumable checkpoint (atomic npz): params, Adam moments, step, RNG state and stream version, history.

    ``snaps`` is ``(snapshot_steps, snapshot_KQ, snapshot_ov)``. Returns the path written.
    """
    s_steps, s_KQ, s_ov = snaps
    return atomic_savez(
        path,
        config=np.array(json.dumps(config.to_dict())),
        theta=theta,
        m=m,
        v=v,
        step=np.array(step),
        rng_state=np.array(_rng_state_json(rng)),
        stream_version=np.array(STREAM_VERSION),
        losses=np.asarray(losses[:step]),
        snapshot_steps=np.asarray(s_steps, dtype=np.int64),
        snapshot_KQ=np.asarray(s_KQ),
        snapshot_ov=np.asarray(s_ov),
    )


def load_checkpoint(path, *, name: str = "resume") -> Checkpoint:
    """Read a checkpoint written by :func:`save_checkpoint`.

    Checkpoints written before the :class:`Setting` existed (flat ``d``, ``L``,
    ``sigma2``, ``param`` in the configuration) load too
    (:meth:`TrainConfig.from_dict`).

    Returns
    -------
    Checkpoint

    Raises
    ------
    ValueError
        ``path`` is missing or not a readable checkpoint (named as ``name``: the caller's argument, `resume` for
        :func:`train`).
    """
    from reduced_dynamics.io import read_npz

    if isinstance(path, np.ndarray) or not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"`{name}` must be a path (str or os.PathLike) of a checkpoint, got {type(path).__name__}")
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise ValueError(f"`{name}` needs a checkpoint, but {str(path)!r} does not exist")
    out = read_npz(path, name=name, scalars=False)  # a regular file whose members' headers declare what they hold
    try:
        check_resume_state(out["theta"], out["m"], out["v"], where=repr(str(path)), name=name)
        _check_checkpoint_layout(out, where=repr(str(path)), name=name)
        return Checkpoint(
            config=TrainConfig.from_dict(json.loads(str(out["config"]))),
            theta=out["theta"].astype(np.float64),
            m=out["m"].astype(np.float64),
            v=out["v"].astype(np.float64),
            step=int(out["step"]),
            rng=_rng_from_json(str(out["rng_state"])),
            losses=out["losses"],
            snapshot_steps=out["snapshot_steps"],
            snapshot_KQ=out["snapshot_KQ"],
            snapshot_ov=out["snapshot_ov"],
            stream_version=int(out["stream_version"]) if "stream_version" in out else 1,
        )
    except ValueError as exc:
        if str(exc).startswith(f"`{name}`"):
            raise
        raise ValueError(f"`{name}`: {str(path)!r} is not a readable checkpoint (ValueError: {exc})") from None
    except (OSError, EOFError, KeyError, TypeError, AttributeError, zipfile.BadZipFile) as exc:
        raise ValueError(
            f"`{name}`: {str(path)!r} is not a readable checkpoint ({type(exc).__name__}: {exc})"
        ) from None


CHECKPOINT_NAME = "checkpoint.npz"


def _check_adam_moments(m, v, step: int, beta1: float, beta2: float, *, where: str) -> None:
    """Refuse Adam moments no run of ``step`` updates writes: every entry has m² <= C v (Cauchy-Schwarz).

    m and v are the exponential averages (1 - β1) Σ β1^j g and (1 - β2) Σ β2^j g² of the same gradients, so
    m² <= (1 - β1)² / (1 - β2) · Σ_{j < step} (β1² / β2)^j · v. A checkpoint with m = 1e200 and v = 0 made the
    first resumed step overflow: exit 3 ("try a smaller --lr") for a corrupted file.
    """
    r = beta1 * beta1 / beta2
    terms = float(step) if r == 1.0 else (1.0 - r**step) / (1.0 - r) if r < 1.0 else math.inf
    bound = (1.0 - beta1) ** 2 / (1.0 - beta2) * terms
    if not math.isfinite(bound):
        return
    with np.errstate(all="ignore"):
        bad = m * m > bound * v * (1.0 + 1e-6) + 1e-300
    if np.any(bad):
        raise ValueError(
            f"`resume`: {where} holds Adam moments that no run of {step} steps writes (first moment² above "
            f"{bound:.3g} times the second moment): the file is corrupted; train again (`force`) or use another `out`"
        )


def _check_resumed_params(model, shapes, theta, ck, *, where: str) -> None:
    """Refuse checkpointed parameters that are not this run's: their number, or circuits that overflow.

    A finite but huge ``theta`` (1e200) failed later, naming the library's ``KQ``; a wrong size failed with
    numpy's reshape message.
    """
    n = sum(math.prod(s) for s in shapes.values())
    if theta.size != n:
        raise ValueError(
            f"`resume`: {where} holds {theta.size} parameters; this run's model has {n}: the file is corrupted"
        )
    try:
        with np.errstate(all="ignore"):
            KQ, ov = model.circuits(unflatten_params(theta, shapes))
        finite = bool(np.all(np.isfinite(KQ)) and np.all(np.isfinite(ov)))
    except (ValueError, OverflowError, FloatingPointError):
        finite = False
    if not finite:
        raise ValueError(
            f"`resume`: {where} holds parameters (largest |entry| {float(np.max(np.abs(theta))):.3g}) whose circuits "
            "overflow to non-finite values, which no training run writes: the file is corrupted; train again "
            "(`force`) or use another `out`"
        )
    H, D = ck.snapshot_KQ.shape[1], ck.snapshot_KQ.shape[2]
    if ck.snapshot_KQ.shape[0] and (H, D) != tuple(np.shape(KQ))[:2]:
        raise ValueError(
            f"`resume`: {where} holds snapshots of {H} heads of size {D}, not this run's: the file is corrupted"
        )


# ------------------------------------------------------------------- trainer
def train(
    config: TrainConfig,
    *,
    out=None,
    resume: bool = False,
    checkpoint_every: int | None = None,
    stop_after: int | None = None,
    progress: bool = False,
    progress_seconds: float = 10.0,
    init_params: dict | None = None,
) -> TrainResult:
    """Train ``config.model()`` from its seeded init (or ``init_params``).

    Parameters
    ----------
    config : TrainConfig
    out : path-like, optional
        Folder for ``checkpoint.npz`` (written atomically every
        ``checkpoint_every`` steps, at the end, and on ``KeyboardInterrupt``).
    resume : bool
        Continue from ``out/checkpoint.npz`` (must describe the same run; ``steps``
        may be larger than the checkpoint's).
    checkpoint_every : int, optional
        Default: ``max(1000, steps // 20)`` when ``out`` is given.
    stop_after : int, optional
        Stop (status 1, checkpoint written) once this many steps are done.
    progress : bool
        Report step, loss and speed on stderr every ``progress_seconds``.
    progress_seconds : float, default 10.0
        Seconds between two progress lines.
    init_params : dict, optional
        Start from these parameters instead of the seeded init (not with ``resume``).

    Returns
    -------
    TrainResult

    Notes
    -----
    Interrupts are exact too: with ``out`` given (and in the main thread), a
    SIGINT (Ctrl-C) lets the current step finish, writes the checkpoint at that
    step boundary and then raises ``KeyboardInterrupt``, so resuming reproduces
    the uninterrupted run bit for bit. A ``KeyboardInterrupt`` raised inside a
    step before the optimiser update (e.g. from a callee) rewinds the prompt
    generator to the start of that step before checkpointing.

    Examples
    --------
    >>> r = train(TrainConfig(setting=Setting(d=3, L=10), seed=0, n_heads=2, steps=5, batch=8))
    >>> r.success, r.step, r.losses.shape
    (True, 5, (5,))
    """
    if not isinstance(config, TrainConfig):
        raise ValueError(f"`config` must be a TrainConfig, got {type(config).__name__}")
    model = config.model()
    shapes = model.param_shapes()
    ckpt_path = Path(out) / CHECKPOINT_NAME if out is not None else None
    if checkpoint_every is None:
        checkpoint_every = max(1000, config.steps // 20)
    checkpoint_every = check_positive_int("checkpoint_every", checkpoint_every)
    if stop_after is not None:
        stop_after = check_nonnegative_int("stop_after", stop_after)
    sched = snapshot_steps(config.steps, config.n_snapshots)

    if resume:
        if ckpt_path is None:
            raise ValueError("`resume` needs `out` (the folder holding checkpoint.npz)")
        if init_params is not None:
            raise ValueError("`init_params` cannot be combined with `resume`")
        ck = load_checkpoint(ckpt_path)
        if not config.same_run(ck.config):
            raise ValueError(
                f"`resume`: checkpoint {str(ckpt_path)!r} is from a different run ({ck.config}); "
                "use the same options or another --out"
            )
        if ck.stream_version != STREAM_VERSION:
            raise ValueError(
                f"`resume`: checkpoint {str(ckpt_path)!r} was written with training prompt stream version "
                f"{ck.stream_version}, and this package draws stream version {STREAM_VERSION}; the run cannot "
                "continue bit-identically: train it again (use --force / another --out), or resume it with the "
                "package version that wrote it"
            )
        if ck.step > config.steps:
            raise ValueError(f"`steps` must be >= the checkpoint's step {ck.step}, got {config.steps}")
        theta, m, v, step, rng = ck.theta.copy(), ck.m.copy(), ck.v.copy(), ck.step, ck.rng
        _check_resumed_params(model, shapes, theta, ck, where=repr(str(ckpt_path)))
        if config.optimizer == "adam":
            _check_adam_moments(m, v, ck.step, config.beta1, config.beta2, where=repr(str(ckpt_path)))
        losses = np.full(config.steps, np.nan)
        losses[:step] = ck.losses[:step]
        s_steps, s_KQ, s_ov = list(ck.snapshot_steps), list(ck.snapshot_KQ), list(ck.snapshot_ov)
    else:
        root = np.random.SeedSequence(config.seed)
        init_seq, data_seq = root.spawn(2)
        if init_params is None:
            params = model.init(seed=np.random.default_rng(init_seq))
        else:
            _check_params(
                init_params, shapes, finite=False, name="init_params"
            )  # finiteness: checked below, naming `init_params`
            params = init_params
        theta = flatten_params({k: np.asarray(params[k], dtype=np.float64) for k in shapes}).copy()
        if not np.all(np.isfinite(theta)):
            raise ValueError("`init_params` must contain only finite values (no NaN/inf)")
        unflatten_params(theta, shapes)  # validates the size
        m = np.zeros_like(theta)
        v = np.zeros_like(theta)
        step = 0
        rng = stream_generator(data_seq)
        losses = np.full(config.steps, np.nan)
        s_steps, s_KQ, s_ov = [], [], []

    P = unflatten_params(theta, shapes)  # views: updating theta updates P

    def snap(k):
        if (not s_steps or s_steps[-1] < k) and k in sched_set:
            KQ, ov = model._circuits(P)  # unchecked: a diverged step is reported by the next loss, not here
            s_steps.append(k)
            s_KQ.append(np.array(KQ))
            s_ov.append(np.array(ov))

    def checkpoint():
        # a non-finite state is never written: the last finite checkpoint stays (it is what a resume continues)
        if ckpt_path is not None and all_finite(theta, m, v):
            save_checkpoint(
                ckpt_path,
                config=config,
                theta=theta,
                m=m,
                v=v,
                step=step,
                rng=rng,
                losses=losses,
                snaps=(s_steps, s_KQ, s_ov),
            )

    sched_set = set(int(k) for k in sched)
    snap(step)
    end = config.steps if stop_after is None else min(config.steps, stop_after)
    status = 0
    t0 = time.perf_counter()
    t_report = t0
    step0 = step
    lr = config.lr
    sampler = TokenSampler(config.batch, config.setting)
    adam = config.optimizer == "adam"
    b1, b2, eps = config.beta1, config.beta2, config.eps
    # Ctrl-C is deferred to the next step boundary so that the checkpoint written on
    # interrupt is a consistent state (parameters, moments, step and RNG agree).
    sigint = {"pending": False, "installed": False, "previous": None}
    if ckpt_path is not None and threading.current_thread() is threading.main_thread():

        def _defer_sigint(_signum, _frame):
            sigint["pending"] = True

        sigint["previous"] = signal.signal(signal.SIGINT, _defer_sigint)
        sigint["installed"] = True
    phase = 0  # 0: at a step boundary; 1: drawing/differentiating (rewindable); 2: committing the update
    rng_state = None
    message = reason = None
    # overflow on divergence is reported through the finite-loss check (status 2), not as warnings
    errstate = np.errstate(over="ignore", invalid="ignore")
    errstate.__enter__()
    blas = single_blas_thread()
    blas.__enter__()
    try:
        while step < end:
            if sigint["pending"]:
                raise KeyboardInterrupt
            rng_state = rng.bit_generator.state
            phase = 1
            batch = _draw(sampler, rng)
            try:
                loss, grads = model._train_loss_and_grad(P, batch)
            except NormaliserError as exc:  # affine f: weights summing to ~0 would give inf/NaN
                loss, message, reason = math.nan, NORMALISER_MESSAGE + str(exc), str(exc)
            if not math.isfinite(loss):
                rng.bit_generator.state = rng_state  # the checkpoint resumes at this step
                phase = 0
                status = 2
                break
            g = np.concatenate([grads[k].ravel() for k in shapes])
            phase = 2
            if adam:
                _adam_update(theta, g, m, v, step + 1, lr=lr, beta1=b1, beta2=b2, eps=eps)
            else:
                _sgd_update(theta, g, lr=lr)
            losses[step] = loss
            step += 1
            snap(step)
            phase = 0
            if step % checkpoint_every == 0:
                checkpoint()
            if progress:
                now = time.perf_counter()
                if now - t_report >= progress_seconds:
                    t_report = now
                    rate = (step - step0) / (now - t0)
                    recent = np.nanmean(losses[max(0, step - 200) : step])
                    eta_s = (end - step) / rate if rate > 0 else float("inf")
                    sys.stderr.write(
                        f"step {step}/{config.steps}  loss(200) {recent:.5f}  {rate:.0f} steps/s  ETA {eta_s:.0f} s\n"
                    )
                    sys.stderr.flush()
    except KeyboardInterrupt:
        if phase == 1:  # raised inside a step, before the optimiser update: rewind the prompt stream
            rng.bit_generator.state = rng_state
        if phase != 2:  # mid-update the state is inconsistent: keep the last checkpoint instead
            checkpoint()
        raise
    finally:
        blas.__exit__(None, None, None)
        errstate.__exit__(None, None, None)
        if sigint["installed"]:  # None: the previous handler was not set from Python; use Python's default
            prev = sigint["previous"]
            signal.signal(signal.SIGINT, prev if prev is not None else signal.default_int_handler)
    seconds = time.perf_counter() - t0
    if status == 2 and resume and step == step0:
        # not a run that diverged now: the checkpoint's own parameters give a non-finite loss; nothing is written
        raise ValueError(
            f"`resume`: the loss is non-finite at the parameters of {str(ckpt_path)!r} (step {step}): the run it "
            "holds had diverged, or the file is corrupted; nothing to continue: train again with a smaller `lr` "
            "(`force`) or use another `out`"
        )
    if status == 2 and not resume and step == 0:
        # the initial parameters already give a non-finite loss or a broken normaliser: no step ran, so no
        # learning rate is to blame; the run is impossible as configured (bad input, nothing is written)
        act = config.setting.activation_fn
        why = f": {reason.split(': ', 1)[-1].split('; use ')[0]}" if reason else ""
        raise ValueError(
            (
                f"`activation_c` = {act.c:g} is too large for activation {act.name!r} at `init_scale` = "
                f"{config.init_scale:g}: the loss is not finite at the initial parameters (step 0){why}; the run "
                "cannot start: use a smaller `activation_c` (the allowed range (0, 1e6] bounds C, the start needs "
                "1 + C ω s > 0) or a smaller `init_scale`"
            )
            if act.uses_c
            else (
                f"`init_scale` = {config.init_scale:g}: the loss is not finite at the initial parameters (step 0)"
                f"{why}; the run cannot start: use a smaller `init_scale`"
            )
        )
    if status == 0 and step < config.steps:
        status = 1
    checkpoint()
    if sigint["pending"]:  # Ctrl-C arrived after the last step: the final checkpoint is written, report it
        raise KeyboardInterrupt
    done = step - step0
    return TrainResult(
        success=status == 0,
        status=status,
        message=message if (status == 2 and message) else MESSAGES[status],
        config=config,
        params={k: np.array(a) for k, a in P.items()},
        step=step,
        losses=losses[:step].copy(),
        snapshot_steps=np.asarray(s_steps, dtype=np.int64),
        snapshot_KQ=np.asarray(s_KQ),
        snapshot_ov=np.asarray(s_ov),
        seconds=seconds,
        steps_per_second=done / seconds if seconds > 0 else 0.0,
    )


def _draw(sampler: TokenSampler, rng: np.random.Generator):
    """The next training batch (one name for the tests to intercept)."""
    return sampler.draw(rng)


# --------------------------------------------------------------- evaluation
def _sample(n: int, setting: Setting, rng) -> Prompts:
    """``n`` fresh prompts of ``setting`` drawn in embedded form (the trainer's and the evaluators' sampler)."""
    return sample_tokens(n, setting, seed=rng)


def _eval_chunks(model, setting, n_prompts, chunk):
    """Chunk sizes of an evaluation: at most ``chunk`` prompts, and a working set within the memory budget.

    Working set per prompt: the embedded batch and its transposed copy (the attention
    models' second layout), the ``(H, L)`` scores and weights of the model, the reduced
    model and debiased GD (a conservative estimate).
    """
    H = int(getattr(model, "n_heads", 1))
    L, D = setting.L, setting.d + 1
    per = prompt_bytes(setting, kind="tokens") + 8 * (L * D + L * (3 * H + 6) + 2 * H * D + 8)
    return chunk_sizes(n_prompts, per, setting=setting, cap=chunk)


def _check_eval(model, params, setting, n_prompts, chunk, where) -> tuple[Setting, int, int]:
    from reduced_dynamics.model.attention import check_model

    check_model(model, params)
    setting = as_setting(setting, where).require_isotropic(where)
    if setting.d != model.d:
        raise ValueError(f"`setting.d` must equal the model's d = {model.d}, got {setting.d}")
    act = getattr(model, "activation", None)
    if model.kind != "linear" and act is not None and (act.name, act.c) != (setting.activation, setting.activation_c):
        raise ValueError(
            f"`setting.activation` must be the model's activation {act.name!r} (C = {act.c}), got "
            f"{setting.activation!r} (C = {setting.activation_c})"
        )
    n_prompts = check_n_prompts(n_prompts)
    return setting, n_prompts, check_positive_int("chunk", chunk)


def mc_risk(model, params, setting: Setting, *, n_prompts: int = 100_000, seed, chunk: int = 8192) -> RiskEstimate:
    """Monte Carlo risk ``E[(y_q − ŷ)²]`` on fresh prompts, with its standard error.

    Parameters
    ----------
    model, params : a model of :mod:`reduced_dynamics.model.attention` and its parameters
    setting : Setting
        Scalar, isotropic data model of the evaluation prompts (its ``L`` may
        differ from the training one); ``setting.d`` must be the model's ``d``.
    n_prompts : int, in [2, 1e9]
        Number of prompts.
    seed : int or Generator
        Required.
    chunk : int, >= 1
        Prompts drawn per batch, at most (fewer when ``chunk`` prompts would
        exceed the memory budget,
        :data:`~reduced_dynamics.estimation.prompts.CHUNK_BUDGET`). The
        prompts are drawn chunk by chunk from one generator, so the numbers
        depend on the chunk size as well as on ``seed`` (same distribution,
        different stream). Memory does not grow with ``n_prompts``.

    Returns
    -------
    RiskEstimate
        ``risk`` (sample mean of the squared errors), ``stderr`` (``ddof = 1``), ``n`` (= ``n_prompts``).

    Examples
    --------
    >>> from reduced_dynamics.model.attention import ReducedModel
    >>> m = ReducedModel(1, 3)
    >>> r = mc_risk(m, {"omega": [0.0], "mu": [0.0]}, Setting(d=3, L=10, sigma2=0.1), n_prompts=1000, seed=0)
    >>> abs(r.risk - 1.1) < 4 * r.stderr
    True
    """
    setting, n_prompts, chunk = _check_eval(model, params, setting, n_prompts, chunk, "mc_risk")
    rng = as_generator(seed)
    mom = _Moments(1)
    with single_blas_thread():
        for k in _eval_chunks(model, setting, n_prompts, chunk):
            tok = _sample(k, setting, rng)
            mom.add((model.predict(params, tok) - tok.y_q) ** 2)
    return RiskEstimate(risk=float(mom.mean[0]), stderr=mom.stderr(0), n=n_prompts, name="model")


@dataclass(frozen=True)
class CrossCheck(FrozenResult):
    """Trained model vs the reduced model vs debiased GD on common prompts (:func:`cross_check`).

    Attributes
    ----------
    omega, mu : ndarray, shape (H,)
        The extracted (ω, μ).
    eta : float
        The effective step ``C_f μᵀω`` (debiased GD's step; ``C_f = f'(0)/f(0)`` of the setting's
        activation, 1 for the softmax; docs/theory.md#other-activations).
    setting : Setting
        The data model of the evaluation prompts.
    n : int
        Prompts (the ``n_prompts`` of :func:`cross_check`).
    model, reduced, debiased_gd : RiskEstimate
        Risk of the trained model, of the reduced model at (ω, μ), of debiased GD at ``η``.
    diff_reduced, diff_debiased_gd : RiskDifference
        Paired differences ``model − reduced`` and ``model − debiased_gd``.
    """

    omega: np.ndarray
    mu: np.ndarray
    eta: float
    setting: Setting
    n: int
    model: RiskEstimate
    reduced: RiskEstimate
    debiased_gd: RiskEstimate
    diff_reduced: RiskDifference
    diff_debiased_gd: RiskDifference


def cross_check(
    model, params, setting: Setting, *, n_prompts: int = 100_000, seed, chunk: int = 8192, dummy_tol: float = 0.05
) -> CrossCheck:
    """Risk of the trained model vs the reduced model at its extracted (ω, μ) vs debiased GD at ``η = C_f μᵀω``.

    With an activation ``f`` (``setting.activation``) the reduced model uses the same ``f`` and
    the debiased-GD step is the claimed ``η_eff = C_f μᵀω`` (``= 2 C_f γ μ₊`` on the solution
    manifold; docs/theory.md#other-activations).

    All three predictors are evaluated on the same ``n_prompts`` fresh prompts (common
    random numbers), so the standard errors of the differences are small. The
    prompt stream is that of :func:`mc_risk` with the same ``seed`` and ``chunk``.

    Parameters
    ----------
    model, params : a model of :mod:`reduced_dynamics.model.attention` and its parameters
    setting : Setting
        Scalar, isotropic data model of the evaluation prompts; ``setting.d`` must be the model's ``d``.
    n_prompts : int, in [2, 1e9]
        Number of prompts.
    seed : int or Generator
        Required.
    chunk : int, >= 1
        Prompts per batch, at most (as in :func:`mc_risk`).
    dummy_tol : float in (0, 1)
        Dummy-head threshold of the circuit extraction.

    Returns
    -------
    CrossCheck

    References
    ----------
    docs/theory.md#predictors, docs/theory.md#theorem-1
    """
    from reduced_dynamics.model.attention import ReducedModel

    setting, n_prompts, chunk = _check_eval(model, params, setting, n_prompts, chunk, "cross_check")
    c = extract_circuits(model, params, dummy_tol=dummy_tol)
    red = ReducedModel(c.n_heads, c.d, activation=setting.activation_fn)
    rp = {"omega": c.omega, "mu": c.mu}
    eta = setting.activation_fn.c_f * c.eta_eff
    rng = as_generator(seed)
    # columns: model, reduced, debiased_gd, model − reduced, model − debiased_gd
    mom = _Moments(5)
    with single_blas_thread():
        for k in _eval_chunks(model, setting, n_prompts, chunk):
            tok = _sample(k, setting, rng)
            a = (model.predict(params, tok) - tok.y_q) ** 2
            b = (red.predict(rp, tok) - tok.y_q) ** 2
            g = (debiased_gd(tok, eta) - tok.y_q) ** 2
            mom.add(np.stack([a, b, g, a - b, a - g], axis=1))
    est = {
        k: RiskEstimate(float(mom.mean[i]), mom.stderr(i), n=n_prompts, name=k)
        for i, k in enumerate(("model", "reduced", "debiased_gd"))
    }
    diff = {
        k: RiskDifference(float(mom.mean[i]), mom.stderr(i), n=n_prompts, first="model", second=k)
        for i, k in ((3, "reduced"), (4, "debiased_gd"))
    }
    return CrossCheck(
        omega=c.omega,
        mu=c.mu,
        eta=eta,
        setting=setting,
        n=n_prompts,
        model=est["model"],
        reduced=est["reduced"],
        debiased_gd=est["debiased_gd"],
        diff_reduced=diff["reduced"],
        diff_debiased_gd=diff["debiased_gd"],
    )


@dataclass(frozen=True)
class LengthGeneralisation(FrozenResult):
    """Monte Carlo risk of one model at several context lengths (:func:`length_generalisation`).

    Attributes
    ----------
    L : ndarray of int, shape (K,)
        Context lengths.
    risk, stderr : ndarray, shape (K,)
        Risk and its standard error at each length.
    n : int
        Prompts per length (the ``n_prompts`` of :func:`length_generalisation`).
    setting : Setting
        The data model (its ``L`` replaced by each entry of ``L``).
    """

    L: np.ndarray
    risk: np.ndarray
    stderr: np.ndarray
    n: int
    setting: Setting


def length_generalisation(
    model, params, setting: Setting, *, Ls, n_prompts: int = 20_000, seed
) -> LengthGeneralisation:
    """Monte Carlo risk (with stderr) of ``model`` at each context length in ``Ls``.

    Length ``k`` is :func:`mc_risk` with ``setting.replace(L=Ls[k])`` and the
    ``k``-th child generator of ``seed`` (``Generator.spawn``).

    Parameters
    ----------
    model, params : a model of :mod:`reduced_dynamics.model.attention` and its parameters
    setting : Setting
        Scalar, isotropic data model; ``setting.L`` is replaced by each length.
    Ls : sequence of int, each >= 1
    n_prompts : int, in [2, 1e9]
        Prompts per length.
    seed : int or Generator
        Required.

    Returns
    -------
    LengthGeneralisation

    References
    ----------
    docs/theory.md#predictors (linear attention does not generalise in length)
    """
    setting = as_setting(setting, "length_generalisation")
    if isinstance(Ls, (str, bytes)) or np.ndim(Ls) != 1 or len(Ls) == 0:
        raise ValueError(f"`Ls` must be a non-empty sequence of positive integers, got {Ls!r}")
    Ls = [check_positive_int("Ls", x) for x in Ls]
    for Lk in Ls:
        _check_eval(model, params, setting.replace(L=Lk), n_prompts, 8192, "length_generalisation")
    rng = as_generator(seed)
    seeds = rng.spawn(len(Ls)) if hasattr(rng, "spawn") else [np.random.default_rng(rng.integers(2**63)) for _ in Ls]
    est = [mc_risk(model, params, setting.replace(L=Lk), n_prompts=n_prompts, seed=g) for Lk, g in zip(Ls, seeds)]
    return LengthGeneralisation(
        L=np.array(Ls, dtype=np.int64),
        risk=np.array([e.risk for e in est]),
        stderr=np.array([e.stderr for e in est]),
        n=int(n_prompts),
        setting=setting,
    )


@dataclass(frozen=True)
class RunSummary(FrozenResult):
    """Summary of a training run (:func:`summarize_run`); ``to_dict()`` is the CLI's ``final.json``.

    Attributes
    ----------
    success : bool
    status : int
    message : str
        As in :class:`TrainResult`.
    config : TrainConfig
    steps : int
        Steps completed.
    seconds, steps_per_second : float
        Training wall time and speed.
    train_loss_last1000 : float
        Mean training loss over the last (up to) 1000 steps.
    omega, mu : ndarray, shape (H,)
        Extracted (ω, μ).
    dummy : ndarray of bool, shape (H,)
    eta_eff : float
        ``C_f μᵀω`` (``μᵀω`` for the softmax, ``C_f = 1``; docs/theory.md#other-activations).
    patterns : PatternMetrics
    manifold : CircuitManifoldGap or None
        ``None`` when every head is dummy, or when the activation is not ``exp`` (the manifold
        ``S_γ`` is the softmax's; for other f see ``reduced_dynamics.activation_dynamics.flow``).
    risk, risk_stderr : float
        Monte Carlo risk of the trained model.
    risk_reduced, risk_reduced_stderr : float
        Of the reduced model at the extracted (ω, μ).
    risk_debiased_gd, risk_debiased_gd_stderr : float
        Of debiased GD at ``eta_eff``.
    diff_reduced, diff_reduced_stderr, diff_debiased_gd, diff_debiased_gd_stderr : float
        Paired differences ``model − other``.
    n_eval : int
        Evaluation prompts (the ``n_prompts`` of :func:`summarize_run`; the field keeps the
        ``final.json`` key).
    stream_version : int
        Version of the training prompt stream (``reduced_dynamics.model.training.STREAM_VERSION``).
    """

    success: bool
    status: int
    message: str
    config: TrainConfig
    steps: int
    seconds: float
    steps_per_second: float
    train_loss_last1000: float
    omega: np.ndarray
    mu: np.ndarray
    dummy: np.ndarray
    eta_eff: float
    patterns: PatternMetrics
    manifold: CircuitManifoldGap | None
    risk: float
    risk_stderr: float
    risk_reduced: float
    risk_reduced_stderr: float
    risk_debiased_gd: float
    risk_debiased_gd_stderr: float
    diff_reduced: float
    diff_reduced_stderr: float
    diff_debiased_gd: float
    diff_debiased_gd_stderr: float
    n_eval: int
    stream_version: int = STREAM_VERSION


def summarize_run(result: TrainResult, *, n_prompts: int = 20_000, seed, dummy_tol: float = 0.05) -> RunSummary:
    """Summary of a run: extracted (ω, μ), pattern metrics, manifold gap, risks.

    The risks come from :func:`cross_check` on ``n_prompts`` fresh prompts of the
    training setting, seeded by ``seed`` (choose it independent of the
    training seed; the CLI uses 12345).

    Parameters
    ----------
    result : TrainResult
    n_prompts : int, in [2, 1e9]
        Number of evaluation prompts.
    seed : int or Generator
        Required; seeds the evaluation prompts.
    dummy_tol : float in (0, 1)

    Returns
    -------
    RunSummary
    """
    if not isinstance(result, TrainResult):
        raise ValueError(f"`result` must be a TrainResult, got {type(result).__name__}")
    n_prompts = check_positive_int("n_prompts", n_prompts)
    if n_prompts < 2:
        raise ValueError(f"`n_prompts` must be an integer >= 2, got {n_prompts}")
    cfg = result.config
    model = cfg.model()
    c = extract_circuits(model, result.params, dummy_tol=dummy_tol)
    cc = cross_check(model, result.params, cfg.setting, n_prompts=n_prompts, seed=seed, dummy_tol=dummy_tol)
    # the solution manifold S_γ (μ_γ) is the softmax's; for another activation see activation_dynamics.flow
    gap = c.manifold_gap(cfg.setting) if (~c.dummy).any() and cfg.setting.activation == "exp" else None
    tail = result.losses[-min(1000, result.losses.size) :] if result.losses.size else np.array([np.nan])
    return RunSummary(
        success=result.success,
        status=result.status,
        message=result.message,
        config=cfg,
        steps=result.step,
        seconds=result.seconds,
        steps_per_second=result.steps_per_second,
        train_loss_last1000=float(np.mean(tail)),
        omega=c.omega,
        mu=c.mu,
        dummy=c.dummy,
        eta_eff=cc.eta,
        patterns=pattern_metrics(c),
        manifold=gap,
        risk=cc.model.risk,
        risk_stderr=cc.model.stderr,
        risk_reduced=cc.reduced.risk,
        risk_reduced_stderr=cc.reduced.stderr,
        risk_debiased_gd=cc.debiased_gd.risk,
        risk_debiased_gd_stderr=cc.debiased_gd.stderr,
        diff_reduced=cc.diff_reduced.risk,
        diff_reduced_stderr=cc.diff_reduced.stderr,
        diff_debiased_gd=cc.diff_debiased_gd.risk,
        diff_debiased_gd_stderr=cc.diff_debiased_gd.stderr,
        n_eval=cc.n,
        stream_version=result.stream_version,
    )


def write_outputs(out, result: TrainResult, summary: RunSummary, *, extra: dict | None = None) -> Path:
    """Write ``final.npz`` (params, losses, snapshots) and ``final.json`` under ``out`` atomically.

    Parameters
    ----------
    out : path-like
        Folder (created if needed).
    result : TrainResult
    summary : RunSummary or dict
        ``final.json`` is ``summary.to_dict()`` (a dict: itself, JSON-ready)...
    extra : dict, optional
        ...updated with these JSON-ready entries (e.g. a length-generalisation table).

    Returns
    -------
    Path
        The folder ``out``.
    """
    out = Path(out)
    atomic_savez(
        out / "final.npz",
        **{f"param_{k}": v for k, v in result.params.items()},
        losses=result.losses,
        snapshot_steps=result.snapshot_steps,
        snapshot_KQ=result.snapshot_KQ,
        snapshot_ov=result.snapshot_ov,
        stream_version=np.array(result.stream_version),
    )
    doc = summary.to_dict() if hasattr(summary, "to_dict") else dict(summary)
    atomic_write_json(out / "final.json", {**doc, **(extra or {})})
    return out
