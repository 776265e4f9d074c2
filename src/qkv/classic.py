"""The two classic scoring functions of sequence-to-sequence attention: additive and multiplicative.

Both modules score every (query, key) pair, turn the scores into weights with a softmax over the keys, and
return the weighted sum of the values. `query` is `(B, L, Dq)`, `keys` `(B, S, Dk)`, `values` `(B, S, Dv)`;
the optional `mask` is bool `(B, S)` with True = may attend. A query with no allowed key gets zero weights.
"""

from typing import Literal

import torch
from torch import Tensor, nn

from qkv._checks import check_same_dtype_and_device, check_tensor, shape
from qkv.functional import safe_softmax


class AdditiveAttention(nn.Module):
    """Bahdanau attention: a one-layer network scores each pair, `e = v^T tanh(W q + U k + b)`.

    Args:
        query_dim: Dq, the size of each query (the decoder state).
        key_dim: Dk, the size of each key (the encoder annotation).
        hidden_dim: the width of the scoring network.
    """

    def __init__(self, query_dim: int, key_dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.query_proj = nn.Linear(query_dim, hidden_dim, bias=False)  # W
        self.key_proj = nn.Linear(key_dim, hidden_dim)  # U and b
        self.score = nn.Linear(hidden_dim, 1, bias=False)  # v

    # --8<-- [start:additive]
    def scores(self, query: Tensor, keys: Tensor) -> Tensor:
        """`e_ij = v^T tanh(W q_i + U k_j + b)`: `(B, L, Dq), (B, S, Dk) -> (B, L, S)`."""
        q = self.query_proj(query)[:, :, None, :]  # (B, L, Dq) -> (B, L, 1, hidden)
        k = self.key_proj(keys)[:, None, :, :]  # (B, S, Dk) -> (B, 1, S, hidden)
        return self.score(torch.tanh(q + k)).squeeze(-1)  # (B, L, S, hidden) -> (B, L, S)

    # --8<-- [end:additive]

    def forward(
        self, query: Tensor, keys: Tensor, values: Tensor, mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Attend from each query over the keys.

        Args:
            query: `(B, L, Dq)`.
            keys: `(B, S, Dk)`.
            values: `(B, S, Dv)`.
            mask: bool `(B, S)`, True = may attend.

        Returns:
            `(context (B, L, Dv), weights (B, L, S))`.

        Raises:
            TypeError, ValueError: inputs or mask of the wrong type or shape.
        """
        _check_classic(
            query, keys, values, mask, self.query_proj.in_features, self.key_proj.in_features
        )
        return _attend(self.scores(query, keys), values, mask)


class LuongAttention(nn.Module):
    """Luong (multiplicative) attention with one of its three scores.

    - `"dot"`: `e = q^T k`;
    - `"general"`: `e = q^T W k`;
    - `"concat"`: `e = v^T tanh(W [q; k])`.

    Args:
        dim: the size of queries and keys alike.
        score: which of the three scores.
    """

    def __init__(self, dim: int, score: Literal["dot", "general", "concat"] = "dot") -> None:
        super().__init__()
        if score not in ("dot", "general", "concat"):
            raise ValueError(f"score must be 'dot', 'general' or 'concat', got {score!r}")
        self.dim = dim
        self.kind = score
        if score == "general":
            self.weight_proj = nn.Linear(dim, dim, bias=False)  # W
        if score == "concat":
            self.concat_proj = nn.Linear(2 * dim, dim, bias=False)  # W
            self.score = nn.Linear(dim, 1, bias=False)  # v

    # --8<-- [start:luong]
    def scores(self, query: Tensor, keys: Tensor) -> Tensor:
        """The chosen score of every pair: `(B, L, D), (B, S, D) -> (B, L, S)`."""
        if self.kind == "dot":
            return query @ keys.transpose(1, 2)  # (B, L, D) @ (B, D, S) -> (B, L, S)
        if self.kind == "general":
            return query @ self.weight_proj(keys).transpose(1, 2)  # q^T (W k)
        pairs = torch.cat(  # every [q_i; k_j]: (B, L, S, 2D)
            torch.broadcast_tensors(query[:, :, None, :], keys[:, None, :, :]), dim=-1
        )
        return self.score(torch.tanh(self.concat_proj(pairs))).squeeze(-1)  # (B, L, S)

    # --8<-- [end:luong]

    def forward(
        self, query: Tensor, keys: Tensor, values: Tensor, mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Attend from each query over the keys.

        Args:
            query: `(B, L, D)`.
            keys: `(B, S, D)`.
            values: `(B, S, Dv)`.
            mask: bool `(B, S)`, True = may attend.

        Returns:
            `(context (B, L, Dv), weights (B, L, S))`.

        Raises:
            TypeError, ValueError: inputs or mask of the wrong type or shape.
        """
        _check_classic(query, keys, values, mask, self.dim, self.dim)
        return _attend(self.scores(query, keys), values, mask)


def _attend(scores: Tensor, values: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
    """Mask the `(B, L, S)` scores, softmax over the keys, and weigh the `(B, S, Dv)` values."""
    if mask is not None:
        scores = scores.masked_fill(~mask[:, None, :], float("-inf"))  # (B, S) -> (B, 1, S)
    weights = safe_softmax(scores)
    return weights @ values, weights  # (B, L, S) @ (B, S, Dv) -> (B, L, Dv)


def _check_classic(
    query: Tensor, keys: Tensor, values: Tensor, mask: Tensor | None, query_dim: int, key_dim: int
) -> None:
    for name, x in (("query", query), ("keys", keys), ("values", values)):
        check_tensor(name, x, min_dim=3)
        if x.dim() != 3:
            raise ValueError(f"{name} must be 3-D (B, length, features), got shape {shape(x)}")
    check_same_dtype_and_device(query=query, keys=keys, values=values)
    if query.size(-1) != query_dim:
        raise ValueError(
            f"query has {query.size(-1)} features but the module expects {query_dim}: {shape(query)}"
        )
    if keys.size(-1) != key_dim:
        raise ValueError(
            f"keys have {keys.size(-1)} features but the module expects {key_dim}: {shape(keys)}"
        )
    if keys.shape[:2] != values.shape[:2]:
        raise ValueError(
            f"keys and values disagree on (B, S): keys {shape(keys)} vs values {shape(values)}"
        )
    if query.size(0) != keys.size(0):
        raise ValueError(
            f"query and keys disagree on the batch size: query {shape(query)} vs keys {shape(keys)}"
        )
    if mask is not None:
        if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
            raise TypeError(
                f"mask must be a bool tensor (True = may attend), got {getattr(mask, 'dtype', mask)}"
            )
        if mask.shape != keys.shape[:2]:
            raise ValueError(f"mask must be (B, S) = {tuple(keys.shape[:2])}, got {shape(mask)}")
