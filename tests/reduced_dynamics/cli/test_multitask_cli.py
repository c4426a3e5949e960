"""--tasks: parsing (one-line errors, exit 2), risk --tasks, run --tasks (the one run path; with Σ the composed
model), and train --tasks (the one train path: the multi-task model's trainer)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from reduced_dynamics import Setting
from reduced_dynamics.cli import main
from reduced_dynamics.cli._setting import parse_tasks
from reduced_dynamics.exact.expansion import dgd_risk


@pytest.mark.parametrize(
    "text, d, expected",
    [
        ("1-4,3-6", 6, ((0, 1, 2, 3), (2, 3, 4, 5))),
        ("1-6, 2-3", 6, ((0, 1, 2, 3, 4, 5), (1, 2))),
        ("1,2-3", 3, ((0,), (1, 2))),
    ],
)
def test_parse_tasks(text, d, expected):
    assert parse_tasks(text, d) == expected


@pytest.mark.parametrize(
    "tasks, message",
    [
        ("", "at least one task"),
        ("1-4,,3-6", "task 2 is empty"),
        ("4-2", "empty range"),
        ("0-3", "outside the features 1..6"),
        ("1-7", "outside the features 1..6"),
        ("1-4,1-4", "listed twice"),
        ("x", "must be a range"),
    ],
)
def test_bad_tasks_one_line_exit_2(capsys, tasks, message):
    rc = main(["risk", "--d", "6", "--tasks", tasks, "--prompts", "10"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "`--tasks`" in lines[0] and message in lines[0]


def test_risk_tasks_json_matches_closed_form(capsys):
    rc = main(["risk", "--d", "6", "--tasks", "1-4,3-6", "--prompts", "6000", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0
    doc = json.loads(out)
    est = doc["estimators"]
    assert set(est) == {"debiased_gd_S", "bayes_ridge_S", "limit_H1", "limit_H2", "zero"}
    exact = dgd_risk(1 / (1 + 1.1 / 40 * 4), Setting(d=4, L=40, sigma2=0.1))
    for n in range(2):
        e = est["debiased_gd_S"]
        assert e["exact"][n] == pytest.approx(exact, rel=1e-12)
        assert abs(e["risk"][n] - exact) < 4 * e["stderr"][n]
        # ordering of the theory: Bayes < per-task dGD < shared (H = 2) < one head
        assert est["bayes_ridge_S"]["risk"][n] < e["risk"][n] < est["limit_H2"]["risk"][n] < est["limit_H1"]["risk"][n]


def test_risk_tasks_refuses_omega(capsys):
    rc = main(["risk", "--d", "6", "--tasks", "1-4,3-6", "--omega", "0.1", "--mu", "1"])
    _, err = capsys.readouterr()
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "--tasks" in err


MT = ["--d", "6", "--tasks", "1-4,3-6"]
EIGS6 = "0.5,1,1.5,2,3,4"


def _one_error_line(capsys, rc):
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert rc == 2 and out == "" and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_run_multitask_json(capsys):
    """`run --tasks` goes through the one run path: H × d ω, H × N μ, the head roles, the per-task limit; the end
    state is the engine's flow of the multi-task model from its random start of seed 0 (the CLI's options)."""
    from reduced_dynamics import integrate, reduced_model

    rc = main(["run", *MT, "--heads", "3", "--t-end", "2e4", "--json", "--quiet"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["success"] is True and doc["model"] == "multitask" and doc["tasks"] == "1-4,3-6"
    assert np.shape(doc["omega"]) == (3, 6) and np.shape(doc["mu"]) == (3, 2) and len(doc["roles"]) == 3
    assert doc["limit"]["regime"] == "per-task"
    assert np.abs(np.array(doc["A"]) - np.array(doc["limit"]["A"])).max() < 0.02
    model = reduced_model(Setting.paper_multitask(), n_heads=3)
    flow = integrate(model, model.initial_state(seed=0, scale=0.01), t_end=2e4, n_times=400)
    np.testing.assert_array_equal(doc["omega0"], flow.omega[0])
    np.testing.assert_allclose(doc["omega"], flow.omega[-1], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(doc["mu"], flow.mu[-1], rtol=1e-12, atol=1e-15)
    assert doc["roles"] == list(flow.final.roles)


@pytest.mark.parametrize(
    "bad, flag",
    [
        (["--init", "symmetric"], "`--init`"),
        (["--omega0", "0.1"], "`--omega0`"),  # refused by the flag table: scalar-heads starts only
        (["--mu0", "1"], "`--mu0`"),
        (["--heads", "0"], "`--heads`"),
        (["--no-plot"], "`--no-plot`"),
        (["--objective", "corrected"], "`--objective`"),
        (["--budget", "0"], "`--budget`"),
    ],
)
def test_run_multitask_bad_flags(capsys, bad, flag):
    line = _one_error_line(capsys, main(["run", *MT, "--t-end", "10", *bad]))
    assert flag in line


def test_run_multitask_refuses_a_start_not_its_own(capsys):
    """A flag the multi-task model does not take is refused in one line that names it and the setting that chose
    the model, never silently ignored (the old `run --tasks` had its own checks)."""
    line = _one_error_line(capsys, main(["run", *MT, "--omega0", "0.1,-0.1", "--t-end", "10"]))
    assert "`--omega0` does not apply to the multitask model" in line and "--tasks" in line


def test_run_multitask_failure_exits_1(capsys):
    """A multi-task flow that does not end successfully exits 1, as every model's (the old multi-task run exit 3);
    the JSON still reports the status and where it stopped."""
    rc = main(["run", *MT, "--budget", "20", "--json", "--quiet"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 1 and doc["success"] is False and doc["status"] == -2 and doc["t"] < 1e5


def test_run_multitask_n_init(capsys):
    """`--n-init` now works for the multi-task model (refused before 0.2): N × H × d ω, one status per start."""
    rc = main(["run", *MT, "--n-init", "2", "--seed", "3", "--t-end", "100", "--json", "--quiet"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["success"] == [True, True] and doc["seeds"] == [3, 4]
    assert np.shape(doc["omega"]) == (2, 2, 6) and np.shape(doc["mu"]) == (2, 2, 2)


def test_run_sigma_with_tasks_is_the_composed_model(capsys):
    """`run --sigma-eigs ... --tasks ...`: the flow of the composed model (B_h per head, μ per task); the end
    state is the engine's from the model's random start of seed 0; the losses and distances are reported."""
    from reduced_dynamics import integrate, reduced_model
    from reduced_dynamics.precond.covariance import covariance_from_eigs

    rc = main(["run", *MT, "--sigma-eigs", EIGS6, "--t-end", "100", "--json", "--quiet"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["success"] is True and doc["model"] == "precond_multitask"
    assert np.shape(doc["B"]) == (2, 6, 6) and np.shape(doc["mu"]) == (2, 2)
    assert len(doc["loss_per_task"]) == len(doc["distance_limit"]) == 2
    assert doc["loss"] == pytest.approx(sum(doc["loss_per_task"]), rel=1e-12)
    assert all(a >= b for a, b in zip(doc["loss_per_task"], doc["limit"]["loss_per_task"]))  # the limit is the inf
    assert all(x > 0 for x in doc["distance_limit"])
    Sigma = covariance_from_eigs([0.5, 1, 1.5, 2, 3, 4], seed=0)
    np.testing.assert_allclose(doc["Sigma"], Sigma, rtol=1e-15)
    model = reduced_model(Setting.paper_multitask().replace(Sigma=Sigma), n_heads=2)
    flow = integrate(model, model.initial_state(seed=0, scale=0.01), t_end=100.0, n_times=400)
    np.testing.assert_allclose(doc["B"], flow.B[-1], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(doc["mu"], flow.mu[-1], rtol=1e-12, atol=1e-15)
    assert main(["run", *MT, "--sigma-eigs", EIGS6, "--t-end", "100", "--quiet"]) == 0  # the text summary
    text = capsys.readouterr().out
    assert "precond_multitask model" in text and "loss per task" in text and "A_n*" in text


@pytest.mark.parametrize("command", ["risk", "train"])
def test_risk_and_train_refuse_sigma_with_tasks(capsys, command):
    """Only `run` integrates the composed model: `risk` has no estimators and `train` no trainer for it yet."""
    line = _one_error_line(capsys, main([command, *MT, "--sigma-eigs", EIGS6, "--quiet"]))
    assert line.startswith(f"reduced-dynamics {command}: error: ")
    assert "`--sigma/--sigma-eigs`" in line and "`--tasks`" in line and "`run`" in line


def test_train_multitask_json_and_out(capsys, tmp_path):
    base = ["train", *MT, "--heads", "2", "--steps", "30", "--batch", "32", "--eval-prompts", "200", "--json"]
    assert main([*base, "--out", str(tmp_path), "--quiet"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert np.shape(doc["omega"]) == (2, 6) and np.shape(doc["mu"]) == (2, 2) and len(doc["roles"]) == 2
    assert set(doc["risk"]) == {"trained", "reduced", "limit", "debiased_gd_S", "bayes_ridge_S"}
    assert (tmp_path / "final_multitask.json").exists()
    # the file holds what was printed (but its own path)
    assert json.loads((tmp_path / "final_multitask.json").read_text())["omega"] == doc["omega"]
    line = _one_error_line(capsys, main([*base, "--out", str(tmp_path), "--quiet"]))
    assert "`--force`" in line and "final_multitask.json" in line
    line = _one_error_line(capsys, main([*base, "--out", str(tmp_path), "--force", "--optimizer", "sgd"]))
    assert "`--optimizer` must be adam with `--tasks`" in line


def test_train_multitask_reduced_risk_is_the_reduced_model_at_the_extracted_state(capsys):
    """The "reduced" per-task risk is the reduced multi-task model at the printed (ω, μ), estimated
    independently of the command (reduced_mt_predict on the same prompt stream), to rounding."""
    from reduced_dynamics.multitask.predictors import per_task_risks, reduced_mt_predict

    argv = ["train", *MT, "--heads", "2", "--steps", "20", "--batch", "16", "--eval-prompts", "300", "--seed", "2"]
    assert main([*argv, "--json", "--quiet"]) == 0
    doc = json.loads(capsys.readouterr().out)
    s = Setting.paper_multitask()
    om, mu = np.array(doc["omega"]), np.array(doc["mu"])
    ref = per_task_risks({"r": lambda p: reduced_mt_predict(p, om, mu, s)}, s, n_prompts=300, seed=2 + 10**6)
    np.testing.assert_allclose(doc["risk"]["reduced"]["risk"], ref.risk[0], rtol=1e-12)


def test_train_multitask_resume_matches_uninterrupted(tmp_path):
    """`train --tasks --out D` then `--resume` with more steps equals one run of the larger length."""
    base = [
        "train",
        "--tasks",
        "1-4,3-6",
        "--d",
        "6",
        "--heads",
        "2",
        "--batch",
        "16",
        "--eval-prompts",
        "50",
        "--json",
    ]
    full, part = tmp_path / "full", tmp_path / "part"
    assert main([*base, "--steps", "60", "--out", str(full), "--quiet"]) == 0
    assert main([*base, "--steps", "40", "--out", str(part), "--checkpoint-every", "20", "--quiet"]) == 0
    assert main([*base, "--steps", "60", "--out", str(part), "--resume", "--quiet"]) == 0
    a = json.loads((full / "final_multitask.json").read_text())
    b = json.loads((part / "final_multitask.json").read_text())
    assert a["omega"] == b["omega"] and a["mu"] == b["mu"] and a["config"]["param"] == "separate"


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--param", "linear"], "`--param` must be separate or merged with `--tasks`"),
        (["--resume"], "`--resume` needs `--out`"),
    ],
)
def test_train_multitask_bad_flags_exit_2(capsys, extra, message):
    assert main(["train", "--tasks", "1-4,3-6", "--d", "6", "--steps", "3", *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


@pytest.mark.parametrize("command", ["run", "risk", "train"])
@pytest.mark.parametrize("activation", ["affine", "square", "tanh"])
def test_tasks_with_another_activation_is_refused(capsys, command, activation):
    """The multi-task model is softmax only: f is refused in one line, never silently ignored."""
    assert main([command, "--d", "6", "--tasks", "1-4,3-6", "--activation", activation, "--quiet"]) == 2
    _, err = capsys.readouterr()
    assert len(err.strip().splitlines()) == 1 and "activation" in err
