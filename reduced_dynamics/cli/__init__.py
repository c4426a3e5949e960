"""Command-line interface: ``reduced-dynamics <command> [options]``.

Each command lives in its own module ``reduced_dynamics.cli.<name>`` that
defines ``HELP`` (one line), ``add_arguments(parser)`` and ``main(args) -> int``.
Every command that depends on the data model takes ``--d --L --sigma2`` and
builds ONE :class:`~reduced_dynamics.setting.Setting` from them
(``reduced_dynamics.cli._setting``), which it passes on.
:func:`build_parser` returns the complete parser (all subcommands), e.g. for
the documentation's CLI reference. :func:`main` imports only the module of the
command it runs: ``reduced-dynamics --help`` reads the one-line helps from
``COMMAND_HELP`` and imports no command at all (start-up: benchmarks/bench_startup.py).
Bad input (``ValueError``), an overflow of ``exp(d ωωᵀ)`` (``OverflowError``) and
an unwritable output path (``OSError``) each become one line on stderr and exit
status 2, never a traceback; the line names the flag the user typed (the
library's parameter names are mapped to flags, ``reduced_dynamics.cli._common``).
An option given twice is a usage error (exit 2). Numerical warnings (numpy's
RuntimeWarning) never reach stderr as they are: a failing command prints only its
one error line, a succeeding one at most one ``note:`` line counting them.
Exit statuses (each command's ``--help`` lists its own): 0 success, 1 the result
failed, 2 bad input, 3 the run failed numerically, 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import os
import re
import signal
import sys
import threading
import warnings

from reduced_dynamics.cli._common import NOTES, close_all, exit_codes_epilog, flag_names, rename_params

__all__ = ["main", "build_parser", "COMMANDS"]

#: command name -> module implementing it
COMMANDS = {
    "run": "reduced_dynamics.cli.run",
    "risk": "reduced_dynamics.cli.risk",
    "check": "reduced_dynamics.cli.check",
    "train": "reduced_dynamics.cli.train",
    "portrait": "reduced_dynamics.cli.portrait",
    "figures": "reduced_dynamics.cli.figures",
    "sweep": "reduced_dynamics.cli.sweep",
    "sweep-table": "reduced_dynamics.cli.sweep_table",
    "single-head": "reduced_dynamics.cli.single_head",
    "exact-risk": "reduced_dynamics.cli.exact_risk",
    "analyze": "reduced_dynamics.cli.analyze",
}

#: command name -> its one-line help, the ``HELP`` of its module, so that ``--help`` lists the
#: commands without importing them (tests/reduced_dynamics/cli/test_parser.py checks that they agree)
COMMAND_HELP = {
    "run": "Integrate the reduced (ω, μ) gradient flow and summarise it (defaults: the paper's setting, H = 2).",
    "risk": "Monte Carlo risks of multi-head attention, single head, GD, debiased GD and Bayes ridge.",
    "check": (
        "Run the numerical checks of the theory (docs/theory.md#gradient-flow, #theorem-1) and print predicted / "
        "measured / tolerance / PASS, FAIL, ERROR or SKIPPED (exit 1 if any check FAILs or ERRORs)."
    ),
    "train": "train an attention model (numpy, fresh prompts each step) and extract its (omega, mu) circuits",
    "portrait": "Phase portraits: the invariant two-head plane (γ, m) and projections of the general-H flow.",
    "figures": "Regenerate the figures (PNG + .npz data each) from the registry in reduced_dynamics.figures.registry.",
    "sweep": (
        "Run a sweep (a TOML spec: command, fixed parameters, axes, seeds) over all cores or a dask cluster; "
        "results cached in --out, resumable, tabulated in --out/table.csv."
    ),
    "sweep-table": (
        "Collect every finished point of a sweep folder into DIR/table.csv (and DIR/table.parquet with pyarrow)."
    ),
    "single-head": "Exact finite-L optimum (omega, mu, risk) of the single head and its large-L limit omega_limit.",
    "exact-risk": (
        "Exact finite-L risk of the reduced model at (omega, mu) by deterministic quadrature (no Monte Carlo)."
    ),
    "analyze": (
        "Analyse a trained one-layer attention model (PyTorch, TransformerLens, torch MultiheadAttention, "
        "safetensors or .npz) against the theory: circuits, pattern verdicts, reduced state, paired risks vs L."
    ),
}


class _Parser(argparse.ArgumentParser):
    """ArgumentParser whose usage errors are one line and exit 2.

    A value starting with ``-`` that reads as a number or a comma-separated list
    of numbers (``--omega0 -0.1,0.1``) is a value, not an option.
    """

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = re.compile(r"^-(\d|\.\d|inf|nan)[\w.,+\-]*$", re.IGNORECASE)

    def error(self, message):  # pragma: no cover - exercised through main()
        sys.stderr.write(f"{self.prog}: error: {message.splitlines()[0] if message else 'usage error'}\n")
        sys.exit(2)


def _once(action):
    """Make ``action`` a usage error when its option is given twice (``--d 5 --d 6``)."""
    base = type(action)

    def __call__(self, parser, namespace, values, option_string=None):
        seen = namespace.__dict__.setdefault("_seen_options", set())
        if self.dest in seen:
            parser.error(f"argument {'/'.join(self.option_strings)}: given more than once")
        seen.add(self.dest)
        base.__call__(self, parser, namespace, values, option_string)

    action.__class__ = type(f"Once{base.__name__}", (base,), {"__call__": __call__})


def _available() -> list[str]:
    """The commands whose module is installed (found without importing it)."""
    return [name for name, modname in COMMANDS.items() if importlib.util.find_spec(modname) is not None]


def _fill(name: str, p: argparse.ArgumentParser) -> None:
    """Import command ``name``'s module and give its parser ``p`` the options, epilog and defaults."""
    if getattr(p, "_rd_filled", False):
        return
    mod = importlib.import_module(COMMANDS[name])
    p.epilog = getattr(mod, "EPILOG", None) or exit_codes_epilog()
    mod.add_arguments(p)
    for action in p._actions:
        if action.option_strings and not isinstance(action, (argparse._HelpAction, argparse._AppendAction)):
            _once(action)
    p.set_defaults(_module=mod, _flags=flag_names(p, getattr(mod, "PARAM_FLAGS", None)))
    p._rd_filled = True


