"""Attention that costs less than N^2: local windows, sparse patterns, axial and linearised attention.

Shapes follow `qkv.scaled_dot_product_attention`: `query` `(..., L, E)`, `key` `(..., S, E)`, `value`
`(..., S, Ev)`, where `...` is usually `(B, H)`. Boolean masks mean True = may attend.

- `sliding_window_attention`: exact attention under `qkv.sliding_window_mask`, computed chunk by chunk so that
  the keys outside each chunk's band are never touched: `O(N w)` instead of `O(N^2)`.
- `sparse_mask`: the patterns of the Sparse Transformer (strided, fixed; Child et al., 2019), Longformer
  (window + global; Beltagy et al., 2020) and BigBird (window + global + random; Zaheer et al., 2020) as masks;
  `block_sparse_attention` computes any mask block by block and skips the blocks it empties.
- `axial_attention`: attention along the rows or the columns of a 2-D grid (Ho et al., 2019).
- `linear_attention`: `phi(q)^T S / phi(q)^T z` with `phi(x) = elu(x) + 1` (Katharopoulos et al., 2020) or
  Performer's positive random features (`PerformerFeatures`, Choromanski et al., 2021); causal as a recurrence.
- `linformer_attention`: keys and values projected along the sequence to a fixed length (Wang et al., 2020).
"""

import math
from collections.abc import Callable
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from qkv._checks import (
    broadcast_shape,
    check_attention_inputs,
    check_bool,
    check_mask,
    check_sizes,
    check_tensor,
    shape,
)
from qkv.functional import safe_softmax, scaled_dot_product_attention

Pattern = Literal["strided", "fixed", "longformer", "bigbird"]
PATTERNS = ("strided", "fixed", "longformer", "bigbird")
AXES = ("row", "column")
FEATURE_MAPS = ("elu",)
FeatureMap = Literal["elu"] | Callable[[Tensor], Tensor]


# --- local attention ----------------------------------------------------------------------------------------


def sliding_window_attention(
    query: Tensor, key: Tensor, value: Tensor, window: int
) -> Tensor:
    """Exact attention under `qkv.sliding_window_mask(N, window)`, touching only the keys in the band.

    Queries are cut into chunks of `window` rows; a chunk starting at `s` needs keys `s - window + 1` to
    `s + window - 1` only, so each chunk scores `window` queries against `2 window - 1` keys: about
    `2 N window` scores instead of `N^2`.

    Args:
        query: `(..., N, E)`.
        key: `(..., N, E)`.
        value: `(..., N, Ev)`.
        window: how many keys each query sees, itself included (query `i` sees `i - window < j <= i`).

    Returns:
        `(..., N, Ev)`, equal to `scaled_dot_product_attention(..., attn_mask=sliding_window_mask(N, window))`;
        empty sizes follow it too (`N = 0`: empty; `E = 0`: every score is 0).

    Raises:
        TypeError, ValueError: as `qkv.scaled_dot_product_attention`; queries and keys of different lengths;
            a `window` that is not a positive int.
    """
    check_attention_inputs(query, key, value, None, False)
    check_sizes(window=window)
    _check_self_attention(query, key)
    if query.size(-2) == 0:
        return _no_attention(query, key, value)
    dtype = torch.promote_types(query.dtype, torch.float32)
    window = min(window, query.size(-2))  # a longer window sees no more keys
    return _sliding_window(
        query.to(dtype), key.to(dtype), value.to(dtype), window
    ).to(query.dtype)


