"""Train: numpy attention models, the trainer and circuit extraction (docs/theory.md#full-model)."""
