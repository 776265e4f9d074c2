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
each probability tile from it, `p = exp(scores - lse)`, instead of storing the (L, S) probabilities:
a preprocessing kernel computes `delta = rowsum(dO * O)`, one kernel accumulates dK and dV over query
blocks (one program per key block), and one accumulates dQ over key blocks (one program per query block).
With `dP = dO V^T`, the softmax gradient is `dS = P * (dP - delta)`, and `dQ = dS K * scale`,
`dK = dS^T Q * scale`, `dV = P^T dO`.

Limits: inputs are `(B, H, L, D)` query and `(B, H, S, D)` key and value of one dtype, float16 or bfloat16
(products in that dtype, accumulation in float32); `D` is 16, 32, 64 or 128; any lengths `L`, `S` >= 1
(partial tiles are masked); no attention mask other than `causal`, no dropout. Under Triton's CPU
interpreter (`TRITON_INTERPRET=1`, set before Triton is imported) the kernels run one small tile
shape each, and bfloat16 is refused: the interpreter (Triton 3.9) multiplies bfloat16 `tl.dot` operands as
their raw 16-bit integer patterns.
"""

# Triton's convention: upper-case names for pointers and compile-time constants.
# ruff: noqa: N803, N806

import contextlib
import math

import torch
import triton
import triton.language as tl
from torch import Tensor

from qkv._checks import check_same_dtype_and_device, check_tensor, shape

LOG2E = tl.constexpr(1.4426950408889634)  # log2(e): exp(x) = exp2(x * LOG2E)
HEAD_DIMS = (16, 32, 64, 128)
DTYPES = (torch.float16, torch.bfloat16)
INTERPRETED = triton.knobs.runtime.interpret  # read when the kernels below are decorated
MAX_GRID_YZ = 65535  # CUDA's limit on grid axes 1 and 2 (axis 0 allows 2**31 - 1)


@triton.jit
def _batch_head():
    """The flat index `b * H + h` of this program's (batch, head), in int64; the grid is (blocks, H, B)."""
    return tl.program_id(2).to(tl.int64) * tl.num_programs(1) + tl.program_id(1)


