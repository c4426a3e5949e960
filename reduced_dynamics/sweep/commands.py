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

import argparse
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


_ACTIONS: dict = {}


def _actions(command: str) -> dict:
    """dest -> argparse action of the command's options (``--help`` excluded)."""
    if command not in _ACTIONS:
        _, sub = _subparser(command)
        _ACTIONS[command] = {a.dest: a for a in sub._actions if a.option_strings and a.dest != "help"}
    return dict(_ACTIONS[command])


_PARAMETERS: dict = {}


def parameters(command: str) -> dict:
    """dest -> flag of every option a sweep of ``command`` may set (a ``ValueError`` naming ``command`` if unknown)."""
    command = sweep_command(command).name
    if command not in _PARAMETERS:
        excluded = set(EXCLUDED_PARAMS) | set(SWEEP_COMMANDS[command].excluded)
        _PARAMETERS[command] = {d: a.option_strings[-1] for d, a in _actions(command).items() if d not in excluded}
    return dict(_PARAMETERS[command])


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

    sweep_command(command)
    dry_run = check_bool("dry_run", dry_run)
    argv = to_argv(command, params)
    args = _parse(command, argv + ["--json", "--quiet"])
    if dry_run:
        _dry_run(command, args)
    return _invocation(command, params, argv, vars(args))


def _dry_run(command: str, args) -> None:
    """Run the command's ``main`` on ``args`` up to its ``Progress`` (every input check); raise its error."""
    from reduced_dynamics.cli import _common
    from reduced_dynamics.cli._common import rename_params

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
        raise ValueError(f"{command}: {rename_params(text, vars(args).get('_flags') or {})}") from None
    else:
        raise ValueError(f"`command` {command!r} ran to completion during validation (it has no Progress)")
    finally:
        mod.Progress = saved
        _common.close_all()


def _invocation(command: str, params: Mapping, argv: list, values: Mapping) -> Invocation:
    """The :class:`Invocation` of a point whose parsed (and validated) arguments are ``values``."""
    excluded = set(EXCLUDED_PARAMS) | set(SWEEP_COMMANDS[command].excluded)
    config = {k: v for k, v in sorted(values.items()) if not k.startswith("_") and k not in excluded}
    config.pop("command", None)
    version = package_version()
    key = hashlib.sha256(_canonical({"command": command, "config": config, "version": version}).encode()).hexdigest()
    return Invocation(command, dict(params), (command, *argv, "--json", "--quiet"), config, version, key)


# --------------------------------------------------------------------------- validating a grid fast

_MISSING = ("missing",)


