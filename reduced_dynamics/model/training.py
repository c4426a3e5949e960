r"""Seeded, resumable training of the attention models (docs/theory.md#full-model, docs/theory.md#emergent-patterns) and cross-checks.

The trainer follows the paper's protocol: fresh prompts every step (drawn with
:func:`reduced_dynamics.model.attention.sample_tokens` from one seeded
``numpy.random.Generator``), Adam (PyTorch's update rule, lr 1e-3, batch 256) or
plain SGD, on the mean squared error. It is deterministic: the same
:class:`TrainConfig` gives bit-identical parameters, and a run interrupted at a
checkpoint and resumed ends with exactly the parameters of an uninterrupted run
(the checkpoint stores parameters, optimizer moments, step counter and the
generator's ``bit_generator.state``).

Cross-checks against the reduced theory (docs/theory.md#reduced-model, docs/theory.md#gradient-flow, docs/theory.md#predictors, docs/theory.md#theorem-1) are here too:
:func:`mc_risk` (Monte Carlo risk with standard error), :func:`cross_check` (trained
model vs the reduced model at the extracted (ω, μ) vs debiased GD at ``η = μᵀω``, on
common prompts; debiased GD is :func:`reduced_dynamics.estimation.predictors.debiased_gd`, the
package's one implementation, fed the prompts' sufficient statistics) and
:func:`length_generalisation`. The SGD-vs-flow and single-head checks live in
:mod:`reduced_dynamics.crosscheck.core`.
"""

from __future__ import annotations

import json
import math
import signal
import sys
import threading
import time
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from reduced_dynamics._validation import (
    check_nonnegative_float,
    check_nonnegative_int,
    check_positive_float,
    check_positive_int,
    check_probability,
)
from reduced_dynamics.estimation.predictors import PromptStats, debiased_gd
from reduced_dynamics.estimation.prompts import as_generator
from reduced_dynamics.io import atomic_savez, atomic_write_json
from reduced_dynamics.model.attention import (
    MODEL_KINDS,
    TokenBatch,
    _check_params,
    flatten_params,
    make_model,
    sample_tokens,
    unflatten_params,
)
from reduced_dynamics.model.circuits import extract_circuits

__all__ = [
    "OPTIMIZERS",
    "TrainConfig",
    "TrainResult",
    "adam_update",
    "sgd_update",
    "snapshot_steps",
    "train",
    "save_checkpoint",
    "load_checkpoint",
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


@dataclass(frozen=True)
class TrainConfig:
    """Configuration of one training run (validated when built).

    Parameters
    ----------
    n_heads, d, L : int, >= 1
    sigma2 : float, >= 0
    steps : int, >= 0
    batch : int, >= 1
    lr : float, > 0
    optimizer : {"adam", "sgd"}
    param : {"separate", "merged", "linear", "reduced"}
    seed : int, >= 0
        Seeds the initialisation and (through an independent child stream) the prompts.
    beta1, beta2 : float in (0, 1); eps : float > 0
        Adam constants (PyTorch defaults).
    n_snapshots : int, >= 1
        Circuit snapshots at about this many log-spaced steps (plus step 0).
    init_scale : float, >= 0
        Init scale of the reduced model only.
    """

    n_heads: int = 2
    d: int = 5
    L: int = 40
    sigma2: float = 0.1
    steps: int = 10_000
    batch: int = 256
    lr: float = 1e-3
    optimizer: str = "adam"
    param: str = "separate"
    seed: int = 0
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    n_snapshots: int = 40
    init_scale: float = 0.1

    def __post_init__(self):
        s = object.__setattr__
        s(self, "n_heads", check_positive_int("heads", self.n_heads))
        s(self, "d", check_positive_int("d", self.d))
        s(self, "L", check_positive_int("L", self.L))
        s(self, "sigma2", check_nonnegative_float("sigma2", self.sigma2))
        s(self, "steps", check_nonnegative_int("steps", self.steps))
        s(self, "batch", check_positive_int("batch", self.batch))
        s(self, "lr", check_positive_float("lr", self.lr))
        s(self, "seed", check_nonnegative_int("seed", self.seed))
        s(self, "beta1", check_probability("beta1", self.beta1))
        s(self, "beta2", check_probability("beta2", self.beta2))
        s(self, "eps", check_positive_float("eps", self.eps))
        s(self, "n_snapshots", check_positive_int("n_snapshots", self.n_snapshots))
        s(self, "init_scale", check_nonnegative_float("init_scale", self.init_scale))
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"`optimizer` must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}")
        if self.param not in MODEL_KINDS:
            raise ValueError(f"`param` must be one of {', '.join(MODEL_KINDS)}, got {self.param!r}")

    def model(self):
        """The model this configuration trains (linear attention: ``1/L`` hard-coded to the training ``L``)."""
        norm_L = self.L if self.param == "linear" else None
        return make_model(self.param, n_heads=self.n_heads, d=self.d, init_scale=self.init_scale, norm_L=norm_L)

    def same_run(self, other: TrainConfig) -> bool:
        """True if ``other`` describes the same run up to ``steps`` / ``n_snapshots``."""
        a, b = asdict(self), asdict(other)
        for k in ("steps", "n_snapshots"):
            a.pop(k), b.pop(k)
        return a == b