# --8<-- [start:inner-loop]
@triton.jit
def _attend_to_keys(
    acc, l_i, m_i,  # the running output, sum and maximum of BLOCK_M query rows
    q, K, V, rows, key_end, seqlen_k, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
):  # fmt: skip
    """Fold the keys `[0, key_end)` into one block of query rows, `BLOCK_N` keys at a time."""
    dims = tl.arange(0, HEAD_DIM)
    for start in range(0, key_end, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        key_ok = cols < seqlen_k
        k = tl.load(K + cols[:, None] * HEAD_DIM + dims[None, :], mask=key_ok[:, None], other=0.0)
        v = tl.load(V + cols[:, None] * HEAD_DIM + dims[None, :], mask=key_ok[:, None], other=0.0)
        scores = tl.dot(q, tl.trans(k)) * qk_scale  # (BLOCK_M, BLOCK_N), in log2 units
        allowed = key_ok[None, :]
        if CAUSAL:
            allowed = allowed & (cols[None, :] <= rows[:, None])
        scores = tl.where(allowed, scores, float("-inf"))
        # --8<-- [start:online-softmax]
        m_new = tl.maximum(m_i, tl.max(scores, 1))
        # A row with no allowed key yet keeps m = -inf: shift by 0 instead, so exp2(-inf) gives 0, not NaN.
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(scores - shift[:, None])
        alpha = tl.exp2(m_i - shift)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
        # --8<-- [end:online-softmax]
    return acc, l_i, m_i


# --8<-- [end:inner-loop]


# --8<-- [start:forward-kernel]
@triton.jit
def _forward_kernel(
    Q, K, V, Out, LSE,  # (B, H, L, D), (B, H, S, D), (B, H, S, D), (B, H, L, D), (B, H, L)
    qk_scale, seqlen_q, seqlen_k,
    HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """One program: `BLOCK_M` query rows of one (batch, head) against all the keys they may see."""
    block = tl.program_id(0)
    head = _batch_head()  # b * H + h, int64: offsets past 2**31 elements stay exact
    Q += head * seqlen_q * HEAD_DIM
    Out += head * seqlen_q * HEAD_DIM
    LSE += head * seqlen_q
    K += head * seqlen_k * HEAD_DIM
    V += head * seqlen_k * HEAD_DIM

    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    row_ok = rows < seqlen_q
    q = tl.load(Q + rows[:, None] * HEAD_DIM + dims[None, :], mask=row_ok[:, None], other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)  # running max of the scores (log2 units)
    l_i = tl.zeros([BLOCK_M], tl.float32)  # running sum of exp2(scores - m_i)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)  # running sum of exp2(scores - m_i) @ v
    key_end = seqlen_k
    if CAUSAL:
        key_end = tl.minimum(seqlen_k, (block + 1) * BLOCK_M)  # no key after this block's last row
    acc, l_i, m_i = _attend_to_keys(
        acc, l_i, m_i, q, K, V, rows, key_end, seqlen_k, qk_scale, HEAD_DIM, BLOCK_N, CAUSAL
    )

    empty = l_i == 0.0  # a row that may attend no key: output zeros, not 0 / 0
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    lse = tl.where(empty, float("-inf"), (m_i + tl.log2(l_i)) / LOG2E)
    tl.store(Out + rows[:, None] * HEAD_DIM + dims[None, :], out, mask=row_ok[:, None])
    tl.store(LSE + rows, lse, mask=row_ok)


# --8<-- [end:forward-kernel]


# --8<-- [start:backward-kernels]
@triton.jit
def _backward_preprocess(Out, dOut, Delta, seqlen_q, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr):
    """`delta = rowsum(dO * O)`, the term that the softmax gradient subtracts from every row."""
    block = tl.program_id(0)
    head = _batch_head()
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    row_ok = rows < seqlen_q
    offsets = head * seqlen_q * HEAD_DIM + rows[:, None] * HEAD_DIM + dims[None, :]
    out = tl.load(Out + offsets, mask=row_ok[:, None], other=0.0).to(tl.float32)
    d_out = tl.load(dOut + offsets, mask=row_ok[:, None], other=0.0).to(tl.float32)
    tl.store(Delta + head * seqlen_q + rows, tl.sum(out * d_out, 1), mask=row_ok)


# --8<-- [start:probabilities]
@triton.jit
def _probabilities(q, k, lse, rows, cols, seqlen_q, seqlen_k, qk_scale, CAUSAL: tl.constexpr):
    """One tile of attention probabilities, recomputed from the stored logsumexp; 0 where not allowed."""
    scores = tl.dot(q, tl.trans(k)) * qk_scale  # (BLOCK_M, BLOCK_N), in log2 units
    allowed = (rows[:, None] < seqlen_q) & (cols[None, :] < seqlen_k)
    if CAUSAL:
        allowed = allowed & (cols[None, :] <= rows[:, None])
    return tl.where(allowed, tl.exp2(scores - lse[:, None] * LOG2E), 0.0)


# --8<-- [end:probabilities]


@triton.jit
def _backward_dkdv_kernel(
    Q, K, V, dOut, LSE, Delta, dK, dV,
    scale, qk_scale, seqlen_q, seqlen_k,
    HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """One program: dK and dV of `BLOCK_N` keys, summed over every query block that sees them."""
    block = tl.program_id(0)
    head = _batch_head()
    Q += head * seqlen_q * HEAD_DIM
    dOut += head * seqlen_q * HEAD_DIM
    LSE += head * seqlen_q
    Delta += head * seqlen_q
    K += head * seqlen_k * HEAD_DIM
    V += head * seqlen_k * HEAD_DIM
    dK += head * seqlen_k * HEAD_DIM
    dV += head * seqlen_k * HEAD_DIM

    cols = block * BLOCK_N + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, HEAD_DIM)
    key_ok = cols < seqlen_k
    k = tl.load(K + cols[:, None] * HEAD_DIM + dims[None, :], mask=key_ok[:, None], other=0.0)
    v = tl.load(V + cols[:, None] * HEAD_DIM + dims[None, :], mask=key_ok[:, None], other=0.0)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    query_start = 0
    if CAUSAL:
        # No query before this block's first key may see it: start at the query block holding that row.
        query_start = (block * BLOCK_N // BLOCK_M) * BLOCK_M
    for start in range(query_start, seqlen_q, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        row_ok = rows < seqlen_q
        q = tl.load(Q + rows[:, None] * HEAD_DIM + dims[None, :], mask=row_ok[:, None], other=0.0)
        d_out = tl.load(
            dOut + rows[:, None] * HEAD_DIM + dims[None, :], mask=row_ok[:, None], other=0.0
        )
        lse = tl.load(LSE + rows, mask=row_ok, other=0.0)
        delta = tl.load(Delta + rows, mask=row_ok, other=0.0)
        p = _probabilities(q, k, lse, rows, cols, seqlen_q, seqlen_k, qk_scale, CAUSAL)
        dv = tl.dot(tl.trans(p.to(d_out.dtype)), d_out, dv)  # (BLOCK_N, BLOCK_M) @ (BLOCK_M, D)
        dp = tl.dot(d_out, tl.trans(v))  # (BLOCK_M, BLOCK_N)
        ds = p * (dp - delta[:, None])
        dk = tl.dot(tl.trans(ds.to(q.dtype)), q, dk)  # (BLOCK_N, BLOCK_M) @ (BLOCK_M, D)
    tl.store(dK + cols[:, None] * HEAD_DIM + dims[None, :], dk * scale, mask=key_ok[:, None])
    tl.store(dV + cols[:, None] * HEAD_DIM + dims[None, :], dv, mask=key_ok[:, None])


@triton.jit
def _backward_dq_kernel(
    Q, K, V, dOut, LSE, Delta, dQ,
    scale, qk_scale, seqlen_q, seqlen_k,
    HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """One program: dQ of `BLOCK_M` query rows, summed over every key block they see."""
    block = tl.program_id(0)
    head = _batch_head()
    Q += head * seqlen_q * HEAD_DIM
    dOut += head * seqlen_q * HEAD_DIM
    dQ += head * seqlen_q * HEAD_DIM
    LSE += head * seqlen_q
    Delta += head * seqlen_q
    K += head * seqlen_k * HEAD_DIM
    V += head * seqlen_k * HEAD_DIM

    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    row_ok = rows < seqlen_q
    q = tl.load(Q + rows[:, None] * HEAD_DIM + dims[None, :], mask=row_ok[:, None], other=0.0)
    d_out = tl.load(
        dOut + rows[:, None] * HEAD_DIM + dims[None, :], mask=row_ok[:, None], other=0.0
    )
    lse = tl.load(LSE + rows, mask=row_ok, other=0.0)
    delta = tl.load(Delta + rows, mask=row_ok, other=0.0)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    key_end = seqlen_k
    if CAUSAL:
        key_end = tl.minimum(seqlen_k, (block + 1) * BLOCK_M)
    for start in range(0, key_end, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        key_ok = cols < seqlen_k
        k = tl.load(K + cols[:, None] * HEAD_DIM + dims[None, :], mask=key_ok[:, None], other=0.0)
        v = tl.load(V + cols[:, None] * HEAD_DIM + dims[None, :], mask=key_ok[:, None], other=0.0)
        p = _probabilities(q, k, lse, rows, cols, seqlen_q, seqlen_k, qk_scale, CAUSAL)
        dp = tl.dot(d_out, tl.trans(v))  # (BLOCK_M, BLOCK_N)
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq)  # (BLOCK_M, BLOCK_N) @ (BLOCK_N, D)
    tl.store(dQ + rows[:, None] * HEAD_DIM + dims[None, :], dq * scale, mask=row_ok[:, None])


# --8<-- [end:backward-kernels]


def _grid(seqlen: int, block: int, batch: int, heads: int) -> tuple[int, int, int]:
    """Programs `(blocks, H, B)`: blocks of `block` positions on axis 0, heads and batch on axes 1 and 2.

    CUDA caps grid axes 1 and 2 at 65535 programs, so `B * H` cannot share one of them; blocks take axis 0
    (up to 2**31 - 1) so that consecutive programs share one head's keys and values in L2.
    """
    return (triton.cdiv(seqlen, block), heads, batch)


# Launch configurations. On a GPU the autotuner times these once per (lengths, head size, causal) and keeps
# the fastest. Under the interpreter the first tile at half size keeps the CPU tests quick and exercises
# partial tiles, with BLOCK_M != BLOCK_N as on a GPU (the causal loop bounds depend on both).
def _configs(block_sizes: list[tuple[int, int]]) -> list[triton.Config]:
    if INTERPRETED:
        block_m, block_n = block_sizes[0]
        return [triton.Config({"BLOCK_M": block_m // 2, "BLOCK_N": block_n // 2})]
    return [
        triton.Config({"BLOCK_M": block_m, "BLOCK_N": block_n}, num_warps=warps, num_stages=stages)
        for block_m, block_n in block_sizes
        for warps in (4, 8)
        for stages in (2, 3)
    ]


def _autotuned(
    kernel: triton.JITFunction, block_sizes: list[tuple[int, int]]
) -> triton.KernelInterface:
    return triton.autotune(
        _configs(block_sizes), key=["seqlen_q", "seqlen_k", "HEAD_DIM", "CAUSAL"]
    )(kernel)


_tuned_forward = _autotuned(_forward_kernel, [(64, 32), (64, 64), (128, 32), (128, 64)])
_tuned_backward_dkdv = _autotuned(_backward_dkdv_kernel, [(32, 64), (64, 64), (32, 128)])
_tuned_backward_dq = _autotuned(_backward_dq_kernel, [(64, 32), (64, 64), (128, 32)])
PREPROCESS_BLOCK_M = 16 if INTERPRETED else 64


def _on_device(x: Tensor) -> contextlib.AbstractContextManager:
    """Make `x`'s GPU the current one: Triton launches on the current device, not on the tensors'."""
    return torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext()


def _flash_forward(
    q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float
) -> tuple[Tensor, Tensor]:
    """Launch the forward kernel on contiguous inputs; return the output and the logsumexp `(B, H, L)`."""
    batch, heads, seqlen_q, head_dim = q.shape
    seqlen_k = k.size(2)
    out = torch.empty_like(q)
    lse = torch.empty((batch, heads, seqlen_q), device=q.device, dtype=torch.float32)

    def grid(meta: dict) -> tuple[int, int, int]:
        return _grid(seqlen_q, meta["BLOCK_M"], batch, heads)

    qk_scale, lengths = scale * LOG2E.value, (seqlen_q, seqlen_k)
    with _on_device(q):
        _tuned_forward[grid](
            q, k, v, out, lse, qk_scale, *lengths, HEAD_DIM=head_dim, CAUSAL=causal
        )
    return out, lse


class _FlashAttention(torch.autograd.Function):
    """Autograd wiring: forward keeps q, k, v, the output and the logsumexp; backward runs three kernels."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float) -> Tensor:
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        out, lse = _flash_forward(q, k, v, causal, scale)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.scale = causal, scale
        return out

    @staticmethod
    def backward(ctx, d_out: Tensor) -> tuple[Tensor, Tensor, Tensor, None, None]:
        q, k, v, out, lse = ctx.saved_tensors
        d_out = d_out.contiguous()
        batch, heads, seqlen_q, head_dim = q.shape
        seqlen_k = k.size(2)
        delta = torch.empty_like(lse)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        preprocess_grid = _grid(seqlen_q, PREPROCESS_BLOCK_M, batch, heads)
        scale, causal = ctx.scale, ctx.causal

        def key_blocks(meta: dict) -> tuple[int, int, int]:
            return _grid(seqlen_k, meta["BLOCK_N"], batch, heads)

        def query_blocks(meta: dict) -> tuple[int, int, int]:
            return _grid(seqlen_q, meta["BLOCK_M"], batch, heads)

        saved = (q, k, v, d_out, lse, delta)
        scales, lengths = (scale, scale * LOG2E.value), (seqlen_q, seqlen_k)
        with _on_device(q):
            _backward_preprocess[preprocess_grid](
                out, d_out, delta, seqlen_q, HEAD_DIM=head_dim, BLOCK_M=PREPROCESS_BLOCK_M
            )
            _tuned_backward_dkdv[key_blocks](
                *saved, dk, dv, *scales, *lengths, HEAD_DIM=head_dim, CAUSAL=causal
            )
            _tuned_backward_dq[query_blocks](
                *saved, dq, *scales, *lengths, HEAD_DIM=head_dim, CAUSAL=causal
            )
        return dq, dk, dv, None, None


def flash_attention(
    q: Tensor, k: Tensor, v: Tensor, causal: bool = False, scale: float | None = None
) -> Tensor:
    """Check the inputs and run the kernels; documented, and imported lazily, as `qkv.flash_attention`."""
    _check_inputs(q, k, v, scale)
    if scale is None:
        scale = 1 / math.sqrt(q.size(-1))
    return _FlashAttention.apply(q, k, v, bool(causal), float(scale))


def _check_inputs(q: Tensor, k: Tensor, v: Tensor, scale: float | None) -> None:
    """Raise, naming the argument and the shapes, unless the kernels can take these inputs."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, x)
        if x.dim() != 4:
            raise ValueError(f"{name} must be 4-D (B, H, N, D), got shape {shape(x)}")
    if q.dtype not in DTYPES:
        raise TypeError(
            f"q has dtype {q.dtype}; flash_attention takes torch.float16 or torch.bfloat16"
        )
    check_same_dtype_and_device(q=q, k=k, v=v)
    if q.shape[:2] != k.shape[:2] or k.shape[:2] != v.shape[:2]:
        raise ValueError(
            "q, k and v disagree on batch and heads (B, H): "
            f"q {shape(q)}, k {shape(k)}, v {shape(v)}"
        )
    if k.size(2) != v.size(2):
        raise ValueError(f"k and v disagree on length S: k {shape(k)} vs v {shape(v)}")
    if q.size(3) != k.size(3) or k.size(3) != v.size(3):
        raise ValueError(
            f"q, k and v disagree on head size D: q {shape(q)}, k {shape(k)}, v {shape(v)}"
        )
    if q.size(3) not in HEAD_DIMS:
        raise ValueError(f"head size D must be one of {HEAD_DIMS}, got {q.size(3)}: q {shape(q)}")
    if max(q.shape[:2]) > MAX_GRID_YZ:
        raise ValueError(
            f"batch and heads must each be at most {MAX_GRID_YZ} (CUDA's limit on a launch grid "
            f"axis): q {shape(q)}"
        )
    if q.size(2) == 0 or k.size(2) == 0:
        raise ValueError(f"q and k need at least one position: q {shape(q)}, k {shape(k)}")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))):
        raise TypeError(f"scale must be a number or None, got {type(scale).__name__}")
    if q.device.type == "cpu" and not INTERPRETED:
        raise ValueError(
            f"q, k and v are on the CPU {shape(q)}: the kernels need CUDA tensors, or Triton's "
            "interpreter (TRITON_INTERPRET=1 set before triton is imported)"
        )
    if INTERPRETED and q.dtype == torch.bfloat16:
        raise TypeError(
            "q has dtype torch.bfloat16, which Triton's interpreter cannot multiply (it reads bfloat16 "
            "tl.dot operands as 16-bit integers); use float16, or run on a GPU"
        )
