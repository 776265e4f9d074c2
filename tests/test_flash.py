"""qkv.flash_attention (the Triton kernels) against torch, on CPU tensors through Triton's interpreter.

`tests/conftest.py` sets `TRITON_INTERPRET=1` before anything imports triton. Every comparison is against the
float64 reference with torch's own error in the same dtype as the yardstick (2x for outputs, 3x for
gradients). Shapes are tiny and the interpreter runs 32 x 16 and 16 x 32 tiles (BLOCK_M != BLOCK_N, as on a
GPU), so lengths such as 17, 20, 33 and 45 cover partial tiles in both directions.

What the interpreter supports (Triton 3.9): float16 runs and is exact to float16 rounding. bfloat16 loads,
stores and conversions work, but `tl.dot` on bfloat16 operands multiplies their raw 16-bit patterns as
integers, so the kernels give garbage; `flash_attention` therefore refuses bfloat16 under the interpreter
(tested below), and `test_interpreter_bfloat16_dot_is_still_broken` is a strict xfail that starts failing
the day the interpreter gets it right, so that the refusal can go. bfloat16 is checked on GPU only.

The interpreter never runs Triton's GPU compiler, so `test_kernels_compile_for_a_gpu` compiles every kernel
to sm_90 machine code in a subprocess (Triton ships ptxas; no GPU needed), with 16-byte-aligned pointers as a
real launch has them, and every autotuner tile size at D = 128 within an H100's shared memory.
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
from qkv.kernels import flash
from tests.reference import assert_close_to_reference, reference_attention, torch_attention


def run_with_grads(attention, q, k, v, d_out, **kwargs):
    """The output and (dq, dk, dv) of `attention` on leaf copies of q, k, v, for the upstream grad `d_out`."""
    leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    out = attention(*leaves, **kwargs)
    out.backward(d_out.to(out.dtype))
    return out.detach(), *(leaf.grad for leaf in leaves)


def assert_matches_torch(q, k, v, causal=False, scale=None):
    """flash_attention's output and gradients are as close to float64 as torch's own in q's dtype."""
    d_out = torch.randn(*q.shape[:-1], v.size(-1), dtype=q.dtype)
    sdpa_kwargs = {"is_causal": causal, "scale": scale}
    actual = run_with_grads(qkv.flash_attention, q, k, v, d_out, causal=causal, scale=scale)
    expected = run_with_grads(
        reference_attention, q.double(), k.double(), v.double(), d_out, **sdpa_kwargs
    )
    yardstick = run_with_grads(torch_attention, q, k, v, d_out, **sdpa_kwargs)
    for name, a, e, y, factor in zip(
        ("output", "dq", "dk", "dv"), actual, expected, yardstick, (2, 3, 3, 3), strict=True
    ):
        assert a.dtype == q.dtype, name
        try:
            assert_close_to_reference(a, e, y, factor)
        except AssertionError as error:
            raise AssertionError(f"{name}: {error}") from None


def random_qkv(batch, heads, seqlen_q, seqlen_k, head_dim, dtype=torch.float16):
    q = torch.randn(batch, heads, seqlen_q, head_dim, dtype=dtype)
    k = torch.randn(batch, heads, seqlen_k, head_dim, dtype=dtype)
    v = torch.randn(batch, heads, seqlen_k, head_dim, dtype=dtype)
    return q, k, v


SHAPES = [
    pytest.param(1, 1, 16, id="L1-S1-D16"),
    pytest.param(17, 17, 16, id="L17-S17-D16"),
    pytest.param(33, 33, 32, id="L33-S33-D32"),
    pytest.param(20, 45, 32, id="L20-S45-D32"),
    pytest.param(45, 20, 16, id="L45-S20-D16"),
    pytest.param(16, 32, 64, id="L16-S32-D64"),
    pytest.param(19, 7, 128, id="L19-S7-D128"),
]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(("seqlen_q", "seqlen_k", "head_dim"), SHAPES)
def test_output_and_gradients_match_torch(seqlen_q, seqlen_k, head_dim, causal):
    assert_matches_torch(*random_qkv(1, 2, seqlen_q, seqlen_k, head_dim), causal=causal)


