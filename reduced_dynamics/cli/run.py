"""``reduced-dynamics run``: integrate the gradient flow of L̃ and summarise it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from reduced_dynamics._validation import check_heads_pair
from reduced_dynamics.cli._common import (
    Progress,
    add_quiet,
    check_range,
    exit_codes_epilog,
    nonempty,
    parse_floats,
    prepare_out,
)
from reduced_dynamics.cli._setting import (
    add_extension_arguments,
    add_setting_arguments,
    add_tasks_argument,
    setting_from_args,
)
from reduced_dynamics.dynamics.flow import (
    EXPLICIT_METHODS,
    IMPLICIT_METHODS,
    RTOL_MAX,
    default_tolerances,
    initial_state,
    integrate_flow,
)
from reduced_dynamics.io import atomic_savez, atomic_write_json, output_stem, to_jsonable

HELP = "Integrate the reduced (ω, μ) gradient flow and summarise it (defaults: the paper's setting, H = 2)."
EPILOG = exit_codes_epilog(fail="the solver did not reach --t-end") + (
    "\n\nOutput names (--out) encode the whole configuration, e.g.\n"
    "  flow_H2_d5_L40_sigma2-0.1_init-random_scale-0.01_seed0_tend-100000.0_method-LSODA_rtol-1e-11_atol-1e-14_neval400"
)
#: largest --n-init (the batch keeps N × n_eval × 2H floats of output)
N_INIT_MAX = 10_000
#: library parameter names -> the flags of this command (for the one error line)
PARAM_FLAGS = {"n_heads": "--heads", "scale": "--init-scale", "omega": "--omega0", "mu": "--mu0", "kind": "--init"}
#: bounds of the solver flags (checked before any work)
T_END_MAX = 1e9  # the cost grows with t_end: about 10 s at 1e9, over 2 min at 1e12 (H = 2, Radau)
# [1e-13, RTOL_MAX]: below ~1e-13 solve_ivp silently raises it; above, integrate_flow refuses it (same bound).
RTOL_RANGE = (1e-13, RTOL_MAX)
ATOL_RANGE = (0.0, 1.0)  # (0, 1)


def add_arguments(p):
    p.add_argument("--heads", type=int, default=2, help="number of heads H (default 2)")
    add_setting_arguments(p)
    add_tasks_argument(p)
    add_extension_arguments(p)
    p.add_argument("--t-end", type=float, default=1e5, help=f"final time, in (0, {T_END_MAX:g}] (default 1e5)")
    p.add_argument("--init", choices=["random", "symmetric"], default="random", help="initialisation (default random)")
    p.add_argument("--init-scale", type=float, default=0.01, help="scale of the initial entries (default 0.01)")
    p.add_argument(
        "--omega0", type=str, default=None, help="user-given initial ω, comma-separated, e.g. 0.1,-0.1 (needs --mu0)"
    )
    p.add_argument("--mu0", type=str, default=None, help="user-given initial μ, comma-separated (needs --omega0)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random initialisation (default 0)")
    p.add_argument(
        "--n-init",
        type=int,
        default=None,
        help=f"integrate N random initial states (those of --seed S, S+1, ..., S+N-1) in one batch "
        f"(batched Radau from 48 starts, else LSODA one after the other); N in [1, {N_INIT_MAX}]",
    )
    p.add_argument(
        "--method",
        default=None,
        help=f"solver, one of {IMPLICIT_METHODS + EXPLICIT_METHODS} (default LSODA; not with --n-init)",
    )
    p.add_argument(
        "--rtol",
        type=float,
        default=None,
        help="relative tolerance, in [1e-13, 0.1] (default 1e-11 for LSODA, 1e-7 for the batched Radau, else 1e-8)",
    )
    p.add_argument(
        "--atol",
        type=float,
        default=None,
        help="absolute tolerance, in (0, 1) (default 1e-14 for LSODA, 1e-10 for the batched Radau, else 1e-11)",
    )
    p.add_argument("--n-eval", type=int, default=400, help="number of log-spaced output times (default 400)")
    p.add_argument(
        "--out",
        type=nonempty,
        default=None,
        help="folder for the trajectory (.npz), summary (.json) and portrait (.png), named by the configuration",
    )
    p.add_argument("--no-plot", action="store_true", help="do not draw the PNG")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the text summary")
    add_quiet(p)


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


def output_name(args, setting, n_heads: int) -> str:
    """The stem of ``run``'s output files: every option that changes the result, in a fixed order."""
    if args.omega0 is not None:
        init = {
            "init": "given",
            "omega0": parse_floats(args.omega0, "--omega0"),
            "mu0": parse_floats(args.mu0, "--mu0"),
        }
    else:
        init = {"init": args.init, "scale": float(args.init_scale), "seed": int(args.seed)}
    return output_stem(
        "flow",
        dict(
            H=int(n_heads),
            d=setting.d,
            L=setting.L,
            sigma2=float(setting.sigma2),
            **init,
            tend=float(args.t_end),
            method=str(args.method),
            rtol=float(args.rtol),
            atol=float(args.atol),
            neval=int(args.n_eval),
        ),
    )


