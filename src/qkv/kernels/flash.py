"""FlashAttention in Triton: exact attention in tiles, without the (L, S) score matrix in memory.

Algorithm. For each block of `BLOCK_M` query rows (one program per block, per batch and head), the forward
kernel walks over the keys in blocks of `BLOCK_N`. It computes one tile of scores in registers and folds it
into three running quantities per row: the largest score so far `m_i`, the sum of exponentials `l_i` taken
relative to `m_i`, and the unnormalised output `acc`. When a tile raises the maximum, the old sum and
output are multiplied by `alpha = exp(m_old - m_new)` so that all terms share one reference point; the
division by `l_i` happens once, at the end. This is the online softmax of Milakov & Gimelshein (2018),
applied to attention by Dao et al. (2022, FlashAttention) and arranged as in Dao (2023, FlashAttention-2):
queries in the outer (parallel) loop, keys in the inner loop, rescaling deferred to the end. Exponentials are
base 2 (`exp2` is one instruction on GPUs), with `log2(e)` folded into the score scale (`LOG2E`).

The forward pass stores the row-wise logsumexp `lse` (natural log, float32). The backward pass recomputes
each probability tile from it, `p = exp2(scores * scale * log2(e) - lse2)`, instead of storing the (L, S)
probabilities: a preprocessing kernel computes `delta = rowsum(dO * O)` and the logsumexp in base 2,
`lse2 = lse * log2(e)`; one kernel accumulates dK and dV over query blocks (one program per key block and
key/value head, looping over the query heads that share it), and one accumulates dQ over key blocks (one
program per query block). With `dP = dO V^T`, the softmax gradient is `dS = P * (dP - delta)`, and
`dQ = dS K * scale`, `dK = dS^T Q * scale`, `dV = P^T dO`. That is seven matrix products per tile: the dQ
kernel computes `Q K^T` and `dO V^T` again. Each output row belongs to one program, so the gradients are
the same, bit for bit, on every run.

The backward's variant ATOMIC_DQ (`BACKWARD_VARIANTS`) does the five products of Dao (2023,
FlashAttention-2) and Shah et al. (2024, FlashAttention-3) in the dK/dV kernel alone: each program also
adds its key block's share of dQ, `dS K`, to a float32 copy of dQ with atomic additions, and no dQ kernel
runs. The price is determinism: on a GPU the key blocks' additions to one row of dQ land in an order that
varies from run to run, and float32 addition is not associative, so dQ's last bits vary too (dK and dV do
not). The two-kernel path stays the default. Both take the scale as the compiler already fuses it, one FMA
per score, `exp2(qk * qk_scale - lse2)` (read in the PTX for sm_90), rather than in keys pre-scaled as
Triton's tutorial does: rounding `k * qk_scale` to float16 saved no instruction and took dQ up to seven
times further from the float64 reference than torch's own error (the tests allow three), at scale 2.5 and
D = 32 under the interpreter.

Masks. Causal (top-left or bottom-right), a sliding window and per-batch key lengths leave each query an
interval of keys (`qkv.kernels.tiles`). Each program asks `tiles` which tiles of its loop are empty (never
loaded), full (computed without a mask) and partial, and runs its loop in up to three stages: the partial
tiles at the far edge of a window, the full tiles, the partial tiles at the causal diagonal and at the end of
the keys. Only the partial stages build a mask; the causal loop of Triton's fused-attention tutorial is
split the same way. Grouped-query heads read their key/value head in place: query head `h` of `H` uses head
`h // (H // H_kv)`.

Packed batches. Given cumulative lengths (`flash_attention_varlen`), the batch is sequences of different
lengths laid one after another, each head's rows in one run, `(1, H, total, D)`. A program reads where its
sequence starts and how long it is (`_sequence`); from there on it is the padded kernel on that sequence
alone: its lengths, its causal offset, its tiles. The grid covers the longest sequence, and the programs past
a shorter one's end return at once. No program visits a tile between two sequences, so a packed batch costs
the tiles of each sequence's own square. The interface follows the flash-attention library's
`flash_attn_varlen_func` (`cu_seqlens`, `max_seqlen`); the code is ours.

Variants for Hopper. `_forward_kernel` has two constant flags, off by default: TMA reads q, k and v and
writes the output through tensor descriptors whose bounds are one head of one sequence (the keys: the kept
keys), so the rows past them read as zeros without a mask; FOLD_SCALE computes the full tiles as
`exp2(qk * scale - m)`, one FMA per score. The autotuner does not try them; the lab's lease times them
(`FORWARD_VARIANTS`), so that a measured run decides whether one becomes the default.

Limits: see `qkv.kernels.contract`; no attention mask other than these, no dropout. Under Triton's CPU
interpreter (`TRITON_INTERPRET=1`, set before Triton is imported) the kernels run one small tile shape each.
On a GPU the autotuner times each kernel's configurations once per shape; `QKV_FLASH_AUTOTUNE=0` runs the
first configuration untuned (the CUDA tests use it to check correctness in minutes, not hours).
"""

# Triton's convention: upper-case names for pointers and compile-time constants.
# ruff: noqa: N803, N806

import contextlib
import contextvars
import math
import os
from collections.abc import Callable

import torch
import triton
import triton.language as tl
from torch import Tensor

from qkv.kernels import contract, tiles
from qkv.kernels.contract import Packing
from qkv.masks import Causal, Mask, parse_mask

LOG2E = tl.constexpr(1.4426950408889634)  # log2(e): exp(x) = exp2(x * LOG2E)
# read when the kernels below are decorated
INTERPRETED = contract.interpreted()
AUTOTUNE = not INTERPRETED and os.environ.get("QKV_FLASH_AUTOTUNE", "1") != "0"


def _device_function(fn):
    """`fn` as the kernels call it: compiled by Triton, or run as plain Python by the interpreter (which
    only interprets functions whose module imports `triton.language`)."""
    return fn if INTERPRETED else triton.jit(fn)


_key_bounds = _device_function(tiles.key_bounds)
_query_bounds = _device_function(tiles.query_bounds)
_tile_ranges = _device_function(tiles.tile_ranges)


@triton.jit
def _batch_head():
    """The flat index `b * heads + h` of this program's (batch, head), in int64; the grid is (blocks, heads, B)."""
    return tl.program_id(2).to(tl.int64) * tl.num_programs(1) + tl.program_id(1)


