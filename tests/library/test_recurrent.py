"""qkv.gated_delta_rule against transformers' Qwen3-Next reference functions, and its two forms against each other.

transformers' `torch_recurrent_gated_delta_rule` and `torch_chunk_gated_delta_rule` take (B, N, H, D) and cast
everything to float32 inside: our float64 result must match theirs to float32's tolerance. Our own chunked form
must match our token-by-token form to float64's.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from transformers.models.qwen3_next import modeling_qwen3_next as qwen3_next

import qkv

FLOAT32 = {"rtol": 1e-5, "atol": 1e-5}  # theirs is computed in float32
EXACT = {"rtol": 1e-10, "atol": 1e-10}

# (B, H, Hv, N, Dk, Dv): equal heads, grouped value heads (2 and 3 per key head), N = 1, N prime
SHAPES = [
    (1, 1, 1, 1, 4, 4),
    (2, 2, 2, 7, 8, 6),
    (2, 2, 4, 11, 8, 6),
    (1, 1, 3, 16, 4, 8),
    (2, 2, 2, 13, 16, 3),
]


def ids(table):
    """Test ids for a table of malformed inputs: the argument and the message expected."""
    return [f"{name}: {match}" for name, _, _, match in table]


def inputs(b, h, hv, n, dk, dv, *, seed=0, dtype=torch.float64):
    """Random q, k (unit norm, as the models make them), v, g <= 0, beta in [0, 1], and a state."""
    generator = torch.Generator().manual_seed(seed)

    def randn(*size):
        return torch.randn(*size, generator=generator, dtype=dtype)

    def rand(*size):
        return torch.rand(*size, generator=generator, dtype=dtype)

    return {
        "q": randn(b, h, n, dk),
        "k": F.normalize(randn(b, h, n, dk), dim=-1),
        "v": randn(b, hv, n, dv),
        "g": -2 * rand(b, hv, n),  # decays from 1 down to exp(-2)
        "beta": rand(b, hv, n),
    }, randn(b, hv, dk, dv)


def theirs(q, k, v, g, beta, *, chunk_size=None, initial_state=None):
    """transformers' reference in our layout: (B, H, N, D) -> (B, N, H, D) and back."""

    def seq_first(x):
        return x.transpose(1, 2)

    args = (seq_first(q), seq_first(k), seq_first(v), seq_first(g), seq_first(beta))
    kwargs = {"initial_state": initial_state, "output_final_state": True}
    if chunk_size is None:
        out, state = qwen3_next.torch_recurrent_gated_delta_rule(*args, **kwargs)
    else:
        out, state = qwen3_next.torch_chunk_gated_delta_rule(*args, chunk_size=chunk_size, **kwargs)
    return seq_first(out), state


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("with_state", [False, True], ids=["zeros", "initial-state"])
def test_recurrent_form_equals_transformers(shape, with_state):
    x, state = inputs(*shape)
    state = state if with_state else None
    out, final = qkv.gated_delta_rule(**x, initial_state=state, output_final_state=True)
    expected_out, expected_final = theirs(**x, initial_state=state)
    torch.testing.assert_close(out, expected_out, **FLOAT32)
    torch.testing.assert_close(final, expected_final.double(), **FLOAT32)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("chunk_size", [1, 4, 7, 64])  # 64 > N: one padded chunk
def test_chunked_form_equals_transformers(shape, chunk_size):
    x, state = inputs(*shape, seed=1)
    out, final = qkv.gated_delta_rule(
        **x, chunk_size=chunk_size, initial_state=state, output_final_state=True
    )
    expected_out, expected_final = theirs(**x, chunk_size=chunk_size, initial_state=state)
    torch.testing.assert_close(out, expected_out, **FLOAT32)
    torch.testing.assert_close(final, expected_final.double(), **FLOAT32)


@pytest.mark.parametrize("shape", [*SHAPES, (3, 2, 6, 33, 5, 7)], ids=str)
@pytest.mark.parametrize("chunk_size", [1, 2, 5, 8, 40])
def test_chunked_equals_recurrent_in_float64(shape, chunk_size):
    x, state = inputs(*shape, seed=2)
    recurrent = qkv.gated_delta_rule(**x, initial_state=state, output_final_state=True)
    chunked = qkv.gated_delta_rule(
        **x, chunk_size=chunk_size, initial_state=state, output_final_state=True
    )
    torch.testing.assert_close(chunked, recurrent, **EXACT)


