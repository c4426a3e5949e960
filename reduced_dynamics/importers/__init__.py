"""Bring your own model: read attention models trained elsewhere into the package's parameterisation.

Every importer returns an :class:`ImportedAttention` (the circuits ``KQ``, ``OV`` of each head, the
conventions it assumed and, where the checkpoint stores them, the per-head factors).
:func:`load` reads any supported checkpoint (file, state dict or live torch object) and
:func:`export` writes one, for round trips. Importing this package needs neither torch nor
safetensors: they are imported when a file or object needs them, and :class:`AuthorsAttention`
(a torch module) is loaded on first access. :func:`analyze` (loaded on first access too) holds an
imported model against the theory.
"""

from reduced_dynamics._lazy import attach
from reduced_dynamics.importers._canonical import FORMATS, CheckpointError, ImportedAttention, MissingExtraError
from reduced_dynamics.importers._load import detect_format, export, load
from reduced_dynamics.importers.arrays import from_arrays, read_arrays
from reduced_dynamics.importers.authors import from_authors
from reduced_dynamics.importers.mha import from_mha
from reduced_dynamics.importers.transformerlens import from_transformerlens

#: The checkpoint formats the importers read and write (``load(..., format=...)``, ``reduced-dynamics analyze --format``).
FORMATS = FORMATS  # the object of reduced_dynamics.importers._canonical, documented here

__all__ = [
    "FORMATS",
    "CheckpointError",
    "MissingExtraError",
    "ImportedAttention",
    "load",
    "export",
    "detect_format",
    "from_authors",
    "from_transformerlens",
    "from_mha",
    "from_arrays",
    "read_arrays",
    "AuthorsAttention",
    "analyze",
    "AnalysisReport",
]

#: names whose module imports torch: loaded on first access
_LAZY = {
    "AuthorsAttention": "reduced_dynamics.importers.authors_module",
    "analyze": "reduced_dynamics.importers.analysis",
    "AnalysisReport": "reduced_dynamics.importers.analysis",
}
__getattr__, __dir__ = attach(__name__, _LAZY)
