"""The kernels' entry points fed malformed or edge input: clear errors naming the argument, no NaN from
storage they document as unread, and key lengths outside [0, S] acting as 0 or S.

On CPU tensors through Triton's interpreter by default (float16, tiny shapes), as `test_flash.py`.
"""

from __future__ import annotations

import math

import pytest
import torch

import qkv
from qkv.kernels import flash
from tests.library.reference import (
    assert_close_to_reference,
    reference_attention,
    reference_mask,
    torch_attention,
)

DEVICE = "cpu" if flash.INTERPRETED else "cuda"
META = "meta"  # a device with no data: stands in for another device than the inputs'


def random(*shape):
    return torch.randn(*shape, dtype=torch.float16, device=DEVICE)


@pytest.mark.parametrize(
    "key_lengths",
    [[5, -3], [99, 7], [2**32, -(2**32) + 5]],  # the last wrap to 0 and 5 in int32
    ids=["negative", "beyond-S", "beyond-int32"],
)
def test_key_lengths_outside_zero_to_s_act_as_zero_or_s(key_lengths):
    q, k, v = random(2, 2, 4, 16), random(2, 2, 16, 16), random(2, 2, 16, 16)
    lengths = torch.tensor(key_lengths, device=DEVICE)
    out = qkv.flash_attention(q, k, v, key_lengths=lengths)
    kept = lengths.clamp(0, 16)
    for b in range(2):
        if kept[b] == 0:  # no key: zeros, as the docstring says
            assert torch.equal(out[b], torch.zeros_like(out[b]))
            continue
        mask = reference_mask(1, 4, 16, key_lengths=kept[b : b + 1]).to(DEVICE)
        args = (q[b : b + 1], k[b : b + 1], v[b : b + 1])
        assert_close_to_reference(
            out[b : b + 1],
            reference_attention(*args, attn_mask=mask),
            torch_attention(*args, attn_mask=mask),
        )


@pytest.mark.parametrize(
    ("key_lengths", "error", "match"),
    [
        ([3, -1], TypeError, r"key_lengths must be a tensor or None, got list"),
        (torch.tensor([3.0, 5.0]), TypeError, r"key_lengths must be an integer tensor"),
        (torch.tensor([[3, 5]]), ValueError, r"key_lengths must be \(B,\) = \(2,\)"),
        (torch.tensor([3, 5], device=META), ValueError, r"key_lengths is on meta"),
    ],
    ids=["list", "floats", "2-D", "other-device"],
)
def test_flash_attention_refuses_malformed_key_lengths_by_name(key_lengths, error, match):
    q = random(2, 2, 4, 16)
    with pytest.raises(error, match=match):
        qkv.flash_attention(q, q, q, key_lengths=key_lengths)


def paged_inputs():
    """q `(2, 2, 2, 16)`, one key-value head, pools of 6 pages of 16 tokens; sequences of 5 and 20."""
    q, key_pages, value_pages = random(2, 2, 2, 16), random(6, 1, 16, 16), random(6, 1, 16, 16)
    return q, key_pages, value_pages, torch.tensor([[0, 1, 2], [3, 4, 5]]), torch.tensor([5, 20])


def contiguous_reference(q, key_pages, value_pages, tables, lengths):
    """Each sequence's tokens read page by page, then torch's attention, bottom-right causal."""
    expected, yardstick = [], []
    for b, length in enumerate(lengths.tolist()):
        pages = tables[b, : math.ceil(length / 16)]
        keys, values = (
            x[pages].transpose(0, 1).flatten(1, 2)[:, :length] for x in (key_pages, value_pages)
        )
        mask = qkv.causal_mask(2, length, alignment="bottom_right").to(DEVICE)
        args = (q[b : b + 1], keys[None], values[None])
        expected.append(reference_attention(*args, attn_mask=mask, enable_gqa=True))
        yardstick.append(torch_attention(*args, attn_mask=mask, enable_gqa=True))
    return torch.cat(expected), torch.cat(yardstick)


@pytest.mark.parametrize("junk", [math.nan, math.inf], ids=["nan", "inf"])
def test_decode_never_reads_slots_past_a_length_or_pages_of_padding_entries(junk):
    q, key_pages, value_pages, tables, lengths = paged_inputs()
    expected, yardstick = contiguous_reference(q, key_pages, value_pages, tables, lengths)
    for pages in (key_pages, value_pages):
        pages[0, :, 5:] = junk  # sequence 0 holds 5 tokens
        pages[1:3] = junk  # and reads no other page
    tables[0, 1:] = -1  # padding entries
    out = qkv.decode_attention(q, key_pages, value_pages, lengths=lengths, block_tables=tables)
    assert_close_to_reference(out, expected, yardstick)
    torch.testing.assert_close(  # the same as paged_attention, documented as equal
        qkv.paged_attention(q, key_pages, value_pages, tables, lengths), out, rtol=2e-3, atol=2e-3
    )


def _table_with(row, column, page):
    tables = paged_inputs()[3]
    tables[row, column] = page
    return tables


