"""qkv.attention and qkv.select_backend: the one dispatch point, its masks, and auto's measured rule."""

import json
import logging

import numpy as np
import pytest
import torch

import qkv
from qkv import dispatch
from qkv.kernels import contract, flash
from qkv.masks import Mask
from tests.library.reference import reference_attention, reference_mask

KERNEL_DEVICE = "cpu" if flash.INTERPRETED else "cuda"  # where the triton backend can run here


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


MASK_OPTIONS = [
    pytest.param({"is_causal": "top_left"}, id="top-left"),
    pytest.param({"is_causal": "bottom_right"}, id="bottom-right"),
    pytest.param({"is_causal": True, "window": 3}, id="window3"),
    pytest.param({"is_causal": "bottom_right", "window": 4}, id="window4-bottom-right"),
    pytest.param({"key_lengths": [7, 0]}, id="key-lengths"),
    pytest.param(
        {"is_causal": "bottom_right", "key_lengths": [2, 9]}, id="key-lengths-bottom-right"
    ),
]


@pytest.mark.parametrize("backend", ["auto", "torch", "reference", "triton"])
@pytest.mark.parametrize("options", MASK_OPTIONS)
@pytest.mark.parametrize("heads_kv", [4, 2], ids=["mha", "gqa"])
def test_mask_options_give_the_masked_attention(backend, options, heads_kv):
    kernel = backend == "triton"  # it takes half precision, on its device
    dtype, device = (torch.float16, KERNEL_DEVICE) if kernel else (torch.float32, "cpu")
    q = torch.randn(2, 4, 9, 16, dtype=dtype, device=device)
    k, v = (torch.randn(2, heads_kv, 7, 16, dtype=dtype, device=device) for _ in range(2))
    if "key_lengths" in options:
        options = options | {"key_lengths": torch.tensor(options["key_lengths"], device=device)}
    causal, window = options.get("is_causal", False), options.get("window")
    mask = reference_mask(2, 9, 7, causal, window, options.get("key_lengths")).to(device)
    expected = reference_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    out = qkv.attention(q, k, v, backend=backend, enable_gqa=True, **options)
    assert out.dtype == dtype
    tolerance = {"rtol": 0, "atol": 2e-3} if kernel else {"rtol": 1e-5, "atol": 1e-6}
    torch.testing.assert_close(out.double(), expected, **tolerance)


H100 = "NVIDIA H100 80GB HBM3"


def measured(seqlen_k, triton_ms, torch_ms, device_name=H100, **kind):
    """One case of the measured table, of the kind of a plain fp16 D=64 forward call unless told."""
    fields = {"dtype": "float16", "head_dim": 64, "causal": "none", "window": False}
    fields |= {"key_lengths": False, "grouped": False, "mode": "forward"} | kind
    lengths = {"seqlen_q": seqlen_k, "seqlen_k": seqlen_k}
    return {
        "device_name": device_name,
        **fields,
        **lengths,
        "triton_ms": triton_ms,
        "torch_ms": torch_ms,
    }


@pytest.fixture
def on_an_h100(monkeypatch):
    """Pretend meta tensors live on an H100 and install a measured table: returns the list to fill."""
    cases = []
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    monkeypatch.setattr(dispatch, "_device_name", lambda device: H100)
    monkeypatch.setattr(dispatch, "_measurements", lambda: cases)
    return cases


def meta(*size, dtype=torch.float16):
    return torch.empty(*size, dtype=dtype, device="meta")


def test_auto_picks_torch_where_nothing_was_measured(on_an_h100):
    q = meta(1, 2, 1024, 64)
    assert qkv.select_backend(q, q, q) == "torch"
    on_an_h100.append(measured(1024, triton_ms=1.0, torch_ms=2.0, device_name="NVIDIA A100"))
    on_an_h100.append(measured(1024, triton_ms=1.0, torch_ms=2.0, causal="top_left"))
    assert qkv.select_backend(q, q, q) == "torch"  # another GPU model, another mask
    assert qkv.select_backend(q, q, q, is_causal=True) == "triton"


def test_auto_follows_the_nearest_measured_case(on_an_h100):
    on_an_h100 += [measured(1024, 1.0, 2.0), measured(65536, 9.0, 8.0)]
    for seqlen, expected in [(512, "triton"), (4096, "triton"), (16384, "torch"), (10**6, "torch")]:
        q = meta(1, 2, seqlen, 64)
        assert qkv.select_backend(q, q, q) == expected, seqlen


