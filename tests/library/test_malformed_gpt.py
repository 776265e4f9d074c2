"""qkv.gpt fed malformed input: clear errors naming the argument; sampling safe in low precision.

A float16 model's logits divided by a tiny temperature overflow float16; the probabilities must still be
those of the limit (all mass on the most probable token), never NaN, and `generate` must then give the
greedy tokens.
"""

from __future__ import annotations

import math

import pytest
import torch

from qkv.gpt import GPT, GPTConfig, generate, next_token_probabilities

META = "meta"  # a device with no data: stands in for another device than the CPU
LOGITS = torch.tensor(
    [[0.0, 2.0, 1.0, -1.0], [3.0, -2.0, 0.5, 2.5]]
)  # (2, V = 4), distinct per row


def small_model(dtype=torch.float64, weight_scale=1.0):
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=16, width=16, layers=1, heads=2, context=12)).to(dtype).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(weight_scale)  # larger logits: sampling at a low temperature is sharper
    return model


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("temperature", [1e-4, 1e-30, 1e-300])  # 1e-300 is 0 in float32
def test_a_tiny_temperature_puts_all_mass_on_the_top_token_in_any_dtype(dtype, temperature):
    probs = next_token_probabilities(LOGITS.to(dtype), temperature=temperature)
    assert probs.dtype == dtype
    expected = torch.tensor([[0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]], dtype=dtype)
    torch.testing.assert_close(probs, expected, rtol=0, atol=0)


@pytest.mark.parametrize("filters", [{"top_p": 0.9}, {"top_k": 2}, {"min_p": 0.5}], ids=str)
def test_float16_filters_at_a_low_temperature_stay_finite(filters):
    probs = next_token_probabilities(LOGITS.half(), temperature=1e-3, **filters)
    assert torch.isfinite(probs).all()
    assert probs.argmax(-1).tolist() == [1, 0]


def test_float16_probabilities_are_the_float64_softmax_to_float16_precision():
    logits = torch.randn(3, 16).half() * 8
    probs = next_token_probabilities(logits, temperature=0.05)
    expected = torch.softmax(logits.double() / 0.05, dim=-1)
    torch.testing.assert_close(probs.double(), expected, rtol=0, atol=1e-3)


def test_tokens_ruled_out_by_minus_infinity_get_no_mass():
    probs = next_token_probabilities(torch.tensor([[0.0, -math.inf, 1.0]]), temperature=1e-6)
    torch.testing.assert_close(probs, torch.tensor([[0.0, 0.0, 1.0]]), rtol=0, atol=0)


NEXT_TOKEN = {  # case -> (logits, options, error, what the message must say)
    "logits with NaN": (torch.tensor([[0.0, math.nan]]), {}, ValueError, r"logits must hold no NaN or \+inf"),
    "logits with +inf": (torch.tensor([[0.0, math.inf]]), {}, ValueError, r"logits must hold no NaN or \+inf"),
    "a row all -inf": (torch.full((2, 3), -math.inf), {}, ValueError, r"each row of logits needs a finite logit"),
    "no token": (torch.zeros(2, 0), {}, ValueError, r"logits must have a last dimension V of at least 1"),
    "integer logits": (torch.zeros(2, 3, dtype=torch.long), {}, TypeError, r"logits must be a floating-point"),
    "logits as a list": ([[0.0, 1.0]], {}, TypeError, r"logits must be a torch\.Tensor"),
    "temperature 0": (LOGITS, {"temperature": 0}, ValueError, r"temperature must be above 0, got 0"),
    "temperature below 0": (LOGITS, {"temperature": -1.0}, ValueError, r"temperature must be above 0"),
    "temperature NaN": (LOGITS, {"temperature": math.nan}, ValueError, r"temperature must be a finite number"),
    "temperature inf": (LOGITS, {"temperature": math.inf}, ValueError, r"temperature must be a finite number"),
    "temperature a str": (LOGITS, {"temperature": "1"}, TypeError, r"temperature must be a number"),
    "temperature a tensor": (LOGITS, {"temperature": torch.tensor(1.0)}, TypeError, r"temperature must be a number"),
    "top_k 0": (LOGITS, {"top_k": 0}, ValueError, r"top_k must be positive"),
    "top_k a float": (LOGITS, {"top_k": 2.0}, TypeError, r"top_k must be an int"),
    "top_k a bool": (LOGITS, {"top_k": True}, TypeError, r"top_k must be an int"),
    "top_p 0": (LOGITS, {"top_p": 0.0}, ValueError, r"top_p must be a finite number above 0"),
    "top_p above 1": (LOGITS, {"top_p": 1.5}, ValueError, r"top_p must lie in \(0, 1\]"),
    "top_p NaN": (LOGITS, {"top_p": math.nan}, ValueError, r"top_p must be a finite number"),
    "min_p below 0": (LOGITS, {"min_p": -0.1}, ValueError, r"min_p must lie in \[0, 1\]"),
    "min_p above 1": (LOGITS, {"min_p": 2}, ValueError, r"min_p must lie in \[0, 1\]"),
    "min_p NaN": (LOGITS, {"min_p": math.nan}, ValueError, r"min_p must be a finite number"),
}  # fmt: skip


@pytest.mark.parametrize(
    ("logits", "options", "error", "match"), NEXT_TOKEN.values(), ids=NEXT_TOKEN.keys()
)
def test_next_token_probabilities_refuses_malformed_input_by_name(logits, options, error, match):
    with pytest.raises(error, match=match):
        next_token_probabilities(logits, **options)


