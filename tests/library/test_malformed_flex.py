"""qkv.flex fed malformed input: clear errors naming the argument, and mask functions misused named too.

A mask function is called once on index tensors, so Python's `and`, `or` and `if` cannot work in it; a
score modifier must return floating-point scores (a mask function passed in its place returns bools, which
would silently become scores of 0 and 1).
"""

from __future__ import annotations

import pytest
import torch

from qkv.flex import block_mask, flex_attention

META = "meta"  # a device with no data: stands in for another device than the CPU
Q = torch.randn(1, 2, 5, 4)


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


FLEX = {  # case -> (q, k, v, options, error, what the message must say)
    "q 3-D": (Q[0], Q, Q, {}, ValueError, r"q must be 4-D"),
    "q of ints": (Q.long(), Q, Q, {}, TypeError, r"q must be a floating-point"),
    "k of another dtype": (Q, Q.double(), Q, {}, TypeError, r"q and k disagree on dtype: q torch\.float32 vs k torch\.float64"),
    "k on another device": (Q, Q.to(META), Q, {}, ValueError, r"q and k are on different devices: q cpu vs k meta"),
    "v of another length": (Q, Q, Q[:, :, :3], {}, ValueError, r"k and v disagree on heads or length"),
    "another batch": (Q, Q.expand(2, -1, -1, -1), Q.expand(2, -1, -1, -1), {}, ValueError, r"disagree on the batch size B"),
    "fewer heads without enable_gqa": (Q, Q[:, :1], Q[:, :1], {}, ValueError, r"pass enable_gqa=True"),
    "enable_gqa a str": (Q, Q[:, :1], Q[:, :1], {"enable_gqa": "yes"}, TypeError, r"enable_gqa must be a bool"),
    "score_mod not callable": (Q, Q, Q, {"score_mod": 3}, TypeError, r"score_mod must be a function"),
    "score_mod of another shape": (Q, Q, Q, {"score_mod": lambda s, b, h, qi, ki: s[..., :1]}, ValueError, r"score_mod must return scores of the shape"),
    "score_mod returning bools": (Q, Q, Q, {"score_mod": lambda s, b, h, qi, ki: causal(b, h, qi, ki).expand(s.shape)}, TypeError, r"score_mod must return floating-point scores, got torch\.bool"),
    "score_mod returning a number": (Q, Q, Q, {"score_mod": lambda s, b, h, qi, ki: 1.0}, TypeError, r"score_mod must return a tensor, got float"),
    "score_mod of three arguments": (Q, Q, Q, {"score_mod": lambda s, b, h: s}, TypeError, r"score_mod must take 5 arguments \(score, b, h, q_idx, kv_idx\)"),
    "score_mod making +inf": (Q, Q, Q, {"score_mod": lambda s, b, h, qi, ki: s / 0.0}, ValueError, r"score_mod must return finite scores, or -inf .* into inf"),
    "score_mod making NaN": (Q, Q, Q, {"score_mod": lambda s, b, h, qi, ki: s * torch.inf * 0}, ValueError, r"score_mod must return finite scores, or -inf .* into nan"),
    "score_mod using if": (Q, Q, Q, {"score_mod": lambda s, b, h, qi, ki: s if qi > ki else -s}, TypeError, r"score_mod is called once on index tensors"),
    "block_mask a tensor": (Q, Q, Q, {"block_mask": torch.ones(5, 5, dtype=torch.bool)}, TypeError, r"block_mask must be a qkv\.flex\.BlockMask"),
    "block_mask of other sizes": (Q, Q, Q, {"block_mask": block_mask(causal, None, None, 4, 5)}, ValueError, r"block_mask was made for \(B, H, L, S\) = \(1, 1, 4, 5\)"),
    "block_mask on another device": (Q, Q, Q, {"block_mask": block_mask(causal, None, None, 5, 5, device=META)}, ValueError, r"block_mask was made on meta but q is on cpu"),
    "scale a str": (Q, Q, Q, {"scale": "1"}, TypeError, r"scale must be a number"),
}  # fmt: skip


