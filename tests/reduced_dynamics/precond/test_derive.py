"""Symbolic derivation of the preconditioned approximate loss: closed form, reduction to L̃, negative control."""

import numpy as np
import pytest
import sympy as sp

from reduced_dynamics.derive.symbolic import closed_form_loss, problem_symbols, state_symbols
from reduced_dynamics.precond.derive import (
    _canonical,
    closed_form_precond_loss,
    derive_precond_loss,
    difference_to_closed_form,
    generated_precond_functions,
    precond_symbols,
    reduction_to_isotropic,
)


@pytest.mark.parametrize("H, d, per_head", [(2, 2, False), (2, 1, True)])
def test_derived_equals_closed_form(H, d, per_head):
    assert difference_to_closed_form(H, d, per_head=per_head) == 0


@pytest.mark.parametrize("H, d, per_head", [(2, 2, False), (2, 1, True), (3, 1, False)])
def test_reduces_exactly_to_isotropic_loss(H, d, per_head):
    assert reduction_to_isotropic(H, d, per_head=per_head) == 0


def test_derivation_is_not_vacuous():
    """A wrong closed form (isotropic constant c = (1+σ²)/L instead of c_Σ) is detected."""
    sy = precond_symbols(2, 2)
    S = sy.Sigma
    wrong = closed_form_precond_loss(2, 2) * 1  # copy
    c_right = (S.trace() / 2 + sy.sigma2) / sy.L
    c_wrong = (1 + sy.sigma2) / sy.L
    wrong = wrong + (c_wrong - c_right) * sy.mu[0] ** 2 * sp.exp(
        sy.omega[0] ** 2 * (S * sy.W[0].T * S * sy.W[0]).trace()
    )
    assert _canonical(derive_precond_loss(2, 2) - wrong) != 0


def test_reduction_numerically_matches_package_loss():
    """The lambdified derived loss at Σ = I, W = I equals the isotropic closed form from derive.symbolic."""
    gen = generated_precond_functions(2, 2)
    ps, st = problem_symbols(), state_symbols(2)
    iso = sp.lambdify((*st.omega, *st.mu, ps.d, ps.L, ps.sigma2), closed_form_loss(2))
    om, mu = np.array([0.31, -0.27]), np.array([1.3, -0.9])
    assert gen.loss(om, mu, np.eye(2), np.eye(2), 40, 0.1) == pytest.approx(iso(*om, *mu, 2, 40, 0.1), rel=1e-13)
