"""Issue 9, the command line: output names, no silent overwrite, progress/--quiet, one-line errors naming the flag."""

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reduced_dynamics.cli import COMMANDS, _common, build_parser, main
from reduced_dynamics.io import MAX_STEM, output_stem

SETTING_COMMANDS = ["run", "risk", "check", "train", "portrait"]
TINY_TRAIN = ["--d", "2", "--L", "4", "--batch", "8", "--eval-prompts", "64"]
TINY_PORTRAIT = ["--resolution", "10", "--n-traj", "1", "--t-end", "5", "--heads", "2"]


def _one_line(capsys, rc, expected_rc=2):
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == expected_rc, err
    assert len(lines) == 1 and "Traceback" not in err and "Warning" not in err, err
    return lines[0]


# ----------------------------------------------------------------------------- 1. output names

FIELD_VALUES = {
    "H": st.integers(1, 10**6),
    "d": st.integers(1, 10**5),
    "sigma2": st.floats(0, 1e12, allow_nan=False),
    "seed": st.integers(0, 2**63),
    "init": st.sampled_from(["random", "symmetric", "given"]),
    "omega0": st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=1, max_size=40),
}
configs = st.fixed_dictionaries(FIELD_VALUES)


@given(configs, configs)
def test_output_stem_is_injective(a, b):
    """Two configurations share a stem only if they are equal (floats compared as their exact bits)."""
    same = {k: (json.dumps(v) if isinstance(v, list) else repr(v)) for k, v in a.items()} == {
        k: (json.dumps(v) if isinstance(v, list) else repr(v)) for k, v in b.items()
    }
    assert (output_stem("flow", a) == output_stem("flow", b)) == same
    assert len(output_stem("flow", a)) <= MAX_STEM


@given(configs)
def test_output_stem_one_field_changed_changes_the_name(a):
    for key, value in a.items():
        other = dict(a)
        other[key] = value + 1 if isinstance(value, int) else (value * 2 + 1 if isinstance(value, float) else None)
        if other[key] is None:
            other[key] = "x" + value if isinstance(value, str) else [*value, 0.5]
        assert output_stem("flow", other) != output_stem("flow", a), key


def test_output_stem_text_and_bad_values():
    assert output_stem("flow", {"H": 2, "d": 5, "L": 40, "sigma2": 0.1, "seed": 0}) == "flow_H2_d5_L40_sigma2-0.1_seed0"
    assert output_stem("x", {"sigma2": 0.1}) != output_stem("x", {"sigma2": 0.5})
    with pytest.raises(ValueError, match="`sigma2`"):
        output_stem("x", {"sigma2": float("nan")})
    with pytest.raises(ValueError, match="`init`"):
        output_stem("x", {"init": "a_b"})


def test_portrait_sigma2_and_seed_write_different_files(tmp_path, capsys, monkeypatch):
    """σ² = 0.1 and 0.5 (and any seed) used to write the same portrait_two_head_d5_L40_s0.png.

    Also: progress lines on stderr by default, none with --quiet, and the files are PNGs (two runs only: portraits
    are the slow command; this is the suite's test that `portrait` writes its files).
    """
    monkeypatch.setattr(_common, "PROGRESS_DELAY", 0.0)
    assert main(["portrait", *TINY_PORTRAIT, "--out", str(tmp_path), "--sigma2", "0.1"]) == 0
    err = capsys.readouterr().err
    assert err and all(line.startswith("reduced-dynamics portrait: ") for line in err.splitlines())
    assert main(["portrait", *TINY_PORTRAIT, "--out", str(tmp_path), "--sigma2", "0.5", "--quiet"]) == 0
    assert capsys.readouterr().err == ""
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    assert len(pngs) == 4 and len(list(tmp_path.glob("*.npz"))) == 4
    assert all(p.stat().st_size > 1000 and p.read_bytes()[:4] == b"\x89PNG" for p in tmp_path.glob("*.png"))
    assert sum("sigma2-0.1_" in p for p in pngs) == 2 and sum("sigma2-0.5_" in p for p in pngs) == 2
    # the seed (and every other option) is in both names
    from reduced_dynamics.cli._setting import setting_from_args
    from reduced_dynamics.cli.portrait import output_names

    names = set()
    for extra in ([], ["--seed", "1"], ["--n-traj", "2"], ["--t-end", "6"], ["--init-scale", "0.2"]):
        args = build_parser().parse_args(["portrait", *extra])
        names.add(output_names(args, setting_from_args(args), (-0.9, 0.9), (-4.0, 4.0)))
    assert len(names) == 5


