"""`analyze` on a checkpoint of each format, written by the framework that owns the format.

Each checkpoint is a real object's own file: ``torch.save`` of an ``AuthorsAttention`` and an
``nn.MultiheadAttention`` state dict, and the package's own ``.npz`` / ``.safetensors`` writers (a
one-layer attention-only ``HookedTransformer``'s is read in
``tests/reduced_dynamics/importers/test_transformerlens.py::test_analyze_command_reads_a_hooked_transformer_checkpoint``,
so that one test file imports transformer_lens). The command's JSON must carry the state that
the framework's own weights give (read off the torch tensors here, by hand: an independent route
from the importers' code), and the same prompts must give the same model risk as the in-memory
analysis of the live torch object.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from reduced_dynamics import Setting
from reduced_dynamics.cli import main
from reduced_dynamics.importers import AuthorsAttention, analyze, export, load

D_COV, HEADS = 3, 2
D = D_COV + 1
CHEAP = ["--n-prompts", "300", "--lengths", "10", "--L", "20", "--quiet", "--json"]


def run_json(capsys, *argv) -> dict:
    rc = main(["analyze", *argv, *CHEAP])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return json.loads(out)


def _omega_mu_by_hand(KQ: np.ndarray, ov: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ω_h = mean diag of the covariate block, μ_h = the response entry of OV (the theory's read-off)."""
    return np.array([np.diag(k[:D_COV, :D_COV]).mean() for k in KQ]), ov[:, D_COV]


def _authors():
    torch.manual_seed(0)
    net = AuthorsAttention(HEADS, D_COV, dtype=torch.float64)
    sd = {k: v.detach().numpy() for k, v in net.state_dict().items()}
    q, k, v = (sd[f"attention_layer.{n}_proj.weight"] for n in "qkv")
    o = next(val for key, val in sd.items() if key.endswith("o_proj.weight"))
    KQ = np.stack([k[h * D : (h + 1) * D].T @ q[h * D : (h + 1) * D] / math.sqrt(D) for h in range(HEADS)])
    ov = np.stack([v[h * D : (h + 1) * D].T @ o[0, h * D : (h + 1) * D] for h in range(HEADS)])
    return net, net.state_dict(), KQ, ov, []


def _mha():
    torch.manual_seed(1)
    net = torch.nn.MultiheadAttention(D, HEADS, bias=False, batch_first=True, dtype=torch.float64)
    W = net.in_proj_weight.detach().numpy()
    Wo = net.out_proj.weight.detach().numpy()
    hd = D // HEADS
    Wq, Wk, Wv = W[:D], W[D : 2 * D], W[2 * D :]
    KQ = np.stack([Wk[h * hd : (h + 1) * hd].T @ Wq[h * hd : (h + 1) * hd] / math.sqrt(hd) for h in range(HEADS)])
    ov = np.stack([Wv[h * hd : (h + 1) * hd].T @ Wo[D_COV, h * hd : (h + 1) * hd] for h in range(HEADS)])
    sd = net.state_dict()
    sd.pop("out_proj.bias", None)
    return net, sd, KQ, ov, ["--n-heads", str(HEADS)]


FRAMEWORKS = {"authors": _authors, "mha": _mha}


@pytest.mark.parametrize("fmt", sorted(FRAMEWORKS))
def test_analyze_reads_each_framework_checkpoint(capsys, tmp_path, fmt):
    net, sd, KQ, ov, extra = FRAMEWORKS[fmt]()
    path = tmp_path / f"{fmt}.pt"
    torch.save(sd, path)
    for how in ("auto", fmt):
        doc = run_json(capsys, str(path), "--format", how, *extra)
        omega, mu = _omega_mu_by_hand(KQ, ov)
        np.testing.assert_allclose(doc["state"]["omega"], omega, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(doc["state"]["mu"], mu, rtol=1e-12, atol=1e-15)
    # the file and the live object are one model: same prompts, same risk to the last digit
    live = analyze(
        load(net, n_heads=HEADS), setting=Setting(d=D_COV, L=20, sigma2=0.1), lengths=[10], n_prompts=300, seed=0
    )
    assert doc["risks"]["risk"]["model"] == pytest.approx(live.to_dict()["risks"]["risk"]["model"], rel=1e-12)


@pytest.mark.parametrize("fmt", ["npz", "safetensors"])
def test_analyze_reads_the_array_files(capsys, tmp_path, fmt):
    net, _, KQ, ov, _ = _authors()
    path = export(load(net), tmp_path / f"model.{fmt}", format=fmt)
    doc = run_json(capsys, str(path))
    omega, mu = _omega_mu_by_hand(KQ, ov)
    np.testing.assert_allclose(doc["state"]["omega"], omega, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(doc["state"]["mu"], mu, rtol=1e-12, atol=1e-15)


def test_mha_state_dict_without_n_heads_is_one_line_naming_the_flag(capsys, tmp_path):
    _, sd, *_ = _mha()
    path = tmp_path / "mha.pt"
    torch.save(sd, path)
    rc = main(["analyze", str(path), *CHEAP])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err.count("\n") == 1, err
    assert "--n-heads" in err
