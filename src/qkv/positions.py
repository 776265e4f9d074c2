"""Positional information for attention, which on its own ignores the order of its keys.

- `sinusoidal_positions`: the fixed table that Vaswani et al. (2017) add to the token embeddings.
- `apply_rope`: rotary position embedding (Su et al., RoFormer): rotate pairs of channels of queries and keys
  by an angle proportional to the position, so that their dot product depends on the offset only; with a
  `scaling` rule of `qkv.rope_scaling` to run past the training length.
- `alibi_slopes`, `alibi_bias`: ALiBi (Press et al., 2022): no embedding at all, a per-head penalty on the
  scores that grows linearly with the distance between query and key.
"""

import math

import torch
from torch import Tensor

from qkv._checks import (
    check_bool,
    check_device,
    check_sizes,
    check_tensor,
    shape,
)
from qkv.masks import Alignment, _offset
from qkv.rope_scaling import rope_frequencies


# --8<-- [start:sinusoidal]
def sinusoidal_positions(n: int, dim: int, base: float = 10000.0) -> Tensor:
    """The sinusoidal position table of Vaswani et al. (2017), to be added to
    the token embeddings.

    Entry `[p, 2i]` is `sin(p / base**(2i/dim))` and entry `[p, 2i+1]` is `cos`
    of the same angle.

    Args:
        n: the number of positions, 0 to n - 1.
        dim: the model width (even).
        base: the longest wavelength is `2 pi base`.

    Returns:
        float32 `(n, dim)`.

    Raises:
        TypeError, ValueError: `n` not a non-negative int, `dim` not a positive
            even int, or `base` not above 1.
    """
    check_sizes(0, n=n)
    check_sizes(dim=dim)
    if dim % 2:
        raise ValueError(
            f"dim must be even (sin and cos come in pairs), got {dim}"
        )
    # (dim/2,): base**(-2i/dim)
    frequencies, _ = rope_frequencies(dim, base=base)
    # (n, dim/2)
    angles = torch.arange(n, dtype=torch.float64)[:, None] * frequencies
    table = torch.stack([angles.sin(), angles.cos()], dim=-1)  # (n, dim/2, 2)
    return table.flatten(-2).float()  # (n, dim): sin, cos, sin, cos, ...


# --8<-- [end:sinusoidal]


def apply_rope(
    x: Tensor,
    positions: Tensor | None = None,
    *,
    base: float = 10000.0,
    interleaved: bool = False,
    scaling: dict | None = None,
) -> Tensor:
    """Rotary position embedding: turn each pair of channels of `x` by `position * base**(-2i/D)`.

    Apply it to queries and keys (not values), after the projection and the split into heads; the score of a
    query at m and a key at n then depends on their contents and on `m - n` only.

    Args:
        x: `(..., N, D)` with D even, e.g. queries or keys `(B, H, N, D)`.
        positions: integer `(N,)`, the position of each of the N rows; `arange(N)` when None. Pass
            `arange(past, past + N)` for N new tokens after `past` cached ones.
        base: the frequency of pair i is `base**(-2i/D)`.
        interleaved: False pairs channel i with i + D/2 (the "rotate half" layout of GPT-NeoX and Llama);
            True pairs channel 2i with 2i + 1 (RoFormer's layout).
        scaling: None, or a rule that stretches the context, as `qkv.rope_frequencies` takes it (a dict in
            the format of a `transformers` config's `rope_parameters`); `"dynamic"` reads the sequence
            length as the largest position + 1 (at least 1). The rotated rows are multiplied by the rule's attention
            factor (YaRN's temperature; 1 otherwise).

    Returns:
        a tensor of the shape and dtype of `x`; the angles are computed in float32 at least.

    Raises:
        TypeError: `x` not a floating-point tensor, `positions` not an integer tensor, `base` not a number,
            `interleaved` not a bool.
        ValueError: `x` with fewer than 2 dimensions or an odd D, `positions` not of shape `(N,)`, `base` not
            above 1, a `scaling` that `rope_frequencies` refuses.
    """
    check_tensor("x", x, min_dim=2)
    length, dim = x.shape[-2:]
    if dim % 2:
        raise ValueError(
            f"x must have an even last dimension D (channels turn in pairs), got {shape(x)}"
        )
    if positions is None:
        positions = torch.arange(length, device=x.device)
    _check_positions(positions, x)
    check_bool("interleaved", interleaved)
    dynamic = (
        isinstance(scaling, dict) and scaling.get("rope_type") == "dynamic"
    )
    seq_len = (
        max(int(positions.max()) + 1, 1)
        if dynamic and positions.numel()
        else None
    )
    frequencies, factor = rope_frequencies(
        dim, base=base, scaling=scaling, seq_len=seq_len
    )
    dtype = torch.promote_types(x.dtype, torch.float32)
    # (N, D/2)
    angles = positions.to(torch.float64)[:, None] * frequencies.to(x.device)
    cos, sin = (
        (factor * angles.cos()).to(dtype),
        (factor * angles.sin()).to(dtype),
    )
    return _rotate(x.to(dtype), cos, sin, interleaved).to(x.dtype)