class _LazySubParsers(argparse._SubParsersAction):
    """Subcommands whose parser is filled (its module imported) only when the command is chosen."""

    def __call__(self, parser, namespace, values, option_string=None):
        name = values[0]
        if name in self._name_parser_map:
            _fill(name, self._name_parser_map[name])
        super().__call__(parser, namespace, values, option_string)


def _parser(*, lazy: bool) -> argparse.ArgumentParser:
    parser = _Parser(prog="reduced-dynamics", description=__doc__.splitlines()[0])
    action = _LazySubParsers if lazy else argparse._SubParsersAction
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser, action=action)
    for name in _available():
        help_ = COMMAND_HELP[name]
        p = sub.add_parser(name, help=help_, description=help_, epilog=exit_codes_epilog())
        if not lazy:
            _fill(name, p)
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The complete ``reduced-dynamics`` argument parser, with every subcommand and its options.

    Imports every command's module (:func:`main` imports only the one it runs).

    Returns
    -------
    argparse.ArgumentParser
        ``parse_args(["run", "--d", "3"])`` gives the namespace a command's
        ``main`` receives; ``format_help()`` is the top-level ``--help``.
    """
    return _parser(lazy=False)


def _error_line(args, kind: str, exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc).strip() else exc.__class__.__name__
    return f"reduced-dynamics {args.command}: {kind}: {rename_params(text, args._flags)}\n"


@contextlib.contextmanager
def _interrupts():
    """Ctrl-C always ends the command with status 130 and one line, even when Python swallows it.

    A SIGINT that arrives while Python runs a finaliser (``__del__``, a weakref callback) raises
    ``KeyboardInterrupt`` there, where it cannot propagate: Python printed "Exception ignored in ...
    KeyboardInterrupt" and the command went on to exit 0 (``figures --quick``, about 2 tries in 25). Here the
    handler records the interrupt (the yielded list becomes non-empty), :func:`sys.unraisablehook` drops the
    swallowed ``KeyboardInterrupt`` silently, the next progress line raises it again
    (:func:`reduced_dynamics.cli._common.check_interrupted`), and :func:`main` raises it once the command
    returns. Installed only in the main thread over Python's default handler (not over a handler of the
    caller's).
    """
    from reduced_dynamics.cli import _common

    flag: list = []
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT) if in_main else None
    ours = in_main and previous is signal.default_int_handler
    if ours:  # not inside another main (a sweep's serial points): the outer one owns the record
        _common.INTERRUPTED[:] = []

    def on_sigint(signum, frame):
        flag.append(signum)
        _common.INTERRUPTED.append(signum)
        raise KeyboardInterrupt

    def unraisable(hook_args):
        if isinstance(hook_args.exc_value, KeyboardInterrupt):
            flag.append(signal.SIGINT)
            _common.INTERRUPTED.append(signal.SIGINT)
            return
        old_hook(hook_args)

    old_hook = sys.unraisablehook
    if ours:
        signal.signal(signal.SIGINT, on_sigint)
    sys.unraisablehook = unraisable
    try:
        yield flag
    finally:
        sys.unraisablehook = old_hook
        if ours:
            signal.signal(signal.SIGINT, previous)
            _common.INTERRUPTED[:] = []


#: the thread-count variables of the BLAS libraries numpy may load; one set by the user is left alone
BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")


def one_blas_thread_by_default() -> bool:
    """Before numpy is loaded, and when the user set none of ``BLAS_THREAD_VARS``: ``OPENBLAS_NUM_THREADS=1``
    (and the others) for this process. Returns whether it did.

    Every command's work is many small problems (batched 4 × 4 solves, d × d Gram products, (B, L, d) matmuls),
    where a thread pool only synchronises: on the 2-core development machine one thread made the start-up
    cost half the CPU (0.10 against 0.20 s), ``train --steps 300`` 0.32 against 0.77 s of CPU and ``check
    --quick`` 13.3 against 15.2 s (docs/cli.md). Called by the command (``main()`` without ``argv``), never
    when :func:`main` is called from Python, whose process keeps its own settings.
    """
    if "numpy" in sys.modules or any(os.environ.get(v) for v in BLAS_THREAD_VARS):
        return False
    for v in BLAS_THREAD_VARS:
        os.environ[v] = "1"
    return True


def main(argv=None) -> int:
    """Run ``reduced-dynamics`` with ``argv`` (default ``sys.argv[1:]``); return the exit status.

    0 on success, 1 when a command reports a failed result, 2 on bad input
    (one line on stderr naming the flag), 3 when a run fails numerically
    (``train`` diverged), 130 on Ctrl-C. Run as the command (``argv`` None), it limits the BLAS
    libraries to one thread unless the environment sets their thread counts
    (``one_blas_thread_by_default``).
    """
    if argv is None:
        one_blas_thread_by_default()
    parser = _parser(lazy=True)  # a command's module is imported when the command is parsed
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # a usage error (one line written, status 2) or --help (status 0)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    if getattr(args, "_module", None) is None:
        parser.print_help(sys.stderr)
        return 2
    NOTES.clear()
    with warnings.catch_warnings(record=True) as caught, _interrupts() as interrupted:
        warnings.simplefilter("always", RuntimeWarning)
        try:
            rc = int(args._module.main(args) or 0)
            if interrupted:  # a Ctrl-C swallowed where Python cannot raise it (a __del__, a callback)
                raise KeyboardInterrupt
        except ValueError as exc:
            sys.stderr.write(_error_line(args, "error", exc))
            return 2
        except OverflowError as exc:
            sys.stderr.write(_error_line(args, "overflow", exc))
            return 2
        except OSError as exc:  # e.g. an --out folder that cannot be created or written, a full disk
            where = f" {exc.filename!r}" if getattr(exc, "filename", None) else ""
            flag = "`--out` " if getattr(args, "out", None) is not None else ""
            why = exc.strerror or (str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__)
            sys.stderr.write(f"reduced-dynamics {args.command}: error: {flag}cannot write output{where} ({why})\n")
            return 2
        except KeyboardInterrupt:
            sys.stderr.write(f"reduced-dynamics {args.command}: interrupted\n")
            return 130
        finally:
            close_all()
    for text in NOTES if rc == 0 else ():  # a failed command keeps its one line
        sys.stderr.write(f"reduced-dynamics {args.command}: note: {text}\n")
    NOTES.clear()
    numeric = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    for w in caught:  # anything else is shown as Python would have shown it
        if not issubclass(w.category, RuntimeWarning):
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    if numeric:
        first = str(numeric[0].message).splitlines()[0]
        sys.stderr.write(
            f"reduced-dynamics {args.command}: note: {len(numeric)} numerical warning(s) during the run "
            f"(first: {first})\n"
        )
    return rc


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
