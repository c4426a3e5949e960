"""Figure `precond_risk`: its data agree with the library's closed forms and with Monte Carlo (quick mode)."""

from __future__ import annotations

import numpy as np
import pytest

from reduced_dynamics import Setting
from reduced_dynamics.figures.precond_risk import _key_numbers, plot_precond_risk, precond_risk_data
from reduced_dynamics.precond.bayes import bayes_ratio_sigma
from reduced_dynamics.precond.exact import optimal_dpgd


@pytest.fixture(scope="module")
def data(quick_figure_data):
    """``precond_risk_data(Setting(d=5, L=40, sigma2=0.1), quick=True, seed=0)``, made once per
    session by the ``quick_figure`` fixture (tests/conftest.py; shared with tests/test_golden.py) and read back
    from its ``.npz`` (what the plot draws)."""
    return quick_figure_data("precond_risk", precond_risk_data)


def test_monte_carlo_points_within_3_se_of_the_exact_curves(data):
    from reduced_dynamics.precond.covariance import precond_setting

    s0 = precond_setting(Setting(d=5, L=40, sigma2=0.1))
    for k, L in enumerate(data["L"]):
        opt = optimal_dpgd(s0.replace(L=int(L)))
        exact = [opt.risk, opt.risk_sigma_inv, opt.risk_identity]
        for j in range(3):
            assert abs(data["risk"][k, j] - exact[j]) <= 3 * data["stderr"][k, j], (L, j)
        assert data["bayes"][k] < data["risk"][k].min()


def test_panels_b_and_c_are_the_library_values(data):
    Le = np.asarray(data["L_exact"])
    assert np.all(np.diff(data["distance"]) < 0)  # strictly closer to Σ⁻¹ as L grows
    assert data["gap"][-1] > 0
    eigs = np.asarray(data["sigma_eigs"])
    t = float(data["snr"][3])
    r = bayes_ratio_sigma(eigs, Setting(d=5, L=40, sigma2=t * eigs.mean()))
    assert data["rho"][3] == pytest.approx(r.rho, rel=1e-12)
    assert Le[-1] == 10_000
    # the supremum over all spectra bounds both spectra drawn (proven in precond.bayes)
    assert np.all(np.asarray(data["rho"]) <= np.asarray(data["rho_sup"]) * (1 + 1e-9))
    assert np.all(np.asarray(data["null_rho"]) <= np.asarray(data["rho_sup"]) * (1 + 1e-9))
    key = _key_numbers(data)
    assert key["bound_holds_this_sigma"] is True and key["max_rho_null_spectrum"] > 1


def test_plot_has_three_panels(data):
    fig = plot_precond_risk(data)
    assert len(fig.axes) == 3
    assert all(ax.get_xlabel() for ax in fig.axes)