def test_run_seeds_and_sigma2_write_different_files(tmp_path, capsys):
    base = ["run", "--t-end", "1", "--n-times", "4", "--no-plot", "--quiet", "--out", str(tmp_path)]
    for extra in (["--seed", "0"], ["--seed", "1"], ["--sigma2", "0.5"]):
        assert main([*base, *extra]) == 0
    capsys.readouterr()
    assert len(list(tmp_path.glob("flow_*.npz"))) == 3 and len(list(tmp_path.glob("flow_*.json"))) == 3


def test_risk_out_names_the_configuration(tmp_path, capsys):
    base = ["risk", "--prompts", "50", "--quiet", "--json", "--out", str(tmp_path)]
    assert main([*base, "--sigma2", "0.1"]) == 0
    assert main([*base, "--sigma2", "0.5"]) == 0
    capsys.readouterr()
    names = sorted(p.name for p in tmp_path.glob("risk_*.json"))
    assert len(names) == 2 and "sigma2-0.1_" in names[0] and "sigma2-0.5_" in names[1]


# ----------------------------------------------------------------------------- 2. train --out refuses to overwrite


def test_train_refuses_existing_run_without_resume_or_force(tmp_path, capsys):
    out = str(tmp_path / "run")
    assert main(["train", "--steps", "20", *TINY_TRAIN, "--quiet", "--out", out]) == 0
    before = (tmp_path / "run" / "checkpoint.npz").read_bytes()
    capsys.readouterr()
    line = _one_line(capsys, main(["train", "--steps", "10", *TINY_TRAIN, "--out", out]))
    assert "`--resume`" in line and "`--force`" in line and "`--out`" in line
    assert (tmp_path / "run" / "checkpoint.npz").read_bytes() == before  # untouched
    assert json.loads((tmp_path / "run" / "final.json").read_text())["steps"] == 20
    # --force replaces it, --resume continues it, both together are refused
    assert main(["train", "--steps", "10", *TINY_TRAIN, "--quiet", "--force", "--out", out]) == 0
    assert json.loads((tmp_path / "run" / "final.json").read_text())["steps"] == 10
    assert main(["train", "--steps", "30", *TINY_TRAIN, "--quiet", "--resume", "--out", out]) == 0
    assert json.loads((tmp_path / "run" / "final.json").read_text())["steps"] == 30
    capsys.readouterr()
    line = _one_line(capsys, main(["train", "--steps", "40", *TINY_TRAIN, "--resume", "--force", "--out", out]))
    assert "`--resume`" in line and "`--force`" in line


# ----------------------------------------------------------------------------- 3. progress and --quiet

PROGRESS_CASES = {
    "risk": ["risk", "--prompts", "50"],
    "train": ["train", "--steps", "5", *TINY_TRAIN],
    "check": ["check", "--quick", "--only", "approximation"],
    "figures": ["figures", "--quick", "--only", "risk_vs_L", "--out", "{tmp}"],  # the cheapest figure (0.7 s)
    "run": ["run", "--t-end", "1", "--n-times", "4"],
}


