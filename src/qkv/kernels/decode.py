"""Split-KV decoding ("flash-decoding") in Triton: a few new queries against a long cache, keys split across programs.

Why split. When a model decodes, each sequence brings one to a few new queries (L = 1..16) and a cache of
thousands of keys. FlashAttention's parallelism is over blocks of queries, batch and heads; with a single
block of queries that is `B * H` programs, too few to keep a GPU's memory busy while each walks the whole
cache alone. Dao et al. (2023, Flash-Decoding) split the keys instead: each program reads one slice of the
cache and writes a partial output with the logsumexp of its scores; a second step merges the slices.

Stage 1 (`_split_kernel`), grid `(num_splits, H_kv * row_blocks, B)`: one program takes one split of one
sequence's keys for the query heads that share one key/value head. Their queries, `group = H // H_kv` heads
by L tokens, are `group * L` rows in one tile (`BLOCK_M` rows, more than one tile only when they exceed 64):
each key tile is loaded once for the whole group, which is what grouped-query attention saves in decoding.
Row `r` of the tile is query `r % L` of head `kv_head * group + r // L`; in `(B, H, L)` order the group's
rows are consecutive, so they are one `(group * L, D)` matrix in memory. The loop over key tiles is
FlashAttention's online softmax (`qkv.kernels.flash`), in base 2; tiles that every query sees fully run
without a mask, the last tiles (the causal edge) with one.

Causal masking is bottom-right per sequence, as in `qkv.paged_attention`: query `i` of a sequence of
`length` tokens is token `length - L + i` and sees keys `j <= length - L + i`. For L = 3, length = 5:

        keys  0 1 2 3 4
    query 0   1 1 1 0 0
    query 1   1 1 1 1 0
    query 2   1 1 1 1 1

Every query sees at least key 0, so no output row is ever empty. A row can see no key of one split (a
split past a short sequence's end, or one whose keys all lie past the row's diagonal): the split then
writes zeros for it and a logsumexp of -inf, which the merge weighs by exp(-inf) = 0.

Stage 2, the merge: with the splits' outputs `o_s` (each normalised by its own sum) and logsumexps
`lse_s`, the output is `sum_s exp(lse_s - m) o_s / sum_s exp(lse_s - m)`, `m = max_s lse_s`
(`_merge_splits`, one program per row block, folding the splits in split order). By default the merge is
a launch of its own (`_merge_kernel`). The variant `merge_in_launch=True` (`MERGE_IN_LAUNCH`) runs it in the
same launch, as serial split-K matrix products and the CUDA samples' single-pass reduction
(threadFenceReduction) finish theirs: each program, once its partial results are stored, adds one to its row block's counter
with an atomic add (release and acquire, GPU scope), and the program that finds `num_splits - 1` there,
the last to finish, merges the row block and sets the counter back to zero. What that costs: one int32
per row block (`B * H_kv * row_blocks`, one buffer per device, allocated once: every launch leaves it at
zero), one barrier and one atomic add per program, and a merge done by `B * H_kv * row_blocks`
programs instead of a launch of its own; what it saves is that launch, a few microseconds at short
caches, where the launches and not the keys set the time. The result does not depend on which program
finishes last: the merger reads every split's stored result, its own included, in split order, so the
output is the same bits run after run, and the same as the separate merge kernel's. The counters are
kept per CUDA stream, so decodes on two streams at once do not share them. The variant is not the
default until a GPU run has checked and timed it (the lab's lease does both, `qkv_lab.lease`): the
interpreter runs programs one at a time and cannot test the ordering that the counter relies on.

The cache is contiguous `(B, H_kv, S, D)` or paged `(P, H_kv, page_size, D)` with block tables `(B,
max_pages)`: key `j` of sequence `b` lives in page `block_tables[b, j // page_size]`, slot `j % page_size`.
The kernel reads both the same way, a contiguous cache being the pool of B pages of S tokens whose page
`b` belongs to sequence `b`; keys at or past a sequence's length, and table entries for pages it does not
use, are never read. A variant for Hopper (`DECODE_VARIANTS`, which the lab's tuning tries and the autotuner
does not) reads the full tiles through tensor descriptors (TMA) of the pool's `(rows, D)` matrix, one
block of `BLOCK_N` rows per tile, where pages hold whole tiles (a pool of fewer than 2**31 rows: TMA's
coordinates are int32). Forward only: no gradients. Limits: `qkv.kernels.contract.check_decode_inputs`.
"""

