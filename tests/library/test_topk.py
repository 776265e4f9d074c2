"""qkv.indexer_scores against transformers' DeepSeek-V3.2 indexer; qkv.topk_attention against dense attention.

`DeepseekV32Indexer` returns only the indices of its top-k keys (it scores in float32): we check that the keys
it selects are the keys of highest score under `qkv.indexer_scores`, fed the queries, keys and head weights it
computed. `topk_attention` must equal torch's dense attention (float64, math backend) under the mask that its
indices make, a mask the tests build themselves, position by position.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from transformers import DeepseekV32Config
from transformers.models.deepseek_v32.modeling_deepseek_v32 import DeepseekV32Indexer

import qkv
from tests.library.reference import reference_attention

EXACT = {"rtol": 1e-10, "atol": 1e-10}
FLOAT32 = {"rtol": 1e-5, "atol": 1e-5}


def ids(table):
    """Test ids for a table of malformed inputs: the argument and the message expected."""
    return [f"{name}: {match}" for name, _, _, match in table]


def randn(*size, dtype=torch.float64):
    return torch.randn(*size, dtype=dtype)


def mask_of(indices, num_keys):
    """The keep mask `(B, 1, L, S)` that `indices (B, L, K)` make, one position at a time."""
    batch, length, _ = indices.shape
    mask = torch.zeros(batch, 1, length, num_keys, dtype=torch.bool)
    for b in range(batch):
        for row in range(length):
            for key in indices[b, row].tolist():
                if key != -1:
                    mask[b, 0, row, key] = True
    return mask


def random_indices(batch, length, num_keys, slots, *, empty=0.0, seed=0):
    """Distinct keys per query, in random order, with about `empty` of the slots set to -1."""
    generator = torch.Generator().manual_seed(seed)
    chosen = torch.rand(batch, length, num_keys, generator=generator).argsort(-1)[..., :slots]
    holes = torch.rand(chosen.shape, generator=generator) < empty
    return chosen.masked_fill(holes, -1)


# --- the indexer -------------------------------------------------------------------------------------------


def deepseek_indexer(heads=4, head_dim=16, top_k=5):
    config = DeepseekV32Config(
        hidden_size=32,
        index_n_heads=heads,
        index_head_dim=head_dim,
        index_topk=top_k,
        qk_rope_head_dim=8,
        q_lora_rank=12,
        kv_lora_rank=8,
        qk_nope_head_dim=8,
        v_head_dim=8,
        num_attention_heads=4,
    )
    return DeepseekV32Indexer(config, layer_idx=0).eval()


def run_deepseek_indexer(indexer, hidden, q_resid, mask):
    """The indexer's top-k indices, and the q `(B, H, L, D)`, k `(B, S, D)` and weights `(B, L, H)` it used.

    RoPE is given as the identity (cos 1, sin 0), so that its queries are `wq_b`'s output and its keys
    `k_norm`'s: what it scores, we can read off with hooks. Its head weights are `weights_proj`'s output
    times `H^-0.5`, as its forward computes them.
    """
    seen = {}
    hooks = [
        getattr(indexer, name).register_forward_hook(
            lambda module, args, out, name=name: seen.__setitem__(name, out)
        )
        for name in ("wq_b", "k_norm", "weights_proj")
    ]
    batch, length, _ = hidden.shape
    identity = (torch.ones(batch, length, 8), torch.zeros(batch, length, 8))
    indices = indexer(hidden, q_resid, identity, mask, position_ids=None)
    for hook in hooks:
        hook.remove()
    heads, head_dim = indexer.n_heads, indexer.head_dim
    q = seen["wq_b"].view(batch, length, heads, head_dim).transpose(1, 2)  # (B, H, L, D)
    weights = seen["weights_proj"] * heads**-0.5  # (B, L, H)
    return indices, q, seen["k_norm"], weights


@pytest.mark.parametrize("top_k", [1, 5, 12, 20])  # 20 > S: every key, masked ones included
def test_deepseek_indexer_selects_the_keys_of_highest_score(top_k):
    indexer = deepseek_indexer(top_k=top_k)
    batch, length = 2, 12
    hidden, q_resid = torch.randn(batch, length, 32), torch.randn(batch, length, 12)
    causal = qkv.causal_mask(length, length).expand(batch, length, length)  # (B, L, S)
    theirs, q, k, weights = run_deepseek_indexer(indexer, hidden, q_resid, causal)

    scores = qkv.indexer_scores(q.double(), k.double(), weights.double(), mask=causal)
    ours = qkv.topk_indices(scores, top_k)
    kept = min(top_k, length)
    assert theirs.shape == (batch, length, kept)
    # the scores of the keys it selected are the top-k scores (a comparison that ties cannot upset)
    selected = scores.gather(-1, theirs.long()).sort(dim=-1, descending=True).values
    torch.testing.assert_close(selected, scores.topk(kept, dim=-1).values, **FLOAT32)
    # and where the scores have no near-tie at the cut, the same keys, with -1 for the masked ones
    allowed = theirs.long().masked_fill(selected.isinf(), -1)  # selected is sorted as theirs is
    for b in range(batch):
        for row in range(length):
            ranked = scores[b, row].sort(descending=True).values
            if kept < length and (ranked[kept - 1] - ranked[kept]).abs() < 1e-4:
                continue
            assert set(ours[b, row, :kept].tolist()) == set(allowed[b, row].tolist()), (b, row)


def test_indexer_scores_are_the_weighted_sum_of_relus():
    q, k, weights = randn(2, 3, 5, 4), randn(2, 7, 4), randn(2, 5, 3)
    scores = qkv.indexer_scores(q, k, weights, scale=0.7)
    expected = torch.zeros(2, 5, 7, dtype=torch.float64)
    for b in range(2):
        for row in range(5):
            for key in range(7):
                for h in range(3):
                    dot = 0.7 * torch.dot(q[b, h, row], k[b, key])
                    expected[b, row, key] += weights[b, row, h] * torch.relu(dot)
    torch.testing.assert_close(scores, expected, **EXACT)
    default = qkv.indexer_scores(q, k, weights)  # scale 1 / sqrt(D) = 1 / 2
    torch.testing.assert_close(default, qkv.indexer_scores(q, k, weights, scale=0.5), **EXACT)


def test_indexer_mask_gives_minus_infinity_where_false():
    q, k, weights = randn(2, 2, 4, 8), randn(2, 6, 8), randn(2, 4, 2)
    mask = torch.rand(2, 4, 6) < 0.5
    scores = qkv.indexer_scores(q, k, weights, mask=mask)
    assert torch.equal(scores.isneginf(), ~mask)
    torch.testing.assert_close(scores[mask], qkv.indexer_scores(q, k, weights)[mask], **EXACT)
    square = qkv.indexer_scores(q, k, weights, mask=qkv.causal_mask(4, 6))  # (L, S) broadcasts
    assert torch.equal(square.isneginf()[0], ~qkv.causal_mask(4, 6))


def test_half_precision_scores_in_float32():
    q, k, weights = randn(1, 2, 3, 8), randn(1, 5, 8), randn(1, 3, 2)
    scores = qkv.indexer_scores(q.bfloat16(), k.bfloat16(), weights.bfloat16())
    assert scores.dtype == torch.float32
    exact = qkv.indexer_scores(
        q.bfloat16().double(), k.bfloat16().double(), weights.bfloat16().double()
    )
    torch.testing.assert_close(scores.double(), exact, **FLOAT32)


# --- choosing the keys -------------------------------------------------------------------------------------


def test_topk_indices_mark_missing_keys_with_minus_one():
    scores = torch.tensor(
        [
            [3.0, 1.0, 2.0, 0.0],
            [-torch.inf, 5.0, -torch.inf, -torch.inf],
            [-torch.inf] * 4,
        ]
    )
    assert qkv.topk_indices(scores, 2).tolist() == [[0, 2], [1, -1], [-1, -1]]
    assert qkv.topk_indices(scores, 6).tolist() == [  # S < top_k: the rest is -1
        [0, 2, 1, 3, -1, -1],
        [1, -1, -1, -1, -1, -1],
        [-1] * 6,
    ]
    assert qkv.topk_indices(scores, 0).shape == (3, 0)


def test_topk_mask_marks_the_selected_keys():
    indices = random_indices(2, 5, 9, 4, empty=0.3)
    assert torch.equal(qkv.topk_mask(indices, 9), mask_of(indices, 9))
    assert torch.equal(qkv.topk_mask(indices.int(), 9), mask_of(indices, 9))


# --- attention over the selected keys ----------------------------------------------------------------------

# (B, H, Hk, L, S, K, empty): MHA, GQA (2 and 4 query heads per key head), L != S both ways, K = S (dense),
# K = 1, many empty slots (some rows with no key at all)
CASES = [
    (2, 2, 2, 6, 6, 3, 0.0),
    (2, 4, 2, 5, 9, 4, 0.0),
    (1, 4, 1, 7, 3, 2, 0.0),
    (2, 2, 1, 4, 4, 4, 0.0),
    (3, 2, 2, 6, 8, 1, 0.0),
    (2, 4, 2, 6, 10, 3, 0.5),
    (1, 2, 1, 8, 5, 2, 0.9),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_topk_attention_equals_dense_attention_under_its_mask(case):
    batch, heads, key_heads, length, num_keys, slots, empty = case
    q, k, v = (
        randn(batch, heads, length, 8),
        randn(batch, key_heads, num_keys, 8),
        randn(batch, key_heads, num_keys, 5),
    )
    indices = random_indices(batch, length, num_keys, slots, empty=empty, seed=len(case))
    out = qkv.topk_attention(q, k, v, indices)
    mask = mask_of(indices, num_keys)
    expected = reference_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    torch.testing.assert_close(out, expected, **EXACT)
    ours = qkv.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    torch.testing.assert_close(out, ours, **EXACT)


@given(
    batch=st.integers(1, 2),
    key_heads=st.integers(1, 2),
    groups=st.integers(1, 3),
    length=st.integers(0, 6),
    num_keys=st.integers(1, 7),
    slots=st.integers(0, 8),
    empty=st.sampled_from([0.0, 0.4, 1.0]),
    seed=st.integers(0, 2**16),
)
def test_topk_attention_equals_dense_attention_on_any_shape(
    batch, key_heads, groups, length, num_keys, slots, empty, seed
):
    torch.manual_seed(seed)
    q = randn(batch, key_heads * groups, length, 4)
    k, v = randn(batch, key_heads, num_keys, 4), randn(batch, key_heads, num_keys, 3)
    indices = random_indices(batch, length, num_keys, min(slots, num_keys), empty=empty, seed=seed)
    if slots > num_keys:  # more slots than keys: the rest are empty
        indices = torch.cat([indices, torch.full((batch, length, slots - num_keys), -1)], dim=-1)
    expected = reference_attention(q, k, v, attn_mask=mask_of(indices, num_keys), enable_gqa=True)
    torch.testing.assert_close(qkv.topk_attention(q, k, v, indices), expected, **EXACT)


def test_a_query_with_no_key_gives_zeros():
    q, k, v = randn(1, 2, 3, 4), randn(1, 2, 5, 4), randn(1, 2, 5, 6)
    indices = torch.tensor([[[1, 4], [-1, -1], [-1, 0]]])
    out = qkv.topk_attention(q, k, v, indices)
    assert torch.equal(out[:, :, 1], torch.zeros(1, 2, 6, dtype=torch.float64))
    torch.testing.assert_close(out[:, :, 2], v[:, :, 0], **EXACT)  # one key: all its weight


@pytest.mark.parametrize(
    ("length", "num_keys", "slots"), [(0, 5, 2), (3, 0, 2), (3, 5, 0)], ids=["L=0", "S=0", "K=0"]
)
def test_empty_sizes(length, num_keys, slots):
    q, k, v = randn(2, 2, length, 4), randn(2, 1, num_keys, 4), randn(2, 1, num_keys, 3)
    indices = torch.full((2, length, slots), -1)
    out = qkv.topk_attention(q, k, v, indices)
    assert torch.equal(out, torch.zeros(2, 2, length, 3, dtype=torch.float64))


def test_indexer_then_topk_attention_is_causal_sparse_attention():
    """The whole of DeepSeek Sparse Attention's path: score, keep the top k, attend."""
    batch, length, top_k = 2, 10, 4
    causal = qkv.causal_mask(length, length)
    scores = qkv.indexer_scores(
        randn(batch, 2, length, 8), randn(batch, length, 8), randn(batch, length, 2), mask=causal
    )
    indices = qkv.topk_indices(scores, top_k)
    assert (indices[:, : top_k - 1] == -1).any()  # the first queries have fewer than k keys
    q, k, v = randn(batch, 4, length, 8), randn(batch, 2, length, 8), randn(batch, 2, length, 8)
    out = qkv.topk_attention(q, k, v, indices, scale=0.2)
    mask = mask_of(indices, length) & causal  # the indices never break causality
    assert torch.equal(mask, mask_of(indices, length))
    expected = reference_attention(q, k, v, attn_mask=mask, enable_gqa=True, scale=0.2)
    torch.testing.assert_close(out, expected, **EXACT)