@given(
    seqlen_q=st.integers(1, 40),
    seqlen_k=st.integers(1, 40),
    causal=st.booleans(),
    head_dim=st.sampled_from([16, 32, 64]),
)
@settings(max_examples=30)
def test_any_lengths_match_torch(seqlen_q, seqlen_k, causal, head_dim):
    torch.manual_seed(seqlen_q * 100 + seqlen_k)
    assert_matches_torch(*random_qkv(1, 1, seqlen_q, seqlen_k, head_dim), causal=causal)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("scale", [0.05, 1.0, 2.5])
def test_custom_scale_matches_torch(scale, causal):
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


def test_non_contiguous_inputs_match_torch():
    # (B, N, H, D) -> (B, H, N, D), as a model that keeps heads last would pass them
    q, k, v = (x.transpose(1, 2) for x in random_qkv(1, 21, 2, 2, 16))
    assert not q.is_contiguous()
    assert_matches_torch(q, k, v, causal=True)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_stored_logsumexp_is_the_scores_logsumexp(causal):
    q, k, v = random_qkv(1, 2, 23, 37, 32)
    scale = 1 / math.sqrt(32)
    _, lse = flash._flash_forward(q, k, v, causal, scale)
    scores = q.double() @ k.double().transpose(-2, -1) * scale  # (B, H, L, S)
    if causal:
        scores = scores.masked_fill(~torch.ones(23, 37, dtype=torch.bool).tril(), float("-inf"))
    torch.testing.assert_close(lse.double(), torch.logsumexp(scores, dim=-1), rtol=0, atol=2e-3)


def test_causal_is_top_left_aligned_when_query_is_longer():
    q, k, v = random_qkv(1, 1, 5, 3, 16)
    out = qkv.flash_attention(q, k, v, causal=True)
    # Query 0 sees key 0 only; queries 2, 3 and 4 see all three keys, so their outputs agree.
    torch.testing.assert_close(out[0, 0, 0], v[0, 0, 0])
    attended = F.scaled_dot_product_attention(q[:, :, 2:].float(), k.float(), v.float())
    torch.testing.assert_close(out[:, :, 2:].float(), attended, rtol=0, atol=2e-3)


def test_bfloat16_is_refused_under_the_interpreter():
    q, k, v = random_qkv(1, 1, 4, 4, 16, dtype=torch.bfloat16)
    with pytest.raises(
        TypeError, match=r"torch\.bfloat16, which Triton's interpreter cannot multiply"
    ):
        qkv.flash_attention(q, k, v)


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="Triton 3.9's interpreter multiplies bfloat16 tl.dot operands as raw 16-bit integers",
)
def test_interpreter_bfloat16_dot_is_still_broken():
    q, k, v = random_qkv(1, 1, 17, 17, 16, dtype=torch.bfloat16)
    out = flash._FlashAttention.apply(q, k, v, False, 0.25)  # past the public refusal
    assert_close_to_reference(
        out, reference_attention(q, k, v, scale=0.25), torch_attention(q, k, v, scale=0.25)
    )


def test_cpu_tensors_without_the_interpreter_are_refused(monkeypatch):
    monkeypatch.setattr(flash, "INTERPRETED", False)
    q, k, v = random_qkv(1, 1, 4, 4, 16)
    with pytest.raises(ValueError, match=r"on the CPU \(1, 1, 4, 16\).*TRITON_INTERPRET=1"):
        qkv.flash_attention(q, k, v)


