"""Estimate: prompts, predictors and the Monte Carlo risk engine (docs/theory.md#predictors)."""
