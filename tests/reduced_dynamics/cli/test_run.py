"""`reduced-dynamics run`: JSON contract, files written, bad input → one line on stderr, exit 2."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from reduced_dynamics.cli import main
from reduced_dynamics.dynamics.manifold import eta_star
from reduced_dynamics.models._heads import initial_state
from reduced_dynamics.setting import Setting

REQUIRED = {
    "omega",
    "mu",
    "loss",
    "eta_eff",
    "eta_star",
    "gamma",
    "sum_mu",
    "status",
    "success",
    "message",
    "stage_times",
}


def test_json_contract(capsys, tmp_path):
    rc = main(["run", "--t-end", "1e3", "--json", "--out", str(tmp_path)])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert REQUIRED <= set(out)
    assert set(out["stage_times"]) == {"sign_matching", "zero_sum", "homogeneous"}
    assert len(out["omega"]) == len(out["mu"]) == 2
    assert out["eta_star"] == pytest.approx(eta_star(Setting(d=5, L=40, sigma2=0.1)), rel=1e-15)
    assert out["eta_eff"] == pytest.approx(np.dot(out["omega"], out["mu"]), rel=1e-12)
    assert out["success"] is True and out["status"] == 0
    files = out["files"]
    traj = np.load(files["trajectory"])
    assert traj["omega"].shape[1] == 2 and traj["t"][-1] == pytest.approx(1e3)
    with open(files["portrait"], "rb") as fh:
        assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
    assert json.load(open(files["summary"]))["omega"] == out["omega"]


def test_text_summary_and_user_init(capsys):
    rc = main(["run", "--heads", "3", "--omega0", "0.01,-0.02,0.03", "--mu0", "0.02,0.01,-0.01", "--t-end", "100"])
    text = capsys.readouterr().out
    assert rc == 0 and "H=3" in text and "stage times" in text and "η*" in text


@pytest.mark.parametrize(
    "args,param",
    [
        (["--d", "0"], "`--d`"),
        (["--L", "-3"], "`--L`"),
        (["--heads", "0"], "`--heads`"),
        (["--sigma2", "-1"], "`--sigma2`"),
        (["--sigma2", "nan"], "`--sigma2`"),
        (["--t-end", "0"], "`--t-end`"),
        # subnormal: the solvers' first step would be subnormal (formerly a misleading status 2, "left the domain")
        (["--t-end", "1e-310"], "`--t-end` must be a finite number in [2.22507e-308, 1e+12]"),
        (["--init-scale", "0"], "`--init-scale`"),
        (["--method", "Euler"], "`--method`"),
        (["--omega0", "0.1,0.2"], "`--omega0` and `--mu0`"),
        (["--omega0", "0.1,0.2", "--mu0", "0.1"], "`--omega0` and `--mu0`"),
        (["--omega0", "0.1,nan", "--mu0", "0.1,0.2"], "`--omega0`"),
    ],
)
def test_bad_input_exit_2(capsys, args, param):
    rc = main(["run", *args])
    err = capsys.readouterr().err
    assert rc == 2
    assert param in err and len(err.strip().splitlines()) == 1


def test_subprocess_bad_input_no_traceback():
    proc = subprocess.run([sys.executable, "-m", "reduced_dynamics", "run", "--d", "0"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "`--d` must be a positive integer" in proc.stderr


def test_unwritable_out_exit_2(capsys, tmp_path):
    """An --out folder that cannot be created (a regular file is in the way) is one line on stderr, exit 2."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    rc = main(["run", "--t-end", "10", "--no-plot", "--out", str(blocker / "sub")])
    err = capsys.readouterr().err
    assert rc == 2 and "`--out` cannot be created" in err and len(err.strip().splitlines()) == 1


