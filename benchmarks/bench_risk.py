"""Benchmark: the Monte Carlo risk engine vs a research-style per-prompt loop, and the BLAS thread pool.

Run ``python benchmarks/bench_risk.py [--quick]``. Everything is measured in one process, side by side,
with interleaved repetitions (loop, engine variants, loop, ...) and medians; CPU time
(``time.process_time``) and wall time are both reported, because the machine (2 cores) is shared and
wall time is noisy.

**Five estimators** (what ``reduced-dynamics risk`` computes at d = 5, L = 40, σ² = 0.1): the two-head
model at the γ = 0.1 point of the solution manifold, the H = 1 optimum, GD and debiased GD at η*, and
Bayes ridge (λ = σ² d).

* ``loop``: the research-style code, one prompt at a time with numpy (draw X, x_q, β, ε; five
  predictions, ridge by ``np.linalg.solve``), as the authors' code does;
* ``generic path``: the engine's generic path (predictors through their ``weights``, ridge on full
  covariates): the engine before the fused kernels, kept for user-defined predictors;
* ``engine``: the engine (fused kernels; Gram sampler for ridge), plain and conditional
  (Rao–Blackwellised) losses: ``default`` is what ``estimate_risks`` does without a ``precision``
  (``"auto"``: the single-precision streams of stream version 3, float32 Box–Muller normals), ``double``
  the float64 ziggurat streams (``precision="double"``), and, when numba is installed, the compiled
  backend (``backend="numba"``, same stream as the numpy double rows).

Each engine row runs the four score-based predictors in one ``estimate_risks`` call and ridge in a
second one, as the command does. Accuracy columns: ``(MC − exact)/SE`` for GD and debiased GD
(``proofs_check.closed_forms.gd_risk``) and ``(MC − ref)/SE`` for ridge against a Rao–Blackwellised
full-covariate reference (``sampler="full", conditional=True``).

**Threads**: ``reduced-dynamics risk --d 200 --prompts 2000`` run as a subprocess with the default BLAS
pool and with ``OPENBLAS_NUM_THREADS=1`` (interleaved), and the batched ridge kernel (d × d Gram
matrices and solves, d = 200, L = 240) timed in-process with the default pool and with one thread.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import statistics
import subprocess
import sys
import time

import numpy as np

from proofs_check.closed_forms import gd_risk
from reduced_dynamics.dynamics.manifold import eta_star, mu_gamma, single_head_optimum
from reduced_dynamics.estimation.predictors import BayesRidge, DebiasedGD, MultiHead, Predictor, SingleHead, VanillaGD
from reduced_dynamics.estimation.risk import STREAM_VERSION, estimate_risks
from reduced_dynamics.setting import Setting

D, L, SIGMA2, GAMMA = 5, 40, 0.1, 0.1
SETTING = Setting(d=D, L=L, sigma2=SIGMA2)


def five():
    m = mu_gamma(GAMMA, SETTING)
    eta = eta_star(SETTING)
    stats_preds = {
        "multi_head": MultiHead((GAMMA, -GAMMA), (m, -m)),
        "single_head": SingleHead.optimum(SETTING),
        "gd": VanillaGD(eta),
        "debiased_gd": DebiasedGD(eta),
    }
    return stats_preds, {"bayes_ridge": BayesRidge()}


def loop_risk(n, seed):
    """Research-style code: the five estimators, one prompt at a time."""
    m = mu_gamma(GAMMA, SETTING)
    eta = eta_star(SETTING)
    sh = single_head_optimum(SETTING)
    omega, mu = np.array([GAMMA, -GAMMA]), np.array([m, -m])
    lam, eye = SIGMA2 * D, np.eye(D)
    rng = np.random.default_rng(seed)
    losses = np.empty((n, 5))
    for i in range(n):
        X = rng.standard_normal((L, D))
        xq = rng.standard_normal(D)
        beta = rng.standard_normal(D) / np.sqrt(D)
        y = X @ beta + np.sqrt(SIGMA2) * rng.standard_normal(L)
        yq = xq @ beta + np.sqrt(SIGMA2) * rng.standard_normal()
        s = X @ xq
        z = np.outer(omega, s)
        z -= z.max(axis=1, keepdims=True)
        w = np.exp(z)
        w /= w.sum(axis=1, keepdims=True)
        p_mh = mu @ (w @ y)
        z1 = sh.omega * s
        z1 -= z1.max()
        w1 = np.exp(z1)
        w1 /= w1.sum()
        p_sh = sh.mu * (w1 @ y)
        p_gd = eta / L * (s @ y)
        p_dgd = eta / L * ((s - s.mean()) @ y)
        p_r = xq @ np.linalg.solve(X.T @ X + lam * eye, X.T @ y)
        losses[i] = (yq - np.array([p_mh, p_sh, p_gd, p_dgd, p_r])) ** 2
    return losses.mean(axis=0), losses.std(axis=0, ddof=1) / math.sqrt(n)


class _Generic(Predictor):
    """Forces the engine's generic (weights) path."""

    def __init__(self, p):
        self.p = p

    def weights(self, prompts):
        return self.p.weights(prompts)


