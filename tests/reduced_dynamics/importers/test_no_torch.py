"""Without torch: the importers package imports, array files load, and a .pt file says which extra to install.

Each probe runs in a fresh interpreter at the repository root (so this checkout's package is the one
imported). ``sys.modules["torch"] = None`` makes every ``import torch`` fail, as on a machine
without the extra.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from reduced_dynamics.importers import export
from reduced_dynamics.model.attention import AttentionModel

ROOT = Path(__file__).resolve().parents[3]
BLOCK_TORCH = "import sys; sys.modules['torch'] = None; sys.modules['transformer_lens'] = None\n"


def _run(args, code: str = "") -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, *args] + (["-c", code] if code else []),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_importing_the_importers_loads_no_torch():
    """``python -X importtime -c "import reduced_dynamics.importers"`` lists no torch, safetensors or transformer_lens."""
    proc = _run(["-X", "importtime"], "import reduced_dynamics.importers")
    assert proc.returncode == 0, proc.stderr
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if "|" in line]
    assert "reduced_dynamics.importers" in imported
    heavy = [m for m in imported if m.split(".")[0] in ("torch", "safetensors", "transformer_lens")]
    assert not heavy, heavy


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The same package model as .npz, .safetensors and .pt."""
    folder = tmp_path_factory.mktemp("no_torch")
    m = AttentionModel(2, 3)
    p = m.init(seed=0)
    for name, fmt in (("m.npz", "npz"), ("m.safetensors", "safetensors"), ("m.pt", "authors")):
        export(m, folder / name, format=fmt, params=p)
    return folder, m.circuits(p)[0]


@pytest.mark.parametrize("name", ["m.npz", "m.safetensors"])
def test_array_files_load_without_torch(files, name):
    folder, KQ = files
    out = folder / "KQ.npy"
    code = BLOCK_TORCH + (
        "import numpy as np\n"
        "from reduced_dynamics.importers import load\n"
        f"np.save({str(out)!r}, load({str(folder / name)!r}).KQ)\n"
        "assert 'torch' not in [m.split('.')[0] for m in sys.modules if sys.modules[m] is not None]\n"
    )
    proc = _run([], code)
    assert proc.returncode == 0, proc.stderr
    assert np.array_equal(np.load(out), KQ)


def test_pt_file_without_torch_names_the_extra(files):
    """One line, a CheckpointError (so a ValueError for the CLI), naming ``pip install 'reduced-dynamics[torch]'``."""
    folder, _ = files
    code = BLOCK_TORCH + (
        "from reduced_dynamics.importers import load, MissingExtraError\n"
        "try:\n"
        f"    load({str(folder / 'm.pt')!r})\n"
        "except MissingExtraError as exc:\n"
        "    assert isinstance(exc, ValueError) and isinstance(exc, ImportError)\n"
        "    print('MESSAGE=' + str(exc))\n"
    )
    proc = _run([], code)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("MESSAGE=")]
    assert len(lines) == 1 and "pip install 'reduced-dynamics[torch]'" in lines[0], proc.stdout
