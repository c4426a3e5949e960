"""``risk --activation NAME``: Monte Carlo risks of the reduced model with an attention activation f.

``risk`` hands a setting whose activation is not ``exp`` here (its model is ``activation``):
:func:`risk_activation` compares the reduced model with f against debiased GD at η* and at
``C_f μᵀω``, paired and Rao–Blackwellised (docs/theory.md#other-activations). ``run --activation``
goes through the one run path (``reduced_dynamics.cli.run``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from reduced_dynamics._validation import check_heads_pair
from reduced_dynamics.cli._common import Progress, parse_floats, prepare_out
from reduced_dynamics.io import atomic_write_json, to_jsonable

__all__ = ["risk_activation"]


def risk_activation(args, setting) -> int:
    """``risk`` with ``--activation`` other than exp: the reduced model with f vs debiased GD, paired.

    The state is ``--omega/--mu`` (default: ω = (0.1, −0.1) with the μ minimising :math:`\\tilde L_f` on the
    manifold). On ``--prompts`` common prompts (``--seed``; Rao–Blackwellised) it estimates the risk of
    the reduced model with f and of debiased GD at ``η*`` and at the claimed ``C_f μᵀω``, with the
    paired differences; it also prints :math:`\\tilde L_f` at the state. Returns the exit code.
    """
    from reduced_dynamics.activation_dynamics.flow import eta_claim, eta_tilt, manifold_profile
    from reduced_dynamics.activation_dynamics.loss import act_loss
    from reduced_dynamics.estimation.predictors import conditional_loss, debiased_gd_weights
    from reduced_dynamics.estimation.prompts import as_generator, iter_prompts
    from reduced_dynamics.estimation.risk import _Moments
    from reduced_dynamics.model.attention import _weights

    t0 = time.perf_counter()
    if not setting.isotropic:
        raise ValueError("`--activation` other than exp cannot be combined with `--sigma` yet (isotropic only)")
    if setting.tasks is not None:
        raise ValueError("`--activation` other than exp cannot be combined with `--tasks` yet (single task only)")
    if args.prompts < 2:
        raise ValueError(f"`--prompts` must be an integer >= 2 (for a standard error), got {args.prompts}")
    if (args.omega is None) != (args.mu is None):
        raise ValueError("`--omega` and `--mu` must be given together")
    if args.omega is None:
        M = float(manifold_profile(0.1, setting).M[0])
        if not np.isfinite(M):  # C ≲ 1e-8: the manifold's quadratic in M cancels to 0 (the error named `w`)
            raise ValueError(
                f"`--activation-c` {setting.activation_c:g} leaves the default state (ω = ±0.1 on the solution "
                "manifold) without a finite μ: give `--omega` and `--mu`"
            )
        omega, mu = np.array([0.1, -0.1]), np.array([M, -M])
    else:
        omega, mu = check_heads_pair(parse_floats(args.omega, "--omega"), parse_floats(args.mu, "--mu"))
    prepare_out(args.out)
    act = setting.activation_fn
    eta_s = float(setting.eta_star)
    eta_c = act.c_f * float(mu @ omega)
    names = ["reduced_f", "debiased_gd_star", "debiased_gd_claim"]
    mom = _Moments(len(names) + 2)
    per = 8 * setting.L * (6 * omega.size + 12) + 64
    progress = Progress("risk", quiet=args.quiet)
    progress.stage(f"{', '.join(names)} on {args.prompts} prompts (f = {act.name})")
    rng = as_generator(args.seed)
    for pr in iter_prompts(
        args.prompts, setting, seed=rng, per_prompt_bytes=per, stats_only=True, covariates_only=True
    ):
        S = pr.scores[:, None, :] * omega[None, :, None]
        F, _, norm = _weights(S, act, "risk")
        w = np.einsum("nhl,h->nl", F / norm[..., None], mu)
        a = conditional_loss(pr, w, setting=setting)
        b = conditional_loss(pr, debiased_gd_weights(pr.scores, eta_s), setting=setting)
        c = conditional_loss(pr, debiased_gd_weights(pr.scores, eta_c), setting=setting)
        mom.add(np.stack([a, b, c, a - b, a - c], axis=1))
    est = {k: {"risk": float(mom.mean[i]), "stderr": mom.stderr(i)} for i, k in enumerate(names)}
    diffs = {
        "reduced_f-debiased_gd_star": {"risk": float(mom.mean[3]), "stderr": mom.stderr(3)},
        "reduced_f-debiased_gd_claim": {"risk": float(mom.mean[4]), "stderr": mom.stderr(4)},
    }
    out = {
        "activation": setting.activation,
        "activation_c": setting.activation_c,
        "c_f": act.c_f,
        "omega": omega,
        "mu": mu,
        "approx_loss": act_loss(omega, mu, setting),
        "eta_claim": eta_claim(omega, mu, setting),
        "eta_tilt": eta_tilt(omega, mu, setting),
        "eta_star": eta_s,
        "estimates": est,
        "differences": diffs,
        "prompts": int(args.prompts),
        "seed": int(args.seed),
        "setting": setting.to_dict(),
        "seconds": time.perf_counter() - t0,
    }
    if args.out:
        path = (
            Path(prepare_out(args.out))
            / f"risk_act_{setting.activation}_C{setting.activation_c:g}_seed{args.seed}.json"
        )
        out["file"] = str(atomic_write_json(path, to_jsonable(out)))
    if args.json:
        print(json.dumps(to_jsonable(out)))
    else:
        print(
            f"risk with f = {setting.activation} (C = {setting.activation_c:g}, C_f = {act.c_f:g})  d={setting.d} "
            f"L={setting.L} sigma2={setting.sigma2:g} prompts={args.prompts} seed={args.seed}  ({out['seconds']:.2f} s)"
        )
        print(
            f"reduced model at omega={np.array2string(omega, precision=5)} mu={np.array2string(mu, precision=5)}; "
            f"L̃_f = {out['approx_loss']:.6f}; η claimed {out['eta_claim']:.5f}, slope μᵀT₁ {out['eta_tilt']:.5f}, "
            f"η* = {eta_s:.6f}"
        )
        for k, v in est.items():
            print(f"  {k:>18}  {v['risk']:.6f} ± {v['stderr']:.6f}")
        for k, v in diffs.items():
            print(f"  {k:>30}  {v['risk']:+.6f} ± {v['stderr']:.6f} (paired)")
    return 0