def engine_run(n, *, conditional, precision="auto", generic=False, backend="numpy"):
    stats_preds, ridge = five()
    if generic:
        stats_preds = {k: _Generic(v) for k, v in stats_preds.items()}
    a = estimate_risks(
        stats_preds, SETTING, n_prompts=n, seed=1, conditional=conditional, precision=precision, backend=backend
    )
    b = estimate_risks(
        ridge,
        SETTING,
        n_prompts=n,
        seed=2,
        conditional=conditional,
        sampler="full" if generic else "auto",
        precision="double" if generic else precision,
        backend=backend,
    )
    return a, b


def numba_available():
    try:
        importlib.import_module("reduced_dynamics.estimation._numba")
    except ImportError:
        return False
    return True


def timed(fn):
    c, w = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.process_time() - c, time.perf_counter() - w


def monte_carlo_benchmark(quick, reps):
    n_loop, n_eng, n_v1 = (3_000, 300_000, 100_000) if quick else (20_000, 2_000_000, 400_000)
    variants = [
        ("generic path, plain", n_v1, dict(conditional=False, generic=True)),
        ("engine default, plain", n_eng, dict(conditional=False)),
        ("engine default, cond", n_eng, dict(conditional=True)),
        ("engine double, plain", n_eng, dict(conditional=False, precision="double")),
        ("engine double, cond", n_eng, dict(conditional=True, precision="double")),
    ]
    if numba_available():
        engine_run(10, conditional=False, precision="double", backend="numba")  # compile outside the timing
        engine_run(10, conditional=True, precision="double", backend="numba")
        variants += [
            ("engine numba, plain", n_eng, dict(conditional=False, precision="double", backend="numba")),
            ("engine numba, cond", n_eng, dict(conditional=True, precision="double", backend="numba")),
        ]
    else:
        print("(numba not installed: pip install 'reduced-dynamics[numba]' for the compiled backend rows)")
    cpu = {k: [] for k in ["loop"] + [v[0] for v in variants]}
    wall = {k: [] for k in cpu}
    results = {}
    for _ in range(reps):  # interleaved repetitions
        _, c, w = timed(lambda: loop_risk(n_loop, 0))
        cpu["loop"].append(c / n_loop)
        wall["loop"].append(w / n_loop)
        for name, n, kw in variants:
            res, c, w = timed(lambda n=n, kw=kw: engine_run(n, **kw))
            cpu[name].append(c / n)
            wall[name].append(w / n)
            results[name] = res
    ref = estimate_risks(
        {"bayes_ridge": BayesRidge()},
        SETTING,
        n_prompts=n_v1,
        seed=3,
        sampler="full",
        conditional=True,
    )["bayes_ridge"]
    eta = eta_star(SETTING)
    exact = {
        "gd": float(gd_risk(eta, SETTING, debiased=False)),
        "debiased_gd": float(gd_risk(eta, SETTING, debiased=True)),
    }
    base_c, base_w = statistics.median(cpu["loop"]), statistics.median(wall["loop"])
    print(
        f"Monte Carlo, five estimators (d={D}, L={L}, sigma2={SIGMA2}); medians of {reps} interleaved repetitions; "
        f"stream version {STREAM_VERSION}"
    )
    print(
        f"{'method':<24}{'prompts':>10}{'CPU us/prompt':>15}{'wall us/prompt':>16}{'x loop CPU':>12}{'x loop wall':>13}"
        f"{'gd z':>8}{'dgd z':>8}{'ridge z':>9}"
    )
    print(f"{'loop (per prompt)':<24}{n_loop:>10}{base_c * 1e6:>15.2f}{base_w * 1e6:>16.2f}{1:>12.1f}{1:>13.1f}")
    ratios = {}
    for name, n, _ in variants:
        c, w = statistics.median(cpu[name]), statistics.median(wall[name])
        a, b = results[name]
        z = [(a[k].risk - exact[k]) / a[k].stderr for k in ("gd", "debiased_gd")]
        r = b["bayes_ridge"]
        zr = (r.risk - ref.risk) / math.hypot(r.stderr, ref.stderr)
        ratios[name] = (base_c / c, base_w / w)
        print(
            f"{name:<24}{n:>10}{c * 1e6:>15.3f}{w * 1e6:>16.3f}{base_c / c:>12.1f}{base_w / w:>13.1f}"
            f"{z[0]:>8.2f}{z[1]:>8.2f}{zr:>9.2f}"
        )
    print(
        "target: engine default >= 60x the loop in prompts/s (CPU), |z| < 3; ridge reference: full covariates, "
        f"Rao-Blackwellised, {n_v1} prompts ({ref.risk:.6f} +- {ref.stderr:.1e})"
    )
    return ratios


