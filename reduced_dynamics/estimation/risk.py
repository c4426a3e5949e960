r"""Chunked, seeded Monte Carlo estimation of prediction risks.

The risk of a predictor is :math:`\mathcal E(\hat y) = E[(y_q - \hat y)^2]`
over β, the prompt and the query, noise included (docs/theory.md#data-model). The engine

* draws prompts in fixed **blocks** of ``block_size`` prompts, block ``i`` from
  its own generator ``Generator(SFC64(SeedSequence(seed, spawn_key=(i,))))``
  (the ``i``-th child of ``SeedSequence(seed).spawn``);
* evaluates all predictors on the same prompts (common random numbers) in
  **chunks** of whole blocks, the chunk size chosen from ``memory_budget``;
* reduces each block to its mean vector and centred cross-product matrix and
  merges the blocks in block order (Chan et al.'s pairwise update).

Hence the numbers depend on ``(seed, n_prompts, setting, sampler, conditional)``
and the predictors, and are **bit-for-bit independent of the chunk size /
memory budget**. They do depend on the sampler: ``"stats"`` (the
statistics-only sampler, ``sample_prompts(..., stats_only=True)``, cost
independent of ``d``, isotropic only), ``"gram"`` (Bayes ridge and ŷ = 0 only,
isotropic, ``L >= d``: the Gram matrix ``XᵀX`` by Bartlett's construction and
the query in its own frame, ``reduced_dynamics.estimation._fast``) and ``"full"``
(:func:`reduced_dynamics.sample_prompts`) draw different streams from the same
seed. ``sampler="auto"`` picks ``"stats"`` when every predictor allows it and
``setting.Sigma`` is None, else ``"gram"`` when it can serve every predictor,
else ``"full"``. :data:`STREAM_VERSION` versions these streams.

Speed. The package's predictor classes are evaluated by fused kernels
(``reduced_dynamics.estimation._fast``): one block of prompts at a time in
reused buffers, every predictor's loss from a few shared reductions. Other
:class:`~reduced_dynamics.estimation.predictors.Predictor` subclasses, and the
``"full"`` sampler, go through their ``weights`` (the generic path); the
two paths agree to rounding on the same prompts. All of it runs with one
BLAS thread; to use several cores run independent seeds in separate
processes (e.g. ``concurrent.futures.ProcessPoolExecutor`` or the sweep
executor) and average their risks weighted by ``n``.

With ``conditional=True`` each prompt contributes the risk conditional on its
covariates, :func:`reduced_dynamics.conditional_loss` (Rao–Blackwellisation):
same mean, smaller variance, and the responses need not be drawn at all.

From the merged statistics :class:`RiskResult` gives each risk with its
standard error, paired differences on common random numbers
(:meth:`RiskResult.difference`) and control-variate estimates
(:meth:`RiskResult.control_variate`).

References
----------
docs/theory.md#predictors
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from reduced_dynamics._results import FrozenResult
from reduced_dynamics._validation import check_finite_float, check_positive_int
from reduced_dynamics.estimation._fast import (
    GramBlock,
    draw_gram,
    draw_gram32,
    draw_stats32,
    gram_losses,
    gram_spec,
    stats_buffers,
    stats_losses,
    stats_spec,
)
from reduced_dynamics.estimation._threads import single_blas_thread
from reduced_dynamics.estimation.predictors import Predictor, conditional_loss
from reduced_dynamics.estimation.prompts import (
    CHUNK_BUDGET,
    MEMORY_BUDGET,
    Prompts,
    _concat,
    _draw_stats_into,
    _flag,
    _mib,
    _sample_full,
    check_n_prompts,
)
from reduced_dynamics.setting import Setting, as_setting

__all__ = [
    "RiskEstimate",
    "RiskDifference",
    "ControlVariateEstimate",
    "RiskResult",
    "ChunkPlan",
    "estimate_risks",
    "estimate_risk",
    "control_variate_risk",
    "plan_chunks",
    "DEFAULT_MEMORY_BUDGET",
    "STREAM_VERSION",
]

#: Default memory budget of one chunk's working arrays, in bytes (256 MiB,
#: :data:`reduced_dynamics.estimation.prompts.CHUNK_BUDGET`).
DEFAULT_MEMORY_BUDGET = CHUNK_BUDGET
_SAMPLERS = ("auto", "stats", "gram", "full")
_PRECISIONS = ("auto", "double", "single")

#: Version of the engine's random streams, recorded in every :class:`RiskResult`. Results with
#: the same ``(seed, n_prompts, setting, sampler, conditional, predictors)`` and the same version
#: are reproducible. Version 2 added the ``"gram"`` sampler (Bartlett construction of ``XᵀX``),
#: which ``sampler="auto"`` now picks for Bayes ridge (version 1 drew full covariates for it);
#: the ``"stats"`` and ``"full"`` streams are those of version 1. Version 3 made ``precision="auto"``
#: the default: the ``"stats"`` and ``"gram"`` samplers of the numpy backend now draw their
#: single-precision streams (float32 Box–Muller normals from raw SFC64 words,
#: ``reduced_dynamics.estimation._fast.normals32``; Gamma variates for the χ²), and the
#: single-precision ``"stats"`` stream itself changed (version 2 drew its uniforms with
#: ``Generator.random``). The double-precision streams (``precision="double"``, the numba backend,
#: ``"full"``) are those of version 2. Version 4 changed the single-precision streams again: a χ² with at
#: most eight degrees of freedom (``|x_q|²`` at d <= 8, ``|β_⊥|² d ~ χ²_{d−1}`` at d <= 9, Bartlett rows at L − i <= 8) is
#: built from float32 uniforms, ``−2 log`` of a product of ``k // 2`` of them, plus the square of one
#: normal when ``k`` is odd (``reduced_dynamics.estimation._fast.chi2_32``), instead of a Gamma variate, and
#: the blocks hold 3072 (statistics) and 4096 (Gram) prompts instead of 2048. The double-precision
#: streams are still those of version 2.
STREAM_VERSION = 4


# ----------------------------------------------------------------- result types


@dataclass(frozen=True)
class RiskEstimate(FrozenResult):
    """Monte Carlo estimate of one risk.

    Attributes
    ----------
    risk : float
        Sample mean of the per-prompt losses.
    stderr : float
        Its standard error, ``sqrt(sample variance / n)`` (sample variance with
        ``ddof=1``; the engine needs ``n >= 2``).
    n : int
        Number of prompts.
    name : str
        Predictor name.
    """

    risk: float
    stderr: float
    n: int
    name: str = ""


@dataclass(frozen=True)
class RiskDifference(FrozenResult):
    """Paired estimate of ``risk(first) - risk(second)`` on common random numbers.

    Attributes
    ----------
    risk : float
        Estimated difference.
    stderr : float
        Standard error of the paired difference.
    n : int
        Number of prompts.
    first, second : str
        Predictor names.
    """

    risk: float
    stderr: float
    n: int
    first: str
    second: str


@dataclass(frozen=True)
class ControlVariateEstimate(FrozenResult):
    r"""Control-variate estimate :math:`\bar\ell - c(\bar\ell_{c} - \mathcal E_c)`.

    Attributes
    ----------
    risk : float
        Adjusted estimate.
    stderr : float
        Its standard error, :math:`\sqrt{\hat V_\ell(1-\hat\rho^2)/n}` (residual
        variance with ``n - 2`` degrees of freedom).
    n : int
        Number of prompts.
    coefficient : float
        Estimated optimal coefficient :math:`c = \widehat{\mathrm{Cov}}(\ell,\ell_c)/\widehat{\mathrm{Var}}(\ell_c)`.
    variance_reduction : float
        ``plain_stderr² / stderr²`` (≈ :math:`1/(1-\rho^2)`); ``inf`` exactly when the
        control reproduces the target's losses up to a constant (zero residual
        variance, e.g. the target as its own control): the estimate is then exact.
    plain_risk : float
        The unadjusted estimate.
    plain_stderr : float
        Its standard error.
    control_risk : float
        The exact risk of the control that was supplied.
    name : str
        Name of the target predictor.
    control : str
        Name of the control predictor.
    """

    risk: float
    stderr: float
    n: int
    coefficient: float
    variance_reduction: float
    plain_risk: float
    plain_stderr: float
    control_risk: float
    name: str = ""
    control: str = ""


@dataclass(frozen=True)
class ChunkPlan(FrozenResult):
    """How the engine splits the prompts (:func:`plan_chunks`).

    Attributes
    ----------
    block_size : int
        Prompts per RNG block (a function of the problem and the stream's precision only; the value a
        :class:`RiskResult` records is the one its prompts were drawn with).
    blocks_per_chunk : int
        Whole blocks evaluated together (from the memory budget).
    n_blocks : int
        Number of blocks, ``ceil(n_prompts / block_size)``.
    """

    block_size: int
    blocks_per_chunk: int
    n_blocks: int


@dataclass(frozen=True)
class RiskResult(FrozenResult):
    """Merged Monte Carlo statistics of several predictors on common prompts.

    ``result[name]`` is the :class:`RiskEstimate` of one predictor.

    Attributes
    ----------
    names : tuple of str, length P
        Predictor names, in order.
    mean : ndarray, shape (P,)
        Mean loss per predictor (read-only).
    cov : ndarray, shape (P, P)
        Sample covariance (``ddof=1``) of the per-prompt losses (read-only).
    n : int
        Number of prompts.
    seed : int
        Root seed of the block streams.
    sampler : str
        ``"stats"``, ``"gram"`` or ``"full"``.
    conditional : bool
        Whether the per-prompt losses were Rao–Blackwellised.
    seconds : float
        Wall time of the estimation.
    block_size, blocks_per_chunk : int
        The plan used (:func:`plan_chunks`); the numbers do not depend on
        ``blocks_per_chunk``. (The fused path evaluates one block at a time, in
        slices of prompts when the budget is smaller than a block.)
    setting : Setting or None
        The data model.
    stream_version : int
        :data:`STREAM_VERSION` of the engine that drew the prompts.
    precision : str
        ``"double"`` or ``"single"``, as resolved from ``"auto"`` (:func:`estimate_risks`).
    """

    names: tuple
    mean: np.ndarray
    cov: np.ndarray
    n: int
    seed: int
    sampler: str
    conditional: bool
    seconds: float
    block_size: int = 0
    blocks_per_chunk: int = 0
    setting: Setting | None = None
    stream_version: int = STREAM_VERSION
    precision: str = "double"

    def _index(self, name) -> int:
        try:
            return self.names.index(name)
        except ValueError:
            raise ValueError(f"`name` must be one of {list(self.names)}, got {name!r}") from None

    def __getitem__(self, name) -> RiskEstimate:
        i = self._index(name)
        return RiskEstimate(float(self.mean[i]), math.sqrt(max(self.cov[i, i], 0.0) / self.n), self.n, name)

    @property
    def estimates(self) -> dict:
        """``{name: RiskEstimate}`` in predictor order."""
        return {name: self[name] for name in self.names}

    def difference(self, first, second) -> RiskDifference:
        """Paired estimate of ``risk(first) - risk(second)`` with its standard error."""
        i, j = self._index(first), self._index(second)
        var = self.cov[i, i] + self.cov[j, j] - 2.0 * self.cov[i, j]
        return RiskDifference(
            float(self.mean[i] - self.mean[j]), math.sqrt(max(var, 0.0) / self.n), self.n, first, second
        )

    def control_variate(self, name, control, *, control_risk) -> ControlVariateEstimate:
        r"""Risk of ``name`` adjusted by ``control`` whose exact risk is ``control_risk``.

        .. math:: \hat{\mathcal E}_{cv} = \bar\ell - c^*(\bar\ell_c - \mathcal E_c),\quad
                  c^* = \widehat{\mathrm{Cov}}(\ell,\ell_c)/\widehat{\mathrm{Var}}(\ell_c).

        The coefficient is estimated from the same prompts (bias ``O(1/n)``).
        """
        i, j = self._index(name), self._index(control)
        control_risk = check_finite_float("control_risk", control_risk)
        if self.n < 3:
            raise ValueError(f"`n` must be >= 3 for a control-variate estimate, got {self.n}")
        vi, vj, cij = self.cov[i, i], self.cov[j, j], self.cov[i, j]
        if not vj > 0:
            raise ValueError(f"`control` must have a loss with positive variance, got {control!r}")
        coef = cij / vj
        est = self.mean[i] - coef * (self.mean[j] - control_risk)
        resid = max(vi - cij * cij / vj, 0.0) * (self.n - 1) / (self.n - 2)
        plain_se = math.sqrt(max(vi, 0.0) / self.n)
        se = math.sqrt(resid / self.n)
        return ControlVariateEstimate(
            risk=float(est),
            stderr=se,
            n=self.n,
            coefficient=float(coef),
            variance_reduction=float(plain_se**2 / se**2) if se > 0 else math.inf,
            plain_risk=float(self.mean[i]),
            plain_stderr=plain_se,
            control_risk=control_risk,
            name=name,
            control=control,
        )


# ------------------------------------------------------------------- planning


def _block_size(sampler: str, d: int, L: int, precision: str = "single") -> int:
    """Prompts per RNG block; a function of the problem and the stream only (never of the budget).

    The single-precision streams of version 4 draw larger blocks, up to 3072 prompts (statistics) and
    4096 (Gram): their per-block cost is a few dozen numpy calls, and the statistics block's float32
    arrays stay about as large as the version-2 float64 ones; every other stream keeps the 2048 of version 2.
    """
    if sampler == "stats":
        return max(1, min(3072 if precision == "single" else 2048, 2**20 // L))
    if sampler == "gram":
        return max(1, min(4096 if precision == "single" else 2048, 2**20 // (d * d)))
    return max(1, min(2048, 2**20 // (L * d)))


def _bytes_per_prompt(sampler: str, d: int, L: int, n_heads: int, n_pred: int) -> int:
    """Conservative working-set estimate (float64) for one prompt."""
    per = L * (4 + 3 * n_heads + 2 * n_pred) + 4 * n_pred + 8
    if sampler == "full":
        per += 3 * L * d + 3 * d * d + 4 * d
    elif sampler == "gram":
        per = 6 * d * d + 8 * d + 4 * n_pred + 8
    return 8 * per


def plan_chunks(
    n_prompts,
    setting,
    *,
    sampler="stats",
    n_heads=1,
    n_predictors=1,
    memory_budget=DEFAULT_MEMORY_BUDGET,
    precision="single",
) -> ChunkPlan:
    """How the engine splits ``n_prompts`` prompts into RNG blocks and chunks.

    Parameters
    ----------
    n_prompts : int, >= 1
    setting : Setting
        Scalar data model (``d`` and ``L`` set the block size).
    sampler : {"stats", "gram", "full"}
    n_heads : int, >= 1
        Total number of attention heads over the predictors (working memory).
    n_predictors : int, >= 1
    memory_budget : int, >= 1
        Bytes allowed for one chunk's working arrays.
    precision : {"single", "double"}
        The stream: ``"single"`` (what :func:`estimate_risks` draws by default for the package's
        predictors on the ``"stats"`` and ``"gram"`` samplers) or ``"double"`` (``precision="double"``,
        the numba backend, the ``"full"`` sampler, other predictors). The block size of the
        ``"stats"`` and ``"gram"`` samplers depends on it: 3072 and 4096 prompts single, 2048 double
        (at most ``2²⁰ / L`` and ``2²⁰ / d²``).

    Returns
    -------
    ChunkPlan
        ``block_size`` depends on the problem and ``precision`` only; ``blocks_per_chunk`` is the
        largest number of whole blocks whose estimated working set fits in
        ``memory_budget`` (at least one block). A block larger than the budget is
        evaluated in slices of prompts that fit (same numbers).

    Raises
    ------
    ValueError
        If one prompt's working set alone exceeds both ``memory_budget`` and
        :data:`~reduced_dynamics.estimation.prompts.MEMORY_BUDGET` (``L`` or
        ``d`` too large for Monte Carlo), naming ``L`` and the sizes. A budget
        smaller than one prompt evaluates one prompt at a time.
    """
    n = check_n_prompts(n_prompts, minimum=1)
    setting = as_setting(setting, "plan_chunks")
    memory_budget = check_positive_int("memory_budget", memory_budget)
    n_heads = check_positive_int("n_heads", n_heads)
    n_predictors = check_positive_int("n_predictors", n_predictors)
    if not isinstance(sampler, str) or sampler not in ("stats", "gram", "full"):
        raise ValueError(f"`sampler` must be 'stats', 'gram' or 'full', got {sampler!r}")
    if not isinstance(precision, str) or precision not in ("single", "double"):
        raise ValueError(f"`precision` must be 'single' or 'double', got {precision!r}")
    d, L = setting.d, setting.L
    per_prompt = _bytes_per_prompt(sampler, d, L, n_heads, n_predictors)
    if per_prompt > max(memory_budget, MEMORY_BUDGET):
        raise ValueError(
            f"`L` = {L} (with d = {d}) is too large for Monte Carlo: one prompt needs about {_mib(per_prompt)} "
            f"of working memory, more than the memory budget of {_mib(max(memory_budget, MEMORY_BUDGET))}"
        )
    B = min(_block_size(sampler, d, L, precision), n)
    per_block = B * per_prompt
    k = max(1, memory_budget // per_block)
    n_blocks = -(-n // B)
    return ChunkPlan(block_size=B, blocks_per_chunk=int(min(k, n_blocks)), n_blocks=n_blocks)


# --------------------------------------------------------------------- engine


def _normalise_predictors(predictors):
    if isinstance(predictors, Predictor):
        predictors = [predictors]
    if isinstance(predictors, Mapping):
        items = list(predictors.items())
    elif isinstance(predictors, Sequence) and not isinstance(predictors, str):
        items = [(getattr(p, "name", f"p{i}"), p) for i, p in enumerate(predictors)]
    else:
        raise ValueError(f"`predictors` must be a Predictor, a sequence or a mapping, got {type(predictors).__name__}")
    if not items:
        raise ValueError("`predictors` must be non-empty")
    names = [str(k) for k, _ in items]
    if len(set(names)) != len(names):
        raise ValueError(f"`predictors` must have unique names, got {names}")
    for name, p in items:
        if not isinstance(p, Predictor):
            raise ValueError(f"`predictors` must be Predictor objects, got {type(p).__name__} for {name!r}")
        if p.batch_shape != ():
            raise ValueError(
                f"`predictors` must have scalar parameters (one risk each), got batch shape {p.batch_shape} "
                f"for {name!r}: pass one predictor per parameter value"
            )
    return tuple(names), tuple(p for _, p in items)


class _Moments:
    """Running mean and centred cross-products of ``P`` columns, merged block by block (Chan et al.; internal).

    Memory is ``O(P²)`` whatever the number of rows: the chunked Monte Carlo
    paths reduce each chunk with :meth:`add` instead of keeping every loss.
    """

    def __init__(self, P):
        self.count = 0
        self.mean = np.zeros(P)
        self.M2 = np.zeros((P, P))

    def add(self, blk) -> None:
        """Merge the rows of ``blk`` (shape ``(m, P)``)."""
        blk = np.asarray(blk, dtype=np.float64)
        if blk.ndim == 1:
            blk = blk[:, None]
        mb = blk.shape[0]
        if mb == 0:
            return
        bmean = blk.mean(axis=0)
        c = blk - bmean
        self._merge(mb, bmean, np.einsum("ip,iq->pq", c, c))

    def add_columns(self, blk_t) -> None:
        """Merge the columns of ``blk_t`` (shape ``(P, m)``, one row per predictor): :meth:`add` of
        ``blk_t.T`` up to rounding (pairwise row sums and a BLAS product; several times faster)."""
        mb = blk_t.shape[1]
        if mb == 0:
            return
        bmean = blk_t.sum(axis=1)
        bmean /= mb
        c = blk_t - bmean[:, None]
        self._merge(mb, bmean, c @ c.T)

    def _merge(self, mb, bmean, bM2) -> None:
        new = self.count + mb
        delta = bmean - self.mean
        self.mean = self.mean + delta * (mb / new)
        self.M2 = self.M2 + bM2 + np.outer(delta, delta) * (self.count * mb / new)
        self.count = new

    def var(self, i=0) -> float:
        """Sample variance (``ddof = 1``) of column ``i``."""
        return float(self.M2[i, i] / (self.count - 1))

    def stderr(self, i=0) -> float:
        """Standard error of the mean of column ``i``."""
        return math.sqrt(max(self.var(i), 0.0) / self.count)


def _check_seed(seed) -> int:
    """Root seed: an int >= 0, or a Generator from which one 63-bit root seed is drawn."""
    if isinstance(seed, np.random.Generator):
        return int(seed.integers(2**63))
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"`seed` must be a non-negative integer or a numpy Generator, got {seed!r}")
    return int(seed)


def _block_rng(seed: int, i: int) -> np.random.Generator:
    return np.random.Generator(np.random.SFC64(np.random.SeedSequence(seed, spawn_key=(i,))))


def _slice(batch: Prompts, sl: slice) -> Prompts:
    """Prompts ``sl`` of a batch (views; the per-prompt losses do not depend on the slicing)."""

    def cut(a):
        return None if a is None else a[sl]

    if batch._X is not None:
        return Prompts._new(
            X=cut(batch._X), y=cut(batch._y), x_q=cut(batch._x_q), y_q=cut(batch._y_q), setting=batch.setting
        )
    return Prompts._new(
        scores=cut(batch._scores),
        xq_norm2=cut(batch._xq_norm2),
        y=cut(batch._y),
        y_q=cut(batch._y_q),
        setting=batch.setting,
    )


def _losses(batch: Prompts, preds, conditional, setting, max_prompts) -> np.ndarray:
    """Per-prompt losses, evaluated ``max_prompts`` prompts at a time (the working set of one slice)."""
    out = np.empty((batch.n, len(preds)))
    for a in range(0, batch.n, max_prompts):
        sl = slice(a, min(a + max_prompts, batch.n))
        part = batch if (sl.start == 0 and sl.stop == batch.n) else _slice(batch, sl)
        for j, p in enumerate(preds):
            if conditional:
                out[sl, j] = conditional_loss(part, p.weights(part), setting=setting)
            else:
                err = part.y_q - p(part)
                out[sl, j] = err * err
    return out


def estimate_risks(
    predictors,
    setting,
    *,
    n_prompts,
    seed,
    sampler="auto",
    conditional=False,
    memory_budget=DEFAULT_MEMORY_BUDGET,
    precision="auto",
    backend="numpy",
) -> RiskResult:
    r"""Estimate the risks of several predictors on the same ``n_prompts`` prompts.

    Parameters
    ----------
    predictors : Predictor, sequence of Predictor, or mapping name -> Predictor
        Sequences are named by each predictor's ``name``. Parameters must be
        scalar (``batch_shape == ()``).
    setting : Setting
        Scalar data model; ``setting.Sigma`` (covariance of ``x``) forces
        ``sampler="full"``, and the ŷ = 0 risk is then ``tr Σ / d + σ²``.
    n_prompts : int, in [2, 1e9]
        Number of prompts (two at least: every estimate has a standard error;
        :data:`~reduced_dynamics.estimation.prompts.N_PROMPTS_MAX` at most).
    seed : int >= 0 or numpy.random.Generator
        Root seed; block ``i`` uses ``SeedSequence(seed, spawn_key=(i,))``. A
        Generator is consumed to draw one 63-bit root seed.
    sampler : {"auto", "stats", "gram", "full"}
        Prompt sampler (module docstring); ``"stats"`` needs every predictor to
        have ``uses_stats`` and an isotropic setting; ``"gram"`` needs every
        predictor to be :class:`~reduced_dynamics.BayesRidge` or
        :class:`~reduced_dynamics.Zero`, an isotropic setting and ``L >= d``.
    conditional : bool, default False
        Use the conditional (Rao–Blackwellised) loss of each prompt.
    memory_budget : int, >= 1
        Bytes allowed for one chunk's working arrays (default 256 MiB,
        whatever ``n_prompts``, ``L`` or ``d``). Does not change the result.
    precision : {"auto", "double", "single"}, default "auto"
        ``"single"`` draws the normals of the ``"stats"`` and ``"gram"`` samplers as float32
        Box–Muller normals from raw SFC64 words (``reduced_dynamics.estimation._fast.normals32``;
        its own stream, tails cut at 5.65 σ) and evaluates the package's predictors in float32,
        combining the per-prompt sums in float64: on the statistics sampler, and Bayes ridge on
        the ``"gram"`` sampler (an unrolled float32 Cholesky kernel for ``d <= 8``; prompts whose
        ``G + λI`` has Hadamard ratio ``det / ∏ diag < 2⁻⁶`` are evaluated again in float64,
        and so is every prompt for ``λ`` outside ``[2⁻²⁰, 2²⁰]``); about 2.5× faster at
        d = 5, L = 40 (``benchmarks/bench_risk.py``). ``"double"``: float64 ziggurat normals (the stream of
        ``backend="numba"``). ``"auto"``: ``"single"`` where it exists (the package's predictor
        classes on the ``"stats"`` or ``"gram"`` sampler, numpy backend), else ``"double"``;
        ``RiskResult.precision`` records the choice. The rounding
        moves a per-prompt loss by at most a few ``1e-6`` of the risk at the paper's
        parameters (more for heads with ``|ω s_l|`` in the hundreds: ``exp`` then loses
        ``|ω s_l|·6e-8``) and the mean by less than ``1e-3`` of its standard error
        (tests/reduced_dynamics/estimation/test_fast.py); the GD and debiased-GD estimates
        agree with their closed forms within 3 standard errors in either precision. Only the
        package's predictor classes on the ``"stats"`` and ``"gram"`` samplers have a
        single-precision path; otherwise ``"single"`` raises ``ValueError``.
    backend : {"numpy", "numba"}, default "numpy"
        ``"numba"`` evaluates the package's predictor classes on the ``"stats"`` and
        ``"gram"`` samplers with compiled kernels (``pip install
        reduced-dynamics[numba]``) drawing the same random stream as the numpy path:
        the same numbers up to rounding as ``precision="double"``. Double precision only
        (``"auto"`` means ``"double"`` here).

    Returns
    -------
    RiskResult

    Notes
    -----
    The evaluation runs with one BLAS thread (``threadpoolctl``): the
    batched small solves of ridge are many times slower when a
    multi-threaded BLAS splits each of them (``benchmarks/bench_risk.py``).
    To use several cores, run independent seeds in separate processes and
    combine the estimates (weights ``n``); the risk engine itself is
    single-threaded.

    Examples
    --------
    >>> from reduced_dynamics import DebiasedGD, Zero, estimate_risks
    >>> from reduced_dynamics.setting import Setting
    >>> res = estimate_risks([Zero(), DebiasedGD(0.8)], Setting(d=5, L=40, sigma2=0.1), n_prompts=20000, seed=0)
    >>> abs(res["zero"].risk - 1.1) < 4 * res["zero"].stderr
    True
    """
    t0 = time.perf_counter()
    names, preds = _normalise_predictors(predictors)
    setting = as_setting(setting, "estimate_risks")
    n = check_n_prompts(n_prompts)
    seed = _check_seed(seed)
    memory_budget = check_positive_int("memory_budget", memory_budget)
    conditional = _flag("conditional", conditional)
    if not isinstance(sampler, str) or sampler not in _SAMPLERS:
        raise ValueError(f"`sampler` must be one of {list(_SAMPLERS)}, got {sampler!r}")
    if not isinstance(precision, str) or precision not in _PRECISIONS:
        raise ValueError(f"`precision` must be one of {list(_PRECISIONS)}, got {precision!r}")
    if not isinstance(backend, str) or backend not in ("numpy", "numba"):
        raise ValueError(f"`backend` must be 'numpy' or 'numba', got {backend!r}")
    with single_blas_thread():
        return _estimate_risks(
            names, preds, setting, n, seed, sampler, conditional, memory_budget, t0, precision, backend
        )


def _estimate_risks(
    names, preds, setting, n, seed, sampler, conditional, memory_budget, t0, precision="double", backend="numpy"
) -> RiskResult:
    if sampler not in _SAMPLERS:
        raise ValueError(f"`sampler` must be one of {list(_SAMPLERS)}, got {sampler!r}")
    all_stats = all(p.uses_stats for p in preds)
    gram_ok = setting.isotropic and setting.L >= setting.d
    all_gram = all(gram_spec(p, setting) is not None for p in preds)
    if sampler == "auto":
        sampler = "stats" if (all_stats and setting.isotropic) else "gram" if (gram_ok and all_gram) else "full"
    elif sampler == "gram" and not all_gram:
        bad = [nm for nm, p in zip(names, preds) if gram_spec(p, setting) is None]
        raise ValueError(f"`sampler` 'gram' serves only BayesRidge and Zero predictors, got {bad}")
    elif sampler == "gram" and not gram_ok:
        raise ValueError(
            f"`sampler` 'gram' needs isotropic x and L >= d (got L={setting.L}, d={setting.d}); use 'full' or 'auto'"
        )
    elif sampler == "stats" and not all_stats:
        bad = [nm for nm, p in zip(names, preds) if not p.uses_stats]
        raise ValueError(f"`sampler` 'stats' cannot serve predictors that need covariates: {bad}")
    elif sampler == "stats" and not setting.isotropic:
        raise ValueError("`sampler` 'stats' assumes isotropic x; use 'full' or 'auto' with `setting.Sigma`")
    d, L, sigma2 = setting.d, setting.L, float(setting.sigma2)
    P = len(preds)
    moments = _Moments(P)
    specs = None
    if sampler == "stats":
        specs = [stats_spec(p) for p in preds]
        specs = None if any(sp is None for sp in specs) else specs
    elif sampler == "gram":
        specs = [gram_spec(p, setting) for p in preds]
    if precision == "auto":  # the single-precision streams wherever they exist (the fused numpy path)
        precision = "single" if (specs is not None and backend == "numpy") else "double"
    if precision == "single" and specs is None:
        raise ValueError(
            "`precision` 'single' needs the 'stats' or 'gram' sampler and the package's predictor classes "
            f"(sampler {sampler!r}, predictors {list(names)})"
        )
    plan = plan_chunks(
        n,
        setting,
        sampler=sampler,
        n_heads=sum(p.n_heads for p in preds),
        n_predictors=len(preds),
        memory_budget=memory_budget,
        precision=precision,
    )
    B, k, n_blocks = plan.block_size, plan.blocks_per_chunk, plan.n_blocks
    n_heads = sum(p.n_heads for p in preds)
    max_prompts = max(1, memory_budget // _bytes_per_prompt(sampler, d, L, n_heads, len(preds)))
    if backend == "numba":
        if specs is None or precision != "double":
            raise ValueError(
                "`backend` 'numba' serves the package's predictor classes on the 'stats' and 'gram' samplers in "
                f"double precision (sampler {sampler!r}, precision {precision!r}, predictors {list(names)})"
            )
        try:
            from reduced_dynamics.estimation import _numba
        except ImportError:
            raise ValueError(
                "`backend` 'numba' needs numba: pip install 'reduced-dynamics[numba]' (or use backend='numpy')"
            ) from None
        _numba_loop(_numba, sampler, specs, moments, n, B, n_blocks, seed, setting, conditional)
    elif specs is not None:
        _fast_loop(sampler, specs, moments, n, B, n_blocks, seed, setting, conditional, max_prompts, precision)
    for c0 in range(0, n_blocks if specs is None else 0, k):
        blocks = range(c0, min(c0 + k, n_blocks))
        sizes = [min(B, n - i * B) for i in blocks]
        m = sum(sizes)
        if sampler == "stats":
            s = np.empty((m, L))
            r2 = np.empty(m)
            y = None if conditional else np.empty((m, L))
            yq = None if conditional else np.empty(m)
            off = 0
            for i, mb in zip(blocks, sizes):
                sl = slice(off, off + mb)
                _draw_stats_into(
                    _block_rng(seed, i),
                    s[sl],
                    None if y is None else y[sl],
                    None if yq is None else yq[sl],
                    r2[sl],
                    d=d,
                    sigma2=sigma2,
                    covariates_only=conditional,
                )
                off += mb
            batch = Prompts._new(scores=s, xq_norm2=r2, y=y, y_q=yq, setting=setting)
        else:
            # the covariates come first in the full draw, so a covariates-only draw gives the same ones
            batch = _concat(
                [_sample_full(mb, setting, _block_rng(seed, i), bool(conditional)) for i, mb in zip(blocks, sizes)]
            )
        losses = _losses(batch, preds, conditional, setting, max_prompts)
        del batch
        off = 0
        for mb in sizes:  # per-block reduction, merged in block order
            moments.add(losses[off : off + mb])
            off += mb
    count, mean, M2 = moments.count, moments.mean, moments.M2
    cov = M2 / (count - 1)
    if not np.all(np.isfinite(mean)):
        bad = [nm for nm, v in zip(names, mean) if not np.isfinite(v)]
        raise OverflowError(f"non-finite loss for predictor(s) {bad}; check the predictor parameters")
    return RiskResult(
        names=names,
        mean=mean,
        cov=cov,
        n=count,
        seed=seed,
        sampler=sampler,
        conditional=bool(conditional),
        seconds=time.perf_counter() - t0,
        block_size=B,
        blocks_per_chunk=k,
        setting=setting,
        precision=precision,
    )


def _fast_loop(sampler, specs, moments, n, B, n_blocks, seed, setting, conditional, max_prompts, precision) -> None:
    """The fused path: draw block ``i`` from its own stream, evaluate it in slices, merge it (in block order)."""
    d, L, sigma2 = setting.d, setting.L, float(setting.sigma2)
    out_t = np.empty((len(specs), B))  # one row per predictor: the kernels write contiguous rows
    single = precision == "single"
    if single and sampler == "gram":
        return _gram32_loop(specs, moments, n, B, n_blocks, seed, setting, conditional, max_prompts)
    if sampler == "stats":
        if single:  # s and y are views of the normals buffer: the context normals are drawn in place
            g = stats_buffers(B, L)
        else:
            s, y = np.empty((B, L)), None if conditional else np.empty((B, L))
        r2 = np.empty(B)
        yq = None if conditional else np.empty(B)
        y_scale = np.empty(B) if (single and not conditional) else None  # y drawn unscaled (draw_stats32)
        work = []
    for i in range(n_blocks):
        mb = min(B, n - i * B)
        rng = _block_rng(seed, i)
        out = out_t[:, :mb].T
        if sampler == "stats":
            br2, byq = r2[:mb], None if conditional else yq[:mb]
            if single:
                nm = mb * L
                bs = g[:nm].reshape(mb, L)
                by = None if conditional else g[nm : 2 * nm].reshape(mb, L)
                draw_stats32(
                    rng,
                    bs,
                    by,
                    byq,
                    br2,
                    d=d,
                    sigma2=sigma2,
                    conditional=conditional,
                    normals=g,
                    y_scale=None if y_scale is None else y_scale[:mb],
                )
            else:
                bs, by = s[:mb], None if conditional else y[:mb]
                _draw_stats_into(rng, bs, by, byq, br2, d=d, sigma2=sigma2, covariates_only=conditional)
            for a in range(0, mb, max_prompts):
                sl = slice(a, min(a + max_prompts, mb))
                stats_losses(
                    specs,
                    bs[sl],
                    br2[sl],
                    None if conditional else by[sl],
                    None if conditional else byq[sl],
                    d=d,
                    sigma2=sigma2,
                    out=out[sl],
                    work=work,
                    y_scale=None if y_scale is None else y_scale[sl],
                )
        else:
            blk = draw_gram(rng, mb, d=d, L=L, conditional=conditional)
            for a in range(0, mb, max_prompts):
                sl = slice(a, min(a + max_prompts, mb))
                gram_losses(specs, blk if mb <= max_prompts else blk[sl], d=d, sigma2=sigma2, out=out[sl])
        if single:
            moments.add_columns(out_t[:, :mb])
        else:  # the double-precision streams keep their version-2 numbers bit for bit
            moments.add(np.ascontiguousarray(out_t[:, :mb].T))


#: blocks of the single-precision Gram stream evaluated together (each drawn from its own stream, merged in
#: block order): the unrolled float32 ridge kernel makes a few hundred numpy calls per evaluation
GRAM32_GROUP = 8


def _gram32_loop(specs, moments, n, B, n_blocks, seed, setting, conditional, max_prompts) -> None:
    """:func:`_fast_loop` of the single-precision Gram sampler: up to :data:`GRAM32_GROUP` blocks per evaluation.

    The per-prompt losses do not depend on the grouping (the kernel is elementwise in the prompts), so the
    result is that of one block at a time, bit for bit.
    """
    d, L, sigma2 = setting.d, setting.L, float(setting.sigma2)
    k = max(1, min(GRAM32_GROUP, max_prompts // B, n_blocks))
    n_off = d * (d - 1) // 2
    rows = n_off + (0 if conditional else 2 * d + 1)
    cap = k * B
    r2, diag, z = np.empty(cap), np.empty((d, cap), np.float32), np.empty((rows, cap), np.float32)
    out_t = np.empty((len(specs), cap))
    for i0 in range(0, n_blocks, k):
        sizes = []
        off = 0
        for i in range(i0, min(i0 + k, n_blocks)):
            mb = min(B, n - i * B)
            cols = slice(off, off + mb)
            into = (r2[cols], diag[:, cols], z[:, cols])
            draw_gram32(_block_rng(seed, i), mb, d=d, L=L, conditional=conditional, into=into)
            sizes.append(mb)
            off += mb
        blk = GramBlock(r2[:off], diag[:, :off], z[:n_off, :off], None if conditional else z[n_off:, :off])
        out = out_t[:, :off].T
        for a in range(0, off, max_prompts):
            sl = slice(a, min(a + max_prompts, off))
            gram_losses(specs, blk if off <= max_prompts else blk[sl], d=d, sigma2=sigma2, out=out[sl])
        off = 0
        for mb in sizes:  # merged block by block, in block order
            moments.add_columns(out_t[:, off : off + mb])
            off += mb


def _numba_loop(mod, sampler, specs, moments, n, B, n_blocks, seed, setting, conditional) -> None:
    """The compiled path: same blocks, same streams and same merge order as :func:`_fast_loop`."""
    d, L, sigma2 = setting.d, setting.L, float(setting.sigma2)
    out = np.empty((B, len(specs)))
    s, y = (np.empty((B, L)), np.empty((B, L))) if sampler == "stats" else (None, None)
    for i in range(n_blocks):
        mb = min(B, n - i * B)
        rng = _block_rng(seed, i)
        kw = dict(d=d, L=L, sigma2=sigma2, conditional=conditional, out=out[:mb])
        if sampler == "stats":
            mod.stats_block(rng, mb, specs, s=s[:mb], y=y[:mb], **kw)
        else:
            mod.gram_block(rng, mb, specs, **kw)
        moments.add(out[:mb])


def estimate_risk(
    predictor,
    setting,
    *,
    n_prompts,
    seed,
    sampler="auto",
    conditional=False,
    memory_budget=DEFAULT_MEMORY_BUDGET,
) -> RiskEstimate:
    """Monte Carlo risk of one predictor (:func:`estimate_risks` with a single predictor).

    Parameters
    ----------
    predictor : Predictor
    setting : Setting
    n_prompts, seed, sampler, conditional, memory_budget
        As in :func:`estimate_risks`.

    Returns
    -------
    RiskEstimate
        Named ``predictor.name``.
    """
    if not isinstance(predictor, Predictor):
        raise ValueError(f"`predictor` must be a Predictor, got {type(predictor).__name__}")
    res = estimate_risks(
        {predictor.name: predictor},
        setting,
        n_prompts=n_prompts,
        seed=seed,
        sampler=sampler,
        conditional=conditional,
        memory_budget=memory_budget,
    )
    return res[predictor.name]


def control_variate_risk(
    predictor,
    control,
    setting,
    *,
    control_risk,
    n_prompts,
    seed,
    sampler="auto",
    conditional=False,
    memory_budget=DEFAULT_MEMORY_BUDGET,
) -> ControlVariateEstimate:
    """Control-variate estimate of ``predictor``'s risk, with ``control`` evaluated on the same prompts.

    Parameters
    ----------
    predictor, control : Predictor
    setting : Setting
    control_risk : float
        Exact risk of ``control`` (e.g. ``1 + σ²`` for :class:`~reduced_dynamics.Zero`).
    n_prompts, seed, sampler, conditional, memory_budget
        As in :func:`estimate_risks`.

    Returns
    -------
    ControlVariateEstimate
        Named after ``predictor.name`` and ``control.name``.
    """
    control_risk = check_finite_float("control_risk", control_risk)
    for name, p in (("predictor", predictor), ("control", control)):
        if not isinstance(p, Predictor):
            raise ValueError(f"`{name}` must be a Predictor, got {type(p).__name__}")
    res = estimate_risks(
        {"target": predictor, "control": control},
        setting,
        n_prompts=n_prompts,
        seed=seed,
        sampler=sampler,
        conditional=conditional,
        memory_budget=memory_budget,
    )
    cv = res.control_variate("target", "control", control_risk=control_risk)
    return dataclasses.replace(cv, name=predictor.name, control=control.name)
