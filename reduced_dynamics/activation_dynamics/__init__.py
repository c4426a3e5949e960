"""Other attention activations f (weights f(ω s_l) / Σ_j f(ω s_j)): the reduced model's loss, flow and limit.

Import from the submodules.

References
----------
docs/theory.md#other-activations
"""