def test_gradients_equal_dense_attention():
    q, k, v = (
        randn(2, 4, 5, 4).requires_grad_(),
        randn(2, 2, 7, 4).requires_grad_(),
        randn(2, 2, 7, 3).requires_grad_(),
    )
    indices = random_indices(2, 5, 7, 3, empty=0.3)
    sparse = torch.autograd.grad(qkv.topk_attention(q, k, v, indices).sin().sum(), (q, k, v))
    dense_out = reference_attention(q, k, v, attn_mask=mask_of(indices, 7), enable_gqa=True)
    dense = torch.autograd.grad(dense_out.sin().sum(), (q, k, v))
    torch.testing.assert_close(sparse, dense, **EXACT)


def test_float32_and_int32_indices():
    q, k, v = randn(1, 2, 4, 8), randn(1, 2, 6, 8), randn(1, 2, 6, 8)
    indices = random_indices(1, 4, 6, 3).int()
    out = qkv.topk_attention(q.float(), k.float(), v.float(), indices)
    assert out.dtype == torch.float32
    expected = reference_attention(q.float(), k.float(), v.float(), attn_mask=mask_of(indices, 6))
    torch.testing.assert_close(out.double(), expected, **FLOAT32)


# --- malformed input ---------------------------------------------------------------------------------------


