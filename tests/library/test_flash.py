"""qkv.flash_attention (the Triton kernels) against torch: on CPU tensors through Triton's interpreter, or on a GPU.

`tests/conftest.py` sets `TRITON_INTERPRET=1` before anything imports triton; with `TRITON_INTERPRET=0` and a
GPU, the same tests run on CUDA in float16 and bfloat16 (`benchmarks/gpu.sh`). Every comparison is against the
float64 reference with torch's own error in the same dtype as the yardstick (2x for outputs, 3x for
gradients), masks built by qkv's mask builders (`tests.reference.reference_mask`). Shapes are tiny and the
interpreter runs 32 x 16 and 16 x 32 tiles (BLOCK_M != BLOCK_N, as on a GPU), so lengths such as 17, 20,
33 and 45 cover partial tiles in both directions, and windows of 5 and 9 leave full, partial and empty tiles.

What the interpreter supports (Triton 3.9): float16 runs and is exact to float16 rounding. bfloat16 loads,
stores and conversions work, but `tl.dot` on bfloat16 operands multiplies their raw 16-bit patterns as
integers, so the kernels give garbage; `flash_attention` therefore refuses bfloat16 under the interpreter
(tested below), and `test_interpreter_bfloat16_dot_is_still_broken` is a strict xfail that starts failing
the day the interpreter gets it right, so that the refusal can go. bfloat16 is checked on GPU only. Tensor
descriptors (`tl.make_tensor_descriptor`) run: rows past a descriptor's bounds load as zeros and are not
stored, as on a GPU, so the forward's TMA variants are checked here too (`VARIANTS`, pinned).

The interpreter never runs Triton's GPU compiler, so `test_kernels_compile_for_a_gpu` compiles every kernel
to sm_90 machine code in a subprocess (Triton ships ptxas; no GPU needed), with 16-byte-aligned pointers as a
real launch has them, and every autotuner tile size at D = 128 within an H100's shared memory; the forward's
variants for Hopper (`flash.FORWARD_VARIANTS`) without spills, and with tensor descriptors where they should;
the backward's (`flash.BACKWARD_VARIANTS`) without spills, and with atomic additions where they should.
"""

import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import qkv
from qkv.kernels import contract, flash
from qkv.masks import Mask
from tests.library.reference import (
    assert_close_to_reference,
    assert_grads_close_to_reference,
    reference_attention,
    reference_mask,
    torch_attention,
)

DEVICE = "cpu" if flash.INTERPRETED else "cuda"
DTYPES = [torch.float16] if flash.INTERPRETED else [torch.float16, torch.bfloat16]
interpreter_only = pytest.mark.skipif(not flash.INTERPRETED, reason="checks Triton's interpreter")


def run_with_grads(attention, q, k, v, d_out, **kwargs):
    """The output and (dq, dk, dv) of `attention` on leaf copies of q, k, v, for the upstream grad `d_out`."""
    leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    out = attention(*leaves, **kwargs)
    out.backward(d_out.to(out.dtype))
    return out.detach(), *(leaf.grad for leaf in leaves)


def assert_matches_torch(
    q, k, v, causal=False, scale=None, window=None, key_lengths=None, attention=None
):
    """flash_attention's output and gradients are as close to float64 as torch's own in q's dtype.

    `attention` replaces `qkv.flash_attention` (same arguments) where a test calls the kernels otherwise.
    """
    d_out = torch.randn(*q.shape[:-1], v.size(-1), dtype=q.dtype, device=q.device)
    masks = {"causal": causal, "window": window, "key_lengths": key_lengths}
    sdpa_kwargs = {"scale": scale, "enable_gqa": q.size(1) != k.size(1)}
    if causal is True and window is None and key_lengths is None:
        sdpa_kwargs["is_causal"] = True  # torch's own flag, not a mask
    elif causal or key_lengths is not None:
        mask = reference_mask(q.size(0), q.size(2), k.size(2), causal, window, key_lengths)
        sdpa_kwargs["attn_mask"] = mask.to(q.device)
    if attention is None:
        attention = qkv.flash_attention
        masks |= {"scale": scale}
    actual = run_with_grads(attention, q, k, v, d_out, **masks)
    expected = run_with_grads(
        reference_attention, q.double(), k.double(), v.double(), d_out, **sdpa_kwargs
    )
    yardstick = run_with_grads(torch_attention, q, k, v, d_out, **sdpa_kwargs)
    assert_grads_close_to_reference(actual, expected, yardstick, q.dtype)


