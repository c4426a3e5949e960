"""What every command shares: ``--quiet`` and progress on stderr, the one list syntax, flag names in errors, exit codes.

- Progress: :class:`Progress` writes one line per stage on stderr (never on stdout,
  so ``--json`` output stays parseable) once the command has run for
  :data:`PROGRESS_DELAY` seconds; ``--quiet`` turns it off. A quick command, or
  one that fails on its input, prints nothing but its result or its one error line.
- Lists: every list option takes comma-separated numbers (``--omega 0.1,-0.1``);
  space-separated values after the flag (``--omega 0.1 -0.1``) are joined the same
  way. Empty items (``0.1,,-0.2``), NaN and inf are rejected, naming the flag.
- Errors: the library names its parameters (``n_heads``, ``t_end``, ...);
  :func:`flag_names` maps each command's parameter names to the flags the user
  typed, and :func:`reduced_dynamics.cli.main` rewrites the one error line with it.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import threading
import time

__all__ = [
    "EXIT_CODES",
    "exit_codes_epilog",
    "add_quiet",
    "Progress",
    "PROGRESS_DELAY",
    "close_all",
    "parse_floats",
    "nonempty",
    "check_range",
    "prepare_out",
    "check_own_file",
    "write_flow_run",
    "flag_names",
    "rename_params",
]

#: exit status -> meaning, shared by every command (each command's ``--help`` lists the ones it uses)
EXIT_CODES = {
    0: "success",
    1: "the command ran but its result failed ({fail})",
    2: "bad input: a usage error, a value out of range, an unwritable output path (one line on stderr naming the flag)",
    3: "the run failed numerically (e.g. training diverged: the loss became non-finite); try a smaller --lr",
    130: "interrupted (Ctrl-C)",
}


def exit_codes_epilog(*, fail: str | None = None, numerical: bool = False) -> str:
    """The ``--help`` epilog listing the exit statuses a command can return.

    ``fail`` says when the command exits 1 (None: it never does); ``numerical``
    says whether it can exit 3.
    """
    lines = ["exit status:"]
    for code, text in EXIT_CODES.items():
        if code == 1 and fail is None:
            continue
        if code == 3 and not numerical:
            continue
        lines.append(f"  {code:<4} {text.format(fail=fail)}")
    return "\n".join(lines)


def add_quiet(p) -> None:
    """Add ``--quiet`` (no progress lines on stderr) to the parser ``p``."""
    p.add_argument(
        "--quiet", action="store_true", help="no progress lines or notes on stderr (errors are still reported)"
    )


#: seconds a command runs before its first progress line (the line of the stage it is in then)
PROGRESS_DELAY = 1.0
_ACTIVE: list[Progress] = []


class Progress:
    """Progress lines on stderr for one command; silent with ``quiet=True``.

    ``stage(text)`` writes ``reduced-dynamics <command>: <text> [<seconds> s]``;
    ``tick(text)`` writes it only if ``every`` seconds have passed since the last
    line (a rate-limited progress line for loops). During the first
    :data:`PROGRESS_DELAY` seconds nothing is written: the stage current at that
    moment is written then (by a timer), so a command that ends or fails before
    prints no progress at all. :meth:`close` (called by
    :func:`reduced_dynamics.cli.main` when the command returns) stops the timer.
    """

    def __init__(self, command: str, *, quiet: bool = False, every: float = 2.0):
        self.command, self.quiet, self.every = command, bool(quiet), float(every)
        self._t0 = self._last = time.perf_counter()
        self._lock = threading.Lock()
        self._pending: str | None = None
        self._closed = False
        self._timer = None
        if not self.quiet:
            _ACTIVE.append(self)
            if PROGRESS_DELAY > 0:
                self._timer = threading.Timer(PROGRESS_DELAY, self._flush_pending)
                self._timer.daemon = True
                self._timer.start()

    def _write(self, text: str) -> None:
        self._last = time.perf_counter()
        sys.stderr.write(f"reduced-dynamics {self.command}: {text} [{self._last - self._t0:.1f} s]\n")
        sys.stderr.flush()

    def _flush_pending(self) -> None:
        with self._lock:
            if self._pending is not None and not self._closed:
                self._write(self._pending)
            self._pending = None

    def stage(self, text: str) -> None:
        check_interrupted()
        if self.quiet:
            return
        with self._lock:
            if self._closed:
                return
            if time.perf_counter() - self._t0 < PROGRESS_DELAY:
                self._pending = text
            else:
                self._pending = None
                self._write(text)

    def tick(self, text: str) -> None:
        if not self.quiet and time.perf_counter() - self._last >= self.every:
            self.stage(text)

    def close(self) -> None:
        """Write nothing more (cancel the delayed first line)."""
        with self._lock:
            self._closed = True
            self._pending = None
        if self._timer is not None:
            self._timer.cancel()


#: Ctrl-C received by the running command (set by ``reduced_dynamics.cli.main``'s handler)
INTERRUPTED: list = []


def check_interrupted() -> None:
    """Raise ``KeyboardInterrupt`` if a Ctrl-C arrived that Python swallowed (in a finaliser); a no-op otherwise."""
    if INTERRUPTED:
        raise KeyboardInterrupt


#: one-line notes of the running command (e.g. an old flag spelling), written by ``reduced_dynamics.cli.main``
#: after the command returned, so that bad input still gives exactly one error line
NOTES: list[str] = []


def note(text: str) -> None:
    """Queue a one-line note for stderr (written once the command has returned, not on a bad-input exit)."""
    NOTES.append(text)


def close_all() -> None:
    """Close every :class:`Progress` of this process (the command has returned or failed)."""
    while _ACTIVE:
        _ACTIVE.pop().close()


def parse_floats(value, flag: str) -> list[float]:
    """Parse the one list syntax: comma-separated finite numbers (a list of such strings is joined with commas).

    Raises
    ------
    ValueError
        Naming ``flag``: an empty list, an empty item (``0.1,,0.2``), a non-number, NaN or inf.
    """
    text = ",".join(value) if isinstance(value, (list, tuple)) else str(value)
    items = [s.strip() for s in text.split(",")]
    if text.strip() == "" or any(s == "" for s in items):
        raise ValueError(f"`{flag}` must be a comma-separated list of numbers without empty items, got {text!r}")
    out = []
    for s in items:
        try:
            f = float(s)
        except ValueError:
            raise ValueError(f"`{flag}` must be a comma-separated list of numbers, got {text!r}") from None
        if not math.isfinite(f):
            raise ValueError(f"`{flag}` must hold finite numbers, got {text!r}")
        out.append(f)
    return out


def nonempty(text: str) -> str:
    """argparse ``type`` for paths and names: reject the empty string (``--out ""``)."""
    if text.strip() == "":
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def prepare_out(path, *, is_file: bool = False, flag: str = "--out"):
    """Create the output folder (of ``path``, or ``path`` itself) before any work, so an unwritable ``--out`` fails first.

    Raises ``ValueError`` naming ``flag`` when the folder cannot be created or
    written, or when ``path`` should be a file but is a folder (or the reverse).
    Returns ``path`` as a :class:`~pathlib.Path` (None stays None).
    """
    import os
    from pathlib import Path

    if path is None:
        return None
    path = Path(path)
    folder = path.parent if is_file else path
    if is_file and path.is_dir():
        raise ValueError(f"`{flag}` must be a file name, got the folder {str(path)!r}")
    if not is_file and path.exists() and not path.is_dir():
        raise ValueError(f"`{flag}` must be a folder, got the existing file {str(path)!r}")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"`{flag}` cannot be created: {str(folder)!r} ({exc.strerror or exc})") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"`{flag}` is not writable: {str(folder)!r}")
    return path


#: largest existing output file :func:`check_own_file` reads to see who made it
OWN_FILE_MAX_BYTES = 64 * 2**20


def check_own_file(path, made_by: dict, *, force: bool, flag: str = "--out") -> None:
    """Refuse to replace ``path`` unless it is absent, is a JSON file whose ``made_by`` equals ``made_by``, or ``force``.

    The one output-ownership rule for a command writing a file the user names: it overwrites only a file it
    made for the same configuration (its ``made_by`` record: the command and its configuration), else it
    refuses, one line naming ``flag`` and ``--force``. A folder, a named pipe or any file that is not such a
    record (a text file, another command's output, another configuration's) is never replaced silently.
    """
    import json
    import stat
    from pathlib import Path

    path = Path(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ValueError(f"`{flag}` cannot be read: {str(path)!r} ({exc.strerror or exc})") from None
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"`{flag}` must name a file, got {str(path)!r}, which exists and is not a regular file")
    if force:
        return
    old = None
    if st.st_size <= OWN_FILE_MAX_BYTES:
        try:
            doc = json.loads(path.read_bytes())
            old = doc.get("made_by") if isinstance(doc, dict) else None
        except (OSError, ValueError):
            old = None
    if old == made_by:
        return
    what = "another configuration's output" if isinstance(old, dict) else "a file this command did not write"
    raise ValueError(
        f"`{flag}` {str(path)!r} already exists and is {what}; choose another `{flag}` or pass `--force` to replace it"
    )


def write_flow_run(
    args, out: dict, prefix: str, *, n_heads: int, setting, arrays: dict, lead: dict | None = None
) -> dict:
    """Write one extension flow run under ``args.out``: ``STEM.npz`` (``arrays``) and ``STEM.json`` (``out``).

    ``STEM`` encodes ``lead`` (e.g. the activation), then H, d, L, σ², the initialisation, scale, seed and
    ``--t-end`` (:func:`reduced_dynamics.io.output_stem`), so runs never overwrite each other. Both files are
    written atomically; ``out["files"]`` gets their paths (also returned).
    """
    from pathlib import Path

    from reduced_dynamics.io import atomic_savez, atomic_write_json, output_stem, to_jsonable

    folder = Path(prepare_out(args.out))
    key = dict(
        **(lead or {}),
        H=int(n_heads),
        d=setting.d,
        L=setting.L,
        sigma2=float(setting.sigma2),
        init=args.init if args.omega0 is None else "given",
        scale=float(args.init_scale),
        seed=int(args.seed),
        tend=float(args.t_end),
    )
    stem = output_stem(prefix, key)
    files = {
        "trajectory": str(atomic_savez(folder / f"{stem}.npz", **arrays)),
        "summary": str(folder / f"{stem}.json"),
    }
    out["files"] = files
    atomic_write_json(folder / f"{stem}.json", to_jsonable(out))
    return files


def check_range(flag: str, value: float, lo: float, hi: float, *, lo_open: bool = True, hi_open: bool = False):
    """Return ``value`` if it is a finite number in the interval ``lo..hi``, else raise ``ValueError`` naming ``flag``."""
    ok = math.isfinite(value) and (value > lo if lo_open else value >= lo) and (value < hi if hi_open else value <= hi)
    if not ok:
        lb, rb = ("(" if lo_open else "["), (")" if hi_open else "]")
        raise ValueError(f"`{flag}` must be a finite number in {lb}{lo:g}, {hi:g}{rb}, got {value!r}")
    return value


def check_option(args, dest: str, check, *params) -> None:
    """Run ``check(value, *params)`` on the option ``dest`` of ``args``: a check of one option on its own.

    The same as calling ``check(getattr(args, dest), *params)``; a sweep's validation records the call instead
    of the option's value, so the points of a grid that differ only in options checked this way (``--seed``,
    ``--prompts``) run the command's validation once and replay ``check`` on each point's value.
    ``check`` raises ``ValueError`` naming the flag, returns None, and depends on nothing but its arguments.
    """
    record = getattr(type(args), "_rd_check", None)
    if record is not None:
        record(args, dest, check, params)
    else:
        check(getattr(args, dest), *params)


def check_int_in(value: int, flag: str, lo: int, hi: int | None = None, why: str = "") -> None:
    """Raise ``ValueError`` naming ``flag`` unless ``lo <= value`` (and ``value <= hi``) (for :func:`check_option`)."""
    if value < lo or (hi is not None and value > hi):
        where = f">= {lo}" if hi is None else f"in [{lo}, {hi:.0e}]" if hi >= 10**6 else f"in [{lo}, {hi}]"
        raise ValueError(f"`{flag}` must be an integer {where}{why}, got {value}")


def check_float_in(value: float, flag: str, lo: float, hi: float, lo_open: bool = True, hi_open: bool = False) -> None:
    """:func:`check_range` returning None (for :func:`check_option`)."""
    check_range(flag, value, lo, hi, lo_open=lo_open, hi_open=hi_open)


def flag_names(parser, extra: dict | None = None) -> dict[str, str]:
    """Parameter name -> flag for one subcommand parser.

    Every option ``--x-y`` maps its dest ``x_y`` and the spelling ``x-y`` to
    ``--x-y``; a positional argument maps its dest to its metavar (``SPEC``); ``extra`` adds the library's names that differ from the flag
    (e.g. ``{"n_heads": "--heads"}``).
    """
    out = {}
    for action in parser._actions:
        if not action.option_strings and isinstance(action.dest, str) and action.nargs != 0:
            # a positional argument (``sweep SPEC``): named by its metavar, as --help shows it
            if not isinstance(action, argparse._SubParsersAction):
                out[action.dest] = action.metavar if isinstance(action.metavar, str) else action.dest.upper()
            continue
        longs = [s for s in action.option_strings if s.startswith("--")]
        if not longs:
            continue
        flag = longs[0]
        out[action.dest] = flag
        out[flag[2:]] = flag
    out.update(extra or {})
    return out


_BACKTICKED = re.compile(r"`([A-Za-z_][A-Za-z0-9_.\-]*)`")


def rename_params(message: str, names: dict[str, str]) -> str:
    """Replace every backticked parameter name in ``message`` that has a flag by ```--flag```."""
    return _BACKTICKED.sub(lambda m: f"`{names[m.group(1)]}`" if m.group(1) in names else m.group(0), message)


def _num(x: float) -> str:
    """Six decimals while that is readable, else six significant digits (1e4-sized risks stay one token)."""
    return f"{x:.6f}" if abs(x) < 1e4 else f"{x:.6g}"


def risk_table(estimates, exact) -> str:
    """The risk table: columns as wide as their widest entry, always separated by two spaces."""
    header = ["estimator", "risk", "stderr", "exact", "(mc-exact)/se"]
    rows = []
    for name, est in estimates.items():
        ex = exact[name]
        z = f"{(est.risk - ex) / est.stderr:.2f}" if ex is not None and est.stderr > 0 else "-"
        rows.append([name, _num(est.risk), _num(est.stderr), _num(ex) if ex is not None else "-", z])
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    fmt = lambda r: "  ".join([r[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(r[1:], widths[1:]))])  # noqa: E731
    return "\n".join(fmt(r) for r in [header, *rows])
