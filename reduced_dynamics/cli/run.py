"""``reduced-dynamics run``: integrate the gradient flow of the reduced model of a setting and summarise it.

One path for every model: the flags build the :class:`~reduced_dynamics.Setting` (``--d --L --sigma2``,
``--sigma``/``--sigma-eigs``, ``--tasks``, ``--activation``) and ``--objective`` picks the objective;
:func:`reduced_dynamics.reduced_model` picks the model, :mod:`reduced_dynamics.cli._dispatch` checks
that every typed flag applies to it, :func:`reduced_dynamics.integrate` runs the flow, and the model's
summary is printed (``--json``) or written (``--out``). Exit 0, or 1 when the flow did not end
successfully (status and reason in the output), 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from reduced_dynamics.cli._common import (
    Progress,
    add_quiet,
    check_option,
    check_range,
    exit_codes_epilog,
    nonempty,
    note,
    parse_floats,
    prepare_out,
    rename_params,
)
from reduced_dynamics.cli._dispatch import SETTING_FLAGS, check_model_flags, model_from_args, typed_flags
from reduced_dynamics.cli._setting import (
    add_extension_arguments,
    add_setting_arguments,
    add_tasks_argument,
    setting_from_args,
)

HELP = "Integrate the reduced (ω, μ) gradient flow and summarise it (defaults: the paper's setting, H = 2)."
EPILOG = exit_codes_epilog(fail="the flow did not end successfully (e.g. it did not reach --t-end)") + (
    "\n\nThe setting (--sigma/--sigma-eigs, --tasks, --activation) and --objective choose the reduced model;\n"
    "flags that do not apply to it are refused. Output names (--out) encode the whole configuration, e.g.\n"
    "  flow_H2_d5_L40_sigma2-0.1_init-random_scale-0.01_seed0_tend-100000.0_method-LSODA_rtol-1e-11_atol-1e-14_neval400"
)
#: largest --n-init (the batch keeps N × n_times × size floats of output)
N_INIT_MAX = 10_000
#: library parameter names -> the flags of this command (for the one error line)
PARAM_FLAGS = {
    "n_heads": "--heads",
    "scale": "--init-scale",
    "omega": "--omega0",
    "mu": "--mu0",
    "kind": "--init",
    "n_times": "--n-times",
    "budget": "--budget",
    **SETTING_FLAGS,
}


def add_arguments(p):
    from reduced_dynamics.flow._integrate import BUDGET, METHODS, T_END_MAX

    p.add_argument("--heads", type=int, default=2, help="number of heads H (default 2)")
    add_setting_arguments(p)
    add_tasks_argument(p)
    add_extension_arguments(p)
    p.add_argument(
        "--objective",
        choices=["approx", "corrected", "exact"],
        default="approx",
        help="approx: the large-L loss L̃ (default); corrected: the risk to order 1/L; exact: the exact finite-L risk "
        "(isotropic softmax single task only)",
    )
    p.add_argument("--t-end", type=float, default=1e5, help=f"final time, in [2.2e-308, {T_END_MAX:g}] (default 1e5)")
    p.add_argument(
        "--init",
        choices=["random", "symmetric"],
        default="random",
        help="initialisation (default random; symmetric: ω = μ = scale·(+1, −1, ...), models with scalar heads and Σ)",
    )
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
        help=f"integrate N random initial states (those of --seed S, S+1, ..., S+N-1) as one batch "
        f"(batch-Radau from 48 starts for models with a Hessian, else one after the other); N in [1, {N_INIT_MAX}]",
    )
    p.add_argument(
        "--method",
        default=None,
        help=f"solver, one of {', '.join(METHODS)} (default: the model's, LSODA for L̃; batch-Radau for >= 48 starts)",
    )
    p.add_argument(
        "--rtol",
        type=float,
        default=None,
        help="relative tolerance, in [1e-13, 0.1] (default 1e-11 for LSODA, 1e-6 for batch-Radau, else 1e-8)",
    )
    p.add_argument(
        "--atol",
        type=float,
        default=None,
        help="absolute tolerance, in (0, 1] (default 1e-14 for LSODA, 1e-10 for batch-Radau, else 1e-11)",
    )
    p.add_argument("--n-times", type=int, default=None, help="number of log-spaced output times (default 400)")
    p.add_argument("--n-eval", type=int, default=None, help="old spelling of --n-times (kept for 0.2; prints a note)")
    p.add_argument(
        "--budget",
        type=int,
        default=BUDGET,
        help=f"gradient evaluations one trajectory may spend (default {BUDGET}; status -2 beyond it)",
    )
    p.add_argument(
        "--out",
        type=nonempty,
        default=None,
        help="folder for the trajectory (.npz), summary (.json) and portrait (.png), named by the configuration",
    )
    p.add_argument("--no-plot", action="store_true", help="do not draw the PNG (the isotropic run draws one)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the text summary")
    add_quiet(p)


def resolve_n_times(args, command: str = "run") -> int:
    """``--n-times`` (or its old spelling ``--n-eval``, with a one-line note); default 400."""
    if args.n_eval is not None:
        if args.n_times is not None:
            raise ValueError("`--n-eval` is the old spelling of `--n-times`: give one of them")
        if not getattr(args, "quiet", False):
            note("`--n-eval` is now `--n-times` (the old spelling works in 0.2)")
        # errors name the spelling the user typed
        args._flags = {**getattr(args, "_flags", {}), "n_times": "--n-eval", "n-times": "--n-eval"}
        args.n_times = args.n_eval
    return 400 if args.n_times is None else args.n_times


def _fmt(v):
    return "never" if v is None else f"{v:.4g}"


def _vec(v, precision=5):
    return np.array2string(np.asarray(v, dtype=float), precision=precision)


def text_summary(flow, summary: dict | None = None) -> str:
    """The text report of one flow: the model, the status, the end state and its model-specific summaries.

    ``summary`` is ``flow.summary()`` (default), e.g. with its message naming the flags.
    """
    s = flow.summary() if summary is None else summary
    st = flow.setting
    act = f", f = {st.activation} (C = {st.activation_c:g})" if st.activation != "exp" else ""
    lines = [
        f"reduced gradient flow, {flow.model.name} model{act}: H={flow.n_heads}, d={st.d}, L={st.L}, "
        f"σ²={st.sigma2:g}, method={s['method']}",
        f"  status {s['status']} ({'success' if s['success'] else 'FAILED'}): {s['message']}",
        f"  t_end = {s['t']:.4g}   ({s['nfev']} gradient evals, {s['njev']} Hessians, {s['seconds']:.2f} s)",
    ]
    for part in flow.model.parts:
        lines.append(f"  final {part.name} = {_vec(s[part.name])}".replace("\n", "\n" + " " * 10))
    name = "L̃" if flow.model.name == "isotropic" else "loss"
    loss = f"  {name} = {s['loss']:.10f}"
    if s.get("inf_loss") is not None:
        loss += f"   inf L̃ = 1+σ²−η* = {s['inf_loss']:.10f}   gap = {s['loss'] - s['inf_loss']:.3e}"
    lines.append(loss)
    if "gamma" in s and "eta_star" in s and s.get("eta_star") is not None:
        lines.append(
            f"  γ = {s['gamma']:.6g}   η_eff = μᵀω = {s['eta_eff']:.8f}   η* = {s['eta_star']:.8f}   "
            f"η_eff−η* = {s['eta_eff'] - s['eta_star']:.3e}"
        )
    if "n_dummy" in s:
        lines.append(f"  Σμ = {s['sum_mu']:.3e}   |Σμ|/Σ|μ| = {s['zero_sum_ratio']:.3e}   dummy heads = {s['n_dummy']}")
    if "eta_claim" in s:
        lines.append(
            f"  η claimed 2C_fγμ₊ = {s['eta_claim']:.5f}   measured μᵀT₁ = {s['eta_tilt']:.5f}   "
            f"sign matched {s['sign_matched']}, zero-sum {s['zero_sum']}, homogeneous {s['homogeneous']}"
        )
    if "distance_sigma_inv" in s:
        lines.append(
            f"  γ = {s['gamma']:.5f}  η_eff = {s['eta_eff']:.5f}  distance of W to Σ⁻¹ {float(np.ravel(s['distance_sigma_inv'])[0]):.5f}, "
            f"to the limit (Σ+κ_L I)⁻¹ {float(np.ravel(s['distance_limit'])[0]):.2e}, to I {float(np.ravel(s['distance_identity'])[0]):.4f}"
        )
    if "roles" in s:
        lines.append(f"  head roles {s['roles']}   loss per task {[round(float(x), 6) for x in s['loss_per_task']]}")
    if "distance_limit" in s and "loss_per_task" in s:
        lines.append(
            f"  loss per task {[round(float(x), 6) for x in s['loss_per_task']]}   "
            f"relative distance of A_n to A_n* {[round(float(x), 5) for x in s['distance_limit']]}"
        )
    if "stage_times" in s:
        lines.append(
            "  stage times (first t from which the pattern holds to the end): "
            + ", ".join(f"{k.replace('_', ' ')} {_fmt(v)}" for k, v in s["stage_times"].items())
        )
    return "\n".join(lines)


def _start_overflow(args, setting, exc) -> OverflowError:
    """The one line of a start outside the model's domain, naming the flags that set it."""
    text = rename_params(str(exc).splitlines()[0].replace("`y0`", "ω0"), getattr(args, "_flags", {}))
    hint = "`--omega0`" if args.omega0 is not None else "`--init-scale`"
    if hint not in text:
        text += f" (lower {hint})"
    if setting.Sigma is not None:  # the exponent grows with Σ²: a Σ of large eigenvalues leaves no room
        lam = float(np.linalg.eigvalsh(setting.Sigma)[-1])
        text = text.rstrip(".") + (
            f"; the exponent grows with the square of Σ, whose largest eigenvalue is {lam:.3g} "
            "(`--sigma/--sigma-eigs`): a Σ of smaller scale leaves the start more room"
        )
    return OverflowError(text)