@given(
    batch=st.integers(1, 2),
    heads=st.integers(1, 2),
    groups=st.integers(1, 3),
    length=st.integers(0, 12),
    key_dim=st.integers(1, 6),
    value_dim=st.integers(1, 5),
    chunk_size=st.integers(1, 8),
    seed=st.integers(0, 2**16),
)
def test_chunked_equals_recurrent_on_any_shape(
    batch, heads, groups, length, key_dim, value_dim, chunk_size, seed
):
    shape = (batch, heads, heads * groups, length, key_dim, value_dim)
    x, state = inputs(*shape, seed=seed)
    recurrent = qkv.gated_delta_rule(**x, initial_state=state, output_final_state=True)
    chunked = qkv.gated_delta_rule(
        **x, chunk_size=chunk_size, initial_state=state, output_final_state=True
    )
    torch.testing.assert_close(chunked, recurrent, **EXACT)


def test_chunked_and_recurrent_gradients_agree():
    x, state = inputs(2, 1, 2, 9, 4, 3, seed=3)
    leaves = {**x, "initial_state": state}
    grads = []
    for chunk_size in (None, 4):
        copies = {name: t.clone().requires_grad_() for name, t in leaves.items()}
        out, final = qkv.gated_delta_rule(**copies, chunk_size=chunk_size, output_final_state=True)
        (out.sin().sum() + final.cos().sum()).backward()
        grads.append({name: t.grad for name, t in copies.items()})
    torch.testing.assert_close(grads[1], grads[0], **EXACT)


@pytest.mark.parametrize("chunk_size", [None, 3])
@pytest.mark.parametrize("split", [0, 1, 4, 10, 11])
def test_two_calls_continue_as_one(chunk_size, split):
    x, state = inputs(2, 2, 4, 11, 8, 6, seed=4)
    first = {name: t[:, :, :split] for name, t in x.items()}
    second = {name: t[:, :, split:] for name, t in x.items()}
    out_1, middle = qkv.gated_delta_rule(
        **first, chunk_size=chunk_size, initial_state=state, output_final_state=True
    )
    out_2, final = qkv.gated_delta_rule(
        **second, chunk_size=chunk_size, initial_state=middle, output_final_state=True
    )
    out, expected_final = qkv.gated_delta_rule(
        **x, chunk_size=chunk_size, initial_state=state, output_final_state=True
    )
    torch.testing.assert_close(torch.cat([out_1, out_2], dim=2), out, **EXACT)
    torch.testing.assert_close(final, expected_final, **EXACT)


@pytest.mark.parametrize("chunk_size", [None, 4])
def test_empty_sequence_gives_empty_output_and_keeps_the_state(chunk_size):
    x, state = inputs(2, 2, 4, 0, 8, 6)
    out, final = qkv.gated_delta_rule(
        **x, chunk_size=chunk_size, initial_state=state, output_final_state=True
    )
    assert out.shape == (2, 4, 0, 6)
    assert torch.equal(final, state)
    _, zeros = qkv.gated_delta_rule(**x, chunk_size=chunk_size, output_final_state=True)
    assert torch.equal(zeros, torch.zeros(2, 4, 8, 6, dtype=torch.float64))


@pytest.mark.parametrize("chunk_size", [None, 4])
def test_no_final_state_unless_asked(chunk_size):
    x, _ = inputs(1, 1, 1, 5, 4, 4)
    out, state = qkv.gated_delta_rule(**x, chunk_size=chunk_size)
    assert state is None
    assert out.shape == (1, 1, 5, 4)


@pytest.mark.parametrize("chunk_size", [None, 2])
def test_beta_zero_and_no_decay_only_read_the_initial_state(chunk_size):
    x, state = inputs(2, 1, 2, 5, 4, 3)
    x["g"], x["beta"] = torch.zeros_like(x["g"]), torch.zeros_like(x["beta"])
    out, final = qkv.gated_delta_rule(
        **x, chunk_size=chunk_size, initial_state=state, output_final_state=True
    )
    q = x["q"].repeat_interleave(2, dim=1) / math.sqrt(4)  # each key head serves 2 value heads
    torch.testing.assert_close(out, q @ state, **EXACT)  # o_t = S_0^T q_t
    torch.testing.assert_close(final, state, **EXACT)


