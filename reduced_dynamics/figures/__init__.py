"""The figure registry: one module per figure, each computing its data and drawing it."""