def _check_seed(seed) -> None:
    if seed < 0:
        raise ValueError(f"`--seed` must be a non-negative integer, got {seed}")


def _starts(view, model, seed):
    """The start(s) of the flow(s) of ``seed`` (``--n-init`` N: seeds S..S+N-1) and what they are called."""
    if view.n_init is not None:
        seeds = range(seed, seed + view.n_init)
        if model.scalar_heads:  # the starts of --init random for seeds S..S+N-1, drawn in one call
            from reduced_dynamics.models._heads import random_starts

            return random_starts(model.n_heads, seeds, scale=view.init_scale), f"{view.n_init} flows"
        return np.stack([_start(view, model, s) for s in seeds]), f"{view.n_init} flows"
    return _start(view, model, seed), "the flow"


def _check_starts(seed, view, model, setting) -> None:
    """Refuse a start of ``seed`` outside the model's domain (for :func:`check_option`: returns None)."""
    from reduced_dynamics.flow._integrate import check_start

    y0, _ = _starts(view, model, seed)
    try:
        check_start(model, y0)
    except OverflowError as exc:
        raise _start_overflow(view, setting, exc) from None


def _start(args, model, seed):
    """The start of one flow: ``--omega0/--mu0``, or ``--init`` from ``seed`` (as 0.1 drew it, per model)."""
    from reduced_dynamics.models._heads import initial_state

    H = model.n_heads
    if model.name in ("multitask", "precond_multitask"):
        if args.init != "random":
            raise ValueError(f"`--init` must be random for the {model.name} model (its start is random)")
        return model.initial_state(seed=seed, scale=args.init_scale)
    if args.omega0 is not None:
        w0, m0 = initial_state(
            H, kind="given", omega0=parse_floats(args.omega0, "--omega0"), mu0=parse_floats(args.mu0, "--mu0")
        )
    else:
        w0, m0 = initial_state(H, kind=args.init, scale=args.init_scale, seed=seed)
    if model.name == "precond":
        # the shared W of the start: i.i.d. N(0, 1/d) entries from the stream (seed, 1)
        d = model.setting.d
        W0 = np.random.default_rng([int(seed), 1]).standard_normal((d, d)) / np.sqrt(d)
        return model.state(w0, m0, W0)
    return model.state(w0, m0)


