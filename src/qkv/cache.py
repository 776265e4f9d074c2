"""A key-value cache: the keys and values of the tokens a decoder has already seen, kept for the next ones.

In autoregressive decoding each new token attends to every earlier token. Their keys and values do not change
(a causal model never lets an earlier token see a later one), so they are computed once, appended here, and
read back at every step instead of being recomputed from the whole sequence.

A stream longer than the cache can hold must forget some tokens: `streaming_window` keeps the first few and
the most recent ones, as StreamingLLM does (Xiao et al., 2024).
"""

import torch
from torch import Tensor

from qkv._checks import (
    check_cache_update,
    check_sizes,
    check_tensor,
)


class KVCache:
    """The keys and values of one attention layer, appended along the sequence one call at a time.

    Tensors are `(B, H, T, D)`: batch, heads (key-value heads, with grouped-query attention), tokens and head
    size; values may have a head size of their own, `Dv`. Every update must agree with what the cache holds on
    `B`, `H`, `D`, `Dv`, dtype and device. Each update copies the whole cache into a new tensor (`torch.cat`):
    simple, and fine for a few hundred tokens; a production cache preallocates its maximum length instead.

    Example:
        >>> cache = KVCache()
        >>> k, v = cache.update(torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8))  # prefill: 5 tokens
        >>> k, v = cache.update(torch.randn(1, 2, 1, 8), torch.randn(1, 2, 1, 8))  # decode: 1 more
        >>> k.shape, len(cache)
        (torch.Size([1, 2, 6, 8]), 6)
    """

    def __init__(self) -> None:
        self.key: Tensor | None = None  # (B, H, T, D)
        self.value: Tensor | None = None  # (B, H, T, Dv)

    def __len__(self) -> int:
        """T, the number of tokens cached so far."""
        return 0 if self.key is None else self.key.size(-2)

    # --8<-- [start:update]
    def update(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Append the keys and values of new tokens and return those of every
        token so far.

        Args:
            key: `(B, H, T_new, D)`.
            value: `(B, H, T_new, Dv)`.

        Returns:
            `(keys, values)`: `(B, H, T, D)` and `(B, H, T, Dv)` with
            `T = len(self)` after the update, the tokens in the order they were
            appended.

        Raises:
            TypeError: a key or value that is not a floating-point tensor, or a
                dtype that differs.
            ValueError: a key or value that is not 4-D, key and value that
                disagree on `(B, H, T_new)`, or a batch, head count, head size
                or device that differs from what the cache holds.
        """
        self._check(key, value)
        if self.key is None:
            self.key, self.value = key, value
        else:
            # (B, H, T, D) -> (B, H, T + T_new, D)
            self.key = torch.cat([self.key, key], dim=-2)
            # (B, H, T + T_new, Dv)
            self.value = torch.cat([self.value, value], dim=-2)
        return self.key, self.value

    # --8<-- [end:update]

    def crop(self, length: int) -> None:
        """Keep the first `length` tokens and forget the rest (drafted tokens that were rejected, say).

        Raises:
            TypeError, ValueError: `length` not an int in `[0, len(self)]`.
        """
        check_sizes(0, length=length)
        if length > len(self):
            raise ValueError(
                f"length must be at most the {len(self)} tokens cached, got {length}"
            )
        if self.key is not None:
            self.key, self.value = (
                self.key[..., :length, :],
                self.value[..., :length, :],
            )

    def _check(self, key: Tensor, value: Tensor) -> None:
        check_cache_update(
            ("B", "H", "T", "D"),
            {"key": key, "value": value},
            {"cached key": self.key, "cached value": self.value},
        )


# --8<-- [start:streaming]
def streaming_window(x: Tensor, window: int, sinks: int = 4) -> Tensor:
    """The tokens a cache of `window` keeps of a stream: the first `sinks`, then
    the most recent ones.

    StreamingLLM's rule (Xiao et al., 2024): the first tokens stay because
    models put much of their attention on them; the rest is a sliding window.
    Until the stream outgrows the window, all is kept.

    Args:
        x: `(..., T, D)` keys or values, in the order the tokens came.
        window: the most tokens kept.
        sinks: how many of the first tokens always stay, below `window`; 0 gives
            a plain sliding window.

    Returns:
        `(..., min(T, window), D)`: the first `sinks` tokens, then the last
        `window - sinks`, in order.

    Raises:
        TypeError, ValueError: `x` not a floating-point tensor of 2 dimensions
            or more; `window` not a positive int; `sinks` not an int in
            `[0, window)`.
    """
    check_tensor("x", x, min_dim=2)
    check_sizes(window=window)
    check_sizes(0, sinks=sinks)
    if sinks >= window:
        raise ValueError(
            f"sinks ({sinks}) must be below window ({window}) to fit new tokens"
        )
    if x.size(-2) <= window:
        return x
    # (..., window - sinks, D)
    recent = x[..., x.size(-2) - (window - sinks) :, :]
    return torch.cat([x[..., :sinks, :], recent], dim=-2)  # (..., window, D)


# --8<-- [end:streaming]
