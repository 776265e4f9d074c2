"""qkv.flash_attention_varlen (packed sequences through the Triton kernels) against torch, as test_flash.py does.

Packed `q (total_q, H, D)` meets torch as `(1, H, total_q, D)` with `qkv.document_mask`, the plain statement
of the same semantics, and the comparison is test_flash.py's: the float64 reference of `tests.reference`,
with torch's own error in the same dtype as the yardstick (2x for outputs, 3x for gradients). The lengths
hold sequences of 0 and 1 queries or keys, L != S both ways, and lengths of 17 to 40 that cross the
interpreter's 16- and 32-row tiles; the longest sequence has two query blocks, so the programs of the others'
second block exit early. On a GPU (`benchmarks/gpu.sh`), the same tests run in float16 and bfloat16.
"""

import itertools

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import qkv
from qkv.kernels import contract
from tests.library.reference import (
    assert_grads_close_to_reference,
    reference_attention,
    torch_attention,
)
from tests.library.test_flash import (
    ATOMIC_DQ,
    DEVICE,
    DTYPES,
    VARIANTS,
    interpreter_only,
    pin_backward,
    pin_forward,
    run_with_grads,
)

SEQLENS_Q = [5, 0, 1, 40, 3, 17]
SEQLENS_K = [7, 4, 1, 17, 0, 33]


def cumulative(lengths):
    """int32 `(N + 1,)` cumulative lengths on the device under test: 0, then the running sums."""
    return torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32, device=DEVICE)


def packed_qkv(seqlens_q, seqlens_k, heads=2, heads_kv=1, head_dim=16, dtype=torch.float16):
    """Standard-normal q `(total_q, H, D)`, k and v `(total_k, H_kv, D)`, and their cumulative lengths."""
    q = torch.randn(sum(seqlens_q), heads, head_dim, dtype=dtype, device=DEVICE)
    k, v = (
        torch.randn(sum(seqlens_k), heads_kv, head_dim, dtype=dtype, device=DEVICE)
        for _ in range(2)
    )
    return q, k, v, cumulative(seqlens_q), cumulative(seqlens_k)


def unpacked(attention):
    """`attention` of 4-D tensors, called with packed ones: `(total, H, D)` in and out, as one batch."""

    def call(q, k, v, **kwargs):
        q, k, v = (x.transpose(0, 1)[None] for x in (q, k, v))  # (total, H, D) -> (1, H, total, D)
        return attention(q, k, v, **kwargs)[0].transpose(
            0, 1
        )  # (1, H, total_q, D) -> (total_q, H, D)

    return call


def assert_varlen_matches_torch(q, k, v, cu_seqlens_q, cu_seqlens_k, **options):
    """Output and gradients are as close to float64 torch on the document mask as torch's own in q's dtype."""
    d_out = torch.randn_like(q)
    mask = qkv.document_mask(
        cu_seqlens_q,
        cu_seqlens_k,
        causal=options.get("causal", False),
        window=options.get("window"),
    )  # (total_q, total_k)
    sdpa = {"attn_mask": mask, "scale": options.get("scale"), "enable_gqa": q.size(1) != k.size(1)}
    lengths = {"cu_seqlens_q": cu_seqlens_q, "cu_seqlens_k": cu_seqlens_k}
    actual = run_with_grads(qkv.flash_attention_varlen, q, k, v, d_out, **lengths, **options)
    expected = run_with_grads(
        unpacked(reference_attention), q.double(), k.double(), v.double(), d_out, **sdpa
    )
    yardstick = run_with_grads(unpacked(torch_attention), q, k, v, d_out, **sdpa)
    assert_grads_close_to_reference(actual, expected, yardstick, q.dtype)


MASKS = [
    pytest.param({}, id="full"),
    pytest.param({"causal": True}, id="causal"),
    pytest.param({"causal": "bottom_right"}, id="bottom-right"),
    pytest.param({"causal": "top_left", "window": 5}, id="window5"),
    pytest.param({"causal": "bottom_right", "window": 9, "scale": 0.3}, id="window9-bottom-right"),
]


# the forward's variant with both tensor descriptors and the folded scale: each sequence's own descriptors
BOTH = next(param for param in VARIANTS if len(param.values[0].kwargs) == 4)
# and the backward's variant that adds to dQ atomically: each sequence's own rows of dQ
WITH_VARIANT = [
    pytest.param(*masks.values, *forward, *backward, id=f"{masks.id}-{variant.id}")
    for variant, forward, backward in (
        (BOTH, BOTH.values, [None]),
        (ATOMIC_DQ, [None], ATOMIC_DQ.values),
    )
    for masks in MASKS
    if masks.id in ("causal", "window9-bottom-right")
]


