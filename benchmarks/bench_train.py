"""Training speed: our numpy trainer vs (if installed) a PyTorch-CPU implementation of the same model.

Model: full separate-parameter softmax attention (docs/theory.md#full-model), H=2, d=5, L=40,
batch 256, Adam lr 1e-3, fresh prompts every step. Two measurements per framework:

* ``end-to-end``: each framework samples its own prompts every step (numpy:
  :func:`reduced_dynamics.estimation.prompts.sample_tokens`; torch: ``torch.randn``), then
  forward, backward, Adam -- what a training run costs;
* ``step only``: forward + backward + Adam on a fixed, pre-drawn batch (same data for both).

Torch is optional and never a dependency: without it only the numpy numbers are printed.

Usage: ``python benchmarks/bench_train.py [--seconds 3]``
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from reduced_dynamics.estimation.prompts import sample_tokens
from reduced_dynamics.model.attention import make_model, unflatten_params
from reduced_dynamics.model.training import TrainConfig, adam_update, train
from reduced_dynamics.setting import Setting

H, d, L, BATCH, SIGMA2, LR = 2, 5, 40, 256, 0.1, 1e-3
SETTING = Setting(d=d, L=L, sigma2=SIGMA2)


def _rate(step_fn, seconds):
    step_fn()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        step_fn()
        n += 1
    return n / (time.perf_counter() - t0)


def bench_numpy(seconds):
    steps = max(200, int(seconds * 500))
    r = train(TrainConfig(setting=SETTING, seed=0, n_heads=H, batch=BATCH, lr=LR, steps=steps))
    end_to_end = r.steps_per_second
    model = make_model("separate", n_heads=H, d=d)
    shapes = model.param_shapes()
    init = model.init(seed=0)
    theta = np.concatenate([init[k].ravel() for k in shapes])
    p = unflatten_params(theta, shapes)  # views: Adam's in-place update of theta moves the model, as in train()
    m, v = np.zeros_like(theta), np.zeros_like(theta)
    tok = sample_tokens(BATCH, SETTING, seed=1)
    t = [0]

    def step():
        _, g = model.loss_and_grad(p, tok)
        t[0] += 1
        adam_update(theta, np.concatenate([g[k].ravel() for k in shapes]), m, v, t[0], lr=LR)

    sample = _rate(lambda: sample_tokens(BATCH, SETTING, seed=np.random.default_rng(0)), seconds / 3)
    return {"end-to-end": end_to_end, "step only": _rate(step, seconds), "sampling only": sample}


def bench_torch(seconds, dtype_name, threads=1):
    import torch

    torch.set_num_threads(threads)
    dtype = getattr(torch, dtype_name)
    D = d + 1
    b = 1.0 / math.sqrt(D)
    g = torch.Generator().manual_seed(0)
    Q, K, V = (torch.empty(H, D, D, dtype=dtype).uniform_(-b, b, generator=g).requires_grad_() for _ in range(3))
    o = torch.empty(H, D, dtype=dtype).uniform_(-b, b, generator=g).requires_grad_()
    opt = torch.optim.Adam([Q, K, V, o], lr=LR)

    def sample():
        X = torch.randn(BATCH, L + 1, d, dtype=dtype, generator=g)
        beta = torch.randn(BATCH, d, 1, dtype=dtype, generator=g) / math.sqrt(d)
        y = (X @ beta)[..., 0] + math.sqrt(SIGMA2) * torch.randn(BATCH, L + 1, dtype=dtype, generator=g)
        Z = torch.cat([X[:, :L], y[:, :L, None]], dim=-1)
        zq = torch.cat([X[:, L], torch.zeros(BATCH, 1, dtype=dtype)], dim=-1)
        return Z, zq, y[:, L]

    def loss_fn(Z, zq, yq):
        q = torch.einsum("hij,nj->nhi", Q, zq)  # (n, H, D)
        k = torch.einsum("hij,nlj->nhli", K, Z)  # (n, H, L, D)
        s = torch.einsum("nhli,nhi->nhl", k, q) / math.sqrt(D)
        p = torch.softmax(s, dim=-1)
        r = torch.einsum("nhl,nlj->nhj", p, Z)
        out = torch.einsum("hi,hij,nhj->n", o, V, r)
        return ((out - yq) ** 2).mean()

    def step(batch=None):
        Z, zq, yq = sample() if batch is None else batch
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(Z, zq, yq)
        loss.backward()
        opt.step()

    tok = sample_tokens(BATCH, SETTING, seed=1)
    fixed = (
        torch.tensor(tok.tokens, dtype=dtype),
        torch.cat([torch.tensor(tok.x_q, dtype=dtype), torch.zeros(BATCH, 1, dtype=dtype)], dim=-1),
        torch.tensor(tok.y_q, dtype=dtype),
    )
    return {"end-to-end": _rate(step, seconds), "step only": _rate(lambda: step(fixed), seconds)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="measuring time per case")
    ap.add_argument("--torch-threads", type=int, default=1, help="torch.set_num_threads (default 1; tiny ops)")
    args = ap.parse_args(argv)
    print(f"H={H} d={d} L={L} batch={BATCH} Adam lr={LR}")
    ours = bench_numpy(args.seconds)
    for k, v in ours.items():
        print(f"numpy (float64)      {k:14s} {v:8.0f} steps/s")
    try:
        import torch
    except ImportError:
        print("torch not importable: PyTorch comparison skipped")
        return 0
    print(f"torch {torch.__version__}, {args.torch_threads} thread(s)")
    for dt in ("float32", "float64"):
        res = bench_torch(args.seconds, dt, args.torch_threads)
        for k, v in res.items():
            print(f"torch ({dt})      {k:14s} {v:8.0f} steps/s   numpy/torch = {ours[k] / v:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
