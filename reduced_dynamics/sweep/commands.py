"""The commands a sweep can run, and how one point runs: through the command line itself.

A point is one invocation ``reduced-dynamics <command> <flags> --json --quiet``.
It runs through :func:`reduced_dynamics.cli.main`, the same code path as the
command typed in a shell (same parsing, same validation, same library calls);
its result is the JSON the command prints. Adding a command to the sweeps is one
line in :data:`SWEEP_COMMANDS`.

Before any work, every point of a sweep is validated by a *dry run*: the
command's arguments are parsed by the real parser and its ``main`` runs up to
the point where it starts its progress reporter (every command validates all its
input before that, by the convention of ``reduced_dynamics.cli._common``), where
the dry run stops it. So a bad value fails the whole sweep with the command's own
error line, before any point runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import math
import os
import socket
import sys
import threading
import time
from collections.abc import Mapping

__all__ = ["SWEEP_COMMANDS", "EXCLUDED_PARAMS", "SweepCommand", "Invocation", "sweep_command", "run_point"]


@dataclasses.dataclass(frozen=True)
class SweepCommand:
    """One sweepable command.

    Attributes
    ----------
    name : str
        The subcommand name (``reduced-dynamics <name>``).
    excluded : tuple of str
        Parameters (argparse ``dest`` names) a sweep may not set and that do not
        enter the configuration hash, in addition to ``EXCLUDED_PARAMS``
        (output and reporting options that do not change the result).
    """

    name: str
    excluded: tuple = ()


#: Options that never change a command's result: not sweep parameters, not hashed.
EXCLUDED_PARAMS = ("json", "quiet", "out", "force", "resume", "progress", "no_plot", "list", "checkpoint_every")

#: name -> :class:`SweepCommand`; a new command becomes sweepable with one line here
#: (it must print one JSON object with ``--json`` and validate its input before starting its ``Progress``).
SWEEP_COMMANDS: dict[str, SweepCommand] = {
    c.name: c
    for c in (
        SweepCommand("run"),
        SweepCommand("risk"),
        SweepCommand("train"),
        SweepCommand("check"),
        SweepCommand("exact-risk"),
        SweepCommand("single-head"),
    )
}


_AVAILABLE: dict[str, SweepCommand] = {}


def _available_commands() -> dict[str, SweepCommand]:
    """The sweep commands whose CLI module exists in this installation (new commands land over time).

    Found once per process (a sweep validates up to a million points, each asking for its command).
    """
    if not _AVAILABLE:
        from reduced_dynamics.cli import COMMANDS

        _AVAILABLE.update(
            {name: c for name, c in SWEEP_COMMANDS.items() if name in COMMANDS and _importable(COMMANDS[name])}
        )
    return _AVAILABLE


def _importable(modname: str) -> bool:
    import importlib

    try:
        importlib.import_module(modname)
    except ModuleNotFoundError as exc:
        if exc.name == modname:
            return False
        raise
    return True


def sweep_command(command) -> SweepCommand:
    """The :class:`SweepCommand` called ``command``.

    Parameters
    ----------
    command : str
        A key of :data:`SWEEP_COMMANDS` whose command is installed.

    Returns
    -------
    SweepCommand

    Raises
    ------
    ValueError
        Naming ``command`` and the sweepable commands.
    """
    avail = _available_commands()
    if not isinstance(command, str) or command not in avail:
        raise ValueError(f"`command` must be one of {sorted(avail)}, got {command!r:.80}")
    return avail[command]


_PARSERS: dict = {}


def _subparser(command: str):
    """The real ``reduced-dynamics <command>`` subparser (cached per process)."""
    if command not in _PARSERS:
        import argparse

        from reduced_dynamics.cli import build_parser

        parser = build_parser()
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        _PARSERS[command] = (parser, sub.choices[command])
    return _PARSERS[command]


def _actions(command: str) -> dict:
    """dest -> argparse action of the command's options (``--help`` excluded)."""
    _, sub = _subparser(command)
    return {a.dest: a for a in sub._actions if a.option_strings and a.dest != "help"}


def parameters(command: str) -> dict:
    """dest -> flag of every option a sweep of ``command`` may set (a ``ValueError`` naming ``command`` if unknown)."""
    command = sweep_command(command).name
    excluded = set(EXCLUDED_PARAMS) | set(SWEEP_COMMANDS[command].excluded)
    return {d: a.option_strings[-1] for d, a in _actions(command).items() if d not in excluded}


