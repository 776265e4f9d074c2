"""Ring attention: exact attention over a sequence split across the ranks of a `torch.distributed` group.

Rank `r` of `W` holds a contiguous shard of the sequence, positions `r N/W` to `(r + 1) N/W - 1`, as `q`, `k`, `v`
of shape `(B, H, N/W, D)`. The key and value shards travel around the ring, rank `r` sending to `r + 1` and
receiving from `r - 1` with point-to-point sends, while each rank attends its queries to the block it holds
and folds the result into its running output with the online softmax in log-sum-exp form (Milakov and
Gimelshein, 2018; Rabe and Staats, 2021). After `W` steps every query has met every key (Liu et al., 2023).
The next block is already on its way while the current one is computed, so communication can hide behind
computation.

With `causal`, the mask is the causal mask of the whole sequence: the block a rank receives from a rank
before it is entirely visible, its own block is masked by the lower triangle, and blocks from later ranks are
passed on without being computed.

The backward pass is a second trip around the ring: the key and value blocks travel again, with the gradients
for them accumulating as they go, and a last send returns each block's gradients to its owner.

Any backend with point-to-point sends works: gloo on CPUs, NCCL on GPUs (one process per GPU, shards on
that GPU).
"""

import torch
import torch.distributed as dist
from torch import Tensor

from qkv._checks import (
    check_bool,
    check_same_dtype_and_device,
    check_sizes,
    check_tensor,
    shape,
)


def ring_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    causal: bool = False,
    group: dist.ProcessGroup | None = None,
) -> Tensor:
    """Attention over the whole sequence for this rank's queries, called on every rank of `group` at once.

    Args:
        q: `(B, H, N/W, D)`, this rank's queries: positions `rank * N/W` to `(rank + 1) * N/W - 1`.
        k: `(B, H, N/W, D)`, this rank's keys.
        v: `(B, H, N/W, Dv)`, this rank's values.
        causal: mask the future of the whole sequence (query at position `i` sees keys `j <= i`).
        group: the process group whose ranks hold the shards in rank order; the default group when None.

    Returns:
        `(B, H, N/W, Dv)`: this rank's shard of `softmax(q k^T / sqrt(D)) v` over the whole sequence.
        Differentiable: the backward pass takes a second trip around the ring.

    Raises:
        ValueError: no initialised process group; shards of different shapes on different ranks, or a
            `causal` that differs between ranks (raised on every rank alike); shapes that disagree; a
            feature size D of 0.
        TypeError: non-tensor or non-float inputs, dtypes that differ, a `causal` that is not a bool, or a
            `group` that is not a process group.
    """
    if group is not None and not isinstance(group, dist.ProcessGroup):
        raise TypeError(
            f"group must be a torch.distributed.ProcessGroup or None, got {type(group).__name__}"
        )
    if not (dist.is_available() and dist.is_initialized()):
        raise ValueError(
            "ring_attention needs an initialised process group: call "
            "torch.distributed.init_process_group(...) on every rank first"
        )
    group = group or dist.group.WORLD
    _check_shards(q, k, v, causal, group)
    return _RingAttention.apply(q, k, v, causal, group)


# --8<-- [start:schedule]
def ring_schedule(world: int, causal: bool = False) -> list[list[int | None]]:
    """Whose key and value block each rank attends to at each step of the ring.

    At step `t`, rank `r` holds the block of rank `(r - t) % W`: every block
    moves one rank on per step. With `causal`, a block from a later rank lies
    entirely in the future of this rank's queries: it is passed on without being
    computed (None).

    Returns:
        `schedule[rank][step]`: a rank, or None where the step computes nothing.

    Raises:
        TypeError, ValueError: `world` not a positive int, `causal` not a bool.
    """
    check_sizes(world=world)
    check_bool("causal", causal)
    schedule = []
    for rank in range(world):
        sources = [(rank - step) % world for step in range(world)]
        schedule.append(
            [s if not causal or s <= rank else None for s in sources]
        )
    return schedule
    # --8<-- [end:schedule]


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, group):
        dtype = torch.promote_types(q.dtype, torch.float32)
        q32, k32, v32 = (x.to(dtype).contiguous() for x in (q, k, v))
        out, lse = _ring_forward(q32, k32, v32, causal, group)
        ctx.save_for_backward(q32, k32, v32, out, lse)
        ctx.causal, ctx.group, ctx.dtype = causal, group, q.dtype
        return out.to(q.dtype)

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = _ring_backward(
            q, k, v, out, lse, d_out.to(q.dtype), ctx.causal, ctx.group
        )
        return dq.to(ctx.dtype), dk.to(ctx.dtype), dv.to(ctx.dtype), None, None


# --8<-- [start:ring-forward]
# --8<-- [start:ring-loop]
def _ring_forward(
    q: Tensor, k: Tensor, v: Tensor, causal: bool, group: dist.ProcessGroup
) -> tuple[Tensor, Tensor]:
    """This rank's output `(B, H, n, Dv)` and log-sum-exp `(B, H, n)` over every
    block of the ring."""
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    # (B, H, n, Dv)
    out = torch.zeros(*q.shape[:-1], v.size(-1), dtype=q.dtype, device=q.device)
    lse = torch.full(
        q.shape[:-1], float("-inf"), dtype=q.dtype, device=q.device
    )  # (B, H, n)
    for step, source in enumerate(ring_schedule(world, causal)[rank]):
        if step < world - 1:
            # the next block travels while this one is used
            incoming = _pass_along([k, v], group)
        if source is not None:
            mask = _diagonal_mask(q, k) if causal and source == rank else None
            block_out, block_lse = _attend(q, k, v, mask)
            out, lse = _merge(out, lse, block_out, block_lse)
        if step < world - 1:
            k, v = _wait(*incoming)
    return out, lse
    # --8<-- [end:ring-loop]


