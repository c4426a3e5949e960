r"""Paired Monte Carlo risks of an imported model and of the theory's predictors, over prompt lengths.

At each prompt length ``L`` the model and every reference predictor see the same fresh prompts
(common random numbers), so the standard error of a difference ``model − reference`` is the
standard error of the per-prompt differences, much smaller than either risk's. The prompts of
length ``L`` come from their own generator,
``numpy.random.default_rng(numpy.random.SeedSequence(seed, spawn_key=(L,)))``, drawn chunk by chunk
within the memory budget; so the numbers at one ``L`` do not depend on which other lengths are
evaluated, and the same ``seed`` gives the same numbers.

Single output (isotropic or ``x ~ N(0, Σ)``): :func:`paired_length_risks`, prompts from
:func:`reduced_dynamics.sample_prompts`, moments accumulated by the Monte Carlo engine's
``_Moments``. Several tasks: :func:`paired_task_risks`, one
:func:`reduced_dynamics.multitask.predictors.per_task_risks` call per length (its paired
:meth:`~reduced_dynamics.multitask.predictors.TaskRisks.difference`).

References
----------
docs/theory.md#measuring-risks, docs/theory.md#predictors
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reduced_dynamics._results import FrozenResult

__all__ = ["LengthRisks", "length_generator", "paired_length_risks", "paired_task_risks"]


@dataclass(frozen=True)
class LengthRisks(FrozenResult):
    """Risks of a model and of reference predictors at several prompt lengths, paired on common prompts.

    Attributes
    ----------
    L : ndarray of int, shape (K,)
        Prompt lengths, increasing.
    n : int
        Prompts per length.
    names : tuple of str
        The reference predictors (the model is ``"model"``).
    risk, stderr : dict of str -> ndarray, shape (K,) (one output) or (K, N) (N tasks)
        Monte Carlo risk ``E(y_q − ŷ)²`` (noise included) and its standard error, for ``"model"``
        and every name of ``names``.
    diff, diff_stderr : dict of str -> ndarray, same shapes
        Paired differences ``model − name`` and their standard errors, for every name of ``names``.
    exact : dict of str -> ndarray, shape (K,)
        Exact (closed-form or quadrature) risks of the predictors where they are derived at every
        length, a check of the Monte Carlo numbers.
    """

    L: np.ndarray
    n: int
    names: tuple
    risk: dict
    stderr: dict
    diff: dict
    diff_stderr: dict
    exact: dict

    def at(self, L: int) -> int:
        """Index of length ``L`` (``ValueError`` if it was not evaluated)."""
        hits = np.flatnonzero(self.L == int(L))
        if hits.size == 0:
            raise ValueError(f"`L` = {L} was not evaluated; the lengths are {self.L.tolist()}")
        return int(hits[0])


def length_generator(seed: int, L: int) -> np.random.Generator:
    """The generator of the prompts of length ``L`` (module docstring)."""
    return np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=(int(L),)))


def _per_prompt_bytes(setting, n_heads: int, n_ref: int) -> int:
    """Working set of one prompt: the batch (covariates, tokens), the model's scores and weights, each reference."""
    from reduced_dynamics.estimation.prompts import prompt_bytes

    d, L = setting.d, setting.L
    D = d + 1
    return prompt_bytes(setting, kind="full") + 8 * (L * D + L * (3 * n_heads + 2) + n_ref * (3 * L + d * d + 4))