@dataclass(frozen=True)
class TrainResult:
    """Outcome of :func:`train` (fields in the spirit of scipy's ``OdeResult``).

    Attributes
    ----------
    success : bool
    status : int
        Key of :data:`MESSAGES`.
    message : str
    config : TrainConfig
    params : dict of ndarray
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


# ---------------------------------------------------------------- optimisers
def adam_update(theta, grad, m, v, t, *, lr, beta1=0.9, beta2=0.999, eps=1e-8):
    r"""One Adam step, in place on ``theta``, ``m``, ``v`` (PyTorch's formula).

    .. math::

        m \leftarrow \beta_1 m + (1-\beta_1) g,\quad v \leftarrow \beta_2 v + (1-\beta_2) g^2,\quad
        \theta \leftarrow \theta - \frac{\mathrm{lr}}{1-\beta_1^t}\,\frac{m}{\sqrt{v}/\sqrt{1-\beta_2^t} + \epsilon}

    ``t`` is the 1-based step count after this update. Returns ``theta``.
    """
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
    """One plain SGD step in place: ``θ ← θ − lr·g``. Returns ``theta``."""
    theta -= lr * grad
    return theta


def snapshot_steps(steps: int, n_snapshots: int) -> np.ndarray:
    """Steps ``0`` and about ``n_snapshots`` log-spaced steps in ``[1, steps]`` (always incl. ``steps``)."""
    steps = check_nonnegative_int("steps", steps)
    n_snapshots = check_positive_int("n_snapshots", n_snapshots)
    if steps == 0:
        return np.array([0])
    s = np.unique(np.round(np.logspace(0, math.log10(steps), n_snapshots)).astype(np.int64))
    return np.unique(np.concatenate([[0], s, [steps]]))


# --------------------------------------------------------------- checkpoints
def _rng_state_json(rng: np.random.Generator) -> str:
    return json.dumps(rng.bit_generator.state)


def _rng_from_json(text: str) -> np.random.Generator:
    state = json.loads(text)
    bitgen = getattr(np.random, state["bit_generator"])()
    bitgen.state = state
    return np.random.Generator(bitgen)


def save_checkpoint(path, *, config: TrainConfig, theta, m, v, step, rng, losses, snaps) -> Path:
    """Write a resumable checkpoint (atomic npz): params, Adam moments, step, RNG state, history."""
    s_steps, s_KQ, s_ov = snaps
    return atomic_savez(
        path,
        config=np.array(json.dumps(asdict(config))),
        theta=theta,
        m=m,
        v=v,
        step=np.array(step),
        rng_state=np.array(_rng_state_json(rng)),
        losses=np.asarray(losses[:step]),
        snapshot_steps=np.asarray(s_steps, dtype=np.int64),
        snapshot_KQ=np.asarray(s_KQ),
        snapshot_ov=np.asarray(s_ov),
    )


def load_checkpoint(path) -> dict:
    """Read a checkpoint written by :func:`save_checkpoint`.

    Returns a dict with ``config`` (a :class:`TrainConfig`), ``theta, m, v`` (flat
    float64), ``step`` (int), ``rng`` (a Generator in the saved state), ``losses``,
    ``snapshot_steps``, ``snapshot_KQ``, ``snapshot_ov``.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"`resume` needs a checkpoint, but {str(path)!r} does not exist")
    try:
        with np.load(path) as z:
            out = {k: z[k] for k in z.files}
        return {
            "config": TrainConfig(**json.loads(str(out["config"]))),
            "theta": out["theta"].astype(np.float64),
            "m": out["m"].astype(np.float64),
            "v": out["v"].astype(np.float64),
            "step": int(out["step"]),
            "rng": _rng_from_json(str(out["rng_state"])),
            "losses": out["losses"],
            "snapshot_steps": list(out["snapshot_steps"]),
            "snapshot_KQ": list(out["snapshot_KQ"]),
            "snapshot_ov": list(out["snapshot_ov"]),
        }
    except (OSError, EOFError, KeyError, TypeError, AttributeError, ValueError, zipfile.BadZipFile) as exc:
        raise ValueError(
            f"`resume`: {str(path)!r} is not a readable checkpoint ({type(exc).__name__}: {exc})"
        ) from None


