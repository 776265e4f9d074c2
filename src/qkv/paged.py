"""A paged KV cache: many sequences' keys and values in fixed-size pages of one pool (Kwon et al., SOSP 2023).

A contiguous cache reserves room for the longest sequence a request might reach, for every request; most of
it stays empty. A paged cache hands out pages of `page_size` tokens as sequences grow, and keeps for each
sequence a block table: the list of its pages, in order. Token `t` of a sequence lives in page
`table[t // page_size]`, slot `t % page_size`, so at most `page_size - 1` slots per sequence are ever empty.

Pages can be shared: a sequence forked from another (two requests with one prompt, or several samples of one
prompt) starts with the other's block table and a reference count of 2 on each page. Writing into a shared
page first copies it (copy on write), so no sequence ever changes what another reads.

`paged_attention` is attention read through block tables; `PagedKVCache` hands out the pages;
`gather_pages` reads one sequence's tokens back in order.
"""

from __future__ import annotations

import math
from collections.abc import Hashable

import torch
from torch import Tensor

from qkv._checks import (
    check_device,
    check_integer_tensor,
    check_same_dtype_and_device,
    check_scale,
    check_sizes,
    check_tensor,
    shape,
)


def paged_attention(
    query: Tensor,
    key_pages: Tensor,
    value_pages: Tensor,
    block_tables: Tensor,
    lengths: Tensor,
    *,
    scale: float | None = None,
) -> Tensor:
    """Each sequence's newest `L` queries attend its cached tokens, read page by page through its table.

    Query `i` of sequence `b` is token `lengths[b] - L + i` and attends tokens `0 .. lengths[b] - L + i`
    (causal, aligned bottom-right per sequence: the queries' own keys and values are already in the cache).

    Args:
        query: `(B, H, L, D)`.
        key_pages: `(P, H_kv, page_size, D)`, the pool; H_kv divides H (grouped-query attention).
        value_pages: `(P, H_kv, page_size, Dv)`.
        block_tables: integer `(B, max_pages)`: the pages of each sequence in order; entries past a
            sequence's last page are not read (any value, e.g. 0 or -1).
        lengths: integer `(B,)`: the tokens cached for each sequence, at least L and at most
            `max_pages * page_size`. Slots at or past a sequence's length are not read: a pool made with
            `torch.empty` may hold NaN there.
        scale: multiplies the scores; `1 / sqrt(D)` when None.

    Returns:
        `(B, H, L, Dv)`.

    Raises:
        TypeError: a non-tensor, floating block tables or lengths, dtypes that differ, a `scale` that is
            not a number.
        ValueError: shapes that disagree (named with the shapes), an empty head, page or pool, tensors on
            different devices, a page index outside `[0, P)` in a page that is read, a length below L or
            beyond the sequence's pages, a `scale` that is not finite.
    """
    _check_paged_inputs(query, key_pages, value_pages, block_tables, lengths)
    check_scale(scale)
    _, heads, seqlen_q, dim = query.shape
    pages, heads_kv = key_pages.shape[:2]
    lengths = lengths.long()  # uint8 lengths would wrap below 0
    block_tables = block_tables.long()  # a uint8 table would index as a mask
    # entries past a sequence's pages: never kept
    block_tables = block_tables.clamp(0, pages - 1)
    keys = key_pages[block_tables]  # (B, max_pages, H_kv, page, D)
    values = value_pages[block_tables]  # (B, max_pages, H_kv, page, Dv)
    # (B, H_kv, S, D), S = max_pages * page
    keys = keys.transpose(1, 2).flatten(2, 3)
    values = values.transpose(1, 2).flatten(2, 3)  # (B, H_kv, S, Dv)
    # slots past a sequence's length hold anything (a pool made by torch.empty): zeros, so no NaN is summed
    positions = torch.arange(keys.size(2), device=query.device)  # (S,)
    written = (positions < lengths[:, None])[:, None, :, None]  # (B, 1, S, 1)
    keys, values = (
        torch.where(written, keys, 0),
        torch.where(written, values, 0),
    )
    groups = heads // heads_kv
    keys = keys.repeat_interleave(groups, 1)  # (B, H, S, D)
    values = values.repeat_interleave(groups, 1)  # (B, H, S, Dv)
    # query i of sequence b is token lengths[b] - L + i and sees the tokens up to it: causal, bottom-right
    rows = (
        lengths[:, None]
        - seqlen_q
        + torch.arange(seqlen_q, device=query.device)
    )  # (B, L)
    keep = positions[None, None, :] <= rows[:, :, None]  # (B, L, S)
    scale = 1 / math.sqrt(dim) if scale is None else scale
    scores = query @ keys.transpose(-2, -1) * scale  # (B, H, L, S)
    scores = scores.masked_fill(~keep[:, None], -math.inf)
    return torch.softmax(scores, dim=-1) @ values  # (B, H, L, Dv)