def _check_solver_flags(args):
    """Resolve the default method and tolerances, then check the solver flags (before any work)."""
    if args.n_init is not None:
        if args.method is not None:
            raise ValueError(
                "`--method` cannot be combined with `--n-init` (the batch picks its integrator: Radau over the batch from 48 starts, else LSODA)"
            )
    else:
        args.method = "LSODA" if args.method is None else args.method
        rtol, atol = default_tolerances(args.method)
        args.rtol = rtol if args.rtol is None else args.rtol
        args.atol = atol if args.atol is None else args.atol
    check_range("--t-end", args.t_end, 0.0, T_END_MAX)
    if args.rtol is not None:
        check_range("--rtol", args.rtol, RTOL_RANGE[0], RTOL_RANGE[1], lo_open=False, hi_open=False)
    if args.atol is not None:
        check_range("--atol", args.atol, ATOL_RANGE[0], ATOL_RANGE[1], hi_open=True)


def main(args) -> int:
    setting = setting_from_args(args)
    if setting.activation != "exp":  # another attention activation f: the reduced flow of L̃_f
        from reduced_dynamics.cli._activation import run_activation

        return run_activation(args, setting)
    if setting.tasks is not None:  # multi-task regression (--tasks): its own reduced model and trainer
        from reduced_dynamics.cli._multitask import run_multitask

        return run_multitask(args, setting)
    if setting.Sigma is not None:  # x ~ N(0, Σ): the flow of the preconditioned reduced model in (ω, μ, W)
        from reduced_dynamics.cli._precond import run_precond

        return run_precond(args, setting)
    _check_solver_flags(args)
    if args.n_init is not None:
        return _main_batch(args, setting)
    return _main_single(args, setting)


