"""Fuzz suite of sweep specifications (issue 23): every key of the format, one hostile value at a time.

Each example is a small valid spec of one sweepable command (every command of
:data:`reduced_dynamics.sweep.commands.SWEEP_COMMANDS`, every parameter a sweep of it may set, read from its
parser) with ONE key given a hostile value: a wrong type (string, boolean, table, nested list, TOML date),
``nan``/``inf``, huge or negative numbers, an empty list, a ``range``/``linspace``/``logspace`` of 1e12 values,
a named pipe, a ``.npy`` whose header declares 100000 x 100000, a folder or ``/etc/passwd`` for a file key,
a name with control characters, or an unknown key, at each place a key can be (``[fixed]``, ``[axes]``, a
``[[zip]]`` group, ``seeds``, ``name``, ``command``, ``[quick]``, the top level).

The contract, for ``reduced-dynamics sweep SPEC --dry-run`` (a forked process, bounded in time and memory:
the fork server of the command-line fuzz suite) and for :func:`~reduced_dynamics.sweep.runner.plan_sweep`:

- exit 0 (``plan_sweep`` returns), or exit 2 with exactly one line on stderr that names the key at fault
  (as written in the spec, as its dest, or as its flag; the ``point (...)`` prefix does not count), and
  ``plan_sweep`` raises ``ValueError``/``TypeError`` naming it too;
- input that is certainly bad (non-finite numbers, wrong types for numeric keys, empty lists, grids beyond the
  10⁶ points, unknown keys, hostile files, names with control characters) must be refused;
- never a traceback, another exit status, over :data:`WALL_SECONDS` or :data:`MEM_BYTES`.

Deterministic (``derandomize``) and bounded (:data:`EXAMPLES`). ``RD_FUZZ_REPORT=path`` appends one JSON line
per spec (the spec, the outcome, the violations).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
import re
import signal
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from reduced_dynamics.sweep.commands import SWEEP_COMMANDS, _actions, parameters

#: specs tried (the whole file stays under about 30 s of CPU)
EXAMPLES = 150
#: wall-time limit of one dry run (the fork server's limit is the CLI suite's; this one is checked here)
WALL_SECONDS = 20.0
MEM_BYTES = 2 * 1024**3
#: largest resident size of one dry run (the fork server's imports included: about 300 MiB)
MAX_RSS_KB = 1024 * 1024
#: the keys of a spec (spec.py)
TOP_KEYS = ("command", "name", "seeds", "fixed", "axes", "zip", "quick", "description")


class Date:
    """A TOML date-time value (written bare)."""

    text = "1979-05-27T07:32:00Z"


class Raw:
    """A TOML value written as is (``nan``, ``inf``, ``-inf``)."""

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text


NAN, INF, NINF = Raw("nan"), Raw("inf"), Raw("-inf")


def toml_value(v) -> str:
    if isinstance(v, (Raw, Date)) or v is Date:
        return v.text
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a TOML basic string (\uXXXX escapes)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{toml_key(k)} = {toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(v)


def toml_key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k)


def to_toml(spec: dict) -> str:
    lines = []
    for k, v in spec.items():
        tables = k in ("fixed", "axes", "quick") and isinstance(v, dict)
        tables = tables or (k == "zip" and isinstance(v, list) and all(isinstance(g, dict) for g in v))
        if not tables:
            lines.append(f"{toml_key(k)} = {toml_value(v)}")
    for k in ("fixed", "axes", "quick"):
        if isinstance(spec.get(k), dict):
            lines.append(f"[{k}]")
            lines += [f"{toml_key(a)} = {toml_value(x)}" for a, x in spec[k].items()]
    if isinstance(spec.get("zip"), list) and all(isinstance(g, dict) for g in spec["zip"]):
        for group in spec["zip"]:
            lines.append("[[zip]]")
            lines += [f"{toml_key(a)} = {toml_value(x)}" for a, x in group.items()]
    return "\n".join(lines) + "\n"


def plain(v):
    """The Python value TOML reads for ``v`` (for plan_sweep)."""
    if v is NAN:
        return math.nan
    if v is INF:
        return math.inf
    if v is NINF:
        return -math.inf
    if v is Date or isinstance(v, Date):
        return datetime.datetime(1979, 5, 27, 7, 32, tzinfo=datetime.timezone.utc)
    if isinstance(v, list):
        return [plain(x) for x in v]
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    return v


# ----------------------------------------------------------------------------- the keys and their hostile values


def kind(command: str, dest: str) -> str:
    import argparse

    act = _actions(command)[dest]
    if isinstance(act, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        return "switch"
    if dest == "sigma":
        return "file"
    if act.type is int:
        return "int"
    if act.type is float:
        return "float"
    return "str"


def files(tmp: Path) -> dict:
    """Hostile files for a file key, made in the example folder."""
    out = {}
    os.mkfifo(tmp / "fifo.npy")
    out["fifo"] = str(tmp / "fifo.npy")
    with open(tmp / "huge_header.npy", "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "<f8", "fortran_order": False, "shape": (100_000, 100_000)})
        f.write(b"\0" * 64)
    out["huge_header"] = str(tmp / "huge_header.npy")
    (tmp / "adir").mkdir()
    out["dir"] = str(tmp / "adir")
    out["passwd"] = "/etc/passwd"
    np.save(tmp / "object.npy", np.array([[1, None]] * 5, dtype=object), allow_pickle=True)
    out["object"] = str(tmp / "object.npy")
    (tmp / "truncated.npy").write_bytes(b"\x93NUMPY\x01\x00v\x00{'descr': '<f8', 'fortran_order': False, 'shape'")
    out["truncated"] = str(tmp / "truncated.npy")
    out["missing"] = str(tmp / "missing.npy")
    return out


#: hostile scalar values: (value, certainly bad for a numeric key)
SCALARS = [
    (NAN, True),
    (INF, True),
    (NINF, True),
    ("abc", True),
    ("", True),
    ("1e3", False),  # a string where a number goes: the command parses it like the command line
    (True, True),
    (False, True),
    ({"a": 1}, True),
    ([[1, 2]], True),
    (Date, True),
    (1e308, False),
    (-1e308, False),
    (10**18, False),
    (9223372036854775807, False),
    (-9223372036854775808, False),
    (-1, False),
    (0, False),
    (-1e-320, False),
    (5e-324, False),
    (1e12, False),
    (10000, False),
    (1e-320, False),
    (1e300, False),
]
#: hostile strings for the options that take a name or a list (--tasks, --activation, --omega0, --only, ...)
STRINGS = [
    "nonexistent",
    "\x1b[2J",
    "1-1000000",
    "0.1,nan",
    "1e309",
    "-",
    "a\nb",
    "0.1,,-0.1",
    ",",
    "1e308,1e308",
    "inf",
]
#: hostile axis values (a whole axis): (value, certainly bad)
AXES = [
    ([], True),
    ({"range": [1, 1_000_000_000_000, 1]}, True),
    ({"linspace": [0.0, 1.0, 1_000_000_000_000]}, True),
    ({"logspace": [1e-3, 1.0, 1_000_000_000_000]}, True),
    ({"logspace": [-1.0, 1.0, 3]}, True),
    ({"range": [0, 10, 0]}, True),
    ({"range": [0.5, 10, 1]}, True),
    ({"linspace": [0, NAN, 3]}, True),
    ({"linspace": [0, 1, 0]}, True),
    ({"linspace": [0, 1, 2.5]}, True),
    ({"range": [1, 2]}, True),
    ({"range": "1,2,3"}, True),
    ({"bogus": [1, 2, 3]}, True),
    ({"range": [1, 5, 1], "linspace": [1, 2, 3]}, True),
    ([1, 1], True),
    ({}, True),
]
NAMES = ["a\nb", "a\tb", "\x1b[31mred", "../escape", ".hidden", " padded ", "", "a/b", "x" * 300, "nul\x00", 7, ["a"]]
SEEDS = [0, -1, [], [-1], [1, 1], [0.5], ["a"], True, 10**7, {"range": [0, 10**12, 1]}, NAN, {"a": 1}, 2**63 - 1]


@dataclasses.dataclass
class Case:
    command: str
    spec: dict
    key: str  # the key at fault, as the message must name it
    names: tuple  # the spellings that name it
    bad: bool  # certainly bad: must be refused
    where: str
    quick: bool = False  # run with --quick


def spellings(key: str) -> tuple:
    bare = key.split(".")[-1]
    forms = {key, bare, bare.replace("_", "-"), bare.replace("-", "_"), "--" + bare.replace("_", "-")}
    if any(ord(c) < 32 for c in key):  # a key of control characters can only be named escaped, on one line
        forms = {repr(f)[1:-1] for f in forms}
    return tuple(sorted(forms, key=len, reverse=True))


def names_key(line: str, names) -> bool:
    line = re.sub(r"^(reduced-dynamics sweep: error: )?point \([^)]*\): ", "", line.split(": error: ", 1)[-1])
    return any(re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", line) for n in names)


@st.composite
def cases(draw, tmp: Path):
    command = draw(st.sampled_from(sorted(SWEEP_COMMANDS)), label="command")
    params = sorted(parameters(command))
    where = draw(
        st.sampled_from(["fixed", "axes", "axis", "zip", "seeds", "name", "command", "unknown", "quick", "top"]),
        label="where",
    )
    spec: dict = {"command": command}
    hostile_files = files(tmp)
    if where in ("fixed", "axes", "zip", "axis"):
        dest = draw(st.sampled_from(params), label="key")
        key = draw(st.sampled_from([dest, dest.replace("_", "-")]), label="spelling")
        k = kind(command, dest)
        if where == "axis":  # a hostile axis: every one of AXES is refused
            value, bad = draw(st.sampled_from(AXES), label="axis")
            spec["axes"] = {key: value}
            return Case(command, spec, f"axes.{key}", spellings(key), bad, where)
        if k == "file":
            value, bad = draw(st.sampled_from(sorted(hostile_files.items())), label="file")[1], True
        else:
            value, bad = draw(st.sampled_from(SCALARS), label="value")
            if k == "switch":
                bad = not isinstance(value, bool)
            elif k == "str" and (isinstance(value, (str, int, float)) and not isinstance(value, bool)):
                bad = False  # a name or a list of the command's own syntax: the command decides
            if k == "str" and draw(st.booleans(), label="string"):
                value, bad = draw(st.sampled_from(STRINGS), label="str"), False
        if where == "fixed":
            spec["fixed"] = {key: value}
        elif where == "axes":
            default = _actions(command)[dest].default
            # after a valid value: the second point may reuse the first one's checks (the fast validation)
            first = [default] if default is not None and type(default) in (int, float, bool) else []
            spec["axes"] = {key: first + [value] if draw(st.booleans(), label="after valid") else [value]}
        else:
            spec["zip"] = [{key: [value]}]
        return Case(command, spec, f"{where}.{key}", spellings(key), bad, where)
    if where == "seeds":
        value = draw(st.sampled_from(SEEDS), label="seeds")
        spec["seeds"] = value
        ok = isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 10**6
        ok = ok and "seed" in parameters(command)
        return Case(command, spec, "seeds", ("seeds", "seed", "--seed"), not ok, where)
    if where == "name":
        value = draw(st.sampled_from(NAMES), label="name")
        spec["name"] = value
        return Case(command, spec, "name", ("name",), True, where)
    if where == "command":
        value = draw(st.sampled_from(["bogus", "", "figures", "sweep", 3, ["run"], True, "run\n"]), label="cmd")
        spec["command"] = value
        return Case(command, spec, "command", ("command",), True, where)
    if where == "unknown":
        place = draw(st.sampled_from(["top", "fixed", "axes", "zip", "quick"]), label="place")
        bogus = draw(
            st.sampled_from(["bogus", "t_end2", "D", "seed s", "out", "json", "force", "a\nb", "\x1b[2J", "t\rend"]),
            label="unknown",
        )
        if place == "top":
            spec[bogus] = 1
        elif place == "quick":
            spec["quick"] = {bogus: 1}
        elif place == "zip":
            spec["zip"] = [{bogus: [1]}]
        else:
            spec[place] = {bogus: [1] if place == "axes" else 1}
        return Case(command, spec, bogus, spellings(bogus), True, where)
    if where == "quick":
        value = draw(
            st.sampled_from(
                [1, "abc", [], {"fixed": 3}, {"axes": [1]}, {"zip": 3}, {"seeds": -1}, {"axes": {"bogus": [1]}}]
            ),
            label="quick",
        )
        spec["quick"] = value
        # every one is refused, with or without --quick (a broken [quick] is found before the full-size run too)
        case = Case(command, spec, "quick", ("[quick]", "quick", "fixed", "axes", "zip", "seeds", "bogus"), True, where)
        case.quick = draw(st.booleans(), label="--quick")
        return case
    # a top-level table given a scalar or a list; `description` is free text
    key = draw(st.sampled_from(["fixed", "axes", "zip", "description"]), label="top")
    value = draw(st.sampled_from([1, "abc", [1, 2], NAN, Date]), label="topvalue")
    spec[key] = value
    return Case(command, spec, key, (key,), key != "description", where)


# ----------------------------------------------------------------------------- the contract


def run_plan(spec: dict, quick: bool = False):
    """plan_sweep on the spec as Python values, bounded by an alarm: (kind of outcome, message)."""
    from reduced_dynamics.sweep.runner import plan_sweep

    def alarm(signum, frame):
        raise TimeoutError("plan_sweep over its time budget")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(int(WALL_SECONDS))
    try:
        plan_sweep(plain(spec), quick=quick)
        return "ok", ""
    except (ValueError, TypeError) as exc:
        return "refused", str(exc).splitlines()[0] if str(exc) else ""
    except Exception as exc:  # the contract is broken: no other exception
        return "crash", f"{type(exc).__name__}: {exc}"[:200]
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def violations(case: Case, out, plan) -> list[str]:
    problems = []
    if out.timeout:
        return [f"sweep --dry-run over {WALL_SECONDS:g} s"]
    if out.signal is not None:
        return [f"killed by signal {out.signal}"]
    lines = [s for s in out.stderr.splitlines() if s.strip() and not s.startswith("reduced-dynamics sweep: validated")]
    if "Traceback (most recent call last)" in out.stderr:
        problems.append("traceback: " + (lines[-1][:150] if lines else ""))
    if "\x1b" in out.stderr:
        problems.append("an escape sequence written to the terminal")
    if out.maxrss_kb > MAX_RSS_KB:
        problems.append(f"big memory: {out.maxrss_kb // 1024} MiB resident")
    if "MemoryError" in out.stderr:
        problems.append("out of memory")
    if out.code == 2:
        if len(lines) != 1:
            problems.append(f"exit 2 with {len(lines)} stderr lines")
        elif not names_key(lines[0], case.names):
            problems.append(f"exit 2 does not name {case.key}: {lines[0][:200]}")
    elif out.code == 0:
        if case.bad:
            problems.append("certainly bad input accepted (exit 0)")
    else:
        problems.append(f"exit {out.code}")
    kind_, msg = plan
    if kind_ == "crash":
        problems.append(f"plan_sweep raised {msg}")
    elif kind_ == "refused" and not names_key(msg, case.names):
        problems.append(f"plan_sweep's error does not name {case.key}: {msg[:200]}")
    elif kind_ == "ok" and case.bad:
        problems.append("plan_sweep accepted certainly bad input")
    if kind_ != "crash" and (kind_ == "ok") != (out.code == 0) and out.code in (0, 2):
        problems.append(f"plan_sweep ({kind_}) and the command line (exit {out.code}) disagree")
    return problems


def _record(case, toml_text, out, problems):
    path = os.environ.get("RD_FUZZ_REPORT")
    if path:
        row = {
            "source": "sweep-spec",
            "command": case.command,
            "key": case.key,
            "where": case.where,
            "spec": toml_text,
            "code": out.code,
            "timeout": out.timeout,
            "seconds": round(out.seconds, 3),
            "violations": problems,
            "stderr": out.stderr[-400:],
        }
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")


def test_sweep_spec_fuzz(runner, tmp_path_factory):  # runner: the fork server of tests/fuzz/conftest.py
    """Generated hostile specs: every `sweep --dry-run` and `plan_sweep` keeps the contract (module docstring)."""
    failures, tried = [], []

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(data=st.data())
    def one(data):
        tmp = tmp_path_factory.mktemp("spec")
        case = data.draw(cases(tmp))
        text = to_toml(case.spec)
        (tmp / "spec.toml").write_text(text, encoding="utf-8")
        argv = ["sweep", str(tmp / "spec.toml"), "--out", str(tmp / "out"), "--dry-run"] + ["--quick"] * case.quick
        out = runner(argv, str(tmp))
        cwd = os.getcwd()
        os.chdir(tmp)
        try:
            plan = run_plan(case.spec, case.quick)
        finally:
            os.chdir(cwd)
        problems = violations(case, out, plan)
        tried.append(case)
        _record(case, text, out, problems)
        if problems:
            err = " | ".join(s for s in out.stderr.splitlines() if s.strip())[-300:]
            failures.append(f"{case.where} {case.key}: {'; '.join(problems)}\n    spec: {text!r}\n    stderr: {err}")

    one()
    assert len(tried) >= EXAMPLES // 2
    assert not failures, f"{len(failures)} of {len(tried)} specs break the contract:\n" + "\n".join(failures)
