"""Fuzz suite of the ``reduced-dynamics`` command line (issue 9).

Every subcommand and every option comes from :func:`reduced_dynamics.cli.build_parser`
(a new command or flag is fuzzed without editing this file). Hypothesis builds argument
lists with values of every magnitude (0, ±1e-320, ±1e308, integers beyond int64, NaN,
±inf), empty strings, malformed lists (``0.1,,-0.1``, ``,``, ``a,b``), options given
twice, bad output paths (``""``, an existing file used as a folder, a path under
``/proc``) and unknown flags. The contract of one invocation:

- exit 0 with finite output: ``--json`` output is one strict JSON document whose numbers
  are finite and whose nulls are only where a value is legitimately absent
  (:data:`NULL_OK`); text output has no ``nan``/``inf`` number and no numbers run
  together; stderr has no traceback and no Python warning; or
- exit 2 with exactly one line on stderr that names one of the flags the invocation
  changed (``--flag``, `` `flag` ``), not an internal parameter name;
- another exit status only if the command's ``--help`` documents it, with the same
  output rules as exit 0;
- input that is certainly bad (empty or unparsable values, NaN/inf, malformed lists,
  unwritable paths, unknown flags, an option given twice, counts <= 0 or beyond int64,
  values far outside the data model's bounds) must be rejected with exit 2;
- never a traceback, never over :data:`WALL_SECONDS` of wall time or :data:`MEM_BYTES`
  of address space.

Each invocation runs in its own process with ``RLIMIT_AS`` = :data:`MEM_BYTES` and a
wall-time limit. To keep the suite within the test budget the processes are forked from
a server that has imported the package once (``tests/fuzz/_forkserver.py``; the child
runs ``reduced_dynamics.__main__`` exactly as ``python -m reduced_dynamics``, and
:func:`test_forkserver_matches_fresh_interpreter` checks that); set
``RD_FUZZ_FRESH=1`` to start a fresh ``python -m reduced_dynamics`` for every
invocation instead. Invocations are kept cheap: options such as ``--quick``, a tiny
``--t-end``, ``--steps`` or ``--prompts`` are always added unless the example fuzzes
that option, in which case its valid values are capped (:data:`COST_INT`,
:data:`COST_FLOAT`) and larger values are the kind that must be rejected (or, for
``--t-end`` >= 1e13, cost no more than a small value); a value that selects an expensive model brings
its own cheap options (:data:`EXPENSIVE`: ``run --objective exact`` gets a small ``--budget``). The
options that select the model of ``run`` (``--objective``, ``--activation``, ``--tasks``,
``--sigma-eigs``) take valid values too (:data:`VALID_NAMES`), so every model goes through the one run
path and its flag table. An old spelling (``--n-eval``) replaces its new one in the cheap options
(:data:`ALIASES`); both together must be rejected. ``RD_FUZZ_REPORT=path`` appends one JSON line per
invocation (argv, outcome, violations) to ``path``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from reduced_dynamics.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
SERVER = Path(__file__).with_name("_forkserver.py")

#: address-space limit of every invocation (RLIMIT_AS)
MEM_BYTES = 2 * 1024**3
#: wall-time limit of every invocation (all of them are configured to be cheap)
WALL_SECONDS = 20.0

#: examples per command (bounded: the whole file runs in about a minute)
EXAMPLES = {"run": 60, "risk": 45, "check": 35, "train": 40, "portrait": 14, "figures": 14, "analyze": 30}
DEFAULT_EXAMPLES = 20

#: commands with a positional argument: (its metavar, a valid value, values that must be rejected); {tmp} is the
#: example folder, which holds a tiny sweep spec and a finished tiny sweep (_example_dir)
POSITIONAL = {
    "sweep": (
        "SPEC",
        "{tmp}/tiny.toml",
        ["{tmp}/missing.toml", "{tmp}/afile", "{tmp}/exists_dir", "", "{tmp}/bad.toml"],
    ),
    "sweep-table": ("DIR", "{tmp}/tiny_sweep", ["{tmp}/missing", "{tmp}/afile", "{tmp}/exists_dir", ""]),
    "analyze": (
        "FILE",
        "{tmp}/model.npz",
        [
            "{tmp}/missing.npz",
            "{tmp}/afile",
            "{tmp}/exists_dir",
            "",
            "{tmp}/other.npz",
            "{tmp}/fifo.npz",
            "{tmp}/huge_member.npz",
            "{tmp}/truncated.npz",
        ],
    ),
}
#: the checkpoint `analyze` reads in the example folder: circuits KQ (H, D, D), ov (H, D) of d = 2, H = 2
#: (the importers' .npz layout), and an .npz that is not an attention model
TINY_MODEL = {
    "KQ": [[[0.3, 0.0, 0.0], [0.0, 0.3, 0.0], [0.0, 0.0, 0.0]], [[-0.3, 0.0, 0.0], [0.0, -0.3, 0.0], [0.0, 0.0, 0.0]]],
    "ov": [[0.0, 0.0, 1.5], [0.0, 0.0, -1.5]],
}
#: the tiny spec: one point of `run`, a few milliseconds
TINY_SPEC = 'command = "run"\nseeds = [0]\n[fixed]\nt-end = 1\nn-times = 4\n'

#: cheap options added to every invocation of a command unless the example fuzzes that flag (run has no
#: --no-plot here: the flag table refuses it for every model but the isotropic one; it is fuzzed as a switch)
BASE = {
    "run": [("--t-end", "10"), ("--n-times", "16")],
    "risk": [("--prompts", "64")],
    "check": [("--quick", None), ("--only", "single_head")],  # the cheapest check (0.04 s; approximation: 0.3 s)
    "train": [("--steps", "3"), ("--batch", "8"), ("--eval-prompts", "64")],
    "portrait": [
        ("--resolution", "10"),
        ("--n-traj", "1"),
        ("--t-end", "10"),
        ("--heads", "2"),
        ("--out", "{tmp}/portrait"),
    ],
    "figures": [("--quick", None), ("--only", "risk_vs_L"), ("--out", "{tmp}/figures")],
    "sweep": [("--workers", "1"), ("--out", "{tmp}/sweep_out")],
    "analyze": [("--n-prompts", "64"), ("--lengths", "4")],
}

#: command -> old spelling -> the new spelling it stands for: fuzzing the old one drops the new one from BASE,
#: and an invocation giving both must be rejected
ALIASES = {"run": {"--n-eval": "--n-times"}, "train": {"--n-eval": "--eval-prompts"}}
#: (option, value) -> cheap options that value brings (unless the example fuzzes them): a gradient of the exact
#: finite-L risk costs up to ~0.2 s (H = 5) and its BDF Jacobian 2H + 1 more, so with --n-init 4 even a budget of
#: 2 takes ~13 s; its flow gets one gradient (status -2, exit 1: the output rules still apply), a fuzzed
#: --budget (<= 20, COST_INT) lets it take steps
EXPENSIVE = {("--objective", "exact"): [("--budget", "1")]}

#: integer options that set the cost of a run: valid fuzzed values stay in [lo, hi]; counts <= 0
#: and counts beyond int64 are generated too, and must be rejected
COST_INT = {
    "--prompts": (2, 300),
    "--steps": (1, 6),
    "--batch": (1, 16),
    "--n-eval": (1, 100),
    "--n-times": (1, 100),
    "--eval-prompts": (1, 100),
    "--budget": (1, 20),  # gradients per trajectory: bounds the cost of every model's flow (exact: ~0.3 s each)
    "--resolution": (10, 14),
    "--n-traj": (1, 2),
    "--heads": (1, 5),
    "--d": (1, 12),
    "--L": (1, 80),
    "--workers": (1, 2),
    "--n-init": (1, 4),
    "--n-prompts": (2, 300),
}
#: values beyond the data model's bounds (Setting: d <= 1e5, L <= 1e9, sigma2 <= 1e12): must be rejected
TOO_LARGE = {"--d": ["100001", str(10**30)], "--L": [str(10**9 + 1), str(10**30)], "--sigma2": ["1e308", "1e200"]}

#: float options that set the cost of a run: valid fuzzed values stay <= the cap; larger ones are only the
#: astronomical values of FLOAT_VALUES (>= 1e13), which must be rejected or cost no more than a small value
COST_FLOAT = {"--t-end": 1e3}
#: the valid values of options that take a name without argparse choices (anything else must be rejected)
VALID_NAMES = {
    "--method": ("Radau", "BDF", "LSODA", "RK45", "RK23", "DOP853", "batch-Radau"),
    # the options that choose the model (valid or not for the drawn --d: either outcome)
    "--activation": ("exp", "affine", "square", "tanh"),
    "--tasks": ("1-2", "1-3,3-5", "2,1-3"),
    "--sigma-eigs": ("1,2,3,4,5", "0.5,1.375,2.25,3.125,4", "1,2"),
    "--optimizer": ("adam", "sgd"),
    "--param": ("separate", "merged", "linear", "reduced"),
    "--lengths": ("4", "4,8", "2,16"),
}

#: file options: (valid files, hostile files that must be rejected) in the example folder (_example_dir): a
#: header declaring 100000 x 100000 in 200 bytes, a named pipe, an object array, a truncated file, a text file,
#: a folder (issue 23: each was a traceback, a 74.5 GiB allocation or a hang)
FILE_VALUES = {
    "--sigma": (
        ["{tmp}/sigma5.npy"],
        [
            "{tmp}/huge_header.npy",
            "{tmp}/fifo.npy",
            "{tmp}/object.npy",
            "{tmp}/truncated.npy",
            "{tmp}/afile",
            "{tmp}/exists_dir",
            "{tmp}/missing.npy",
        ],
    )
}

#: options taking a list of numbers, and the option that must come with each
LIST_FLAGS = {"--omega0": "--mu0", "--mu0": "--omega0", "--omega": "--mu", "--mu": "--omega"}
RANGE_FLAGS = ("--gamma-range", "--m-range")
#: cheap names for the name-list options
CHECK_NAMES = ("approximation", "optimality")
FIGURE_NAMES = ("risk_vs_L",)
#: commands whose --out is a file (the others take a folder)
OUT_IS_FILE = {"check"}

FLOAT_VALUES = [
    "0", "-0", "0.0", "1e-320", "-1e-320", "5e-324", "1e-300", "1e308", "-1e308", "1.7976931348623157e308",
    "1e309", "nan", "NaN", "-nan", "inf", "-inf", "Infinity", "1e30", "-1e30", "1e12", "1e13", "1e4", "2.5",
    "0.5", "0.1", "1", "-1", "0.001", str(10**30), "0x10", "1_0", "1e", ".", "-", "abc", "", " ", "١",
]  # fmt: skip
INT_VALUES = [
    "0", "-0", "1", "-1", "2", "3", "+1", " 7 ", "1_000", "1.5", "1e3", "1e308", "nan", "inf", "", " ", "0x10",
    str(2**31), str(2**63), str(2**64), str(10**30), str(-(10**30)), "9" * 50, "abc",
]  # fmt: skip
STR_VALUES = ["", " ", "bogus", "-", "ünï", "a,b", "\t"]
MALFORMED_LISTS = ["0.1,,-0.1", ",", "a,b", "", "0.1,", ",0.1", " ", "0.1;-0.1", "[0.1,-0.1]", "0.1,nan", "inf,1"]
UNKNOWN_FLAGS = ["--bogus", "--sigma3", "--t_end", "--D", "-x", "---d", "extra"]

#: JSON paths where null means "absent", not a hidden NaN/inf: stage times never reached, the infimum of
#: L̃ where it does not exist, closed forms that do not exist, a check's error (or reason to skip) when it had
#: none (also per task: risk --tasks), Σ = identity, the drift law of γ for an activation that has none (affine),
#: train's manifold gap where it is not defined (every head dummy, or an activation other than exp: the manifold
#: S_γ is the softmax's), and its relative gap (μ± − μ_γ)/μ_γ once μ_γ underflows to 0 (γ huge after a large
#: --lr; the library documents it as inf, which to_jsonable writes as null; found by this suite on the engine
#: branch, independent of the 0.2 CLI); analyze: the exact finite-L risk where it is not derived (Σ, tasks,
#: theory.exact) and the manifold verdict's value when that gap is undefined (verdicts.manifold.value);
#: risk under Σ: the proportional-limit ratio to Bayes ridge, undefined at σ² = 0 (.limit; found by the hunt of
#: issue 23)
NULL_OK = re.compile(
    r"(\.stage_times\.\w+|\.inf_loss|\.exact(?:\[\])?|\.error|\.skipped|\.Sigma|\.gamma_drift_law"
    r"|\.manifold|\.manifold\.rel_gap_(?:plus|minus)|\.verdicts\.manifold\.value|^\.limit)$"
)

TRACEBACK = "Traceback (most recent call last)"
WARNING_RE = re.compile(r"\b[A-Z]\w*Warning\b")
# a printed non-finite number; "inf L̃" (the infimum of the loss) is prose
NONFINITE_RE = re.compile(r"(?<![\w.])[-+]?(?:nan|inf(?:inity)?)(?![\w(])(?! L̃)", re.IGNORECASE)
# two numbers run together: 0.1234560.5, 1.25-0.5
GLUED_RE = re.compile(r"\d\.\d+(?:[eE][-+]?\d+)?[-+.]\d")


# ----------------------------------------------------------------------------- the parser, read once


@dataclasses.dataclass(frozen=True)
class Option:
    flag: str
    takes_value: bool
    kind: str  # "flag" | "int" | "float" | "str" | "choice" | "list" | "range" | "names" | "figname" | "out"
    choices: tuple = ()
    append: bool = False
    default: object = None


@dataclasses.dataclass(frozen=True)
class Command:
    name: str
    options: dict
    help_text: str

    @property
    def documented_codes(self) -> set[int]:
        """Exit statuses the command's own --help mentions (an "exit status:" table or "exit N" in prose)."""
        codes = {int(c) for c in re.findall(r"\bexit(?: status| code)?:?\s+(\d+)", self.help_text)}
        m = re.search(r"exit status(?:es)?:\s*\n((?:[ \t]+\d+.*\n?)+)", self.help_text)
        if m:
            codes |= {int(c) for c in re.findall(r"^[ \t]+(\d+)\b", m.group(1), re.MULTILINE)}
        return codes


