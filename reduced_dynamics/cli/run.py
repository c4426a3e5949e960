"""``reduced-dynamics run``: integrate the gradient flow of L̃ and summarise it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from reduced_dynamics._validation import check_heads_pair
from reduced_dynamics.cli._setting import add_setting_arguments, setting_from_args
from reduced_dynamics.dynamics.flow import EXPLICIT_METHODS, IMPLICIT_METHODS, initial_state, integrate_flow
from reduced_dynamics.io import atomic_savez, atomic_write_json, to_jsonable

HELP = "Integrate the reduced (ω, μ) gradient flow and summarise it (defaults: the paper's setting, H = 2)."


def _floats(text):
    try:
        return [float(v) for v in text.replace(",", " ").split()]
    except ValueError:
        raise ValueError(f"expected a comma-separated list of numbers, got {text!r}") from None


def add_arguments(p):
    p.add_argument("--heads", type=int, default=2, help="number of heads H (default 2)")
    add_setting_arguments(p)
    p.add_argument("--t-end", type=float, default=1e5, help="final time (default 1e5)")
    p.add_argument("--init", choices=["random", "symmetric"], default="random", help="initialisation (default random)")
    p.add_argument("--init-scale", type=float, default=0.01, help="scale of the initial entries (default 0.01)")
    p.add_argument("--omega0", type=str, default=None, help="user-given initial ω, comma-separated (needs --mu0)")
    p.add_argument("--mu0", type=str, default=None, help="user-given initial μ, comma-separated (needs --omega0)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random initialisation (default 0)")
    p.add_argument(
        "--method",
        default="Radau",
        help=f"solve_ivp method, one of {IMPLICIT_METHODS + EXPLICIT_METHODS} (default Radau)",
    )
    p.add_argument("--rtol", type=float, default=1e-8, help="relative tolerance (default 1e-8)")
    p.add_argument("--atol", type=float, default=1e-11, help="absolute tolerance (default 1e-11)")
    p.add_argument("--n-eval", type=int, default=400, help="number of log-spaced output times (default 400)")
    p.add_argument(
        "--out", type=str, default=None, help="folder for the trajectory (.npz), summary (.json) and portrait (.png)"
    )
    p.add_argument("--no-plot", action="store_true", help="do not draw the PNG")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the text summary")


def _fmt(v):
    return "never" if v is None else f"{v:.4g}"


def text_summary(res) -> str:
    s = res.summary()
    lines = [
        f"reduced (ω, μ) gradient flow: H={s['n_heads']}, d={s['d']}, L={s['L']}, σ²={s['sigma2']:g}, method={s['method']}",
        f"  status {s['status']} ({'success' if s['success'] else 'FAILED'}): {s['message']}",
        f"  t_end = {s['t']:.4g}   ({s['nfev']} gradient evals, {s['njev']} Hessians, {s['seconds']:.2f} s)",
        f"  final ω = {np.array2string(np.asarray(s['omega']), precision=5)}",
        f"  final μ = {np.array2string(np.asarray(s['mu']), precision=5)}",
        f"  L̃ = {s['loss']:.10f}"
        + (
            f"   inf L̃ = 1+σ²−η* = {s['inf_loss']:.10f}   gap = {s['loss'] - s['inf_loss']:.3e}"
            if s["inf_loss"] is not None
            else ""
        ),
        f"  γ = {s['gamma']:.6g}   η_eff = μᵀω = {s['eta_eff']:.8f}   η* = {s['eta_star']:.8f}   η_eff−η* = {s['eta_eff'] - s['eta_star']:.3e}",
        f"  Σμ = {s['sum_mu']:.3e}   |Σμ|/Σ|μ| = {s['zero_sum_ratio']:.3e}   dummy heads = {s['n_dummy']}",
        "  stage times (first t from which the pattern holds to the end): "
        + ", ".join(f"{k.replace('_', ' ')} {_fmt(v)}" for k, v in s["stage_times"].items()),
    ]
    return "\n".join(lines)


def main(args) -> int:
    setting = setting_from_args(args)
    if (args.omega0 is None) != (args.mu0 is None):
        raise ValueError("`--omega0` and `--mu0` must be given together")
    if args.omega0 is not None:
        w0, m0 = check_heads_pair(_floats(args.omega0), _floats(args.mu0))
        w0, m0 = initial_state(args.heads, kind="given", omega0=w0, mu0=m0)
    else:
        w0, m0 = initial_state(args.heads, kind=args.init, scale=args.init_scale, seed=args.seed)
    res = integrate_flow(
        w0,
        m0,
        setting,
        t_end=args.t_end,
        method=args.method,
        rtol=args.rtol,
        atol=args.atol,
        n_eval=args.n_eval,
    )
    summary = res.summary()
    files = {}
    if args.out:
        out = Path(args.out)
        stem = f"flow_H{res.n_heads}_d{setting.d}_L{setting.L}_s{setting.sigma2:g}_seed{args.seed}"
        files["trajectory"] = str(
            atomic_savez(
                out / f"{stem}.npz",
                t=res.t,
                omega=res.omega,
                mu=res.mu,
                loss=res.loss,
                grad_norm=res.grad_norm,
                gamma=res.gamma,
                eta_eff=res.eta_eff,
            )
        )
        if not args.no_plot:
            from reduced_dynamics.plots.style import plot_flow_summary, save_figure

            save_figure(plot_flow_summary(res), out / f"{stem}.png")
            files["portrait"] = str(out / f"{stem}.png")
        files["summary"] = str(out / f"{stem}.json")
        atomic_write_json(out / f"{stem}.json", {**summary, "files": files})
    if args.json:
        sys.stdout.write(json.dumps(to_jsonable({**summary, "files": files})) + "\n")
    else:
        print(text_summary(res))
        for k, v in files.items():
            print(f"  wrote {k}: {v}")
    return 0 if res.success else 1