def _main_batch(args, setting) -> int:
    """``run --n-init N``: N random starts (seeds S..S+N-1) in one batch; start and stop states as N × H arrays."""
    from reduced_dynamics.dynamics.batch_flow import integrate_flow_batch

    if not 1 <= args.n_init <= N_INIT_MAX:
        raise ValueError(f"`--n-init` must be an integer in [1, {N_INIT_MAX}], got {args.n_init}")
    if args.omega0 is not None or args.mu0 is not None:
        raise ValueError("`--n-init` draws random initial states: it cannot be combined with `--omega0`/`--mu0`")
    if args.init != "random":
        raise ValueError("`--n-init` needs `--init random` (every symmetric start is the same state)")
    if args.seed < 0:
        raise ValueError(f"`--seed` must be a non-negative integer, got {args.seed}")
    prepare_out(args.out)
    progress = Progress("run", quiet=args.quiet)
    starts = np.array(
        [
            initial_state(args.heads, kind="random", scale=args.init_scale, seed=args.seed + i)
            for i in range(args.n_init)
        ]
    )
    progress.stage(f"integrating {args.n_init} flows, H={args.heads}, to t={args.t_end:g} in one batch")
    try:
        res = integrate_flow_batch(
            starts[:, 0], starts[:, 1], setting, t_end=args.t_end, rtol=args.rtol, atol=args.atol, n_eval=args.n_eval
        )
    except OverflowError as exc:
        text = str(exc).splitlines()[0].replace("`omega0`", "ω0")
        raise OverflowError(f"{text} (lower `--init-scale`)") from None
    summary = {**res.summary(), "seeds": list(range(args.seed, args.seed + args.n_init))}
    files = {}
    if args.out:
        out = Path(args.out)
        stem = output_stem(
            "flows",
            dict(
                H=int(args.heads),
                d=setting.d,
                L=setting.L,
                sigma2=float(setting.sigma2),
                init="random",
                scale=float(args.init_scale),
                seed=int(args.seed),
                ninit=int(args.n_init),
                tend=float(args.t_end),
                rtol=float(res.rtol),
                atol=float(res.atol),
                neval=int(args.n_eval),
            ),
        )
        progress.stage(f"writing {out / stem}.*")
        files["trajectories"] = str(
            atomic_savez(out / f"{stem}.npz", t=res.t, omega=res.omega, mu=res.mu, status=res.status, t_stop=res.t_stop)
        )
        files["summary"] = str(out / f"{stem}.json")
        atomic_write_json(out / f"{stem}.json", {**summary, "files": files})
    if args.json:
        sys.stdout.write(json.dumps(to_jsonable({**summary, "files": files})) + "\n")
    else:
        print(
            f"{res.n_traj} reduced (ω, μ) gradient flows: H={res.n_heads}, d={setting.d}, L={setting.L}, "
            f"σ²={setting.sigma2:g}, {'batched Radau' if res.method == 'radau' else 'LSODA, one after the other'}, "
            f"{res.seconds:.2f} s; {int(np.sum(res.success))} succeeded"
        )
        for i in range(res.n_traj):
            w, m = res.omega_stop[i], res.mu_stop[i]
            print(
                f"  seed {args.seed + i}: status {int(res.status[i])} at t={res.t_stop[i]:.4g}  "
                f"ω={np.array2string(w, precision=5)}  μ={np.array2string(m, precision=5)}  μᵀω={float(w @ m):.8f}"
            )
        for k, v in files.items():
            print(f"  wrote {k}: {v}")
    return 0 if bool(np.all(res.success)) else 1


def _main_single(args, setting) -> int:
    if (args.omega0 is None) != (args.mu0 is None):
        raise ValueError("`--omega0` and `--mu0` must be given together")
    prepare_out(args.out)
    progress = Progress("run", quiet=args.quiet)
    try:
        if args.omega0 is not None:
            w0, m0 = check_heads_pair(parse_floats(args.omega0, "--omega0"), parse_floats(args.mu0, "--mu0"))
            w0, m0 = initial_state(args.heads, kind="given", omega0=w0, mu0=m0)
        else:
            w0, m0 = initial_state(args.heads, kind=args.init, scale=args.init_scale, seed=args.seed)
        progress.stage(f"integrating H={len(w0)} to t={args.t_end:g} ({args.method})")
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
    except OverflowError as exc:
        text = str(exc).splitlines()[0]
        if args.omega0 is None:  # the random/symmetric start, not a user-given --omega0, is too large
            text = text.replace("`omega0`", "ω0")
        hint = "`--omega0`" if args.omega0 is not None else "`--init-scale`"
        raise OverflowError(f"{text} (lower {hint})") from None
    summary = res.summary()
    files = {}
    if args.out:
        out = Path(args.out)
        stem = output_name(args, setting, res.n_heads)
        progress.stage(f"writing {out / stem}.*")
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
