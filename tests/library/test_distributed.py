"""Ring attention on 2 and 4 CPU processes (gloo on loopback), against attention over the whole sequence.

Each test spawns its processes once and runs several checks in them: starting a process costs more than a check.
A failing check raises in its process, and `torch.multiprocessing.spawn` re-raises it here with its traceback.
"""

import datetime
import gc
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import qkv
from tests.library.reference import reference_attention

B, H, SHARD, D, DV = 2, 3, 5, 8, 6


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _spawn(world: int, *checks: str) -> None:
    """Run the named checks, in order, on `world` gloo processes."""
    mp.spawn(_worker, args=(world, _free_port(), checks), nprocs=world, join=True)


def _worker(rank: int, world: int, port: int, checks: tuple[str, ...]) -> None:
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=60),
    )
    try:
        for check in checks:
            torch.manual_seed(0)  # every rank draws the same whole sequence
            globals()[check](rank, world)
    finally:
        # Reference cycles (such as the tracebacks of the errors the checks expect) can keep this process's
        # group alive past destroy_process_group; gloo then aborted the process as it exited (SIGABRT,
        # "terminate called without an active exception"), 6 of 55 two-rank runs here. Collected first: 0 of 70.
        gc.collect()
        dist.destroy_process_group()


def _whole_sequence(world: int, dtype=torch.float64):
    n = SHARD * world
    return (
        torch.randn(B, H, n, D, dtype=dtype),
        torch.randn(B, H, n, D, dtype=dtype),
        torch.randn(B, H, n, DV, dtype=dtype),
    )


def _shard(x: torch.Tensor, rank: int) -> torch.Tensor:
    return x[..., rank * SHARD : (rank + 1) * SHARD, :]


# --- checks that run inside the processes -------------------------------------------------------------------


def check_forward_equals_whole_attention(rank: int, world: int) -> None:
    q, k, v = _whole_sequence(world)
    for causal in (False, True):
        expected = reference_attention(q, k, v, is_causal=causal)
        out = qkv.ring_attention(*(_shard(x, rank) for x in (q, k, v)), causal=causal)
        torch.testing.assert_close(out, _shard(expected, rank))


def check_backward_equals_whole_attention(rank: int, world: int) -> None:
    q, k, v = _whole_sequence(world)
    d_out = torch.randn(B, H, SHARD * world, DV, dtype=torch.float64)
    for causal in (False, True):
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        reference_attention(*leaves, is_causal=causal).backward(d_out)
        shards = [_shard(x, rank).clone().requires_grad_() for x in (q, k, v)]
        qkv.ring_attention(*shards, causal=causal).backward(_shard(d_out, rank))
        for name, shard, leaf in zip("qkv", shards, leaves, strict=True):
            torch.testing.assert_close(
                shard.grad, _shard(leaf.grad, rank), msg=f"d{name} {causal=}"
            )


def check_float16_within_torchs_error(rank: int, world: int) -> None:
    q, k, v = _whole_sequence(world, dtype=torch.float16)
    expected = _shard(reference_attention(q, k, v, is_causal=True), rank)
    theirs = _shard(torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True), rank)
    out = qkv.ring_attention(*(_shard(x, rank) for x in (q, k, v)), causal=True)
    assert out.dtype == torch.float16
    error = (out.double() - expected).abs().max()
    assert error <= 2 * (theirs.double() - expected).abs().max() + 1e-5, error


def check_shards_of_different_lengths_fail_on_every_rank(rank: int, world: int) -> None:
    length = SHARD + 1 if rank == world - 1 else SHARD
    q, k, v = (torch.randn(B, H, length, D) for _ in range(3))
    with pytest.raises(ValueError, match=rf"same shape .* rank {world - 1}: q \(2, 3, 6, 8\)"):
        qkv.ring_attention(q, k, v)


def check_a_bad_shard_on_one_rank_fails_on_every_rank(rank: int, world: int) -> None:
    q, k, v = (torch.randn(B, H, SHARD, D) for _ in range(3))
    if rank == 0:
        with pytest.raises(TypeError, match="k must be a floating-point tensor"):
            qkv.ring_attention(q, k.int(), v)
    else:
        with pytest.raises(ValueError, match="rank 0 of the group rejected its shards"):
            qkv.ring_attention(q, k, v)


def check_malformed_flags_and_sizes_fail_on_every_rank(rank: int, world: int) -> None:
    q, k, v = (torch.randn(B, H, SHARD, size) for size in (D, D, DV))
    with pytest.raises(TypeError, match="causal must be a bool, got str 'no'"):
        qkv.ring_attention(q, k, v, causal="no")  # a truthy string once passed for True
    empty = torch.randn(B, H, SHARD, 0)
    with pytest.raises(ValueError, match=r"feature size D of at least 1, got q \(2, 3, 5, 0\)"):
        qkv.ring_attention(empty, empty, v)


def check_a_subgroup_rings_its_own_ranks(rank: int, world: int) -> None:
    members = [1, 3]
    group = dist.new_group(members)  # every process must take part in creating it
    if rank not in members:
        return
    q, k, v = _whole_sequence(len(members))
    position = members.index(rank)
    out = qkv.ring_attention(*(_shard(x, position) for x in (q, k, v)), causal=True, group=group)
    torch.testing.assert_close(out, _shard(reference_attention(q, k, v, is_causal=True), position))


# --- the tests ----------------------------------------------------------------------------------------------


def test_two_ranks():
    _spawn(
        2,
        "check_forward_equals_whole_attention",
        "check_backward_equals_whole_attention",
        "check_float16_within_torchs_error",
        "check_shards_of_different_lengths_fail_on_every_rank",
        "check_a_bad_shard_on_one_rank_fails_on_every_rank",
        "check_malformed_flags_and_sizes_fail_on_every_rank",
    )


def test_four_ranks():
    _spawn(
        4,
        "check_forward_equals_whole_attention",
        "check_backward_equals_whole_attention",
        "check_a_subgroup_rings_its_own_ranks",
    )


def test_without_a_process_group_the_error_says_what_to_do():
    assert not dist.is_initialized()
    q = torch.randn(1, 1, 4, 8)
    with pytest.raises(ValueError, match="init_process_group"):
        qkv.ring_attention(q, q, q)


def test_ring_schedule_by_hand():
    assert qkv.ring_schedule(3) == [[0, 2, 1], [1, 0, 2], [2, 1, 0]]
    assert qkv.ring_schedule(3, causal=True) == [[0, None, None], [1, 0, None], [2, 1, 0]]


def test_every_rank_meets_every_block_once():
    for world in (1, 2, 5):
        for rank, sources in enumerate(qkv.ring_schedule(world)):
            assert sorted(sources) == list(range(world))
            assert sources[0] == rank  # its own block first: the causal diagonal is always computed


@pytest.mark.parametrize(
    ("world", "causal", "error", "match"),
    [
        (0, False, ValueError, r"world must be positive, got 0"),
        (2.0, False, TypeError, r"world must be an int, got float"),
        (2, "yes", TypeError, r"causal must be a bool, got str 'yes'"),
    ],
)
def test_ring_schedule_refuses_malformed_input_by_name(world, causal, error, match):
    with pytest.raises(error, match=match):
        qkv.ring_schedule(world, causal)


def test_a_group_that_is_not_a_process_group_is_refused_by_name():
    q = torch.randn(1, 2, 4, 8)
    with pytest.raises(
        TypeError, match=r"group must be a torch\.distributed\.ProcessGroup or None, got int"
    ):
        qkv.ring_attention(q, q, q, group=3)
