"""Integrate: the approximate and corrected losses, their closed-form landmarks, the gradient flow and its diagnostics (docs/theory.md#gradient-flow)."""