# --8<-- [start:rope]
def _rotate(x: Tensor, cos: Tensor, sin: Tensor, interleaved: bool) -> Tensor:
    """Turn pair i of every row,
    `(x1, x2) -> (x1 cos - x2 sin, x1 sin + x2 cos)`, by its row's angle."""
    if interleaved:  # pairs (0, 1), (2, 3), ...
        x1, x2 = x[..., 0::2], x[..., 1::2]  # (..., N, D/2) each
    else:  # pairs (0, D/2), (1, D/2 + 1), ...
        x1, x2 = x.chunk(2, dim=-1)  # (..., N, D/2) each
    turned = (x1 * cos - x2 * sin, x1 * sin + x2 * cos)
    if interleaved:
        # (..., N, D/2, 2) -> (..., N, D)
        return torch.stack(turned, dim=-1).flatten(-2)
    return torch.cat(turned, dim=-1)  # (..., N, D)


# --8<-- [end:rope]


def _check_positions(positions: object, x: Tensor) -> None:
    """Raise unless `positions` is an integer `(N,)` tensor on `x`'s device, N being `x`'s rows."""
    if not isinstance(positions, Tensor):
        raise TypeError(
            f"positions must be a torch.Tensor, got {type(positions).__name__}"
        )
    if (
        positions.is_floating_point()
        or positions.is_complex()
        or positions.dtype == torch.bool
    ):
        raise TypeError(
            f"positions must be an integer tensor, got dtype {positions.dtype}"
        )
    if positions.shape != x.shape[-2:-1]:
        raise ValueError(
            f"positions must be (N,) with N = {x.size(-2)} rows of x {shape(x)}, got {shape(positions)}"
        )
    if positions.device != x.device:
        raise ValueError(
            f"positions is on {positions.device} but x is on {x.device}"
        )


# --8<-- [start:alibi]
def alibi_slopes(num_heads: int) -> Tensor:
    """The per-head slopes of ALiBi (Press et al., 2022): a geometric sequence
    that starts at and falls by `2**(-8/H)`, so 8 heads get 1/2, 1/4, ...,
    1/256.

    When H is not a power of two, the first `2**floor(log2 H)` heads take that
    power's slopes, and the others take every other slope of the sequence for
    twice that power (the rule of the paper's code).

    Args:
        num_heads: H.

    Returns:
        float32 `(H,)`, from the steepest slope down.

    Raises:
        TypeError, ValueError: `num_heads` not a positive int.
    """
    check_sizes(num_heads=num_heads)
    power = 2 ** math.floor(math.log2(num_heads))
    slopes = _geometric_slopes(power)
    extra = _geometric_slopes(2 * power)[0::2][: num_heads - power]
    return torch.cat([slopes, extra]).float()


def _geometric_slopes(heads: int) -> Tensor:
    """`(heads,)`: `2**(-8/heads * k)` for k = 1 .. heads, in float64."""
    return 2.0 ** (
        -8.0 / heads * torch.arange(1, heads + 1, dtype=torch.float64)
    )


# --8<-- [end:alibi]


def alibi_bias(
    num_heads: int,
    q_len: int,
    k_len: int | None = None,
    device: torch.device | str | None = None,
    *,
    alignment: Alignment = "top_left",
) -> Tensor:
    """ALiBi's bias: `-slope_h * (i + offset - j)`, added to the scores of head h, query i and key j.

    It is linear in the distance from query to key, zero on the query's own position and more negative the
    further back the key lies. Use it with a causal mask of the same alignment: above the diagonal (keys in the
    query's future) it is positive, and the mask must hide those keys.

    Args:
        num_heads: H.
        q_len: L, the number of queries.
        k_len: S, the number of keys; `q_len` when None.
        device: where to make the bias.
        alignment: `"top_left"` (offset 0) or `"bottom_right"` (offset `S - L`: queries are the last L of the
            S positions, as when new tokens meet cached keys), as in `qkv.causal_mask`.

    Returns:
        float32 `(H, L, S)`, broadcastable to the scores `(B, H, L, S)`.

    Raises:
        TypeError, ValueError: sizes that are not ints of the right sign, an unknown `alignment`, or a
            `device` torch does not know.
    """
    k_len = q_len if k_len is None else k_len
    check_sizes(0, q_len=q_len, k_len=k_len)
    check_device(device)
    slopes = alibi_slopes(num_heads).to(device)  # (H,)
    query_pos = torch.arange(q_len, device=device)[:, None] + _offset(
        q_len, k_len, alignment
    )
    key_pos = torch.arange(k_len, device=device)[None, :]
    # (H, L, S); -slope * distance, no -0.0
    return slopes[:, None, None] * (key_pos - query_pos)
