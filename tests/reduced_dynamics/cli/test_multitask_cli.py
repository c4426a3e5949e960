"""--tasks: parsing (one-line errors, exit 2), risk --tasks, and the run/train dispatch targets in cli/_multitask.py."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from reduced_dynamics import Setting
from reduced_dynamics.cli import main
from reduced_dynamics.cli._multitask import run_multitask, train_multitask
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


def _run_args(**kw):
    base = dict(heads=3, t_end=2e4, init="random", init_scale=0.01, omega0=None, mu0=None, n_init=None, seed=0)
    base.update(json=True, out=None, rtol=None, atol=None)
    base.update(kw)
    return argparse.Namespace(**base)


def test_run_multitask_json(capsys):
    s = Setting.paper_multitask()
    assert run_multitask(_run_args(), s) == 0
    doc = json.loads(capsys.readouterr().out)
    assert np.shape(doc["omega"]) == (3, 6) and np.shape(doc["mu"]) == (3, 2) and len(doc["roles"]) == 3
    assert doc["limit"]["regime"] == "per-task"
    assert np.abs(np.array(doc["A"]) - np.array(doc["limit"]["A"])).max() < 0.02


@pytest.mark.parametrize(
    "bad, flag", [({"init": "symmetric"}, "--init"), ({"omega0": "0.1"}, "--omega0"), ({"heads": 0}, "heads")]
)
def test_run_multitask_bad_flags(bad, flag):
    with pytest.raises(ValueError, match=flag):
        run_multitask(_run_args(**bad), Setting.paper_multitask())


def test_train_multitask_json_and_out(capsys, tmp_path):
    s = Setting.paper_multitask()
    a = argparse.Namespace(
        heads=2,
        steps=30,
        batch=32,
        lr=1e-3,
        seed=0,
        n_eval=200,
        optimizer="adam",
        resume=False,
        json=True,
        out=str(tmp_path),
        force=False,
    )
    assert train_multitask(a, s) == 0
    doc = json.loads(capsys.readouterr().out)
    assert np.shape(doc["omega"]) == (2, 6) and np.shape(doc["mu"]) == (2, 2) and len(doc["roles"]) == 2
    assert set(doc["risk"]) == {"trained", "reduced", "limit", "debiased_gd_S", "bayes_ridge_S"}
    assert (tmp_path / "final_multitask.json").exists()
    with pytest.raises(ValueError, match="--force"):
        train_multitask(a, s)
    with pytest.raises(ValueError, match="--optimizer"):
        train_multitask(argparse.Namespace(**{**vars(a), "optimizer": "sgd", "force": True}), s)


def test_train_multitask_resume_matches_uninterrupted(tmp_path):
    """`train --tasks --out D` then `--resume` with more steps equals one run of the larger length."""
    base = ["train", "--tasks", "1-4,3-6", "--d", "6", "--heads", "2", "--batch", "16", "--n-eval", "50", "--json"]
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