@triton.jit
def _sequence(CuSeqlens, seqlen, heads):
    """This program's sequence in q (or k and v): `(start, head_rows, length)`, rows of a `(rows, D)` view.

    Head `h` of the sequence is rows `start + h * head_rows` onwards, `length` of them. Padded, the tensor
    is `(B, heads, seqlen, D)`: sequence `b` starts at row `b * heads * seqlen`, and every head and sequence
    has `seqlen` rows. Packed (`CuSeqlens`, int32 `(B + 1,)`), it is `(1, heads, total, D)`: sequence `b`
    starts at row `cu[b]`, heads are `total = cu[B]` rows apart, and it has `cu[b + 1] - cu[b]` rows.
    `start` and `head_rows` are int64, so that offsets past 2**31 elements stay exact; `length` is int32,
    as `seqlen` is.
    """
    sequence = tl.program_id(2)
    if CuSeqlens is None:
        start = sequence.to(tl.int64) * heads * seqlen
        head_rows, length = seqlen.to(tl.int64), seqlen
    else:
        first = tl.load(CuSeqlens + sequence)
        length = tl.load(CuSeqlens + sequence + 1) - first
        start, head_rows = (
            first.to(tl.int64),
            tl.load(CuSeqlens + tl.num_programs(2)).to(tl.int64),
        )
    return start, head_rows, length


@triton.jit
def _kept_keys(KeyLengths, seqlen_k):
    """How many keys this program's batch keeps: `key_lengths[b]` clamped to [0, S], or S without them.

    In int32 either way, like `seqlen_k`: the loop bounds derived from it then have one type with and
    without key lengths.
    """
    kv_len = seqlen_k
    if KeyLengths is not None:
        kv_len = tl.minimum(
            tl.maximum(tl.load(KeyLengths + tl.program_id(2)), 0), seqlen_k
        )
        kv_len = kv_len.to(tl.int32)
    return kv_len


@triton.jit
def _load_rows(Ptr, index, count, HEAD_DIM: tl.constexpr, MASKED: tl.constexpr):
    """Rows `index` of a `(N, HEAD_DIM)` matrix; with MASKED, rows at or past `count` read as zeros."""
    pointers = Ptr + index[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :]
    if MASKED:
        rows = tl.load(pointers, mask=(index < count)[:, None], other=0.0)
    else:
        rows = tl.load(pointers)
    return rows


@triton.jit
def _load_columns(
    Ptr, index, count, HEAD_DIM: tl.constexpr, MASKED: tl.constexpr
):
    """`_load_rows` read transposed, `(HEAD_DIM, len(index))`: rows `index` become columns."""
    pointers = Ptr + index[None, :] * HEAD_DIM + tl.arange(0, HEAD_DIM)[:, None]
    if MASKED:
        columns = tl.load(pointers, mask=(index < count)[None, :], other=0.0)
    else:
        columns = tl.load(pointers)
    return columns


@triton.jit
def _rows_descriptor(Ptr, count, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr):
    """A tensor descriptor (TMA) of the `(count, HEAD_DIM)` rows at `Ptr`,
    read and written `BLOCK` rows at a time.

    Its bounds are one head of one sequence: rows at or past `count` read as
    zeros and are not written, as `_load_rows` with MASKED reads them, and no
    block reaches the next head's rows.
    """
    return tl.make_tensor_descriptor(
        Ptr,
        shape=[count, HEAD_DIM],
        strides=[HEAD_DIM, 1],
        block_shape=[BLOCK, HEAD_DIM],
    )


@triton.jit
def _load_block(
    Ptr, first, index, count,
    HEAD_DIM: tl.constexpr, MASKED: tl.constexpr, TMA: tl.constexpr,
):  # fmt: skip
    """Rows `index = first + arange(len(index))` of a `(N, HEAD_DIM)` matrix:
    through the descriptor `Ptr` with TMA (bounded by its own rows), else as
    `_load_rows` reads them."""
    if TMA:
        rows = Ptr.load([first, 0])
    else:
        rows = _load_rows(Ptr, index, count, HEAD_DIM, MASKED)
    return rows


# --8<-- [start:keep]
@triton.jit
def _keep(
    rows,
    cols,
    kv_len,
    offset,
    window,
    CAUSAL: tl.constexpr,
    WINDOW: tl.constexpr,
):
    """The mask of one tile: True where a query of `rows` may attend a key of
    `cols`.

    `rows (BLOCK_M, 1)` and `cols (1, BLOCK_N)` give a `(BLOCK_M, BLOCK_N)`
    tile; `rows (1, BLOCK_M)` and `cols (BLOCK_N, 1)` its transpose, keys by
    queries.
    """
    keep = cols < kv_len
    if CAUSAL:
        keep = keep & (cols <= rows + offset)
    if WINDOW:
        keep = keep & (cols > rows + offset - window)
    return keep


# --8<-- [end:keep]


# --8<-- [start:inner-loop]
@triton.jit
def _attend_to_keys(
    acc, l_i, m_i,  # the running output, sum and maximum of BLOCK_M query rows
    q, K, V, rows, start, end, kv_len, offset, window, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, WINDOW: tl.constexpr, MASKED: tl.constexpr,
    TMA: tl.constexpr,
):  # fmt: skip
    """Fold the key tiles in `[start, end)` into one block of query rows; MASKED
    tiles cross a mask edge; TMA: `k` and `v` are tensor descriptors."""
    for tile in range(start, end, BLOCK_N):
        cols = tile + tl.arange(0, BLOCK_N)
        k = _load_block(K, tile, cols, kv_len, HEAD_DIM, MASKED, TMA)
        v = _load_block(V, tile, cols, kv_len, HEAD_DIM, MASKED, TMA)
        # (BLOCK_M, BLOCK_N), in log2 units
        scores = tl.dot(q, tl.trans(k)) * qk_scale
        if MASKED:
            keep = _keep(
                rows[:, None],
                cols[None, :],
                kv_len,
                offset,
                window,
                CAUSAL,
                WINDOW,
            )
            scores = tl.where(keep, scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, 1))
        shift = m_new
        if MASKED:
            # A row with no kept key yet keeps m = -inf: shift by 0 instead, so
            # exp2(-inf) gives 0, not NaN.
            shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(scores - shift[:, None])
        alpha = tl.exp2(m_i - shift)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    return acc, l_i, m_i


# --8<-- [end:inner-loop]