# Triton's convention: upper-case names for pointers and compile-time constants.
# ruff: noqa: N803, N806

import contextvars
import math

import torch
import triton
import triton.language as tl
from torch import Tensor

from qkv.kernels import contract
from qkv.kernels.flash import (
    AUTOTUNE,
    INTERPRETED,
    LOG2E,
    _on_device,
    _rows_descriptor,
    _with_scratch,
)

MAX_ROWS = 64  # query rows per program: a GQA group's queries beyond this take several programs
MERGE_ROWS = tl.constexpr(16)  # query rows the merge folds at a time
# The default number of splits: at least MIN_WAVES programs per multiprocessor where the keys allow, and
# at most 1 - WAVE_FILL of its waves' program slots idle. Off CUDA (the interpreter runs one program at
# a time) it counts INTERPRETED_MULTIPROCESSORS, which splits the tests' small caches.
MIN_WAVES = 2
WAVE_FILL = 0.9
INTERPRETED_MULTIPROCESSORS = 4


@triton.jit
def _key_rows(
    BlockTable,
    sequence,
    kv_head,
    cols,
    kv_len,
    heads_kv,
    page_size,
    MASKED: tl.constexpr,
):
    """Where keys `cols` of one sequence and key/value head lie: rows of the cache seen as `(rows, D)`.

    Paged (`BlockTable` given): page `table[j // page_size]`, slot `j % page_size` of a `(P, H_kv,
    page_size, D)` pool. Contiguous: page `sequence`, slot `j`, of `(B, H_kv, S, D)` with `page_size = S`.
    With MASKED, keys at or past `kv_len` read no table entry (their rows are not used).
    """
    if BlockTable is not None:
        if MASKED:
            page = tl.load(
                BlockTable + cols // page_size, mask=cols < kv_len, other=0
            )
        else:
            page = tl.load(BlockTable + cols // page_size)
        slot = cols % page_size
    else:
        page = sequence
        slot = cols
    # int64: pools past 2**31 elements
    return (page.to(tl.int64) * heads_kv + kv_head) * page_size + slot


@triton.jit
def _load_keys(
    Ptr, key_rows, cols, kv_len, HEAD_DIM: tl.constexpr, MASKED: tl.constexpr
):
    """The `(BLOCK_N, HEAD_DIM)` rows `key_rows` of `Ptr`; with MASKED, keys at or past `kv_len` read as zeros."""
    pointers = (
        Ptr + key_rows[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :]
    )
    if MASKED:
        return tl.load(pointers, mask=(cols < kv_len)[:, None], other=0.0)
    return tl.load(pointers)


# --8<-- [start:inner-loop]
@triton.jit
def _attend_to_keys(
    acc, l_i, m_i,  # the running output, sum and maximum of the BLOCK_M query rows
    q, K, V, BlockTable, sequence, kv_head, heads_kv, page_size, positions, kv_len, start, end, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, TMA: tl.constexpr,
):  # fmt: skip
    """Fold the key tiles in `[start, end)` into the rows; MASKED tiles cross a row's diagonal.

    With TMA, `K` and `V` are tensor descriptors of the cache's `(pool_rows, HEAD_DIM)` rows
    (`flash._rows_descriptor`), and each tile, full and inside one page, is one block of `BLOCK_N`
    consecutive rows.
    """
    for tile in range(start, end, BLOCK_N):
        cols = tile + tl.arange(0, BLOCK_N)
        if TMA:
            first = _key_rows(
                BlockTable, sequence, kv_head, tile, kv_len, heads_kv, page_size, False
            ).to(tl.int32)  # fmt: skip
            k = K.load([first, 0])
            v = V.load([first, 0])
        else:
            key_rows = _key_rows(
                BlockTable, sequence, kv_head, cols, kv_len, heads_kv, page_size, MASKED
            )  # fmt: skip
            k = _load_keys(K, key_rows, cols, kv_len, HEAD_DIM, MASKED)
            v = _load_keys(V, key_rows, cols, kv_len, HEAD_DIM, MASKED)
        # (BLOCK_M, BLOCK_N), in log2 units
        scores = tl.dot(q, tl.trans(k)) * qk_scale
        if MASKED:  # query at position p sees keys j <= p (and so none at or past kv_len)
            scores = tl.where(
                cols[None, :] <= positions[:, None], scores, float("-inf")
            )
        m_new = tl.maximum(m_i, tl.max(scores, 1))
        shift = m_new
        if MASKED:
            # A row with no key in this split yet keeps m = -inf: shift by 0, so exp2(-inf) gives 0, not NaN.
            shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(scores - shift[:, None])
        alpha = tl.exp2(m_i - shift)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
    return acc, l_i, m_i


# --8<-- [end:inner-loop]


@triton.jit
def _query_rows(seqlen_q, heads_kv, group, BLOCK_M: tl.constexpr):
    """This program's sequence and its `BLOCK_M` query rows, for a grid `(splits, H_kv * row_blocks, B)`.

    Returns `sequence`, `kv_head`, `first_row` (the key/value head's first row in `(B, H, L)` order),
    `first` (the program's first row `r` of the head's, query `r % L` of head `kv_head * group + r //
    L`) and `group_rows`, the head's `group * L` rows.
    """
    # the queries of one key/value head: group heads x L tokens
    group_rows = group * seqlen_q
    row_blocks = tl.cdiv(group_rows, BLOCK_M)
    kv_head = tl.program_id(1) // row_blocks
    first = tl.program_id(1) % row_blocks * BLOCK_M
    sequence = tl.program_id(2)
    first_row = (sequence.to(tl.int64) * heads_kv + kv_head) * group_rows
    return sequence, kv_head, first_row, first, group_rows


# --8<-- [start:merge-splits]
@triton.jit
def _merge_splits(
    PartialOut, PartialLSE, Out, first_row, first, group_rows, num_splits,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
):  # fmt: skip
    """Write rows `[first, first + BLOCK_M)`' outputs: the splits' `o_s`, in split order, weighted by `exp(lse_s)`.

    Folded as the online softmax folds key tiles, the running maximum `m` of the logsumexps keeping the
    weights finite: `out = sum_s exp(lse_s - m) o_s / sum_s exp(lse_s - m)`; `MERGE_ROWS` rows at a
    time, which keeps the registers it adds to the split kernel's few. The partial results are read from
    L2 (`.cg`), past the L1 cache, which another program's writes do not update.
    """
    dims = tl.arange(0, HEAD_DIM)
    for start in range(first, first + BLOCK_M, MERGE_ROWS):
        rows = start + tl.arange(0, MERGE_ROWS)
        kept = rows < group_rows
        # (MERGE_ROWS,): each row's split 0
        slots = (first_row + rows) * num_splits
        m = tl.full([MERGE_ROWS], float("-inf"), tl.float32)
        total = tl.zeros([MERGE_ROWS], tl.float32)  # sum_s exp(lse_s - m)
        # sum_s exp(lse_s - m) o_s
        acc = tl.zeros([MERGE_ROWS, HEAD_DIM], tl.float32)
        for split in range(num_splits):
            lse = tl.load(
                PartialLSE + slots + split,
                mask=kept,
                other=float("-inf"),
                cache_modifier=".cg",
            )
            partial = tl.load(
                PartialOut
                + (slots + split)[:, None] * HEAD_DIM
                + dims[None, :],
                mask=kept[:, None],
                other=0.0,
                cache_modifier=".cg",
            )
            m_new = tl.maximum(m, lse)
            shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # no split yet
            alpha = tl.exp(m - shift)
            weight = tl.exp(lse - shift)  # 0 for a split that saw no key
            total = total * alpha + weight
            acc = acc * alpha[:, None] + weight[:, None] * partial
            m = m_new
        total = tl.where(kept, total, 1.0)  # rows past the group's: nothing
        tl.store(
            Out + (first_row + rows)[:, None] * HEAD_DIM + dims[None, :],
            (acc / total[:, None]).to(Out.dtype.element_ty),
            mask=kept[:, None],
        )


# --8<-- [end:merge-splits]


# --8<-- [start:split-kernel]
@triton.jit(
    do_not_specialize=[
        "seqlen_q",
        "heads_kv",
        "group",
        "page_size",
        "num_splits",
        "max_keys",
        "batch",
        "pool_rows",
    ]
)
def _split_kernel(
    Q, K, V, BlockTables, Lengths,  # (B, H, L, D), cache twice, (B, max_pages) or None, (B,)
    PartialOut, PartialLSE,  # (B * H * L, num_splits, D), (B * H * L, num_splits), float32
    Out, Counters,  # (B, H, L, D); int32 (B * H_kv * row_blocks,), zeros (MERGE_IN_LAUNCH only)
    qk_scale, seqlen_q, heads_kv, group, page_size, max_pages, num_splits,
    max_keys, batch,  # the capacity rounded up to a power of 2, B: the autotuner's key only
    pool_rows,  # the cache's rows, P * H_kv * page_size (or B * H_kv * S): TMA's bounds
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    MERGE_IN_LAUNCH: tl.constexpr, TMA: tl.constexpr = False,
):  # fmt: skip
    """One program: one split of one sequence's keys, for (up to BLOCK_M of) one key/value head's queries.

    With MERGE_IN_LAUNCH, the last of a row block's `num_splits` programs to finish merges them all.
    With TMA, the full tiles are read through tensor descriptors, one block per tile, where a page holds
    whole tiles (`page_size % BLOCK_N == 0`; a contiguous cache's page is its S); the tiles across the
    diagonal, whose keys past the length must read as zeros, through pointers as without.
    """
    split = tl.program_id(0)
    sequence, kv_head, first_row, first, group_rows = _query_rows(
        seqlen_q, heads_kv, group, BLOCK_M
    )
    rows = first + tl.arange(0, BLOCK_M)  # r = member * L + i
    kept = rows < group_rows
    q = tl.load(
        Q
        + (first_row + rows[:, None]) * HEAD_DIM
        + tl.arange(0, HEAD_DIM)[None, :],
        mask=kept[:, None],
        other=0.0,
    )
    BlockTable = BlockTables
    if BlockTables is not None:
        BlockTable = BlockTables + sequence.to(tl.int64) * max_pages
    kv_len = tl.load(Lengths + sequence)
    # query i is token kv_len - L + i
    positions = kv_len - seqlen_q + rows % seqlen_q

    # This split's keys [lo, hi): the sequence's tiles shared out evenly, whole tiles per split.
    per_split = tl.cdiv(tl.cdiv(kv_len, BLOCK_N), num_splits) * BLOCK_N
    lo = split * per_split
    hi = min(lo + per_split, kv_len)
    # keys below: full tiles, no mask
    seen_by_all = (kv_len - seqlen_q + 1) // BLOCK_N * BLOCK_N
    mid = min(max(lo, seen_by_all), hi)

    # running max of the scores (log2 units)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)  # running sum of exp2(scores - m_i)
    # running sum of exp2(scores - m_i) @ v
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    full = lo  # full tiles from here on through pointers, those before it through TMA
    if TMA:
        full = tl.where(page_size % BLOCK_N == 0, mid, lo)
        acc, l_i, m_i = _attend_to_keys(  # full tiles, whole pages of them
            acc, l_i, m_i, q, _rows_descriptor(K, pool_rows, HEAD_DIM, BLOCK_N),
            _rows_descriptor(V, pool_rows, HEAD_DIM, BLOCK_N), BlockTable, sequence, kv_head,
            heads_kv, page_size, positions, kv_len, lo, full, qk_scale, HEAD_DIM, BLOCK_N, False, True,
        )  # fmt: skip
    acc, l_i, m_i = _attend_to_keys(  # full tiles
        acc, l_i, m_i, q, K, V, BlockTable, sequence, kv_head, heads_kv, page_size, positions,
        kv_len, full, mid, qk_scale, HEAD_DIM, BLOCK_N, False, False,
    )  # fmt: skip
    acc, l_i, m_i = _attend_to_keys(  # tiles across the diagonal and the last key
        acc, l_i, m_i, q, K, V, BlockTable, sequence, kv_head, heads_kv, page_size, positions,
        kv_len, mid, hi, qk_scale, HEAD_DIM, BLOCK_N, True, False,
    )  # fmt: skip

    # no key of this split for this row: zeros, and a weight of exp(-inf) = 0
    empty = l_i == 0.0
    l_i = tl.where(empty, 1.0, l_i)
    lse = tl.where(empty, float("-inf"), (m_i + tl.log2(l_i)) / LOG2E)
    # (BLOCK_M,): this split's entry of each row
    slots = (first_row + rows) * num_splits + split
    dims = tl.arange(0, HEAD_DIM)
    tl.store(
        PartialOut + slots[:, None] * HEAD_DIM + dims[None, :],
        acc / l_i[:, None],
        mask=kept[:, None],
    )
    tl.store(PartialLSE + slots, lse, mask=kept)

    if MERGE_IN_LAUNCH:
        # All of this program's stores, then one count; its release publishes them to whichever
        # program counts last, whose acquire makes every split's stores visible to it.
        tl.debug_barrier()
        counter = Counters + sequence * tl.num_programs(1) + tl.program_id(1)
        arrived = tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu")
        if arrived == num_splits - 1:
            tl.debug_barrier()
            _merge_splits(
                PartialOut, PartialLSE, Out, first_row, first, group_rows,
                num_splits, HEAD_DIM, BLOCK_M,
            )  # fmt: skip
            tl.store(counter, 0)  # zeros again for the next launch


# --8<-- [end:split-kernel]


# --8<-- [start:merge-kernel]
@triton.jit(do_not_specialize=["seqlen_q", "heads_kv", "group", "num_splits"])
def _merge_kernel(
    PartialOut, PartialLSE, Out,  # (B * H * L, num_splits, D), (B * H * L, num_splits), (B, H, L, D)
    seqlen_q, heads_kv, group, num_splits,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
):  # fmt: skip
    """One program, grid `(1, H_kv * row_blocks, B)`: the merge of one row block, a launch of its own."""
    _, _, first_row, first, group_rows = _query_rows(
        seqlen_q, heads_kv, group, BLOCK_M
    )
    _merge_splits(
        PartialOut, PartialLSE, Out, first_row, first, group_rows, num_splits,
        HEAD_DIM, BLOCK_M,
    )  # fmt: skip


# --8<-- [end:merge-kernel]


# Launch configurations. On a GPU the autotuner times these once per (L, group, page size, head size,
# capacity rounded up to a power of 2, B, splits, merge); `QKV_FLASH_AUTOTUNE=0` runs the first. Under
# the interpreter, 16-key tiles keep the tests' shapes small.
def _configs() -> list[triton.Config]:
    if INTERPRETED:
        return [triton.Config({"BLOCK_N": 16})]
    configs = [
        triton.Config({"BLOCK_N": block_n}, num_warps=warps, num_stages=stages)
        for block_n in (64, 128)
        for warps in (4, 8)
        for stages in (2, 3)
    ]
    return configs if AUTOTUNE else configs[:1]


def _variants() -> list[triton.Config]:
    """Configurations the autotuner does not try but the lab's tuning does (`qkv_lab.pinning.VARIANTS`):
    the full tiles read through tensor descriptors (TMA), for Hopper and later."""
    if INTERPRETED:
        return [triton.Config({"BLOCK_N": 16, "TMA": True})]
    # 128 keys at 4 warps spill at 64 rows
    shapes = [(64, 4), (64, 8), (128, 8)]
    return [
        triton.Config({"BLOCK_N": n, "TMA": True}, num_warps=w, num_stages=3)
        for n, w in shapes
    ]


DECODE_VARIANTS = _variants()
TUNING_KEY = [
    "seqlen_q",
    "group",
    "page_size",
    "max_keys",
    "batch",
    "num_splits",
    "HEAD_DIM",
    "BLOCK_M",
    "MERGE_IN_LAUNCH",
]
_tuned_split = triton.autotune(_configs(), key=TUNING_KEY)(_split_kernel)


def rows_per_program(group: int, seqlen_q: int) -> int:
    """BLOCK_M: a key/value head's `group * L` query rows, rounded up to a power of 2 in [16, MAX_ROWS]."""
    return min(max(16, triton.next_power_of_2(group * seqlen_q)), MAX_ROWS)


def wave_fill(programs: int, multiprocessors: int) -> float:
    """The share of the waves' program slots that `programs` use, a wave being one per multiprocessor."""
    waves = math.ceil(programs / multiprocessors)
    return programs / (waves * multiprocessors)


def default_splits(programs: int, multiprocessors: int, key_blocks: int) -> int:
    """How many splits fill whole waves of the GPU's multiprocessors, at most one per key block.

    The fewest splits `s` for which `programs * s` is at least `MIN_WAVES` waves and fills at least
    `WAVE_FILL` of the waves' slots (`wave_fill`); where no `s` up to `min(key_blocks, MAX_SPLITS)`
    does both, the one that fills its waves best (the most splits among equals).

    Args:
        programs: programs without splitting, `B * H_kv * row blocks`.
        multiprocessors: the GPU's streaming multiprocessors (132 on an H100 SXM or an H200).
        key_blocks: a sequence's capacity (S, or `max_pages * page_size`) in tiles of the widest
            `BLOCK_N` the autotuner holds: more splits would leave some without a tile.
    """
    most = max(1, min(key_blocks, contract.MAX_SPLITS))
    splits = range(1, most + 1)
    for s in splits:
        waves_enough = programs * s >= MIN_WAVES * multiprocessors
        if (
            waves_enough
            and wave_fill(programs * s, multiprocessors) >= WAVE_FILL
        ):
            return s
    return max(
        splits, key=lambda s: (wave_fill(programs * s, multiprocessors), s)
    )


def multiprocessors(device: torch.device) -> int:
    """The device's streaming multiprocessors; `INTERPRETED_MULTIPROCESSORS` off CUDA."""
    if device.type != "cuda":
        return INTERPRETED_MULTIPROCESSORS
    return torch.cuda.get_device_properties(device).multi_processor_count


_counters: dict[tuple[torch.device, int], Tensor] = {}


def counters(device: torch.device, size: int) -> Tensor:
    """`size` int32 zeros that MERGE_IN_LAUNCH counts in: one buffer per device and stream, kept, since
    each launch leaves it at zero. A larger one replaces it; under CUDA graph capture a new one is not
    kept (its memory belongs to the graph) and its zero fill is one launch more."""
    cuda = device.type == "cuda"
    stream = torch.cuda.current_stream(device).cuda_stream if cuda else 0
    found = _counters.get((device, stream))
    if found is not None and found.numel() >= size:
        return found
    zeros = torch.zeros(size, dtype=torch.int32, device=device)
    if not cuda or not torch.cuda.is_current_stream_capturing():
        _counters[device, stream] = zeros
    return zeros


def decode(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    lengths: Tensor,
    block_tables: Tensor | None,
    num_splits: int | None,
    scale: float | None,
    *,
    merge_in_launch: bool = False,
) -> Tensor:
    """Run the split kernel, then the merge kernel, or (`merge_in_launch=True`) merge in the split
    kernel's own launch, on inputs that `contract.check_decode_inputs` accepts; `lengths` is `(B,)`."""
    batch, heads, seqlen_q, head_dim = q.shape
    heads_kv = k.size(1)
    group = heads // heads_kv
    block_m = rows_per_program(group, seqlen_q)
    row_blocks = triton.cdiv(group * seqlen_q, block_m)
    page_size = k.size(2)
    max_pages = 1
    if block_tables is not None:
        max_pages = block_tables.size(1)
        block_tables = block_tables.to(torch.int32).contiguous()
    capacity = max_pages * page_size
    if num_splits is None:
        widest = max(c.kwargs["BLOCK_N"] for c in _tuned_split.configs)
        num_splits = default_splits(
            batch * heads_kv * row_blocks,
            multiprocessors(q.device),
            triton.cdiv(capacity, widest),
        )
    scale = 1 / math.sqrt(head_dim) if scale is None else scale
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    rows = batch * heads * seqlen_q
    partial_out = torch.empty(
        rows, num_splits, head_dim, device=q.device, dtype=torch.float32
    )
    partial_lse = torch.empty(
        rows, num_splits, device=q.device, dtype=torch.float32
    )
    # (B, H, L, D), its rows in (B, H, L) order like the partial ones
    out = torch.empty_like(q)
    counted = None
    if merge_in_launch:
        counted = counters(q.device, batch * heads_kv * row_blocks)

    def launch() -> None:
        _tuned_split[(num_splits, heads_kv * row_blocks, batch)](
            q, k, v, block_tables, lengths.to(torch.int32).contiguous(), partial_out, partial_lse,
            out, counted, scale * LOG2E.value, seqlen_q, heads_kv, group, page_size, max_pages,
            num_splits, triton.next_power_of_2(capacity), batch, k.numel() // head_dim,
            HEAD_DIM=head_dim, BLOCK_M=block_m, MERGE_IN_LAUNCH=merge_in_launch,
        )  # fmt: skip

    with _on_device(q):
        if any(c.kwargs.get("TMA") for c in _tuned_split.configs):  # pinned
            contextvars.copy_context().run(_with_scratch, q.device, launch)
        else:
            launch()
        if not merge_in_launch:
            _merge_kernel[(1, heads_kv * row_blocks, batch)](
                partial_out, partial_lse, out, seqlen_q, heads_kv, group, num_splits,
                HEAD_DIM=head_dim, BLOCK_M=block_m,
            )  # fmt: skip
    return out


def decode_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    lengths: Tensor | None = None,
    block_tables: Tensor | None = None,
    num_splits: int | None = None,
    scale: float | None = None,
) -> Tensor:
    """Check the inputs and run the kernels; documented, and imported lazily, as `qkv.decode_attention`."""
    contract.check_decode_inputs(
        q, k, v, lengths, block_tables, num_splits, scale
    )
    if lengths is None:
        lengths = torch.full(
            (q.size(0),), k.size(2), device=q.device, dtype=torch.int32
        )
    return decode(q, k, v, lengths, block_tables, num_splits, scale)