def random_qkv(batch, heads, seqlen_q, seqlen_k, head_dim, dtype=torch.float16, heads_kv=None):
    """Standard-normal q `(B, H, L, D)`, k and v `(B, H_kv, S, D)` on the device under test."""
    heads_kv = heads if heads_kv is None else heads_kv
    q = torch.randn(batch, heads, seqlen_q, head_dim, dtype=dtype, device=DEVICE)
    k = torch.randn(batch, heads_kv, seqlen_k, head_dim, dtype=dtype, device=DEVICE)
    v = torch.randn(batch, heads_kv, seqlen_k, head_dim, dtype=dtype, device=DEVICE)
    return q, k, v


def variant(flags):
    """The first of `flash.FORWARD_VARIANTS` with exactly these flags, as a test parameter."""
    (config, *_) = (
        c
        for c in flash.FORWARD_VARIANTS
        if {name: c.kwargs[name] for name in c.kwargs if name.isupper() and "BLOCK" not in name}
        == flags
    )
    return pytest.param(config, id="-".join(sorted(flags)).lower())


# The forward's variants for Hopper (tensor descriptors, the scale folded into one FMA), one launch of each;
# `pin_forward` makes the forward kernel launch one, as the lab's lease does.
VARIANTS = [variant(flags) for flags in flash.VARIANT_FLAGS]
TMA_VARIANTS = [param for param in VARIANTS if param.values[0].kwargs.get("TMA")]


# The backward's variant that accumulates dQ in the dK/dV kernel with atomic additions (ATOMIC_DQ);
# `pin_backward` makes the dK/dV kernel launch it, as the lease does.
ATOMIC_DQ = pytest.param(flash.BACKWARD_VARIANTS[0], id="atomic-dq")


def pin(monkeypatch, tuner, config):
    """Launch `tuner`'s kernel with `config` only (None: leave the autotuner as it is)."""
    if config is not None:
        monkeypatch.setattr(tuner, "configs", [config])
        monkeypatch.setattr(tuner, "cache", {})


def pin_forward(monkeypatch, config):
    """Launch the forward kernel with `config` only (None: leave the autotuner as it is)."""
    pin(monkeypatch, flash._tuned_forward, config)


def pin_backward(monkeypatch, config):
    """Launch the dK/dV kernel with `config` only (None: leave the autotuner as it is)."""
    pin(monkeypatch, flash._tuned_backward_dkdv, config)


