"""qkv.attention and qkv.select_backend: the one dispatch point."""

import logging

import pytest
import torch

import qkv
from tests.reference import reference_attention


@pytest.mark.parametrize("backend", ["auto", "torch", "reference"])
@pytest.mark.parametrize(
    "kwargs", [{}, {"is_causal": True}, {"attn_mask": "bool"}], ids=["plain", "causal", "mask"]
)
def test_every_backend_computes_attention(backend, kwargs):
    q, k, v = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 7, 8), torch.randn(2, 3, 7, 4)
    if kwargs.get("attn_mask") == "bool":
        kwargs = {"attn_mask": torch.rand(5, 7) < 0.6}
    expected = reference_attention(q, k, v, **dict(kwargs))
    torch.testing.assert_close(
        qkv.attention(q, k, v, backend=backend, **kwargs).double(), expected, rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize("backend", ["auto", "torch", "reference"])
@pytest.mark.parametrize("scale", [0.0, -0.7])
def test_causal_with_a_scale_of_zero_or_below(backend, scale):
    q, k, v = (torch.randn(2, 3, n, 16) for n in (5, 7, 7))
    expected = reference_attention(q, k, v, is_causal=True, scale=scale)
    out = qkv.attention(q, k, v, is_causal=True, scale=scale, backend=backend)
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-6)


def test_auto_uses_torch_on_cpu():
    q = torch.randn(1, 2, 4, 16, dtype=torch.float16)
    assert qkv.select_backend(q, q, q) == "torch"


def test_auto_uses_triton_on_cuda_half_precision_only(monkeypatch):
    q = torch.empty(1, 2, 4, 64, dtype=torch.float16, device="meta")
    assert qkv.select_backend(q, q, q) == "torch"
    # pretend the tensors live on a GPU: select_backend looks only at dtype, shape, masks and .is_cuda
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    assert qkv.select_backend(q, q, q) == "triton"
    assert (
        qkv.select_backend(q, q, q, attn_mask=torch.ones(4, 4, dtype=torch.bool, device="meta"))
        == "torch"
    )
    assert qkv.select_backend(q, q, q, dropout_p=0.1) == "torch"
    assert qkv.select_backend(q.float(), q.float(), q.float()) == "torch"
    assert qkv.select_backend(q[..., :48], q[..., :48], q[..., :48]) == "torch"
    key = q[0, :1, :2]  # (1, 2, 64): a 3-D key that broadcasts, its first two sizes those of query
    assert qkv.select_backend(q, key, key) == "torch"


def test_choice_is_logged(caplog):
    q = torch.randn(1, 2, 4, 8)
    with caplog.at_level(logging.DEBUG, logger="qkv"):
        qkv.attention(q, q, q, backend="reference")
    assert "reference backend" in caplog.text


def test_unknown_backend_is_rejected():
    q = torch.randn(1, 2, 4, 8)
    with pytest.raises(ValueError, match=r"backend must be one of .* got 'cuda'"):
        qkv.attention(q, q, q, backend="cuda")


def test_triton_refuses_what_it_cannot_take():
    q = torch.randn(1, 2, 4, 8)
    with pytest.raises(
        ValueError,
        match=r"the triton backend needs fp16/bf16 .* got query \(1, 2, 4, 8\) torch.float32",
    ):
        qkv.attention(q, q, q, backend="triton")


def test_bad_input_is_checked_before_dispatch():
    with pytest.raises(ValueError, match=r"key and value disagree"):
        qkv.attention(
            torch.randn(1, 4, 8), torch.randn(1, 5, 8), torch.randn(1, 6, 8), backend="torch"
        )


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        (([1.0], [1.0], [1.0]), TypeError, r"query must be a torch.Tensor, got list"),
        (
            (torch.randn(1, 4, 8), torch.randn(1, 5, 8), torch.randn(1, 6, 8)),
            ValueError,
            r"key and value disagree on the number of keys S",
        ),
    ],
    ids=["not-tensors", "lengths"],
)
def test_select_backend_checks_its_inputs(args, error, message):
    with pytest.raises(error, match=message):
        qkv.select_backend(*args)


def test_triton_backend_runs_the_kernel_under_the_interpreter():
    q, k, v = (torch.randn(1, 2, n, 16, dtype=torch.float16) for n in (5, 7, 7))
    expected = reference_attention(q, k, v, is_causal=True)
    out = qkv.attention(q, k, v, is_causal=True, backend="triton")
    assert out.dtype == torch.float16
    torch.testing.assert_close(out.double(), expected, rtol=0, atol=2e-3)
