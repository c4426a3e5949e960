"""Check the full model against the reduced theory: SGD vs the flow, Monte Carlo flows, the single-head optimum."""