def test_auto_compares_forward_and_backward_apart(on_an_h100):
    on_an_h100 += [measured(1024, 1.0, 2.0), measured(1024, 3.0, 2.0, mode="forward+backward")]
    q = meta(1, 2, 1024, 64)
    assert qkv.select_backend(q, q, q) == "triton"
    trained = q.requires_grad_()
    assert qkv.select_backend(trained, q, q) == "torch"
    with torch.no_grad():
        assert qkv.select_backend(trained, q, q) == "triton"


def test_auto_picks_torch_for_what_the_kernels_cannot_take(on_an_h100):
    on_an_h100 += [
        measured(4, 1.0, 2.0, head_dim=d, dtype=t) for d in (48, 64) for t in ("float32",)
    ]
    on_an_h100.append(measured(4, 1.0, 2.0))
    q = meta(1, 2, 4, 64)
    assert qkv.select_backend(q, q, q) == "triton"
    assert qkv.select_backend(q, q, q, attn_mask=meta(4, 4, dtype=torch.bool)) == "torch"
    assert qkv.select_backend(q, q, q, dropout_p=0.1) == "torch"
    assert qkv.select_backend(q.float(), q.float(), q.float()) == "torch"
    assert qkv.select_backend(q[..., :48], q[..., :48], q[..., :48]) == "torch"
    key = q[0, :1, :2]  # (1, 2, 64): a 3-D key that broadcasts, its first two sizes those of query
    assert qkv.select_backend(q, key, key) == "torch"


def test_call_kind_names_what_auto_compares():
    q, k = meta(2, 8, 16, 128, dtype=torch.bfloat16), meta(2, 2, 4096, 128, dtype=torch.bfloat16)
    mask = Mask(alignment="bottom_right", window=1024, key_lengths=torch.tensor([1, 2]))
    kind = dispatch.call_kind(q, k, mask, backward=False)
    assert kind == {
        "dtype": "bfloat16",
        "head_dim": 128,
        "causal": "bottom_right",
        "window": True,
        "key_lengths": True,
        "grouped": True,
        "mode": "forward",
    }
    square = dispatch.call_kind(q, q, Mask(alignment="bottom_right"), backward=True)
    assert square["causal"] == "top_left"  # the same mask when L == S
    assert square["mode"] == "forward+backward"


def test_shipped_measurements_are_well_formed():
    table = json.loads(
        (dispatch.importlib.resources.files("qkv.kernels") / "measured.json").read_text()
    )
    fields = set(measured(1, 1.0, 1.0))
    for case in table["cases"]:
        assert set(case) >= fields, case
    assert dispatch._measurements() == table["cases"]


def test_choice_is_logged(caplog):
    q = torch.randn(1, 2, 4, 8)
    with caplog.at_level(logging.DEBUG, logger="qkv"):
        qkv.attention(q, q, q, backend="reference")
    assert "reference backend" in caplog.text


def test_unknown_backend_is_rejected():
    q = torch.randn(1, 2, 4, 8)
    with pytest.raises(ValueError, match=r"backend must be one of .* got 'cuda'"):
        qkv.attention(q, q, q, backend="cuda")


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({}, TypeError, r"q has dtype torch\.float32"),
        (
            {"attn_mask": torch.ones(4, 4, dtype=torch.bool)},
            ValueError,
            r"the kernels take no attn_mask",
        ),
        ({"dropout_p": 0.5}, ValueError, r"the kernels have no dropout, got dropout_p=0\.5"),
    ],
    ids=["float32", "attn-mask", "dropout"],
)
def test_triton_refuses_what_it_cannot_take(kwargs, error, message):
    q = torch.randn(1, 2, 4, 16, device=KERNEL_DEVICE)
    q = q if not kwargs else q.half()
    kwargs = {
        name: value.to(q.device) if torch.is_tensor(value) else value
        for name, value in kwargs.items()
    }
    with pytest.raises(error, match=r"the triton backend cannot take these inputs: " + message):
        qkv.attention(q, q, q, backend="triton", **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"is_causal": "lower_right"}, ValueError, r"is_causal must be False, True or one of"),
        ({"window": 2}, ValueError, r"window=2 needs a causal alignment: pass is_causal=True"),
        ({"is_causal": True, "window": -1}, ValueError, r"window must be at least 1, got -1"),
        ({"key_lengths": torch.tensor([1.5, 2.0])}, TypeError, r"integer tensor, got dtype"),
        ({"key_lengths": torch.tensor([4])}, ValueError, r"key_lengths must be \(B,\) = \(2,\)"),
        (
            {"key_lengths": torch.tensor([4, 4]), "attn_mask": torch.ones(4, 4, dtype=torch.bool)},
            ValueError,
            r"pass either attn_mask or key_lengths, not both",
        ),
    ],
    ids=[
        "alignment",
        "window-without-causal",
        "window-below-1",
        "float-lengths",
        "lengths-shape",
        "both",
    ],
)
def test_mask_options_are_checked_for_every_backend(kwargs, error, message):
    q = torch.randn(2, 3, 4, 16)
    for backend in ("torch", "reference"):
        with pytest.raises(error, match=message):
            qkv.attention(q, q, q, backend=backend, **kwargs)


