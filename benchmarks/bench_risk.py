"""Benchmark: the risk engine vs a per-prompt research-code loop (d=5, L=40, H=2).

Run ``python benchmarks/bench_risk.py [--quick]``. Both estimate the risk of the
two-head model at the γ = 0.1 point of the solution manifold, in one process,
one after the other, single-threaded. Reported: prompts/s and precision per
second = 1 / (variance of the estimate × seconds), and the engine/loop ratios.

Also (``--threads``, included in the default run): the BLAS thread pool on the batched ridge
solves of ``reduced-dynamics risk --d 200 --prompts 2000`` (Bayes ridge, d=200, L=40): the same
kernel timed with the default pool and with one thread, side by side, and the ratio. The engine
runs its hot paths with one BLAS thread (``reduced_dynamics.estimation._threads``).

Engine variants:
  plain      stats sampler, literal squared errors
  cond       stats sampler, Rao–Blackwellised (conditional) losses
  cond+cv    cond, with a control variate: debiased GD at η* and its exact risk
             from proofs_check.closed_forms.gd_risk if importable, else ŷ = 0 (risk 1+σ²)
"""

from __future__ import annotations

import argparse
import importlib
import math
import time

import numpy as np

from reduced_dynamics.dynamics.manifold import eta_star, mu_gamma
from reduced_dynamics.estimation.predictors import BayesRidge, DebiasedGD, MultiHead, Zero
from reduced_dynamics.estimation.risk import estimate_risks
from reduced_dynamics.setting import Setting

D, L, SIGMA2, GAMMA = 5, 40, 0.1, 0.1
SETTING = Setting(d=D, L=L, sigma2=SIGMA2)


def loop_risk(n, omega, mu, seed):
    """Usual research code: one prompt at a time."""
    rng = np.random.default_rng(seed)
    losses = np.empty(n)
    for i in range(n):
        X = rng.standard_normal((L, D))
        xq = rng.standard_normal(D)
        beta = rng.standard_normal(D) / np.sqrt(D)
        y = X @ beta + np.sqrt(SIGMA2) * rng.standard_normal(L)
        yq = xq @ beta + np.sqrt(SIGMA2) * rng.standard_normal()
        scores = np.outer(omega, X @ xq)  # (H, L)
        scores -= scores.max(axis=1, keepdims=True)
        w = np.exp(scores)
        w /= w.sum(axis=1, keepdims=True)
        pred = mu @ (w @ y)
        losses[i] = (yq - pred) ** 2
    return losses.mean(), losses.std(ddof=1) / math.sqrt(n)


def control():
    try:
        gd_risk = importlib.import_module("proofs_check.closed_forms").gd_risk
    except (ImportError, AttributeError):
        return "zero", Zero(), 1.0 + SIGMA2
    eta = eta_star(SETTING)
    return "debiased_gd", DebiasedGD(eta), float(gd_risk(eta, SETTING, debiased=True))


def _ridge_kernel(prompts):
    """The engine's ridge hot path without its thread limit: batched Gram matrices and d×d solves."""
    X, y, xq = prompts.X, prompts.y, prompts.x_q
    A = np.einsum("nld,nle->nde", X, X)
    A += SIGMA2 * X.shape[2] * np.eye(X.shape[2])
    b = np.einsum("nld,nl->nd", X, y)
    return np.einsum("nd,nd->n", xq, np.linalg.solve(A, b[..., None])[..., 0])


def threads_benchmark(n_prompts=2000, d=200, repeats=3):
    """Seconds of the ridge kernel with the default BLAS pool and with one thread; prints the ratio."""
    from threadpoolctl import threadpool_info, threadpool_limits

    from reduced_dynamics.estimation.prompts import sample_prompts

    prompts = sample_prompts(n_prompts, Setting(d=d, L=L, sigma2=SIGMA2), seed=0)
    pools = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
    times = {}
    for label, limit in (("default", None), ("one thread", 1)):
        best = math.inf
        for _ in range(repeats):
            with threadpool_limits(limits=limit, user_api="blas"):
                t = time.perf_counter()
                _ridge_kernel(prompts)
                best = min(best, time.perf_counter() - t)
        times[label] = best
    t = time.perf_counter()
    estimate_risks({"bayes_ridge": BayesRidge()}, Setting(d=d, L=L, sigma2=SIGMA2), n_prompts=n_prompts, seed=0)
    engine = time.perf_counter() - t
    print(
        f"BLAS threads, batched ridge solves (d={d}, L={L}, {n_prompts} prompts, best of {repeats}): "
        f"default pool ({pools} threads) {times['default']:.2f} s, one thread {times['one thread']:.2f} s, "
        f"ratio default/one = {times['default'] / times['one thread']:.2f}; "
        f"estimate_risks (one thread inside) {engine:.2f} s"
    )
    return times


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer prompts (seconds instead of a minute)")
    ap.add_argument("--threads", action="store_true", help="only the BLAS-thread comparison")
    args = ap.parse_args(argv)
    threads_benchmark()
    if args.threads:
        return 0
    n_loop, n_eng = (20_000, 1_000_000) if args.quick else (100_000, 10_000_000)
    m = mu_gamma(GAMMA, SETTING)
    omega, mu = np.array([GAMMA, -GAMMA]), np.array([m, -m])
    mh = MultiHead(omega, mu)
    cname, cpred, cexact = control()

    t = time.perf_counter()
    r_loop, se_loop = loop_risk(n_loop, omega, mu, seed=0)
    s_loop = time.perf_counter() - t
    rows = [("loop (per prompt)", n_loop, s_loop, r_loop, se_loop)]

    kw = dict(n_prompts=n_eng, seed=1)
    res = estimate_risks({"mh": mh}, SETTING, **kw)
    rows.append(("engine plain", n_eng, res.seconds, res["mh"].risk, res["mh"].stderr))
    res = estimate_risks({"mh": mh}, SETTING, conditional=True, **kw)
    rows.append(("engine cond", n_eng, res.seconds, res["mh"].risk, res["mh"].stderr))
    res = estimate_risks({"mh": mh, cname: cpred}, SETTING, conditional=True, **kw)
    cv = res.control_variate("mh", cname, control_risk=cexact)
    rows.append((f"engine cond+cv[{cname}]", n_eng, res.seconds, cv.risk, cv.stderr))

    print(f"d={D} L={L} sigma2={SIGMA2} H=2 gamma={GAMMA}  control={cname} (exact {cexact:.6f})")
    print(
        f"{'method':<30}{'prompts':>10}{'sec':>8}{'risk':>11}{'stderr':>11}{'prompts/s':>12}"
        f"{'x loop':>8}{'precision/s':>13}{'x loop':>10}"
    )
    base_pps = n_loop / s_loop
    base_prec = 1.0 / (se_loop**2 * s_loop)
    for name, n, sec, r, se in rows:
        pps, prec = n / sec, 1.0 / (se**2 * sec)
        print(
            f"{name:<30}{n:>10}{sec:>8.2f}{r:>11.6f}{se:>11.2e}{pps:>12.3g}{pps / base_pps:>8.1f}"
            f"{prec:>13.3g}{prec / base_prec:>10.3g}"
        )
    print("targets: >= 100x prompts/s, >= 1000x precision/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