@triton.jit
def _attend_to_full_tiles(
    acc, l_i, m_i, q, K, V, start, end, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, TMA: tl.constexpr,
):  # fmt: skip
    """`_attend_to_keys` on tiles without a mask, the scale folded into one FMA:
    `exp2(qk * qk_scale - m)` on the raw products `qk`, the maximum taken
    before scaling, which needs `qk_scale >= 0` (see `_flash_forward`)."""
    for tile in range(start, end, BLOCK_N):
        cols = tile + tl.arange(0, BLOCK_N)
        k = _load_block(K, tile, cols, 0, HEAD_DIM, False, TMA)
        v = _load_block(V, tile, cols, 0, HEAD_DIM, False, TMA)
        qk = tl.dot(q, tl.trans(k))  # (BLOCK_M, BLOCK_N), unscaled
        m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = tl.exp2(qk * qk_scale - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    return acc, l_i, m_i


# --8<-- [start:forward-kernel]
@triton.jit(
    do_not_specialize=[
        "seqlen_q",
        "seqlen_k",
        "bottom_right",
        "window",
        "group",
    ]
)
def _forward_kernel(
    # (B, H, L, D), (B, H_kv, S, D) twice, (B, H, L, D), (B, H, L), (B,)
    Q, K, V, Out, LSE, KeyLengths,
    CuSeqlensQ, CuSeqlensK,  # packed sequences: (B + 1,) each, or None
    qk_scale, seqlen_q, seqlen_k, bottom_right, window, group,
    HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, WINDOW: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    TMA: tl.constexpr = False, FOLD_SCALE: tl.constexpr = False,
):  # fmt: skip
    """One program: `BLOCK_M` query rows of one (sequence, head) against the key
    tiles they may see.

    Variants for Hopper, chosen by launch configuration (`FORWARD_VARIANTS`):
    TMA reads q, k, v and writes the output through tensor descriptors bounded
    by one head of one sequence (`_rows_descriptor`); FOLD_SCALE runs the full
    tiles with the scale folded into one FMA (`_attend_to_full_tiles`).
    """
    block = tl.program_id(0)
    head = tl.program_id(1)  # its key/value head is head // group
    q_start, q_head_rows, seqlen_q = _sequence(
        CuSeqlensQ, seqlen_q, tl.num_programs(1)
    )
    k_start, k_head_rows, seqlen_k = _sequence(
        CuSeqlensK, seqlen_k, tl.num_programs(1) // group
    )
    # past the end of a shorter sequence of a packed batch
    if block * BLOCK_M >= seqlen_q:
        return
    # where this head of the sequence begins
    q_rows = q_start + head * q_head_rows
    k_rows = k_start + head // group * k_head_rows
    Q += q_rows * HEAD_DIM
    Out += q_rows * HEAD_DIM
    LSE += q_rows
    K += k_rows * HEAD_DIM
    V += k_rows * HEAD_DIM
    # causal: query i sees keys j <= i + offset
    offset = (seqlen_k - seqlen_q) * bottom_right

    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    if TMA:
        Q = _rows_descriptor(Q, seqlen_q, HEAD_DIM, BLOCK_M)
    q = _load_block(Q, block * BLOCK_M, rows, seqlen_q, HEAD_DIM, True, TMA)
    kv_len = _kept_keys(KeyLengths, seqlen_k)
    if TMA:  # K and V bounded by the kept keys: the keys past them read as 0
        Out = _rows_descriptor(Out, seqlen_q, HEAD_DIM, BLOCK_M)
        K = _rows_descriptor(K, kv_len, HEAD_DIM, BLOCK_N)
        V = _rows_descriptor(V, kv_len, HEAD_DIM, BLOCK_N)
    first_row = block * BLOCK_M
    last_row = min(first_row + BLOCK_M, seqlen_q) - 1
    lo_first, lo_last, hi_first, hi_last = _key_bounds(
        first_row, last_row, kv_len, offset, window, CAUSAL, WINDOW
    )
    # --8<-- [start:stages]
    start, full_start, full_end, end = _tile_ranges(
        lo_first, lo_last, hi_first, hi_last, BLOCK_N
    )

    # running max of the scores (log2 units)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)  # running sum of exp2(scores - m_i)
    # running sum of exp2(scores - m_i) @ v
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    # tiles across the window's far edge (without a window there are none)
    if WINDOW:
        acc, l_i, m_i = _attend_to_keys(
            acc, l_i, m_i, q, K, V, rows, start, full_start,
            kv_len, offset, window, qk_scale,
            HEAD_DIM, BLOCK_N, CAUSAL, WINDOW, True, TMA,
        )  # fmt: skip
    if FOLD_SCALE:
        acc, l_i, m_i = _attend_to_full_tiles(
            acc, l_i, m_i, q, K, V, full_start, full_end, qk_scale,
            HEAD_DIM, BLOCK_N, TMA,
        )  # fmt: skip
    else:
        acc, l_i, m_i = _attend_to_keys(  # full tiles: no mask
            acc, l_i, m_i, q, K, V, rows, full_start, full_end,
            kv_len, offset, window, qk_scale,
            HEAD_DIM, BLOCK_N, CAUSAL, WINDOW, False, TMA,
        )  # fmt: skip
    # tiles across the diagonal or the last key
    acc, l_i, m_i = _attend_to_keys(
        acc, l_i, m_i, q, K, V, rows, full_end, end,
        kv_len, offset, window, qk_scale,
        HEAD_DIM, BLOCK_N, CAUSAL, WINDOW, True, TMA,
    )  # fmt: skip
    # --8<-- [end:stages]

    empty = l_i == 0.0  # a row that may attend no key: output zeros, not 0 / 0
    l_i = tl.where(empty, 1.0, l_i)
    out = acc / l_i[:, None]
    lse = tl.where(empty, float("-inf"), (m_i + tl.log2(l_i)) / LOG2E)
    if TMA:
        Out.store([first_row, 0], out.to(q.dtype))
    else:
        dims = tl.arange(0, HEAD_DIM)
        tl.store(
            Out + rows[:, None] * HEAD_DIM + dims[None, :],
            out,
            mask=(rows < seqlen_q)[:, None],
        )
    tl.store(LSE + rows, lse, mask=rows < seqlen_q)


# --8<-- [end:forward-kernel]


@triton.jit(do_not_specialize=["seqlen_q"])
def _backward_preprocess(
    Out, dOut, LSE, Delta, LSE2, seqlen_q,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
):  # fmt: skip
    """`delta = rowsum(dO * O)`, the term that the softmax gradient subtracts
    from every row, and `lse2 = lse * log2(e)`, the logsumexp in base 2 as the
    other backward kernels read it (a row without keys keeps -inf)."""
    block = tl.program_id(0)
    head = _batch_head()
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < seqlen_q
    out = _load_rows(
        Out + head * seqlen_q * HEAD_DIM, rows, seqlen_q, HEAD_DIM, True
    )
    d_out = _load_rows(
        dOut + head * seqlen_q * HEAD_DIM, rows, seqlen_q, HEAD_DIM, True
    )
    delta = tl.sum(out.to(tl.float32) * d_out.to(tl.float32), 1)
    tl.store(Delta + head * seqlen_q + rows, delta, mask=row_ok)
    lse = tl.load(LSE + head * seqlen_q + rows, mask=row_ok, other=0.0)
    tl.store(LSE2 + head * seqlen_q + rows, lse * LOG2E, mask=row_ok)


# --8<-- [start:probabilities]
@triton.jit
def _probabilities(
    scores, lse2, rows, cols, kv_len, offset, window,
    CAUSAL: tl.constexpr, WINDOW: tl.constexpr, MASKED: tl.constexpr,
):  # fmt: skip
    """One tile of attention probabilities, recomputed from its scores and the
    stored logsumexp `lse2`, both in log2 units. `rows` and `lse2` are
    `(BLOCK_M, 1)` and `cols (1, BLOCK_N)` for a tile of queries by keys;
    `(1, BLOCK_M)` and `(BLOCK_N, 1)` for its transpose (see `_keep`)."""
    p = tl.exp2(scores - lse2)
    if MASKED:
        p = tl.where(
            _keep(rows, cols, kv_len, offset, window, CAUSAL, WINDOW), p, 0.0
        )
    return p


# --8<-- [end:probabilities]


@triton.jit
def _add_dq(
    dQAccum, k, ds_t, rows, seqlen_q,
    HEAD_DIM: tl.constexpr, MASKED: tl.constexpr,
):  # fmt: skip
    """Add one key block's share of dQ, `dS K`, to `rows` of the float32
    accumulator `dQAccum (L, D)`, with atomic additions.

    Every key block of the head adds to the same rows, from programs that run
    at the same time; on a GPU their additions land in an order that varies
    from run to run, and so do the last bits of the sum. Computed transposed,
    `K^T dS^T (D, BLOCK_M)`, so that no product transposes a tile it computed
    (see `_dkdv_over_queries`). With MASKED, rows at or past L add nothing.
    Relaxed: the additions need no order among themselves; the kernel's end
    is what orders them before dQ is read.
    """
    dims = tl.arange(0, HEAD_DIM)
    dq_t = tl.dot(tl.trans(k), ds_t.to(k.dtype))  # (D, N) @ (N, M) -> (D, M)
    pointers = dQAccum + rows[None, :] * HEAD_DIM + dims[:, None]
    if MASKED:
        row_ok = (rows < seqlen_q)[None, :]
        tl.atomic_add(pointers, dq_t, mask=row_ok, sem="relaxed")
    else:
        tl.atomic_add(pointers, dq_t, sem="relaxed")


@triton.jit
def _dkdv_over_queries(
    dk, dv, k, v, Q, dOut, LSE2, Delta, dQAccum, cols, start, end, seqlen_q, kv_len, offset, window,
    qk_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, CAUSAL: tl.constexpr,
    WINDOW: tl.constexpr, MASKED: tl.constexpr, ATOMIC_DQ: tl.constexpr,
):  # fmt: skip
    """Add the query tiles in `[start, end)` of one head to dK and dV of one block of keys; with
    ATOMIC_DQ, add the block's share of those rows' dQ to `dQAccum` too (`_add_dq`).

    Rows past L read as zeros (q, dO, lse2 and delta alike), so they add nothing. The tiles are computed
    transposed, keys by queries (`p_t` is P^T), so that `P^T dO` and `dS^T Q` take them as they are: the
    same products written with `tl.trans(p)` and `tl.trans(ds)` gave a wrong dK on CUDA at D = 128 in
    some launch configurations (H100 and H200, Triton 3.6; benchmarks/gpu/2026-11-26-h200b).
    """
    for tile in range(start, end, BLOCK_M):
        rows = tile + tl.arange(0, BLOCK_M)
        q_t = _load_columns(Q, rows, seqlen_q, HEAD_DIM, MASKED)  # (D, BLOCK_M)
        # (BLOCK_M, D)
        d_out = _load_rows(dOut, rows, seqlen_q, HEAD_DIM, MASKED)
        if MASKED:
            lse2 = tl.load(LSE2 + rows, mask=rows < seqlen_q, other=0.0)
            delta = tl.load(Delta + rows, mask=rows < seqlen_q, other=0.0)
        else:
            lse2 = tl.load(LSE2 + rows)
            delta = tl.load(Delta + rows)
        # (BLOCK_N, BLOCK_M), in log2 units
        scores_t = tl.dot(k, q_t) * qk_scale
        p_t = _probabilities(
            scores_t, lse2[None, :], rows[None, :], cols[:, None], kv_len, offset, window,
            CAUSAL, WINDOW, MASKED,
        )  # fmt: skip
        # (BLOCK_N, BLOCK_M) @ (BLOCK_M, D)
        dv = tl.dot(p_t.to(d_out.dtype), d_out, dv)
        dp_t = tl.dot(v, tl.trans(d_out))  # (BLOCK_N, BLOCK_M)
        ds_t = p_t * (dp_t - delta[None, :])
        # (BLOCK_N, BLOCK_M) @ (BLOCK_M, D)
        dk = tl.dot(ds_t.to(q_t.dtype), tl.trans(q_t), dk)
        if ATOMIC_DQ:  # the fifth product, in place of the dQ kernel's three
            _add_dq(dQAccum, k, ds_t, rows, seqlen_q, HEAD_DIM, MASKED)
    return dk, dv


@triton.jit(
    do_not_specialize=[
        "seqlen_q",
        "seqlen_k",
        "bottom_right",
        "window",
        "group",
    ]
)
def _backward_dkdv_kernel(
    Q, K, V, dOut, LSE2, Delta, dK, dV,
    dQAccum,  # ATOMIC_DQ: float32 (B, H, L, D), zeros; else None
    KeyLengths, CuSeqlensQ, CuSeqlensK,
    scale, qk_scale, seqlen_q, seqlen_k, bottom_right, window, group,
    HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, WINDOW: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    ATOMIC_DQ: tl.constexpr = False,
):  # fmt: skip
    """One program: dK and dV of `BLOCK_N` keys of one key/value head, summed over its group's query heads.

    The variant ATOMIC_DQ (`BACKWARD_VARIANTS`) also adds the block's share of each query's dQ,
    unscaled (`dS K`), to `dQAccum`, atomically; the dQ kernel does not run. Not deterministic on a
    GPU (see `_add_dq`).
    """
    block = tl.program_id(0)
    # its query heads are kv_head * group + (0 .. group - 1)
    kv_head = tl.program_id(1)
    q_start, q_head_rows, seqlen_q = _sequence(
        CuSeqlensQ, seqlen_q, tl.num_programs(1) * group
    )
    k_start, k_head_rows, seqlen_k = _sequence(
        CuSeqlensK, seqlen_k, tl.num_programs(1)
    )
    # past the end of a shorter sequence of a packed batch
    if block * BLOCK_N >= seqlen_k:
        return
    k_rows = k_start + kv_head * k_head_rows
    K += k_rows * HEAD_DIM
    V += k_rows * HEAD_DIM
    dK += k_rows * HEAD_DIM
    dV += k_rows * HEAD_DIM
    offset = (seqlen_k - seqlen_q) * bottom_right

    cols = block * BLOCK_N + tl.arange(0, BLOCK_N)
    kv_len = _kept_keys(KeyLengths, seqlen_k)
    k = _load_rows(K, cols, kv_len, HEAD_DIM, True)
    v = _load_rows(V, cols, kv_len, HEAD_DIM, True)
    first_col = block * BLOCK_N
    lo_first, lo_last, hi_first, hi_last = _query_bounds(
        first_col,
        first_col + BLOCK_N - 1,
        kv_len,
        seqlen_q,
        offset,
        window,
        CAUSAL,
        WINDOW,
    )
    start, full_start, full_end, end = _tile_ranges(
        lo_first, lo_last, hi_first, hi_last, BLOCK_M
    )
    dk = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    for member in range(0, group):
        q_rows = q_start + (kv_head * group + member) * q_head_rows
        Q_h, dOut_h = Q + q_rows * HEAD_DIM, dOut + q_rows * HEAD_DIM
        LSE2_h, Delta_h = LSE2 + q_rows, Delta + q_rows
        dQ_h = dQAccum  # None without ATOMIC_DQ
        if ATOMIC_DQ:
            dQ_h += q_rows * HEAD_DIM
        # rows across the diagonal (without causal masking there are none)
        if CAUSAL:
            dk, dv = _dkdv_over_queries(
                dk, dv, k, v, Q_h, dOut_h, LSE2_h, Delta_h, dQ_h, cols, start, full_start,
                seqlen_q, kv_len, offset, window, qk_scale,
                HEAD_DIM, BLOCK_M, CAUSAL, WINDOW, True, ATOMIC_DQ,
            )  # fmt: skip
        dk, dv = _dkdv_over_queries(  # rows that keep every key of the block: no mask
            dk, dv, k, v, Q_h, dOut_h, LSE2_h, Delta_h, dQ_h, cols, full_start, full_end,
            seqlen_q, kv_len, offset, window, qk_scale,
            HEAD_DIM, BLOCK_M, CAUSAL, WINDOW, False, ATOMIC_DQ,
        )  # fmt: skip
        dk, dv = _dkdv_over_queries(  # rows across the window's far edge, or past L
            dk, dv, k, v, Q_h, dOut_h, LSE2_h, Delta_h, dQ_h, cols, full_end, end,
            seqlen_q, kv_len, offset, window, qk_scale,
            HEAD_DIM, BLOCK_M, CAUSAL, WINDOW, True, ATOMIC_DQ,
        )  # fmt: skip
    dims = tl.arange(0, HEAD_DIM)
    key_ok = (cols < seqlen_k)[:, None]
    tl.store(
        dK + cols[:, None] * HEAD_DIM + dims[None, :], dk * scale, mask=key_ok
    )
    tl.store(dV + cols[:, None] * HEAD_DIM + dims[None, :], dv, mask=key_ok)


@triton.jit
def _dq_over_keys(
    dq, q, d_out, lse2, delta, K, V, rows, start, end, kv_len, offset, window, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, WINDOW: tl.constexpr, MASKED: tl.constexpr,
):  # fmt: skip
    """Add the key tiles in `[start, end)` to dQ of one block of query rows."""
    for tile in range(start, end, BLOCK_N):
        cols = tile + tl.arange(0, BLOCK_N)
        k = _load_rows(K, cols, kv_len, HEAD_DIM, MASKED)
        v = _load_rows(V, cols, kv_len, HEAD_DIM, MASKED)
        # (BLOCK_M, BLOCK_N), in log2 units
        scores = tl.dot(q, tl.trans(k)) * qk_scale
        p = _probabilities(
            scores, lse2[:, None], rows[:, None], cols[None, :], kv_len, offset, window,
            CAUSAL, WINDOW, MASKED,
        )  # fmt: skip
        dp = tl.dot(d_out, tl.trans(v))  # (BLOCK_M, BLOCK_N)
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq)  # (BLOCK_M, BLOCK_N) @ (BLOCK_N, D)
    return dq


