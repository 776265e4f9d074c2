"""qkv.exercises, tested both ways: right solutions pass, and each known mistake fails with its own hint.

The solutions and the wrong functions here are written as a reader would write them, independently of the
checker's references and of its models of the mistakes.
"""

# The readers' functions use the articles' names: L, S, D, H, W, U.
# ruff: noqa: N803, N806

import contextlib
import math
import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from qkv.exercises import Result, check, names

CATALOGUE = [
    "queries-keys-values/attention",
    "scaling/stable-softmax",
    "masking/causal-mask",
    "masking/padding-mask",
    "additive-vs-dot-product/additive-scores",
    "multi-head-attention/split-heads",
    "multi-head-attention/merge-heads",
    "positions/rope",
    "transformer-block/layer-norm",
    "decoding/cache-step",
    "small-gpt/top-p",
    "serving/gather-pages",
    "flash-attention/online-softmax",
    "efficient-attention/linear-attention",
    "recurrence/delta-step",
    "sparse-attention/indexer-scores",
    "long-context/streaming-window",
    "attention-across-devices/merge-partials",
]
ATTENTION = "queries-keys-values/attention"


def run(name, fn, capsys) -> Result:
    """check, and what it printed, which must be its message and fit a phone's width."""
    result = check(name, fn)
    printed = capsys.readouterr().out
    assert printed == result.message + "\n"
    assert all(len(line) <= 78 for line in printed.splitlines()), printed
    return result


# --- right solutions ---------------------------------------------------------------------------------------


def attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


def stable_softmax(scores):
    e = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


def causal_mask(L, S, alignment):
    offset = S - L if alignment == "bottom_right" else 0
    i, j = torch.arange(L)[:, None], torch.arange(S)[None, :]
    return j <= i + offset


def padding_mask(lengths, S):
    return (torch.arange(S) < lengths[:, None])[:, None, None, :]


def additive_scores(query, keys, W, U, v):
    hidden = torch.tanh((query @ W.T)[:, :, None, :] + (keys @ U.T)[:, None, :, :])
    return torch.einsum("blsa,a->bls", hidden, v)


def split_heads(x, num_heads):
    return torch.stack(x.chunk(num_heads, dim=-1), dim=1)


def merge_heads(x):
    return torch.cat(x.unbind(dim=1), dim=-1)


def rope(x, positions, base):
    D = x.size(-1)
    inv_freq = base ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    angles = positions[:, None].double() * inv_freq
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., : D // 2], x[..., D // 2 :]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def layer_norm(x, weight, bias, eps):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


def cache_step(cache_k, cache_v, q, k, v):
    cache_k, cache_v = torch.cat([cache_k, k], dim=2), torch.cat([cache_v, v], dim=2)
    return F.scaled_dot_product_attention(q, cache_k, cache_v), cache_k, cache_v


def top_p(probs, p):
    ordered, order = probs.sort(dim=-1, descending=True)
    before = ordered.cumsum(-1) - ordered  # the mass of the more probable tokens
    kept = torch.where(before < p, ordered, 0.0)
    return torch.zeros_like(probs).scatter(-1, order, kept / kept.sum(-1, keepdim=True))