def test_generate_from_a_float16_model_at_a_tiny_temperature_is_greedy():
    model = small_model(torch.float16, weight_scale=10.0)  # logits up to about 20
    ids = torch.randint(0, 16, (2, 4))
    sampled = generate(model, ids, 5, temperature=1e-4, seed=3)
    torch.testing.assert_close(sampled, generate(model, ids, 5, temperature=0), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16], ids=str)
def test_ids_of_a_dtype_the_embedding_cannot_take_are_refused_with_the_fix(dtype):
    model, ids = small_model(), torch.randint(0, 16, (1, 3))
    with pytest.raises(
        TypeError, match=rf"ids must be int64 or int32 .*got dtype {dtype}.*ids\.long\(\)"
    ):
        model(ids.to(dtype))
    with pytest.raises(TypeError, match=r"ids must be int64 or int32"):
        generate(model, ids.to(dtype), 2)


def test_int32_ids_give_the_logits_of_int64_ids():
    model, ids = small_model(), torch.randint(0, 16, (2, 3))
    torch.testing.assert_close(model(ids.int()), model(ids), rtol=0, atol=0)


def _cache_of(model, ids):
    cache = model.new_cache()
    model(ids, cache)
    return cache


FORWARD = {  # case -> (ids, cache maker, error, what the message must say)
    "ids on another device": (torch.zeros(1, 2, dtype=torch.long, device=META), None, ValueError, r"ids is on meta"),
    "ids of bools": (torch.zeros(1, 2, dtype=torch.bool), None, TypeError, r"ids must be an integer tensor"),
    "ids past the context": (torch.zeros(1, 13, dtype=torch.long), None, ValueError, r"more than the model's context \(12\)"),
    "a cache of another batch": (torch.zeros(1, 1, dtype=torch.long), lambda m: _cache_of(m, torch.zeros(2, 2, dtype=torch.long)), ValueError, r"cache holds a batch of 2, but ids have 1"),
    "a cache of another length": (torch.zeros(1, 1, dtype=torch.long), lambda m: [], ValueError, r"cache must hold one KVCache per block"),
    "a cache of another dtype": (torch.zeros(1, 1, dtype=torch.long), lambda m: _cache_of(small_model(torch.float32), torch.zeros(1, 2, dtype=torch.long)), TypeError, r"cached key and key disagree on dtype"),
}  # fmt: skip


@pytest.mark.parametrize(("ids", "cache", "error", "match"), FORWARD.values(), ids=FORWARD.keys())
def test_forward_refuses_malformed_input_by_name(ids, cache, error, match):
    model = small_model()
    with pytest.raises(error, match=match):
        model(ids, None if cache is None else cache(model))


GENERATE = {  # case -> (arguments, error, what the message must say)
    "a model that is not a GPT": ({"model": torch.nn.Linear(2, 2)}, TypeError, r"model must be a qkv\.gpt\.GPT"),
    "max_new_tokens below 0": ({"max_new_tokens": -1}, ValueError, r"max_new_tokens must be non-negative"),
    "max_new_tokens a bool": ({"max_new_tokens": True}, TypeError, r"max_new_tokens must be an int"),
    "max_new_tokens past the context": ({"max_new_tokens": 20}, ValueError, r"max_new_tokens \(20\) is more than the model's context"),
    "temperature below 0": ({"temperature": -1}, ValueError, r"temperature must be 0 \(greedy\) or above"),
    "temperature NaN": ({"temperature": math.nan}, ValueError, r"temperature must be a finite number"),
    "top_k 0": ({"top_k": 0}, ValueError, r"top_k must be positive"),
    "top_p above 1": ({"top_p": 1.01}, ValueError, r"top_p must lie in \(0, 1\]"),
    "min_p above 1": ({"min_p": 1.5}, ValueError, r"min_p must lie in \[0, 1\]"),
    "seed below 0": ({"seed": -1}, ValueError, r"seed must be non-negative"),
    "seed a float": ({"seed": 1.5}, TypeError, r"seed must be an int"),
    "seed past 2**64": ({"seed": 2**64}, ValueError, r"seed must be below 2\*\*64, got 18446744073709551616"),
    "ids of floats": ({"ids": torch.zeros(1, 2)}, TypeError, r"ids must be an integer tensor"),
    "no ids": ({"ids": torch.zeros(1, 0, dtype=torch.long)}, ValueError, r"ids must be \(B, L\) with B, L >= 1"),
    "ids on another device": ({"ids": torch.zeros(1, 2, dtype=torch.long, device=META)}, ValueError, r"ids is on meta"),
}  # fmt: skip


@pytest.mark.parametrize(("arguments", "error", "match"), GENERATE.values(), ids=GENERATE.keys())
def test_generate_refuses_malformed_input_by_name(arguments, error, match):
    call = {"model": small_model(), "ids": torch.zeros(2, 4, dtype=torch.long), "max_new_tokens": 2}
    call |= arguments
    with pytest.raises(error, match=match):
        generate(call.pop("model"), call.pop("ids"), call.pop("max_new_tokens"), **call)


def test_config_refuses_parameters_that_are_not_finite_or_not_rules():
    with pytest.raises(ValueError, match=r"rope_base must be a finite number above 1"):
        GPTConfig(rope_base=math.nan)
    with pytest.raises(TypeError, match=r"scaling must be a dict or None, got list"):
        GPTConfig(rope_scaling=["linear"])
    with pytest.raises(ValueError, match=r"mlp_width must be positive"):
        GPTConfig(mlp_width=0)