def output_name(args, model, flow) -> str:
    """The stem of ``run``'s output files: the model and every option that changes the result, in a fixed order."""
    from reduced_dynamics.io import output_stem

    s = model.setting
    lead = {} if model.name == "isotropic" else {"model": model.name.replace("_", "-")}
    if s.activation != "exp":
        lead.update(f=s.activation, C=float(s.activation_c))
    if args.omega0 is not None:
        init = {
            "init": "given",
            "omega0": parse_floats(args.omega0, "--omega0"),
            "mu0": parse_floats(args.mu0, "--mu0"),
        }
    else:
        init = {"init": args.init, "scale": float(args.init_scale), "seed": int(args.seed)}
    if args.n_init is not None:
        init["ninit"] = int(args.n_init)
    extra = {}
    if s.Sigma is not None:
        extra["sigma"] = np.linalg.eigvalsh(s.Sigma).round(12).tolist()
    if s.tasks is not None:
        extra["tasks"] = [x + 1 for t in s.tasks for x in (t[0], t[-1])]
    return output_stem(
        "flows" if args.n_init is not None else "flow",
        dict(
            **lead,
            H=int(model.n_heads),
            d=s.d,
            L=s.L,
            sigma2=float(s.sigma2),
            **extra,
            **init,
            tend=float(args.t_end),
            method=str(flow.method),
            rtol=float(flow.rtol),
            atol=float(flow.atol),
            neval=int(args.n_times),
        ),
    )


