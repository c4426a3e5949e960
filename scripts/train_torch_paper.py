r"""Paper-scale training of the paper authors' attention model in PyTorch (issue 20, section 3).

The authors' protocol (docs/theory.md#full-model): d = 5, L = 40, σ² = 0.1, Adam (lr 1e-3, betas
(0.9, 0.999), eps 1e-8), batch 256, fresh prompts every step, float32, PyTorch-default init, in the
authors' state-dict layout, so that ``reduced_dynamics.importers`` reads the checkpoints.

Usage (from the repository root; re-running the same command resumes from the checkpoint, a larger
``--steps`` extends a finished run)::

    nohup .venv/bin/python scripts/train_torch_paper.py --heads 2 --steps 300000 \
        --out results/torch_paper/H2 > results/torch_paper/H2.log 2>&1 &

Data (docs/theory.md#data-model), drawn from one ``torch.Generator`` seeded with ``--data-seed``:
per prompt ``X`` (L+1, d) ~ N(0, I), then ``β`` (d,) ~ N(0, I/d), then noise (L+1,) ~ N(0, σ²);
``y = Xβ + noise``; tokens ``z_l = (x_l, y_l)`` for l < L and the query ``z_q = (x_q, 0)``, target
``y_q`` (noisy, so the risk includes σ²).

Model: :class:`reduced_dynamics.importers.AuthorsAttention` with ``n_out = 1`` (state-dict keys
``attention_layer.{q,k,v}_proj.weight`` of shape (H·D, D) with head h owning rows [hD, (h+1)D),
``attention_layer.o_proj.weight`` (1, H·D), no biases, D = d + 1): head h's logits
``(k_{h,l} · q_h)/√D``, softmax over the L context tokens only (the query does not attend to
itself), prediction ``o_proj(concat_h Σ_l p_{h,l} v_{h,l})``, evaluated with the products
re-associated (``AuthorsAttention.forward``). In the package's notation
``Q_h = q_proj.weight[hD:(h+1)D]`` (likewise K, V), ``o_h = o_proj.weight[0, hD:(h+1)D]``,
``KQ_h = K_hᵀQ_h/√D``, ``ov_h = V_hᵀo_h``. The script at commit fcad534 (which trained the checkpoints
of docs/findings/imported.md) defined its own copy of this module; the library class trains bit for
bit the same (same init order, same operations; tests/reduced_dynamics/importers/
test_train_torch_paper_script.py). The script imports the installed ``reduced_dynamics`` (run it
from a clone installed with ``pip install -e '.[torch]'``, or with ``PYTHONPATH`` set to the clone).

Init: ``torch.manual_seed(--seed)``, then the four ``nn.Linear`` layers are built in the order q, k, v,
o with PyTorch's default init, U(±1/√fan_in): q, k, v draw from U(±1/√D) as in the package's
``AttentionModel.init``; o_proj has fan_in H·D, so it draws from U(±1/√(H·D)), where the package draws
each head's o_h from U(±1/√D).

Loss: the mean squared error ``mean (ŷ − y_q)²`` (the package's trainer uses the same). With Adam
the loss scale only enters through eps: MSE/2 (the authors' convention, docs/conventions.md, time
convention) gives the same trajectory up to the eps term, not half the speed; the factor 2 in time
applies to plain gradient descent and to the flow.

Outputs in ``--out``: ``config.json`` (the run's configuration; a directory made with another
configuration is refused), ``checkpoint.pt`` (model, Adam state, data generator state, step, loss
history; every ``--checkpoint-every`` steps, at an interruption and at the end), ``model_step{N}.pt``
(the plain ``model.state_dict()`` at each checkpoint), ``final.pt`` (the state dict at the end) and
``final.json`` (summary). Every file is written atomically. SIGINT/SIGTERM checkpoint and stop;
re-running the command resumes, bit-identically to an uninterrupted run.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import signal
import sys
import time
from pathlib import Path

#: the authors' protocol
PAPER = {"d": 5, "L": 40, "sigma2": 0.1, "batch": 256, "lr": 1e-3, "steps": 300_000, "checkpoint_every": 10_000}
#: ``--quick``: a run of a fraction of a second (tests)
QUICK = {"d": 3, "L": 8, "sigma2": 0.1, "batch": 16, "lr": 1e-2, "steps": 40, "checkpoint_every": 10}
#: the data seed is ``--seed + DATA_SEED_OFFSET`` unless ``--data-seed`` is given
DATA_SEED_OFFSET = 2**32
#: version of the prompt sampler (:func:`sample_batch`); part of the configuration
SAMPLER_VERSION = 1
ADAM = {"betas": (0.9, 0.999), "eps": 1e-8}
#: keys of ``config.json`` that define the run (``steps`` may grow; the rest are records)
IDENTITY = (
    "d",
    "L",
    "sigma2",
    "heads",
    "batch",
    "lr",
    "betas",
    "eps",
    "seed",
    "data_seed",
    "loss",
    "dtype",
    "init",
    "sampler_version",
    "quick",
)
CONFIG_NAME = "config.json"
CHECKPOINT_NAME = "checkpoint.pt"
FINAL_NAME = "final.pt"
SUMMARY_NAME = "final.json"
#: one prediction step's working memory must stay below this (bytes)
MEMORY_BUDGET = 2**30


class UsageError(ValueError):
    """Bad command-line input: one line naming the flag, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        sys.stderr.write(f"{self.prog}: error: {message.splitlines()[0] if message else 'usage error'}\n")
        sys.exit(2)