# --8<-- [start:gather]
def gather_pages(
    pages: Tensor, block_table: Tensor | list[int], length: int
) -> Tensor:
    """One sequence's first `length` tokens, read from the pool through its
    block table.

    Token `t` is in page `block_table[t // page_size]`, slot `t % page_size`.

    Args:
        pages: `(P, H_kv, page_size, D)`, a pool of keys or of values.
        block_table: the sequence's pages in order, `n` of them (a list or an
            integer tensor `(n,)`).
        length: the tokens to read, at most `n * page_size`.

    Returns:
        `(H_kv, length, D)`.

    Raises:
        TypeError: `pages` not a floating-point tensor, a table of
            non-integers, `length` not an int.
        ValueError: `pages` not 4-D, a table not `(n,)` or on another device,
            a page index outside `[0, P)`, a length outside
            `[0, n * page_size]`.
    """
    # the table as int64 `(n,)` on the pool's device
    block_table = _check_gather(pages, block_table, length)
    chosen = pages[block_table]  # (n, H_kv, page_size, D), in the table's order
    tokens = chosen.transpose(0, 1).flatten(1, 2)  # (H_kv, n * page_size, D)
    return tokens[:, :length]  # (H_kv, length, D)


# --8<-- [end:gather]


class PagedKVCache:
    """A pool of pages and the block tables of the sequences that use them.

    Args:
        num_pages: pages in the pool.
        page_size: tokens per page.
        kv_heads: key-value heads per token.
        head_dim: D, features per key.
        value_dim: Dv, features per value; D when None.
        dtype: of the pool.
        device: of the pool.

    Raises:
        TypeError, ValueError: a size that is not a positive int, a `dtype` that is not floating point, a
            `device` torch does not know.

    Attributes:
        key_pages: `(num_pages, kv_heads, page_size, D)`; `value_pages` likewise with Dv.
        references: int `(num_pages,)`: how many sequences read each page (0: free).

    Example:
        >>> cache = PagedKVCache(num_pages=8, page_size=4, kv_heads=2, head_dim=16)
        >>> cache.add("prompt")
        >>> cache.append("prompt", torch.randn(2, 6, 16), torch.randn(2, 6, 16))  # 6 tokens: 2 pages
        >>> cache.add("sample", fork_of="prompt")  # shares both pages
        >>> cache.block_table("sample"), cache.references[:2].tolist()
        ([0, 1], [2, 2])
    """

    def __init__(
        self,
        num_pages: int,
        page_size: int,
        kv_heads: int,
        head_dim: int,
        *,
        value_dim: int | None = None,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        check_sizes(
            num_pages=num_pages,
            page_size=page_size,
            kv_heads=kv_heads,
            head_dim=head_dim,
        )
        value_dim = head_dim if value_dim is None else value_dim
        check_sizes(value_dim=value_dim)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(
                f"dtype must be a floating-point torch.dtype, got {dtype!r}"
            )
        check_device(device)
        self.page_size = page_size
        self.key_pages = torch.zeros(
            num_pages, kv_heads, page_size, head_dim, dtype=dtype, device=device
        )
        self.value_pages = torch.zeros(
            num_pages,
            kv_heads,
            page_size,
            value_dim,
            dtype=dtype,
            device=device,
        )
        self.references = torch.zeros(num_pages, dtype=torch.int64)
        self._tables: dict[object, list[int]] = {}
        self._lengths: dict[object, int] = {}

    def add(self, sequence: object, *, fork_of: object = None) -> None:
        """Start `sequence`: empty, or sharing every page of `fork_of` (its tokens, without copying them).

        Raises:
            TypeError: a `sequence` that cannot be a dict key (a list, say).
            ValueError: a `sequence` added already, a `fork_of` never added.
        """
        if not isinstance(sequence, Hashable):
            raise TypeError(
                f"sequence must be hashable (a str or an int), got {type(sequence).__name__}"
            )
        if sequence in self._tables:
            raise ValueError(f"sequence {sequence!r} was added already")
        if fork_of is None:
            self._tables[sequence], self._lengths[sequence] = [], 0
            return
        table = self.block_table(fork_of)
        self.references[table] += 1
        self._tables[sequence], self._lengths[sequence] = (
            table,
            self._lengths[fork_of],
        )

    def append(self, sequence: object, key: Tensor, value: Tensor) -> None:
        """Write the keys `(H_kv, T_new, D)` and values `(H_kv, T_new, Dv)` of new tokens after `sequence`'s.

        A shared page is copied before it is written to; new pages come from the free ones.

        Raises:
            ValueError: a sequence never added, shapes that do not fit the pool.
            TypeError: a dtype or device other than the pool's.
            RuntimeError: no free page left (nothing is written then).
        """
        table = self._table(sequence)
        self._check_tokens(key, value)
        length, new = self._lengths[sequence], key.size(1)
        if new == 0:
            return
        needed = math.ceil((length + new) / self.page_size) - len(table)
        shared_tail = (
            length % self.page_size != 0 and self.references[table[-1]] > 1
        )
        free = self._free_pages(needed + shared_tail)
        # copy on write: this sequence gets its own copy of the last page
        if shared_tail:
            copy, free = free[0], free[1:]
            self.key_pages[copy] = self.key_pages[table[-1]]
            self.value_pages[copy] = self.value_pages[table[-1]]
            self.references[table[-1]] -= 1
            self.references[copy] = 1
            table[-1] = copy
        for page in free:
            self.references[page] = 1
            table.append(page)
        # (T_new,): the tokens' positions
        slots = torch.arange(length, length + new)
        pages = torch.tensor(table)[slots // self.page_size]  # (T_new,)
        # (T_new, H_kv, D)
        self.key_pages[pages, :, slots % self.page_size] = key.transpose(0, 1)
        self.value_pages[pages, :, slots % self.page_size] = value.transpose(
            0, 1
        )
        self._lengths[sequence] = length + new

    def free(self, sequence: object) -> None:
        """Forget `sequence`; its pages that no other sequence reads become free."""
        table = self._table(sequence)
        self.references[table] -= 1
        del self._tables[sequence], self._lengths[sequence]

    def block_table(self, sequence: object) -> list[int]:
        """The pages of `sequence`, in order (a copy)."""
        return list(self._table(sequence))

    def length(self, sequence: object) -> int:
        """The tokens cached for `sequence`."""
        self._table(sequence)
        return self._lengths[sequence]

    def batch(self, sequences: list) -> tuple[Tensor, Tensor]:
        """`(block_tables, lengths)` of `sequences` (a list) for `paged_attention`: `(B, max_pages)` (padded
        with 0), `(B,)`."""
        if not isinstance(sequences, list | tuple):
            raise TypeError(
                f"sequences must be a list of sequences, got {type(sequences).__name__}"
            )
        tables = [self._table(sequence) for sequence in sequences]
        width = max([1, *map(len, tables)])
        padded = [table + [0] * (width - len(table)) for table in tables]
        lengths = [self._lengths[sequence] for sequence in sequences]
        device = self.key_pages.device
        return torch.tensor(padded, device=device), torch.tensor(
            lengths, device=device
        )

    def contiguous(self, sequence: object) -> tuple[Tensor, Tensor]:
        """`sequence`'s keys `(H_kv, T, D)` and values `(H_kv, T, Dv)`, gathered from its pages in order."""
        table, length = self._table(sequence), self._lengths[sequence]
        keys = gather_pages(self.key_pages, table, length)  # (H_kv, T, D)
        return keys, gather_pages(self.value_pages, table, length)

    def _table(self, sequence: object) -> list[int]:
        if sequence not in self._tables:
            raise ValueError(
                f"sequence {sequence!r} was never added (or was freed): add it first; "
                f"the cache holds {list(self._tables)}"
            )
        return self._tables[sequence]

    def _free_pages(self, count: int) -> list[int]:
        free = torch.nonzero(self.references == 0).flatten().tolist()
        if count > len(free):
            raise RuntimeError(
                f"the pool has {len(free)} free pages of {len(self.references)}, {count} are needed"
            )
        return free[:count]

    def _check_tokens(self, key: Tensor, value: Tensor) -> None:
        for name, x, pool in (
            ("key", key, self.key_pages),
            ("value", value, self.value_pages),
        ):
            check_tensor(name, x)
            if (
                x.dim() != 3
                or x.size(0) != pool.size(1)
                or x.size(2) != pool.size(3)
            ):
                raise ValueError(
                    f"{name} must be (H_kv, T_new, {'D' if name == 'key' else 'Dv'}) = "
                    f"({pool.size(1)}, T_new, {pool.size(3)}), got {shape(x)}"
                )
            if x.dtype != pool.dtype or x.device != pool.device:
                raise TypeError(
                    f"{name} is {x.dtype} on {x.device}, the pool {pool.dtype} on {pool.device}"
                )
        if key.size(1) != value.size(1):
            raise ValueError(
                f"key and value disagree on T_new: {shape(key)} vs {shape(value)}"
            )


def _check_gather(pages: object, block_table: object, length: object) -> Tensor:
    """Raise unless `gather_pages` can read `length` tokens of `pages` through `block_table`; the table as
    an int64 tensor `(n,)` on the pool's device."""
    check_tensor("pages", pages)
    if pages.dim() != 4:
        raise ValueError(
            f"pages must be 4-D (P, H_kv, page_size, D), got shape {shape(pages)}"
        )
    if isinstance(block_table, list | tuple):
        if not all(
            isinstance(page, int) and not isinstance(page, bool)
            for page in block_table
        ):
            raise TypeError(
                f"block_table must hold ints (page indices), got {block_table!r}"
            )
        _check_pages_in_pool(pages, block_table)  # before int64 could overflow
        block_table = torch.tensor(
            block_table, dtype=torch.long, device=pages.device
        )
    check_integer_tensor("block_table", block_table, pages.device)
    if block_table.dim() != 1:
        raise ValueError(
            f"block_table must be 1-D (n,), got shape {shape(block_table)}"
        )
    block_table = block_table.long()
    _check_pages_in_pool(pages, block_table.tolist())
    check_sizes(0, length=length)
    capacity = block_table.numel() * pages.size(2)
    if length > capacity:
        raise ValueError(
            f"length must be in [0, {capacity}] (the table's pages hold that many), got {length}"
        )
    return block_table


def _check_pages_in_pool(pages: Tensor, table: list[int]) -> None:
    """Raise unless every page index of `table` is in `[0, P)`, P the pages of `pages`."""
    outside = [page for page in table if not 0 <= page < pages.size(0)]
    if outside:
        raise ValueError(
            f"block_table names pages outside the pool's {pages.size(0)} (pages {shape(pages)}): "
            f"{outside}"
        )


def _check_paged_inputs(
    query: Tensor,
    key_pages: Tensor,
    value_pages: Tensor,
    block_tables: Tensor,
    lengths: Tensor,
) -> None:
    """Raise, naming the argument and the shapes, unless the inputs make a well-formed paged call."""
    for name, x in (
        ("query", query),
        ("key_pages", key_pages),
        ("value_pages", value_pages),
    ):
        check_tensor(name, x)
        if x.dim() != 4:
            raise ValueError(f"{name} must be 4-D, got {shape(x)}")
    check_same_dtype_and_device(
        query=query, key_pages=key_pages, value_pages=value_pages
    )
    for name, x in (("block_tables", block_tables), ("lengths", lengths)):
        check_integer_tensor(name, x, query.device)
    batch, heads, seqlen_q, dim = query.shape
    pages, heads_kv, page_size, _ = key_pages.shape
    if key_pages.shape[:3] != value_pages.shape[:3] or key_pages.size(3) != dim:
        raise ValueError(
            f"key_pages must be (P, H_kv, page_size, D) and value_pages (P, H_kv, page_size, Dv) with "
            f"query's D: query {shape(query)}, key_pages {shape(key_pages)}, value_pages {shape(value_pages)}"
        )
    if 0 in (heads, dim, *key_pages.shape, value_pages.size(3)):
        raise ValueError(
            f"query's H and D and every size of key_pages and value_pages must be at least 1: "
            f"query {shape(query)}, key_pages {shape(key_pages)}, value_pages {shape(value_pages)}"
        )
    if heads % heads_kv:
        raise ValueError(
            f"the key-value heads must divide the query heads: query {shape(query)}, "
            f"key_pages {shape(key_pages)}"
        )
    if (
        block_tables.dim() != 2
        or block_tables.size(0) != batch
        or lengths.shape != (batch,)
    ):
        raise ValueError(
            f"block_tables must be (B, max_pages) and lengths (B,) with B = {batch}: "
            f"block_tables {shape(block_tables)}, lengths {shape(lengths)}"
        )
    # uint8 would wrap or index as a mask
    block_tables, lengths = (block_tables.long(), lengths.long())
    capacity = block_tables.size(1) * page_size
    if ((lengths < seqlen_q) | (lengths > capacity)).any():
        raise ValueError(
            f"lengths must be at least L = {seqlen_q} (the queries' own tokens are cached) and at most "
            f"{capacity} (max_pages * page_size), got {lengths.tolist()}"
        )
    used = torch.arange(block_tables.size(1), device=lengths.device) < (
        (lengths[:, None] + page_size - 1) // page_size
    )  # (B, max_pages): the pages each sequence reads
    read = block_tables[used]
    if read.numel() and (read.min() < 0 or read.max() >= pages):
        raise ValueError(
            f"block_tables reads pages outside the pool's {pages}: {read[(read < 0) | (read >= pages)].tolist()}"
        )