@pytest.mark.parametrize("chunk_size", [None, 3])
def test_beta_one_makes_the_state_recall_the_last_value_written(chunk_size):
    x, state = inputs(1, 1, 1, 6, 8, 5, seed=5)
    x["beta"] = torch.ones_like(x["beta"])
    _, final = qkv.gated_delta_rule(
        **x, chunk_size=chunk_size, initial_state=state, output_final_state=True
    )
    last_key, last_value = x["k"][0, 0, -1], x["v"][0, 0, -1]  # unit key
    torch.testing.assert_close(last_key @ final[0, 0], last_value, **EXACT)  # S^T k = v


def test_scale_multiplies_the_queries():
    x, state = inputs(2, 2, 4, 6, 8, 5)
    scaled = qkv.gated_delta_rule(**x, initial_state=state, scale=0.3)[0]
    x["q"] = x["q"] * 0.3 * math.sqrt(8)  # the default scale is 1 / sqrt(Dk)
    torch.testing.assert_close(scaled, qkv.gated_delta_rule(**x, initial_state=state)[0], **EXACT)


@pytest.mark.parametrize("chunk_size", [None, 4])
def test_bfloat16_inputs_give_bfloat16_output_and_a_float32_state(chunk_size):
    x, state = inputs(1, 2, 2, 9, 8, 4, seed=6)
    low = {name: t.bfloat16() for name, t in x.items()}
    out, final = qkv.gated_delta_rule(
        **low, chunk_size=chunk_size, initial_state=state.float(), output_final_state=True
    )
    assert (out.dtype, final.dtype) == (torch.bfloat16, torch.float32)
    exact = {name: t.double() for name, t in low.items()}
    expected_out, expected_final = qkv.gated_delta_rule(
        **exact, initial_state=state.float().double(), output_final_state=True
    )
    torch.testing.assert_close(out.double(), expected_out, rtol=1.6e-2, atol=1e-2)
    torch.testing.assert_close(final.double(), expected_final, rtol=1e-5, atol=1e-5)


def spoil(name, value):
    """A well-formed call with one argument replaced."""
    x, state = inputs(2, 2, 4, 5, 8, 6)
    kwargs = {**x, "initial_state": state, "chunk_size": 2, "output_final_state": True}
    kwargs[name] = value(kwargs[name]) if callable(value) else value
    return kwargs


BAD = [
    ("q", lambda q: q[0], ValueError, r"q must be 4-D"),
    ("q", lambda q: q.float(), TypeError, r"q and k disagree on dtype"),
    ("k", lambda k: k[:, :, :4], ValueError, r"q and k must have the same shape"),
    ("v", lambda v: v[:, :, :4], ValueError, r"v must be \(B, Hv, N, Dv\)"),
    ("v", lambda v: v[:1], ValueError, r"v must be \(B, Hv, N, Dv\)"),
    ("v", lambda v: v[:, :3], ValueError, r"v's heads must be a multiple of q's"),
    ("v", [1.0], TypeError, r"v must be a torch.Tensor"),
    ("g", lambda g: g.abs(), ValueError, r"g is the log of a decay: .* <= 0"),
    ("g", lambda g: g.index_fill(2, torch.tensor([1]), -math.inf), ValueError, r"g .* finite"),
    ("g", lambda g: g.index_fill(2, torch.tensor([1]), math.nan), ValueError, r"g .* finite"),
    ("g", lambda g: g[:, :2], ValueError, r"g must be \(B, Hv, N\)"),
    ("g", lambda g: g.float(), TypeError, r"q and g disagree on dtype"),
    ("beta", lambda b: b + 1.5, ValueError, r"beta must lie in \[0, 1\]"),
    ("beta", lambda b: -b - 0.1, ValueError, r"beta must lie in \[0, 1\]"),
    ("beta", lambda b: b[..., :4], ValueError, r"beta must be \(B, Hv, N\)"),
    ("beta", lambda b: b.long(), TypeError, r"beta must be a floating-point"),
    ("initial_state", lambda s: s[:, :2], ValueError, r"initial_state must be \(B, Hv, Dk, Dv\)"),
    ("initial_state", lambda s: s.float(), TypeError, r"initial_state must have the state's dtype"),
    ("chunk_size", 0, ValueError, r"chunk_size must be positive"),
    ("chunk_size", 2.0, TypeError, r"chunk_size must be an int"),
    ("scale", "0.5", TypeError, r"scale must be a number"),
    ("output_final_state", 1, TypeError, r"output_final_state must be a bool"),
]


@pytest.mark.parametrize(("name", "value", "error", "match"), BAD, ids=ids(BAD))
def test_malformed_input_is_refused_naming_the_argument(name, value, error, match):
    with pytest.raises(error, match=match):
        qkv.gated_delta_rule(**spoil(name, value))
