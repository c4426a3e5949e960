"""Two-head symmetric plane: invariance, exact restricted vector field, nullclines, single-head line, drift law;
portrait data functions (setting, required seed, validation)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from reduced_dynamics import integrate, reduced_model
from reduced_dynamics.dynamics.loss import approx_loss, approx_loss_grad
from reduced_dynamics.dynamics.manifold import drift_law_gamma, mu_gamma, single_head_optimum
from reduced_dynamics.dynamics.portrait import (
    PlanePoint,
    PlaneState,
    PlaneVelocity,
    PortraitData,
    embed_plane,
    gamma_nullcline,
    general_portrait_data,
    plane_loss,
    plane_vector_field,
    project_plane,
    single_head_line,
    two_head_portrait_data,
)
from reduced_dynamics.setting import Setting

P = Setting(d=5, L=40, sigma2=0.1)
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
    s = Setting(d=d, L=L, sigma2=sigma2)
    state = embed_plane(gamma, m)
    g = approx_loss_grad(state.omega, state.mu, s)
    gw, gm = g.omega, g.mu
    scale = 1.0 + np.max(np.abs(np.concatenate([gw, gm])))
    assert abs(gw[0] + gw[1]) <= TOL * scale
    assert abs(gm[0] + gm[1]) <= TOL * scale
    v = plane_vector_field(gamma, m, s)
    assert abs(v.dgamma + gw[0]) <= 1e-11 * scale
    assert abs(v.dm + gm[0]) <= 1e-11 * scale


def test_restricted_field_is_half_gradient_of_restricted_loss():
    """γ̇ = −½ ∂ℓ/∂γ, ṁ = −½ ∂ℓ/∂m with ℓ(γ, m) = L̃(γ, −γ, m, −m) (central differences)."""
    G, M = np.meshgrid(np.linspace(-0.8, 0.8, 7), np.linspace(-3, 3, 7))
    h = 1e-6
    state = embed_plane(G, M)
    assert np.allclose(plane_loss(G, M, P), approx_loss(state.omega, state.mu, P), rtol=0, atol=1e-13)
    dl_dg = (plane_loss(G + h, M, P) - plane_loss(G - h, M, P)) / (2 * h)
    dl_dm = (plane_loss(G, M + h, P) - plane_loss(G, M - h, P)) / (2 * h)
    v = plane_vector_field(G, M, P)
    assert np.allclose(v.dgamma, -0.5 * dl_dg, atol=1e-7)
    assert np.allclose(v.dm, -0.5 * dl_dm, atol=1e-7)


def test_plane_functions_broadcast_over_array_settings():
    """An array-valued setting gives the stack of the scalar-setting results."""
    Ls = [10, 40, 160]
    sa = Setting(d=5, L=Ls, sigma2=0.1)
    g = np.array([0.1, 0.3, 0.5])
    v = plane_vector_field(g, 1.5, sa)
    for i, L in enumerate(Ls):
        s = Setting(d=5, L=L, sigma2=0.1)
        vi = plane_vector_field(g[i], 1.5, s)
        assert v.dgamma[i] == vi.dgamma and v.dm[i] == vi.dm
        assert plane_loss(g, 1.5, sa)[i] == plane_loss(g[i], 1.5, s)
        assert gamma_nullcline(g, sa)[i] == gamma_nullcline(g[i], s)


def test_trajectory_started_in_plane_stays_in_plane():
    """The 4-D flow from (γ₀, −γ₀, m₀, −m₀) keeps ω₁ + ω₂ = 0 and μ₁ + μ₂ = 0 (to 1e-12)."""
    start = embed_plane(0.3, -0.5)
    model = reduced_model(P, n_heads=2)
    res = integrate(model, model.state(start.omega, start.mu), t_end=1e3, n_times=60)
    assert res.success
    assert np.max(np.abs(res.omega.sum(axis=1))) <= TOL
    assert np.max(np.abs(res.mu.sum(axis=1))) <= TOL
    plane = project_plane(res.omega, res.mu)
    assert np.allclose(plane.gamma, res.omega[:, 0]) and np.allclose(plane.m, res.mu[:, 0])


def test_nullclines():
    """ṁ = 0 on m = μ_γ(γ) (the solution manifold); γ̇ = 0 on m = 1/(2γ(1 + cd cosh dγ²))."""
    g = np.linspace(0.01, 0.9, 50)
    dm = plane_vector_field(g, mu_gamma(g, P), P).dm
    dg = plane_vector_field(g, gamma_nullcline(g, P), P).dgamma
    assert np.max(np.abs(dm)) < 1e-12 * 1e3 and np.max(np.abs(dg)) < 1e-10


def test_single_head_line_ends_at_h1_optimum():
    """The projected one-head-off family passes through (1/(2√d), μ₁/2) of the H = 1 optimum."""
    opt = single_head_optimum(P)
    line = single_head_line(opt.omega, P)
    g, m = line.gamma, line.m
    assert g == pytest.approx(opt.omega / 2, rel=1e-14) and m == pytest.approx(opt.mu / 2, rel=1e-12)


def test_single_head_line_does_not_overflow():
    """For d·w² beyond exp's float64 range the one-head-off line tends to m = 0 without a warning."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = single_head_line(np.array([0.5, 20.0]), P).m
    assert np.all(np.isfinite(m)) and m[1] == 0.0 and m[0] > 0