def main(args) -> int:
    from reduced_dynamics.flow import integrate
    from reduced_dynamics.flow._integrate import T_END_MAX, T_END_MIN

    setting = setting_from_args(args)
    model = model_from_args(args, setting)
    check_model_flags(args, model, "run")
    n_times = resolve_n_times(args)
    check_range("--t-end", args.t_end, T_END_MIN, T_END_MAX, lo_open=False)
    if (args.omega0 is None) != (args.mu0 is None):
        raise ValueError("`--omega0` and `--mu0` must be given together")
    check_option(args, "seed", _check_seed)
    if args.n_init is not None:
        if not 1 <= args.n_init <= N_INIT_MAX:
            raise ValueError(f"`--n-init` must be an integer in [1, {N_INIT_MAX}], got {args.n_init}")
        if args.omega0 is not None:
            raise ValueError("`--n-init` draws random initial states: it cannot be combined with `--omega0`/`--mu0`")
        if args.init != "random":
            raise ValueError("`--n-init` needs `--init random` (every symmetric start is the same state)")
    elif args.method == "batch-Radau":  # the library's refusal names its parameter `y0`, not a flag
        raise ValueError("`--method` batch-Radau integrates a batch of starts: give `--n-init` N")
    if args.omega0 is not None and "--heads" not in typed_flags(args):
        args.heads = len(parse_floats(args.omega0, "--omega0"))
        model = model_from_args(args, setting)
    _check_solver_flags(args, model)
    prepare_out(args.out)
    # the options that make the start(s) of a seed (a sweep's validation replays the check per seed)
    view = argparse.Namespace(
        init=args.init,
        init_scale=args.init_scale,
        omega0=args.omega0,
        mu0=args.mu0,
        n_init=args.n_init,
        _flags=getattr(args, "_flags", {}),
    )
    # before any work: a start outside the domain is bad input (a sweep's dry run stops at the Progress)
    check_option(args, "seed", _check_starts, view, model, setting)
    progress = Progress("run", quiet=args.quiet)
    y0, what = _starts(view, model, args.seed)  # the start(s) the check drew (after the Progress: see check_option)
    progress.stage(f"integrating {what} of the {model.name} model, H={model.n_heads}, to t={args.t_end:g}")
    try:
        flow = integrate(
            model,
            y0,
            t_end=args.t_end,
            method=args.method,
            rtol=args.rtol,
            atol=args.atol,
            n_times=n_times,
            budget=args.budget,
        )
    except OverflowError as exc:
        raise _start_overflow(args, setting, exc) from None
    args.n_times = n_times
    summary = {"command": "run", **flow.summary(), "setting": setting.to_dict()}
    # the messages name what to try next as the flags the user types (`--t-end`, `--init-scale` ...)
    msg, names = summary["message"], getattr(args, "_flags", {})
    summary["message"] = (
        [rename_params(m, names) for m in msg] if isinstance(msg, (list, tuple)) else rename_params(msg, names)
    )
    if setting.tasks is not None:  # as typed (1-based ranges); the 0-based supports are in "setting"
        from reduced_dynamics.models.multitask import tasks_1based

        summary["tasks"] = tasks_1based(setting)
    summary["config"] = {
        "heads": model.n_heads,
        "objective": model.objective,
        "init": args.init if args.omega0 is None else "given",
        "init_scale": float(args.init_scale),
        "seed": int(args.seed),
        "t_end": float(args.t_end),
        "method": flow.method,
        "rtol": flow.rtol,
        "atol": flow.atol,
        "n_times": int(n_times),
        "budget": int(args.budget),
    }
    if args.n_init is not None:
        summary["seeds"] = list(range(args.seed, args.seed + args.n_init))
    files = {}
    if args.out:
        files = _write(args, model, flow, summary, progress)
    if args.json:
        from reduced_dynamics.io import to_jsonable

        sys.stdout.write(json.dumps(to_jsonable({**summary, "files": files})) + "\n")
    elif flow.is_batch:
        _print_batch(args, model, flow)
    else:
        print(text_summary(flow, summary))
    if not args.json:
        for k, v in files.items():
            print(f"  wrote {k}: {v}")
    return 0 if bool(np.all(flow.success)) else 1