CHECKPOINT_NAME = "checkpoint.npz"


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
    >>> r = train(TrainConfig(n_heads=2, d=3, L=10, steps=5, batch=8))
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
        if not config.same_run(ck["config"]):
            raise ValueError(
                f"`resume`: checkpoint {str(ckpt_path)!r} is from a different run ({ck['config']}); "
                "use the same options or another --out"
            )
        if ck["step"] > config.steps:
            raise ValueError(f"`steps` must be >= the checkpoint's step {ck['step']}, got {config.steps}")
        theta, m, v, step, rng = ck["theta"], ck["m"], ck["v"], ck["step"], ck["rng"]
        losses = np.full(config.steps, np.nan)
        losses[:step] = ck["losses"][:step]
        s_steps, s_KQ, s_ov = ck["snapshot_steps"], ck["snapshot_KQ"], ck["snapshot_ov"]
    else:
        root = np.random.SeedSequence(config.seed)
        init_seq, data_seq = root.spawn(2)
        if init_params is None:
            params = model.init(np.random.default_rng(init_seq))
        else:
            _check_params(init_params, shapes)
            params = init_params
        theta = flatten_params({k: np.asarray(params[k], dtype=np.float64) for k in shapes}).copy()
        if not np.all(np.isfinite(theta)):
            raise ValueError("`init_params` must contain only finite values (no NaN/inf)")
        unflatten_params(theta, shapes)  # validates the size
        m = np.zeros_like(theta)
        v = np.zeros_like(theta)
        step = 0
        rng = np.random.default_rng(data_seq)
        losses = np.full(config.steps, np.nan)
        s_steps, s_KQ, s_ov = [], [], []

    P = unflatten_params(theta, shapes)  # views: updating theta updates P

    def snap(k):
        if (not s_steps or s_steps[-1] < k) and k in sched_set:
            KQ, ov = model.circuits(P)
            s_steps.append(k)
            s_KQ.append(np.array(KQ))
            s_ov.append(np.array(ov))

    def checkpoint():
        if ckpt_path is not None:
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
    n, d, L, s2, lr = config.batch, config.d, config.L, config.sigma2, config.lr
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
    # overflow on divergence is reported through the finite-loss check (status 2), not as warnings
    errstate = np.errstate(over="ignore", invalid="ignore")
    errstate.__enter__()
    try:
        while step < end:
            if sigint["pending"]:
                raise KeyboardInterrupt
            rng_state = rng.bit_generator.state
            phase = 1
            tok = sample_tokens(n, d=d, L=L, sigma2=s2, seed=rng)
            loss, grads = model.loss_and_grad(P, tok)
            if not math.isfinite(loss):
                rng.bit_generator.state = rng_state  # the checkpoint resumes at this step
                phase = 0
                status = 2
                break
            g = np.concatenate([grads[k].ravel() for k in shapes])
            phase = 2
            if adam:
                adam_update(theta, g, m, v, step + 1, lr=lr, beta1=b1, beta2=b2, eps=eps)
            else:
                sgd_update(theta, g, lr=lr)
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
        errstate.__exit__(None, None, None)
        if sigint["installed"]:  # None: the previous handler was not set from Python; use Python's default
            prev = sigint["previous"]
            signal.signal(signal.SIGINT, prev if prev is not None else signal.default_int_handler)
    seconds = time.perf_counter() - t0
    if status == 0 and step < config.steps:
        status = 1
    checkpoint()
    if sigint["pending"]:  # Ctrl-C arrived after the last step: the final checkpoint is written, report it
        raise KeyboardInterrupt
    done = step - step0
    return TrainResult(
        success=status == 0,
        status=status,
        message=MESSAGES[status],
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


# --------------------------------------------------------------- evaluation
def _mean_se(sq: np.ndarray) -> tuple[float, float]:
    return float(sq.mean()), float(sq.std(ddof=1) / math.sqrt(sq.size))


def _chunks(n, chunk):
    while n > 0:
        k = min(n, chunk)
        yield k
        n -= k


def mc_risk(model, params, *, L, sigma2, n: int = 100_000, seed=0, chunk: int = 8192) -> tuple[float, float]:
    """Monte Carlo risk ``E[(y_q − ŷ)²]`` on fresh prompts, with its standard error.

    Parameters
    ----------
    model, params : a model of :mod:`reduced_dynamics.model.attention` and its parameters
    L : int, >= 1
        Context length of the evaluation prompts (may differ from training).
    sigma2 : float, >= 0
    n : int, >= 2
        Number of prompts.
    seed : int or Generator
    chunk : int, >= 1
        Prompts drawn per batch (memory). The prompts are drawn chunk by chunk
        from one generator, so the numbers depend on ``chunk`` as well as on
        ``seed`` (same distribution, different stream).

    Returns
    -------
    risk, stderr : float
        Sample mean of the squared errors and its standard error
        (``ddof = 1``).
    """
    n = check_positive_int("n", n)
    if n < 2:
        raise ValueError(f"`n` must be an integer >= 2, got {n}")
    chunk = check_positive_int("chunk", chunk)
    rng = as_generator(seed)
    sq = np.concatenate(
        [
            (model.predict(params, tok) - tok.yq) ** 2
            for tok in (sample_tokens(k, d=model.d, L=L, sigma2=sigma2, seed=rng) for k in _chunks(n, chunk))
        ]
    )
    return _mean_se(sq)


def _tokens_to_stats(tok: TokenBatch, sigma2: float) -> PromptStats:
    """Sufficient statistics (``s = X x_q``, ``y``, ``y_q``, ``|x_q|²``) of a :class:`TokenBatch`."""
    Z, xq = tok.Z, tok.xq
    d = Z.shape[-1] - 1
    return PromptStats(
        s=np.matmul(Z[..., :d], xq[:, :, None])[..., 0],
        y=Z[..., d],
        yq=tok.yq,
        xq_norm2=np.einsum("nd,nd->n", xq, xq),
        d=d,
        sigma2=float(sigma2),
    )


def cross_check(
    model, params, *, L, sigma2, n: int = 100_000, seed=0, chunk: int = 8192, dummy_tol: float = 0.05
) -> dict:
    """Risk of the trained model vs the reduced model at its extracted (ω, μ) vs debiased GD at ``η = μᵀω``.

    All three predictors are evaluated on the same ``n`` fresh prompts (common
    random numbers), so the standard errors of the differences are small. The
    prompt stream is that of :func:`mc_risk` with the same ``seed`` and ``chunk``.

    Parameters
    ----------
    model, params : a model of :mod:`reduced_dynamics.model.attention` and its parameters
    L : int, >= 1
    sigma2 : float, >= 0
    n : int, >= 2
    seed : int or Generator
    chunk : int, >= 1
    dummy_tol : float in (0, 1)

    Returns
    -------
    dict
        ``omega, mu`` (shape ``(H,)``), ``eta``, ``n``, ``L``; for ``model``,
        ``reduced``, ``debiased_gd``: risk and ``*_stderr``; plus
        ``diff_reduced`` / ``diff_debiased_gd`` (model − other) with ``*_stderr``.
    """
    from reduced_dynamics.model.attention import ReducedModel

    n = check_positive_int("n", n)
    if n < 2:
        raise ValueError(f"`n` must be an integer >= 2, got {n}")
    chunk = check_positive_int("chunk", chunk)
    c = extract_circuits(model, params, dummy_tol=dummy_tol)
    red = ReducedModel(c.n_heads, c.d)
    rp = {"omega": c.omega, "mu": c.mu}
    eta = c.eta_eff
    rng = as_generator(seed)
    cols = {"model": [], "reduced": [], "debiased_gd": []}
    for k in _chunks(n, chunk):
        tok = sample_tokens(k, d=model.d, L=L, sigma2=sigma2, seed=rng)
        cols["model"].append((model.predict(params, tok) - tok.yq) ** 2)
        cols["reduced"].append((red.predict(rp, tok) - tok.yq) ** 2)
        cols["debiased_gd"].append((debiased_gd(_tokens_to_stats(tok, sigma2), eta) - tok.yq) ** 2)
    sq = {k: np.concatenate(v) for k, v in cols.items()}
    out = {"omega": c.omega, "mu": c.mu, "eta": eta, "n": n, "L": L}
    for k, a in sq.items():
        out[k], out[k + "_stderr"] = _mean_se(a)
    for k in ("reduced", "debiased_gd"):
        out[f"diff_{k}"], out[f"diff_{k}_stderr"] = _mean_se(sq["model"] - sq[k])
    return out


def length_generalisation(model, params, *, Ls, sigma2, n: int = 20_000, seed=0) -> dict:
    """Monte Carlo risk (with stderr) of ``model`` at each context length in ``Ls``.

    Returns ``{"L": [...], "risk": [...], "stderr": [...]}``; each length uses its
    own child seed of ``seed``.
    """
    Ls = [check_positive_int("L", x) for x in Ls]
    rng = as_generator(seed)
    seeds = rng.spawn(len(Ls)) if hasattr(rng, "spawn") else [np.random.default_rng(rng.integers(2**63)) for _ in Ls]
    risk, se = [], []
    for Lk, g in zip(Ls, seeds):
        r, s = mc_risk(model, params, L=Lk, sigma2=sigma2, n=n, seed=g)
        risk.append(r)
        se.append(s)
    return {"L": Ls, "risk": risk, "stderr": se}


def summarize_run(
    result: TrainResult, *, n_eval: int = 20_000, eval_seed: int = 12345, dummy_tol: float = 0.05
) -> dict:
    """JSON-ready summary of a run: extracted (ω, μ), pattern metrics, manifold gap, risks.

    The risks come from :func:`cross_check` on ``n_eval`` fresh prompts at the
    training ``L`` (seeded by ``eval_seed``, independent of the training stream).
    """
    from reduced_dynamics.model.circuits import manifold_gap, pattern_metrics

    cfg = result.config
    model = cfg.model()
    c = extract_circuits(model, result.params, dummy_tol=dummy_tol)
    cc = cross_check(model, result.params, L=cfg.L, sigma2=cfg.sigma2, n=n_eval, seed=eval_seed, dummy_tol=dummy_tol)
    gap = manifold_gap(c, L=cfg.L, sigma2=cfg.sigma2) if (~c.dummy).any() else None
    tail = result.losses[-min(1000, result.losses.size) :] if result.losses.size else np.array([np.nan])
    return {
        "success": result.success,
        "status": result.status,
        "message": result.message,
        "config": asdict(cfg),
        "steps": result.step,
        "seconds": result.seconds,
        "steps_per_second": result.steps_per_second,
        "train_loss_last1000": float(np.mean(tail)),
        "omega": c.omega,
        "mu": c.mu,
        "dummy": c.dummy,
        "eta_eff": c.eta_eff,
        "patterns": pattern_metrics(c),
        "manifold": gap,
        "risk": cc["model"],
        "risk_stderr": cc["model_stderr"],
        "risk_reduced": cc["reduced"],
        "risk_reduced_stderr": cc["reduced_stderr"],
        "risk_debiased_gd": cc["debiased_gd"],
        "risk_debiased_gd_stderr": cc["debiased_gd_stderr"],
        "diff_reduced": cc["diff_reduced"],
        "diff_reduced_stderr": cc["diff_reduced_stderr"],
        "diff_debiased_gd": cc["diff_debiased_gd"],
        "diff_debiased_gd_stderr": cc["diff_debiased_gd_stderr"],
        "n_eval": n_eval,
    }


def write_outputs(out, result: TrainResult, summary: dict) -> tuple[Path, Path]:
    """Write ``final.npz`` (params, losses, snapshots) and ``final.json`` (summary) under ``out`` atomically."""
    out = Path(out)
    npz = atomic_savez(
        out / "final.npz",
        **{f"param_{k}": v for k, v in result.params.items()},
        losses=result.losses,
        snapshot_steps=result.snapshot_steps,
        snapshot_KQ=result.snapshot_KQ,
        snapshot_ov=result.snapshot_ov,
    )
    js = atomic_write_json(out / "final.json", summary)
    return npz, js