def test_drift_law_value_at_paper_setting():
    """γ(1e5) = (16 c d³ (1/2) 1e5)^{-1/6} = 0.0845 for H = 2 at d=5, L=40, σ²=0.1 (lead's reference value)."""
    assert drift_law_gamma(1e5, P) == pytest.approx(0.0845, abs=5e-5)


def test_two_head_portrait_data_small():
    """Cheap portrait: the data is a read-only mapping; random 4-D inits approach the plane; ṁ = 0 curve is μ_γ."""
    data = two_head_portrait_data(P, seed=0, resolution=12, n_traj=1, t_end=20.0, n_eval=30)
    assert isinstance(data, PortraitData) and data.kind == "two_head"
    assert data["A_gamma"].shape == (12, 12) and not data["A_gamma"].flags.writeable
    off = data["traj_offplane"][0]
    off = off[np.isfinite(off)]
    assert off[-1] < 0.5 * off[0]
    assert list(data["traj_seeds"]) == [0] and data["marks_t"][0] == 0.1
    assert np.array_equal(data["curve_mu_gamma"], mu_gamma(data["curve_gamma"], P))
    assert data["eta_star"] == P.eta_star


def test_portrait_data_same_seed_same_numbers():
    a = general_portrait_data(P, seed=4, n_heads=2, n_traj=1, t_end=10.0, n_eval=20)
    b = general_portrait_data(P, seed=4, n_heads=2, n_traj=1, t_end=10.0, n_eval=20)
    assert a.kind == "general" and set(a) == set(b)
    for k in a:
        assert np.array_equal(np.asarray(a[k]), np.asarray(b[k]), equal_nan=True), k


@pytest.mark.parametrize(
    "kwargs, param",
    [
        (dict(gamma_range=(0.5, 0.1)), "`gamma_range`"),
        (dict(m_range="x"), "`m_range`"),
        (dict(resolution=3), "`resolution`"),
        (dict(t_end=0.5), "`t_end`"),
        (dict(seed=-1), "`seed`"),
    ],
)
def test_two_head_portrait_bad_input(kwargs, param):
    kw = dict(seed=0) | kwargs
    with pytest.raises(ValueError, match=param):
        two_head_portrait_data(P, **kw)


def test_plane_results_are_frozen():
    v = plane_vector_field(np.array([0.1, 0.2]), 1.0, P)
    assert isinstance(v, PlaneVelocity) and not v.dgamma.flags.writeable
    state = embed_plane([0.1, 0.2], [1.0, 2.0])
    assert isinstance(state, PlaneState) and state.omega.shape == (2, 2)
    back = project_plane(state.omega, state.mu)
    assert isinstance(back, PlanePoint) and np.array_equal(back.gamma, [0.1, 0.2]) and np.array_equal(back.m, [1, 2])


def test_portrait_data_needs_seed_and_scalar_setting():
    with pytest.raises(TypeError):
        general_portrait_data(P)  # seed is required
    with pytest.raises(ValueError, match="`setting`"):
        general_portrait_data(Setting(d=5, L=[10, 40], sigma2=0.1), seed=0)
    with pytest.raises(ValueError, match="`n_heads`"):
        general_portrait_data(P, seed=0, n_heads=1)


# ---------------------------------------------------------------- issue 9: named errors, no inf, bounded
def test_plane_functions_name_their_bad_arguments():
    from reduced_dynamics.dynamics.portrait import embed_plane, gamma_nullcline, plane_loss, project_plane

    s = Setting(d=5, L=40, sigma2=0.1)
    with pytest.raises(ValueError, match="`omega`"):
        project_plane(0.0, [0.1, -0.1])  # was an IndexError
    with pytest.raises(ValueError, match="`m`"):
        embed_plane(0.1, [1j, 2.0])  # complex was truncated
    with pytest.raises(ValueError, match="`gamma`"):
        gamma_nullcline(0.0, s)  # was inf with a warning
    with pytest.raises(ValueError, match="`gamma`"):
        plane_loss([1e168], 0.5, s)  # was inf with a warning
    with pytest.raises(ValueError, match="`gamma`"):
        plane_loss([0.1, 0.2, 0.3], 0.5, Setting(d=5, L=[10, 20], sigma2=0.1))  # numpy's broadcast error


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [({"t_end": 1e308}, "`t_end`"), ({"n_traj": 10**12}, "`n_traj`"), ({"init_scale": 1e-320}, "`init_scale`")],
)
def test_portrait_data_bounds_its_run_time(kwargs, name):
    """Issue 9: `portrait --t-end 1e308` ran forever."""
    from reduced_dynamics.dynamics.portrait import general_portrait_data, two_head_portrait_data

    s = Setting(d=5, L=40, sigma2=0.1)
    with pytest.raises(ValueError, match=name):
        two_head_portrait_data(s, seed=0, **kwargs)
    with pytest.raises(ValueError, match=name):
        general_portrait_data(s, seed=0, **kwargs)