def _kind(command: str, action: argparse.Action) -> str:
    flag = max(action.option_strings, key=len)
    if action.nargs == 0:
        return "flag"
    if flag == "--out":
        return "out"
    if flag in LIST_FLAGS:
        return "list"
    if flag in RANGE_FLAGS:
        return "range"
    if flag == "--only":
        return "figname" if command == "figures" else "names"
    if action.choices:
        return "choice"
    if action.type is int or isinstance(action.default, int) and not isinstance(action.default, bool):
        return "int"
    if action.type is float or isinstance(action.default, float):
        return "float"
    return "str"


def read_commands() -> dict[str, Command]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = {}
    for name, p in sub.choices.items():
        options = {}
        for action in p._actions:
            if not action.option_strings or isinstance(action, argparse._HelpAction):
                continue
            flag = max(action.option_strings, key=len)
            options[flag] = Option(
                flag=flag,
                takes_value=action.nargs != 0,
                kind=_kind(name, action),
                choices=tuple(action.choices or ()),
                append=isinstance(action, argparse._AppendAction),
                default=action.default,
            )
        out[name] = Command(name, options, p.format_help())
    return out


COMMANDS = read_commands()


# ----------------------------------------------------------------------------- running one invocation


@dataclasses.dataclass
class Outcome:
    code: int | None
    signal: int | None
    timeout: bool
    seconds: float
    maxrss_kb: int
    stdout: str
    stderr: str