@pytest.mark.parametrize("command", list(PROGRESS_CASES))
def test_progress_on_stderr_and_quiet_silences_it(command, tmp_path, capsys, monkeypatch):
    """With the first-line delay at 0 s every long-running command writes progress lines; --quiet writes none."""
    monkeypatch.setattr(_common, "PROGRESS_DELAY", 0.0)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in PROGRESS_CASES[command]]
    assert main(argv) == 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines and all(line.startswith(f"reduced-dynamics {command}: ") for line in lines), err
    assert main([*argv, "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_progress_waits_for_the_delay(capsys):
    """A command faster than PROGRESS_DELAY prints no progress (so quick failures stay one line)."""
    p = _common.Progress("risk")
    p.stage("work")
    p.close()
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_has_quiet(command):
    positional = {"sweep": ["spec.toml"], "sweep-table": ["sweep_dir"], "analyze": ["model.pt"]}.get(command, [])
    assert build_parser().parse_args([command, *positional, "--quiet"]).quiet is True


# ----------------------------------------------------------------------------- 4. one line, exit 2, the flag named

BAD = [
    *[(c, ["--sigma2", "1e308"], "--sigma2") for c in SETTING_COMMANDS],
    *[(c, ["--d", "5", "--d", "6"], "--d") for c in SETTING_COMMANDS],
    ("run", ["--rtol", "2.5"], "--rtol"),
    ("run", ["--rtol", "1e308"], "--rtol"),
    ("run", ["--atol", "2.5"], "--atol"),
    ("run", ["--t-end", "1e308"], "--t-end"),
    ("run", ["--t-end", "1e13"], "--t-end"),  # the engine's bound is 1e12 (was 1e9; see test_run_t_end_bound)
    ("portrait", ["--t-end", "1e308"], "--t-end"),
    ("run", ["--init-scale", "1e308"], "--init-scale"),
    ("run", ["--init-scale", "0"], "--init-scale"),
    ("run", ["--heads", "0"], "--heads"),
    ("run", ["--n-times", "0"], "--n-times"),
    ("run", ["--n-eval", "0"], "--n-eval"),  # the old spelling: the error names the flag typed
    ("run", ["--budget", "0"], "--budget"),
    ("run", ["--method", "Euler"], "--method"),
    ("run", ["--objective", "exact", "--sigma-eigs", "1,2,3,4,5"], "--objective"),
    ("run", ["--d", "6", "--tasks", "1-4,3-6", "--omega0", "0.1,-0.1"], "--omega0"),
    ("run", ["--omega0", "0.1,,-0.1", "--mu0", "1,-1"], "--omega0"),
    ("run", ["--out", ""], "--out"),
    ("train", ["--lr", "1e308"], "--lr"),
    ("train", ["--heads", "0"], "--heads"),
    ("train", ["--eval-prompts", "1"], "--eval-prompts"),
    ("train", ["--n-eval", "1"], "--n-eval"),
    ("train", ["--d", "6", "--tasks", "1-4,3-6", "--sigma-eigs", "1,2,3,4,5,6"], "--tasks"),
    ("risk", ["--d", "6", "--tasks", "1-4,3-6", "--sigma-eigs", "1,2,3,4,5,6"], "--tasks"),
    ("train", ["--checkpoint-every", "0", "--steps", "1"], "--checkpoint-every"),
    ("train", ["--out", ""], "--out"),
    ("train", ["--lr", "1e-3", "--lr", "1e-2"], "--lr"),
    ("risk", ["--mu", "1e308", "--omega", "1", "--prompts", "50"], "--mu"),
    ("risk", ["--prompts", "1"], "--prompts"),
    ("risk", ["--omega", "0.1,,0.2", "--mu", "1,2"], "--omega"),
    ("risk", ["--omega", "0.1", "--omega", "0.2", "--mu", "1"], "--omega"),
    ("risk", ["--out", ""], "--out"),
    ("check", ["--only", ""], "--only"),
    ("check", ["--only", "approximation,,optimality"], "--only"),
    ("check", ["--out", ""], "--out"),
    ("portrait", ["--heads", "1"], "--heads"),
    ("portrait", ["--m-range", "1,1"], "--m-range"),
    ("portrait", ["--gamma-range", "0.1,,0.2"], "--gamma-range"),
    ("portrait", ["--out", ""], "--out"),
    ("figures", ["--only", ""], "--only"),
    ("figures", ["--out", ""], "--out"),
    ("figures", ["--seed", "1", "--seed", "2"], "--seed"),
    ("figures", ["--list", "--only", "bayes_ratio"], "--only"),
    ("figures", ["--list", "--out", "/proc/x"], "--out"),
    ("check", ["--quick", "--only", "approximation", "--out", "/proc/x/y.json"], "--out"),
]


@pytest.mark.parametrize("command, argv, flag", BAD, ids=[f"{c}{' '.join(a)}" for c, a, _ in BAD])
def test_bad_input_one_line_names_the_flag(command, argv, flag, capsys):
    line = _one_line(capsys, main([command, *argv]))
    assert line.startswith(f"reduced-dynamics {command}: ")
    assert f"`{flag}`" in line or f"argument {flag}" in line, line
    internal = re.findall(
        r"`(n_heads|scale|t_end|n_eval|n_times|budget|y0|n_prompts|init_scale|prompts|lr|sigma2|only|out|objective"
        r"|setting\.\w+)`",
        line,
    )
    assert not internal, line


def test_run_t_end_bound():
    """`--t-end` is bounded by the engine's 1e12 (the cost is bounded by --budget); 1e10, refused before 0.2
    (bound 1e9), now runs."""
    from reduced_dynamics.flow import T_END_MAX

    assert T_END_MAX == 1e12
    assert main(["run", "--t-end", "1e10", "--n-times", "8", "--quiet"]) == 0


@pytest.mark.parametrize(
    "model", [[], ["--activation", "tanh"], ["--d", "6", "--tasks", "1-4,3-6"], ["--sigma-eigs", "1,2,3,4,5"]]
)
def test_run_tiny_t_end_is_a_run_not_a_bad_omega0(model, capsys):
    """A tiny --t-end ran LSODA into NaN states reported as a success, and the one error line blamed `--omega0`,
    which the user had not given; the engine now hands that interval to Radau: a normal run. A subnormal one
    (below 2.2e-308, down to the least float 5e-324) ended as status 2, "left the domain", which it had not:
    it is bad input now, one line naming `--t-end` and its range."""
    assert main(["run", "--t-end", "1e-200", "--n-times", "8", "--json", "--quiet", *model]) == 0
    out, err = capsys.readouterr()
    assert err == "" and json.loads(out)["status"] == 0 and json.loads(out)["t"] == 1e-200
    assert main(["run", "--t-end", "2.2250738585072014e-308", "--n-times", "8", "--json", "--quiet", *model]) == 0
    out, err = capsys.readouterr()
    assert err == "" and json.loads(out)["status"] == 0
    for tiny in ("1e-310", "5e-324"):  # subnormal, and the least float
        rc = main(["run", "--t-end", tiny, "--n-times", "8", "--json", "--quiet", *model])
        out, err = capsys.readouterr()
        assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
        assert "`--t-end` must be a finite number in [2.22507e-308, 1e+12]" in err


def test_rename_params_maps_every_library_name_to_a_flag():
    """Each command's map sends its dests and the library's own names to the flags the user types."""
    sub = next(a for a in build_parser()._actions if hasattr(a, "choices") and a.choices)
    flags = {name: p.get_default("_flags") for name, p in sub.choices.items()}
    assert flags["run"]["n_heads"] == "--heads" and flags["run"]["scale"] == "--init-scale"
    assert flags["run"]["t_end"] == "--t-end" and flags["run"]["n_eval"] == "--n-eval"
    assert flags["run"]["n_times"] == "--n-times" and flags["run"]["budget"] == "--budget"
    assert flags["run"]["setting.Sigma"] == "--sigma/--sigma-eigs" and flags["run"]["objective"] == "--objective"
    assert flags["train"]["eval_prompts"] == "--eval-prompts" and flags["train"]["n_eval"] == "--n-eval"
    assert flags["train"]["n_prompts"] == "--eval-prompts" and flags["risk"]["n_prompts"] == "--prompts"
    assert flags["train"]["parameterisation"] == "--param"
    for name, table in flags.items():
        parser = sub.choices[name]
        for action in parser._actions:
            longs = [s for s in action.option_strings if s.startswith("--")]
            if longs and longs[0] != "--help":
                assert table[action.dest] == longs[0], (name, action.dest)
    assert _common.rename_params("`t_end` and `x`", flags["run"]) == "`--t-end` and `x`"


def test_list_syntax_is_the_same_everywhere(capsys):
    """The README's `risk --omega 0.1,-0.1 --mu 4.4,-4.4` works, as does the space-separated form."""
    outs = []
    for lists in (["--omega", "0.1,-0.1", "--mu", "4.4,-4.4"], ["--omega", "0.1", "-0.1", "--mu", "4.4", "-4.4"]):
        assert main(["risk", "--prompts", "50", "--quiet", "--json", *lists]) == 0
        outs.append(json.loads(capsys.readouterr().out))
    assert outs[0]["config"]["omega"] == outs[1]["config"]["omega"] == [0.1, -0.1]
    assert outs[0]["estimators"] == outs[1]["estimators"]
    assert main(["run", "--omega0=-0.1,0.1", "--mu0", "-1,1", "--t-end", "1", "--n-times", "4", "--quiet"]) == 0
    assert main(["run", "--omega0", "-0.1,0.1", "--mu0", "-1,1", "--t-end", "1", "--n-times", "4", "--quiet"]) == 0


@pytest.mark.parametrize("command", list(COMMANDS))
def test_help_documents_every_exit_code(command):
    sub = next(a for a in build_parser()._actions if hasattr(a, "choices") and a.choices)
    text = sub.choices[command].format_help()
    table = text.split("exit status:")[1]
    codes = {int(c) for c in re.findall(r"^\s+(\d+)\s", table, re.MULTILINE)}
    assert {0, 2, 130} <= codes
    assert (3 in codes) == (command == "train")
    # exit 1: a result that failed (a flow that did not finish, a failing check, a failed sweep point)
    assert (1 in codes) == (command in ("run", "check", "sweep"))


def test_numerical_warnings_never_leak(capsys):
    """A huge --init-scale used to print numpy's RuntimeWarning and the overflow line."""
    line = _one_line(capsys, main(["run", "--init-scale", "1e308"]))
    assert "overflow" in line and "`--init-scale`" in line


# ----------------------------------------------------------------------------- 5. output formatting


def test_risk_table_columns_never_run_together(capsys):
    assert main(["risk", "--sigma2", "1e4", "--prompts", "200", "--quiet"]) == 0
    rows = capsys.readouterr().out.splitlines()[2:]
    assert rows[0].split() == ["estimator", "risk", "stderr", "exact", "(mc-exact)/se"]
    for row in rows[1:]:
        cells = row.split()
        assert len(cells) == 5, row
        for cell in cells[1:]:
            assert cell == "-" or re.fullmatch(r"-?\d+(\.\d+)?(e[-+]\d+)?", cell), row


def test_train_prints_a_metric_whose_direction_is_clear(capsys):
    assert main(["train", "--steps", "5", *TINY_TRAIN, "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "sum_mu_ratio=" in out and "zero_sum=" not in out


# ----------------------------------------------------------------------------- issue 23: sizes decided before work

import contextlib  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import signal  # noqa: E402

import numpy as np  # noqa: E402


class Hung(BaseException):
    """Raised in a block still running after its time (a BaseException: no `except OSError` can swallow it)."""


@contextlib.contextmanager
def bounded(*, seconds: float = 20.0, extra_bytes: int = 1024**3):
    """The block may allocate ``extra_bytes`` more address space and run ``seconds``: a hang or an allocation
    decided too late fails the test (Hung / MemoryError) instead of hanging or swapping the machine."""

    def on_alarm(signum, frame):
        raise Hung(f"still running after {seconds} s")

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    resource.setrlimit(resource.RLIMIT_AS, (vm + extra_bytes, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _npy_header_only(path, shape, descr="<f8"):
    """A 200-byte file whose .npy header declares ``shape`` (no data behind it)."""
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": descr, "fortran_order": False, "shape": shape})
        f.write(b"\0" * 64)


def _sigma_file(kind, tmp_path):
    path = tmp_path / f"{kind}.npy"
    if kind == "huge_header":
        _npy_header_only(path, (100_000, 100_000))
    elif kind == "huge_header_right_shape":  # d = 5 declared, but as 5 x 5 of a 2**40-byte dtype: refused too
        _npy_header_only(path, (5, 5), descr="|V1099511627776")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "object":
        np.save(path, np.array([[1, None]] * 2, dtype=object), allow_pickle=True)
    elif kind == "truncated":
        np.save(path, np.eye(5))
        path.write_bytes(path.read_bytes()[:150])
    elif kind == "text":
        path.write_text("root:x:0:0:root:/root:/bin/bash\n")
    return path


SIGMA_FILES = ["huge_header", "huge_header_right_shape", "fifo", "folder", "object", "truncated", "text"]
SIGMA_COMMANDS = {
    "run": ["run", "--t-end", "1", "--n-times", "4"],
    "risk": ["risk", "--prompts", "64"],
    "train": ["train", "--steps", "2", "--batch", "8", "--eval-prompts", "64"],
}


@pytest.mark.parametrize("kind", SIGMA_FILES)
@pytest.mark.parametrize("command", list(SIGMA_COMMANDS))
def test_sigma_file_is_checked_before_it_is_read(command, kind, tmp_path, capsys):
    """`--sigma F` whose 200 bytes declare 100000 x 100000 was a 74.5 GiB allocation traceback, a named pipe hung:
    the file type and the .npy header are checked first, one line naming `--sigma`, exit 2."""
    path = _sigma_file(kind, tmp_path)
    with bounded(seconds=20, extra_bytes=1024**3):
        rc = main([*SIGMA_COMMANDS[command], "--sigma", str(path), "--quiet"])
    line = _one_line(capsys, rc)
    assert "`--sigma`" in line and str(path) in line, line


def test_sigma_file_that_is_valid_still_loads(tmp_path, capsys):
    """The checked reader gives the same matrix as numpy.load, also for a Fortran-ordered and an integer file."""
    from reduced_dynamics.io import read_npy

    A = np.arange(25.0).reshape(5, 5)
    for name, arr in {"c": A, "f": np.asfortranarray(A), "i": A.astype(np.int32)}.items():
        np.save(tmp_path / f"{name}.npy", arr)
        got = read_npy(tmp_path / f"{name}.npy", name="x", shape=(5, 5))
        assert got.dtype == np.float64 and np.array_equal(got, np.load(tmp_path / f"{name}.npy"))
    S = np.diag([0.5, 1.0, 2.0, 3.0, 4.0])
    np.save(tmp_path / "S.npy", S)
    assert main(["run", "--sigma", str(tmp_path / "S.npy"), "--t-end", "1", "--n-times", "4", "--json", "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["Sigma"] == S.tolist()


def test_run_tasks_with_a_huge_d_is_refused_before_allocating(capsys):
    """`run --tasks 1-4,3-6 --d 100000` was a 298 GiB allocation traceback (LSODA's dense work array): one line
    naming `--d` (and `--method`, the explicit methods being the way out), within a second and 512 MiB."""
    with bounded(seconds=10, extra_bytes=512 * 2**20):
        rc = main(["run", "--tasks", "1-4,3-6", "--d", "100000", "--quiet"])
    line = _one_line(capsys, rc)
    assert "`--d`" in line and "`--method`" in line and "GiB" in line, line


@pytest.mark.parametrize("extra", [["--d", "1000"], ["--sigma2", "1e12"]], ids=["d1000", "sigma2-1e12"])
def test_single_head_answers_where_it_raised(extra, capsys):
    """`single-head --d 1000` / `--sigma2 1e12` were RuntimeError tracebacks ("the minimum is at the lower/upper
    edge of `bracket`"); now a finite optimum, exit 0 (its correctness: tests/reduced_dynamics/exact)."""
    assert main(["single-head", *extra, "--json", "--quiet"]) == 0
    out, err = capsys.readouterr()
    r = json.loads(out)
    assert err == "" and all(np.isfinite(r[k]) for k in ("omega", "mu", "risk")) and r["omega"] > 0


# ----------------------------------------------------------------------------- issue 23: overwrites without --force

CHECK_CHEAP = ["check", "--quick", "--only", "approximation", "--quiet", "--json"]


@pytest.mark.parametrize(
    "content",
    [b"precious\n", b'{"passed": true}\n', b"[1, 2]\n", b'{"made_by": {"command": "check"}}\n', b"\xff\xfe"],
    ids=["text", "json-no-owner", "json-list", "json-other-config", "binary"],
)
def test_check_out_never_replaces_a_file_it_did_not_make(content, tmp_path, capsys):
    """`check --out precious.txt` replaced any existing file with check JSON: the file is left as it was, one line
    names `--out` and `--force`; with --force it is replaced."""
    target = tmp_path / "precious.txt"
    target.write_bytes(content)
    line = _one_line(capsys, main([*CHECK_CHEAP, "--out", str(target)]))
    assert "`--out`" in line and "`--force`" in line and target.read_bytes() == content
    assert main([*CHECK_CHEAP, "--out", str(target), "--force"]) == 0
    capsys.readouterr()
    assert json.loads(target.read_text())["made_by"]["command"] == "check"


def test_check_out_replaces_its_own_file_of_the_same_options_only(tmp_path, capsys):
    target = tmp_path / "c.json"
    assert main([*CHECK_CHEAP, "--out", str(target)]) == 0
    assert main([*CHECK_CHEAP, "--out", str(target)]) == 0  # same options: its own file, replaced
    first = target.read_bytes()
    capsys.readouterr()
    other = ["check", "--quick", "--only", "optimality", "--quiet", "--json", "--out", str(target)]
    line = _one_line(capsys, main(other))  # another configuration's output: refused
    assert "another configuration" in line and target.read_bytes() == first


def test_check_out_refuses_a_fifo_without_blocking(tmp_path, capsys):
    target = tmp_path / "pipe.json"
    os.mkfifo(target)
    with bounded(seconds=10):
        line = _one_line(capsys, main([*CHECK_CHEAP, "--out", str(target)]))
    assert "`--out`" in line and "not a regular file" in line


def _poison(path, kind):
    """Rewrite the checkpoint ``path`` with one hostile field (everything else as the run wrote it)."""
    z = dict(np.load(path))
    if kind == "nan_m":
        z["m"] = z["m"] * np.nan
    elif kind == "nan_v":
        z["v"] = z["v"] + np.nan
    elif kind == "negative_v":
        z["v"] = -np.abs(z["v"]) - 1.0
    elif kind == "nan_theta":
        z["theta"] = z["theta"] * np.nan
    elif kind == "inf_theta":
        z["theta"] = z["theta"] + np.inf
    elif kind == "huge_theta":
        z["theta"] = np.full_like(z["theta"], 1e200)
    elif kind == "rng_seed":  # used to call np.random.seed()
        z["rng_state"] = np.array('{"bit_generator": "seed"}')
    elif kind == "short_m":
        z["m"] = z["m"][:-1]
    with open(path, "wb") as f:
        np.savez(f, **z)


POISONS = ["nan_m", "nan_v", "negative_v", "nan_theta", "inf_theta", "huge_theta", "rng_seed", "short_m"]
TRAIN_RUNS = {
    "attention": ["train", *TINY_TRAIN],
    "multitask": ["train", "--d", "4", "--L", "4", "--tasks", "1-2,2-4", "--batch", "8", "--eval-prompts", "64"],
}
CHECKPOINT = {"attention": "checkpoint.npz", "multitask": "checkpoint_multitask.npz"}


@pytest.mark.parametrize("kind", POISONS)
@pytest.mark.parametrize("trainer", list(TRAIN_RUNS))
def test_train_resume_refuses_a_checkpoint_no_run_writes(trainer, kind, tmp_path, capsys):
    """`train --resume` from a checkpoint with NaN Adam moments exited 3 ("try a smaller --lr") and wrote NaN
    parameters over the finite ones; NaN or 1e200 parameters exited 3 ("diverged"); a generator named "seed"
    called np.random.seed(). Each is bad input now: one line naming `--resume`, exit 2, the file untouched,
    numpy's global generator untouched."""
    out = tmp_path / "run"
    argv = [*TRAIN_RUNS[trainer], "--quiet", "--out", str(out)]
    assert main([*argv, "--steps", "4", "--checkpoint-every", "2"]) == 0
    ckpt = out / CHECKPOINT[trainer]
    _poison(ckpt, kind)
    before = ckpt.read_bytes()
    capsys.readouterr()
    global_state = np.random.get_state()[1].copy()  # noqa: NPY002 - the legacy global state is what is checked
    line = _one_line(capsys, main([*argv, "--steps", "8", "--resume"]))
    assert "`--resume`" in line and "Traceback" not in line, line
    assert ckpt.read_bytes() == before
    assert np.array_equal(np.random.get_state()[1], global_state)  # noqa: NPY002


def test_a_run_never_checkpoints_a_non_finite_state(tmp_path, monkeypatch):
    """A live run whose update turns the parameters NaN (here injected at step 3) keeps the last finite
    checkpoint (step 2, written with checkpoint_every=1) instead of writing NaN over it; the run reports the
    divergence (status 2) and the checkpoint still resumes."""
    from reduced_dynamics import Setting
    from reduced_dynamics.model import training

    real = training._adam_update  # the trainer's step (adam_update is its checked public form)
    calls = {"n": 0}

    def poisoned(theta, grad, m, v, t, **kw):
        real(theta, grad, m, v, t, **kw)
        calls["n"] += 1
        if calls["n"] == 3:
            theta[0] = np.nan

    monkeypatch.setattr(training, "_adam_update", poisoned)
    config = training.TrainConfig(setting=Setting(d=2, L=4), seed=0, n_heads=2, steps=6, batch=8)
    res = training.train(config, out=tmp_path, checkpoint_every=1)
    assert res.status == 2 and res.step == 3
    ck = training.load_checkpoint(tmp_path / "checkpoint.npz")
    assert ck.step == 2 and np.all(np.isfinite(ck.theta)) and np.all(np.isfinite(ck.m))


# ----------------------------------------------------------------------------- issue 23: errors naming the wrong thing


def test_a_large_sigma_is_named_when_the_start_overflows(capsys):
    """`run --sigma-eigs 1e12,1,1,1,1` (a valid covariance) blamed "`--omega0` or `W` too large": the exponent of
    the preconditioned model grows with Σ², so the line names `--sigma/--sigma-eigs` (with its largest eigenvalue)
    next to `--init-scale`, never a flag the user did not give or the library's `W`."""
    line = _one_line(capsys, main(["run", "--sigma-eigs", "1e12,1,1,1,1", "--quiet"]))
    assert "`--sigma/--sigma-eigs`" in line and "1e+12" in line and "`--init-scale`" in line, line
    assert "`--omega0`" not in line and "`W`" not in line and "(lower `--init-scale`)" not in line, line


def test_train_with_64_tasks_names_no_phantom_heads(capsys):
    """`train` with 64 tasks failed with "`--heads` must be an integer in [1, 64], got 65" (the per-task debiased-GD
    reference asked the limit predictor for N + 1 heads): it trains and reports finite per-task risks."""
    tasks = ",".join(str(i) for i in range(1, 65))
    argv = [
        "train",
        "--d",
        "64",
        "--heads",
        "1",
        "--tasks",
        tasks,
        "--steps",
        "1",
        "--batch",
        "4",
        "--eval-prompts",
        "64",
    ]
    assert main([*argv, "--json", "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    risks = out["risk"]["debiased_gd_S"]["risk"]
    assert len(risks) == 64 and all(np.isfinite(r) for r in risks)


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--t-end", "1", "--n-times", "4", "--no-plot"],
        ["risk", "--prompts", "64"],
        ["single-head", "--L", "20"],
    ],
    ids=["run", "risk", "single-head"],
)
def test_a_full_disk_names_out(argv, tmp_path, capsys, monkeypatch):
    """A full disk (ENOSPC from the atomic write) was one line naming no flag: it names `--out` and the file."""
    import errno

    import reduced_dynamics.io as rio

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(rio, "atomic_write_bytes", full)
    line = _one_line(capsys, main([*argv, "--quiet", "--out", str(tmp_path)]))
    assert "`--out`" in line and "No space left on device" in line and str(tmp_path) in line, line


@pytest.mark.parametrize("address", ["http://localhost:1", "tcp://", "tcp://h ost:1", "localhost:8786"])
def test_sweep_scheduler_address_is_checked_first(address, tmp_path, capsys, monkeypatch):
    """`--scheduler http://…` ended in dask's own "unknown address scheme" line naming no flag, after every point
    was validated: the address is checked before the spec is read, one line naming `--scheduler`."""
    import reduced_dynamics.sweep.runner as runner

    monkeypatch.setattr(runner, "plan_sweep", lambda *a, **k: pytest.fail("the points were validated first"))
    spec = tmp_path / "s.toml"
    spec.write_text('command = "run"\n[fixed]\nt-end = 1\n')
    line = _one_line(capsys, main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--scheduler", address]))
    assert "`--scheduler`" in line and "tcp" in line, line


# ----------------------------------------------------------------------------- issue 23: interrupts


class _SignalsInFinaliser:
    """Sends SIGINT to this process from its finaliser: Python runs the handler there and cannot propagate it."""

    def __del__(self):
        signal.raise_signal(signal.SIGINT)


@pytest.mark.parametrize("then", ["returns", "reports_progress"])
def test_a_ctrl_c_swallowed_in_a_finaliser_still_ends_with_130(then, capsys, monkeypatch):
    """SIGINT about 4 s into `figures --quick` was sometimes swallowed ("Exception ignored in ... KeyboardInterrupt",
    then exit 0): it arrived while Python ran a finaliser. Reproduced exactly: the command's code drops an object
    whose __del__ raises SIGINT; the command then returns 0 (or reaches its next progress line). Either way: exit
    130, one line, no "Exception ignored"."""
    import reduced_dynamics.cli.figures as figures

    def command(args):
        obj = _SignalsInFinaliser()
        del obj  # the KeyboardInterrupt is raised inside __del__ and cannot leave it
        if then == "reports_progress":
            _common.Progress("figures", quiet=True).stage("next figure")
            pytest.fail("the progress line let the command go on")
        return 0

    monkeypatch.setattr(figures, "main", command)
    # a shell's background job (`make test &`) starts with SIGINT ignored; the case under test is an interactive
    # run, where Python's default handler is installed: install it for this test and put the inherited one back
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _ctrl_c_case(capsys, monkeypatch)
    finally:
        signal.signal(signal.SIGINT, inherited)


def _ctrl_c_case(capsys, monkeypatch):
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    line = _one_line(capsys, main(["figures", "--list"]), expected_rc=130)
    assert line == "reduced-dynamics figures: interrupted"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
    monkeypatch.undo()
    assert main(["figures", "--list", "--json"]) == 0  # the record does not leak into the next command
