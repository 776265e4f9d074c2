"""qkv_lab.gradients: the float32 reference in blocks against float64 autograd, the masks against qkv's
builders, the tests' tolerance rule, and a wrong gradient caught wherever it is."""

import pytest
import torch

import qkv
from qkv_lab import gradients
from tests.library.reference import reference_attention, reference_mask

MASKS = [
    pytest.param({}, 7, 7, id="full"),
    pytest.param({"is_causal": "top_left"}, 9, 6, id="top-left-L>S"),
    pytest.param({"is_causal": "bottom_right"}, 9, 6, id="bottom-right-L>S"),
    pytest.param({"is_causal": "bottom_right"}, 3, 11, id="bottom-right-decode"),
    pytest.param({"is_causal": "top_left", "window": 3}, 10, 10, id="window"),
    pytest.param({"is_causal": "bottom_right", "window": 2}, 4, 9, id="window-bottom-right"),
    pytest.param({"key_lengths": [9, 0]}, 5, 9, id="key-lengths"),
    pytest.param({"is_causal": "top_left", "key_lengths": [4, 12]}, 8, 8, id="causal-lengths"),
]


def options(masks, seqlen_k):
    """The masks as `qkv.attention` takes them; lengths as a tensor."""
    full = {"is_causal": False, "window": None, "key_lengths": None} | masks
    if full["key_lengths"] is not None:
        full["key_lengths"] = torch.tensor(full["key_lengths"])
    return full


@pytest.mark.parametrize(("masks", "seqlen_q", "seqlen_k"), MASKS)
def test_block_masks_are_qkvs_masks(masks, seqlen_q, seqlen_k):
    given = options(masks, seqlen_k)
    lengths = given["key_lengths"]
    expected = reference_mask(2, seqlen_q, seqlen_k, given["is_causal"], given["window"], lengths)
    offset = seqlen_k - seqlen_q if given["is_causal"] == "bottom_right" else 0
    for b in range(2):
        kept = seqlen_k if lengths is None else min(int(lengths[b]), seqlen_k)
        rows = torch.arange(seqlen_q)
        mask = gradients.block_mask(
            rows, seqlen_k, offset, bool(given["is_causal"]), given["window"], kept
        )
        assert torch.equal(mask, expected[b, 0])


@pytest.mark.parametrize(("masks", "seqlen_q", "seqlen_k"), MASKS)
@pytest.mark.parametrize("heads_kv", [4, 2], ids=["mha", "gqa"])
def test_reference_in_blocks_matches_float64_autograd(masks, seqlen_q, seqlen_k, heads_kv):
    q = torch.randn(2, 4, seqlen_q, 8)
    k, v = (torch.randn(2, heads_kv, seqlen_k, 8) for _ in range(2))
    d_out = torch.randn(2, 4, seqlen_q, 8)
    given = options(masks, seqlen_k)
    # blocks of two rows (the smallest score budget): dK and dV summed over several blocks
    blocked = gradients.reference(q, k, v, given, d_out, block_scores=1)
    mask = reference_mask(
        2, seqlen_q, seqlen_k, given["is_causal"], given["window"], given["key_lengths"]
    )
    leaves = [x.double().requires_grad_() for x in (q, k, v)]
    out = reference_attention(*leaves, attn_mask=mask, enable_gqa=heads_kv != 4)
    out = out.nan_to_num()  # torch's math path gives NaN rows where no key is kept; qkv gives zeros
    out.backward(d_out.double())
    for name, got, want in zip(
        gradients.FACTORS, blocked, (out, *(leaf.grad for leaf in leaves)), strict=True
    ):
        assert got.dtype == torch.float32, name
        torch.testing.assert_close(got.double(), want.nan_to_num(), rtol=0, atol=1e-5, msg=name)


def test_a_forward_reference_has_no_gradients():
    q, k, v = (torch.randn(1, 2, 5, 8) for _ in range(3))
    results = gradients.reference(q, k, v, options({}, 5))
    assert results.dq is results.dk is results.dv is None
    torch.testing.assert_close(
        results.output, torch.nn.functional.scaled_dot_product_attention(q, k, v)
    )


def test_errors_follow_the_tests_rule():
    zeros = torch.zeros(2, 3)
    expected = gradients.Results(zeros, zeros, zeros, zeros)
    yardstick = gradients.Results(*(zeros + 0.1 for _ in range(4)))  # torch's own error: 0.1
    actual = gradients.Results(zeros + 0.25, zeros + 0.25, zeros.clone(), zeros + torch.nan)
    found = gradients.errors(actual, expected, yardstick)
    assert found["output"][1] == pytest.approx(0.2 + 1e-5)  # twice torch's own error
    assert found["dq"][1] == pytest.approx(0.3 + 1e-5)  # three times for a gradient
    reason = gradients.failure(found)
    assert reason.startswith("differs from the float32 reference")
    assert "output 0.25 > 0.2" in reason
    assert "dv nan" in reason  # NaN fails
    assert "dq" not in reason
    assert "dk" not in reason
    assert gradients.failure({"output": (0.1, 0.2)}) is None


def test_errors_refuse_results_of_another_shape():
    results = gradients.Results(torch.zeros(2, 3))
    with pytest.raises(
        ValueError, match=r"output: shape \(3, 2\) differs from the reference's \(2, 3\)"
    ):
        gradients.errors(gradients.Results(torch.zeros(3, 2)), results, results)


class _SpoilLastKey(torch.autograd.Function):
    """Identity forward; adds 0.05 to the gradient of the last key of the last head, nothing else."""

    @staticmethod
    def forward(ctx, k):
        return k.view_as(k)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        grad[:, -1, -1] += 0.05
        return grad


def test_the_kernels_pass_and_a_wrong_dk_anywhere_fails():
    # Under the interpreter (tests/conftest.py) the kernels run on the CPU, in float16. 80 rows: past the 64
    # rows that the bench used to compare, and the spoiled key is the last one.
    q, k, v = (torch.randn(1, 2, 80, 16, dtype=torch.float16) for _ in range(3))
    given = options({"is_causal": "top_left"}, 80)
    check = gradients.Check(q, k, v, given, torch.randn_like(q))
    kernels = check.errors(
        lambda q, k, v, **masks: qkv.attention(q, k, v, backend="triton", **masks)
    )
    assert gradients.failure(kernels) is None, kernels

    def spoiled(q, k, v, **masks):
        return qkv.attention(q, _SpoilLastKey.apply(k), v, backend="triton", **masks)

    reason = gradients.failure(check.errors(spoiled))
    assert reason is not None
    assert "dk" in reason
    assert "output" not in reason
