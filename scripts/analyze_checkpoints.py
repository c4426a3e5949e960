r"""The reduced state along a training run: ``analyze`` on each ``model_step{N}.pt`` of a run directory.

For the checkpoints that ``scripts/train_torch_paper.py`` writes (any format :func:`reduced_dynamics.importers.load`
reads works): per step, the extracted (ω, μ), γ = mean |ω_h| over live heads, η_eff = μᵀω against η*, the gaps
of μ₊ and −μ₋ to the solution manifold's μ_γ(γ), the number of pattern verdicts passed, and the paired risk
differences at the training length L (model − debiased GD at η*, model − the reduced model at the extracted state,
± SE, on the same prompts for every checkpoint: ``--seed`` fixes them), plus the local drift exponent
``Δ log γ / Δ log step`` between consecutive rows (the reduced flow of L̃ drifts as γ ∝ t^(−1/6); Adam steps are not
flow time, so the exponent is a description, not a test of the law).

Usage (from the repository root)::

    python scripts/analyze_checkpoints.py /work/torch_paper_runs/H2 --steps 10000,100000,500000

The data model is the paper's (``--L``, ``--sigma2``; d from the checkpoint). ``--json`` prints the rows as JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

PATTERN = re.compile(r"^model_step(\d+)\.pt$")


class UsageError(ValueError):
    """Bad command-line input: one line naming the flag, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        sys.stderr.write(f"{self.prog}: error: {message.splitlines()[0] if message else 'usage error'}\n")
        sys.exit(2)


def checkpoints(run: Path) -> dict[int, Path]:
    """``{step: path}`` of the ``model_step{N}.pt`` files in ``run``."""
    out = {}
    for p in run.iterdir():
        m = PATTERN.match(p.name)
        if m:
            out[int(m.group(1))] = p
    return dict(sorted(out.items()))


def _steps(text: str | None, available: dict) -> list[int]:
    if text is None:
        return list(available)
    try:
        steps = [int(s) for s in text.split(",")]
    except ValueError:
        raise UsageError(f"`--steps` must be comma-separated integers, got {text!r}") from None
    missing = [s for s in steps if s not in available]
    if missing:
        have = f"{min(available)}..{max(available)}" if available else "none"
        raise UsageError(f"`--steps` {missing[0]} has no model_step{missing[0]}.pt in the run (steps: {have})")
    return sorted(set(steps))


def row(path: Path, step: int, *, L: int, sigma2: float, n_prompts: int, seed: int) -> dict:
    """One checkpoint's numbers (module docstring)."""
    from reduced_dynamics import Setting
    from reduced_dynamics.importers import analyze, load

    imp = load(path)
    rep = analyze(imp, setting=Setting(d=imp.d, L=L, sigma2=sigma2), lengths=[L], n_prompts=n_prompts, seed=seed)
    gap, loc, pat = rep.location["manifold"], rep.location, rep.theory["paired_at_L"]
    exact = rep.theory["exact"]
    return {
        "step": step,
        "omega": [float(w) for w in rep.state["omega"]],
        "mu": [float(m) for m in rep.state["mu"]],
        "dummy": [bool(x) for x in rep.state["dummy"]],
        "gamma": None if gap is None else gap.gamma,
        "eta_eff": loc["eta_eff"],
        "eta_star": loc["eta_star"],
        "eta_eff_minus_eta_star": loc["eta_eff"] - loc["eta_star"],
        "manifold_rel_gap_plus": None if gap is None else gap.rel_gap_plus,
        "manifold_rel_gap_minus": None if gap is None else gap.rel_gap_minus,
        "verdicts_passed": sum(v.passed for v in rep.verdicts.values()),
        "verdicts": len(rep.verdicts),
        "failed": [k for k, v in rep.verdicts.items() if not v.passed],
        "model_risk": rep.theory["model_mc"]["risk"],
        "model_risk_stderr": rep.theory["model_mc"]["stderr"],
        "minus_debiased_gd": pat["debiased_gd"]["diff"],
        "minus_debiased_gd_stderr": pat["debiased_gd"]["stderr"],
        "minus_reduced": pat["reduced"]["diff"],
        "minus_reduced_stderr": pat["reduced"]["stderr"],
        "reduced_exact_minus_debiased_gd_exact": (
            None if exact is None else exact["risk"] - rep.theory["debiased_gd_optimal"]
        ),
    }