def some_key_lengths(seqlen_k):
    """Two batches: one keeps every key, one about a third of them (at least one)."""
    return torch.tensor([seqlen_k, max(1, seqlen_k // 3)], device=DEVICE)


SHAPES = [
    pytest.param(1, 1, 16, id="L1-S1-D16"),
    pytest.param(17, 17, 16, id="L17-S17-D16"),
    pytest.param(33, 33, 32, id="L33-S33-D32"),
    pytest.param(20, 45, 32, id="L20-S45-D32"),
    pytest.param(45, 20, 16, id="L45-S20-D16"),
    pytest.param(16, 32, 64, id="L16-S32-D64"),
    pytest.param(19, 7, 128, id="L19-S7-D128"),
]
MASKS = [
    pytest.param({}, id="full"),
    pytest.param({"causal": True}, id="causal"),
    pytest.param({"causal": "bottom_right"}, id="bottom-right"),
    pytest.param({"causal": "top_left", "window": 5}, id="window5"),
    pytest.param({"causal": "bottom_right", "window": 9}, id="window9-bottom-right"),
    pytest.param({"key_lengths": True}, id="key-lengths"),
]


# every shape and mask with the default kernels; every forward variant at one shape (L != S, partial tiles
# both ways); the backward's variant at that shape, its transpose (L > S) and length 1
CASES = (
    [
        pytest.param(*shape.values, *masks.values, None, None, id=f"{shape.id}-{masks.id}")
        for shape in SHAPES
        for masks in MASKS
    ]
    + [
        pytest.param(20, 45, 32, *masks.values, config, None, id=f"{config_id}-{masks.id}")
        for (config,), config_id in ((param.values, param.id) for param in VARIANTS)
        for masks in MASKS
    ]
    + [
        pytest.param(
            *shape.values,
            *masks.values,
            None,
            *ATOMIC_DQ.values,
            id=f"{ATOMIC_DQ.id}-{shape.id}-{masks.id}",
        )
        for shape in SHAPES
        if shape.id in ("L1-S1-D16", "L20-S45-D32", "L45-S20-D16")
        for masks in MASKS
    ]
)


@pytest.mark.parametrize(
    ("seqlen_q", "seqlen_k", "head_dim", "masks", "forward", "backward"), CASES
)
@pytest.mark.parametrize("dtype", DTYPES)
def test_output_and_gradients_match_torch(
    seqlen_q, seqlen_k, head_dim, masks, forward, backward, dtype, monkeypatch
):
    pin_forward(monkeypatch, forward)
    pin_backward(monkeypatch, backward)
    if masks.get("key_lengths"):
        masks = {"key_lengths": some_key_lengths(seqlen_k)}
    assert_matches_torch(*random_qkv(2, 2, seqlen_q, seqlen_k, head_dim, dtype), **masks)


@pytest.mark.parametrize("seqlen_k", [33, 100, 300])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_gradients_with_key_lengths_over_several_key_blocks_match_torch(seqlen_k, head_dim):
    # Lengths that cross several key blocks (the CUDA tests above stop at S = 45). At D = 128, S = 33
    # and 100, the dK/dV kernel that transposed its tiles in registers gave dK off by up to 1 on CUDA.
    q, k, v = random_qkv(2, 2, 37, seqlen_k, head_dim)
    assert_matches_torch(q, k, v, key_lengths=some_key_lengths(seqlen_k))


@pytest.mark.parametrize(
    "masks",
    [
        pytest.param({"causal": True}, id="causal"),
        pytest.param({"causal": "bottom_right", "window": 6}, id="window6-bottom-right"),
        pytest.param({"key_lengths": True}, id="key-lengths"),
    ],
)
@pytest.mark.parametrize(("heads", "heads_kv"), [(4, 2), (3, 1)], ids=["gqa-4-2", "mqa-3-1"])
@pytest.mark.parametrize("backward", [pytest.param(None, id="default"), ATOMIC_DQ])
def test_grouped_query_heads_match_torch(heads, heads_kv, masks, backward, monkeypatch):
    # dK and dV of a key/value head sum the gradients of every query head that reads it; with
    # ATOMIC_DQ, the program of a key/value head adds to dQ of each of its query heads.
    pin_backward(monkeypatch, backward)
    if masks.get("key_lengths"):
        masks = {"key_lengths": some_key_lengths(37)}
    assert_matches_torch(*random_qkv(2, heads, 21, 37, 16, heads_kv=heads_kv), **masks)


@given(
    seqlen_q=st.integers(1, 40),
    seqlen_k=st.integers(1, 40),
    causal=st.sampled_from([False, True, "bottom_right"]),
    window=st.one_of(st.none(), st.integers(1, 45)),
    key_length=st.one_of(st.none(), st.integers(-2, 42)),
    heads=st.sampled_from([(1, 1), (2, 1), (4, 2)]),
    head_dim=st.sampled_from([16, 32]),
)
@settings(max_examples=40)
def test_any_lengths_and_masks_match_torch(
    seqlen_q, seqlen_k, causal, window, key_length, heads, head_dim
):
    torch.manual_seed(seqlen_q * 100 + seqlen_k)
    window = window if causal else None  # a window needs a causal alignment
    key_lengths = None if key_length is None else torch.tensor([key_length], device=DEVICE)
    q, k, v = random_qkv(1, heads[0], seqlen_q, seqlen_k, head_dim, heads_kv=heads[1])
    assert_matches_torch(q, k, v, causal, window=window, key_lengths=key_lengths)


@pytest.mark.parametrize("backward", [pytest.param(None, id="default"), ATOMIC_DQ])
def test_queries_without_keys_give_zeros_and_zero_gradients(backward, monkeypatch):
    # Bottom-right with L = 40 > S = 9 leaves the first 31 queries no key; batch 1 has no key at all.
    pin_backward(monkeypatch, backward)
    q, k, v = (x.requires_grad_() for x in random_qkv(2, 2, 40, 9, 16, heads_kv=1))
    key_lengths = torch.tensor([9, 0], device=DEVICE)
    out = qkv.flash_attention(q, k, v, causal="bottom_right", key_lengths=key_lengths)
    out.backward(torch.randn_like(out))
    zero = torch.zeros((), dtype=q.dtype, device=DEVICE)
    assert torch.equal(out[0, :, :31], zero.expand(2, 31, 16))
    assert torch.equal(out[1], zero.expand(2, 40, 16))
    assert torch.equal(q.grad[0, :, :31], zero.expand(2, 31, 16))
    assert torch.equal(q.grad[1], zero.expand(2, 40, 16))
    assert torch.equal(k.grad[1], zero.expand(1, 9, 16))
    assert torch.equal(v.grad[1], zero.expand(1, 9, 16))
    assert out[0, :, 31:].abs().sum() > 0  # the queries that see keys are not zeros


def test_the_atomic_variant_runs_no_dq_kernel(monkeypatch):
    # ATOMIC_DQ: the dK/dV kernel's five products give dQ too; the dQ kernel's would be two more.
    pin_backward(monkeypatch, *ATOMIC_DQ.values)
    monkeypatch.setattr(flash, "_tuned_backward_dq", None)  # a launch would raise TypeError
    q, k, v = (x.requires_grad_() for x in random_qkv(1, 2, 9, 12, 16))
    qkv.flash_attention(q, k, v, causal=True).sum().backward()
    assert q.grad.abs().sum() > 0


def test_dkdv_configurations_with_and_without_atomic_dq_are_refused(monkeypatch):
    # The dQ kernel runs, or not, before the autotuner picks one of them.
    default = flash._tuned_backward_dkdv.configs[0]
    monkeypatch.setattr(flash._tuned_backward_dkdv, "configs", [default, *ATOMIC_DQ.values])
    q, k, v = (x.requires_grad_() for x in random_qkv(1, 1, 4, 4, 16))
    out = qkv.flash_attention(q, k, v)
    with pytest.raises(ValueError, match="must all set ATOMIC_DQ or none"):
        out.sum().backward()


@pytest.mark.parametrize(
    ("forward", "backward"),
    [
        pytest.param(None, None, id="default"),
        *(pytest.param(*param.values, None, id=param.id) for param in TMA_VARIANTS),
        pytest.param(None, *ATOMIC_DQ.values, id=ATOMIC_DQ.id),
    ],
)
@pytest.mark.parametrize("masks", [{}, {"causal": True, "window": 8}], ids=["padding", "window"])
def test_keys_past_key_lengths_are_never_read(masks, forward, backward, monkeypatch):
    # NaN keys and values past each batch's length: a read of any of them would spread NaN.
    pin_forward(monkeypatch, forward)
    pin_backward(monkeypatch, backward)
    q, k, v = random_qkv(2, 2, 23, 50, 32)
    key_lengths = torch.tensor([13, 40], device=DEVICE)
    real = qkv.padding_mask(key_lengths, 50)[:, :, 0, :, None]  # (B, 1, 1, S) -> (B, 1, S, 1)
    poisoned = [x.masked_fill(~real, float("nan")) for x in (k, v)]
    d_out = torch.randn_like(q)
    clean = run_with_grads(qkv.flash_attention, q, k, v, d_out, key_lengths=key_lengths, **masks)
    dirty = run_with_grads(
        qkv.flash_attention, q, *poisoned, d_out, key_lengths=key_lengths, **masks
    )
    for name, a, b in zip(("output", "dq", "dk", "dv"), clean, dirty, strict=True):
        assert torch.equal(a, b), name
    assert not clean[2].masked_select(~real).any()  # keys past the lengths get no gradient


@pytest.mark.parametrize(
    ("scale", "causal", "forward", "backward"),
    [
        pytest.param(scale, causal, None, None, id=f"{scale}-{'causal' if causal else 'full'}")
        for scale in (0.05, 1.0, 2.5)
        for causal in (False, True)
    ]
    + [pytest.param(-0.7, False, None, None, id="-0.7-full")]
    + [
        pytest.param(-0.7, False, *param.values, None, id=f"-0.7-full-{param.id}")
        for param in VARIANTS
        if param.values[0].kwargs.get("FOLD_SCALE")
    ]
    + [
        pytest.param(-0.7, False, None, *ATOMIC_DQ.values, id=f"-0.7-full-{ATOMIC_DQ.id}"),
        pytest.param(2.5, True, None, *ATOMIC_DQ.values, id=f"2.5-causal-{ATOMIC_DQ.id}"),
    ],
)
def test_custom_scale_matches_torch(scale, causal, forward, backward, monkeypatch):
    # A negative scale makes the largest score the smallest product: FOLD_SCALE's maximum is taken before it.
    # At 2.5, keys pre-scaled in float16 took dQ past the rule (see qkv.kernels.flash).
    pin_forward(monkeypatch, forward)
    pin_backward(monkeypatch, backward)
    assert_matches_torch(*random_qkv(2, 1, 18, 21, 32), causal=causal, scale=scale)


def test_batch_and_heads_both_above_one_match_torch():
    # The grid is (blocks, H, B): each program must find its own (batch, head) slice.
    assert_matches_torch(*random_qkv(2, 3, 17, 20, 16), causal=True)


def test_grid_stays_within_cuda_limits_for_many_heads():
    # B * H = 131072 programs per query block: more than CUDA's 65535 on grid axes 1 and 2.
    blocks, *rest = flash._grid(1000, 64, batch=4096, heads=32)
    assert blocks == 16
    assert sorted(rest) == [32, 4096]  # one program per (block, head, batch)
    assert max(rest) <= 65535


@pytest.mark.parametrize(
    ("seqlen_q", "heights"),
    [(1, [16]), (16, [16]), (40, [64]), (100, [64, 128]), (4096, [64, 128])],
)
def test_autotuner_tries_query_blocks_that_suit_the_queries(seqlen_q, heights):
    # Decoding (1 to 16 queries) gets 16-row blocks; long sequences no block shorter than 64 rows.
    configs = [flash.triton.Config({"BLOCK_M": m, "BLOCK_N": 64}) for m in (16, 64, 128)]
    kept = flash._fitting_query_blocks(configs, {"seqlen_q": seqlen_q})
    assert [config.kwargs["BLOCK_M"] for config in kept] == heights


def test_non_contiguous_inputs_match_torch():
    # (B, N, H, D) -> (B, H, N, D), as a model that keeps heads last would pass them
    q, k, v = (x.transpose(1, 2) for x in random_qkv(1, 21, 2, 2, 16))
    assert not q.is_contiguous()
    assert_matches_torch(q, k, v, causal=True)


@pytest.mark.parametrize(
    ("causal", "window"), [(False, None), (True, None), ("bottom_right", 7)], ids=str
)
def test_stored_logsumexp_is_the_scores_logsumexp(causal, window):
    q, k, v = random_qkv(1, 2, 23, 37, 32)
    scale = 1 / math.sqrt(32)
    bottom_right = causal == "bottom_right"
    _, lse = flash._flash_forward(q, k, v, None, bool(causal), bottom_right, window, scale)
    scores = q.double() @ k.double().transpose(-2, -1) * scale  # (B, H, L, S)
    mask = reference_mask(1, 23, 37, causal, window).to(DEVICE)
    scores = scores.masked_fill(~mask, float("-inf"))
    torch.testing.assert_close(lse.double(), torch.logsumexp(scores, dim=-1), rtol=0, atol=2e-3)


def test_causal_is_top_left_aligned_when_query_is_longer():
    q, k, v = random_qkv(1, 1, 5, 3, 16)
    out = qkv.flash_attention(q, k, v, causal=True)
    # Query 0 sees key 0 only; queries 2, 3 and 4 see all three keys, so their outputs agree.
    torch.testing.assert_close(out[0, 0, 0], v[0, 0, 0])
    attended = F.scaled_dot_product_attention(q[:, :, 2:].float(), k.float(), v.float())
    torch.testing.assert_close(out[:, :, 2:].float(), attended, rtol=0, atol=2e-3)


@interpreter_only
def test_bfloat16_is_refused_under_the_interpreter():
    q, k, v = random_qkv(1, 1, 4, 4, 16, dtype=torch.bfloat16)
    with pytest.raises(
        TypeError, match=r"torch\.bfloat16, which Triton's interpreter cannot multiply"
    ):
        qkv.flash_attention(q, k, v)


@interpreter_only
@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="Triton 3.9's interpreter multiplies bfloat16 tl.dot operands as raw 16-bit integers",
)
def test_interpreter_bfloat16_dot_is_still_broken():
    q, k, v = random_qkv(1, 1, 17, 17, 16, dtype=torch.bfloat16)
    out = flash.attend(q, k, v, Mask(), 0.25)  # past the public refusal
    assert_close_to_reference(
        out, reference_attention(q, k, v, scale=0.25), torch_attention(q, k, v, scale=0.25)
    )


def test_cpu_tensors_without_the_interpreter_are_refused(monkeypatch):
    monkeypatch.setattr(contract, "interpreted", lambda: False)
    q, k, v = (torch.randn(1, 1, 4, 16, dtype=torch.float16) for _ in range(3))
    with pytest.raises(ValueError, match=r"on the CPU \(1, 1, 4, 16\).*TRITON_INTERPRET=1"):
        qkv.flash_attention(q, k, v)


# Compiles every kernel to Hopper (sm_90) machine code with Triton's bundled ptxas (qkv_lab.sm90); needs no
# GPU.
COMPILE_FOR_GPU = textwrap.dedent(
    """
    import re

    from qkv.kernels import flash
    from qkv_lab.sm90 import H100_SHARED_MEMORY, compile_for_sm90, usage

    assert not flash.INTERPRETED


    def compiles(kernel, constants, pointers="*bf16", num_warps=4, num_stages=3):
        options = {"num_warps": num_warps, "num_stages": num_stages}
        compiled = compile_for_sm90(kernel, constants, pointers=pointers, **options)
        assert compiled.asm["cubin"], kernel.__name__
        shared = compiled.metadata.shared
        assert shared <= H100_SHARED_MEMORY, (kernel.__name__, constants, num_stages, shared)


    KERNELS = [
        (flash._forward_kernel, {"BLOCK_M": 128, "BLOCK_N": 64}),
        (flash._backward_preprocess, {"BLOCK_M": 64}),
        (flash._backward_dkdv_kernel, {"BLOCK_M": 32, "BLOCK_N": 64}),
        (flash._backward_dq_kernel, {"BLOCK_M": 64, "BLOCK_N": 32}),
    ]
    PADDED = {"CuSeqlensQ": None, "CuSeqlensK": None}  # no cumulative lengths: None constants
    PLAIN = {"CAUSAL": False, "WINDOW": False, "KeyLengths": None, **PADDED}
    EVERY_MASK = {"CAUSAL": True, "WINDOW": True, **PADDED}  # and a KeyLengths pointer
    PACKED = {"CAUSAL": True, "WINDOW": True, "KeyLengths": None}  # cumulative length pointers
    for kernel, constants in KERNELS:
        for masks in (PLAIN, EVERY_MASK, PACKED) if "KeyLengths" in kernel.arg_names else ({},):
            compiles(kernel, {"HEAD_DIM": 64, **masks, **constants})

    # The forward's variants for Hopper, which the lease times, at D = 128 with every mask (every stage of
    # the loop compiled): no spill, within an H100's shared memory, and TMA's loads through tensor
    # descriptors (cp.async.bulk.tensor in the PTX), the others' not.
    for config in flash.FORWARD_VARIANTS:
        given = {"HEAD_DIM": 128, **EVERY_MASK, **config.kwargs}
        options = {"num_warps": config.num_warps, "num_stages": config.num_stages}
        compiled = compile_for_sm90(flash._forward_kernel, given, **options)
        used = usage(compiled)
        assert used["stack"] == 0, ("spills", str(config), used)
        assert used["shared"] <= H100_SHARED_MEMORY, (str(config), used)
        tma = "cp.async.bulk.tensor" in compiled.asm["ptx"]
        assert tma == config.kwargs.get("TMA", False), (str(config), tma)

    # The backward's variant that adds to dQ atomically, beside the dK/dV kernel's first configuration, at
    # D = 128 with every mask: within an H100's shared memory, the variant without spills, and float32
    # atomic additions to global memory in the PTX (red or atom, .global, add, .f32) exactly in the variant.
    atomic_add = re.compile("(red|atom)[.]global[.][a-z0-9._]*add[a-z0-9.]*[.]f32")
    for config in [flash._tuned_backward_dkdv.configs[0], *flash.BACKWARD_VARIANTS]:
        atomic = config.kwargs.get("ATOMIC_DQ", False)
        given = {"HEAD_DIM": 128, **EVERY_MASK, **config.kwargs}
        if not atomic:
            given["dQAccum"] = None  # as the two-kernel path launches it
        options = {"num_warps": config.num_warps, "num_stages": config.num_stages}
        compiled = compile_for_sm90(flash._backward_dkdv_kernel, given, **options)
        used = usage(compiled)
        assert used["shared"] <= H100_SHARED_MEMORY, (str(config), used)
        assert used["stack"] == 0 or not atomic, ("spills", str(config), used)
        found = bool(atomic_add.search(compiled.asm["ptx"]))
        assert found == atomic, (str(config), found)

    # Every tile size the autotuner may try, at the largest head size and its deepest pipeline (the most
    # shared memory): a config that does not fit is skipped by the autotuner, but if none fits, the launch fails.
    for tuned in (flash._tuned_forward, flash._tuned_backward_dkdv, flash._tuned_backward_dq):
        by_stages = sorted(tuned.configs, key=lambda config: config.num_stages)
        deepest = {tuple(config.kwargs.items()): config for config in by_stages}.values()
        for config in deepest:
            given = {"HEAD_DIM": 128, "CAUSAL": True, "WINDOW": True, **config.kwargs}
            compiles(tuned.fn, given, "*fp16", config.num_warps, config.num_stages)
    """
)


def test_kernels_compile_for_a_gpu():
    """The interpreter skips GPU compilation; this catches what only the compiler rejects."""
    env = os.environ | {"TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1"}
    env["QKV_FLASH_AUTOTUNE"] = "1"  # every configuration the autotuner may try
    result = subprocess.run(
        [sys.executable, "-c", COMPILE_FOR_GPU],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]


def half(*size):
    return torch.randn(*size, dtype=torch.float16, device=DEVICE)


BAD_INPUTS = [
    pytest.param(
        ([[1.0]], half(1, 1, 4, 16), half(1, 1, 4, 16)),
        {},
        TypeError,
        r"q must be a torch\.Tensor, got list",
        id="not-a-tensor",
    ),
    pytest.param(
        (half(4, 16), half(1, 1, 4, 16), half(1, 1, 4, 16)),
        {},
        ValueError,
        r"q must be 4-D \(B, H, N, D\), got shape \(4, 16\)",
        id="q-not-4d",
    ),
    pytest.param(
        (half(1, 1, 4, 16), half(1, 1, 1, 4, 16), half(1, 1, 4, 16)),
        {},
        ValueError,
        r"k must be 4-D \(B, H, N, D\), got shape \(1, 1, 1, 4, 16\)",
        id="k-5d",
    ),
    pytest.param(
        (half(1, 1, 4, 16).float(), half(1, 1, 4, 16).float(), half(1, 1, 4, 16).float()),
        {},
        TypeError,
        r"q has dtype torch\.float32; flash_attention takes torch\.float16 or torch\.bfloat16",
        id="float32",
    ),
    pytest.param(
        (half(1, 1, 4, 16), half(1, 1, 4, 16).bfloat16(), half(1, 1, 4, 16)),
        {},
        TypeError,
        r"q and k disagree on dtype: q torch\.float16 vs k torch\.bfloat16",
        id="dtype-mismatch",
    ),
    pytest.param(
        (
            half(1, 1, 4, 16),
            half(1, 1, 4, 16),
            torch.empty(1, 1, 4, 16, dtype=torch.float16, device="meta"),
        ),
        {},
        ValueError,
        r"q and v are on different devices: q \S+ vs v meta",
        id="device-mismatch",
    ),
    pytest.param(
        (half(2, 4, 5, 64), half(2, 4, 5, 64), half(2, 4, 6, 64)),
        {},
        ValueError,
        r"k and v disagree on length S: k \(2, 4, 5, 64\) vs v \(2, 4, 6, 64\)",
        id="kv-length",
    ),
    pytest.param(
        (half(2, 4, 5, 64), half(2, 3, 5, 64), half(2, 3, 5, 64)),
        {},
        ValueError,
        r"same number of heads H_kv, dividing q's H .*: q \(2, 4, 5, 64\), k \(2, 3, 5, 64\)",
        id="heads-do-not-divide",
    ),
    pytest.param(
        (half(2, 4, 5, 64), half(2, 2, 5, 64), half(2, 1, 5, 64)),
        {},
        ValueError,
        r"same number of heads H_kv.*k \(2, 2, 5, 64\), v \(2, 1, 5, 64\)",
        id="k-and-v-heads-differ",
    ),
    pytest.param(
        (half(2, 4, 5, 64), half(1, 4, 5, 64), half(1, 4, 5, 64)),
        {},
        ValueError,
        r"disagree on the batch size B: q \(2, 4, 5, 64\), k \(1, 4, 5, 64\)",
        id="batch",
    ),
    pytest.param(
        (half(1, 2, 5, 32), half(1, 2, 5, 64), half(1, 2, 5, 64)),
        {},
        ValueError,
        r"disagree on head size D: q \(1, 2, 5, 32\), k \(1, 2, 5, 64\)",
        id="head-size-mismatch",
    ),
    pytest.param(
        (half(1, 2, 5, 48), half(1, 2, 5, 48), half(1, 2, 5, 48)),
        {},
        ValueError,
        r"head size D must be one of \(16, 32, 64, 128\), got 48: q \(1, 2, 5, 48\)",
        id="head-size-48",
    ),
    pytest.param(
        (half(1, 2, 5, 16), half(1, 2, 0, 16), half(1, 2, 0, 16)),
        {},
        ValueError,
        r"need at least one position: q \(1, 2, 5, 16\), k \(1, 2, 0, 16\)",
        id="empty-keys",
    ),
    pytest.param(
        (half(65536, 1, 1, 16), half(65536, 1, 1, 16), half(65536, 1, 1, 16)),
        {},
        ValueError,
        r"batch and heads must each be at most 65535 .*: q \(65536, 1, 1, 16\)",
        id="batch-above-grid-limit",
    ),
    pytest.param(
        (half(2, 1, 4, 16), half(2, 1, 4, 16), half(2, 1, 4, 16)),
        {"causal": "top_right"},
        ValueError,
        r"causal must be False, True or one of \('top_left', 'bottom_right'\), got 'top_right'",
        id="unknown-alignment",
    ),
    pytest.param(
        (half(2, 1, 4, 16), half(2, 1, 4, 16), half(2, 1, 4, 16)),
        {"causal": 1},
        TypeError,
        r"causal must be a bool or one of .*, got int",
        id="causal-int",
    ),
    pytest.param(
        (half(2, 1, 4, 16), half(2, 1, 4, 16), half(2, 1, 4, 16)),
        {"causal": True, "window": 0},
        ValueError,
        r"window must be at least 1, got 0",
        id="window-0",
    ),
    pytest.param(
        (half(2, 1, 4, 16), half(2, 1, 4, 16), half(2, 1, 4, 16)),
        {"causal": True, "window": 2.0},
        TypeError,
        r"window must be an int or None, got float",
        id="window-float",
    ),
    pytest.param(
        (half(2, 1, 4, 16), half(2, 1, 4, 16), half(2, 1, 4, 16)),
        {"window": 3},
        ValueError,
        r"window=3 needs a causal alignment: pass causal=True",
        id="window-without-causal",
    ),
    pytest.param(
        (half(2, 1, 4, 16), half(2, 1, 4, 16), half(2, 1, 4, 16)),
        {"key_lengths": [4, 4]},
        TypeError,
        r"key_lengths must be a tensor or None, got list",
        id="key-lengths-list",
    ),
    pytest.param(
        (half(2, 1, 4, 16), half(2, 1, 4, 16), half(2, 1, 4, 16)),
        {"key_lengths": torch.tensor([4.0, 4.0])},
        TypeError,
        r"key_lengths must be an integer tensor, got dtype torch.float32",
        id="key-lengths-float",
    ),
    pytest.param(
        (half(2, 1, 4, 16), half(2, 1, 4, 16), half(2, 1, 4, 16)),
        {"key_lengths": torch.tensor([4, 4, 4])},
        ValueError,
        r"key_lengths must be \(B,\) = \(2,\), one length per batch, got \(3,\)",
        id="key-lengths-shape",
    ),
    pytest.param(
        (half(2, 1, 4, 16), half(2, 1, 4, 16), half(2, 1, 4, 16)),
        {"key_lengths": torch.tensor([4, 4], device="meta")},
        ValueError,
        r"key_lengths is on meta but the queries are on",
        id="key-lengths-device",
    ),
]


@pytest.mark.parametrize(("args", "kwargs", "error", "message"), BAD_INPUTS)
def test_bad_input_is_refused_with_the_shapes(args, kwargs, error, message):
    with pytest.raises(error, match=message):
        qkv.flash_attention(*args, **kwargs)


def test_without_triton_the_error_names_the_extra(monkeypatch):
    import qkv.kernels

    monkeypatch.setattr(qkv.kernels, "triton_installed", lambda: False)
    q = torch.randn(1, 1, 4, 16, dtype=torch.float16)
    with pytest.raises(ModuleNotFoundError, match=r"qkv\[kernel\]"):
        qkv.flash_attention(q, q, q)