@pytest.mark.parametrize(
    ("q", "k", "v", "options", "error", "match"), FLEX.values(), ids=FLEX.keys()
)
def test_flex_attention_refuses_malformed_input_by_name(q, k, v, options, error, match):
    with pytest.raises(error, match=match):
        flex_attention(q, k, v, **options)


BLOCK_MASK = {  # case -> (mask_fn, sizes (B, H, L, S), options, error, what the message must say)
    "mask_fn not callable": (3, (None, None, 5, 5), {}, TypeError, r"mask_fn must be a function"),
    "mask_fn returning ints": (lambda b, h, qi, ki: qi - ki, (None, None, 5, 5), {}, TypeError, r"mask_fn must return a bool tensor"),
    "mask_fn returning a bool": (lambda b, h, qi, ki: True, (None, None, 5, 5), {}, TypeError, r"mask_fn must return a bool tensor .*, got bool"),
    "mask_fn of another shape": (lambda b, h, qi, ki: torch.ones(3, 3, dtype=torch.bool), (None, None, 5, 5), {}, ValueError, r"mask_fn returned \(3, 3\)"),
    "mask_fn using and": (lambda b, h, qi, ki: (qi >= ki) and (qi < 3), (None, None, 5, 5), {}, TypeError, r"mask_fn is called once on index tensors, so it cannot use Python's and"),
    "mask_fn of two arguments": (lambda q_idx, kv_idx: q_idx >= kv_idx, (None, None, 5, 5), {}, TypeError, r"mask_fn must take 4 arguments \(b, h, q_idx, kv_idx\)"),
    "mask_fn indexing past a tensor": (lambda b, h, qi, ki: torch.ones(3, dtype=torch.bool)[qi], (None, None, 5, 5), {}, ValueError, r"mask_fn indexed past a tensor it reads .* q_idx in \[0, 5\)"),
    "device unknown to torch": (causal, (None, None, 5, 5), {"device": "gpu"}, ValueError, r"device must name a device torch knows, got 'gpu'"),
    "device a float": (causal, (None, None, 5, 5), {"device": 0.0}, TypeError, r"device must be a torch\.device, a str .* got float"),
    "L 0": (causal, (None, None, 0, 5), {}, ValueError, r"L must be positive"),
    "S a float": (causal, (None, None, 5, 5.0), {}, TypeError, r"S must be an int"),
    "B 0": (causal, (0, None, 5, 5), {}, ValueError, r"B must be positive"),
    "block_size 0": (causal, (None, None, 5, 5), {"block_size": 0}, ValueError, r"block_size must be positive"),
    "block_size a bool": (causal, (None, None, 5, 5), {"block_size": True}, TypeError, r"block_size must be an int"),
}  # fmt: skip


@pytest.mark.parametrize(
    ("mask_fn", "sizes", "options", "error", "match"), BLOCK_MASK.values(), ids=BLOCK_MASK.keys()
)
def test_block_mask_refuses_malformed_input_by_name(mask_fn, sizes, options, error, match):
    with pytest.raises(error, match=match):
        block_mask(mask_fn, *sizes, **options)


def test_a_score_mod_may_make_inf_where_the_block_mask_drops_the_pair():
    def infinite_future(score, b, h, q_idx, kv_idx):
        return torch.where(q_idx >= kv_idx, score, torch.inf)

    mask = block_mask(causal, None, None, 5, 5, block_size=2)
    out = flex_attention(Q, Q, Q, score_mod=infinite_future, block_mask=mask)
    torch.testing.assert_close(out, flex_attention(Q, Q, Q, block_mask=mask), rtol=0, atol=0)


def test_one_query_and_one_key_attend_to_that_key():
    q, k, v = torch.randn(3, 1, 2, 1, 4).unbind(0)
    torch.testing.assert_close(flex_attention(q, k, v), v, rtol=0, atol=1e-6)