def _torch():
    import torch

    torch.set_num_threads(1)
    return torch


def build_model(d: int, n_heads: int):
    """The authors' one-layer H-head softmax attention, default-initialised from torch's global RNG.

    Parameters
    ----------
    d : int
        Covariate dimension; tokens have ``D = d + 1`` entries.
    n_heads : int
        Number of heads H.

    Returns
    -------
    reduced_dynamics.importers.AuthorsAttention
        ``model(Z, xq)`` with ``Z`` of shape (n, L, D) and ``xq`` of shape (n, d) returns ŷ of shape (n,).
    """
    _torch()
    from reduced_dynamics.importers import AuthorsAttention

    return AuthorsAttention(n_heads, d)


def sample_batch(gen, *, d: int, L: int, sigma2: float, batch: int):
    """One batch of fresh prompts from ``gen`` (a ``torch.Generator``), float32 (module docstring).

    Returns
    -------
    Z : Tensor, shape (batch, L, d + 1)
        Context tokens ``(x_l, y_l)``.
    xq : Tensor, shape (batch, d)
        Query covariates (the query token is ``(x_q, 0)``).
    yq : Tensor, shape (batch,)
        Noisy targets ``βᵀx_q + ε_q``.
    """
    torch = _torch()
    X = torch.randn(batch, L + 1, d, generator=gen)
    beta = torch.randn(batch, d, 1, generator=gen) / math.sqrt(d)
    noise = torch.randn(batch, L + 1, generator=gen) * math.sqrt(sigma2)
    y = torch.bmm(X, beta).squeeze(-1) + noise
    Z = torch.cat([X[:, :L], y[:, :L, None]], dim=2)
    return Z, X[:, L], y[:, L]


# ---------------------------------------------------------------- configuration and files
def _check_int(flag, value, lo, hi):
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise UsageError(f"`{flag}` must be an integer in [{lo}, {hi}], got {value!r}")
    return value


def _check_float(flag, value, lo, *, open_lo):
    ok = math.isfinite(value) and (value > lo if open_lo else value >= lo)
    if not ok:
        raise UsageError(f"`{flag}` must be a finite number {'>' if open_lo else '>='} {lo}, got {value!r}")
    return float(value)


def make_config(args) -> dict:
    """The run's configuration from the parsed flags (validated; ``UsageError`` names the flag)."""
    base = QUICK if args.quick else PAPER
    pick = {k: (base[k] if getattr(args, k) is None else getattr(args, k)) for k in base}
    _check_int("--heads", args.heads, 1, 64)
    _check_int("--d", pick["d"], 1, 1000)
    _check_int("--L", pick["L"], 1, 100_000)
    _check_int("--batch", pick["batch"], 1, 1_000_000)
    _check_int("--steps", pick["steps"], 1, 10**8)
    _check_int("--checkpoint-every", pick["checkpoint_every"], 1, 10**8)
    _check_int("--print-every", args.print_every, 1, 10**8)
    _check_float("--sigma2", pick["sigma2"], 0.0, open_lo=False)
    _check_float("--lr", pick["lr"], 0.0, open_lo=True)
    _check_int("--seed", args.seed, 0, DATA_SEED_OFFSET - 1)
    data_seed = args.seed + DATA_SEED_OFFSET if args.data_seed is None else args.data_seed
    _check_int("--data-seed", data_seed, 0, 2**64 - 1)
    if args.stop_after is not None:
        _check_int("--stop-after", args.stop_after, 1, 10**8)
    D, H = pick["d"] + 1, args.heads
    need = 4 * pick["batch"] * (pick["L"] + 1) * (12 * H * D + 4 * D)  # activations and their gradients
    if need > MEMORY_BUDGET:
        raise UsageError(
            f"`--batch` {pick['batch']} with `--L` {pick['L']}, `--d` {pick['d']}, `--heads` {H} needs about "
            f"{need / 2**20:,.0f} MiB a step, more than {MEMORY_BUDGET / 2**20:,.0f} MiB"
        )
    torch = _torch()
    return {
        "d": pick["d"],
        "L": pick["L"],
        "sigma2": pick["sigma2"],
        "heads": H,
        "batch": pick["batch"],
        "lr": pick["lr"],
        "betas": list(ADAM["betas"]),
        "eps": ADAM["eps"],
        "seed": args.seed,
        "data_seed": data_seed,
        "loss": "mse",
        "dtype": "float32",
        "init": "torch.manual_seed(seed); nn.Linear default (q, k, v, o in that order)",
        "sampler_version": SAMPLER_VERSION,
        "quick": bool(args.quick),
        "steps": pick["steps"],
        "checkpoint_every": pick["checkpoint_every"],
        "torch_version": str(torch.__version__),
    }