def paired_length_risks(
    predict, references, setting, *, lengths, n_prompts: int, seed: int, n_heads: int, log=None, chunk: int = 8192
) -> LengthRisks:
    """Risks of one single-output model and of reference predictors at each length, on common prompts.

    Parameters
    ----------
    predict : callable
        ``predict(prompts) -> ndarray, shape (n,)``: the model on a :class:`~reduced_dynamics.Prompts` batch.
    references : callable
        ``references(setting_L) -> dict`` name -> predictor (a callable on the same batch), built
        for the setting at each length (e.g. debiased GD at that length's η*).
    setting : Setting
        Scalar data model (isotropic or with ``Sigma``); its ``L`` is replaced by each length.
    lengths : sequence of int
        Increasing prompt lengths, each >= 2 (validated by the caller).
    n_prompts : int
        Prompts per length (>= 2).
    seed : int
        Root seed (module docstring).
    n_heads : int
        For the memory estimate of a chunk.
    log : callable, optional
        ``log(text)`` before each length (progress).
    chunk : int
        Prompts per batch, at most.

    Returns
    -------
    LengthRisks
        ``exact`` is empty (the caller adds the closed forms it knows).
    """
    from reduced_dynamics.estimation._threads import single_blas_thread
    from reduced_dynamics.estimation.prompts import chunk_sizes, sample_prompts
    from reduced_dynamics.estimation.risk import _Moments

    K = len(lengths)
    names = None
    out = {}
    with single_blas_thread():
        for i, L in enumerate(lengths):
            at_L = setting.replace(L=int(L))
            refs = references(at_L)
            if names is None:
                names = tuple(refs)
                out = {k: np.zeros((1 + 2 * len(names), K)) for k in ("mean", "se")}
            if log is not None:
                log(f"risks at L = {int(L)} ({i + 1}/{K}, {n_prompts} prompts)")
            rng = length_generator(seed, int(L))
            mom = _Moments(1 + 2 * len(names))
            per = _per_prompt_bytes(at_L, n_heads, len(names))
            for k in chunk_sizes(n_prompts, per, setting=at_L, cap=chunk):
                p = sample_prompts(k, at_L, seed=rng)
                a = (np.asarray(predict(p), dtype=np.float64) - p.y_q) ** 2
                others = [(np.asarray(f(p), dtype=np.float64) - p.y_q) ** 2 for f in refs.values()]
                mom.add(np.stack([a, *others, *(a - o for o in others)], axis=1))
            for j in range(1 + 2 * len(names)):
                out["mean"][j, i], out["se"][j, i] = mom.mean[j], mom.stderr(j)
    m = len(names)
    keys = ("model", *names)
    return LengthRisks(
        L=np.asarray(lengths, dtype=np.int64),
        n=int(n_prompts),
        names=names,
        risk={k: out["mean"][j] for j, k in enumerate(keys)},
        stderr={k: out["se"][j] for j, k in enumerate(keys)},
        diff={k: out["mean"][1 + m + j] for j, k in enumerate(names)},
        diff_stderr={k: out["se"][1 + m + j] for j, k in enumerate(names)},
        exact={},
    )


def paired_task_risks(predict, references, setting, *, lengths, n_prompts: int, seed: int, log=None) -> LengthRisks:
    """Per-task risks of an N-output model and of reference predictors at each length, on common prompts.

    Parameters
    ----------
    predict : callable
        ``predict(prompts) -> ndarray, shape (n, N)`` on a
        :class:`~reduced_dynamics.multitask.predictors.MultitaskPrompts` batch.
    references : callable
        ``references(setting_L) -> dict`` name -> callable on the same batch, shape ``(n, N)``.
    setting : Setting
        Scalar, with ``tasks``; its ``L`` is replaced by each length.
    lengths : sequence of int
    n_prompts : int
    seed : int
    log : callable, optional

    Returns
    -------
    LengthRisks
        Arrays of shape ``(K, N)``.
    """
    from reduced_dynamics.multitask.predictors import per_task_risks

    K, N = len(lengths), setting.n_tasks
    names, cols = None, {}
    for i, L in enumerate(lengths):
        at_L = setting.replace(L=int(L))
        refs = references(at_L)
        if names is None:
            names = tuple(refs)
            cols = {
                k: np.zeros((K, N))
                for k in [f"r:{n}" for n in ("model", *names)]
                + [f"s:{n}" for n in ("model", *names)]
                + [f"d:{n}" for n in names]
                + [f"e:{n}" for n in names]
            }
        if log is not None:
            log(f"risks at L = {int(L)} ({i + 1}/{K}, {n_prompts} prompts)")
        res = per_task_risks(
            {"model": predict, **refs}, at_L, n_prompts=n_prompts, seed=length_generator(seed, int(L)), keep_losses=True
        )
        for j, name in enumerate(res.names):
            cols[f"r:{name}"][i], cols[f"s:{name}"][i] = res.risk[j], res.stderr[j]
        for name in names:
            for t in range(N):
                df = res.difference("model", name, t)
                cols[f"d:{name}"][i, t], cols[f"e:{name}"][i, t] = df.risk, df.stderr
    keys = ("model", *names)
    return LengthRisks(
        L=np.asarray(lengths, dtype=np.int64),
        n=int(n_prompts),
        names=names,
        risk={k: cols[f"r:{k}"] for k in keys},
        stderr={k: cols[f"s:{k}"] for k in keys},
        diff={k: cols[f"d:{k}"] for k in names},
        diff_stderr={k: cols[f"e:{k}"] for k in names},
        exact={},
    )