def _ridge_kernel(X, lam):
    A = np.matmul(np.swapaxes(X, 1, 2), X)
    A[:, np.arange(X.shape[2]), np.arange(X.shape[2])] += lam
    return np.linalg.solve(A, np.ones(A.shape[:2])[..., None])


def threads_benchmark(reps, n_prompts=2000, d=200):
    from threadpoolctl import threadpool_info, threadpool_limits

    pools = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
    argv = ["risk", "--d", str(d), "--prompts", str(n_prompts), "--quiet"]
    cmd = [sys.executable, "-c", f"from reduced_dynamics.cli import main; raise SystemExit(main({argv!r}))"]
    env1 = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env0 = {
        k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
    }
    X = np.random.default_rng(0).standard_normal((max(2, n_prompts // 4), 240, d))
    t = {k: [] for k in ("cli default", "cli one thread", "kernel default", "kernel one thread")}
    cpu = {k: [] for k in t}
    for _ in range(reps):
        for key, env in (("cli default", env0), ("cli one thread", env1)):
            r0 = os.times()
            w = time.perf_counter()
            subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
            t[key].append(time.perf_counter() - w)
            r1 = os.times()
            cpu[key].append((r1.children_user + r1.children_system) - (r0.children_user + r0.children_system))
        for key, limit in (("kernel default", None), ("kernel one thread", 1)):
            with threadpool_limits(limits=limit, user_api="blas"):
                _, c, w = timed(lambda: _ridge_kernel(X, SIGMA2 * d))
            t[key].append(w)
            cpu[key].append(c)
    med = {k: statistics.median(v) for k, v in t.items()}
    medc = {k: statistics.median(v) for k, v in cpu.items()}
    print(f"\nBLAS threads (default pool: {pools} threads); medians of {reps} interleaved repetitions")
    print(f"{'':<60}{'wall s':>8}{'CPU s':>8}")
    for k in t:
        what = (
            f"`reduced-dynamics risk --d {d} --prompts {n_prompts}`, {k[4:]}"
            if k.startswith("cli")
            else f"ridge kernel d={d}, L=240, {X.shape[0]} prompts, {k[7:]}"
        )
        print(f"{what:<60}{med[k]:>8.2f}{medc[k]:>8.2f}")
    r_cli = med["cli default"] / med["cli one thread"]
    r_ker = med["kernel default"] / med["kernel one thread"]
    print(
        f"ratio default/one thread: command {r_cli:.2f} (target <= 1.5), "
        f"bare kernel without the engine's thread limit {r_ker:.2f}"
    )
    return r_cli, r_ker


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer prompts and repetitions (about a minute)")
    ap.add_argument("--threads", action="store_true", help="only the BLAS-thread comparison")
    args = ap.parse_args(argv)
    reps = 3
    if not args.threads:
        monte_carlo_benchmark(args.quick, reps)
    threads_benchmark(reps, n_prompts=500 if args.quick else 2000)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