def _sliding_window(
    query: Tensor, key: Tensor, value: Tensor, window: int
) -> Tensor:
    # --8<-- [start:sliding-window]
    n, chunk = query.size(-2), min(window, max(query.size(-2), 1))
    chunks = -(-n // chunk)  # ceil(N / chunk)
    pad_end = chunks * chunk - n
    # the band of chunk c: keys c*chunk - (window - 1) ... c*chunk + chunk - 1
    q = F.pad(query, (0, 0, 0, pad_end))  # (..., chunks * chunk, E)
    q = q.unflatten(-2, (chunks, chunk))  # (..., chunks, chunk, E)
    k = F.pad(key, (0, 0, window - 1, pad_end)).unfold(
        -2, chunk + window - 1, chunk
    )
    v = F.pad(value, (0, 0, window - 1, pad_end)).unfold(
        -2, chunk + window - 1, chunk
    )
    # (..., chunks, chunk + window - 1, E)
    k, v = (k.transpose(-2, -1), v.transpose(-2, -1))

    # (..., chunks, chunk, band)
    scores = q @ k.transpose(-2, -1) * _scale(query.size(-1))
    offset = (
        torch.arange(chunk)[:, None]
        - torch.arange(chunk + window - 1)[None, :]
        + window
        - 1
    )
    # (chunk, band): i - window < j <= i
    in_window = (offset >= 0) & (offset < window)
    position = (
        torch.arange(chunks)[:, None] * chunk
        + torch.arange(chunk + window - 1)
        - window
        + 1
    )
    real_key = (position >= 0) & (position < n)  # (chunks, band): not padding
    keep = in_window & real_key[:, None, :]  # (chunks, chunk, band)
    weights = safe_softmax(
        scores.masked_fill(~keep.to(scores.device), float("-inf"))
    )
    out = weights @ v  # (..., chunks, chunk, Ev)
    return out.flatten(-3, -2)[..., :n, :]  # (..., N, Ev)
    # --8<-- [end:sliding-window]


# --- sparse patterns ----------------------------------------------------------------------------------------


def sparse_mask(
    pattern: Pattern,
    length: int,
    window: int,
    *,
    num_global: int = 0,
    num_random: int = 0,
    generator: torch.Generator | None = None,
) -> Tensor:
    """A sparse attention pattern as an `(N, N)` keep mask: query `i` may attend key `j` where it is True.

    | pattern | query `i` keeps key `j` when | source |
    | --- | --- | --- |
    | `"strided"` | `j <= i` and (`i - j < window` or `(i - j) % window == 0`) | Child et al., 2019 |
    | `"fixed"` | `j <= i` and (`j // window == i // window` or `j % window == window - 1`) | Child et al., 2019 |
    | `"longformer"` | `abs(i - j) <= window`, or `i` or `j` among the first `num_global` tokens | Beltagy et al., 2020 |
    | `"bigbird"` | as longformer, plus `num_random` keys drawn at random for each query | Zaheer et al., 2020 |

    The Sparse Transformer's two patterns are causal (its stride and block length are `window`); the other two
    are bidirectional with a band of `window` keys on each side.

    Args:
        pattern: one of `"strided"`, `"fixed"`, `"longformer"`, `"bigbird"`.
        length: N, the number of positions.
        window: the stride or block length (strided, fixed), or the band's half-width (longformer, bigbird).
        num_global: how many leading tokens attend and are attended everywhere (longformer, bigbird).
        num_random: how many random keys each query gets (bigbird only).
        generator: the random generator for bigbird's keys.

    Returns:
        bool `(N, N)`, True = may attend.

    Raises:
        TypeError, ValueError: an unknown `pattern`, sizes that are not ints in range, or `num_global` /
            `num_random` given to a pattern that has none.
    """
    if pattern not in PATTERNS:
        raise ValueError(f"pattern must be one of {PATTERNS}, got {pattern!r}")
    check_sizes(0, length=length, num_global=num_global, num_random=num_random)
    check_sizes(window=window)
    _check_generator(generator)
    if num_global and pattern in ("strided", "fixed"):
        raise ValueError(
            f"the {pattern} pattern has no global tokens, got num_global={num_global}"
        )
    if num_random and pattern != "bigbird":
        raise ValueError(
            f"only bigbird draws random keys, got num_random={num_random}"
        )
    if num_random > length:
        raise ValueError(
            f"num_random={num_random} exceeds the number of keys {length}"
        )
    i = torch.arange(length)[:, None]  # (N, 1)
    j = torch.arange(length)[None, :]  # (1, N)
    # --8<-- [start:patterns]
    if pattern == "strided":
        return (j <= i) & ((i - j < window) | ((i - j) % window == 0))
    if pattern == "fixed":
        return (j <= i) & (
            (j // window == i // window) | (j % window == window - 1)
        )
    is_global = torch.arange(length) < num_global  # (N,)
    keep = ((i - j).abs() <= window) | is_global[:, None] | is_global[None, :]
    if pattern == "bigbird":
        chosen = torch.rand(length, length, generator=generator).argsort(
            dim=-1
        )[:, :num_random]
        # num_random random keys per query
        keep = keep.scatter(-1, chosen, True)
    return keep
    # --8<-- [end:patterns]


def block_layout(mask: Tensor, block_size: int) -> Tensor:
    """Which `block_size x block_size` tiles of a keep mask hold at least one True: the tiles worth computing.

    Args:
        mask: bool `(L, S)`, True = may attend.
        block_size: the tile's side; the last row and column of tiles may be partial.

    Returns:
        bool `(ceil(L / block_size), ceil(S / block_size))`.
    """
    _check_keep_mask(mask)
    check_sizes(block_size=block_size)
    rows, cols = -(-mask.size(0) // block_size), -(-mask.size(1) // block_size)
    padded = F.pad(
        mask,
        (
            0,
            cols * block_size - mask.size(1),
            0,
            rows * block_size - mask.size(0),
        ),
    )
    # (L/b, b, S/b, b)
    tiles = padded.reshape(rows, block_size, cols, block_size)
    return tiles.any(dim=3).any(dim=1)  # (L/b, S/b)


def block_sparse_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor,
    block_size: int = 64,
) -> Tensor:
    """Exact attention under a keep mask, computing only the tiles of scores that the mask does not empty.

    Each block of `block_size` queries gathers the key blocks its row of `block_layout(mask)` keeps and attends
    over them alone; the mask still applies inside the kept tiles.

    Args:
        query: `(..., L, E)`.
        key: `(..., S, E)`.
        value: `(..., S, Ev)`.
        mask: bool `(L, S)`, True = may attend; shared by every batch element and head.
        block_size: the side of a tile.

    Returns:
        `(..., L, Ev)`, equal to `scaled_dot_product_attention(..., attn_mask=mask)`; rows with no key are zeros,
        and empty sizes follow it too (`L = 0`: empty; `S = 0`: zeros; `E = 0`: every score is 0).

    Raises:
        TypeError, ValueError: as `qkv.scaled_dot_product_attention`; a mask that is not bool `(L, S)` on the
            query's device.
    """
    check_attention_inputs(query, key, value, None, False)
    _check_keep_mask(mask, (query.size(-2), key.size(-2)))
    check_mask("mask", mask, query)
    check_sizes(block_size=block_size)
    if query.size(-2) == 0 or key.size(-2) == 0:
        return _no_attention(query, key, value)
    dtype = torch.promote_types(query.dtype, torch.float32)
    out = _block_sparse(
        query.to(dtype), key.to(dtype), value.to(dtype), mask, block_size
    )
    return out.to(query.dtype)


def _block_sparse(
    query: Tensor, key: Tensor, value: Tensor, mask: Tensor, block_size: int
) -> Tensor:
    # --8<-- [start:block-sparse]
    # (L/b, S/b): tiles with at least one kept pair
    layout = block_layout(mask, block_size)
    block_of_key = (
        torch.arange(key.size(-2), device=mask.device) // block_size
    )  # (S,)
    scale = _scale(query.size(-1))
    out = []
    for row, kept_blocks in enumerate(layout):  # one block of queries at a time
        rows = slice(row * block_size, (row + 1) * block_size)
        # the keys of the kept tiles only
        keys = kept_blocks[block_of_key].nonzero().flatten()
        scores = (
            query[..., rows, :] @ key[..., keys, :].transpose(-2, -1) * scale
        )  # (..., b, kept)
        scores = scores.masked_fill(
            ~mask[rows, keys].to(scores.device), float("-inf")
        )
        out.append(safe_softmax(scores) @ value[..., keys, :])  # (..., b, Ev)
    return torch.cat(out, dim=-2)  # (..., L, Ev)
    # --8<-- [end:block-sparse]


# --- axial attention ----------------------------------------------------------------------------------------


def axial_attention(
    query: Tensor, key: Tensor, value: Tensor, axis: Literal["row", "column"]
) -> Tensor:
    """Attention along one axis of a 2-D grid of positions: each position sees its row, or its column.

    Args:
        query: `(..., R, C, E)`, a grid of R rows and C columns.
        key: `(..., R, C, E)`.
        value: `(..., R, C, Ev)`.
        axis: `"row"` (position `(r, c)` attends `(r, c')` for every `c'`) or `"column"` (`(r', c)`).

    Returns:
        `(..., R, C, Ev)`, equal to dense attention over the `R * C` positions in row-major order under
        `axial_mask(R, C, axis)`.

    Raises:
        TypeError, ValueError: as `qkv.scaled_dot_product_attention`; grids that differ, or an unknown `axis`.
    """
    if axis not in AXES:
        raise ValueError(f"axis must be one of {AXES}, got {axis!r}")
    for name, x in (("query", query), ("key", key), ("value", value)):
        check_tensor(name, x, min_dim=3)
    if (
        key.shape[-3:-1] != query.shape[-3:-1]
        or value.shape[-3:-1] != query.shape[-3:-1]
    ):
        raise ValueError(
            "query, key and value must share the grid (R, C) in dims -3 and -2: "
            f"query {shape(query)}, key {shape(key)}, value {shape(value)}"
        )
    # on the grids as given
    check_attention_inputs(query, key, value, None, False)
    # --8<-- [start:axial]
    # attend along R: make the columns the last-but-one dim
    if axis == "column":
        # (..., C, R, E)
        query, key, value = (x.transpose(-3, -2) for x in (query, key, value))
    # each row of the grid is a sequence
    out = scaled_dot_product_attention(query, key, value)
    return out.transpose(-3, -2) if axis == "column" else out  # (..., R, C, Ev)
    # --8<-- [end:axial]


def axial_mask(rows: int, cols: int, axis: Literal["row", "column"]) -> Tensor:
    """The keep mask of `axial_attention` over the `rows * cols` positions of a grid in row-major order.

    Returns:
        bool `(R C, R C)`: position `r * cols + c` may attend the positions of its row (`axis="row"`) or its
        column (`axis="column"`).
    """
    if axis not in AXES:
        raise ValueError(f"axis must be one of {AXES}, got {axis!r}")
    check_sizes(0, rows=rows, cols=cols)
    position = torch.arange(rows * cols)
    # (R C,): the row or column index
    line = position // cols if axis == "row" else position % cols
    return line[:, None] == line[None, :]


# --- linearised attention -----------------------------------------------------------------------------------


def elu_feature_map(x: Tensor) -> Tensor:
    """`phi(x) = elu(x) + 1`, positive everywhere (Katharopoulos et al., 2020): `(..., E) -> (..., E)`.

    Computed as `exp(min(x, 0)) + max(x, 0)`, the same function: `elu(x) + 1` itself rounds `exp(x) - 1 + 1` to
    0 from `x` near -17 in float32 (-37 in float64), where `exp(x)` still holds until -87 (-708).
    """
    check_tensor("x", x, min_dim=0)
    return torch.exp(x.clamp(max=0)) + x.clamp(min=0)


class PerformerFeatures:
    """Positive random features whose dot products estimate the softmax kernel (FAVOR+, Choromanski et al., 2021).

    `phi(x) = exp(W x' - |x'|^2 / 2) / sqrt(M)` with `x' = x / E^(1/4)` and `M` random rows `w ~ N(0, I)`, so that
    `E[phi(q) . phi(k)] = exp(q . k / sqrt(E))`: linear attention with these features estimates softmax
    attention. With `orthogonal`, the rows come in blocks of `E` mutually orthogonal directions (lengths still
    drawn from the Gaussian), which lowers the estimate's variance. Draw `W` from a generator of its own: rows
    that repeat the inputs' random numbers make the estimate far worse than chance.

    Each call subtracts a maximum of the exponent before exp(), so that the largest feature is 1/sqrt(M).
    Without it, inputs of large norm put whole rows of exponents far below 0 (at E = 64 and std 6, a row's
    largest of 256 is near -100): exp() underflows to 0 for every feature, and linear attention divides 0 by 0.
    Subtracting c multiplies phi by exp(-c); which c cancels?

    - A query: `out_i = phi(q_i)^T S / phi(q_i)^T z` is unchanged when phi(q_i) is multiplied by any positive
      number, so each query row may take its own maximum (`query=True`).
    - A key: phi(k_j) enters `S = sum_j phi(k_j) v_j^T` and `z = sum_j phi(k_j)` summed over j, so only one
      factor shared by every key of a sequence cancels: the maximum over all its positions and features
      (the default, which cancels for queries too: the features stay the estimator up to one constant).

    Either way the estimate is unchanged in exact arithmetic. What remains is underflow: a key whose exponents
    all lie about 87 below its sequence's maximum (708 in float64) is 0 in float32, which matters where it
    leaves a query's normaliser `phi(q_i)^T z_i` below the smallest normal number; `linear_attention` then
    refuses rather than return NaN or digits lost to underflow. In causal use the keys' maximum also looks at
    the future: a constant factor, so the result is the same, but a large future key pushes the past ones
    towards underflow, and the causal form gives up first (in float32 at E = 64, from about std 6 of the
    inputs, against about std 10 for the other).

    Args:
        head_dim: E, the size of the vectors the features are computed of.
        num_features: M, how many random features.
        orthogonal: draw the directions in orthogonal blocks.
        generator: the random generator for `W`.
    """

    def __init__(
        self,
        head_dim: int,
        num_features: int,
        *,
        orthogonal: bool = True,
        generator: torch.Generator | None = None,
    ) -> None:
        check_sizes(head_dim=head_dim, num_features=num_features)
        check_bool("orthogonal", orthogonal)
        _check_generator(generator)
        # (M, E)
        gaussian = torch.randn(num_features, head_dim, generator=generator)
        if orthogonal:
            blocks = [
                _random_rotation(head_dim, generator)
                for _ in range(-(-num_features // head_dim))
            ]
            # (M, E), orthonormal within a block
            directions = torch.cat(blocks)[:num_features]
            gaussian = directions * gaussian.norm(dim=-1, keepdim=True)
        self.projection = gaussian  # W, (M, E)

    def __repr__(self) -> str:
        head_dim, num_features = (
            self.projection.shape[1],
            self.projection.shape[0],
        )
        return f"PerformerFeatures(head_dim={head_dim}, num_features={num_features})"

    def __call__(self, x: Tensor, *, query: bool = False) -> Tensor:
        """`(..., N, E) -> (..., N, M)`, positive and at most `1/sqrt(M)`.

        Args:
            x: `(..., N, E)`, queries or keys.
            query: scale each row by its own maximum, which cancels for queries only (see the class); by
                default one maximum per sequence, which cancels for queries and keys alike.
        """
        check_tensor("x", x, min_dim=2)
        if x.size(-1) != self.projection.size(1):
            raise ValueError(
                f"{self!r} takes x of shape (..., N, head_dim), got {shape(x)}"
            )
        check_bool("query", query)
        # --8<-- [start:favor]
        x = x * x.size(-1) ** -0.25
        projected = x @ self.projection.to(x).T  # W x': (..., N, M)
        # |x'|^2 / 2: (..., N, 1)
        half_squared_norm = (x * x).sum(dim=-1, keepdim=True) / 2
        exponent = projected - half_squared_norm  # (..., N, M)
        # a constant factor that cancels (see the class): each query's own, or
        # one per sequence of keys
        # with no position, there is nothing to share
        per_sequence = not query and x.size(-2) > 0
        stabiliser = exponent.amax(
            dim=(-2, -1) if per_sequence else -1, keepdim=True
        )
        return torch.exp(exponent - stabiliser) / math.sqrt(
            self.projection.size(0)
        )
        # --8<-- [end:favor]


def _random_rotation(size: int, generator: torch.Generator | None) -> Tensor:
    """A uniformly random orthogonal matrix: QR of a Gaussian one, with the signs that make it uniform."""
    q, r = torch.linalg.qr(torch.randn(size, size, generator=generator))
    # (E, E); without the signs, QR's convention biases Q
    return q * torch.sign(torch.diagonal(r))


def linear_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    causal: bool = False,
    *,
    feature_map: FeatureMap = "elu",
    chunk_size: int = 64,
) -> Tensor:
    """Kernelised attention `out_i = phi(q_i)^T S_i / phi(q_i)^T z_i` in time linear in the sequence length.

    `S_i = sum_j phi(k_j) v_j^T` and `z_i = sum_j phi(k_j)`, over every key `j`, or over `j <= i` when
    `causal`. The causal form is a recurrence: a running state `(S, z)` updated `chunk_size` keys at a time
    (with `chunk_size=1`, once per token: an RNN), with the pairs inside a chunk computed directly.

    Args:
        q: `(..., L, E)`.
        k: `(..., S, E)`.
        v: `(..., S, Ev)`.
        causal: query `i` sees keys `j <= i` only (needs `L == S`).
        feature_map: `"elu"` for `elu(x) + 1`, or a callable `(..., N, E) -> (..., N, M)` with positive
            values and the input's dtype, such as `PerformerFeatures` (whose queries take their own stabiliser).
        chunk_size: keys per step of the causal recurrence.

    Returns:
        `(..., L, Ev)`. Empty sequences follow `scaled_dot_product_attention`: `L = 0` gives an empty result,
        `S = 0` zeros.

    Raises:
        TypeError, ValueError: as `qkv.scaled_dot_product_attention`; an unknown `feature_map`, or one whose
            features do not fit (shape, dtype, `M = 0`); `E = 0`; `causal` that is not a bool, or with
            `L != S`; a `chunk_size` that is not a positive int; features that leave a query's normaliser
            `phi(q_i)^T z_i` outside the normal range of the dtype (underflow, overflow, features that are
            not positive), where the result would be NaN or lose its digits.
    """
    check_attention_inputs(q, k, v, None, False, names=("q", "k", "v"))
    check_bool("causal", causal)
    check_sizes(chunk_size=chunk_size)
    phi = _feature_map(feature_map)
    _check_linear_inputs(q, k, causal)
    if q.size(-2) == 0 or k.size(-2) == 0:
        return _no_attention(q, k, v)
    phi_q, phi_k = _features(phi, q, k)
    v32 = v.to(phi_q.dtype)
    out = (
        _causal_linear(phi_q, phi_k, v32, chunk_size)
        if causal
        else _linear(phi_q, phi_k, v32)
    )
    return out.to(q.dtype)


def _linear(phi_q: Tensor, phi_k: Tensor, v: Tensor) -> Tensor:
    # --8<-- [start:linear]
    # S = sum_j phi(k_j) v_j^T: (..., M, Ev)
    state = phi_k.transpose(-2, -1) @ v
    normaliser = phi_k.sum(dim=-2)  # z = sum_j phi(k_j): (..., M)
    numerator = phi_q @ state  # (..., L, Ev)
    denominator = phi_q @ normaliser[..., None]  # (..., L, 1)
    # positive in exact arithmetic: 0 only by underflow
    _check_normaliser(denominator)
    return numerator / denominator
    # --8<-- [end:linear]


def _causal_linear(
    phi_q: Tensor, phi_k: Tensor, v: Tensor, chunk_size: int
) -> Tensor:
    # --8<-- [start:causal-linear]
    # S_0 = 0: (..., M, Ev)
    state = phi_k.new_zeros(*phi_k.shape[:-2], phi_k.size(-1), v.size(-1))
    # z_0 = 0: (..., M, 1)
    normaliser = phi_k.new_zeros(*phi_k.shape[:-2], phi_k.size(-1), 1)
    out = []
    for start in range(0, phi_q.size(-2), chunk_size):
        fq, fk, vc = (
            x[..., start : start + chunk_size, :] for x in (phi_q, phi_k, v)
        )
        # pairs j <= i inside the chunk: (..., c, c)
        within = (fq @ fk.transpose(-2, -1)).tril()
        numerator = fq @ state + within @ vc  # (..., c, Ev)
        # (..., c, 1)
        denominator = fq @ normaliser + within.sum(dim=-1, keepdim=True)
        _check_normaliser(denominator)
        out.append(numerator / denominator)
        # S += sum over the chunk of phi(k_j) v_j^T
        state = state + fk.transpose(-2, -1) @ vc
        # z += sum over the chunk of phi(k_j)
        normaliser = normaliser + fk.sum(dim=-2)[..., None]
    return torch.cat(out, dim=-2)  # (..., L, Ev)
    # --8<-- [end:causal-linear]


def linear_attention_weights(
    q: Tensor,
    k: Tensor,
    causal: bool = False,
    *,
    feature_map: FeatureMap = "elu",
) -> Tensor:
    """The `(L, S)` weights that `linear_attention` applies without forming them: the quadratic form.

    `weights_ij = phi(q_i) . phi(k_j) / sum_j' phi(q_i) . phi(k_j')`, over `j <= i` when `causal`.

    Returns:
        `(..., L, S)`, rows summing to 1; `linear_attention(q, k, v) == weights @ v`.

    Raises:
        TypeError, ValueError: as `linear_attention`.
    """
    check_attention_inputs(q, k, None, None, False, names=("q", "k", "v"))
    check_bool("causal", causal)
    phi = _feature_map(feature_map)
    _check_linear_inputs(q, k, causal)
    phi_q, phi_k = _features(phi, q, k)
    similarity = phi_q @ phi_k.transpose(-2, -1)  # (..., L, S)
    if causal:
        similarity = similarity.tril()
    normaliser = similarity.sum(dim=-1, keepdim=True)  # (..., L, 1)
    if k.size(-2) > 0:  # with no key there is nothing to normalise
        _check_normaliser(normaliser)
    return (similarity / normaliser).to(q.dtype)


def _feature_map(feature_map: object) -> Callable[[Tensor], Tensor]:
    if isinstance(feature_map, str):
        if feature_map not in FEATURE_MAPS:
            raise ValueError(
                f"feature_map must be one of {FEATURE_MAPS} or a callable, got {feature_map!r}"
            )
        return elu_feature_map
    if not callable(feature_map):
        raise TypeError(
            f"feature_map must be a name or a callable, got {type(feature_map).__name__}"
        )
    return feature_map


def _features(
    phi: Callable[..., Tensor], q: Tensor, k: Tensor
) -> tuple[Tensor, Tensor]:
    """`phi(q)` `(..., L, M)` and `phi(k)` `(..., S, M)`, in float32 or wider; raises unless they fit."""
    dtype = torch.promote_types(q.dtype, torch.float32)
    q, k = q.to(dtype), k.to(dtype)
    if isinstance(phi, PerformerFeatures):
        # a query's own stabiliser cancels too
        phi_q, phi_k = (phi(q, query=True), phi(k))
    else:
        phi_q, phi_k = phi(q), phi(k)
    for name, x, features in (("query", q, phi_q), ("key", k, phi_k)):
        check_tensor(f"feature_map({name})", features)
        if (features.dtype, features.device) != (dtype, x.device):
            raise TypeError(
                f"feature_map must keep the {name}'s dtype and device ({dtype} on {x.device}; half "
                f"precision is computed in float32), got {features.dtype} on {features.device}"
            )
    fits = phi_q.shape[:-1] == q.shape[:-1] and phi_k.shape[:-1] == k.shape[:-1]
    if not fits or phi_q.size(-1) != phi_k.size(-1) or phi_q.size(-1) == 0:
        raise ValueError(
            "feature_map must map (..., N, E) to (..., N, M), the same M >= 1 for query and key: "
            f"query {shape(q)} -> {shape(phi_q)}, key {shape(k)} -> {shape(phi_k)}"
        )
    return phi_q, phi_k


def _check_linear_inputs(q: Tensor, k: Tensor, causal: bool) -> None:
    if q.size(-1) == 0:
        raise ValueError(
            "linear attention needs query and key with E >= 1 features (at E = 0, elu's features are empty "
            f"and every weight is 0 / 0): got query {shape(q)}, key {shape(k)}"
        )
    if causal:
        _check_self_attention(q, k)


def _check_normaliser(denominator: Tensor) -> None:
    """Raise unless each `phi(q_i)^T z_i` is a normal number: below, underflow has eaten its digits."""
    finfo = torch.finfo(denominator.dtype)
    # NaN passes: NaN in, NaN out
    lost = (denominator < finfo.tiny) | (denominator == float("inf"))
    if lost.any():
        raise ValueError(
            f"linear attention: the feature_map's features give a query the normaliser phi(q_i)^T z_i = "
            f"{denominator[lost].min().item():.1e}, outside the normal range [{finfo.tiny:.1e}, "
            f"{finfo.max:.1e}] of {denominator.dtype} (features that underflow, overflow or are not "
            "positive): scale the inputs down, or compute in float64"
        )


# --- Linformer ----------------------------------------------------------------------------------------------


def linformer_projection(
    seq_len: int, proj_len: int, generator: torch.Generator | None = None
) -> Tensor:
    """A random `(K, S)` projection along the sequence with entries `N(0, 1 / K)`.

    Linformer learns its projections; a random Gaussian one is where its analysis starts (a Johnson-Lindenstrauss
    argument), and what a comparison on random inputs can use.
    """
    check_sizes(seq_len=seq_len, proj_len=proj_len)
    _check_generator(generator)
    return torch.randn(proj_len, seq_len, generator=generator) / math.sqrt(
        proj_len
    )


def linformer_attention(
    query: Tensor, key: Tensor, value: Tensor, projection: Tensor
) -> Tensor:
    """Softmax attention over `K` mixtures of the keys and values instead of all `S` (Wang et al., 2020).

    Args:
        query: `(..., L, E)`.
        key: `(..., S, E)`.
        value: `(..., S, Ev)`.
        projection: `(K, S)`, applied along the sequence to keys and values alike (Linformer's shared `E = F`).

    Returns:
        `(..., L, Ev)`. Every output mixes every position, so there is no causal form.

    Raises:
        TypeError, ValueError: as `qkv.scaled_dot_product_attention`; a projection that is not `(K, S)`.
    """
    check_attention_inputs(query, key, value, None, False)
    check_tensor("projection", projection, min_dim=2)
    if projection.dim() != 2 or projection.size(1) != key.size(-2):
        raise ValueError(
            f"projection must be (K, S) with S = {key.size(-2)} keys, got {shape(projection)}"
        )
    # --8<-- [start:linformer]
    projection = projection.to(key)
    key = projection @ key  # (K, S) @ (..., S, E) -> (..., K, E)
    value = projection @ value  # (..., K, Ev)
    return scaled_dot_product_attention(query, key, value)  # (..., L, Ev)
    # --8<-- [end:linformer]


# --- empty sizes and checks ---------------------------------------------------------------------------------


def _scale(head_dim: int) -> float:
    """`1 / sqrt(E)`; 1 when `E = 0`, where every score is an empty sum, 0 whatever the scale (torch's result)."""
    return 1 / math.sqrt(head_dim) if head_dim else 1.0


def _no_attention(query: Tensor, key: Tensor, value: Tensor) -> Tensor:
    """The result for `L = 0` or `S = 0`: zeros `(..., L, Ev)`, as `scaled_dot_product_attention` gives."""
    batch = broadcast_shape(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    return query.new_zeros(*batch, query.size(-2), value.size(-1))


def _check_self_attention(query: Tensor, key: Tensor) -> None:
    if query.size(-2) != key.size(-2):
        raise ValueError(
            f"query and key must have the same length here: query {shape(query)} vs key {shape(key)}"
        )


def _check_keep_mask(mask: object, size: tuple[int, int] | None = None) -> None:
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        raise TypeError(
            f"mask must be a bool tensor (True = may attend), got {getattr(mask, 'dtype', type(mask))}"
        )
    if mask.dim() != 2 or (size is not None and tuple(mask.shape) != size):
        wanted = "(L, S)" if size is None else f"(L, S) = {size}"
        raise ValueError(f"mask must be {wanted}, got {shape(mask)}")


def _check_generator(generator: object) -> None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"generator must be a torch.Generator or None, got {type(generator).__name__}"
        )
    if generator is not None and generator.device.type != "cpu":
        raise ValueError(
            f"generator must be a CPU generator (the draws are on CPU), got {generator.device}"
        )