def _format_value(value) -> str:
    if isinstance(value, bool):
        raise TypeError("bool")
    if isinstance(value, float):
        return repr(value)
    return str(value)


def to_argv(command: str, params: Mapping) -> list[str]:
    """The command-line flags of one point (``{"L": 20, "t_end": 1e3}`` -> ``["--L", "20", "--t-end", "1000.0"]``).

    Parameter names are argparse ``dest`` names; a hyphenated spelling (``t-end``)
    is accepted. A flag without value (``--conditional``) takes ``true``/``false``;
    a list becomes the one comma-separated list syntax.

    Raises
    ------
    ValueError
        Naming the parameter: unknown for this command, excluded (``out``, ``json``, ...), or a value of the wrong kind.
    """
    import argparse

    allowed = parameters(command)
    if not isinstance(params, Mapping):
        raise TypeError(f"`params` must be a mapping of parameter -> value, got {type(params).__name__}")
    acts = _actions(command)
    argv: list[str] = []
    for raw, value in params.items():
        name = str(raw).replace("-", "_")
        if name not in allowed:
            why = "is not a parameter a sweep sets" if name in acts else "is not a parameter"
            raise ValueError(f"`{raw}` {why} of `{command}`; its parameters are {sorted(allowed)} (`{command} --help`)")
        act, flag = acts[name], allowed[name]
        if isinstance(act, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
            if not isinstance(value, bool):
                raise ValueError(f"`{raw}` of `{command}` is a switch: it must be true or false, got {value!r}")
            if value != act.default:
                argv.append(flag)
            continue
        if isinstance(value, (list, tuple)):
            if not value or any(isinstance(v, (list, tuple, dict, bool)) for v in value):
                raise ValueError(f"`{raw}` must be a scalar or a non-empty flat list of numbers, got {value!r}")
            text = ",".join(_format_value(v) for v in value)
        elif isinstance(value, (int, float, str)) and not isinstance(value, bool):
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"`{raw}` must be finite, got {value!r}")
            text = _format_value(value)
        else:
            raise ValueError(f"`{raw}` must be a number, a string or a list, got {value!r}")
        argv += [flag, text]
    return argv


def _canonical(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False, default=str)


def package_version() -> str:
    """The installed package version (part of every point's key)."""
    import reduced_dynamics

    return str(reduced_dynamics.__version__)


@dataclasses.dataclass(frozen=True)
class Invocation:
    """One validated point: the command line it runs and the key of its result.

    Attributes
    ----------
    command : str
        The subcommand.
    params : dict
        The parameters the spec set (names as in the spec).
    argv : tuple of str
        ``reduced-dynamics`` arguments, command first, ending with ``--json --quiet``.
    config : dict
        Every parameter of the command after parsing (defaults included; output and
        reporting options excluded): what the key hashes, so a default changed or
        a new option added changes the key.
    version : str
        Package version (hashed too).
    key : str
        SHA-256 of the canonical JSON of ``(command, config, version)``.
    """

    command: str
    params: dict
    argv: tuple
    config: dict
    version: str
    key: str


class _Validated(Exception):
    """Raised by the dry run at the command's ``Progress``: the input passed the command's validation."""


class _Stop:
    def __init__(self, *args, **kwargs):
        raise _Validated


def _parse(command: str, argv: list[str]):
    parser, _ = _subparser(command)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return parser.parse_args([command, *argv])
    except SystemExit:
        line = err.getvalue().strip().splitlines()
        text = line[-1] if line else "usage error"
        text = text.split(": error: ", 1)[-1]
        raise ValueError(f"{command}: {text}") from None