def attention_call(name, value):
    """A well-formed topk_attention call with one argument replaced: q (2, 4, 5, 8), k and v (2, 2, 7, ·)."""
    kwargs = {
        "q": randn(2, 4, 5, 8),
        "k": randn(2, 2, 7, 8),
        "v": randn(2, 2, 7, 6),
        "indices": random_indices(2, 5, 7, 3),
    }
    kwargs[name] = value(kwargs[name]) if callable(value) else value
    return kwargs


def duplicate(indices):
    indices = indices.clone()
    indices[1, 2, 1] = indices[1, 2, 0]
    return indices


ATTENTION_BAD = [
    ("q", lambda q: q[0], ValueError, r"q must be 4-D"),
    ("q", lambda q: q.float(), TypeError, r"q and k disagree on dtype"),
    ("k", lambda k: k[:1], ValueError, r"k must be \(B, Hk, S, E\) with q's B and E"),
    ("k", lambda k: k[..., :4], ValueError, r"k must be \(B, Hk, S, E\) with q's B and E"),
    ("k", lambda k: torch.cat([k, k[:, :1]], dim=1), ValueError, r"k and v disagree"),
    ("v", lambda v: v[:, :, :6], ValueError, r"k and v disagree on \(B, Hk, S\)"),
    ("q", lambda q: q[:, :3], ValueError, r"k's heads must divide q's"),
    ("indices", lambda i: i.float(), TypeError, r"indices must be int32 or int64"),
    ("indices", lambda i: i.tolist(), TypeError, r"indices must be a torch.Tensor"),
    ("indices", lambda i: i[0], ValueError, r"indices must be \(B, L, K\)"),
    (
        "indices",
        lambda i: i[:, :4],
        ValueError,
        r"indices must be \(B, L, K\) with q's B = 2 and L = 5",
    ),
    (
        "indices",
        lambda i: i.index_fill(2, torch.tensor([0]), 7),
        ValueError,
        r"\[0, 7\) or -1.*= 7",
    ),
    (
        "indices",
        lambda i: i.index_fill(2, torch.tensor([0]), -2),
        ValueError,
        r"\[0, 7\) or -1.*= -2",
    ),
    (
        "indices",
        duplicate,
        ValueError,
        r"at most once per query, got key \d+ twice in indices\[1, 2\]",
    ),
    (  # meta has no values to read: the device is checked before them
        "indices",
        lambda i: i.to("meta"),
        ValueError,
        r"indices is on meta but q is on cpu",
    ),
    ("scale", "1", TypeError, r"scale must be a number"),
]