# ---------------------------------------------------------------- issue 10: run --n-init N (one batch)
@pytest.mark.parametrize("n_init", [3, 48])  # 3: LSODA one after the other; 48: the batched Radau
def test_n_init_reports_start_and_stop_states_as_n_by_h_arrays(capsys, n_init):
    """`run --n-init N --seed S` integrates the starts of `run --seed S+i`: omega0/mu0/omega/mu are N × H, each
    start is that of the single run, and its stop state agrees with the single run's final state to 1e-8."""
    rc = main(["run", "--n-init", str(n_init), "--seed", "2", "--t-end", "100", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    for key in ("omega0", "mu0", "omega", "mu"):
        assert np.array(out[key]).shape == (n_init, 2)
    assert len(out["status"]) == len(out["message"]) == n_init and out["seeds"][0] == 2
    for i in (0, n_init - 1):
        assert main(["run", "--seed", str(2 + i), "--t-end", "100", "--json"]) == 0
        single = json.loads(capsys.readouterr().out)
        np.testing.assert_array_equal(out["omega0"][i], initial_state(2, scale=0.01, seed=2 + i)[0])
        assert single["status"] == out["status"][i]
        np.testing.assert_allclose(out["omega"][i], single["omega"], atol=1e-8, rtol=0)
        np.testing.assert_allclose(out["mu"][i], single["mu"], atol=1e-8, rtol=0)


@pytest.mark.parametrize(
    "args,flag",
    [
        (["--n-init", "0"], "`--n-init`"),
        (["--n-init", "10001"], "`--n-init`"),
        (["--n-init", "2", "--method", "Euler"], "`--method`"),
        (["--method", "batch-Radau"], "`--method`"),  # one start is not a batch
        (["--n-init", "2", "--omega0", "0.1,-0.1", "--mu0", "1,-1"], "`--n-init`"),
        (["--n-init", "2", "--init", "symmetric"], "`--n-init`"),
        (["--n-init", "2", "--init-scale", "20"], "`--init-scale`"),
    ],
)
def test_n_init_bad_input_is_one_line_exit_2(capsys, args, flag):
    assert main(["run", *args, "--t-end", "10"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0]
    assert "`y0`" not in err[0]  # the library's parameter name is not a flag


def test_batch_radau_of_one_start_names_n_init(capsys):
    assert main(["run", "--method", "batch-Radau", "--t-end", "10"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "`--method`" in err[0] and "`--n-init`" in err[0]


def test_n_init_takes_any_method_of_the_engine(capsys):
    """`--method` with `--n-init` (refused before 0.2: the batch picked its own integrator) is now any method of
    the engine: the starts are integrated one after the other with it, each exactly as the single run would."""
    rc = main(["run", "--n-init", "2", "--seed", "2", "--method", "BDF", "--t-end", "100", "--json", "--quiet"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["method"] == out["config"]["method"] == "BDF"
    assert out["rtol"] == 1e-8 and out["atol"] == 1e-11  # the engine's defaults for BDF
    for i in range(2):
        assert main(["run", "--seed", str(2 + i), "--method", "BDF", "--t-end", "100", "--json", "--quiet"]) == 0
        single = json.loads(capsys.readouterr().out)
        assert single["method"] == "BDF" and single["status"] == out["status"][i]
        np.testing.assert_allclose(out["omega"][i], single["omega"], atol=1e-12, rtol=0)
        np.testing.assert_allclose(out["mu"][i], single["mu"], atol=1e-12, rtol=0)
    # and the batched Radau can be asked for below the 48 starts from which it is the default
    assert main(["run", "--n-init", "3", "--method", "batch-Radau", "--t-end", "100", "--json", "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["method"] == "batch-Radau"


# ---------------------------------------------------------------- 0.2: --objective, --n-times, --budget
@pytest.mark.parametrize(
    "objective, t_end, n_times, method",
    [("corrected", 10.0, 50, "Radau"), ("exact", 0.05, 4, "BDF")],  # the exact risk: ~0.04 s per gradient
)
def test_objective_runs_the_model_of_that_objective(capsys, objective, t_end, n_times, method):
    """`run --objective corrected|exact` integrates the flow of that objective (its default method), the same
    end state as integrate() on reduced_model(objective=...) from the start of seed 0 with the CLI's options."""
    from reduced_dynamics import integrate, reduced_model

    argv = ["run", "--objective", objective, "--t-end", str(t_end), "--n-times", str(n_times), "--json", "--quiet"]
    rc = main(argv)
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["success"] is True and out["status"] == 0
    assert out["model"] == out["objective"] == out["config"]["objective"] == objective
    assert out["method"] == method and out["t"] == pytest.approx(t_end)
    model = reduced_model(Setting(), n_heads=2, objective=objective)
    flow = integrate(model, model.state(*initial_state(2, scale=0.01, seed=0)), t_end=t_end, n_times=n_times)
    np.testing.assert_allclose(out["omega"], flow.omega[-1], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(out["mu"], flow.mu[-1], rtol=1e-12, atol=1e-15)
    assert out["loss"] == pytest.approx(float(flow.loss[-1]), rel=1e-12)
    assert out["eta_star"] == pytest.approx(model.limit()["eta_star"], rel=1e-15)


def test_objective_is_a_choice(capsys):
    assert main(["run", "--objective", "bogus"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--objective" in err[0]


def test_n_times_and_its_old_spelling(capsys, tmp_path):
    """`--n-times N` sets the output times; the old `--n-eval N` gives the same run (and the same file name) with one
    note after the result, none under --quiet; both together are refused naming the old spelling."""
    base = ["run", "--t-end", "10", "--no-plot", "--json"]
    assert main([*base, "--n-times", "16", "--out", str(tmp_path / "new")]) == 0
    cap = capsys.readouterr()
    new = json.loads(cap.out)
    assert cap.err == "" and new["config"]["n_times"] == 16
    assert np.load(new["files"]["trajectory"])["t"].shape == (16,)
    assert main([*base, "--n-eval", "16", "--out", str(tmp_path / "old")]) == 0
    cap = capsys.readouterr()
    old = json.loads(cap.out)
    notes = cap.err.strip().splitlines()
    assert len(notes) == 1 and notes[0].startswith("reduced-dynamics run: note: ") and "`--n-times`" in notes[0]
    assert old["omega"] == new["omega"] and old["config"]["n_times"] == 16
    assert Path(old["files"]["trajectory"]).name == Path(new["files"]["trajectory"]).name
    assert main([*base, "--n-eval", "16", "--quiet"]) == 0
    assert capsys.readouterr().err == ""
    assert main([*base, "--n-eval", "16", "--n-times", "16"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "`--n-eval`" in err[0] and "`--n-times`" in err[0]
    assert main([*base, "--n-eval", "0"]) == 2  # an error names the spelling typed, and no note is written
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "`--n-eval`" in err[0] and "note" not in err[0]


def test_budget_exhausted_is_status_minus_2_exit_1(capsys):
    rc = main(["run", "--budget", "50", "--json", "--quiet"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 1 and out["success"] is False and out["status"] == -2
    assert out["nfev"] <= 50 + 10 and out["config"]["budget"] == 50 and out["t"] < 1e5
    # what to try next is named by the flags the user types, never by the library's parameters
    assert "`--t-end`" in out["message"] and "`--rtol`/`--atol`" in out["message"] and "`--budget`" in out["message"]
    assert "`t_end`" not in out["message"] and "`budget`" not in out["message"]
    assert main(["run", "--budget", "50", "--quiet"]) == 1
    text = capsys.readouterr().out
    assert "a larger `--budget`" in text and "`budget`" not in text
    for bad in ("0", "100000001"):
        assert main(["run", "--budget", bad]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "`--budget`" in err[0]


@pytest.mark.parametrize(
    "objective, extension, flag",
    [
        ("exact", ["--sigma-eigs", "1,2,3,4,5"], "--sigma-eigs"),
        ("exact", ["--d", "6", "--tasks", "1-4,3-6"], "--tasks"),
        ("corrected", ["--activation", "tanh"], "--activation"),
    ],
)
def test_objective_other_than_approx_refuses_the_extensions(capsys, objective, extension, flag):
    """corrected and exact are derived for the isotropic softmax single-task model only: one line naming
    `--objective` and the flag of the extension."""
    assert main(["run", "--objective", objective, *extension, "--t-end", "1"]) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and len(lines) == 1 and "`--objective`" in lines[0] and flag in lines[0]


@pytest.mark.parametrize(
    "model, extra, method",
    [
        ("corrected", ["--objective", "corrected", "--t-end", "10"], "Radau"),
        ("exact", ["--objective", "exact", "--t-end", "0.02", "--n-times", "4"], "BDF"),
        (
            "precond_multitask",
            ["--d", "6", "--tasks", "1-4,3-6", "--sigma-eigs", "1,2,3,4,5,6", "--t-end", "10"],
            "LSODA",
        ),
    ],
)
def test_n_init_works_for_every_model(capsys, model, extra, method):
    """`--n-init` is no longer isotropic-only (the other models' runs are in their own test files): one status per
    start, the first row the single run of --seed."""
    assert main(["run", *extra, "--n-init", "2", "--json", "--quiet"]) == 0
    batch = json.loads(capsys.readouterr().out)
    assert batch["model"] == model and batch["method"] == method and batch["status"] == [0, 0]
    assert main(["run", *extra, "--json", "--quiet"]) == 0
    single = json.loads(capsys.readouterr().out)
    part = "B" if model == "precond_multitask" else "omega"
    np.testing.assert_allclose(batch[part][0], single[part], rtol=1e-12, atol=1e-15)