@pytest.mark.parametrize(
    ("options", "forward", "backward"),
    [pytest.param(*masks.values, None, None, id=masks.id) for masks in MASKS] + WITH_VARIANT,
)
@pytest.mark.parametrize("dtype", DTYPES)
def test_packed_output_and_gradients_match_torch(options, forward, backward, dtype, monkeypatch):
    pin_forward(monkeypatch, forward)
    pin_backward(monkeypatch, backward)
    q, k, v, cu_q, cu_k = packed_qkv(SEQLENS_Q, SEQLENS_K, dtype=dtype)
    assert_varlen_matches_torch(q, k, v, cu_q, cu_k, **options)


@pytest.mark.parametrize(
    ("heads", "heads_kv", "head_dim"),
    [(3, 3, 32), (4, 2, 64), (2, 1, 128)],
    ids=["mha-d32", "gqa-d64", "mqa-d128"],
)
def test_heads_and_head_sizes_match_torch(heads, heads_kv, head_dim):
    # D = 128 with gradients: the size at which dK with key_lengths failed on a GPU (contract.py)
    q, k, v, cu_q, cu_k = packed_qkv([3, 18], [20, 2], heads, heads_kv, head_dim)
    assert_varlen_matches_torch(q, k, v, cu_q, cu_k, causal="bottom_right")


@given(
    lengths=st.lists(st.tuples(st.integers(0, 20), st.integers(0, 20)), min_size=1, max_size=4),
    causal=st.sampled_from([False, True, "bottom_right"]),
    window=st.one_of(st.none(), st.integers(1, 22)),
)
@settings(max_examples=12)  # each example runs the kernels forward and backward
def test_any_lengths_match_torch(lengths, causal, window):
    seqlens_q, seqlens_k = zip(*lengths, strict=True)
    assume(sum(seqlens_q) and sum(seqlens_k))  # an empty batch: test_a_batch_without_queries_...
    torch.manual_seed(sum(seqlens_q) * 100 + sum(seqlens_k))
    window = window if causal else None  # a window needs a causal alignment
    assert_varlen_matches_torch(*packed_qkv(seqlens_q, seqlens_k), causal=causal, window=window)


@interpreter_only  # on a GPU the autotuner may tile a sequence alone differently: the sums differ in order
@pytest.mark.parametrize(
    "options", [{"causal": "bottom_right", "window": 6}, {}], ids=["window-bottom-right", "full"]
)
def test_a_packed_batch_computes_what_each_sequence_alone_does(options):
    seqlens_q, seqlens_k = [5, 20, 1], [7, 17, 9]
    q, k, v, cu_q, cu_k = packed_qkv(seqlens_q, seqlens_k)
    d_out = torch.randn_like(q)
    lengths = {"cu_seqlens_q": cu_q, "cu_seqlens_k": cu_k}
    packed = run_with_grads(qkv.flash_attention_varlen, q, k, v, d_out, **lengths, **options)
    for b in range(len(seqlens_q)):
        rows, cols = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        alone = run_with_grads(
            unpacked(qkv.flash_attention), q[rows], k[cols], v[cols], d_out[rows], **options
        )
        for name, whole, part, where in zip(
            ("output", "dq", "dk", "dv"), packed, alone, (rows, rows, cols, cols), strict=True
        ):
            assert torch.equal(whole[where], part), (b, name)


def test_queries_without_keys_give_zeros_and_zero_gradients():
    # Sequence 1 has 6 queries and no key; bottom-right, the first 4 of sequence 0's 7 queries precede its 3 keys.
    q, k, v, cu_q, cu_k = packed_qkv([7, 6, 0], [3, 0, 5])
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    out = qkv.flash_attention_varlen(q, k, v, cu_q, cu_k, causal="bottom_right")
    out.backward(torch.randn_like(out))
    none = [0, 1, 2, 3, *range(7, 13)]  # the queries that see no key
    assert torch.equal(out[none], torch.zeros_like(out[none]))
    assert torch.equal(q.grad[none], torch.zeros_like(q.grad[none]))
    assert torch.equal(k.grad[3:], torch.zeros_like(k.grad[3:]))  # sequence 2's keys: no query
    assert torch.equal(v.grad[3:], torch.zeros_like(v.grad[3:]))
    assert out[4:7].abs().sum() > 0  # the queries that see keys are not zeros
    assert k.grad[:3].abs().sum() > 0


