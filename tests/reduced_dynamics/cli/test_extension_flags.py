"""``--sigma``, ``--sigma-eigs``/``--sigma-seed``, ``--activation``/``--activation-c`` (issue 11): the setting they
build, and every bad input is one line on stderr with exit 2, naming the flag."""

import numpy as np
import pytest

from reduced_dynamics.cli import build_parser, main
from reduced_dynamics.cli._setting import covariance_from_eigs, setting_from_args

EIGS = [0.5, 1.375, 2.25, 3.125, 4.0]


def _setting(argv):
    return setting_from_args(build_parser().parse_args(argv))


@pytest.mark.parametrize("seed", [0, 7])
@pytest.mark.parametrize("eigs", [EIGS, [1.0, 1.0, 3.0], [2.0]])
def test_covariance_from_eigs(eigs, seed):
    """Symmetric, eigenvalues as given (eigvalsh, an independent route), a seeded orthogonal basis."""
    S = covariance_from_eigs(eigs, seed=seed)
    np.testing.assert_array_equal(S, S.T)
    np.testing.assert_allclose(np.linalg.eigvalsh(S), np.sort(eigs), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(S, covariance_from_eigs(eigs, seed=seed))
    if len(set(eigs)) > 1:
        assert not np.allclose(S, covariance_from_eigs(eigs, seed=seed + 1))
        assert not np.allclose(S, np.diag(np.diag(S)))  # a random basis, not the coordinate one


@pytest.mark.parametrize("eigs, seed", [([], 0), ([1.0, -1.0], 0), ([1.0, np.nan], 0), ("1,2", 0), ([1.0], -1)])
def test_covariance_from_eigs_rejects(eigs, seed):
    with pytest.raises(ValueError, match="`eigs`|`seed`"):
        covariance_from_eigs(eigs, seed=seed)


@pytest.mark.parametrize("command", ["run", "risk", "train"])
def test_flags_build_the_setting(command, tmp_path):
    """--sigma FILE and --sigma-eigs/--sigma-seed give the same Σ; --activation goes into the setting."""
    np.save(tmp_path / "s.npy", covariance_from_eigs(EIGS, seed=3))
    a = _setting([command, "--sigma", str(tmp_path / "s.npy")])
    b = _setting([command, "--sigma-eigs", ",".join(map(str, EIGS)), "--sigma-seed", "3"])
    np.testing.assert_array_equal(a.Sigma, b.Sigma)
    c = _setting([command, "--sigma-eigs", ",".join(map(str, EIGS))])  # default basis seed 0
    np.testing.assert_array_equal(c.Sigma, covariance_from_eigs(EIGS, seed=0))
    assert _setting([command]).Sigma is None and _setting([command]).activation == "exp"
    s = _setting([command, "--activation", "affine", "--activation-c", "0.5"])
    assert (s.activation, s.activation_c) == ("affine", 0.5)
    assert _setting([command, "--activation", "tanh"]).activation == "tanh"


def _bad_files(tmp_path):
    np.save(tmp_path / "asym.npy", np.array([[1.0, 0.5, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]))
    np.save(tmp_path / "npd.npy", np.diag([1.0, -1.0, 1.0]))
    np.save(tmp_path / "size.npy", np.eye(4))
    np.save(tmp_path / "nan.npy", np.diag([1.0, np.nan, 1.0]))
    np.save(tmp_path / "cplx.npy", np.eye(3) * (1 + 1j))
    np.save(tmp_path / "str.npy", np.array(["a", "b"]))
    np.savez(tmp_path / "z.npz", a=np.eye(3))
    (tmp_path / "junk.npy").write_text("not an array")


BAD = [
    (["--sigma", "{}/asym.npy"], "`--sigma` (Σ) must be symmetric"),
    (["--sigma", "{}/npd.npy"], "`--sigma` (Σ) must be positive definite"),
    (["--sigma", "{}/size.npy"], "`--sigma` must be a (3, 3) matrix"),
    (["--sigma", "{}/nan.npy"], "`--sigma` (Σ) must be a finite"),
    (["--sigma", "{}/cplx.npy"], "`--sigma` must hold a real"),
    (["--sigma", "{}/str.npy"], "`--sigma` must hold a real"),
    (["--sigma", "{}/z.npz"], "`--sigma`: cannot read"),
    (["--sigma", "{}/junk.npy"], "`--sigma`: cannot read"),
    (["--sigma", "{}/missing.npy"], "`--sigma`: cannot read"),
    (["--sigma-eigs", "1,2"], "`--sigma-eigs` must list d = 3"),
    (["--sigma-eigs", "1,2,0"], "`--sigma-eigs`"),
    (["--sigma-eigs", "1,x,2"], "`--sigma-eigs`"),
    (["--sigma-eigs", "1,inf,2"], "`--sigma-eigs`"),
    (["--sigma-seed", "2"], "`--sigma-seed`"),
    (["--sigma-eigs", "1,2,3", "--sigma-seed", "-1"], "`--sigma-seed`"),
    (["--sigma", "{}/npd.npy", "--sigma-eigs", "1,2,3"], "`--sigma` and `--sigma-eigs`"),
    (["--activation", "relu"], "`--activation`"),
    (["--activation", "affine", "--activation-c", "-1"], "`--activation-c`"),
    (["--activation", "exp", "--activation-c", "2"], "`--activation-c`"),
    (["--activation", "square", "--activation-c", "nan"], "`--activation-c`"),
]


@pytest.mark.parametrize(
    "command, args, name",
    [("train", *b) for b in BAD] + [(c, *BAD[i]) for c in ("run", "risk") for i in (0, 2, 7, 9, 16)],
)
def test_bad_extension_input_exit_2_one_line(command, args, name, tmp_path, capsys):
    _bad_files(tmp_path)
    argv = [command, "--d", "3", "--L", "10", *[a.format(tmp_path) for a in args]]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and name in err and "Traceback" not in err, err
