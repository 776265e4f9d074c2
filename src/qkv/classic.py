"""The two classic scoring functions of sequence-to-sequence attention: additive and multiplicative.

Both modules score every (query, key) pair, turn the scores into weights with a softmax over the keys, and
return the weighted sum of the values. `query` is `(B, L, Dq)`, `keys` `(B, S, Dk)`, `values` `(B, S, Dv)`;
the optional `mask` is `(B, S)`, bool (True = may attend) or float (added to the scores). A query with no
allowed key gets zero weights.
"""

import functools
from collections.abc import Callable
from typing import Literal

import torch
from torch import Tensor, nn

from qkv._checks import (
    check_batch_first,
    check_key_mask,
    check_module_input,
    check_sizes,
)
from qkv.functional import safe_softmax


class _PairScoring(nn.Module):
    """What both classic attentions share: score every pair, mask, softmax over the keys, weigh the values.

    A subclass sets `query_dim` and `key_dim` and defines `scores(query, keys) -> (B, L, S)`: the formula
    alone, as the articles show it. The class wraps it with the checks of `forward`, so that a reader who
    calls `module.scores` gets the same messages; `forward` checks once and calls the formula.
    """

    query_dim: int
    key_dim: int
    _formula: Callable[..., Tensor]  # the subclass's own `scores`, unchecked

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        formula = cls.scores

        @functools.wraps(formula)
        def scores(self: _PairScoring, query: Tensor, keys: Tensor) -> Tensor:
            # keys stand in for the values: no value is read
            self._check(query, keys, keys)
            return formula(self, query, keys)

        cls._formula, cls.scores = formula, scores

    def _check(self, query: Tensor, keys: Tensor, values: Tensor) -> None:
        """Raise unless query `(B, L, Dq)`, keys `(B, S, Dk)` and values fit the module and each other."""
        features = (self.query_dim, self.key_dim, None)
        check_batch_first(
            ("query", "keys", "values"), (query, keys, values), features
        )
        check_module_input("query", query, self)

    def forward(
        self,
        query: Tensor,
        keys: Tensor,
        values: Tensor,
        mask: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Attend from each query over the keys.

        Args:
            query: `(B, L, Dq)`, of the module's dtype and device (any, for a module without parameters).
            keys: `(B, S, Dk)`.
            values: `(B, S, Dv)`.
            mask: `(B, S)`, bool (True = may attend) or float (added to the scores); a dimension of size 1
                broadcasts.

        Returns:
            `(context (B, L, Dv), weights (B, L, S))`; a query with no allowed key gets zeros in both.

        Raises:
            TypeError: inputs or mask of the wrong type or dtype (the inputs' must be the parameters').
            ValueError: inputs or mask of the wrong shape or device.
        """
        self._check(query, keys, values)
        if mask is not None:
            check_key_mask("mask", mask, query, keys, key_name="keys")
            mask = mask[..., None, :]  # (B, S) -> (B, 1, S)
        scores = self._formula(query, keys)  # (B, L, S), checked above
        if mask is not None and mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        elif mask is not None:
            scores = scores + mask.to(scores.dtype)
        weights = safe_softmax(scores)
        return weights @ values, weights  # (B, L, S) @ (B, S, Dv) -> (B, L, Dv)


class AdditiveAttention(_PairScoring):
    """Bahdanau attention: a one-layer network scores each pair, `e = v^T tanh(W q + U k + b)`.

    Args:
        query_dim: Dq, the size of each query (the decoder state).
        key_dim: Dk, the size of each key (the encoder annotation).
        hidden_dim: the width of the scoring network.

    Raises:
        TypeError, ValueError: a size that is not a positive int.
    """

    def __init__(self, query_dim: int, key_dim: int, hidden_dim: int) -> None:
        super().__init__()
        check_sizes(query_dim=query_dim, key_dim=key_dim, hidden_dim=hidden_dim)
        self.query_dim, self.key_dim = query_dim, key_dim
        self.query_proj = nn.Linear(query_dim, hidden_dim, bias=False)  # W
        self.key_proj = nn.Linear(key_dim, hidden_dim)  # U and b
        self.score = nn.Linear(hidden_dim, 1, bias=False)  # v

    # --8<-- [start:additive]
    def scores(self, query: Tensor, keys: Tensor) -> Tensor:
        """`e_ij = v^T tanh(W q_i + U k_j + b)`:
        `(B, L, Dq), (B, S, Dk) -> (B, L, S)`."""
        # (B, L, Dq) -> (B, L, 1, hidden)
        q = self.query_proj(query)[:, :, None, :]
        # (B, S, Dk) -> (B, 1, S, hidden)
        k = self.key_proj(keys)[:, None, :, :]
        # (B, L, S, hidden) -> (B, L, S)
        return self.score(torch.tanh(q + k)).squeeze(-1)

    # --8<-- [end:additive]


class LuongAttention(_PairScoring):
    """Luong (multiplicative) attention with one of its three scores.

    - `"dot"`: `e = q^T k`;
    - `"general"`: `e = q^T W k`;
    - `"concat"`: `e = v^T tanh(W [q; k])`.

    Args:
        dim: the size of queries and keys alike.
        score: which of the three scores.

    Raises:
        TypeError, ValueError: a `dim` that is not a positive int, or an unknown `score`.
    """

    def __init__(
        self, dim: int, score: Literal["dot", "general", "concat"] = "dot"
    ) -> None:
        super().__init__()
        check_sizes(dim=dim)
        if score not in ("dot", "general", "concat"):
            raise ValueError(
                f"score must be 'dot', 'general' or 'concat', got {score!r}"
            )
        self.query_dim = self.key_dim = dim
        self.kind = score
        if score == "general":
            self.weight_proj = nn.Linear(dim, dim, bias=False)  # W
        if score == "concat":
            self.concat_proj = nn.Linear(2 * dim, dim, bias=False)  # W
            self.score = nn.Linear(dim, 1, bias=False)  # v

    # --8<-- [start:luong]
    def scores(self, query: Tensor, keys: Tensor) -> Tensor:
        """The chosen score of every pair:
        `(B, L, D), (B, S, D) -> (B, L, S)`."""
        if self.kind == "dot":
            # (B, L, D) @ (B, D, S) -> (B, L, S)
            return query @ keys.transpose(1, 2)
        if self.kind == "general":
            return query @ self.weight_proj(keys).transpose(1, 2)  # q^T (W k)
        pairs = torch.cat(  # every [q_i; k_j]: (B, L, S, 2D)
            torch.broadcast_tensors(query[:, :, None, :], keys[:, None, :, :]),
            dim=-1,
        )
        # (B, L, S)
        return self.score(torch.tanh(self.concat_proj(pairs))).squeeze(-1)

    # --8<-- [end:luong]
