"""Bring your own model: read attention models trained elsewhere into the package's parameterisation.

Every importer returns an :class:`ImportedAttention` (the circuits ``KQ``, ``OV`` of each head, the
conventions it assumed and, where the checkpoint stores them, the per-head factors).
"""

from reduced_dynamics.importers._canonical import FORMATS, CheckpointError, ImportedAttention

__all__ = ["FORMATS", "CheckpointError", "ImportedAttention"]
