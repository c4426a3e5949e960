"""
Train in PyTorch, analyse here
==============================

Most people who study in-context regression train their attention models in
PyTorch and keep a ``state_dict``. This page does exactly that — a one-layer,
two-head softmax attention network in the paper authors' layout, trained with
a plain PyTorch loop — then hands the saved file to the package:
:func:`~reduced_dynamics.importers.load` reads it into the package's
parameterisation (and says which conventions it assumed), and
:func:`~reduced_dynamics.importers.analyze` holds it against the theory —
pattern verdicts with their thresholds, the extracted reduced state
:math:`(\\omega, \\mu)` and where it sits, and the model's own risk paired
with debiased GD on fresh prompts (theory: :theory:`full-model`,
:theory:`emergent-patterns`).

Sizes are small so that the page builds in seconds: :math:`d = 5`,
:math:`L = 20`, 3000 Adam steps of 128 prompts. The paper's scale
(:math:`L = 40`, batch 256, :math:`5 \\cdot 10^5` steps) is
``scripts/train_torch_paper.py``; its two trained models are analysed in
:doc:`/findings/imported`. On the command line the analysis is
``reduced-dynamics analyze model.pt --L 20 --out DIR``.
"""

# %%
# A PyTorch model and a PyTorch training loop
# -------------------------------------------
# :class:`~reduced_dynamics.importers.AuthorsAttention` is an ordinary
# ``torch.nn.Module``: ``attention_layer.{q,k,v}_proj`` of shape
# :math:`(HD, D)` (head :math:`h` owns rows :math:`[hD, (h+1)D)`),
# ``attention_layer.o_proj`` of shape :math:`(1, HD)`, logits scaled by
# :math:`1/\sqrt{D}`, :math:`D = d + 1`, and the query attending to the
# context only. Any module with that state dict would do; the data are drawn
# in torch, as a PyTorch user would.
import math
import tempfile
import textwrap
import time
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import torch

from reduced_dynamics import Setting
from reduced_dynamics.importers import AuthorsAttention, analyze, load
from reduced_dynamics.plots.analysis import plot_analysis

torch.set_num_threads(1)
d, L, sigma2, batch = 5, 20, 0.1, 128


def sample(gen, n):
    """n prompts of the paper's data model: tokens (x_l, y_l), query x_q, target y_q."""
    X = torch.randn(n, L + 1, d, generator=gen)
    beta = torch.randn(n, d, 1, generator=gen) / math.sqrt(d)
    y = (X @ beta).squeeze(-1) + math.sqrt(sigma2) * torch.randn(
        n, L + 1, generator=gen
    )
    return torch.cat([X[:, :L], y[:, :L, None]], dim=2), X[:, L], y[:, L]


torch.manual_seed(0)
net = AuthorsAttention(n_heads=2, d=d)
opt = torch.optim.Adam(net.parameters(), lr=3e-3)
gen = torch.Generator().manual_seed(1)
start, losses = time.perf_counter(), []
for _ in range(3000):
    Z, x_q, y_q = sample(gen, batch)
    loss = torch.mean((net(Z, x_q) - y_q) ** 2)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
print(f"3000 Adam steps in {time.perf_counter() - start:.1f} s")
print(
    f"training loss, first / last 100 steps: {sum(losses[:100]) / 100:.3f} / "
    f"{sum(losses[-100:]) / 100:.3f}"
)

folder = Path(tempfile.mkdtemp())
torch.save(net.state_dict(), folder / "model.pt")
for key, value in net.state_dict().items():
    print(f"{key:<32} {tuple(value.shape)}")

# %%
# Import: the conventions, one sentence each
# ------------------------------------------
# ``load`` reads the file with ``torch.load(..., weights_only=True)``,
# recognises the layout from its keys and returns the circuits
# :math:`KQ_h = K_h^\top Q_h/\sqrt{D}` and :math:`OV_h = o_h^\top V_h` of each
# head. Every convention it had to assume is written down, so that a wrong
# guess is visible; the import's forward pass equals torch's.
imp = load(folder / "model.pt")
print(
    f"format {imp.source_format}: H = {imp.n_heads}, d = {imp.d}, n_out = {imp.n_out}"
)
for line in imp.conventions:
    print(textwrap.fill(line, 86, initial_indent=" - ", subsequent_indent="   "))