def validate(command: str, params: Mapping, *, dry_run: bool = True) -> Invocation:
    """Parse and validate one point exactly as the command would, without running it.

    Parameters
    ----------
    command : str
        A sweepable command (:func:`sweep_command`).
    params : mapping
        Parameter name -> value.
    dry_run : bool
        Also run the command's own value checks (its ``main`` up to its ``Progress``).

    Returns
    -------
    Invocation

    Raises
    ------
    ValueError
        The command's own error, with the flag named (as the command line would print it).
    """
    from reduced_dynamics._validation import check_bool
    from reduced_dynamics.cli import _common
    from reduced_dynamics.cli._common import rename_params

    sweep_command(command)
    dry_run = check_bool("dry_run", dry_run)
    argv = to_argv(command, params)
    args = _parse(command, argv + ["--json", "--quiet"])
    if dry_run:
        mod = args._module
        saved = getattr(mod, "Progress", None)
        if saved is None:
            raise ValueError(f"`command` {command!r} cannot be validated before running (it has no Progress)")
        mod.Progress = _Stop
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                mod.main(args)
        except _Validated:
            pass
        except (ValueError, OverflowError) as exc:
            text = str(exc).splitlines()[0] if str(exc).strip() else exc.__class__.__name__
            raise ValueError(f"{command}: {rename_params(text, args._flags)}") from None
        else:
            raise ValueError(f"`command` {command!r} ran to completion during validation (it has no Progress)")
        finally:
            mod.Progress = saved
            _common.close_all()
    excluded = set(EXCLUDED_PARAMS) | set(SWEEP_COMMANDS[command].excluded)
    config = {k: v for k, v in sorted(vars(args).items()) if not k.startswith("_") and k not in excluded}
    config.pop("command", None)
    version = package_version()
    key = hashlib.sha256(_canonical({"command": command, "config": config, "version": version}).encode()).hexdigest()
    return Invocation(command, dict(params), (command, *argv, "--json", "--quiet"), config, version, key)


# --------------------------------------------------------------------------- running one point


class _ThreadStream(io.TextIOBase):
    """``sys.stdout``/``sys.stderr`` replacement writing to the current thread's buffer when one is set."""

    def __init__(self, base):
        self._base = base
        self._local = threading.local()

    def write(self, text):
        target = getattr(self._local, "buf", None)
        return (target if target is not None else self._base).write(text)

    def flush(self):
        target = getattr(self._local, "buf", None)
        (target if target is not None else self._base).flush()

    def isatty(self):
        return False if getattr(self._local, "buf", None) is not None else self._base.isatty()

    def __getattr__(self, name):
        return getattr(self._base, name)


_INSTALL_LOCK = threading.Lock()
_THREADS_LIMITED = False


def _install_streams():
    with _INSTALL_LOCK:
        if not isinstance(sys.stdout, _ThreadStream):
            sys.stdout = _ThreadStream(sys.stdout)
        if not isinstance(sys.stderr, _ThreadStream):
            sys.stderr = _ThreadStream(sys.stderr)


@contextlib.contextmanager
def _captured(out, err):
    _install_streams()
    sys.stdout._local.buf, sys.stderr._local.buf = out, err
    try:
        yield
    finally:
        sys.stdout._local.buf = sys.stderr._local.buf = None


def limit_threads() -> None:
    """One BLAS/OpenMP thread in this process (each worker of a sweep is one core)."""
    global _THREADS_LIMITED
    if not _THREADS_LIMITED:
        from threadpoolctl import threadpool_limits

        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = "1"
        threadpool_limits(1)
        _THREADS_LIMITED = True


def run_point(argv) -> dict:
    """Run one point: ``reduced_dynamics.cli.main(argv)`` with its output captured; never raises.

    Parameters
    ----------
    argv : sequence of str
        ``Invocation.argv`` (command first, ``--json --quiet`` last).

    Returns
    -------
    dict
        ``exit_code`` (int, or None if the command raised), ``result`` (the JSON
        the command printed, or None), ``error`` (the command's error line, or
        None), ``seconds`` (wall), ``cpu_seconds`` (this process's CPU time;
        one BLAS thread), ``worker`` (``host:pid``).
    """
    from reduced_dynamics.cli import main

    limit_threads()
    out, err = io.StringIO(), io.StringIO()
    t0, c0 = time.perf_counter(), time.process_time()
    error = None
    try:
        with _captured(out, err):
            rc = main(list(argv))
    except Exception as exc:  # a bug in the command, not bad input: record it, the sweep goes on
        rc, error = None, f"{exc.__class__.__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".strip()
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    result = None
    text = out.getvalue().strip()
    if text:
        try:
            result = json.loads(text)
        except ValueError:
            result = None
            error = error or "the command printed no JSON object"
    lines = [s for s in err.getvalue().splitlines() if s.strip() and ": note: " not in s]
    if error is None and (rc not in (0, 1) or result is None):
        error = lines[-1] if lines else f"exit status {rc} without a result"
    return {
        "exit_code": rc,
        "result": result,
        "error": error,
        "seconds": seconds,
        "cpu_seconds": cpu,
        "worker": f"{socket.gethostname()}:{os.getpid()}",
    }