def _check_solver_flags(args, model) -> None:
    """``--method``, ``--rtol``, ``--atol``, ``--budget`` checked before any work (the engine's bounds and defaults)."""
    from reduced_dynamics._validation import check_positive_int
    from reduced_dynamics.flow._batch import BATCH_MIN
    from reduced_dynamics.flow._integrate import BUDGET_MAX, METHODS, _check_tolerances, default_tolerances

    method = args.method
    if method is not None and method not in METHODS:
        raise ValueError(f"`--method` must be one of {', '.join(METHODS)}, got {method!r}")
    if method is None:
        batch = args.n_init is not None
        big = batch and model.has_hessian and args.n_init >= BATCH_MIN
        method = "batch-Radau" if big else model.default_method
    _check_tolerances(*default_tolerances(method, args.rtol, args.atol))
    check_positive_int("budget", args.budget, hi=BUDGET_MAX)


def _write(args, model, flow, summary, progress) -> dict:
    from reduced_dynamics.io import atomic_savez, atomic_write_json

    out = Path(args.out)
    stem = output_name(args, model, flow)
    progress.stage(f"writing {out / stem}.*")
    files = {}
    arrays = dict(t=flow.t, loss=flow.loss, grad_norm=flow.grad_norm, **flow.parts)
    if model.setting.Sigma is not None:
        arrays["Sigma"] = model.setting.Sigma
    if flow.is_batch:
        arrays.update(status=flow.status, t_stop=flow.t_stop)
        files["trajectories"] = str(atomic_savez(out / f"{stem}.npz", **arrays))
    else:
        if model.scalar_heads:
            arrays.update(gamma=flow.gamma, eta_eff=flow.eta_eff)
        if model.name == "precond":
            from reduced_dynamics.precond.metrics import scale_free_distance

            arrays["distance_sigma_inv"] = np.asarray(scale_free_distance(flow.W, np.linalg.inv(model.setting.Sigma)))
        files["trajectory"] = str(atomic_savez(out / f"{stem}.npz", **arrays))
        if model.name == "isotropic" and not args.no_plot:
            from reduced_dynamics.plots.style import plot_flow_summary, save_figure

            save_figure(plot_flow_summary(flow), out / f"{stem}.png")
            files["portrait"] = str(out / f"{stem}.png")
    files["summary"] = str(out / f"{stem}.json")
    atomic_write_json(out / f"{stem}.json", {**summary, "files": files})
    return files


def _print_batch(args, model, flow) -> None:
    s = model.setting
    print(
        f"{flow.n_traj} reduced gradient flows, {model.name} model: H={model.n_heads}, d={s.d}, L={s.L}, "
        f"σ²={s.sigma2:g}, {flow.method}{'' if flow.method == 'batch-Radau' else ', one after the other'}, "
        f"{flow.seconds:.2f} s; {int(np.sum(flow.success))} succeeded"
    )
    stop = model.unpack(flow.y_stop)
    for i in range(flow.n_traj):
        parts = "  ".join(f"{k}={_vec(v[i])}" for k, v in stop.items())
        tail = ""
        if model.scalar_heads:
            tail = f"  μᵀω={float(stop['omega'][i] @ stop['mu'][i]):.8f}"
        print(f"  seed {args.seed + i}: status {int(flow.status[i])} at t={flow.t_stop[i]:.4g}  {parts}{tail}")