@pytest.mark.parametrize(
    ("forward", "backward"),
    [
        pytest.param(None, None, id="default"),
        pytest.param(*BOTH.values, None, id=BOTH.id),
        pytest.param(None, *ATOMIC_DQ.values, id=ATOMIC_DQ.id),
    ],
)
def test_no_sequence_reads_another(forward, backward, monkeypatch):
    # NaN queries, keys and values in sequence 1: a read of any of them from another sequence spreads NaN;
    # with ATOMIC_DQ, an addition to another sequence's rows of dQ would too.
    pin_forward(monkeypatch, forward)
    pin_backward(monkeypatch, backward)
    seqlens_q, seqlens_k = [20, 9, 13], [18, 11, 25]
    q, k, v, cu_q, cu_k = packed_qkv(seqlens_q, seqlens_k)
    rows, cols = slice(cu_q[1], cu_q[2]), slice(cu_k[1], cu_k[2])
    poisoned = [x.clone() for x in (q, k, v)]
    for x, where in zip(poisoned, (rows, cols, cols), strict=True):
        x[where] = float("nan")
    d_out = torch.randn_like(q)
    options = {"cu_seqlens_q": cu_q, "cu_seqlens_k": cu_k, "causal": True}
    clean = run_with_grads(qkv.flash_attention_varlen, q, k, v, d_out, **options)
    dirty = run_with_grads(qkv.flash_attention_varlen, *poisoned, d_out, **options)
    others_q = [i for i in range(sum(seqlens_q)) if not cu_q[1] <= i < cu_q[2]]
    others_k = [j for j in range(sum(seqlens_k)) if not cu_k[1] <= j < cu_k[2]]
    for name, a, b, others in zip(
        ("output", "dq", "dk", "dv"),
        clean,
        dirty,
        (others_q, others_q, others_k, others_k),
        strict=True,
    ):
        assert torch.equal(a[others], b[others]), name
        assert not a[others].isnan().any(), name


def test_a_longer_max_seqlen_changes_nothing():
    # More query and key blocks than the sequences need: the extra programs exit without writing.
    q, k, v, cu_q, cu_k = packed_qkv([5, 20], [17, 3])
    with torch.no_grad():
        tight = qkv.flash_attention_varlen(q, k, v, cu_q, cu_k, causal=True)
        loose = qkv.flash_attention_varlen(
            q, k, v, cu_q, cu_k, max_seqlen_q=70, max_seqlen_k=50, causal=True
        )
    assert torch.equal(tight, loose)


def test_a_batch_without_queries_gives_an_empty_output_and_zero_gradients():
    q, k, v, cu_q, cu_k = packed_qkv([0, 0], [4, 3])
    k.requires_grad_()
    out = qkv.flash_attention_varlen(q, k, v, cu_q, cu_k, causal=True)
    assert out.shape == (0, 2, 16)
    out.sum().backward()
    assert torch.equal(k.grad, torch.zeros_like(k))


@interpreter_only
def test_bfloat16_is_refused_under_the_interpreter():
    q, k, v, cu_q, cu_k = packed_qkv([3], [3], dtype=torch.bfloat16)
    with pytest.raises(
        TypeError, match=r"torch\.bfloat16, which Triton's interpreter cannot multiply"
    ):
        qkv.flash_attention_varlen(q, k, v, cu_q, cu_k)


def test_cpu_tensors_without_the_interpreter_are_refused(monkeypatch):
    monkeypatch.setattr(contract, "interpreted", lambda: False)
    q = torch.randn(4, 1, 16, dtype=torch.float16)
    cu = torch.tensor([0, 4], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"on the CPU \(4, 1, 16\).*TRITON_INTERPRET=1"):
        qkv.flash_attention_varlen(q, q, q, cu, cu)


def test_without_triton_the_error_names_the_extra(monkeypatch):
    import qkv.kernels

    monkeypatch.setattr(qkv.kernels, "triton_installed", lambda: False)
    q = torch.randn(4, 1, 16, dtype=torch.float16)
    cu = torch.tensor([0, 4], dtype=torch.int32)
    with pytest.raises(ModuleNotFoundError, match=r"qkv\[kernel\]"):
        qkv.flash_attention_varlen(q, q, q, cu, cu)


def half(*size):
    return torch.randn(*size, dtype=torch.float16, device=DEVICE)


def lengths(*values):
    return torch.tensor(values, dtype=torch.int32, device=DEVICE)