def _fmt(rows: list[dict], n_prompts: int, L: int) -> str:
    head = (
        f"{'step':>8} {'ω':>26} {'μ':>26} {'γ':>8} {'drift':>6} {'η_eff−η*':>9} {'μ₊ gap':>7} {'−μ₋ gap':>7} "
        f"{'pass':>5} {'model − dGD(η*)':>19} {'model − reduced':>19} {'R_red − R_dGD':>13}"
    )
    lines = [f"paired at L = {L}, {n_prompts} prompts (the same for every step); exact risks for the last column", head]
    prev = None
    for r in rows:
        drift = ""
        if prev is not None and r["gamma"] and prev["gamma"]:
            drift = f"{math.log(r['gamma'] / prev['gamma']) / math.log(r['step'] / prev['step']):+.3f}"
        red = r["reduced_exact_minus_debiased_gd_exact"]
        gp, gm = r["manifold_rel_gap_plus"], r["manifold_rel_gap_minus"]
        lines.append(
            f"{r['step']:>8} {'(' + ', '.join(f'{w:+.4f}' for w in r['omega']) + ')':>26} "
            f"{'(' + ', '.join(f'{m:+.3f}' for m in r['mu']) + ')':>26} "
            f"{r['gamma'] if r['gamma'] is not None else float('nan'):>8.5f} {drift:>6} "
            f"{r['eta_eff_minus_eta_star']:>+9.5f} {gp if gp is not None else float('nan'):>+7.4f} "
            f"{gm if gm is not None else float('nan'):>+7.4f} {r['verdicts_passed']:>2}/{r['verdicts']:<2} "
            f"{r['minus_debiased_gd']:>+9.2e} ± {r['minus_debiased_gd_stderr']:.1e} "
            f"{r['minus_reduced']:>+9.2e} ± {r['minus_reduced_stderr']:.1e} "
            f"{red if red is not None else float('nan'):>+13.3e}"
        )
        if r["failed"]:
            lines.append(f"{'':>8} fails: {', '.join(r['failed'])}")
        prev = r
    return "\n".join(lines)


def main(argv=None) -> int:
    p = _Parser(prog="analyze_checkpoints", description=__doc__.splitlines()[0])
    p.add_argument("run", help="run directory holding model_step{N}.pt files")
    p.add_argument("--steps", help="comma-separated steps (default: every model_step*.pt)")
    p.add_argument("--L", type=int, default=40, help="prompt length of the data model (default 40)")
    p.add_argument("--sigma2", type=float, default=0.1, help="noise variance σ² (default 0.1)")
    p.add_argument("--n-prompts", type=int, default=100_000, help="fresh prompts (default 100000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the prompts (default 0)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = p.parse_args(argv)
    try:
        run = Path(args.run)
        if not run.is_dir():
            raise UsageError(f"`run` {run} is not a directory")
        available = checkpoints(run)
        if not available:
            raise UsageError(f"`run` {run} holds no model_step{{N}}.pt file")
        steps = _steps(args.steps, available)
        rows = []
        for s in steps:
            try:
                rows.append(
                    row(available[s], s, L=args.L, sigma2=args.sigma2, n_prompts=args.n_prompts, seed=args.seed)
                )
            except ValueError as exc:  # a bad --L/--sigma2/--n-prompts/--seed or an unreadable checkpoint
                msg = str(exc).splitlines()[0]
                for flag in ("setting.L", "setting.sigma2", "L", "sigma2", "n_prompts", "seed"):
                    name = flag.removeprefix("setting.").replace("_", "-")
                    msg = msg.replace(f"`{flag}`", f"`--{name}`")
                raise UsageError(msg) from None
    except UsageError as exc:
        sys.stderr.write(f"analyze_checkpoints: error: {exc}\n")
        return 2
    print(json.dumps(rows, indent=1) if args.json else _fmt(rows, args.n_prompts, args.L))
    return 0


if __name__ == "__main__":
    sys.exit(main())