@triton.jit(
    do_not_specialize=[
        "seqlen_q",
        "seqlen_k",
        "bottom_right",
        "window",
        "group",
    ]
)
def _backward_dq_kernel(
    Q, K, V, dOut, LSE2, Delta, dQ, KeyLengths, CuSeqlensQ, CuSeqlensK,
    scale, qk_scale, seqlen_q, seqlen_k, bottom_right, window, group,
    HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, WINDOW: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """One program: dQ of `BLOCK_M` query rows, summed over every key tile they see."""
    block = tl.program_id(0)
    head = tl.program_id(1)
    q_start, q_head_rows, seqlen_q = _sequence(
        CuSeqlensQ, seqlen_q, tl.num_programs(1)
    )
    k_start, k_head_rows, seqlen_k = _sequence(
        CuSeqlensK, seqlen_k, tl.num_programs(1) // group
    )
    # past the end of a shorter sequence of a packed batch
    if block * BLOCK_M >= seqlen_q:
        return
    q_rows = q_start + head * q_head_rows
    k_rows = k_start + head // group * k_head_rows
    Q += q_rows * HEAD_DIM
    dOut += q_rows * HEAD_DIM
    dQ += q_rows * HEAD_DIM
    LSE2 += q_rows
    Delta += q_rows
    K += k_rows * HEAD_DIM
    V += k_rows * HEAD_DIM
    offset = (seqlen_k - seqlen_q) * bottom_right

    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < seqlen_q
    q = _load_rows(Q, rows, seqlen_q, HEAD_DIM, True)
    d_out = _load_rows(dOut, rows, seqlen_q, HEAD_DIM, True)
    lse2 = tl.load(LSE2 + rows, mask=row_ok, other=0.0)
    delta = tl.load(Delta + rows, mask=row_ok, other=0.0)
    kv_len = _kept_keys(KeyLengths, seqlen_k)
    first_row = block * BLOCK_M
    last_row = min(first_row + BLOCK_M, seqlen_q) - 1
    lo_first, lo_last, hi_first, hi_last = _key_bounds(
        first_row, last_row, kv_len, offset, window, CAUSAL, WINDOW
    )
    start, full_start, full_end, end = _tile_ranges(
        lo_first, lo_last, hi_first, hi_last, BLOCK_N
    )
    dq = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    if WINDOW:
        dq = _dq_over_keys(
            dq, q, d_out, lse2, delta, K, V, rows, start, full_start, kv_len, offset, window,
            qk_scale, HEAD_DIM, BLOCK_N, CAUSAL, WINDOW, True,
        )  # fmt: skip
    dq = _dq_over_keys(
        dq, q, d_out, lse2, delta, K, V, rows, full_start, full_end, kv_len, offset, window,
        qk_scale, HEAD_DIM, BLOCK_N, CAUSAL, WINDOW, False,
    )  # fmt: skip
    dq = _dq_over_keys(
        dq, q, d_out, lse2, delta, K, V, rows, full_end, end, kv_len, offset, window,
        qk_scale, HEAD_DIM, BLOCK_N, CAUSAL, WINDOW, True,
    )  # fmt: skip
    dims = tl.arange(0, HEAD_DIM)
    tl.store(
        dQ + rows[:, None] * HEAD_DIM + dims[None, :],
        dq * scale,
        mask=row_ok[:, None],
    )


def _grid(
    seqlen: int, block: int, batch: int, heads: int
) -> tuple[int, int, int]:
    """Programs `(blocks, heads, B)`: blocks of `block` positions on axis 0, heads and batch on axes 1 and 2.

    CUDA caps grid axes 1 and 2 at 65535 programs, so `B * H` cannot share one of them; blocks take axis 0
    (up to 2**31 - 1) so that consecutive programs share one head's keys and values in L2.
    """
    return (triton.cdiv(seqlen, block), heads, batch)


# Launch configurations. On a GPU the autotuner times these once per (lengths, head size, mask) and keeps
# the fastest, among those whose query block suits the number of queries (decoding has one to sixteen).
# Under the interpreter the first tile at half size keeps the CPU tests quick and exercises partial tiles,
# with BLOCK_M != BLOCK_N as on a GPU (the tile ranges depend on both).
def _configs(block_sizes: list[tuple[int, int]]) -> list[triton.Config]:
    if INTERPRETED:
        block_m, block_n = block_sizes[0]
        return [
            triton.Config({"BLOCK_M": block_m // 2, "BLOCK_N": block_n // 2})
        ]
    configs = [
        triton.Config(
            {"BLOCK_M": block_m, "BLOCK_N": block_n},
            num_warps=warps,
            num_stages=stages,
        )
        for block_m, block_n in block_sizes
        for warps in (4, 8)
        for stages in (2, 3)
    ]
    return configs if AUTOTUNE else configs[:1]


def _fitting_query_blocks(
    configs: list[triton.Config], named_args: dict, **_
) -> list[triton.Config]:
    """The configurations whose query block suits the queries: no taller than they are (16 rows at the
    least), and no shorter than 64 rows once there are that many; the smallest block if none suits."""
    rows = triton.next_power_of_2(named_args["seqlen_q"])
    fitting = [
        config
        for config in configs
        if min(rows, 64) <= config.kwargs["BLOCK_M"] <= max(rows, 16)
    ]
    return fitting or [
        min(configs, key=lambda config: config.kwargs["BLOCK_M"])
    ]


def _autotuned(
    kernel: triton.JITFunction,
    block_sizes: list[tuple[int, int]],
    per_query_block: bool = True,
    reset_to_zero: list[str] | None = None,
) -> triton.KernelInterface:
    """`kernel` with its autotuner; `per_query_block`: one program per BLOCK_M queries (prune by L);
    `reset_to_zero`: the outputs it adds to, cleared before each trial run."""
    prune = (
        {"early_config_prune": _fitting_query_blocks}
        if per_query_block
        else None
    )
    return triton.autotune(
        _configs(block_sizes),
        key=["seqlen_q", "seqlen_k", "window", "HEAD_DIM", "CAUSAL", "WINDOW"],
        prune_configs_by=prune,
        reset_to_zero=reset_to_zero,
    )(kernel)


_tuned_forward = _autotuned(
    _forward_kernel,
    [(64, 32), (64, 64), (128, 32), (128, 64), (16, 64), (16, 128)],
)

# The forward's variants for Hopper: their constants (the scale folded into one
# FMA, tensor descriptors, both), and the (BLOCK_M, BLOCK_N, warps, stages) of
# each on a GPU, those that compile for sm_90 at D = 128, with every mask,
# without spilling and within an H100's shared memory (Triton 3.9; checked by
# tests/library/test_flash.py).
VARIANTS = (
    ({"FOLD_SCALE": True}, ((128, 64, 8, 2),)),  # 3 stages spill with a window
    ({"TMA": True}, ((128, 64, 8, 3), (128, 64, 8, 4), (128, 128, 8, 3))),
    (
        {"TMA": True, "FOLD_SCALE": True},
        ((128, 64, 8, 3), (128, 64, 8, 4), (128, 128, 8, 3)),
    ),
)
VARIANT_FLAGS = tuple(flags for flags, _ in VARIANTS)


def _variants(
    variants: tuple, block_size: tuple[int, int]
) -> list[triton.Config]:
    """A kernel's variants (`VARIANTS`, `DKDV_VARIANTS`) as launch
    configurations. Not the autotuner's: the lab's lease times them beside its
    configurations (`qkv_lab.pinning.candidates`), so that a measured run
    decides whether one becomes the default. Under the interpreter, the
    kernel's tile (`block_size`, as `_configs` takes it) with each variant's
    constants."""
    if INTERPRETED:
        (tile,) = _configs([block_size])
        return [triton.Config(tile.kwargs | flags) for flags, _ in variants]
    return [
        triton.Config(
            {"BLOCK_M": block_m, "BLOCK_N": block_n, **flags},
            num_warps=warps,
            num_stages=stages,
        )
        for flags, launches in variants
        for block_m, block_n, warps, stages in launches
    ]


FORWARD_VARIANTS = _variants(VARIANTS, (64, 32))
# One program per BLOCK_N keys, stepping through the queries BLOCK_M at a time.
# A variant that adds to dQ (ATOMIC_DQ) adds to it again at each of the
# autotuner's trial runs: `reset_to_zero` clears it before each. Compiled for
# sm_90 at D = 128 (Triton 3.9, full and causal), every tile of 32 or 64
# queries spills but 32x64 at 8 warps and 2 stages; 16 queries at 8 warps
# (64 or 128 keys) do not: the autotuner can choose them.
_tuned_backward_dkdv = _autotuned(
    _backward_dkdv_kernel,
    [(32, 64), (64, 64), (32, 128), (16, 64), (16, 128)],
    per_query_block=False,
    reset_to_zero=["dQAccum"],
)
_tuned_backward_dq = _autotuned(
    _backward_dq_kernel, [(64, 32), (64, 64), (128, 32), (16, 64)]
)
# The dK/dV kernel's variant that accumulates dQ itself, atomically (ATOMIC_DQ:
# five products where the two kernels do seven; dQ's summation order then
# varies from run to run on a GPU), and its (BLOCK_M, BLOCK_N, warps, stages)
# on a GPU: those that compile for sm_90 at D = 128, with every mask, without
# spilling and within an H100's shared memory (Triton 3.9; checked by
# tests/library/test_flash.py). Query blocks of 32 rows or more spill there,
# with 4 or 8 warps, as the autotuner's configurations above do.
DKDV_VARIANTS = (({"ATOMIC_DQ": True}, ((16, 64, 8, 2), (16, 128, 8, 2))),)
BACKWARD_VARIANTS = _variants(DKDV_VARIANTS, (32, 64))
PREPROCESS_BLOCK_M = 16 if INTERPRETED else 64


def _on_device(x: Tensor) -> contextlib.AbstractContextManager:
    """Make `x`'s GPU the current one: Triton launches on the current device, not on the tensors'."""
    return (
        torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext()
    )


def _launch(
    q: Tensor,
    k: Tensor,
    key_lengths: Tensor | None,
    causal: bool,
    bottom_right: bool,
    window: int | None,
    packing: Packing | None,
) -> tuple[int, tuple, tuple, dict]:
    """How the kernels see `q (B, H, L, D)` and `k (B, H_kv, S, D)`, or packed `(1, H, total, D)` ones.

    Returns:
        `(sequences, pointers, lengths, constants)`: the number of sequences (grid axis 2); the kernels'
        `(KeyLengths, CuSeqlensQ, CuSeqlensK)`; their `(L, S, bottom_right, window, group)`, where L and S
        are the longest sequences' when packed (they size the grid); their mask constants.
    """
    if packing is None:
        sequences, cumulative = q.size(0), (None, None)
        seqlen_q, seqlen_k = q.size(2), k.size(2)
    else:
        sequences = packing.cu_seqlens_q.numel() - 1
        cumulative = (packing.cu_seqlens_q, packing.cu_seqlens_k)
        seqlen_q, seqlen_k = packing.max_seqlen_q, packing.max_seqlen_k
    group = q.size(1) // k.size(1)
    lengths = (seqlen_q, seqlen_k, int(bottom_right), window or 0, group)
    constants = {
        "HEAD_DIM": q.size(3),
        "CAUSAL": causal,
        "WINDOW": window is not None,
    }
    return sequences, (key_lengths, *cumulative), lengths, constants


def _flash_forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_lengths: Tensor | None,
    causal: bool,
    bottom_right: bool,
    window: int | None,
    scale: float,
    packing: Packing | None = None,
) -> tuple[Tensor, Tensor]:
    """Launch the forward kernel on contiguous inputs; return the output and the logsumexp `(B, H, L)`."""
    sequences, pointers, lengths, constants = _launch(
        q, k, key_lengths, causal, bottom_right, window, packing
    )
    heads = q.size(1)
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[:3], device=q.device, dtype=torch.float32)

    def grid(meta: dict) -> tuple[int, int, int]:
        return _grid(lengths[0], meta["BLOCK_M"], sequences, heads)

    qk_scale = scale * LOG2E.value
    tried = [c.kwargs for c in _tuned_forward.configs]  # the pinned one, or all
    if qk_scale < 0 and any(c.get("FOLD_SCALE") for c in tried):
        # FOLD_SCALE takes the maximum before scaling: give it a positive scale,
        # (-q) k^T (-scale) = q k^T scale exactly
        q, qk_scale = -q, -qk_scale

    def launch() -> None:
        _tuned_forward[grid](
            q, k, v, out, lse, *pointers, qk_scale, *lengths, **constants
        )

    with _on_device(q):
        if any(c.get("TMA") for c in tried):
            contextvars.copy_context().run(_with_scratch, q.device, launch)
        else:
            launch()
    return out, lse


def _with_scratch(device: torch.device, launch: Callable[[], None]) -> None:
    """Run `launch` with Triton's allocator giving it global memory on
    `device`: a kernel that builds tensor descriptors (TMA) writes them there.
    Called in a copy of the context, so that the caller's allocator stays."""
    triton.set_allocator(
        lambda size, alignment, stream: torch.empty(
            size, dtype=torch.int8, device=device
        )
    )
    launch()


def _accumulates_dq() -> bool:
    """Whether the dK/dV kernel's configurations (the pinned one, or the
    autotuner's) accumulate dQ themselves (ATOMIC_DQ); then no dQ kernel runs.

    Raises:
        ValueError: some do and some do not: the autotuner chooses one only
            once the dQ accumulator is allocated, or not.
    """
    flags = {
        bool(c.kwargs.get("ATOMIC_DQ")) for c in _tuned_backward_dkdv.configs
    }
    if len(flags) > 1:
        raise ValueError(
            "the dK/dV kernel's configurations must all set ATOMIC_DQ or none, "
            f"got {[str(c) for c in _tuned_backward_dkdv.configs]}"
        )
    return flags.pop()


class _FlashAttention(torch.autograd.Function):
    """Autograd wiring: forward keeps q, k, v, the output and the logsumexp;
    backward runs three kernels (two with the variant ATOMIC_DQ)."""

    @staticmethod
    def forward(
        ctx,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        key_lengths: Tensor | None,
        causal: bool,
        bottom_right: bool,
        window: int | None,
        scale: float,
        packing: Packing | None,
    ) -> Tensor:
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        ctx.mask = (key_lengths, causal, bottom_right, window, packing)
        out, lse = _flash_forward(q, k, v, *ctx.mask[:4], scale, packing)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, d_out: Tensor) -> tuple[Tensor | None, ...]:
        q, k, v, out, lse = ctx.saved_tensors
        d_out = d_out.contiguous()
        # rows: L, or packed total_q (batch 1)
        batch, heads, rows, head_dim = q.shape
        heads_kv = k.size(1)
        sequences, pointers, lengths, constants = _launch(q, k, *ctx.mask)
        delta, lse2 = torch.empty_like(lse), torch.empty_like(lse)
        dk, dv = torch.empty_like(k), torch.empty_like(v)
        # ATOMIC_DQ: dQ summed in float32 by atomic additions, in an order that
        # varies from run to run on a GPU (not deterministic); else its kernel
        atomic_dq = _accumulates_dq()
        dq_accum = (
            torch.zeros(q.shape, device=q.device, dtype=torch.float32)
            if atomic_dq
            else None
        )
        # one number per row, whatever its sequence: the packed rows of a head are one long sequence here
        preprocess_grid = _grid(rows, PREPROCESS_BLOCK_M, batch, heads)

        def key_blocks(meta: dict) -> tuple[int, int, int]:
            return _grid(lengths[1], meta["BLOCK_N"], sequences, heads_kv)

        def query_blocks(meta: dict) -> tuple[int, int, int]:
            return _grid(lengths[0], meta["BLOCK_M"], sequences, heads)

        saved = (q, k, v, d_out, lse2, delta)
        scales = (ctx.scale, ctx.scale * LOG2E.value)
        with _on_device(q):
            _backward_preprocess[preprocess_grid](
                out,
                d_out,
                lse,
                delta,
                lse2,
                rows,
                HEAD_DIM=head_dim,
                BLOCK_M=PREPROCESS_BLOCK_M,
            )
            _tuned_backward_dkdv[key_blocks](
                *saved, dk, dv, dq_accum, *pointers, *scales, *lengths,
                **constants,
            )  # fmt: skip
            if atomic_dq:
                dq = (dq_accum * ctx.scale).to(q.dtype)
            else:
                dq = torch.empty_like(q)
                _tuned_backward_dq[query_blocks](
                    *saved, dq, *pointers, *scales, *lengths, **constants
                )
        return dq, dk, dv, None, None, None, None, None, None