def _save_torch(path: Path, obj) -> None:
    from reduced_dynamics.io import atomic_write_bytes

    buf = io.BytesIO()
    _torch().save(obj, buf)
    atomic_write_bytes(path, buf.getvalue())


def _flag(key):
    return "--" + key.replace("_", "-")


def check_out(out: Path, cfg: dict) -> None:
    """Refuse an ``--out`` made for another configuration (or holding files this script did not make)."""
    from reduced_dynamics.io import atomic_write_json

    path = out / CONFIG_NAME
    if path.exists():
        try:
            old = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise UsageError(f"`--out` {out}: cannot read {CONFIG_NAME} ({exc}); use another --out") from None
        for k in IDENTITY:
            if old.get(k) != cfg[k]:
                raise UsageError(
                    f"`--out` {out} holds a run with {k}={old.get(k)!r}, not {k}={cfg[k]!r} "
                    f"({_flag(k)}); use another --out"
                )
        return
    if out.exists() and any(not p.name.endswith(".log") for p in out.iterdir()):
        raise UsageError(f"`--out` {out} is not empty and holds no {CONFIG_NAME}; use another --out")
    atomic_write_json(path, {k: cfg[k] for k in (*IDENTITY, "torch_version")})


# ---------------------------------------------------------------- training
def train(cfg: dict, out: Path, *, stop_after: int | None = None, print_every: int = 2000) -> int:
    """Train (or resume) the run ``cfg`` in ``out``; return the exit status (0 done, 1 stopped/diverged)."""
    torch = _torch()
    d, L, sigma2, B, H, steps = cfg["d"], cfg["L"], cfg["sigma2"], cfg["batch"], cfg["heads"], cfg["steps"]
    torch.manual_seed(cfg["seed"])
    model = build_model(d, H)
    opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"], betas=ADAM["betas"], eps=ADAM["eps"], foreach=False)
    gen = torch.Generator().manual_seed(cfg["data_seed"])
    losses = torch.empty(steps, dtype=torch.float64)
    step = 0
    ck_path = out / CHECKPOINT_NAME
    if ck_path.exists():
        try:
            ck = torch.load(ck_path, weights_only=True)
        except Exception as exc:  # a damaged file: one line, not a traceback
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise UsageError(f"`--out` {out}: cannot read {CHECKPOINT_NAME} ({msg}); use another --out") from None
        for k in IDENTITY:
            if ck["config"][k] != cfg[k]:  # config.json and the checkpoint disagree: never mix
                raise UsageError(f"`--out` {out}: {CHECKPOINT_NAME} has {k}={ck['config'][k]!r}; use another --out")
        step = int(ck["step"])
        if step > steps:
            raise UsageError(f"`--steps` must be >= {step}, the step of the checkpoint in {out}, got {steps}")
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optim"])
        gen.set_state(ck["data_rng"])
        losses[:step] = ck["losses"]
        if step == steps and (out / FINAL_NAME).exists():
            print(f"done: {out} already holds the run to step {steps}", flush=True)
            return 0
        print(f"resuming at step {step} from {ck_path}", flush=True)

    def checkpoint():
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        _save_torch(out / f"model_step{step}.pt", state)
        _save_torch(
            ck_path,
            {
                "config": cfg,
                "step": step,
                "model": state,
                "optim": opt.state_dict(),
                "data_rng": gen.get_state(),
                "losses": losses[:step].clone(),
            },
        )

    stop = {"signal": None}

    def on_signal(signum, _frame):
        stop["signal"] = signum

    old_handlers = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    start_step, t0 = step, time.perf_counter()
    t_print, s_print = t0, step
    status, message = 0, "done"
    try:
        while step < steps:
            Z, xq, yq = sample_batch(gen, d=d, L=L, sigma2=sigma2, batch=B)
            loss = torch.mean((model(Z, xq) - yq) ** 2)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses[step] = loss.detach()
            step += 1
            if not math.isfinite(losses[step - 1].item()):
                status, message = 1, f"diverged: the loss is {losses[step - 1].item()} at step {step}"
                break
            if step % print_every == 0 or step == steps:
                now = time.perf_counter()
                rate = (step - s_print) / max(now - t_print, 1e-9)
                eta = (steps - step) / max((step - start_step) / (now - t0), 1e-9)
                print(
                    f"step {step}/{steps}  {rate:.0f} steps/s  loss (mean of steps {s_print + 1}-{step}) "
                    f"{losses[s_print:step].mean().item():.5f}  ETA {eta / 60:.1f} min",
                    flush=True,
                )
                t_print, s_print = now, step
            if step % cfg["checkpoint_every"] == 0 or step == steps:
                checkpoint()
            if stop_after is not None and step >= stop_after and step < steps:
                status, message = 1, f"stopped after step {step} (--stop-after); re-run to resume"
                checkpoint()
                break
            if stop["signal"] is not None and step < steps:
                status, message = 1, f"interrupted by signal {stop['signal']} at step {step}; re-run to resume"
                checkpoint()
                break
    finally:
        for s, h in old_handlers.items():
            signal.signal(s, h)
    seconds = time.perf_counter() - t0
    rate = (step - start_step) / max(seconds, 1e-9)
    if status == 0:
        from reduced_dynamics.io import atomic_write_json

        _save_torch(out / FINAL_NAME, {k: v.detach().clone() for k, v in model.state_dict().items()})
        tail = losses[max(0, steps - 10_000) : steps]
        atomic_write_json(
            out / SUMMARY_NAME,
            {
                "config": cfg,
                "step": step,
                "seconds_this_call": seconds,
                "steps_per_second_this_call": rate,
                "loss_mean_last_steps": {"n": int(tail.numel()), "mean": tail.mean().item()},
                "state_dict": FINAL_NAME,
            },
        )
    print(f"{message}: step {step}/{steps}, {seconds:.1f} s this call, {rate:.0f} steps/s", flush=True)
    return status


