"""``reduced-dynamics analyze``: read a trained attention model from a checkpoint and hold it against the theory."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from reduced_dynamics.cli._common import Progress, add_quiet, exit_codes_epilog, nonempty, prepare_out
from reduced_dynamics.cli._dispatch import SETTING_FLAGS
from reduced_dynamics.cli._setting import add_sigma_arguments, add_tasks_argument, setting_from_args
from reduced_dynamics.importers._canonical import FORMATS

HELP = (
    "Analyse a trained one-layer attention model (PyTorch, TransformerLens, torch MultiheadAttention, safetensors "
    "or .npz) against the theory: circuits, pattern verdicts, reduced state, paired risks vs L."
)
#: the files ``--out DIR`` holds
REPORT, FIGURE = "report.json", "analysis.png"
EPILOG = exit_codes_epilog() + (
    "\n\nThe command exits 0 whether or not the model matches the theory: the verdicts are in the report\n"
    "(--json: matches, verdicts.<name>.passed/value/threshold/rule). d is read from FILE; --d that disagrees\n"
    "is an error. --L and --sigma2 (and --sigma/--sigma-eigs, --tasks) give the data model the model is judged\n"
    "on; the risks are paired on common prompts at each of --lengths (plus --L). A FILE that is not a one-layer\n"
    "attention model of the paper's kind is one line naming FILE (exit 2).\n\n"
    f"--out DIR writes DIR/{REPORT} and DIR/{FIGURE} atomically; a DIR holding a report made for another\n"
    "configuration (another checkpoint, setting, --lengths, --n-prompts, --seed or --dummy-tol) is refused\n"
    "unless --force."
)
#: library parameter names -> the flags of this command
PARAM_FLAGS = {"source": "FILE", "file": "FILE", **SETTING_FLAGS, "n_heads": "--n-heads", "n_out": "--n-out"}


def add_arguments(p) -> None:
    a = p.add_argument
    a("file", type=nonempty, metavar="FILE", help="the checkpoint: .pt/.pth (PyTorch), .safetensors or .npz")
    a(
        "--format",
        default="auto",
        choices=("auto", *FORMATS),
        help="checkpoint format (default auto: from the file's suffix and keys)",
    )
    a(
        "--d",
        type=int,
        default=None,
        help="covariate dimension d (default: the checkpoint's; another value is an error)",
    )
    a(
        "--n-heads",
        type=int,
        default=None,
        help="number of heads: needed for a torch MultiheadAttention state dict (its weights do not record it); "
        "checked against the checkpoint otherwise",
    )
    a(
        "--n-out",
        type=int,
        default=None,
        help="number of outputs (tasks) of a TransformerLens or MultiheadAttention model, whose weights do not "
        "record it (default 1); checked against the checkpoint otherwise",
    )
    a("--L", type=int, default=40, help="prompt length L of the data model the model is judged on (default 40)")
    a("--sigma2", type=float, default=0.1, help="noise variance σ² of that data model (default 0.1)")
    add_sigma_arguments(p)
    add_tasks_argument(p)
    a(
        "--lengths",
        type=str,
        default=None,
        metavar="L1,L2,...",
        help="prompt lengths of the length-generalisation table, comma-separated integers >= 2 "
        "(default 10,20,40,80; --L is always added)",
    )
    a("--n-prompts", type=int, default=20_000, help="fresh prompts per length (default 20000)")
    a("--seed", type=int, default=0, help="seed of the prompts (default 0; the same seed gives the same report)")
    a(
        "--dummy-tol",
        type=float,
        default=0.05,
        help="a head is dummy when |ω_h μ_h| < DUMMY_TOL · max_k |ω_k μ_k| (default 0.05)",
    )
    a("--json", action="store_true", help="print the JSON report on stdout")
    a("--out", type=nonempty, default=None, help=f"folder for {REPORT} and {FIGURE} (written atomically)")
    a("--force", action="store_true", help="replace a report in --out made for another configuration")
    add_quiet(p)


def _parse_lengths(text):
    """``--lengths 10,20,40`` -> (10, 20, 40) (``None`` stays ``None``); one line naming ``--lengths`` otherwise."""
    if text is None:
        return None
    items = [s.strip() for s in str(text).split(",")]
    if not text.strip() or any(not s for s in items):
        raise ValueError(f"`--lengths` must be comma-separated integers >= 2 without empty items, got {text!r}")
    from reduced_dynamics.importers.analysis import LENGTH_MAX

    out = []
    for s in items:
        if not s.isascii() or not s.isdigit() or not 2 <= int(s) <= LENGTH_MAX:
            raise ValueError(f"`--lengths` must be comma-separated integers in [2, {LENGTH_MAX}], got {text!r}")
        out.append(int(s))
    return out


def _read(path: str, fmt: str, *, n_out=None, n_heads=None):
    """The checkpoint at ``path`` as an ImportedAttention; every reading failure is one line naming FILE."""
    from reduced_dynamics.importers._canonical import CheckpointError

    p = Path(path)
    how = f" (read as --format {fmt})" if fmt != "auto" else ""
    if not p.exists():
        raise ValueError(f"`FILE` {path!r} does not exist")
    if not p.is_file():
        raise ValueError(f"`FILE` {path!r} is not a file")
    from reduced_dynamics.importers._load import load

    try:
        return load(p, format=fmt, n_out=n_out, n_heads=n_heads)
    except (CheckpointError, ValueError) as exc:  # CheckpointError is the importers' own; any other is the file's too
        why = str(exc).splitlines()[0] if str(exc).strip() else "not a checkpoint the importers read"
        raise ValueError(f"`FILE` {path!r}{how}: {why}") from None
    except OSError as exc:
        raise ValueError(f"`FILE` {path!r} cannot be read{how} ({exc.strerror or exc})") from None


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _check_out(out, run: dict, *, force: bool) -> Path | None:
    """Refuse (one line naming ``--out``) a folder holding a report of another configuration, unless ``force``."""
    if out is None:
        return None
    folder = prepare_out(out)
    report = folder / REPORT
    if report.exists():
        try:
            old = json.loads(report.read_text()).get("run")
        except (OSError, ValueError, AttributeError):
            old = None
        if old != run and not force:
            what = "of unknown configuration" if old is None else "made for another configuration"
            raise ValueError(
                f"`--out` {str(out)!r} holds a {REPORT} {what}; use another `--out` or `--force` to replace it"
            )
    elif (folder / FIGURE).exists() and not force:
        raise ValueError(
            f"`--out` {str(out)!r} holds a {FIGURE} without its {REPORT}; use another `--out` or `--force`"
        )
    return folder


def main(args) -> int:
    from reduced_dynamics.importers.analysis import analyze, check_config, check_run_options
    from reduced_dynamics.io import atomic_write_json, to_jsonable

    lengths = _parse_lengths(args.lengths)
    check_run_options(n_prompts=args.n_prompts, seed=args.seed, dummy_tol=args.dummy_tol)  # before reading FILE
    progress = Progress("analyze", quiet=args.quiet)
    progress.stage(f"reading {args.file}")
    for flag, value in (("--n-heads", args.n_heads), ("--n-out", args.n_out)):
        if value is not None and not 1 <= value <= 1024:
            raise ValueError(f"`{flag}` must be an integer in [1, 1024], got {value}")
    imp = _read(args.file, args.format, n_out=args.n_out, n_heads=args.n_heads)
    if args.d is not None and args.d != imp.d:
        raise ValueError(
            f"`--d` {args.d} disagrees with FILE, whose d = {imp.d} (leave `--d` out to take it from the checkpoint)"
        )
    args.d = imp.d
    setting = setting_from_args(args)
    cfg = check_config(
        imp, setting, lengths=lengths, n_prompts=args.n_prompts, seed=args.seed, dummy_tol=args.dummy_tol
    )
    run = {
        "sha256": _sha256(args.file),
        "format": imp.source_format,
        "setting": to_jsonable(setting.to_dict()),
        **to_jsonable({k: cfg[k] for k in ("lengths", "n_prompts", "seed", "dummy_tol")}),
    }
    folder = _check_out(args.out, run, force=args.force)
    report = analyze(
        imp,
        setting=setting,
        lengths=cfg["lengths"],
        n_prompts=cfg["n_prompts"],
        seed=cfg["seed"],
        dummy_tol=cfg["dummy_tol"],
        log=progress.stage,
    )
    doc = {"file": str(args.file), "run": run, **report.to_dict()}
    if folder is not None:
        from reduced_dynamics.plots.analysis import plot_analysis
        from reduced_dynamics.plots.style import save_figure

        progress.stage("figure")
        save_figure(plot_analysis(report), folder / FIGURE)
        doc["files"] = {"report": str(folder / REPORT), "figure": str(folder / FIGURE)}
        atomic_write_json(folder / REPORT, doc)
    progress.close()
    if args.json:
        sys.stdout.write(json.dumps(to_jsonable(doc), indent=2) + "\n")
    else:
        text = report.summary()
        if folder is not None:
            text += f"\n\nwrote {folder / REPORT} and {folder / FIGURE}"
        sys.stdout.write(text + "\n")
    return 0
