"""Exact finite-L risk of the reduced model without Monte Carlo (docs/theory.md#exact-risk).

:mod:`reduced_dynamics.exact.evaluator` evaluates the risk, its gradient and an
error estimate by deterministic quadrature; :mod:`reduced_dynamics.exact.flow`
integrates the gradient flow of that risk.
"""
