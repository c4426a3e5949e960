"""``reduced-dynamics train``: JSON output, files under --out, resume, bad input (exit 2, one line)."""

import json
import subprocess
import sys

import numpy as np
import pytest

from reduced_dynamics.cli import main
from reduced_dynamics.model.training import STREAM_VERSION

TINY = ["--d", "3", "--L", "10", "--batch", "16", "--eval-prompts", "200"]


def test_json_output_and_files(tmp_path, capsys):
    rc = main(["train", "--steps", "30", *TINY, "--out", str(tmp_path), "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("omega", "mu", "patterns", "risk", "risk_stderr", "steps", "seconds", "steps_per_second"):
        assert key in out, key
    assert out["steps"] == 30 and len(out["omega"]) == len(out["mu"]) == 2
    assert out["stream_version"] == STREAM_VERSION  # the training prompt stream is recorded
    assert out["risk_stderr"] > 0 and 0 <= out["patterns"]["zero_sum_ratio"] <= 1
    for name in ("checkpoint.npz", "final.npz", "final.json"):
        assert (tmp_path / name).exists()
    assert json.loads((tmp_path / "final.json").read_text())["steps"] == 30
    assert not list(tmp_path.glob(".*.tmp"))  # atomic writes leave no temporaries


def test_eval_prompts_and_its_old_spelling(capsys):
    """`--eval-prompts` (was `--n-eval`): the old spelling gives the same run with one note after the result (none
    under --quiet); both together are refused in one line; an error names the spelling typed."""
    base = ["train", "--steps", "5", "--d", "3", "--L", "10", "--batch", "16", "--json"]
    assert main([*base, "--eval-prompts", "100"]) == 0
    cap = capsys.readouterr()
    new = json.loads(cap.out)
    assert not [line for line in cap.err.splitlines() if "note:" in line]
    assert main([*base, "--n-eval", "100"]) == 0
    cap = capsys.readouterr()
    old = json.loads(cap.out)
    notes = [line for line in cap.err.splitlines() if "note:" in line]
    assert len(notes) == 1 and notes[0].startswith("reduced-dynamics train: note: ") and "`--eval-prompts`" in notes[0]
    assert cap.err.strip().splitlines()[-1] == notes[0]  # written after the command returned
    assert old["risk"] == new["risk"] and old["risk_stderr"] == new["risk_stderr"] and old["omega"] == new["omega"]
    assert main([*base, "--n-eval", "100", "--quiet"]) == 0
    assert capsys.readouterr().err == ""
    assert main([*base, "--n-eval", "100", "--eval-prompts", "100"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "`--n-eval`" in err[0] and "`--eval-prompts`" in err[0]
    for flag in ("--n-eval", "--eval-prompts"):
        assert main([*base, flag, "1"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"`{flag}`" in err[0]


def test_resume_via_cli_matches_uninterrupted(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["train", "--steps", "40", *TINY, "--param", "merged", "--out", str(a)]) == 0
    assert main(["train", "--steps", "20", *TINY, "--param", "merged", "--out", str(b)]) == 0
    assert main(["train", "--steps", "40", *TINY, "--param", "merged", "--out", str(b), "--resume"]) == 0
    capsys.readouterr()
    with np.load(a / "final.npz") as za, np.load(b / "final.npz") as zb:
        for k in ("param_KQ", "param_ov", "losses"):
            np.testing.assert_array_equal(za[k], zb[k])


@pytest.mark.parametrize(
    "args, name",
    [
        (["--heads", "0"], "`--heads`"),
        (["--d", "0"], "`--d`"),
        (["--lr", "0"], "`--lr`"),
        (["--lr", "-0.1"], "`--lr`"),
        (["--steps", "-1"], "`--steps`"),
        (["--batch", "0"], "`--batch`"),
        (["--optimizer", "lbfgs"], "`--optimizer`"),
        (["--param", "cubic"], "`--param`"),
        (["--resume"], "`--resume`"),
    ],
)
def test_bad_input_exit_2_one_line(args, name, capsys):
    assert main(["train", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and name in err and "Traceback" not in err


def test_out_that_is_a_file_exit_2(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["train", "--steps", "2", *TINY, "--out", str(f)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "`--out`" in err


def test_divergence_exit_3_one_line(capsys):
    """A diverging run (SGD, lr 10, the largest accepted) is a numerical failure: one stderr line, exit 3."""
    rc = main(["train", "--steps", "200", *TINY, "--optimizer", "sgd", "--lr", "10", "--param", "linear"])
    cap = capsys.readouterr()
    assert rc == 3 and cap.out == ""
    assert cap.err.count("\n") == 1 and "smaller `--lr`" in cap.err and "Traceback" not in cap.err


def test_resume_of_another_stream_version_exit_2(tmp_path, capsys):
    """A checkpoint written before stream versions were recorded (version 1) is refused: exit 2, one line."""
    assert main(["train", "--steps", "20", *TINY, "--out", str(tmp_path)]) == 0
    ck = tmp_path / "checkpoint.npz"
    with np.load(ck) as z:
        arrays = {k: z[k] for k in z.files if k != "stream_version"}
    np.savez(ck, **arrays)
    capsys.readouterr()
    assert main(["train", "--steps", "40", *TINY, "--out", str(tmp_path), "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "resume" in err and "stream version 1" in err and "Traceback" not in err


def test_subprocess_bad_heads():
    p = subprocess.run(
        [sys.executable, "-m", "reduced_dynamics", "train", "--heads", "0"], capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and "`--heads`" in p.stderr and "Traceback" not in p.stderr


def _cos(A, B):
    return abs(float(np.sum(A * B))) / float(np.linalg.norm(A) * np.linalg.norm(B))


def test_json_reports_each_heads_circuits(tmp_path, capsys):
    """--json: kq (H, d, d) and ov (H, d+1) are the model's circuits at the saved parameters; isotropic: the
    |cosine| with Σ⁻¹ = I equals the control's, each the written-out formula."""
    from reduced_dynamics.model.attention import make_model

    assert main(["train", "--steps", "30", *TINY, "--heads", "3", "--out", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    kq, ov = np.array(out["kq"]), np.array(out["ov"])
    assert kq.shape == (3, 3, 3) and ov.shape == (3, 4)
    with np.load(tmp_path / "final.npz") as z:
        params = {k[6:]: z[k] for k in z.files if k.startswith("param_")}
    KQ, OV = make_model("separate", n_heads=3, d=3).circuits(params)
    np.testing.assert_allclose(kq, KQ[:, :3, :3], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(ov, OV, rtol=1e-12, atol=1e-15)
    for h in range(3):
        assert out["kq_cosine_sigma_inv"][h] == pytest.approx(_cos(kq[h], np.eye(3)), abs=1e-12)
    assert out["kq_cosine_identity"] == out["kq_cosine_sigma_inv"]
    assert json.loads((tmp_path / "final.json").read_text())["kq"] == out["kq"]


def test_json_under_sigma(tmp_path, capsys):
    """--sigma-eigs: the cosines are taken with Σ⁻¹ (written out), the risks are paired with debiased preconditioned
    GD, and each paired difference is the difference of the two risks."""
    from reduced_dynamics.cli._setting import covariance_from_eigs

    argv = ["train", "--steps", "30", *TINY, "--sigma-eigs", "0.5,1,4", "--sigma-seed", "2", "--json"]
    assert main([*argv, "--out", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    Si = np.linalg.inv(covariance_from_eigs([0.5, 1.0, 4.0], seed=2))
    np.testing.assert_allclose(np.array(out["config"]["setting"]["Sigma"]), np.linalg.inv(Si), rtol=1e-12)
    kq = np.array(out["kq"])
    for h in range(2):
        assert out["kq_cosine_sigma_inv"][h] == pytest.approx(_cos(kq[h], Si), abs=1e-12)
        assert out["kq_cosine_identity"][h] == pytest.approx(_cos(kq[h], np.eye(3)), abs=1e-12)
    r = out["risks"]
    assert set(r) == {"model", "dpgd_own", "dpgd_sigma_inv", "dpgd_optimal", "debiased_gd"}
    for k in ("dpgd_own", "dpgd_sigma_inv", "dpgd_optimal", "debiased_gd"):
        assert out["diffs"][f"model-{k}"]["risk"] == pytest.approx(r["model"]["risk"] - r[k]["risk"], abs=1e-12)
    assert out["steps"] == 30 and (tmp_path / "final.npz").exists()
    assert json.loads((tmp_path / "final.json").read_text())["risks"] == out["risks"]
    assert main(argv[:-1] + ["--quiet"]) == 0  # the text summary
    text = capsys.readouterr().out
    assert "kq_cosine_sigma_inv=" in text and "model-dpgd_optimal=" in text