def main(argv=None) -> int:
    p = _Parser(prog="train_torch_paper", description=__doc__.splitlines()[0])
    p.add_argument("--heads", type=int, default=2, help="number of heads H (default 2)")
    p.add_argument("--steps", type=int, help=f"Adam steps (default {PAPER['steps']}; --quick {QUICK['steps']})")
    p.add_argument("--seed", type=int, default=0, help="init seed: torch.manual_seed(SEED) (default 0)")
    p.add_argument("--data-seed", type=int, help=f"data torch.Generator seed (default SEED + {DATA_SEED_OFFSET})")
    p.add_argument("--out", required=True, help="run directory (created; resumed if it holds this run)")
    p.add_argument("--checkpoint-every", type=int, help=f"default {PAPER['checkpoint_every']}")
    p.add_argument("--print-every", type=int, default=2000, help="progress line every N steps (default 2000)")
    p.add_argument("--quick", action="store_true", help="tiny run (d=3, L=8, batch 16, lr 1e-2, 40 steps)")
    p.add_argument("--stop-after", type=int, help="checkpoint and stop after this step (re-run resumes)")
    for k in ("d", "L", "batch"):
        p.add_argument(f"--{k}", type=int, help=f"default {PAPER[k]}")
    p.add_argument("--sigma2", type=float, help=f"default {PAPER['sigma2']}")
    p.add_argument("--lr", type=float, help=f"default {PAPER['lr']}")
    args = p.parse_args(argv)
    try:
        cfg = make_config(args)
        out = Path(args.out)
        check_out(out, cfg)
        print(f"config {json.dumps(cfg)}", flush=True)
        return train(cfg, out, stop_after=args.stop_after, print_every=args.print_every)
    except UsageError as exc:
        sys.stderr.write(f"train_torch_paper: error: {exc}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