@pytest.mark.parametrize(("name", "value", "error", "match"), ATTENTION_BAD, ids=ids(ATTENTION_BAD))
def test_malformed_attention_input_is_refused_naming_the_argument(name, value, error, match):
    with pytest.raises(error, match=match):
        qkv.topk_attention(**attention_call(name, value))


def test_repeated_empty_slots_are_fine():
    kwargs = attention_call("indices", lambda i: i.index_fill(2, torch.tensor([1, 2]), -1))
    assert qkv.topk_attention(**kwargs).shape == (2, 4, 5, 6)


def indexer_call(name, value):
    """A well-formed indexer_scores call with one argument replaced: q (2, 3, 5, 8), k (2, 7, 8)."""
    kwargs = {"q": randn(2, 3, 5, 8), "k": randn(2, 7, 8), "weights": randn(2, 5, 3), "mask": None}
    kwargs[name] = value(kwargs[name]) if callable(value) else value
    return kwargs


INDEXER_BAD = [
    ("q", lambda q: q[0], ValueError, r"q must be \(B, H, L, D\)"),
    ("k", lambda k: k[None], ValueError, r"k must be \(B, S, D\), got"),
    ("k", lambda k: k[..., :4], ValueError, r"k must be \(B, S, D\) with q's B = 2 and D = 8"),
    ("k", lambda k: k[:1], ValueError, r"k must be \(B, S, D\) with q's B = 2"),
    ("weights", lambda w: w[..., :2], ValueError, r"weights must be \(B, L, H\) = \(2, 5, 3\)"),
    ("weights", lambda w: w.float(), TypeError, r"q and weights disagree on dtype"),
    ("mask", torch.ones(2, 5, 7), TypeError, r"mask must be a bool tensor"),
    ("mask", torch.ones(2, 5, 6, dtype=torch.bool), ValueError, r"mask .* does not broadcast"),
    ("scale", [1.0], TypeError, r"scale must be a number"),
]


@pytest.mark.parametrize(("name", "value", "error", "match"), INDEXER_BAD, ids=ids(INDEXER_BAD))
def test_malformed_indexer_input_is_refused_naming_the_argument(name, value, error, match):
    with pytest.raises(error, match=match):
        qkv.indexer_scores(**indexer_call(name, value))


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((torch.ones(3, 4), -1), ValueError, r"top_k must be non-negative"),
        ((torch.ones(3, 4), 2.0), TypeError, r"top_k must be an int"),
        ((torch.ones(4), 2), ValueError, r"scores must have at least 2"),
        ((torch.ones(3, 4, dtype=torch.long), 2), TypeError, r"scores must be a floating-point"),
    ],
)
def test_malformed_topk_indices_input(args, error, match):
    with pytest.raises(error, match=match):
        qkv.topk_indices(*args)


def test_topk_mask_refuses_out_of_range_indices():
    with pytest.raises(ValueError, match=r"indices must be key positions in \[0, 3\)"):
        qkv.topk_mask(torch.tensor([[[0, 3]]]), 3)
    with pytest.raises(ValueError, match=r"num_keys must be non-negative"):
        qkv.topk_mask(torch.tensor([[[0, 1]]]), -1)