def _attend(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None
) -> tuple[Tensor, Tensor]:
    """Softmax attention of q over one block of keys: the block's output and its
    log-sum-exp per query."""
    scores = q @ k.transpose(-2, -1) * q.size(-1) ** -0.5  # (B, H, n, n)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # (B, H, n)
    # (B, H, n, Dv), (B, H, n)
    return torch.exp(scores - lse[..., None]) @ v, lse


def _merge(
    out: Tensor, lse: Tensor, block_out: Tensor, block_lse: Tensor
) -> tuple[Tensor, Tensor]:
    """Online softmax: two partial attentions over disjoint keys, each
    normalised by its own sum, as one."""
    # log(e^lse + e^block_lse): the sum over both
    new_lse = torch.logaddexp(lse, block_lse)
    out = (
        out * torch.exp(lse - new_lse)[..., None]
        + block_out * torch.exp(block_lse - new_lse)[..., None]
    )
    return out, new_lse
    # --8<-- [end:ring-forward]


def _ring_backward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    d_out: Tensor,
    causal: bool,
    group: dist.ProcessGroup,
) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients of this rank's shards: the blocks go round again, their gradients accumulating on the way."""
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    scale = q.size(-1) ** -0.5
    # rowsum(dO * O): (B, H, n, 1)
    delta = (d_out * out).sum(dim=-1, keepdim=True)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for step, source in enumerate(ring_schedule(world, causal)[rank]):
        if step < world - 1:
            incoming = _pass_along([k, v], group)
        if source is not None:
            scores = q @ k.transpose(-2, -1) * scale  # (B, H, n, n)
            if causal and source == rank:
                scores = scores.masked_fill(
                    ~_diagonal_mask(q, k), float("-inf")
                )
            # the forward's probabilities, recomputed
            p = torch.exp(scores - lse[..., None])
            # dS = P * (dP - delta)
            ds = p * (d_out @ v.transpose(-2, -1) - delta)
            dq += ds @ k * scale
            # the gradient for the block's owner
            dk += ds.transpose(-2, -1) @ q * scale
            dv += p.transpose(-2, -1) @ d_out
        # travel with the block; the last pass goes home
        dk, dv = _wait(*_pass_along([dk, dv], group))
        if step < world - 1:
            k, v = _wait(*incoming)
    return dq, dk, dv


def _pass_along(
    tensors: list[Tensor], group: dist.ProcessGroup
) -> tuple[list, list[Tensor]]:
    """Start sending `tensors` to the next rank of the ring and receiving the previous rank's into new buffers."""
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    after = dist.get_global_rank(group, (rank + 1) % world)
    before = dist.get_global_rank(group, (rank - 1) % world)
    received = [torch.empty_like(x) for x in tensors]
    operations = [dist.P2POp(dist.isend, x, after, group) for x in tensors]
    operations += [dist.P2POp(dist.irecv, x, before, group) for x in received]
    return dist.batch_isend_irecv(operations), received


def _wait(requests: list, received: list[Tensor]) -> list[Tensor]:
    for request in requests:
        request.wait()
    return received


def _diagonal_mask(q: Tensor, k: Tensor) -> Tensor:
    """The causal mask of a rank's own block: position `i` of the shard sees positions `j <= i`."""
    return torch.ones(
        q.size(-2), k.size(-2), dtype=torch.bool, device=q.device
    ).tril()


def _check_shards(
    q: object, k: object, v: object, causal: bool, group: dist.ProcessGroup
) -> None:
    """Check this rank's inputs, then compare every rank's shapes; raise on every rank alike, never hang."""
    try:
        for name, x in (("q", q), ("k", k), ("v", v)):
            check_tensor(name, x, min_dim=4)
            if x.dim() != 4:
                raise ValueError(
                    f"{name} must be (B, H, N/W, D), got {shape(x)}"
                )
        check_same_dtype_and_device(q=q, k=k, v=v)
        check_bool("causal", causal)
        if q.size(-1) == 0:
            raise ValueError(
                f"q and k need a feature size D of at least 1, got q {shape(q)}"
            )
        if (
            q.shape[:3] != k.shape[:3]
            or k.shape[:3] != v.shape[:3]
            or q.size(-1) != k.size(-1)
        ):
            raise ValueError(
                "q, k and v must be shards of one sequence, (B, H, N/W, D) with the same B, H, N/W "
                f"and D for q and k: q {shape(q)}, k {shape(k)}, v {shape(v)}"
            )
        report = (
            None,
            shape(q),
            shape(k),
            shape(v),
            causal,
        )  # causal: a bool, checked above
    except (TypeError, ValueError) as error:
        report, own_error = (str(error), None, None, None, causal), error
    reports = [None] * dist.get_world_size(group)
    dist.all_gather_object(reports, report, group=group)
    if report[0] is not None:
        raise own_error
    for rank, (error, *_) in enumerate(reports):
        if error is not None:
            raise ValueError(
                f"rank {rank} of the group rejected its shards: {error}"
            )
    if len({tuple(r[1:]) for r in reports}) > 1:
        listed = "; ".join(
            f"rank {rank}: q {q_}, k {k_}, v {v_}, causal={c}"
            for rank, (_, q_, k_, v_, c) in enumerate(reports)
        )
        raise ValueError(
            f"every rank must pass shards of the same shape and the same causal: {listed}"
        )