def _scale(q: Tensor, scale: float | None) -> float:
    """`scale` as a float, `1 / sqrt(D)` when None."""
    return float(1 / math.sqrt(q.size(-1)) if scale is None else scale)


def attend(
    q: Tensor, k: Tensor, v: Tensor, mask: Mask, scale: float | None
) -> Tensor:
    """Run the kernels on inputs that `contract.refusal` accepts, with `mask`'s alignment, window and lengths."""
    key_lengths = mask.key_lengths
    if key_lengths is not None:  # clamped first: int32 would wrap 2**32 to 0
        key_lengths = (
            key_lengths.long().clamp(0, k.size(-2)).to(torch.int32).contiguous()
        )
    causal, bottom_right = (
        mask.alignment is not None,
        mask.alignment == "bottom_right",
    )
    return _FlashAttention.apply(
        q,
        k,
        v,
        key_lengths,
        causal,
        bottom_right,
        mask.window,
        _scale(q, scale),
        None,
    )


def attend_packed(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    packing: Packing,
    mask: Mask,
    scale: float | None,
) -> Tensor:
    """Run the kernels on a packed batch that `contract.check_packed_inputs` accepts, with `mask`'s
    alignment and window per sequence: `q (total_q, H, D)`, `k` and `v (total_k, H_kv, D)` in,
    `(total_q, H, D)` out.

    The kernels read a head's rows one after another, D elements apart, as in the padded layout; so each
    tensor is copied into `(1, H, total, D)` and the output back, rather than giving every kernel a second
    row stride: a copy costs time linear in the tokens, the attention quadratic.
    """
    # (total, H, D) -> (1, H, total, D)
    q, k, v = (x.transpose(0, 1).unsqueeze(0) for x in (q, k, v))
    causal, bottom_right = (
        mask.alignment is not None,
        mask.alignment == "bottom_right",
    )
    out = _FlashAttention.apply(
        q,
        k,
        v,
        None,
        causal,
        bottom_right,
        mask.window,
        _scale(q, scale),
        packing,
    )
    # (1, H, total_q, D) -> (total_q, H, D)
    return out[0].transpose(0, 1).contiguous()


