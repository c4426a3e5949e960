r"""A PyTorch module in the paper authors' layout: :class:`~reduced_dynamics.importers.AuthorsAttention` (needs torch).

This module imports torch at its top; :mod:`reduced_dynamics.importers` loads it only when
``AuthorsAttention`` is first accessed, so ``import reduced_dynamics.importers`` stays torch-free.
Its ``state_dict()`` is what :func:`~reduced_dynamics.importers.from_authors` reads, and
``scripts/train_torch_paper.py`` trains it at the paper's scale.

References
----------
docs/theory.md#full-model
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["AuthorsAttention"]


class _AttentionLayer(nn.Module):
    """The authors' ``attention_layer``: ``q_proj, k_proj, v_proj`` (``nn.Linear(D, H·D)``) and ``o_proj``
    (``nn.Linear(H·D, n_out)``), no biases, built in that order (so ``torch.manual_seed`` fixes the init)."""

    def __init__(self, D: int, HD: int, n_out: int, dtype):
        super().__init__()
        self.q_proj = nn.Linear(D, HD, bias=False, dtype=dtype)
        self.k_proj = nn.Linear(D, HD, bias=False, dtype=dtype)
        self.v_proj = nn.Linear(D, HD, bias=False, dtype=dtype)
        self.o_proj = nn.Linear(HD, n_out, bias=False, dtype=dtype)


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"`{name}` must be a positive integer, got {value!r}")
    return value


class AuthorsAttention(nn.Module):
    r"""One-layer multi-head softmax attention in the paper authors' layout.

    .. math::

        \hat y_k = \sum_h W^o_{k,h}\, V_h \sum_{l=1}^{L} z_l\,
                   \mathrm{softmax}_l\big((K_h z_l)^\top (Q_h z_q) / \sqrt{D}\big)

    with ``z_l = (x_l, y_l)``, ``z_q = (x_q, 0)``, ``D = d + n_out``; the query attends to the
    context only. State dict: ``attention_layer.{q,k,v}_proj.weight`` of shape ``(H·D, D)`` (head
    ``h`` owns rows ``[hD, (h+1)D)``) and ``attention_layer.o_proj.weight`` of shape
    ``(n_out, H·D)``; no biases. Weights start from PyTorch's default ``nn.Linear``
    initialisation (``U(±1/√fan_in)``, drawn in the order q, k, v, o; ``o_proj`` has
    ``fan_in = H·D``, the package's ``AttentionModel.init`` uses ``D`` per head).

    :meth:`forward` evaluates the products in the cheaper order (the logit ``(K_h z_l)·q_h`` as
    ``z_l·(K_hᵀ q_h)``, the value sum ``Σ_l p_{h,l} V_h z_l`` as ``V_h Σ_l p_{h,l} z_l``): the same
    function of the same weights without the ``(n, L, H·D)`` keys and values, about 3× faster
    on CPU. :meth:`forward_reference` is the literal per-head form.

    Parameters
    ----------
    n_heads : int, >= 1
    d : int, >= 1
        Covariate dimension.
    n_out : int, >= 1
        Number of outputs (tasks); ``D = d + n_out``.
    dtype : torch.dtype, optional
        Parameter dtype (``torch.float32`` by default).

    Examples
    --------
    >>> import torch
    >>> m = AuthorsAttention(2, 3)
    >>> Z, xq = torch.randn(5, 10, 4), torch.randn(5, 3)
    >>> m(Z, xq).shape
    torch.Size([5])
    >>> sorted(m.state_dict())  # doctest: +NORMALIZE_WHITESPACE
    ['attention_layer.k_proj.weight', 'attention_layer.o_proj.weight',
     'attention_layer.q_proj.weight', 'attention_layer.v_proj.weight']
    """

    def __init__(self, n_heads: int, d: int, n_out: int = 1, *, dtype=None):
        super().__init__()
        self.n_heads = _positive_int("n_heads", n_heads)
        self.d = _positive_int("d", d)
        self.n_out = _positive_int("n_out", n_out)
        D = self.d + self.n_out
        self.attention_layer = _AttentionLayer(D, self.n_heads * D, self.n_out, dtype)

    @property
    def D(self) -> int:
        """Token dimension ``d + n_out`` (the authors' ``n_embd``)."""
        return self.d + self.n_out

    def _query(self, Z: torch.Tensor, x_q: torch.Tensor) -> torch.Tensor:
        D = self.D
        if Z.ndim != 3 or Z.shape[2] != D or x_q.shape != (Z.shape[0], self.d):
            raise ValueError(
                f"`Z` must have shape (n, L, {D}) and `x_q` shape (n, {self.d}), got {tuple(Z.shape)} and {tuple(x_q.shape)}"
            )
        return torch.cat([x_q, x_q.new_zeros(x_q.shape[0], self.n_out)], dim=-1)  # z_q = (x_q, 0), (n, D)

    def _read_out(self, heads: torch.Tensor) -> torch.Tensor:
        y = self.attention_layer.o_proj(heads.reshape(heads.shape[0], -1))
        return y.squeeze(-1) if self.n_out == 1 else y

    def forward(self, Z: torch.Tensor, x_q: torch.Tensor) -> torch.Tensor:
        """Predictions at the query position (products in the cheap order; see the class docstring).

        Parameters
        ----------
        Z : Tensor, shape (n, L, D)
            Context tokens ``(x_l, y_l)``.
        x_q : Tensor, shape (n, d)
            Query covariates; the query token is ``(x_q, 0)``.

        Returns
        -------
        Tensor, shape (n,) for ``n_out == 1``, else (n, n_out)
        """
        zq = self._query(Z, x_q)
        n, H, D = Z.shape[0], self.n_heads, self.D
        a = self.attention_layer
        q = a.q_proj(zq).view(n, H, D)
        u = torch.einsum("nhi,hij->nhj", q, a.k_proj.weight.view(H, D, D))  # K_hᵀ q_h
        p = torch.softmax(torch.bmm(u, Z.transpose(1, 2)) / math.sqrt(D), dim=-1)  # (n, H, L), over l
        zbar = torch.bmm(p, Z)  # (n, H, D): Σ_l p_{h,l} z_l
        heads = torch.einsum("hij,nhj->nhi", a.v_proj.weight.view(H, D, D), zbar)  # V_h zbar_h
        return self._read_out(heads)

    def forward_reference(self, Z: torch.Tensor, x_q: torch.Tensor) -> torch.Tensor:
        """The literal form of :meth:`forward`: per-head queries, keys and values, softmax over the L context tokens.

        Same parameters and return as :meth:`forward`; equal to it up to rounding.
        """
        zq = self._query(Z, x_q)
        n, L, D = Z.shape
        H, a = self.n_heads, self.attention_layer
        q = a.q_proj(zq).view(n, H, D)
        k = a.k_proj(Z).view(n, L, H, D)
        v = a.v_proj(Z).view(n, L, H, D)
        p = torch.softmax(torch.einsum("nhi,nlhi->nhl", q, k) / math.sqrt(D), dim=-1)
        return self._read_out(torch.einsum("nhl,nlhi->nhi", p, v))
