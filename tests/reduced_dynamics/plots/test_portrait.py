"""Two-head symmetric plane: invariance, exact restricted vector field, nullclines, drift law; `portrait` CLI errors."""

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from reduced_dynamics.cli import main
from reduced_dynamics.dynamics.flow import integrate_flow
from reduced_dynamics.dynamics.loss import approx_loss, approx_loss_grad
from reduced_dynamics.dynamics.manifold import drift_law_gamma, mu_gamma
from reduced_dynamics.plots.portrait import (
    embed_plane,
    gamma_nullcline,
    plane_loss,
    plane_vector_field,
    project_plane,
    single_head_line,
)

P = dict(d=5, L=40, sigma2=0.1)
TOL = 1e-12


@given(
    gamma=st.floats(-1.0, 1.0, allow_nan=False),
    m=st.floats(-20.0, 20.0, allow_nan=False),
    d=st.integers(1, 8),
    L=st.integers(1, 200),
    sigma2=st.floats(0.0, 2.0),
)
def test_vector_field_lies_in_plane(gamma, m, d, L, sigma2):
    """At θ = (γ, −γ, m, −m): ∂L̃/∂ω₁ = −∂L̃/∂ω₂ and ∂L̃/∂μ₁ = −∂L̃/∂μ₂ (to 1e-12 relative), and
    (−∂L̃/∂ω₁, −∂L̃/∂μ₁) equals the closed-form restricted field (γ̇, ṁ)."""
    w, mu = embed_plane(gamma, m)
    gw, gm = approx_loss_grad(w, mu, d=d, L=L, sigma2=sigma2)
    scale = 1.0 + np.max(np.abs(np.concatenate([gw, gm])))
    assert abs(gw[0] + gw[1]) <= TOL * scale
    assert abs(gm[0] + gm[1]) <= TOL * scale
    dg, dm = plane_vector_field(gamma, m, d=d, L=L, sigma2=sigma2)
    assert abs(dg + gw[0]) <= 1e-11 * scale
    assert abs(dm + gm[0]) <= 1e-11 * scale


def test_restricted_field_is_half_gradient_of_restricted_loss():
    """γ̇ = −½ ∂ℓ/∂γ, ṁ = −½ ∂ℓ/∂m with ℓ(γ, m) = L̃(γ, −γ, m, −m) (central differences)."""
    G, M = np.meshgrid(np.linspace(-0.8, 0.8, 7), np.linspace(-3, 3, 7))
    h = 1e-6
    w, mu = embed_plane(G, M)
    assert np.allclose(plane_loss(G, M, **P), approx_loss(w, mu, **P), rtol=0, atol=1e-13)
    dl_dg = (plane_loss(G + h, M, **P) - plane_loss(G - h, M, **P)) / (2 * h)
    dl_dm = (plane_loss(G, M + h, **P) - plane_loss(G, M - h, **P)) / (2 * h)
    dg, dm = plane_vector_field(G, M, **P)
    assert np.allclose(dg, -0.5 * dl_dg, atol=1e-7)
    assert np.allclose(dm, -0.5 * dl_dm, atol=1e-7)


def test_trajectory_started_in_plane_stays_in_plane():
    """The 4-D flow from (γ₀, −γ₀, m₀, −m₀) keeps ω₁ + ω₂ = 0 and μ₁ + μ₂ = 0 (to 1e-12)."""
    w0, m0 = embed_plane(0.3, -0.5)
    res = integrate_flow(w0, m0, **P, t_end=1e3, n_eval=60)
    assert res.success
    assert np.max(np.abs(res.omega.sum(axis=1))) <= TOL
    assert np.max(np.abs(res.mu.sum(axis=1))) <= TOL
    g, m = project_plane(res.omega, res.mu)
    assert np.allclose(g, res.omega[:, 0]) and np.allclose(m, res.mu[:, 0])


def test_nullclines():
    """ṁ = 0 on m = μ_γ(γ) (the solution manifold); γ̇ = 0 on m = 1/(2γ(1 + cd cosh dγ²))."""
    g = np.linspace(0.01, 0.9, 50)
    _, dm = plane_vector_field(g, mu_gamma(g, **P), **P)
    dg, _ = plane_vector_field(g, gamma_nullcline(g, **P), **P)
    assert np.max(np.abs(dm)) < 1e-12 * 1e3 and np.max(np.abs(dg)) < 1e-10


def test_single_head_line_ends_at_h1_optimum():
    """The projected one-head-off family passes through (1/(2√d), μ₁/2) of the H = 1 optimum."""
    from reduced_dynamics.dynamics.manifold import single_head_optimum

    w1, m1, _ = single_head_optimum(**P)
    g, m = single_head_line(w1, **P)
    assert g == pytest.approx(w1 / 2, rel=1e-14) and m == pytest.approx(m1 / 2, rel=1e-12)


def test_single_head_line_does_not_overflow():
    """For d·w² beyond exp's float64 range the one-head-off line tends to m = 0 without a warning."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g, m = single_head_line(np.array([0.5, 20.0]), **P)
    assert np.all(np.isfinite(m)) and m[1] == 0.0 and m[0] > 0


def test_drift_law_value_at_paper_setting():
    """γ(1e5) = (16 c d³ (1/2) 1e5)^{-1/6} = 0.0845 for H = 2 at d=5, L=40, σ²=0.1 (lead's reference value)."""
    assert drift_law_gamma(1e5, **P) == pytest.approx(0.0845, abs=5e-5)


@pytest.mark.parametrize(
    "args,param",
    [
        (["--d", "0"], "`d`"),
        (["--heads", "1"], "`n_heads`"),
        (["--gamma-range", "0.5,0.1"], "`gamma_range`"),
        (["--m-range", "x"], "`m_range`"),
        (["--resolution", "3"], "`resolution`"),
        (["--t-end", "0"], "`t_end`"),
        (["--m-range=-1e200,1e200"], "`m_range`"),
    ],
)
def test_portrait_bad_input_exit_2(capsys, args, param):
    rc = main(["portrait", *args])
    err = capsys.readouterr().err
    assert rc == 2
    assert param in err and len(err.strip().splitlines()) == 1


def test_portrait_bad_input_subprocess():
    proc = subprocess.run(
        [sys.executable, "-m", "reduced_dynamics", "portrait", "--d", "0"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "`d`" in proc.stderr


def test_portrait_cli_writes_files(tmp_path, capsys):
    rc = main(
        ["portrait", "--resolution", "12", "--n-traj", "1", "--t-end", "20", "--heads", "2", "--out", str(tmp_path)]
    )
    assert rc == 0
    pngs = sorted(tmp_path.glob("*.png"))
    assert len(pngs) == 2 and all(p.stat().st_size > 1000 for p in pngs)
    assert len(sorted(tmp_path.glob("*.npz"))) == 2