def flash_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    causal: Causal = False,
    scale: float | None = None,
    *,
    window: int | None = None,
    key_lengths: Tensor | None = None,
) -> Tensor:
    """Check the inputs and run the kernels; documented, and imported lazily, as `qkv.flash_attention`."""
    contract.check_kernel_inputs(q, k, v, scale)
    scores = (*q.shape[:3], k.size(2))  # (B, H, L, S)
    mask = parse_mask(
        q, k, scores, None, causal, window, key_lengths, causal_name="causal"
    )
    refused = contract.mask_refusal(mask)
    if refused is not None:
        raise refused.error(refused.reason)
    return attend(q, k, v, mask, scale)


def flash_attention_varlen(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cu_seqlens_q: Tensor,
    cu_seqlens_k: Tensor,
    *,
    max_seqlen_q: int | None = None,
    max_seqlen_k: int | None = None,
    causal: Causal = False,
    scale: float | None = None,
    window: int | None = None,
) -> Tensor:
    """Check the inputs and run the kernels on a packed batch; documented, and imported lazily, as
    `qkv.flash_attention_varlen`."""
    packing = contract.check_packed_inputs(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale
    )
    # (H, total_q, total_k), of which only squares are kept
    scores = (q.size(1), q.size(0), k.size(0))
    mask = parse_mask(q, k, scores, None, causal, window, causal_name="causal")
    return attend_packed(q, k, v, packing, mask, scale)