def _limit_memory():  # pragma: no cover - runs in the child
    resource.setrlimit(resource.RLIMIT_AS, (MEM_BYTES, MEM_BYTES))


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("MPLBACKEND", "Agg")
    return env


class Runner:
    """Runs ``reduced-dynamics ARGV`` in a child process: forked from the server, or a fresh interpreter."""

    def __init__(self, *, fresh: bool = False):
        self.fresh = fresh
        self._server = None

    def _start(self):
        self._server = subprocess.Popen(
            [sys.executable, str(SERVER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=str(REPO),
            env=_env(),
            text=True,
        )
        hello = self._server.stdout.readline()
        assert json.loads(hello) == {"ready": True}, f"fork server did not start: {hello!r}"

    def close(self):
        if self._server is not None:
            self._server.stdin.close()
            self._server.wait(timeout=30)
            self._server = None

    def __call__(self, argv: list[str], cwd: str) -> Outcome:
        out_path, err_path = os.path.join(cwd, ".stdout"), os.path.join(cwd, ".stderr")
        if self.fresh:
            res = self._fresh(argv, cwd, out_path, err_path)
        else:
            if self._server is None:
                self._start()
            req = {
                "argv": argv,
                "cwd": cwd,
                "stdout": out_path,
                "stderr": err_path,
                "timeout": WALL_SECONDS,
                "mem_bytes": MEM_BYTES,
            }
            self._server.stdin.write(json.dumps(req) + "\n")
            self._server.stdin.flush()
            res = json.loads(self._server.stdout.readline())
        read = lambda p: Path(p).read_text(encoding="utf-8", errors="replace")  # noqa: E731
        return Outcome(stdout=read(out_path), stderr=read(err_path), **res)

    @staticmethod
    def _fresh(argv, cwd, out_path, err_path) -> dict:
        t0 = time.monotonic()
        with open(out_path, "wb") as fo, open(err_path, "wb") as fe:
            proc = subprocess.Popen(
                [sys.executable, "-m", "reduced_dynamics", *argv],
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=fo,
                stderr=fe,
                env=_env(),
                preexec_fn=_limit_memory,
            )
            timed_out = False
            while True:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid == proc.pid:
                    break
                if time.monotonic() - t0 > WALL_SECONDS:
                    timed_out = True
                    os.kill(proc.pid, signal.SIGKILL)
                    pid, status, usage = os.wait4(proc.pid, 0)
                    break
                time.sleep(0.005)
            proc.returncode = 0  # reaped by os.wait4
        return {
            "code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
            "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
            "timeout": timed_out,
            "seconds": time.monotonic() - t0,
            "maxrss_kb": usage.ru_maxrss,
        }


# ----------------------------------------------------------------------------- invocations and the contract


@dataclasses.dataclass
class Invocation:
    command: str
    argv: list = dataclasses.field(default_factory=list)
    fuzzed: set = dataclasses.field(default_factory=set)  # flags whose values the example chose
    unknown: list = dataclasses.field(default_factory=list)  # unknown flags / stray tokens given
    reject: list = dataclasses.field(default_factory=list)  # why the input must be rejected (exit 2)
    json: bool = False


def _float_ok(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _int_value(text: str):
    try:
        return int(text)
    except ValueError:
        return None


def _list_ok(text: str) -> int | None:
    """Number of items of a well-formed comma-separated list of finite numbers, else None."""
    items = text.split(",")
    if not text.strip() or any(not _float_ok(i) or not i.strip() for i in items):
        return None
    return len(items)


def _scaled(default, cap: float):
    """Values near an option's numeric default (0.1x to 10x), at most ``cap``: mostly valid input."""
    if isinstance(default, bool) or not isinstance(default, (int, float)) or not default:
        return st.nothing()
    values = [repr(v) for v in (0.1 * default, 0.5 * default, default, 2 * default, 10 * default) if v <= cap]
    return st.sampled_from(values) if values else st.nothing()


def draw_value(data, command: str, opt: Option, tmp: str) -> tuple[str, str | None]:
    """A value for ``opt`` and, if the value is certainly bad, the reason it must be rejected."""
    flag = opt.flag
    if opt.kind == "int":
        if flag in COST_INT:
            lo, hi = COST_INT[flag]
            pool = [v for v in INT_VALUES if _int_value(v) is None or _int_value(v) <= 0 or _int_value(v) >= 2**63]
            text = data.draw(
                st.one_of(st.integers(lo, hi).map(str), st.sampled_from(pool + TOO_LARGE.get(flag, []))),
                label=flag,
            )
        else:
            text = data.draw(
                st.one_of(st.sampled_from(INT_VALUES), st.integers(-(10**40), 10**40).map(str)), label=flag
            )
        n = _int_value(text)
        if n is None:
            return text, f"{flag} {text!r} is not an integer"
        if flag in COST_INT and n <= 0:
            return text, f"{flag} {text} is not a positive count"
        if flag in COST_INT and n >= 2**63:
            return text, f"{flag} {text} is beyond int64"
        if text in TOO_LARGE.get(flag, []):
            return text, f"{flag} {text} is outside the data model's bounds"
        return text, None
    if opt.kind == "float" and flag in COST_FLOAT:
        cap = COST_FLOAT[flag]
        pool = [v for v in FLOAT_VALUES if not _float_ok(v) or float(v) <= cap or float(v) >= 1e13]
        text = data.draw(
            st.one_of(st.sampled_from(pool), st.floats(-cap, cap).map(repr), _scaled(opt.default, cap)), label=flag
        )
        return text, None if _float_ok(text) else f"{flag} {text!r} is not a finite number"
    if opt.kind == "float":
        text = data.draw(
            st.one_of(
                st.sampled_from(FLOAT_VALUES + TOO_LARGE.get(flag, [])),
                st.floats(allow_nan=True, allow_infinity=True).map(repr),
                _scaled(opt.default, math.inf),
            ),
            label=flag,
        )
        if not _float_ok(text):
            return text, f"{flag} {text!r} is not a finite number"
        if flag == "--sigma2" and (float(text) < 0 or float(text) >= 1e200):
            return text, f"{flag} {text} is outside the data model's bounds"
        return text, None
    if opt.kind in ("list", "range"):
        items = st.one_of(
            st.sampled_from(["0", "0.1", "-0.1", "1", "-2.5", "4.4", "-4.4", "0.3"]),
            st.sampled_from(FLOAT_VALUES),
            st.floats(allow_nan=True, allow_infinity=True).map(repr),
        )
        size = (2, 2) if opt.kind == "range" else (1, 4)
        text = data.draw(
            st.one_of(
                st.sampled_from(MALFORMED_LISTS), st.lists(items, min_size=size[0], max_size=size[1]).map(",".join)
            ),
            label=flag,
        )
        return text, None if _list_ok(text) else f"{flag} {text!r} is not a list of finite numbers"
    if opt.kind == "names":
        good = st.lists(st.sampled_from(CHECK_NAMES), min_size=1, max_size=2).map(",".join)
        bad = st.sampled_from(["", ",", "a,b", "approximation,,optimality", "approximation,", "bogus", " "])
        text = data.draw(st.one_of(good, bad), label=flag)
        ok = all(s in CHECK_NAMES for s in text.split(","))
        return text, None if ok else f"{flag} {text!r} does not name checks"
    if opt.kind == "figname":
        text = data.draw(st.sampled_from([*FIGURE_NAMES, "", "bogus", " ", "risk_vs_L,bogus"]), label=flag)
        return text, None if text in FIGURE_NAMES else f"{flag} {text!r} does not name a figure"
    if opt.kind == "out":
        is_file = command in OUT_IS_FILE
        good = [f"{tmp}/new/out.json" if is_file else f"{tmp}/new", "out.json" if is_file else "out"]
        good += [] if is_file else [f"{tmp}/exists_dir"]  # an existing file of another origin: refused, or --force
        bad = ["", "/proc/x/out", f"{tmp}/afile/sub"] + ([f"{tmp}/exists_dir"] if is_file else [f"{tmp}/afile"])
        text = data.draw(st.sampled_from(good + bad), label=flag)
        return text, None if text in good else f"{flag} {text!r} cannot be written"
    if opt.kind == "choice":
        text = data.draw(st.sampled_from([*map(str, opt.choices), *STR_VALUES]), label=flag)
        return text, None if text in map(str, opt.choices) else f"{flag} {text!r} is not a choice"
    if (
        flag in FILE_VALUES
    ):  # a file option: a valid file (either outcome: it may not fit the drawn --d) or a hostile one
        good, bad = FILE_VALUES[flag]
        text = data.draw(st.sampled_from([*good, *good, *bad]), label=flag).format(tmp=tmp)
        return text, None if text in [g.format(tmp=tmp) for g in good] else f"{flag} {text!r} is not a usable file"
    valid = VALID_NAMES.get(flag, ())
    text = data.draw(st.sampled_from([*valid, *STR_VALUES]), label=flag)
    if text in valid:
        return text, None
    if valid or not text.strip():
        return text, f"{flag} {text!r} is not a valid name"
    return text, None  # a free string of an option this file does not know: either outcome


def draw_invocation(data, command: Command, tmp: str) -> Invocation:
    inv = Invocation(command.name)
    opts = command.options
    value_opts = sorted(f for f, o in opts.items() if o.takes_value)
    base_flags = {f for f, _ in BASE.get(command.name, []) if f in opts}
    # optional flags not in the base: fuzzed by their presence; base flags: by "--flag=value" or repetition
    switch_opts = sorted(f for f, o in opts.items() if not o.takes_value and f not in base_flags and f != "--json")
    if value_opts:
        chosen = data.draw(st.lists(st.sampled_from(value_opts), min_size=1, max_size=3, unique=True), label="flags")
    else:  # only switches and a positional argument (sweep-table)
        chosen = []
    args: list[tuple[str, str | None]] = []
    for flag in chosen:
        value, why = draw_value(data, command.name, opts[flag], tmp)
        args.append((flag, value))
        inv.fuzzed.add(flag)
        if why:
            inv.reject.append(why)
    # a list option without its partner must be rejected; give the partner (same length) most of the time
    for flag in [f for f in chosen if f in LIST_FLAGS]:
        partner = LIST_FLAGS[flag]
        if partner in chosen or partner not in opts:
            continue
        n = _list_ok(dict(args)[flag])
        if n is None or data.draw(st.booleans(), label=f"{partner} given"):
            k = n or 2
            args.append((partner, ",".join(["1.5", "-1.5", "0.5", "-0.5"][:k])))
            inv.fuzzed.add(partner)
            if command.name == "run" and "--heads" not in chosen and n is not None:
                args.append(("--heads", str(k)))
                inv.fuzzed.add("--heads")
        else:
            inv.reject.append(f"{flag} without {partner}")
    for old, new in ALIASES.get(command.name, {}).items():
        if old in chosen and new in chosen:
            inv.reject.append(f"{old} and {new} (its new spelling) both given")
    pairs = [(a, b) for a, b in (("--omega0", "--mu0"), ("--omega", "--mu")) if a in chosen and b in chosen]
    for a, b in pairs:
        na, nb = _list_ok(dict(args)[a]), _list_ok(dict(args)[b])
        if na is not None and nb is not None and na != nb:
            inv.reject.append(f"{a} and {b} have different lengths")
    switches = st.lists(st.sampled_from(switch_opts), max_size=2, unique=True) if switch_opts else st.just([])
    for flag in data.draw(switches, label="switches"):
        if flag in ("--resume",) and "--out" not in inv.fuzzed:
            continue
        args.append((flag, None))
        inv.fuzzed.add(flag)
    extra = data.draw(st.sampled_from(["none"] * 6 + ["unknown", "duplicate", "explicit"]), label="extra")
    if extra == "unknown":
        # with a positional argument a bare word is that argument (and the real one the stray token): dashes only
        pool = [t for t in UNKNOWN_FLAGS if t.startswith("-")] if command.name in POSITIONAL else UNKNOWN_FLAGS
        token = data.draw(st.sampled_from(pool), label="unknown")
        args.append((token, data.draw(st.sampled_from([None, "1"]), label="unknown value")))
        inv.unknown.append(token)
        inv.reject.append(f"unknown {token}")
    elif extra == "duplicate" and any(v is not None and not opts[f].append for f, v in args if f in opts):
        given = [(f, v) for f, v in args if f in opts and v is not None and not opts[f].append]
        flag, value = data.draw(st.sampled_from(given), label="duplicate")
        args.append((flag, value))
        inv.reject.append(f"{flag} given twice")
    elif extra == "explicit" and any(not o.takes_value for o in opts.values()):
        flag = data.draw(st.sampled_from(sorted(f for f, o in opts.items() if not o.takes_value)), label="switch=")
        args.append((f"{flag}=1", None))
        inv.fuzzed.add(flag)
        inv.reject.append(f"{flag} takes no value")
    # the cheap base options (those the example does not set itself, under either spelling; and those an
    # expensive value brings), JSON output mostly
    covered = inv.fuzzed | {new for old, new in ALIASES.get(command.name, {}).items() if old in inv.fuzzed}
    cheap = [*BASE.get(command.name, []), *(o for key, more in EXPENSIVE.items() if key in args for o in more)]
    base = [(f, v.format(tmp=tmp) if v else v) for f, v in cheap if f in opts]
    base = [(f, v) for f, v in base if f not in covered]
    if "--json" in opts and data.draw(st.integers(0, 3), label="json") > 0:
        base.append(("--json", None))
        inv.json = True
    if command.name in POSITIONAL:
        metavar, valid, bad = POSITIONAL[command.name]
        value = data.draw(st.sampled_from([valid] * 3 + bad), label=metavar)
        if value != valid:
            inv.fuzzed.add(metavar)
            inv.reject.append(f"{metavar} {value!r} is not a usable input")
        args.append((None, value.format(tmp=tmp)))
    order = data.draw(st.permutations(range(len(args))), label="order")
    inv.argv = [command.name]
    for flag, value in base:
        inv.argv += [flag] if value is None else [flag, value]
    for i in order:
        flag, value = args[i]
        if flag is None:  # the positional argument; "--" keeps a value starting with "-" positional
            inv.argv += ["--", value] if value.startswith("-") else [value]
        elif value is None:
            inv.argv.append(flag)
        elif data.draw(st.booleans(), label="--flag=value"):
            inv.argv.append(f"{flag}={value}")
        else:
            inv.argv += [flag, value]
    return inv


def _names(line: str, flag: str) -> bool:
    bare = flag.lstrip("-")
    return bool(re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", line)) or f"`{bare}`" in line or f"`{flag}`" in line


def _internal_names(line: str) -> list[str]:
    """The backticked names in an error line that are not a flag (``--x``, ``--x/--y``), a positional
    argument's metavar or a command: a library parameter (``W``, ``KQ``, ``eta``, ``t_eval``, ...) leaked
    into what the user reads (issue 23)."""
    allowed = {m for m, _, _ in POSITIONAL.values()} | set(COMMANDS)
    return [t for t in re.findall(r"`([^`]+)`", line) if not t.startswith("--") and t not in allowed]


def _json_problems(text: str) -> list[str]:
    def no_constant(name):
        raise ValueError(f"{name} in JSON")

    try:
        obj = json.loads(text, parse_constant=no_constant)
    except ValueError as exc:
        return [f"--json output is not one strict JSON document ({str(exc)[:60]})"]
    problems = []

    def walk(o, path):
        if o is None and not NULL_OK.search(path):
            problems.append(f"null (a hidden NaN/inf?) at JSON {path}")
        elif isinstance(o, float) and not math.isfinite(o):
            problems.append(f"non-finite number at JSON {path}")
        elif isinstance(o, str) and NONFINITE_RE.search(o):
            problems.append(f"non-finite number in JSON text at {path}: {o[:80]!r}")
        elif isinstance(o, dict):
            for k, v in o.items():
                walk(v, f"{path}.{k}")
        elif isinstance(o, list):
            for v in o:
                walk(v, f"{path}[]")

    walk(obj, "")
    return problems


def _text_problems(text: str) -> list[str]:
    problems = []
    for line in text.splitlines():
        if NONFINITE_RE.search(line):
            problems.append(f"non-finite number in output: {line.strip()[:100]!r}")
        if "/" not in line and GLUED_RE.search(line):
            problems.append(f"numbers run together: {line.strip()[:100]!r}")
    return problems


def violations(inv: Invocation, out: Outcome) -> list[str]:
    """Every way the outcome breaks the contract (empty: it holds)."""
    command = COMMANDS[inv.command]
    if out.timeout:
        return [f"over the time budget (killed after {WALL_SECONDS:g} s)"]
    if out.signal is not None:
        return [f"killed by signal {out.signal}"]
    problems = []
    err_lines = [line for line in out.stderr.splitlines() if line.strip()]
    if TRACEBACK in out.stderr:
        problems.append("traceback: " + (err_lines[-1][:120] if err_lines else ""))
    elif "MemoryError" in out.stderr:
        problems.append("out of memory")
    if any(WARNING_RE.search(line) for line in err_lines):
        problems.append("Python warning on stderr")
    if out.code == 2:
        if len(err_lines) != 1:
            problems.append(f"exit 2 with {len(err_lines)} stderr lines")
        line = err_lines[-1] if err_lines else ""
        if any(_names(line, f) for f in inv.fuzzed) or any(tok in line for tok in inv.unknown):
            stray = _internal_names(line)
            if stray:
                problems.append(f"exit 2 also names internal parameters {stray}, not flags")
        elif any(_names(line, f) for f in command.options):
            problems.append("exit 2 blames a flag the invocation did not change")
        elif re.search(r"`[^`]+`", line):
            problems.append("exit 2 names an internal parameter, not the flag")
        else:
            problems.append("exit 2 names no flag")
        return problems
    if out.code != 0 and out.code not in command.documented_codes:
        problems.append(f"exit {out.code}, not documented in --help")
    if inv.reject:
        problems.append(f"bad input not rejected (exit {out.code}): {inv.reject[0]}")
    if inv.json and (out.code == 0 or out.stdout.strip()):
        problems += _json_problems(out.stdout)
    else:
        problems += _text_problems(out.stdout)
    return problems


def _describe(inv: Invocation, out: Outcome, problems: list[str]) -> str:
    err = " | ".join(line for line in out.stderr.splitlines() if line.strip())[-300:]
    return f"reduced-dynamics {' '.join(map(repr, inv.argv))}\n    exit {out.code}: {'; '.join(problems)}\n    stderr: {err}"


def _record(inv: Invocation, out: Outcome, problems: list[str], source: str) -> None:
    path = os.environ.get("RD_FUZZ_REPORT")
    if path:
        row = {
            "source": source,
            "command": inv.command,
            "argv": inv.argv,
            "code": out.code,
            "timeout": out.timeout,
            "seconds": round(out.seconds, 3),
            "maxrss_kb": out.maxrss_kb,
            "reject": inv.reject,
            "violations": problems,
            "stderr": out.stderr[-400:],
        }
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")


_TINY_SWEEP: list[Path] = []


def _tiny_sweep(root: Path) -> Path:
    """A finished one-point sweep folder, made once per process by the real command (``cli.main``, in this process:
    the fuzzed invocations only read it)."""
    if not _TINY_SWEEP:
        from reduced_dynamics.cli import main

        base = Path(tempfile.mkdtemp(dir=root))
        (base / "tiny.toml").write_text(TINY_SPEC)
        argv = ["sweep", str(base / "tiny.toml"), "--out", str(base / "tiny_sweep"), "--workers", "1", "--quiet"]
        assert main(argv) == 0, argv
        _TINY_SWEEP.append(base / "tiny_sweep")
    return _TINY_SWEEP[0]


def _example_dir(root: Path) -> str:
    tmp = tempfile.mkdtemp(dir=root)
    Path(tmp, "afile").write_text("not a folder\n")
    Path(tmp, "exists_dir").mkdir()
    Path(tmp, "tiny.toml").write_text(TINY_SPEC)
    Path(tmp, "bad.toml").write_text('command = "run"\n[fixed]\nbogus-option = 1\n')
    np.savez(Path(tmp, "model.npz"), **{k: np.array(v) for k, v in TINY_MODEL.items()})
    np.savez(Path(tmp, "other.npz"), weights=np.ones(3))
    np.save(Path(tmp, "sigma5.npy"), np.diag([0.5, 1.0, 2.0, 3.0, 4.0]))
    with open(Path(tmp, "huge_header.npy"), "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "<f8", "fortran_order": False, "shape": (100_000, 100_000)})
        f.write(b"\0" * 64)
    os.mkfifo(Path(tmp, "fifo.npy"))
    np.save(Path(tmp, "object.npy"), np.array([[1, None]] * 5, dtype=object), allow_pickle=True)
    Path(tmp, "truncated.npy").write_bytes(Path(tmp, "sigma5.npy").read_bytes()[:150])
    shutil.copytree(_tiny_sweep(root), Path(tmp, "tiny_sweep"))
    os.mkfifo(Path(tmp, "fifo.npz"))
    _npz_with_huge_member(Path(tmp, "huge_member.npz"), {k: np.array(v) for k, v in TINY_MODEL.items()}, "KQ")
    Path(tmp, "truncated.npz").write_bytes(Path(tmp, "model.npz").read_bytes()[:200])
    return tmp


def _npz_with_huge_member(path: Path, arrays: dict, huge: str) -> None:
    """An .npz whose member ``huge`` is a 64-byte .npy whose header declares 100000 x 100000 float64."""
    import io
    import zipfile

    with zipfile.ZipFile(path, "w") as zf:
        for k, v in arrays.items():
            buf = io.BytesIO()
            if k == huge:
                header = {"descr": "<f8", "fortran_order": False, "shape": (100_000, 100_000)}
                np.lib.format.write_array_header_1_0(buf, header)
                buf.write(b"\0" * 64)
            else:
                np.save(buf, v)
            zf.writestr(k + ".npy", buf.getvalue())


_CHECKPOINT: list[Path] = []

#: hostile checkpoints for `train --resume` (issue 23): name -> how the valid one is changed
RESUME_KINDS = (
    "theta_1e200",
    "theta_nan",
    "m_nan",
    "v_inf",
    "m_1e200_v_0",
    "rng_seed",
    "rng_garbage",
    "step_negative",
    "theta_short",
    "truncated",
    "text",
    "fifo",
    "npy",
    "huge_member",
)


def _checkpoint(root: Path) -> Path:
    """A run folder of `train` (the BASE options), made once per session by the real command."""
    if not _CHECKPOINT:
        base = Path(tempfile.mkdtemp(dir=root)) / "run"
        cmd = [sys.executable, "-m", "reduced_dynamics", "train", *[a for kv in BASE["train"] for a in kv if a]]
        subprocess.run([*cmd, "--out", str(base), "--quiet"], env=_env(), check=True, capture_output=True, timeout=120)
        _CHECKPOINT.append(base)
    return _CHECKPOINT[0]


def _resume_dir(root: Path, tmp: str, kind: str) -> str:
    """``{tmp}/ck_<kind>``: the run folder with its checkpoint made hostile (and no final files)."""
    src = _checkpoint(root)
    d = Path(tmp, f"ck_{kind}")
    d.mkdir()
    ck = d / "checkpoint.npz"
    with np.load(src / "checkpoint.npz") as z:
        arrays = {k: z[k] for k in z.files}
    state = json.loads(str(arrays["rng_state"]))
    changes = {
        "theta_1e200": {"theta": np.full_like(arrays["theta"], 1e200)},
        "theta_nan": {"theta": arrays["theta"] * np.nan},
        "m_nan": {"m": arrays["m"] * np.nan},
        "v_inf": {"v": arrays["v"] + np.inf},
        "m_1e200_v_0": {"m": np.full_like(arrays["m"], 1e200), "v": np.zeros_like(arrays["v"])},
        "rng_seed": {"rng_state": np.array(json.dumps({**state, "bit_generator": "seed"}))},
        "rng_garbage": {"rng_state": np.array(json.dumps({**state, "state": "garbage"}))},
        "step_negative": {"step": np.array(-5)},
        "theta_short": {k: arrays[k][:2] for k in ("theta", "m", "v")},
    }
    if kind in changes:
        np.savez(ck, **{**arrays, **changes[kind]})
    elif kind == "truncated":
        ck.write_bytes((src / "checkpoint.npz").read_bytes()[:300])
    elif kind == "text":
        ck.write_text("not a checkpoint\n")
    elif kind == "fifo":
        os.mkfifo(ck)
    elif kind == "npy":
        np.save(d / "x.npy", np.ones(3))
        os.replace(d / "x.npy", ck)
    elif kind == "huge_member":
        _npz_with_huge_member(ck, arrays, "theta")
    return str(d)


# ----------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_cli_fuzz(name, runner, tmp_path):
    """Generated argument lists for one command: every invocation keeps the contract (module docstring)."""
    command = COMMANDS[name]
    failures, tried = [], []

    @settings(
        max_examples=EXAMPLES.get(name, DEFAULT_EXAMPLES),
        deadline=None,
        phases=[Phase.explicit, Phase.generate],  # every example is run and judged; nothing to shrink
        suppress_health_check=list(HealthCheck),
    )
    @given(data=st.data())
    def one(data):
        tmp = _example_dir(tmp_path)
        inv = draw_invocation(data, command, tmp)
        out = runner(inv.argv[:], tmp)
        problems = violations(inv, out)
        tried.append(inv)
        _record(inv, out, problems, "fuzz")
        if problems:
            failures.append(_describe(inv, out, problems))

    one()
    assert len(tried) >= min(10, EXAMPLES.get(name, DEFAULT_EXAMPLES))
    assert not failures, f"{len(failures)} of {len(tried)} `{name}` invocations break the contract:\n" + "\n".join(
        failures
    )


def _with(command: str, options: list[str], *, json_output: bool = True) -> list[str]:
    """``command`` + its cheap base options that ``options`` does not set (+ ``--json``) + ``options``
    (+ the valid value of its positional argument, if it has one)."""
    given_flags = {o.split("=")[0] for o in options if o.startswith("--")}
    given_flags |= {new for old, new in ALIASES.get(command, {}).items() if old in given_flags}
    argv = [command]
    for flag, value in BASE.get(command, []):
        if flag in COMMANDS[command].options and flag not in given_flags:
            argv += [flag] if value is None else [flag, value]
    if json_output and "--json" in COMMANDS[command].options:
        argv.append("--json")
    tail = [POSITIONAL[command][1]] if command in POSITIONAL else []
    return argv + options + tail


#: the command-line inputs of issue 23 (hardening, second round), same format as _issue_cases
ISSUE23_CASES = [
    *[
        (f"{c}-sigma-{kind}", c, ["--sigma", f"{{tmp}}/{kind}.npy"], "reject", True)
        for c in ("run", "risk", "train")
        for kind in ("huge_header", "fifo", "object", "truncated")
    ],
    ("run-sigma-valid", "run", ["--sigma", "{tmp}/sigma5.npy"], "ok", True),
    ("run-tasks-d-100000", "run", ["--tasks", "1-4,3-6", "--d", "100000"], "reject", True),
    ("single-head-d-1000", "single-head", ["--d", "1000"], "ok", True),
    ("single-head-sigma2-1e12", "single-head", ["--sigma2", "1e12"], "ok", True),
    ("run-sigma-eigs-1e12", "run", ["--sigma-eigs", "1e12,1,1,1,1"], "contract", True),
    ("risk-affine-activation-c-1e6", "risk", ["--activation", "affine", "--activation-c", "1e6"], "contract", True),
    ("risk-tasks-sigma2-1e12", "risk", ["--d", "6", "--tasks", "1-4,3-6", "--sigma2", "1e12"], "contract", True),
    ("risk-sigma-sigma2-0", "risk", ["--sigma-eigs", "1,2,3,4,5", "--sigma2", "0"], "ok", True),
    *[
        (f"train-resume-{kind}", "train", ["--out", f"{{tmp}}/ck_{kind}", "--resume", "--steps", "6"], "reject", True)
        for kind in RESUME_KINDS
    ],
    # a finished run (no step left): the huge parameters were first used by the final report ("`KQ` must ...")
    ("train-resume-theta_1e200-finished", "train", ["--out", "{tmp}/ck_theta_1e200", "--resume"], "reject", True),
    *[
        (f"analyze-{kind}", "analyze", ["{tmp}/" + kind], "reject", True)
        for kind in ("fifo.npz", "huge_member.npz", "truncated.npz", "other.npz", "afile")
    ],
    ("train-64-tasks", "train", ["--d", "64", "--heads", "1", "--tasks", ",".join(map(str, range(1, 65)))], "ok", True),
]


def _issue_cases():
    """The inputs of issue 9: (id, command, options, expectation, JSON output).

    "reject": exit 2 naming one of ``options``' flags; "ok": exit 0 with finite output;
    "contract": either (or a documented exit status), by the module's contract.
    """
    cases = [
        ("portrait-t-end-1e308", "portrait", ["--t-end", "1e308"], "contract", True),
        ("run-t-end-1e308", "run", ["--t-end", "1e308"], "contract", True),
        ("train-lr-1e308", "train", ["--lr", "1e308"], "contract", True),
        ("run-rtol-2.5", "run", ["--rtol", "2.5"], "contract", True),
        ("run-atol-2.5", "run", ["--atol", "2.5"], "contract", True),
        ("run-rtol-1e308", "run", ["--rtol", "1e308"], "contract", True),
        ("risk-mu-1e308", "risk", ["--mu", "1e308"], "contract", True),
        ("risk-omega-mu-1e308", "risk", ["--omega", "0.1,-0.1", "--mu", "1e308,-1e308"], "contract", True),
        ("run-omega0-empty-item", "run", ["--omega0", "0.1,,-0.1", "--mu0", "1,-1"], "reject", True),
        ("check-only-empty", "check", ["--only", ""], "reject", True),
        ("run-duplicate-d", "run", ["--d", "5", "--d", "6"], "reject", True),
        ("risk-readme-lists", "risk", ["--omega", "0.1,-0.1", "--mu", "4.4,-4.4"], "ok", True),
        ("run-zero-state", "run", ["--omega0", "0,0", "--mu0", "0,0"], "ok", True),
        ("check-L-1", "check", ["--L", "1", "--only", "approximation,optimality"], "contract", True),
        ("risk-sigma2-1e4-text", "risk", ["--sigma2", "1e4"], "contract", False),
        ("risk-sigma2-1e4-json", "risk", ["--sigma2", "1e4"], "contract", True),
        # 0.2: one run path for every model, its flag table, the old spellings
        ("run-old-n-eval", "run", ["--n-eval", "16"], "ok", True),
        ("run-n-eval-and-n-times", "run", ["--n-eval", "16", "--n-times", "16"], "reject", True),
        ("train-old-n-eval", "train", ["--n-eval", "64"], "ok", True),
        ("train-n-eval-and-eval-prompts", "train", ["--n-eval", "64", "--eval-prompts", "64"], "reject", True),
        ("run-sigma-with-tasks", "run", ["--d", "6", "--tasks", "1-4,3-6", "--sigma-eigs", "1,2,3,4,5,6"], "ok", True),
        ("run-tasks-omega0", "run", ["--d", "6", "--tasks", "1-4,3-6", "--omega0", "0.1,-0.1"], "reject", True),
        ("run-tasks-budget-5", "run", ["--d", "6", "--tasks", "1-4,3-6", "--budget", "5"], "contract", True),
        ("run-exact-sigma", "run", ["--objective", "exact", "--sigma-eigs", "1,2,3,4,5"], "reject", True),
        ("run-exact-budget-5", "run", ["--objective", "exact", "--budget", "5"], "contract", True),
        ("run-corrected", "run", ["--objective", "corrected"], "ok", True),
        ("run-affine-json", "run", ["--activation", "affine"], "ok", True),
        ("run-affine-text", "run", ["--activation", "affine"], "ok", False),
        ("run-n-init-any-method", "run", ["--n-init", "2", "--method", "BDF"], "ok", True),
        ("run-batch-radau-one-start", "run", ["--method", "batch-Radau"], "reject", True),
        (
            "risk-sigma-with-tasks",
            "risk",
            ["--d", "6", "--tasks", "1-4,3-6", "--sigma-eigs", "1,2,3,4,5,6"],
            "reject",
            True,
        ),
        (
            "train-sigma-with-tasks",
            "train",
            ["--d", "6", "--tasks", "1-4,3-6", "--sigma-eigs", "1,2,3,4,5,6"],
            "reject",
            True,
        ),
    ]
    cases += ISSUE23_CASES
    for name, command in sorted(COMMANDS.items()):
        if "--sigma2" in command.options:
            cases.append((f"{name}-sigma2-1e308", name, ["--sigma2", "1e308"], "reject", True))
        if "--out" in command.options:
            cases.append((f"{name}-out-empty", name, ["--out", ""], "reject", True))
        if "--init-scale" in command.options:
            cases.append((f"{name}-init-scale-1e308", name, ["--init-scale", "1e308"], "contract", True))
    return cases


ISSUE_CASES = _issue_cases()


@pytest.mark.parametrize(
    ("command", "options", "expect", "json_output"), [c[1:] for c in ISSUE_CASES], ids=[c[0] for c in ISSUE_CASES]
)
def test_issue_inputs(command, options, expect, json_output, runner, tmp_path):
    """The inputs issue 9 reports as misbehaving keep the contract; the README's lists and the saddle run."""
    tmp = _example_dir(tmp_path)
    for o in options:
        if "{tmp}/ck_" in o:
            _resume_dir(tmp_path, tmp, o.split("/ck_", 1)[1])
    argv = [a.format(tmp=tmp) for a in _with(command, options, json_output=json_output)]
    if command == "analyze" and options and options[0].startswith("{tmp}/"):  # the FILE under test, not the valid one
        argv = [a for a in argv if a != POSITIONAL["analyze"][1].format(tmp=tmp)]
    fuzzed = {o.split("=")[0] for o in options if o.startswith("--")}
    if command in POSITIONAL and options and not options[0].startswith("--"):
        fuzzed.add(POSITIONAL[command][0])  # the positional argument under test (`FILE`)
    inv = Invocation(command, argv, fuzzed=fuzzed, json="--json" in argv)
    if expect == "reject":
        inv.reject.append("issue 9: this input must be rejected")
    out = runner(argv, tmp)
    problems = violations(inv, out)
    if expect == "ok" and out.code != 0:
        problems.append("must succeed (exit 0)")
    _record(inv, out, problems, "issue")
    assert not problems, _describe(inv, out, problems)


def test_forkserver_matches_fresh_interpreter(tmp_path):
    """The fork server gives the same exit status, stderr and numbers as ``python -m reduced_dynamics``."""
    forked, fresh = Runner(), Runner(fresh=True)
    try:
        for argv in (["run", "--d", "0"], ["risk", "--prompts", "64", "--seed", "3", "--json"]):
            a, b = forked(argv, _example_dir(tmp_path)), fresh(argv, _example_dir(tmp_path))
            assert (a.code, a.timeout, a.signal) == (b.code, b.timeout, b.signal), argv
            if a.code == 2:
                assert a.stderr == b.stderr
            else:
                assert json.loads(a.stdout)["estimators"] == json.loads(b.stdout)["estimators"]
    finally:
        forked.close()


@pytest.mark.parametrize(
    ("line", "ok"),
    [
        ("reduced-dynamics train: error: `--resume`: 'c.npz' holds parameters that are not finite", True),
        ("reduced-dynamics run: error: `--sigma/--sigma-eigs` with `--tasks`: `run` integrates every model", True),
        ("reduced-dynamics train: error: `--resume` `KQ` must contain only finite values (no NaN/inf)", False),
        ("reduced-dynamics run: error: `--sigma-eigs` makes `--omega0` or `W` too large", False),
        ("reduced-dynamics single-head: error: `--d`: the minimum is at the edge of `bracket`", False),
    ],
)
def test_contract_refuses_internal_names_beside_the_flag(line, ok):
    """The judge itself: an exit-2 line that names the flag but also a library parameter breaks the contract."""
    flag = line.split("`")[1].split("/")[0]
    inv = Invocation(command="run", fuzzed={flag})
    out = Outcome(code=2, signal=None, timeout=False, seconds=0.0, maxrss_kb=0, stdout="", stderr=line + "\n")
    problems = violations(inv, out)
    assert (problems == []) is ok, problems