def test_key_lengths_need_batch_and_heads():
    q = torch.randn(2, 4, 16)
    with pytest.raises(ValueError, match=r"key_lengths needs 4-D \(B, H, N, E\) query and key"):
        qkv.attention(q, q, q, key_lengths=torch.tensor([4, 4]))


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


def test_a_mask_of_fewer_than_two_dimensions_is_refused_by_every_backend():
    # torch 2.13's kernels fail on a 1-D attn_mask with 4-D inputs (IndexError); the formula takes it
    q = torch.randn(2, 3, 4, 16)
    for mask in (torch.ones(4, dtype=torch.bool), torch.zeros(4), torch.tensor(True)):
        for backend in ("auto", "torch", "reference"):
            with pytest.raises(
                ValueError,
                match=r"attn_mask must have at least 2 dimensions \(\.\.\., L, S\), got shape \((4,)?\)",
            ):
                qkv.attention(q, q, q, attn_mask=mask, backend=backend)


@pytest.mark.parametrize("scale", [np.float32(0.3), np.float64(2.5), np.int64(2)], ids=str)
def test_every_backend_and_the_kernel_take_a_numpy_scale(scale):
    q, k, v = (
        torch.randn(1, 2, n, 16, dtype=torch.float16, device=KERNEL_DEVICE) for n in (5, 7, 7)
    )
    expected = reference_attention(q, k, v, scale=float(scale))
    outs = {
        b: qkv.attention(q, k, v, scale=scale, backend=b) for b in ("torch", "reference", "triton")
    }
    outs["flash_attention"] = qkv.flash_attention(q, k, v, scale=scale)
    for name, out in outs.items():
        torch.testing.assert_close(out.double(), expected, rtol=0, atol=4e-3, msg=name)


@pytest.mark.parametrize("scale", [np.array(0.3), torch.tensor(0.3), "0.3", True], ids=repr)
def test_every_backend_and_the_kernel_refuse_the_same_scales(scale):
    q = torch.randn(1, 2, 5, 16, dtype=torch.float16, device=KERNEL_DEVICE)
    message = rf"scale must be a number or None, got {type(scale).__name__}$"
    for backend in ("torch", "reference", "triton"):
        with pytest.raises(TypeError, match=message):
            qkv.attention(q, q, q, scale=scale, backend=backend)
    with pytest.raises(TypeError, match=message):
        qkv.flash_attention(q, q, q, scale=scale)


def test_triton_backend_runs_the_kernel():
    q, k, v = (
        torch.randn(1, 2, n, 16, dtype=torch.float16, device=KERNEL_DEVICE) for n in (5, 7, 7)
    )
    expected = reference_attention(q, k, v, is_causal=True)
    out = qkv.attention(q, k, v, is_causal=True, backend="triton")
    assert out.dtype == torch.float16
    torch.testing.assert_close(out.double(), expected, rtol=0, atol=2e-3)


def test_shipped_table_sends_masks_and_long_decoding_to_the_kernel_on_an_h100(monkeypatch):
    # What the FlashAttention post says auto does on an H100, from the table it ships (2026-11-25 run).
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    monkeypatch.setattr(dispatch, "_device_name", lambda device: H100)
    # the table is bfloat16, which the interpreter refuses
    monkeypatch.setattr(contract, "interpreted", lambda: False)

    def choice(seqlen_q, seqlen_k, heads_kv=16, trained=False, **masks):
        q = meta(4, 16, seqlen_q, 128, dtype=torch.bfloat16).requires_grad_(trained)
        k = meta(4, heads_kv, seqlen_k, 128, dtype=torch.bfloat16)
        return qkv.select_backend(q, k, k, enable_gqa=heads_kv != 16, **masks)

    lengths = torch.full((4,), 1000, device="meta")
    assert choice(65536, 65536, is_causal=True, window=4096) == "triton"
    assert choice(16384, 16384, key_lengths=lengths) == "triton"
    assert (
        choice(16384, 16384, key_lengths=lengths, trained=True) == "torch"
    )  # dK: see measured.json
    assert choice(1, 65536, is_causal="bottom_right") == "triton"
    assert choice(4, 16384, is_causal="bottom_right") == "triton"
    assert choice(1, 4096, is_causal="bottom_right") == "torch"
    for trained in (False, True):
        for causal in (False, True):
            for heads_kv in (16, 4):
                assert choice(8192, 8192, heads_kv, trained, is_causal=causal) == "torch"
