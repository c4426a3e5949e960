"""Derive: the symbolic (sympy) derivation of the approximate loss and its numpy code generation (docs/theory.md#approximate-loss)."""
