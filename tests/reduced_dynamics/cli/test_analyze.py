"""The `analyze` command, in-process through reduced_dynamics.cli.main.

The tests named ``test_on_file_*`` read a checkpoint, which goes through the importers'
``reduced_dynamics.importers._load.load`` (the ``.npz`` layout: ``KQ`` (H, D, D) and ``ov`` (H, D));
the others stop at bad input before any file is read.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from reduced_dynamics import Setting, mu_gamma
from reduced_dynamics.cli import main

PAPER = Setting(d=5, L=40, sigma2=0.1)
CHEAP = ["--n-prompts", "200", "--lengths", "20", "--quiet"]


def run(capsys, *argv):
    rc = main(["analyze", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def one_line_error(capsys, *argv) -> str:
    rc, out, err = run(capsys, *argv)
    assert rc == 2 and out == "", (rc, out, err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.fixture
def ideal_file(tmp_path):
    """Circuits on the solution manifold (γ = 0.1) of the paper's setting, as an .npz of KQ and ov."""
    g, m = 0.1, float(mu_gamma(0.1, PAPER))
    KQ = np.zeros((2, 6, 6))
    KQ[0, :5, :5], KQ[1, :5, :5] = g * np.eye(5), -g * np.eye(5)
    ov = np.zeros((2, 6))
    ov[0, 5], ov[1, 5] = m, -m
    path = tmp_path / "ideal.npz"
    np.savez(path, KQ=KQ, ov=ov)
    return str(path)


@pytest.fixture
def small_file(tmp_path):
    """d = 2 circuits on the manifold of (d, L, σ²) = (2, 40, 0.1): a small figure, quick to write."""
    s = Setting(d=2, L=40, sigma2=0.1)
    g, m = 0.1, float(mu_gamma(0.1, s))
    KQ = np.zeros((2, 3, 3))
    KQ[0, :2, :2], KQ[1, :2, :2] = g * np.eye(2), -g * np.eye(2)
    ov = np.array([[0.0, 0.0, m], [0.0, 0.0, -m]])
    path = tmp_path / "small.npz"
    np.savez(path, KQ=KQ, ov=ov)
    return str(path)