# Compiles every kernel to Hopper (sm_90) machine code with Triton's bundled ptxas; needs no GPU. Pointers
# are marked 16-byte aligned, as torch's allocations are and a real launch specialises them: only then does
# Triton pipeline the loads through multi-buffered shared memory, the code an H100 actually runs.
COMPILE_FOR_GPU = textwrap.dedent(
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from qkv.kernels import flash

    assert not flash.INTERPRETED
    H100_SHARED_MEMORY = 232448  # bytes of shared memory one program may use on sm_90 (227 KiB)
    TYPES = {"LSE": "*fp32", "Delta": "*fp32", "scale": "fp32", "qk_scale": "fp32"}


    def compile_for_sm90(kernel, given, dtype, num_warps=4, num_stages=3):
        constexprs = {name: given[name] for name in kernel.arg_names if name in given}
        signature = {
            p.name: "constexpr" if p.is_constexpr else TYPES.get(p.name, dtype) for p in kernel.params
        }
        signature |= {name: "i32" for name in signature if name.startswith("seqlen")}
        aligned = {
            (i,): [["tt.divisibility", 16]]
            for i, p in enumerate(kernel.params)
            if signature[p.name].startswith("*")
        }
        compiled = triton.compile(
            ASTSource(kernel, signature, constexprs, aligned),
            target=GPUTarget("cuda", 90, 32),
            options={"num_warps": num_warps, "num_stages": num_stages},
        )
        assert compiled.asm["cubin"], kernel.__name__
        shared = compiled.metadata.shared
        assert shared <= H100_SHARED_MEMORY, (kernel.__name__, given, num_stages, shared)


    KERNELS = [
        (flash._forward_kernel, {"BLOCK_M": 128, "BLOCK_N": 64}),
        (flash._backward_preprocess, {"BLOCK_M": 64}),
        (flash._backward_dkdv_kernel, {"BLOCK_M": 32, "BLOCK_N": 64}),
        (flash._backward_dq_kernel, {"BLOCK_M": 64, "BLOCK_N": 32}),
    ]
    for kernel, constants in KERNELS:
        for causal in (False, True):
            compile_for_sm90(kernel, {"HEAD_DIM": 64, "CAUSAL": causal, **constants}, "*bf16")

    # Every tile size the autotuner may try, at the largest head size and its deepest pipeline (the most
    # shared memory): a config that does not fit is skipped by the autotuner, but if none fits, the launch fails.
    for tuned in (flash._tuned_forward, flash._tuned_backward_dkdv, flash._tuned_backward_dq):
        by_stages = sorted(tuned.configs, key=lambda config: config.num_stages)
        deepest = {tuple(config.kwargs.items()): config for config in by_stages}.values()
        for config in deepest:
            given = {"HEAD_DIM": 128, "CAUSAL": True, **config.kwargs}
            compile_for_sm90(tuned.fn, given, "*fp16", config.num_warps, config.num_stages)
    """
)


def test_kernels_compile_for_a_gpu():
    """The interpreter skips GPU compilation; this catches what only the compiler rejects."""
    env = os.environ | {"TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1"}
    result = subprocess.run(
        [sys.executable, "-c", COMPILE_FOR_GPU],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]


def half(*size):
    return torch.randn(*size, dtype=torch.float16)


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
        r"q and v are on different devices: q cpu vs v meta",
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
        r"disagree on batch and heads \(B, H\): q \(2, 4, 5, 64\), k \(2, 3, 5, 64\)",
        id="heads",
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
        (half(1, 1, 4, 16), half(1, 1, 4, 16), half(1, 1, 4, 16)),
        {"scale": "0.5"},
        TypeError,
        r"scale must be a number or None, got str",
        id="scale-str",
    ),
]


@pytest.mark.parametrize(("args", "kwargs", "error", "message"), BAD_INPUTS)
def test_bad_input_is_refused_with_the_shapes(args, kwargs, error, message):
    with pytest.raises(error, match=message):
        qkv.flash_attention(*args, **kwargs)