Q, KV, CU = half(6, 2, 16), half(5, 1, 16), (lengths(0, 2, 6), lengths(0, 3, 5))
BAD_INPUTS = {
    "q-not-a-tensor": (
        ([[1.0]], KV, KV, *CU),
        {},
        TypeError,
        r"q must be a torch\.Tensor, got list",
    ),
    "q-4d": (
        (Q[None], KV, KV, *CU),
        {},
        ValueError,
        r"q must be 3-D \(total_q, H, D\), sequences packed one after another, got shape \(1, 6, 2, 16\)",
    ),
    "v-2d": (
        (Q, KV, KV[:, 0], *CU),
        {},
        ValueError,
        r"v must be 3-D \(total_k, H_kv, D\), .* got shape \(5, 16\)",
    ),
    "float32": (
        (Q.float(), KV.float(), KV.float(), *CU),
        {},
        TypeError,
        r"q has dtype torch\.float32; flash_attention_varlen takes torch\.float16 or torch\.bfloat16",
    ),
    "kv-shapes": (
        (Q, KV, half(6, 1, 16), *CU),
        {},
        ValueError,
        r"k and v must have one shape \(total_k, H_kv, D\): k \(5, 1, 16\) vs v \(6, 1, 16\)",
    ),
    "heads-do-not-divide": (
        (Q, half(5, 3, 16), half(5, 3, 16), *CU),
        {},
        ValueError,
        r"H_kv must be at least 1 and divide q's heads H .*: q \(6, 2, 16\), k \(5, 3, 16\)",
    ),
    "head-size-48": (
        (half(6, 2, 48), half(5, 1, 48), half(5, 1, 48), *CU),
        {},
        ValueError,
        r"one head size D in \(16, 32, 64, 128\): q \(6, 2, 48\)",
    ),
    "cu-int64": (
        (Q, KV, KV, CU[0].long(), CU[1]),
        {},
        TypeError,
        r"cu_seqlens_q must be int32 cumulative lengths, got dtype torch\.int64",
    ),
    "cu-2d": (
        (Q, KV, KV, CU[0], CU[1][None]),
        {},
        ValueError,
        r"cu_seqlens_k must be 1-D \(N \+ 1,\), got shape \(1, 3\)",
    ),
    "cu-not-from-0": (
        (Q, KV, KV, lengths(1, 2, 6), CU[1]),
        {},
        ValueError,
        r"cu_seqlens_q must start at 0, got \[1, 2, 6\]",
    ),
    "cu-decreasing": (
        (Q, KV, KV, CU[0], lengths(0, 4, 3, 5)),
        {},
        ValueError,
        r"cu_seqlens_k must not decrease, got cu_seqlens_k\[1\] = 4 > cu_seqlens_k\[2\] = 3",
    ),
    "cu-not-to-total": (
        (Q, KV, KV, lengths(0, 2, 5), CU[1]),
        {},
        ValueError,
        r"cu_seqlens_q must end at the number of packed tokens, 6 \(q \(6, 2, 16\)\), got 5",
    ),
    "different-n": (
        (Q, KV, KV, lengths(0, 2, 4, 6), CU[1]),
        {},
        ValueError,
        r"disagree on the number of sequences N: cu_seqlens_q \(4,\) vs cu_seqlens_k \(3,\)",
    ),
    "cu-device": (
        (Q, KV, KV, CU[0], CU[1].to("meta")),
        {},
        ValueError,
        r"cu_seqlens_k is on meta but q is on",
    ),
    "max-seqlen-short": (
        (Q, KV, KV, *CU),
        {"max_seqlen_q": 3},
        ValueError,
        r"max_seqlen_q = 3 is shorter than sequence 1, of length 4",
    ),
    "max-seqlen-float": (
        (Q, KV, KV, *CU),
        {"max_seqlen_k": 3.0},
        TypeError,
        r"max_seqlen_k must be an int, got float",
    ),
    "window-without-causal": (
        (Q, KV, KV, *CU),
        {"window": 3},
        ValueError,
        r"window=3 needs a causal alignment: pass causal=True",
    ),
    "unknown-alignment": (
        (Q, KV, KV, *CU),
        {"causal": "top_right"},
        ValueError,
        r"causal must be False, True or one of \('top_left', 'bottom_right'\), got 'top_right'",
    ),
    "scale-string": (
        (Q, KV, KV, *CU),
        {"scale": "0.5"},
        TypeError,
        r"scale must be a number or None",
    ),
}


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "message"), BAD_INPUTS.values(), ids=BAD_INPUTS.keys()
)
def test_bad_input_is_refused_with_the_values(args, kwargs, error, message):
    with pytest.raises(error, match=message):
        qkv.flash_attention_varlen(*args, **kwargs)


def test_sequences_beyond_the_grid_limit_are_refused():
    many = torch.zeros(contract.MAX_GRID_YZ + 2, dtype=torch.int32, device=DEVICE)
    q = half(0, 1, 16)
    with pytest.raises(ValueError, match=r"at most 65535 sequences .*, got 65536"):
        qkv.flash_attention_varlen(q, q, q, many, many)