DECODE = {  # case -> (changed arguments, error, what the message must say)
    "lengths as a list": ({"lengths": [5, 20]}, TypeError, r"lengths must be a torch\.Tensor or None, got list"),
    "a negative length": ({"lengths": torch.tensor([-1, 20])}, ValueError, r"lengths must be at least L = 2 .*got \[-1, 20\]"),
    "a length beyond the pages": ({"lengths": torch.tensor([5, 49])}, ValueError, r"at most 48 \(max_pages \* page_size\)"),
    "lengths on another device": ({"lengths": torch.tensor([5, 20], device=META)}, ValueError, r"lengths is on meta"),
    "no lengths for pages": ({"lengths": None}, ValueError, r"a paged cache \(block_tables given\) needs lengths"),
    "a page read at -1": ({"block_tables": _table_with(1, 1, -1)}, ValueError, r"block_tables reads pages outside the pool's 6: \[-1\]"),
    "block_tables of floats": ({"block_tables": paged_inputs()[3].float()}, TypeError, r"block_tables must be an integer tensor"),
    "q on another device": ({"q": random(2, 2, 2, 16).to(META)}, ValueError, r"q and k are on different devices: q meta"),
    "no query": ({"q": random(2, 2, 0, 16)}, ValueError, r"1 to 64 new queries L"),
    "no sequence": ({"q": random(0, 2, 2, 16)}, ValueError, r"q's B and H and k's first three sizes must be at least 1"),
    "no query head": ({"q": random(2, 0, 2, 16)}, ValueError, r"q's B and H .* q \(2, 0, 2, 16\)"),
    "no key head": ({"k": random(6, 0, 16, 16), "v": random(6, 0, 16, 16)}, ValueError, r"k's first three sizes .* k \(6, 0, 16, 16\)"),
    "num_splits 0": ({"num_splits": 0}, ValueError, r"num_splits must be in \[1, 128\], got 0"),
    "num_splits a bool": ({"num_splits": True}, TypeError, r"num_splits must be an int or None, got bool"),
    "scale a str": ({"scale": "x"}, TypeError, r"scale must be a number or None"),
    "scale NaN": ({"scale": math.nan}, ValueError, r"scale must be finite"),
}  # fmt: skip


@pytest.mark.parametrize(("changed", "error", "match"), DECODE.values(), ids=DECODE.keys())
def test_decode_attention_refuses_malformed_input_by_name(changed, error, match):
    q, k, v, tables, lengths = paged_inputs()
    call = {"q": q, "k": k, "v": v, "lengths": lengths, "block_tables": tables} | changed
    with pytest.raises(error, match=match):
        qkv.decode_attention(**call)


def test_decode_takes_non_contiguous_and_expanded_caches():
    q, k, v = random(2, 2, 2, 16), random(1, 1, 16, 16).expand(2, -1, -1, -1), random(2, 1, 16, 16)
    strided = v.transpose(2, 3).contiguous().transpose(2, 3)
    mask = qkv.causal_mask(2, 16, alignment="bottom_right").to(DEVICE)
    out = qkv.decode_attention(q, k, strided)
    expected = reference_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    assert_close_to_reference(
        out, expected, torch_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    )


Q, K = random(5, 2, 16), random(6, 2, 16)
CU_Q, CU_K = (torch.tensor(x, dtype=torch.int32, device=DEVICE) for x in ([0, 2, 5], [0, 4, 6]))
VARLEN = {  # case -> (changed arguments, error, what the message must say)
    "offsets that decrease": ({"cu_seqlens_q": torch.tensor([0, 4, 2, 5], dtype=torch.int32), "cu_seqlens_k": torch.tensor([0, 2, 4, 6], dtype=torch.int32)}, ValueError, r"cu_seqlens_q must not decrease"),
    "offsets from 1": ({"cu_seqlens_k": torch.tensor([1, 4, 6], dtype=torch.int32)}, ValueError, r"cu_seqlens_k must start at 0"),
    "offsets as a list": ({"cu_seqlens_q": [0, 2, 5]}, TypeError, r"cu_seqlens_q must be a torch\.Tensor"),
    "int64 offsets": ({"cu_seqlens_q": CU_Q.long()}, TypeError, r"cu_seqlens_q must be int32"),
    "offsets on another device": ({"cu_seqlens_q": CU_Q.to(META)}, ValueError, r"cu_seqlens_q is on meta"),
    "max_seqlen_q a bool": ({"max_seqlen_q": True}, TypeError, r"max_seqlen_q must be an int"),
    "max_seqlen_k below 0": ({"max_seqlen_k": -1}, ValueError, r"max_seqlen_k must be non-negative"),
    "q 4-D": ({"q": Q[None]}, ValueError, r"q must be 3-D \(total_q, H, D\)"),
}  # fmt: skip


@pytest.mark.parametrize(("changed", "error", "match"), VARLEN.values(), ids=VARLEN.keys())
def test_flash_attention_varlen_refuses_malformed_input_by_name(changed, error, match):
    call = {"q": Q, "k": K, "v": K, "cu_seqlens_q": CU_Q, "cu_seqlens_k": CU_K} | changed
    with pytest.raises(error, match=match):
        qkv.flash_attention_varlen(**call)


@pytest.mark.parametrize("window", [2**32 + 1, 2**70], ids=["past-int32", "past-int64"])
def test_a_window_past_any_int_is_no_window(window):
    q, k = random(1, 1, 4, 16), random(1, 1, 8, 16)
    expected = qkv.flash_attention(q, k, k, "bottom_right")
    out = qkv.flash_attention(q, k, k, "bottom_right", window=window)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