def _freeze(value):
    """A hashable stand-in of an argument's value: equal for equal values of the same types (1, 1.0 and True differ)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return (type(value).__name__, repr(value))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_freeze(v) for v in value))
    if isinstance(value, (set, frozenset)):
        return (type(value).__name__, tuple(sorted((_freeze(v) for v in value), key=repr)))
    if isinstance(value, dict):
        return ("dict", tuple(sorted(((_freeze(k), _freeze(v)) for k, v in value.items()), key=repr)))
    return ("object", id(value))  # a module or a function: the same object for every point


class _TracedArgs(argparse.Namespace):
    """The parsed arguments of a point, recording what the command's ``main`` reads and writes before its ``Progress``.

    ``_rd_reads``: name -> frozen value of every attribute read before it was written (``_MISSING`` if absent);
    ``_rd_writes``: name -> value set by ``main``; ``_rd_checks``: the calls of
    :func:`reduced_dynamics.cli._common.check_option` (one option checked alone: recorded instead of its value);
    ``_rd_whole``: the whole namespace was read (``vars(args)``), or an attribute deleted: nothing can be reused.
    """

    __slots__ = ("_rd_reads", "_rd_writes", "_rd_checks", "_rd_whole", "_rd_fz")

    def __init__(self, values: dict, freeze=_freeze):
        object.__getattribute__(self, "__dict__").update(values)
        for name, v in (
            ("_rd_reads", {}),
            ("_rd_writes", {}),
            ("_rd_checks", []),
            ("_rd_whole", False),
            ("_rd_fz", freeze),
        ):
            object.__setattr__(self, name, v)

    def __getattribute__(self, name):
        if name.startswith("_rd_") or (name.startswith("__") and name != "__dict__"):
            return object.__getattribute__(self, name)
        values = object.__getattribute__(self, "__dict__")
        if name == "__dict__":
            object.__setattr__(self, "_rd_whole", True)
            return values
        reads = object.__getattribute__(self, "_rd_reads")
        if name not in reads and name not in object.__getattribute__(self, "_rd_writes"):
            reads[name] = object.__getattribute__(self, "_rd_fz")(values[name]) if name in values else _MISSING
        return object.__getattribute__(self, name)

    def __setattr__(self, name, value):
        object.__getattribute__(self, "_rd_writes")[name] = value
        object.__getattribute__(self, "__dict__")[name] = value

    def __delattr__(self, name):
        object.__setattr__(self, "_rd_whole", True)
        del object.__getattribute__(self, "__dict__")[name]

    def _rd_check(self, dest, check, params):
        """Run and record ``check(value of dest, *params)`` without recording the value as read."""
        values = object.__getattribute__(self, "__dict__")
        result = check(values[dest], *params)
        if result is not None:  # a check whose result is used: the value itself is a dependency
            reads = object.__getattribute__(self, "_rd_reads")
            if dest not in reads and dest not in object.__getattribute__(self, "_rd_writes"):
                reads[dest] = object.__getattribute__(self, "_rd_fz")(values[dest])
            return result
        if dest not in object.__getattribute__(self, "_rd_writes"):
            object.__getattribute__(self, "_rd_checks").append((dest, check, params))
        return None


#: most runs of a command's checks a :class:`PointValidator` records for reuse
MEMO_MAX = 200_000


class PointValidator:
    """Validate the points of one grid as :func:`validate` does, reusing work shared between points.

    Two things make a grid of a million points take seconds instead of minutes, each giving exactly what
    :func:`validate` gives (argv, configuration, key, and the refusal of every point it refuses):

    - the command line is parsed once for the fixed parameters and once per (parameter, value) of the
      axes; a point's arguments are the fixed ones updated with its axes' values (argparse converts each
      option on its own; the one cross-option rule, an option given twice, cannot occur in a spec);
    - the command's ``main`` runs up to its ``Progress`` on a point whose arguments record what it reads
      (:class:`_TracedArgs`). A later point giving the same values to everything that run read makes the
      same run (``main`` is a function of its arguments and of files that do not change during the
      validation), so it is not run again: its writes to the arguments are applied and the checks of single
      options it made through :func:`~reduced_dynamics.cli._common.check_option` are replayed on the
      point's own values (``--seed``, ``--prompts``: a grid differing in those only runs ``main`` once).

    A run that reads the whole namespace, deletes an attribute or changes a value in place is not reused.

    Parameters
    ----------
    command : str
        A sweepable command.
    fixed : mapping
        The parameters every point shares (a spec's ``[fixed]``).
    """

    def __init__(self, command: str, fixed: Mapping):
        sweep_command(command)
        self.command = command
        self.fixed = dict(fixed)
        self._fixed_argv = to_argv(command, self.fixed)
        base = vars(_parse(command, self._fixed_argv + ["--json", "--quiet"]))
        self._base_seen = frozenset(base.pop("_seen_options", ()))
        self._base = base
        self._frozen: dict = {}  # id -> (object, frozen): shared argument objects frozen once
        self._base_frozen = {a: self._fz(v) for a, v in base.items()}
        self._lists = {a for a, v in base.items() if isinstance(v, list)}
        self._acts = _actions(command)
        self._deltas: dict = {}
        self._seen_sets: dict = {}
        self._memo: dict = {}  # tuple of names read -> {tuple of their frozen values: (writes, checks)}
        self.runs = 0  # runs of `main` (the rest were reused)
        self.reused = 0
        self._entries = 0
        self._excluded = set(EXCLUDED_PARAMS) | set(SWEEP_COMMANDS[command].excluded) | {"command"}
        self._version = package_version()
        self._frame = (
            f'{{"command":{json.dumps(command)},"config":{{',
            f'}},"version":{json.dumps(self._version)}}}',
        )
        self._names: dict = {}
        self._base_pieces = self._pieces_of(base)

    def _converted(self, name, value):
        """The parsed value of a number given to a plain int/float option, as argparse converts it; else None."""
        import argparse

        dest = str(name).replace("-", "_")
        act = self._acts.get(dest)
        if (
            act is None
            or not isinstance(act, argparse._StoreAction)
            or act.nargs is not None
            or act.choices is not None
            or isinstance(value, bool)
            or not ((act.type is int and type(value) is int) or (act.type is float and type(value) in (int, float)))
        ):
            return None
        return dest, act.type(_format_value(value))

    def _delta(self, name, value):
        """(argv fragment, changed arguments, their frozen values, typed dests) of one axis value, parsed once."""
        k = (name, repr(value), type(value).__name__)
        hit = self._deltas.get(k)
        if hit is None:
            frag = to_argv(self.command, {name: value})
            conv = self._converted(name, value) if frag else None
            if conv is not None:  # what argparse gives, without its per-call cost (a million seeds)
                seen, changed = frozenset({conv[0]}) - self._base_seen, {conv[0]: conv[1]}
            elif frag:
                parsed = vars(_parse(self.command, self._fixed_argv + frag + ["--json", "--quiet"]))
                seen = frozenset(parsed.pop("_seen_options", ())) - self._base_seen
                base = self._base
                changed = {
                    a: v
                    for a, v in parsed.items()
                    if a not in base or (v is not base[a] and (type(v) is not type(base[a]) or v != base[a]))
                }
            else:
                seen, changed = frozenset(), {}
            hit = (frag, changed, {a: self._fz(v) for a, v in changed.items()}, seen, self._pieces_of(changed))
            if len(self._deltas) < 4_000_000:
                self._deltas[k] = hit
        return hit

    def _fz(self, value):
        if value is None or isinstance(value, (bool, int, float, str, list, set)):  # a point's own objects
            return _freeze(value)
        got = self._frozen.get(id(value))
        if got is None or got[0] is not value:
            got = self._frozen[id(value)] = (value, _freeze(value))
        return got[1]

    def validate(self, params: Mapping) -> Invocation:
        """The :class:`Invocation` of the point ``params`` (the fixed parameters and the point's axis values).

        Raises
        ------
        ValueError
            As :func:`validate`.
        """
        argv = list(self._fixed_argv)
        values = dict(self._base)
        frozen = dict(self._base_frozen)
        pieces = dict(self._base_pieces)
        seen = self._base_seen
        lists = self._lists
        for name, value in params.items():
            if name in self.fixed:
                continue
            frag, changed, changed_frozen, typed, changed_pieces = self._delta(name, value)
            argv += frag
            values.update(changed)
            frozen.update(changed_frozen)
            pieces.update(changed_pieces)
            if typed:
                seen = seen | typed
            if changed:
                lists = lists | {a for a, v in changed.items() if isinstance(v, list)}
        for a in lists:  # a list of a point is its own (main may keep it)
            if isinstance(values[a], list):
                values[a] = list(values[a])
        seen_frozen = self._seen_sets.get(seen)
        if seen_frozen is None:
            seen_frozen = self._seen_sets[seen] = _freeze(set(seen))
        values["_seen_options"] = set(seen)
        frozen["_seen_options"] = seen_frozen
        for names, table in self._memo.items():
            entry = table.get(tuple([frozen.get(a, _MISSING) for a in names]))
            if entry is not None:
                writes, checks, write_pieces = entry
                values.update(writes)  # (a checked option is never one main wrote: see _TracedArgs._rd_check)
                try:
                    for dest, check, cparams in checks:
                        check(values[dest], *cparams)
                except (ValueError, OverflowError) as exc:
                    from reduced_dynamics.cli._common import rename_params

                    text = str(exc).splitlines()[0] if str(exc).strip() else exc.__class__.__name__
                    raise ValueError(f"{self.command}: {rename_params(text, values.get('_flags') or {})}") from None
                pieces.update(write_pieces)
                self.reused += 1
                return self._invocation(params, argv, values, pieces)
        return self._run(params, argv, values)

    def _pieces_of(self, values: Mapping) -> dict:
        """name -> ``"name":value`` of the canonical JSON, for the configuration's entries of ``values``."""
        return {
            k: f"{json.dumps(k)}:{_canonical(v)}"
            for k, v in values.items()
            if not k.startswith("_") and k not in self._excluded
        }

    def _invocation(self, params, argv, values, pieces) -> Invocation:
        """:func:`_invocation`, its canonical JSON joined from the pieces of the point's values."""
        ks = tuple(pieces)
        names = self._names.get(ks)
        if names is None:
            names = self._names[ks] = sorted(ks)
        config = {k: values[k] for k in names}
        head, tail = self._frame
        text = head + ",".join([pieces[k] for k in names]) + tail
        key = hashlib.sha256(text.encode()).hexdigest()
        return Invocation(
            self.command, dict(params), (self.command, *argv, "--json", "--quiet"), config, self._version, key
        )

    def _recording(self) -> bool:
        """Whether a run is recorded: not beyond :data:`MEMO_MAX` records, nor once runs are rarely reused
        (a grid whose every point differs in what the checks read: recording would only cost memory)."""
        if self._entries >= MEMO_MAX:
            return False
        return self.runs < 2000 or self.reused >= self.runs

    def _run(self, params, argv, values) -> Invocation:
        record = self._recording()
        # a value changed in place would be a write the record misses (the configuration holds the lists)
        before = (
            {a: _freeze(v) for a, v in values.items() if isinstance(v, (list, set, dict)) and a[0] != "_"}
            if record
            else {}
        )
        args = _TracedArgs(values, self._fz)
        self.runs += 1
        _dry_run(self.command, args)
        reads = object.__getattribute__(args, "_rd_reads")
        writes = object.__getattribute__(args, "_rd_writes")
        checks = object.__getattribute__(args, "_rd_checks")
        after = object.__getattribute__(args, "__dict__")
        in_place = any(a not in writes and _freeze(after.get(a)) != f for a, f in before.items())
        if record and not object.__getattribute__(args, "_rd_whole") and not in_place:
            names = tuple(sorted(reads))
            frozen = tuple(reads[a] for a in names)
            self._memo.setdefault(names, {})[frozen] = (dict(writes), tuple(checks), self._pieces_of(writes))
            self._entries += 1
        after = dict(after)
        return self._invocation(params, argv, after, self._pieces_of(after))


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

        from reduced_dynamics.cli import BLAS_THREAD_VARS

        for var in BLAS_THREAD_VARS:
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