@pytest.fixture
def random_file(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "random.npz"
    np.savez(path, KQ=0.3 * rng.standard_normal((2, 6, 6)), ov=rng.standard_normal((2, 6)))
    return str(path)


# ------------------------------------------------------------------ bad input before any file is read
@pytest.mark.parametrize(
    "argv, flag",
    [
        (["{missing}"], "FILE"),
        (["{folder}"], "FILE"),
        (["{missing}", "--lengths", ""], "--lengths"),
        (["{missing}", "--lengths", "10,,20"], "--lengths"),
        (["{missing}", "--lengths", "a,b"], "--lengths"),
        (["{missing}", "--lengths", "1"], "--lengths"),
        (["{missing}", "--lengths", "5.5"], "--lengths"),
        (["{missing}", "--n-prompts", "1"], "--n-prompts"),
        (["{missing}", "--seed", "-1"], "--seed"),
        (["{missing}", "--dummy-tol", "1.5"], "--dummy-tol"),
        (["{missing}", "--format", "bogus"], "--format"),
        (["{missing}", "--n-prompts", "10", "--n-prompts", "20"], "--n-prompts"),
    ],
)
def test_bad_input_one_line_exit_2(capsys, tmp_path, argv, flag):
    names = {"missing": str(tmp_path / "missing.npz"), "folder": str(tmp_path)}
    err = one_line_error(capsys, *[a.format(**names) for a in argv])
    assert err.startswith("reduced-dynamics analyze: error:") or "usage" in err or "argument" in err
    assert flag in err, err


def test_help_lists_the_flags_and_exit_codes(capsys):
    rc = main(["analyze", "--help"])
    out = capsys.readouterr().out
    assert rc == 0
    for flag in ("FILE", "--format", "--d", "--L", "--sigma2", "--sigma", "--tasks", "--lengths", "--json", "--out"):
        assert flag in out
    assert "exit status:" in out and "2    bad input" in out


# ------------------------------------------------------------------------------- on a checkpoint file
def test_on_file_text_and_json(capsys, ideal_file):
    rc, out, err = run(capsys, ideal_file, *CHEAP)
    assert rc == 0 and err == ""
    assert out.startswith("matches the theory") and "pass  eta_eff" in out
    rc, out, _ = run(capsys, ideal_file, *CHEAP, "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["matches"] is True and doc["source"]["format"] == "npz"
    assert doc["setting"]["d"] == 5 and doc["config"]["lengths"] == [20, 40]
    assert doc["location"]["eta_eff"] == pytest.approx(2 * 0.1 * float(mu_gamma(0.1, PAPER)), rel=1e-12)


def test_on_file_same_seed_same_json(capsys, ideal_file):
    a = run(capsys, ideal_file, *CHEAP, "--json", "--seed", "3")[1]
    b = run(capsys, ideal_file, *CHEAP, "--json", "--seed", "3")[1]
    c = run(capsys, ideal_file, *CHEAP, "--json", "--seed", "4")[1]
    assert a == b and json.loads(a)["risks"] != json.loads(c)["risks"]


def test_on_file_random_circuits_do_not_match_but_exit_0(capsys, random_file):
    rc, out, _ = run(capsys, random_file, *CHEAP, "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["matches"] is False and doc["verdicts"]["diagonal"]["passed"] is False


def test_on_file_d_from_the_checkpoint(capsys, ideal_file):
    err = one_line_error(capsys, ideal_file, *CHEAP, "--d", "4")
    assert "`--d`" in err and "d = 5" in err
    rc, out, _ = run(capsys, ideal_file, *CHEAP, "--d", "5")
    assert rc == 0


def test_on_file_setting_flags(capsys, ideal_file):
    err = one_line_error(capsys, ideal_file, *CHEAP, "--tasks", "1-2,3-4")
    assert "--tasks" in err
    err = one_line_error(capsys, ideal_file, *CHEAP, "--L", "1")
    assert "--L" in err
    rc, out, _ = run(capsys, ideal_file, *CHEAP, "--sigma-eigs", "0.5,1,1.5,2,3", "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["model"] == "precond" and "preconditioner" in doc["verdicts"]
    # the isotropic pattern is not the optimal preconditioner under this Σ
    assert doc["verdicts"]["preconditioner"]["passed"] is False


def test_on_file_out_writes_both_files_and_refuses_another_configuration(capsys, small_file, tmp_path):
    ideal_file = small_file
    out_dir = tmp_path / "rep"
    rc, out, _ = run(capsys, ideal_file, *CHEAP, "--json", "--out", str(out_dir))
    assert rc == 0
    doc = json.loads(out)
    saved = json.loads((out_dir / "report.json").read_text())
    assert saved == doc and saved["matches"] is True and (out_dir / "analysis.png").stat().st_size > 10_000
    assert saved["run"]["seed"] == 0 and len(saved["run"]["sha256"]) == 64
    assert run(capsys, ideal_file, *CHEAP, "--out", str(out_dir))[0] == 0  # the same configuration
    err = one_line_error(capsys, ideal_file, *CHEAP, "--seed", "1", "--out", str(out_dir))
    assert "`--out`" in err and "another configuration" in err
    assert json.loads((out_dir / "report.json").read_text())["run"]["seed"] == 0  # untouched
    assert run(capsys, ideal_file, *CHEAP, "--seed", "1", "--out", str(out_dir), "--force")[0] == 0
    assert json.loads((out_dir / "report.json").read_text())["run"]["seed"] == 1


def test_on_file_not_an_attention_checkpoint(capsys, tmp_path):
    path = tmp_path / "other.npz"
    np.savez(path, weights=np.ones(3))
    err = one_line_error(capsys, str(path), *CHEAP)
    assert "FILE" in err and "other.npz" in err
    text = tmp_path / "notes.npz"
    text.write_text("not a checkpoint\n")
    err = one_line_error(capsys, str(text), *CHEAP)
    assert "FILE" in err