Z, x_q, _ = sample(torch.Generator().manual_seed(2), 1000)
with torch.no_grad():
    theirs = net(Z, x_q).double().numpy()
ours = imp.predict(Z.double().numpy(), x_q.double().numpy())
print(
    f"max |package − torch| on 1000 prompts: {abs(ours - theirs).max():.1e} "
    f"(float32 weights; max |ŷ| = {abs(theirs).max():.2f})"
)

# %%
# Analyse: the report
# -------------------
# The model is judged on the data model it was trained on (``Setting``), its
# risk measured on fresh prompts of several lengths, paired on common prompts
# with debiased GD at the optimal step :math:`\eta^*`, at the model's own
# step :math:`\eta_\mathrm{eff} = \mu^\top\omega`, with the reduced model at
# the extracted state and with Bayes ridge. The text is what
# ``reduced-dynamics analyze`` prints.
report = analyze(
    folder / "model.pt",
    setting=Setting(d=d, L=L, sigma2=sigma2),
    lengths=(10, 20, 40),
    n_prompts=20_000,
    seed=0,
)
print(report.summary())

# %%
# The figure
# ----------
# Top: each head's :math:`KQ_h` and :math:`OV_h` beside the theory's pattern
# at the extracted state (:math:`\omega_h I_d` on the covariate block,
# :math:`\mu_h` on the response entry; the hatched column multiplies the zero
# of the query token and is irrelevant). Bottom: the risk against the prompt
# length and the paired differences.
fig = plot_analysis(report)

# %%
# The same from TransformerLens
# -----------------------------
# A one-layer, attention-only ``HookedTransformer`` without LayerNorm reads
# the prompt as its residual stream :math:`[z_1, \dots, z_L, z_q]` and
# predicts in the query's response slot. Its causal attention lets the query
# attend to itself, which the paper's model forbids: the import keeps that
# term and says so (a warning, and a note in the report) rather than
# silently dropping it. Only the four attention weights are trained: the
# biases stay zero (a nonzero bias is outside the paper's model and is
# refused), and the embeddings are never used. Training is kept short here
# (1000 steps; TransformerLens is slower per step): read the verdicts as a
# snapshot of patterns still forming, and those that use :math:`\eta^*` or
# the solution manifold as a comparison with a model without the self term.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    cfg = HookedTransformerConfig(
        n_layers=1,
        d_model=d + 1,
        d_head=d + 1,
        n_heads=2,
        n_ctx=L + 1,
        d_vocab=2,
        attn_only=True,
        normalization_type=None,
        act_fn="relu",
        seed=0,
    )
    lens = HookedTransformer(cfg)
for name, p in lens.named_parameters():
    p.requires_grad_(name.startswith("blocks.0.attn.W_"))
opt = torch.optim.Adam([p for p in lens.parameters() if p.requires_grad], lr=3e-3)
start = time.perf_counter()
for _ in range(1000):
    Z, x_q, y_q = sample(gen, batch)
    resid = torch.cat([Z, torch.cat([x_q, torch.zeros(batch, 1)], 1)[:, None]], 1)
    pred = lens(resid, start_at_layer=0, stop_at_layer=1)[:, -1, d]
    loss = torch.mean((pred - y_q) ** 2)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(
    f"1000 Adam steps of the HookedTransformer in {time.perf_counter() - start:.1f} s"
)
lens_report = analyze(
    lens,
    setting=Setting(d=d, L=L, sigma2=sigma2),
    lengths=(20,),
    n_prompts=20_000,
    seed=0,
)
print(lens_report.message)
for line in load(lens).warnings:
    print(textwrap.fill(line, 86, initial_indent="warning: ", subsequent_indent="   "))
for name, v in lens_report.verdicts.items():
    value = float("nan") if v.value is None else v.value
    print(
        f"{'pass' if v.passed else 'FAIL'}  {name:<22} {value:.4g}  (threshold {v.threshold:g})"
    )
state = lens_report.state
print("omega =", state["omega"].round(4), " mu =", state["mu"].round(3))
plt.show()
