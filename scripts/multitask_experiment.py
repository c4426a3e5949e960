"""Multi-task full-model experiment: train the N-output attention model for H = 1..4 and compare per-task risks.

For each seed: trains (or loads from ``--models DIR``: files ``tr_H{H}_s{seed}.npz`` with ``KQ``, ``OV``)
the models for H = 1..4, extracts per-feature ω and per-task μ and the head roles, and estimates on
common prompts (one prompt stream per seed) the per-task risks ± SE of each trained model, of the
reduced model at its extracted (ω, μ), of per-task debiased GD and Bayes ridge on S_n, and the paired
difference risk(H = 3) − risk(H = 4) per task. Prints one JSON object.

    python scripts/multitask_experiment.py --quick              # seconds: 200 steps, 1 seed
    # the paper's scale (separate Q, K, V, O; Adam lr 1e-3, batch 256, 5e5 steps; ~12-15 min of CPU per model):
    python scripts/multitask_experiment.py --param separate --steps 500000 --lr 1e-3 --seeds 0 --save DIR
    python scripts/multitask_experiment.py --param separate --seeds 0,1 --models DIR   # evaluate the saved models
    # pack the saved models for the figure (figures/multitask_trained.npz, read by `figures --only multitask`):
    python scripts/multitask_experiment.py --param separate --seeds 0,1 --models DIR --lr 1e-3 --figure-data figures/multitask_trained.npz

With ``--models`` the steps of each model are its saved loss history's length (``--steps`` is not
used); ``--lr`` is recorded as given, so pass the learning rate the models were trained with.

Training writes a resumable checkpoint ``DIR/ckpt_H{H}_s{seed}.npz`` every 10 000 steps: rerunning the same
command after an interruption continues where it stopped (same numbers as an uninterrupted run). Progress
goes to stderr every 10 000 steps.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from reduced_dynamics import Setting
from reduced_dynamics.io import atomic_savez, to_jsonable
from reduced_dynamics.multitask.attention import (
    MultitaskAttention,
    extract_reduced,
    mt_attention_predict,
    train_mt_attention,
)
from reduced_dynamics.multitask.flow import antipodal_pairs
from reduced_dynamics.multitask.predictors import (
    per_task_risks,
    reduced_mt_predict,
    support_dgd_weights,
    support_ridge_predict,
    weighted_dgd_predict,
)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="200 steps, seed 0, 2000 prompts")
    p.add_argument("--steps", type=int, default=20000)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--param", choices=("separate", "circuit"), default="circuit", help="parameterisation")
    p.add_argument("--train-only", action="store_true", help="train and save (needs --save), no evaluation")
    p.add_argument("--seeds", default="0")
    p.add_argument("--heads", default="1,2,3,4")
    p.add_argument("--n-eval", type=int, default=20000)
    p.add_argument("--models", default=None, help="load trained models from this folder instead of training")
    p.add_argument("--save", default=None, help="save the trained models into this folder")
    p.add_argument("--figure-data", default=None, help="with --models: also pack KQ, OV of the models into this .npz")
    a = p.parse_args(argv)
    s = Setting.paper_multitask()
    steps, n_eval = (200, 2000) if a.quick else (a.steps, a.n_eval)
    seeds = [0] if a.quick else [int(x) for x in a.seeds.split(",")]
    Hs = [int(x) for x in a.heads.split(",")]
    A = support_dgd_weights(s)
    if a.figure_data and not a.models:
        p.error("--figure-data needs --models DIR")
    if a.train_only and not a.save:
        p.error("--train-only needs --save DIR")
    out = {"setting": s.to_dict(), "param": a.param, "steps": steps, "lr": a.lr, "n_eval": n_eval, "seeds": {}}
    if a.models:
        out["steps"] = {}  # per seed and H: the length of the saved loss history
    packed = {}
    for seed in seeds:
        models = {}
        for H in Hs:
            tag = "" if a.param == "circuit" else "sep_"
            f = Path(a.models) / f"tr_{tag}H{H}_s{seed}.npz" if a.models else None
            if f is not None:
                if not f.exists():
                    continue
                z = np.load(f)
                models[H] = MultitaskAttention(KQ=z["KQ"], OV=z["OV"])
                out["steps"][f"H{H}_s{seed}"] = int(len(z["losses"]))
                packed[f"KQ_H{H}_s{seed}"], packed[f"OV_H{H}_s{seed}"] = z["KQ"], z["OV"]
                packed[f"steps_H{H}_s{seed}"] = int(len(z["losses"]))
            else:
                ckpt = None
                if a.save:
                    Path(a.save).mkdir(parents=True, exist_ok=True)
                    ckpt = Path(a.save) / f"ckpt_{tag}H{H}_s{seed}.npz"

                def progress(t, loss, H=H, seed=seed):
                    if t % 10_000 == 0:
                        print(f"H={H} seed={seed} step {t}/{steps} batch loss {loss:.4f}", file=sys.stderr, flush=True)

                r = train_mt_attention(
                    H, s, steps=steps, seed=seed, lr=a.lr, parameterisation=a.param, checkpoint=ckpt, callback=progress
                )
                if not r.success:
                    print(f"H={H} seed={seed}: {r.message}", file=sys.stderr)
                models[H] = r.model
                if a.save:
                    atomic_savez(
                        Path(a.save) / f"tr_{tag}H{H}_s{seed}.npz",
                        KQ=r.model.KQ,
                        OV=r.model.OV,
                        losses=r.losses,
                        **r.params,
                    )
        if a.train_only:
            continue
        preds, info = {}, {}
        for H, m in models.items():
            c = extract_reduced(m, s)
            info[H] = {
                "omega": c.omega,
                "mu": c.mu,
                "roles": list(c.roles),
                "antipodal_pairs": antipodal_pairs(c.omega, c.mu),
                "kq_offdiag_rel": c.kq_offdiag_rel,
                "ov_offdiag_rel": c.ov_offdiag_rel,
            }
            preds[f"trained_H{H}"] = lambda p, m=m: mt_attention_predict(m, p, s)
            preds[f"reduced_H{H}"] = lambda p, c=c: reduced_mt_predict(p, c.omega, c.mu, s)
        preds["dgd_S"] = lambda p: weighted_dgd_predict(p, A)
        preds["bayes_S"] = lambda p: support_ridge_predict(p, s)
        res = per_task_risks(preds, s, n_prompts=n_eval, seed=10_000 + seed, keep_losses=True)
        risks = {n: {"risk": res.risk[i], "stderr": res.stderr[i]} for i, n in enumerate(res.names)}
        diffs = {}
        if 3 in models and 4 in models:
            diffs["H3_minus_H4"] = [res.difference("trained_H3", "trained_H4", t).to_dict() for t in range(s.n_tasks)]
        for H in models:
            diffs[f"trained_minus_dgd_S_H{H}"] = [
                res.difference(f"trained_H{H}", "dgd_S", t).to_dict() for t in range(2)
            ]
        out["seeds"][seed] = {"models": info, "risks": risks, "paired": diffs}
    if a.train_only:
        return 0
    if a.figure_data:
        atomic_savez(Path(a.figure_data), param=a.param, lr=a.lr, batch=256, **packed)
        print(f"wrote {a.figure_data}", file=sys.stderr)
    json.dump(to_jsonable(out), sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
