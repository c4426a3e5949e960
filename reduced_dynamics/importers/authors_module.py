r"""A PyTorch module in the paper authors' layout: :class:`~reduced_dynamics.importers.AuthorsAttention` (needs torch).

This module imports torch at its top; :mod:`reduced_dynamics.importers` loads it only when
``AuthorsAttention`` is first accessed, so ``import reduced_dynamics.importers`` stays torch-free.
Its ``state_dict()`` is what :func:`~reduced_dynamics.importers.from_authors` reads.

References
----------
docs/theory.md#full-model
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["AuthorsAttention"]


class _Projections(nn.Module):
    """``q_proj, k_proj, v_proj``: ``nn.Linear(D, H·D, bias=False)`` each (the authors' ``attention_layer``)."""

    def __init__(self, D: int, HD: int, dtype):
        super().__init__()
        self.q_proj = nn.Linear(D, HD, bias=False, dtype=dtype)
        self.k_proj = nn.Linear(D, HD, bias=False, dtype=dtype)
        self.v_proj = nn.Linear(D, HD, bias=False, dtype=dtype)


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"`{name}` must be a positive integer, got {value!r}")
    return value


class AuthorsAttention(nn.Module):
    r"""One-layer multi-head softmax attention in the paper authors' layout.

    .. math::

        \hat y_k = \sum_h W^o_{k,h}\, V_h \sum_{l=1}^{L} z_l\,
                   \mathrm{softmax}_l\big((K_h z_l)^\top (Q_h z_q) / \sqrt{D}\big)

    with ``z_l = (x_l, y_l)``, ``z_q = (x_q, 0)``, ``D = d + n_out``. State dict:
    ``attention_layer.{q,k,v}_proj.weight`` of shape ``(H·D, D)`` (head ``h`` owns rows
    ``[hD, (h+1)D)``) and ``o_proj.weight`` of shape ``(n_out, H·D)``; no biases. Weights start
    from PyTorch's default ``nn.Linear`` initialisation (``U(±1/√fan_in)``; ``o_proj`` has
    ``fan_in = H·D``, the package's ``AttentionModel.init`` uses ``D`` per head).

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
    >>> sorted(m.state_dict())
    ['attention_layer.k_proj.weight', 'attention_layer.q_proj.weight', 'attention_layer.v_proj.weight', 'o_proj.weight']
    """

    def __init__(self, n_heads: int, d: int, n_out: int = 1, *, dtype=None):
        super().__init__()
        self.n_heads = _positive_int("n_heads", n_heads)
        self.d = _positive_int("d", d)
        self.n_out = _positive_int("n_out", n_out)
        D = self.d + self.n_out
        self.attention_layer = _Projections(D, self.n_heads * D, dtype)
        self.o_proj = nn.Linear(self.n_heads * D, self.n_out, bias=False, dtype=dtype)

    @property
    def D(self) -> int:
        """Token dimension ``d + n_out`` (the authors' ``n_embd``)."""
        return self.d + self.n_out

    def forward(self, Z: torch.Tensor, x_q: torch.Tensor) -> torch.Tensor:
        """Predictions at the query position.

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
        H, D = self.n_heads, self.D
        if Z.ndim != 3 or Z.shape[2] != D or x_q.shape != (Z.shape[0], self.d):
            raise ValueError(
                f"`Z` must have shape (n, L, {D}) and `x_q` shape (n, {self.d}), got {tuple(Z.shape)} and {tuple(x_q.shape)}"
            )
        n, L, _ = Z.shape
        zq = torch.cat([x_q, x_q.new_zeros(n, self.n_out)], dim=-1)  # (n, D)
        a = self.attention_layer
        q = a.q_proj(zq).view(n, H, D)
        k = a.k_proj(Z).view(n, L, H, D)
        v = a.v_proj(Z).view(n, L, H, D)
        s = torch.einsum("nhi,nlhi->nhl", q, k) / math.sqrt(D)
        p = torch.softmax(s, dim=-1)
        heads = torch.einsum("nhl,nlhi->nhi", p, v).reshape(n, H * D)
        y = self.o_proj(heads)
        return y[:, 0] if self.n_out == 1 else y