def gather_pages(pages, block_table, length):
    page_size = pages.size(2)
    t = torch.arange(length)  # the tokens' positions
    chosen = pages[block_table[t // page_size], :, t % page_size]  # (length, H, D)
    return chosen.transpose(0, 1)  # (H, length, D)


def online_softmax(q, k, v, block_size):
    scale = q.size(-1) ** -0.5
    m = torch.full((*q.shape[:-1], 1), -math.inf, dtype=q.dtype)
    total = torch.zeros_like(m)
    acc = torch.zeros(*q.shape[:-1], v.size(-1), dtype=q.dtype)
    for start in range(0, k.size(-2), block_size):
        scores = q @ k[..., start : start + block_size, :].mT * scale
        m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
        alpha, p = torch.exp(m - m_new), torch.exp(scores - m_new)
        total = total * alpha + p.sum(-1, keepdim=True)
        acc = acc * alpha + p @ v[..., start : start + block_size, :]
        m = m_new
    return acc / total


def linear_attention(q, k, v):
    phi_q, phi_k = F.elu(q) + 1, F.elu(k) + 1
    state = torch.einsum("...sd,...se->...de", phi_k, v)  # (..., D, Dv)
    return phi_q @ state / (phi_q * phi_k.sum(-2, keepdim=True)).sum(-1, keepdim=True)


def delta_step(state, q, k, v, g, beta):
    state = state * g.exp()[..., None, None]  # S' = exp(g) S
    error = beta[..., None] * (v - torch.einsum("...k,...kv->...v", k, state))
    state = state + torch.einsum("...k,...v->...kv", k, error)
    return torch.einsum("...k,...kv->...v", q, state), state


def indexer_scores(q, k, weights):
    L, S, D = q.size(-2), k.size(-2), q.size(-1)
    per_head = torch.relu(q @ k[:, None].mT / D**0.5)  # (B, H, L, S)
    scores = (weights.mT[..., None] * per_head).sum(1)  # (B, L, S)
    future = torch.ones(L, S, dtype=torch.bool).triu(S - L + 1)
    return scores.masked_fill(future, -torch.inf)


def streaming_window(x, window, sinks):
    tokens = x.size(-2)
    if tokens <= window:
        return x
    keep = torch.cat([torch.arange(sinks), torch.arange(tokens - window + sinks, tokens)])
    return x[..., keep, :]


def merge_partials(out_a, lse_a, out_b, lse_b):
    both = torch.stack([lse_a, lse_b])
    share = torch.softmax(both, dim=0)[..., None]
    return share[0] * out_a + share[1] * out_b, torch.logsumexp(both, dim=0)


SOLUTIONS = {
    "queries-keys-values/attention": attention,
    "scaling/stable-softmax": stable_softmax,
    "masking/causal-mask": causal_mask,
    "masking/padding-mask": padding_mask,
    "additive-vs-dot-product/additive-scores": additive_scores,
    "multi-head-attention/split-heads": split_heads,
    "multi-head-attention/merge-heads": merge_heads,
    "positions/rope": rope,
    "transformer-block/layer-norm": layer_norm,
    "decoding/cache-step": cache_step,
    "small-gpt/top-p": top_p,
    "serving/gather-pages": gather_pages,
    "flash-attention/online-softmax": online_softmax,
    "efficient-attention/linear-attention": linear_attention,
    "recurrence/delta-step": delta_step,
    "sparse-attention/indexer-scores": indexer_scores,
    "long-context/streaming-window": streaming_window,
    "attention-across-devices/merge-partials": merge_partials,
}


@pytest.mark.parametrize("name", CATALOGUE)
def test_a_right_solution_passes_every_case(name, capsys):
    result = run(name, SOLUTIONS[name], capsys)
    assert result
    assert result.passed
    assert result.status == "passed"
    assert result.hint is None
    assert result.cases == result.total >= 5
    assert result.message == f"{name}: passed all {result.total} cases"


def test_names_are_the_catalogue_in_reading_order():
    assert names() == CATALOGUE
    assert list(SOLUTIONS) == CATALOGUE


# --- wrong solutions, one per known mistake ----------------------------------------------------------------


def attend(q, k, v, scale=None, dim=-1):
    scale = q.size(-1) ** -0.5 if scale is None else scale
    return torch.softmax(q @ k.mT * scale, dim=dim) @ v


def exp_over_sum(scores, dim=-1):
    e = scores.exp()
    return e / e.sum(dim, keepdim=True)


def offset(L, S, alignment):
    return S - L if alignment == "bottom_right" else 0


def keys_kept(lengths, S):
    return torch.arange(S) < lengths[:, None]  # (B, S)


def rotate(x, positions, base, inverse_freq=None, sign=1.0):
    D = x.size(-1)
    if inverse_freq is None:
        inverse_freq = base ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    angles = sign * positions[:, None].double() * inverse_freq
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., : D // 2], x[..., D // 2 :]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def rope_interleaved(x, positions, base):
    D = x.size(-1)
    angles = positions[:, None].double() * base ** (-torch.arange(0, D, 2).double() / D)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).flatten(-2)


def cached(cache_k, cache_v, k, v):
    return torch.cat([cache_k, k], dim=2), torch.cat([cache_v, v], dim=2)


def online_wrong(q, k, v, block_size, rescale_acc=True, use_max=True, stop=None):
    scale = q.size(-1) ** -0.5
    m = torch.full((*q.shape[:-1], 1), -math.inf if use_max else 0.0, dtype=q.dtype)
    total = torch.zeros_like(m)
    acc = torch.zeros(*q.shape[:-1], v.size(-1), dtype=q.dtype)
    S = k.size(-2) if stop is None else stop(k.size(-2), block_size)
    for start in range(0, S, block_size):
        scores = q @ k[..., start : start + block_size, :].mT * scale
        m_new = torch.maximum(m, scores.amax(-1, keepdim=True)) if use_max else m
        alpha, p = torch.exp(m - m_new), torch.exp(scores - m_new)
        total = total * alpha + p.sum(-1, keepdim=True)
        acc = (acc * alpha if rescale_acc else acc) + p @ v[..., start : start + block_size, :]
        m = m_new
    return acc / total


def nucleus_wrong(probs, p, crossing=True, renormalise=True, unsort=True, descending=True):
    values, indices = torch.sort(probs, dim=-1, descending=descending)
    total = torch.cumsum(values, dim=-1)
    kept = values * ((total - values < p) if crossing else (total <= p))
    if renormalise:
        kept = kept / kept.sum(dim=-1, keepdim=True)
    return torch.zeros_like(probs).scatter(-1, indices, kept) if unsort else kept


def features(x):
    return F.elu(x) + 1


def delta_wrong(
    state,
    q,
    k,
    v,
    g,
    beta,
    write="error",
    recall="after decay",
    read="after",
    decay="exp",
    rate=True,
):
    old = state
    if decay == "exp":
        state = state * g.exp()[..., None, None]
    elif decay == "g":
        state = state * g[..., None, None]
    held = old if recall == "before decay" else state
    written = v - torch.einsum("...k,...kv->...v", k, held) if write == "error" else v
    if rate:
        written = beta[..., None] * written
    new = state + torch.einsum("...k,...v->...kv", k, written)
    return torch.einsum("...k,...kv->...v", q, new if read == "after" else state), new


def layer_norm_with(x, weight, bias, eps, mean=None, var=None, dim=-1):
    mean = x.mean(dim, keepdim=True) if mean is None else mean
    var = ((x - mean) ** 2).mean(dim, keepdim=True) if var is None else var
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


WRONG = [  # (exercise, wrong function, a phrase of the hint it must get)
    (ATTENTION, lambda q, k, v: attend(q, k, v, scale=1 / q.size(-1)), "divided by d_k"),
    (ATTENTION, lambda q, k, v: torch.softmax(q @ k.mT, dim=-1) @ v, "not scaled"),
    (ATTENTION, lambda q, k, v: attend(q, k, v, scale=v.size(-1) ** -0.5), "v's size Dv"),
    (ATTENTION, lambda q, k, v: attend(q, k, v, dim=-2), "over the queries"),
    (ATTENTION, lambda q, k, v: attend(k, q, v), "keys by queries"),
    (ATTENTION, lambda q, k, v: exp_over_sum(q @ k.mT / math.sqrt(q.size(-1))) @ v, "overflowed"),
    (
        ATTENTION,
        lambda q, k, v: torch.softmax(q @ k.mT / q.size(-1) ** 0.5, -1),
        "the attention weights",
    ),
    ("scaling/stable-softmax", exp_over_sum, "overflowed"),
    ("scaling/stable-softmax", lambda s: exp_over_sum(s - s.max()), "not the max of the whole"),
    ("scaling/stable-softmax", lambda s: exp_over_sum(s - s.max(dim=-1).values), "drops the axis"),
    ("scaling/stable-softmax", lambda s: torch.softmax(s, dim=0), "normalises the wrong axis"),
    (
        "masking/causal-mask",
        lambda L, S, a: torch.ones(L, S, dtype=torch.bool).triu(offset(L, S, a) + 1),
        "swapped",
    ),
    ("masking/causal-mask", lambda L, S, a: torch.ones(L, S).tril().bool(), "the top-left mask"),
    ("masking/causal-mask", lambda L, S, a: torch.ones(L, S).tril(S - L) == 1, "bottom-right mask"),
    (
        "masking/causal-mask",
        lambda L, S, a: torch.ones(L, S).tril(L - S if a == "bottom_right" else 0) > 0,
        "not by L - S",
    ),
    (
        "masking/causal-mask",
        lambda L, S, a: torch.arange(S)[None] < torch.arange(L)[:, None] + offset(L, S, a),
        "diagonal is masked",
    ),
    (
        "masking/causal-mask",
        lambda L, S, a: torch.arange(S)[None] >= torch.arange(L)[:, None] + offset(L, S, a),
        "upper triangle",
    ),
    ("masking/padding-mask", lambda n, S: ~keys_kept(n, S)[:, None, None, :], "swapped"),
    ("masking/padding-mask", keys_kept, "that is (B, S)"),
    ("masking/padding-mask", lambda n, S: keys_kept(n, S)[:, None, :, None], "hides queries"),
    ("masking/padding-mask", lambda n, S: keys_kept(n, S)[:, None, :], "lines B up with the heads"),
    (
        "masking/padding-mask",
        lambda n, S: (torch.arange(S) <= n[:, None])[:, None, None, :],
        "one padding key too many",
    ),
    (
        "additive-vs-dot-product/additive-scores",
        lambda query, keys, W, U, v: ((query @ W.T)[:, :, None] + (keys @ U.T)[:, None]) @ v,
        "tanh is missing",
    ),
    (
        "additive-vs-dot-product/additive-scores",
        lambda query, keys, W, U, v: (
            (torch.tanh(query @ W.T)[:, :, None] + torch.tanh(keys @ U.T)[:, None]) @ v
        ),
        "a sum of tanhs",
    ),
    (
        "additive-vs-dot-product/additive-scores",
        lambda query, keys, W, U, v: torch.tanh((query @ W)[:, :, None] + (keys @ U)[:, None]) @ v,
        "query @ W.T",
    ),
    (
        "multi-head-attention/split-heads",
        lambda x, H: x.view(x.size(0), H, x.size(1), -1),
        "mixes tokens into heads",
    ),
    (
        "multi-head-attention/split-heads",
        lambda x, H: x.view(*x.shape[:2], -1, H).permute(0, 3, 1, 2),
        "side by side",
    ),
    (
        "multi-head-attention/split-heads",
        lambda x, H: x.view(*x.shape[:2], H, -1),
        "brings the heads before the tokens",
    ),
    (
        "multi-head-attention/merge-heads",
        lambda x: x.reshape(x.size(0), x.size(2), -1),
        "mixes heads and tokens",
    ),
    (
        "multi-head-attention/merge-heads",
        lambda x: x.permute(0, 2, 3, 1).reshape(x.size(0), x.size(2), -1),
        "stay side by side",
    ),
    ("multi-head-attention/merge-heads", lambda x: x.transpose(1, 2), "flatten the last two"),
    ("positions/rope", rope_interleaved, "interleaved layout"),
    ("positions/rope", lambda x, p, base: rotate(x, p, base, sign=-1.0), "the wrong way"),
    (
        "positions/rope",
        lambda x, p, base: rotate(
            x, p, base, base ** (-torch.arange(x.size(-1) // 2).double() / x.size(-1))
        ),
        "not base**(-i/D)",
    ),
    ("positions/rope", lambda x, p, base: rotate(x, torch.arange(x.size(-2)), base), "row index"),
    ("positions/rope", lambda x, p, base: rotate(x, p, 10000.0), "the `base` argument"),
    (
        "transformer-block/layer-norm",
        lambda x, w, b, eps: layer_norm_with(x, w, b, eps, var=x.var(-1, keepdim=True)),
        "unbiased variance",
    ),
    (
        "transformer-block/layer-norm",
        lambda x, w, b, eps: (
            (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True, unbiased=False) + eps) * w + b
        ),
        "inside the square root",
    ),
    (
        "transformer-block/layer-norm",
        lambda x, w, b, eps: (
            (x - x.mean(-1, keepdim=True)) / (x.var(-1, keepdim=True, unbiased=False) + eps) * w + b
        ),
        "not by the variance",
    ),
    (
        "transformer-block/layer-norm",
        lambda x, w, b, eps: layer_norm_with(x, 1.0, 0.0, eps),
        "weight and bias are missing",
    ),
    (
        "transformer-block/layer-norm",
        lambda x, w, b, eps: layer_norm_with(x, b, w, eps),
        "weight and bias are swapped",
    ),
    (
        "transformer-block/layer-norm",
        lambda x, w, b, eps: layer_norm_with(x, w, b, eps, dim=0),
        "the last axis",
    ),
    (
        "transformer-block/layer-norm",
        lambda x, w, b, eps: layer_norm_with(
            x,
            w,
            b,
            eps,
            var=(x**2).mean(-1, keepdim=True) - x.mean(-1, keepdim=True) ** 2,
        ),
        "loses its digits",
    ),
    (
        "decoding/cache-step",
        lambda ck, cv, q, k, v: (F.scaled_dot_product_attention(q, ck, cv), *cached(ck, cv, k, v)),
        "new token is missing",
    ),
    (
        "decoding/cache-step",
        lambda ck, cv, q, k, v: (F.scaled_dot_product_attention(q, *cached(ck, cv, k, v)), ck, cv),
        "with the new key and value appended",
    ),
    (
        "decoding/cache-step",
        lambda ck, cv, q, k, v: cache_step(k, v, q, ck, cv),
        "go at the end",
    ),
    (
        "decoding/cache-step",
        lambda ck, cv, q, k, v: (
            attend(q, *cached(ck, cv, k, v), scale=1 / q.size(-1)),
            *cached(ck, cv, k, v),
        ),
        "divided by d_k",
    ),
    (
        "decoding/cache-step",
        lambda ck, cv, q, k, v: (
            attend(q, *cached(ck, cv, k, v), scale=1.0),
            *cached(ck, cv, k, v),
        ),
        "not scaled",
    ),
    ("small-gpt/top-p", lambda probs, p: nucleus_wrong(probs, p, crossing=False), "past p"),
    ("small-gpt/top-p", lambda probs, p: nucleus_wrong(probs, p, renormalise=False), "sum to 1"),
    ("small-gpt/top-p", lambda probs, p: nucleus_wrong(probs, p, unsort=False), "sorted order"),
    (
        "small-gpt/top-p",
        lambda probs, p: nucleus_wrong(probs, p, descending=False),
        "least probable",
    ),
    (
        "serving/gather-pages",
        lambda pages, table, length: gather_pages(pages, torch.arange(len(table)), length),
        "first pages",
    ),
    (
        "serving/gather-pages",
        lambda pages, table, length: (
            pages[table].permute(1, 2, 0, 3).reshape(pages.size(1), -1, pages.size(3))[:, :length]
        ),
        "interleaved",
    ),
    (
        "serving/gather-pages",
        lambda pages, table, length: pages[table].reshape(pages.size(1), -1, pages.size(3))[
            :, :length
        ],
        "heads and the pages are mixed",
    ),
    (
        "serving/gather-pages",
        lambda pages, table, length: pages[table].transpose(0, 1).flatten(1, 2),
        "empty slots",
    ),
    (
        "flash-attention/online-softmax",
        lambda q, k, v, n: online_wrong(q, k, v, n, rescale_acc=False),
        "not rescaled",
    ),
    (
        "flash-attention/online-softmax",
        lambda q, k, v, n: online_wrong(q, k, v, n, use_max=False),
        "overflowed",
    ),
    (
        "flash-attention/online-softmax",
        lambda q, k, v, n: online_wrong(q, k, v, n, stop=lambda S, n: S // n * n),
        "shorter block is skipped",
    ),
    (
        "flash-attention/online-softmax",
        lambda q, k, v, n: online_wrong(q * q.size(-1) ** -0.5, k, v, n),
        "divided by d_k",
    ),
    (
        "flash-attention/online-softmax",
        lambda q, k, v, n: online_wrong(q * q.size(-1) ** 0.5, k, v, n),
        "not scaled",
    ),
    (
        "efficient-attention/linear-attention",
        lambda q, k, v: features(q) @ (features(k).mT @ v),
        "normaliser is missing",
    ),
    (
        "efficient-attention/linear-attention",
        lambda q, k, v: (
            (F.elu(q) @ F.elu(k).mT) @ v / (F.elu(q) @ F.elu(k).mT).sum(-1, keepdim=True)
        ),
        "elu(x) alone",
    ),
    ("efficient-attention/linear-attention", attention, "that is softmax attention"),
    ("recurrence/delta-step", lambda *args: delta_wrong(*args, write="value"), "writes the value"),
    (
        "recurrence/delta-step",
        lambda *args: delta_wrong(*args, recall="before decay"),
        "before the decay",
    ),
    ("recurrence/delta-step", lambda *args: delta_wrong(*args, read="before"), "before this token"),
    ("recurrence/delta-step", lambda *args: delta_wrong(*args, decay="g"), "not by g"),
    ("recurrence/delta-step", lambda *args: delta_wrong(*args, decay="none"), "not decayed"),
    ("recurrence/delta-step", lambda *args: delta_wrong(*args, rate=False), "written whole"),
    (
        "sparse-attention/indexer-scores",
        lambda q, k, weights: torch.relu(
            torch.einsum("blh,bhls->bls", weights, q @ k[:, None].mT / q.size(-1) ** 0.5)
        ).masked_fill(indexer_scores(q, k, weights).isinf(), -torch.inf),
        "not on the sum",
    ),
    (
        "sparse-attention/indexer-scores",
        lambda q, k, weights: indexer_scores(q * q.size(-1) ** 0.5, k, weights),
        "not scaled",
    ),
    (
        "long-context/streaming-window",
        lambda x, window, sinks: x[..., -window:, :],
        "plain sliding window",
    ),
    (
        "long-context/streaming-window",
        lambda x, window, sinks: (
            x
            if x.size(-2) <= window
            else torch.cat([x[..., sinks - window :, :], x[..., :sinks, :]], dim=-2)
        ),
        "the sinks first",
    ),
    (
        "long-context/streaming-window",
        lambda x, window, sinks: (
            x
            if x.size(-2) <= window
            else torch.cat([x[..., :sinks, :], x[..., sinks - window - 1 : -1, :]], dim=-2)
        ),
        "newest token is missing",
    ),
    (
        "attention-across-devices/merge-partials",
        lambda oa, la, ob, lb: ((oa + ob) / 2, torch.logaddexp(la, lb)),
        "averaging",
    ),
    (
        "attention-across-devices/merge-partials",
        lambda oa, la, ob, lb: (
            oa * la.exp()[..., None] + ob * lb.exp()[..., None],
            torch.logaddexp(la, lb),
        ),
        "divided by their sum",
    ),
    (
        "attention-across-devices/merge-partials",
        lambda oa, la, ob, lb: (*merge_partials(oa, lb, ob, la)[0:1], torch.logaddexp(la, lb)),
        "weights are swapped",
    ),
    (
        "attention-across-devices/merge-partials",
        lambda oa, la, ob, lb: (merge_partials(oa, la, ob, lb)[0], la + lb),
        "not the sum",
    ),
    (
        "attention-across-devices/merge-partials",
        lambda oa, la, ob, lb: (merge_partials(oa, la, ob, lb)[0], torch.maximum(la, lb)),
        "not the larger one",
    ),
    (
        "attention-across-devices/merge-partials",
        lambda oa, la, ob, lb: (
            (oa * la.exp()[..., None] + ob * lb.exp()[..., None])
            / (la.exp() + lb.exp())[..., None],
            torch.log(la.exp() + lb.exp()),
        ),
        "exp(lse) overflowed",
    ),
]


@pytest.mark.parametrize(
    ("name", "wrong", "phrase"), [pytest.param(*row, id=f"{row[0]}: {row[2]}") for row in WRONG]
)
def test_a_known_mistake_fails_with_its_hint(name, wrong, phrase, capsys):
    result = run(name, wrong, capsys)
    assert not result
    assert result.status == "failed"
    assert result.cases < result.total
    assert result.hint is not None
    assert phrase in result.hint
    assert f"hint: {result.hint[:40]}" in result.message.replace("\n  ", " ")
    assert result.message.startswith(f"{name}: failed case {result.cases + 1} of {result.total}\n")


# --- right solutions written another way ------------------------------------------------------------------


def softmax_by_logsumexp(scores):
    return torch.exp(scores - torch.logsumexp(scores, dim=-1, keepdim=True))


def causal_mask_by_triu(L, S, alignment):
    return ~torch.ones(L, S, dtype=torch.bool).triu(offset(L, S, alignment) + 1)


def rope_by_rotate_half(x, positions, base):
    """The rotate-half form of Hugging Face, with the angles in float64."""
    D = x.size(-1)
    inv_freq = 1.0 / base ** (torch.arange(0, D, 2).double() / D)
    angles = torch.cat([positions[:, None].double() * inv_freq] * 2, dim=-1)  # (N, D)
    rotated = torch.cat([-x[..., D // 2 :], x[..., : D // 2]], dim=-1)
    return x * angles.cos().to(x.dtype) + rotated * angles.sin().to(x.dtype)


def layer_norm_by_rsqrt(x, weight, bias, eps):
    var, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
    return (x - mean) * torch.rsqrt(var + eps) * weight + bias


def merge_partials_by_max(out_a, lse_a, out_b, lse_b):
    m = torch.maximum(lse_a, lse_b)
    w_a, w_b = torch.exp(lse_a - m), torch.exp(lse_b - m)
    out = (w_a[..., None] * out_a + w_b[..., None] * out_b) / (w_a + w_b)[..., None]
    return out, m + torch.log(w_a + w_b)


ANOTHER_WAY = [
    (ATTENTION, lambda q, k, v: attend(q.float(), k.float(), v.float()).to(q.dtype)),
    ("scaling/stable-softmax", softmax_by_logsumexp),
    ("masking/causal-mask", causal_mask_by_triu),
    ("masking/padding-mask", lambda n, S: keys_kept(n, S).view(-1, 1, 1, S)),
    (
        "multi-head-attention/merge-heads",
        lambda x: x.transpose(1, 2).contiguous().view(*x.shape[::2], -1),
    ),
    ("positions/rope", rope_by_rotate_half),
    ("transformer-block/layer-norm", layer_norm_by_rsqrt),
    (
        "efficient-attention/linear-attention",
        lambda q, k, v: (
            features(q) @ (features(k).mT @ v) / (features(q) @ features(k).sum(-2)[..., None])
        ),
    ),
    ("attention-across-devices/merge-partials", merge_partials_by_max),
]


@pytest.mark.parametrize(("name", "solution"), ANOTHER_WAY, ids=[row[0] for row in ANOTHER_WAY])
def test_a_solution_written_another_way_passes(name, solution, capsys):
    """Other orders of operations, float32 inside: the tolerance is for rounding, not for a formula."""
    assert run(name, solution, capsys)


# --- generic wrong answers ---------------------------------------------------------------------------------


HEAD = "queries-keys-values/attention: failed case 1 of 11\ncase (small): q (3, 4), k (3, 4), v (3, 4), all float64\n"


def test_zeros_fail_with_their_own_hint(capsys):
    result = run(ATTENTION, lambda q, k, v: 0 * attention(q, k, v), capsys)
    assert not result
    assert result.message.startswith(HEAD + "wrong values: 12 of 12 differ; the largest error is ")
    assert result.message.endswith("hint: every value is 0")


def test_a_transposed_output_fails_as_transposed(capsys):
    result = run(ATTENTION, lambda q, k, v: attention(q, k, v).mT, capsys)
    assert result.message == HEAD + (
        "wrong shape: expected (3, 4), got (4, 3)\n"
        "hint: that is the right result transposed: its last two axes are swapped"
    )


def test_a_wrong_shape_says_both_shapes(capsys):
    result = run(ATTENTION, lambda q, k, v: attention(q, k, v)[..., :-1], capsys)
    assert result.message == HEAD + "wrong shape: expected (3, 4), got (3, 3)"


def test_a_wrong_dtype_says_both_dtypes(capsys):
    result = run(ATTENTION, lambda q, k, v: attention(q, k, v).float(), capsys)
    assert (
        result.message == HEAD + "wrong dtype: expected float64, got float32 (the values are right)"
    )


def test_a_mask_of_numbers_is_a_wrong_dtype(capsys):
    result = run(
        "masking/causal-mask", lambda L, S, a: torch.ones(L, S).tril(offset(L, S, a)), capsys
    )
    assert "wrong dtype: expected bool, got float32 (the values are right)" in result.message


def test_an_exception_shows_the_readers_line_not_the_checkers(capsys):
    def attention(q, k, v):
        scores = q @ k  # forgot the transpose
        return scores

    result = run(ATTENTION, attention, capsys)
    line = attention.__code__.co_firstlineno + 1
    assert result.message == HEAD + (
        "attention raised RuntimeError: mat1 and mat2 shapes cannot be multiplied\n"
        "  (3x4 and 3x4)\n"
        f"  at line {line} of attention: scores = q @ k  # forgot the transpose"
    )
    assert "Traceback" not in result.message
    assert "checker" not in result.message


def test_the_diagonal_inside_torch_ones_is_named(capsys):
    """A bug that published tutorials carry: torch.triu(torch.ones(L, S, diagonal=1))."""

    def causal_mask(L, S, alignment):
        return ~torch.triu(torch.ones(L, S, diagonal=1)).bool()

    result = run("masking/causal-mask", causal_mask, capsys)
    assert "causal_mask raised TypeError: ones() got an unexpected keyword" in result.message
    assert result.hint.startswith("diagonal= belongs to tril and triu, not to ones")


@pytest.mark.parametrize(
    ("name", "wrong", "phrase"),
    [
        (
            "multi-head-attention/merge-heads",
            lambda x: x.transpose(1, 2).view(x.size(0), x.size(2), -1),
            "view needs a contiguous tensor",
        ),
        (
            ATTENTION,
            lambda q, k, v: attention(q, k.transpose(1, 2).mT, v),
            "count axes from the end",
        ),
    ],
)
def test_a_known_exception_gets_a_hint(name, wrong, phrase, capsys):
    result = run(name, wrong, capsys)
    assert " raised " in result.message
    assert phrase in result.hint


def test_a_function_of_the_wrong_arguments_is_told_the_call(capsys):
    result = run("masking/causal-mask", lambda L, S: causal_mask(L, S, "top_left"), capsys)
    assert "your function raised TypeError" in result.message
    assert (
        result.hint == "check calls fn(L, S, alignment): does your function take these arguments?"
    )


def test_none_from_a_starter_is_not_attempted_yet(capsys):
    def attention(q, k, v):
        """A starter block: the signature, and ... for the body."""
        ...

    result = run(ATTENTION, attention, capsys)
    assert not result
    assert result.status == "not attempted"
    assert result.cases == 0
    assert result.message == (
        "queries-keys-values/attention: not attempted yet\n"
        "attention returned None: write its body, then run check again\n"
        "(a body without a return statement returns None too)."
    )


@pytest.mark.parametrize("name", CATALOGUE)
def test_every_starter_runs_and_says_not_attempted(name, capsys):
    result = run(name, lambda *args: None, capsys)
    assert result.message.startswith(f"{name}: not attempted yet\n")


def test_none_on_a_later_case_is_a_missing_return(capsys):
    def causal(L, S, alignment):
        if alignment == "top_left":
            return causal_mask(L, S, alignment)

    result = run("masking/causal-mask", causal, capsys)
    assert result.status == "failed"
    assert result.cases == 1
    assert "causal returned None for this case: does every path end in a return?" in result.message


@pytest.mark.parametrize(
    ("wrong", "kind"),
    [
        (lambda q, k, v: attention(q, k, v).tolist(), "a list"),
        (lambda q, k, v: attention(q, k, v).numpy(), "a numpy.ndarray"),
        (lambda q, k, v: np.asarray(attention(q, k, v)).sum(), "a numpy.float64"),
    ],
)
def test_a_non_tensor_says_what_it_is(wrong, kind, capsys):
    result = run(ATTENTION, wrong, capsys)
    assert result.message == HEAD + f"your function returned {kind}, not a torch.Tensor"


def test_a_tuple_of_the_wrong_length_names_the_outputs(capsys):
    result = run("decoding/cache-step", lambda *args: cache_step(*args)[:2], capsys)
    assert result.message.endswith(
        "\nyour function returned 2 values; it should return (out, cache_k, cache_v)"
    )


def test_a_wrong_mask_is_drawn_as_two_grids(capsys):
    result = run("masking/causal-mask", lambda L, S, a: causal_mask(L, S, "top_left"), capsys)
    assert result.message == (
        "masking/causal-mask: failed case 6 of 14\n"
        "case (L < S): L=3, S=5, alignment='bottom_right'\n"
        "wrong values: 6 of 15 entries differ, the first at [0, 1]\n"
        "  expected    got\n"
        "  1 1 1 0 0   1 0 0 0 0\n"
        "  1 1 1 1 0   1 1 0 0 0\n"
        "  1 1 1 1 1   1 1 1 0 0\n"
        "hint: that is the top-left mask: bottom-right moves the diagonal S - L keys to\n"
        "  the right, so that the last query sees every key"
    )


def test_wrong_values_point_at_a_wrong_entry_not_at_a_shared_minus_inf(capsys):
    """-inf - -inf is NaN: the largest error must not land on a key masked in both."""
    result = run(
        "sparse-attention/indexer-scores", lambda q, k, w: indexer_scores(q, k, w) * 0.5, capsys
    )
    assert "wrong values: 5 of 16 differ; the largest error is 1.3e+00\n" in result.message
    assert "  at [0, 3, 0]: expected -2.696, got -1.348\n" in result.message
    assert "observed: every value is 0.5 times the expected one" in result.message


def test_a_number_where_minus_inf_is_expected_is_said(capsys):
    result = run(
        "sparse-attention/indexer-scores",
        lambda q, k, w: indexer_scores(q, k, w).nan_to_num(neginf=-1e4),
        capsys,
    )
    assert result.message.endswith(
        "wrong values: 6 of 16 differ, 6 of them finite where -inf is expected\n"
        "  at [0, 0, 1]: expected -inf, got -1e+04\n"
        "observed: the right values, except -1e+04 where -inf is expected"
    )


# --- the call ----------------------------------------------------------------------------------------------


def test_an_unknown_name_lists_the_exercises_and_guesses():
    with pytest.raises(ValueError, match="did you mean 'masking/causal-mask'") as error:
        check("causal-mask", causal_mask)
    assert all(name in str(error.value) for name in CATALOGUE)


def test_a_fn_that_is_not_callable_is_a_type_error():
    with pytest.raises(TypeError, match="fn must be a function"):
        check("masking/causal-mask", "causal_mask")


def test_arguments_in_the_wrong_order_are_a_type_error():
    with pytest.raises(TypeError, match="name must be a str"):
        check(causal_mask, "masking/causal-mask")


def test_two_runs_print_the_same_verdict(capsys):
    wrong = WRONG[0][1]
    assert run(ATTENTION, wrong, capsys).message == run(ATTENTION, wrong, capsys).message


def test_the_global_random_state_and_threads_are_left_alone(capsys):
    def drawing(q, k, v):
        torch.rand(3)  # a reader's function may use the global generator
        return attention(q, k, v)

    state, threads = torch.get_rng_state(), torch.get_num_threads()
    assert run(ATTENTION, drawing, capsys)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.get_num_threads() == threads


def test_a_function_that_changes_its_inputs_fails_and_says_which(capsys):
    def scribbling(q, k, v):
        out = attention(q, k, v)
        q.zero_()  # in place, on the inputs
        return out

    result = run(ATTENTION, scribbling, capsys)
    assert not result
    assert result.cases == 0
    assert "right values, but scribbling changed its input q in place" in result.message
    assert result.hint is None


def test_the_reader_cannot_change_the_cases(capsys):
    """A function that scribbles on its inputs leaves the next case, and the next check, as they were."""

    def scribbling(q, k, v):
        out = attention(q, k, v)
        q.zero_()
        return out

    run(ATTENTION, scribbling, capsys)
    assert run(ATTENTION, attention, capsys)


# --- robust verdicts ---------------------------------------------------------------------------------------


def test_a_result_on_another_device_names_the_device(capsys):
    result = run(ATTENTION, lambda q, k, v: attention(q, k, v).to("meta"), capsys)
    assert not result
    message = result.message.replace("\n  ", " ")
    assert "a tensor on the device meta, not on cpu where the inputs are" in message


def test_another_default_device_names_it_instead_of_crashing(capsys, monkeypatch):
    """As with torch.set_default_device("cuda"); meta stands for it (its first operations import for
    seconds, so the reader's function here fails as torch would, without running one)."""

    def padding(lengths, S):
        assert torch.get_default_device().type == "meta"
        raise RuntimeError("Expected all tensors to be on the same device, but found meta and cpu")

    monkeypatch.setattr(torch, "get_default_device", lambda: torch.device("meta"))
    result = run("masking/padding-mask", padding, capsys)
    assert not result
    assert "case (small): lengths [2], S=3" in result.message  # the cases are made on the cpu
    assert result.hint.startswith("torch's default device is meta (torch.set_default_device)")


def test_a_slow_function_is_stopped_and_shows_progress(capsys, monkeypatch):
    from qkv.exercises import calls

    monkeypatch.setattr(calls, "BUDGET_S", 0.3)
    monkeypatch.setattr(calls, "PROGRESS_S", 0.1)

    def sleepy(q, k, v):
        time.sleep(5)
        return attention(q, k, v)

    started = time.monotonic()
    result = check(ATTENTION, sleepy)
    printed = capsys.readouterr().out
    assert time.monotonic() - started < 3
    assert not result
    assert "... case 1 of 11 (small): still running after 0 s" in printed
    assert printed.endswith(result.message + "\n")
    assert "sleepy was stopped after 0 s on this case" in result.message.replace("\n  ", " ")


def test_a_budget_the_reader_cannot_catch(capsys, monkeypatch):
    from qkv.exercises import calls

    monkeypatch.setattr(calls, "BUDGET_S", 0.2)

    def stubborn(q, k, v):
        while True:
            with contextlib.suppress(Exception):  # a catch-all does not swallow the budget
                time.sleep(1)

    result = check(ATTENTION, stubborn)
    capsys.readouterr()
    assert "stubborn was stopped" in result.message


def test_system_exit_is_reported_like_any_error(capsys):
    def leaving(q, k, v):
        raise SystemExit(3)

    result = run(ATTENTION, leaving, capsys)
    assert "leaving raised SystemExit: 3" in result.message


def test_keyboard_interrupt_still_interrupts():
    def interrupted(q, k, v):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        check(ATTENTION, interrupted)


def test_a_warning_is_shown_and_never_raised(capsys):
    def batched_t(q, k, v):
        return torch.softmax(q @ k.T * q.size(-1) ** -0.5, -1) @ v

    for _ in range(2):  # torch warns of .T once a process: the checker sees it on every call
        result = run(ATTENTION, batched_t, capsys)
        assert "it warned: UserWarning: The use of `x.T`" in result.message.replace("\n  ", " ")
        assert result.hint.startswith(".T reverses every axis of a batched tensor")


@pytest.mark.parametrize(
    ("name", "wrong", "hint"),
    [
        (  # torch's softmax axis is the last one on 2-D scores: the scale is what is wrong
            ATTENTION,
            lambda q, k, v: F.softmax(q @ k.mT) @ v,
            None,
        ),
        (  # .T of the 1-D v changes nothing: the missing tanh is what is wrong
            "additive-vs-dot-product/additive-scores",
            lambda query, keys, W, U, v: ((query @ W.T)[:, :, None] + (keys @ U.T)[:, None]) @ v.T,
            "tanh is missing: e_ij = v . tanh(W q_i + U k_j)",
        ),
    ],
    ids=["softmax-2d", "T-1d"],
)
def test_a_warning_that_changes_nothing_here_names_no_cause(name, wrong, hint, capsys):
    result = run(name, wrong, capsys)
    assert "  it warned: UserWarning: " in result.message
    assert result.hint == hint


@pytest.mark.parametrize(
    ("name", "wrong", "cost"),
    [
        (
            "flash-attention/online-softmax",
            lambda q, k, v, block_size: attention(q, k, v),
            "more than one block of scores per query",
        ),
        (
            "flash-attention/online-softmax",
            lambda q, k, v, block_size: torch.softmax(q @ k.mT * q.size(-1) ** -0.5, -1) @ v,
            "more than one block of scores per query",
        ),
        (
            "flash-attention/online-softmax",
            lambda q, k, v, block_size: online_softmax(q, k, v, 2 * block_size),
            "more than one block of scores per query",
        ),
        (
            "efficient-attention/linear-attention",
            lambda q, k, v: (lambda w: w @ v / w.sum(-1, keepdim=True))(
                (F.elu(q) + 1) @ (F.elu(k) + 1).mT
            ),
            "the (N, S) scores",
        ),
    ],
    ids=["online-sdpa", "online-full-softmax", "online-two-blocks", "linear-quadratic"],
)
def test_the_full_score_matrix_fails_where_tiles_or_linear_cost_are_asked(
    name, wrong, cost, capsys
):
    result = run(name, wrong, capsys)
    assert not result
    message = result.message.replace("\n  ", " ")
    assert "right values, but your function built a tensor of shape (2, " in message
    assert f"the size of {cost}, which the exercise asks you never to hold" in message


def per_query(query, keys, W, U, v):
    """Right values, one query at a time."""
    rows = [torch.tanh(query[:, i, None] @ W.T + keys @ U.T) @ v for i in range(query.size(1))]
    return torch.stack(rows, 1)  # (B, L, S)


def per_sequence(query, keys, W, U, v):
    """Right values, one sequence of the batch at a time."""
    return torch.stack(
        [additive_scores(query[b, None], keys[b, None], W, U, v)[0] for b in range(len(query))]
    )


@pytest.mark.parametrize(
    ("loop", "counts"),
    [(per_query, "made 10 torch calls on this case and 18 on case 1"), (per_sequence, "case 1")],
    ids=["queries", "batch"],
)
def test_a_loop_fails_where_the_statement_asks_for_none(loop, counts, capsys):
    result = run("additive-vs-dot-product/additive-scores", loop, capsys)
    assert not result
    message = result.message.replace("\n  ", " ")
    assert f"right values, but {loop.__name__} made " in message
    assert counts in message
    assert "as a Python loop's does, where the exercise asks for none" in message


def test_checking_every_right_solution_takes_well_under_a_second(capsys):
    for name, solution in SOLUTIONS.items():  # the first calls: imports and caches warmed
        check(name, solution)
    started = time.process_time()
    for name, solution in SOLUTIONS.items():
        assert check(name, solution)
    elapsed = time.process_time() - started
    capsys.readouterr()
    assert elapsed < 0.5


def test_the_result_is_short_to_print(capsys):
    result = run("masking/causal-mask", causal_mask, capsys)
    assert repr(result) == "<Result masking/causal-mask: passed, 14 of 14 cases passed>"


def test_rope_cases_reach_positions_where_float32_angles_are_off():
    """positions.md: the last cases have positions above 30,000, where float32 angles are off by ~4e-4."""
    from qkv.exercises.layers import rope_cases

    far = [c for c in rope_cases(torch.Generator()) if c.args["positions"].min() > 30_000]
    assert far
    off = 0.0
    for case in far:
        positions, base, D = case.args["positions"], case.args["base"], case.args["x"].size(-1)
        theta = base ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)  # (D/2,)
        exact = positions.double()[:, None] * theta  # (N, D/2) angles
        rounded = positions.float()[:, None] * theta.float()  # as float32 code computes them
        off = max(off, (rounded.double() - exact).abs().max().item())
    assert 3e-4 < off < 6e-4, off  # about 4e-4 radians
