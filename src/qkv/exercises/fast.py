"""The exercises of the fast paths: a cache step, the online softmax, linear attention, merging partials."""

# The articles' names: S for the number of keys.
# ruff: noqa: N806

import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import Tensor

from qkv.cache import KVCache
from qkv.distributed import _merge
from qkv.efficient import linear_attention
from qkv.exercises.exercise import (
    BY_D,
    LOOSE,
    UNSCALED,
    Case,
    Exercise,
    Mistake,
    attend,
    attention_inputs,
    attention_shapes,
    large_scores,
    normal,
)
from qkv.functional import scaled_dot_product_attention

# --- decoding/cache-step -----------------------------------------------------------------------------------


def cache_step(cache_k, cache_v, q, k, v) -> tuple[Tensor, Tensor, Tensor]:
    """Append with `qkv.KVCache`, then attend from q over every cached key."""
    cache = KVCache()
    cache.update(cache_k, cache_v)
    keys, values = cache.update(k, v)  # (B, H, T + 1, D)
    return scaled_dot_product_attention(q, keys, values), keys, values


def cache_cases(gen: torch.Generator) -> list[Case]:
    rows = [  # (label, B, H, T, D, dtype)
        ("empty cache", 1, 1, 0, 4, torch.float64),
        ("one cached token", 1, 1, 1, 4, torch.float64),
        ("heads", 1, 2, 3, 4, torch.float64),
        ("batch and heads", 2, 2, 5, 8, torch.float64),
        ("float32", 2, 3, 4, 2, torch.float32),
    ]
    return [
        Case(
            label,
            {
                "cache_k": normal(gen, B, H, T, D, dtype=dtype),
                "cache_v": normal(gen, B, H, T, D, dtype=dtype),
                "q": normal(gen, B, H, 1, D, dtype=dtype),
                "k": normal(gen, B, H, 1, D, dtype=dtype),
                "v": normal(gen, B, H, 1, D, dtype=dtype),
            },
        )
        for label, B, H, T, D, dtype in rows
    ]


def causal_step(cache_k, cache_v, q, k, v) -> tuple[Tensor, Tensor, Tensor]:
    """Append, then attend with torch's top-left causal mask."""
    keys, values = (
        torch.cat([cache_k, k], dim=2),
        torch.cat([cache_v, v], dim=2),
    )
    return (
        F.scaled_dot_product_attention(q, keys, values, is_causal=True),
        keys,
        values,
    )


FORGETS = (
    "the new token is missing from what q attends: append k and v to the caches first, "
    "then attend over all T + 1 keys"
)


def appended(
    cache_k, cache_v, q, k, v, **kwargs
) -> tuple[Tensor, Tensor, Tensor]:
    keys, values = (
        torch.cat([cache_k, k], dim=2),
        torch.cat([cache_v, v], dim=2),
    )
    return attend(q, keys, values, **kwargs), keys, values


CACHE_STEP = Exercise(
    name="decoding/cache-step",
    signature="fn(cache_k, cache_v, q, k, v)",
    outputs=("out", "cache_k", "cache_v"),
    reference=cache_step,
    cases=cache_cases,
    mistakes=(
        Mistake(
            FORGETS,
            lambda ck, cv, q, k, v: (
                attend(q, ck, cv),
                *appended(ck, cv, q, k, v)[1:],
            ),
        ),
        Mistake(
            "return the caches with the new key and value appended: (B, H, T + 1, D)",
            lambda ck, cv, q, k, v: (appended(ck, cv, q, k, v)[0], ck, cv),
        ),
        Mistake(FORGETS, lambda ck, cv, q, k, v: (attend(q, ck, cv), ck, cv)),
        Mistake(
            "the new key and value go at the end of the cache: torch.cat([cache_k, k], dim=2)",
            lambda ck, cv, q, k, v: appended(k, v, q, ck, cv),
        ),
        Mistake(
            BY_D, lambda *args: appended(*args, scale=1 / args[2].size(-1))
        ),
        Mistake(UNSCALED, lambda *args: appended(*args, scale=1.0)),
        Mistake(
            "is_causal=True aligns the mask top-left, so the one new query sees only the first "
            "key; the newest token may see every key: no mask",
            lambda ck, cv, q, k, v: causal_step(ck, cv, q, k, v),
        ),
        Mistake(
            "the softmax runs over the one query (dim=-2), so every weight is 1: "
            "softmax over the keys, dim=-1",
            lambda *args: appended(*args, dim=-2),
        ),
    ),
)


# --- flash-attention/online-softmax ------------------------------------------------------------------------


def online(
    q,
    k,
    v,
    block_size,
    scale=None,
    rescale=(True, True),
    track_max=True,
    tail=True,
    start_max=-math.inf,
    flip=False,
    divide=True,
):
    """Attention one key block at a time, as readers write it, with their mistakes' knobs.

    `rescale` says whether the running sum and the accumulator are multiplied by `exp(m_old - m_new)`
    (`flip`: by `exp(m_new - m_old)`); the running max starts at `start_max`.
    """
    scale = 1 / math.sqrt(q.size(-1)) if scale is None else scale
    S = k.size(-2)
    # running max (..., L)
    m = torch.full(q.shape[:-1], start_max, dtype=q.dtype)
    total = torch.zeros(q.shape[:-1], dtype=q.dtype)  # running sum (..., L)
    acc = torch.zeros(*q.shape[:-1], v.size(-1), dtype=q.dtype)  # (..., L, Dv)
    stop = {
        True: S,
        False: S - S % block_size,
        "one block less": S - block_size,
    }
    for start in range(0, stop[tail], block_size):
        k_block, v_block = (
            k[..., start : start + block_size, :],
            v[..., start : start + block_size, :],
        )
        scores = q @ k_block.transpose(-2, -1) * scale  # (..., L, n)
        m_new = (
            torch.maximum(m, scores.amax(-1))
            if track_max
            else torch.zeros_like(m)
        )
        alpha = (
            torch.exp((m_new - m) if flip else (m - m_new))
            if track_max
            else torch.ones_like(m)
        )
        p = torch.exp(scores - m_new[..., None])  # (..., L, n)
        total = (total * alpha if rescale[0] else total) + p.sum(-1)
        # (..., L, Dv)
        acc = (acc * alpha[..., None] if rescale[1] else acc) + p @ v_block
        m = m_new
    return acc / total[..., None] if divide else acc


def online_cases(gen: torch.Generator) -> list[Case]:
    rows = [  # (label, batch, L, S, D, Dv, block_size, dtype)
        ("small", (), 2, 4, 4, 4, 2, torch.float64),
        ("S not a multiple of block_size", (), 3, 5, 4, 3, 2, torch.float64),
        ("block_size 1", (), 2, 3, 4, 4, 1, torch.float64),
        ("one block, block_size > S", (), 2, 3, 4, 4, 4, torch.float64),
        ("length 1", (), 1, 1, 4, 4, 2, torch.float64),
        ("batch and heads", (2, 3), 4, 7, 8, 5, 3, torch.float64),
        ("float32", (2, 2), 5, 6, 4, 4, 4, torch.float32),
        ("many keys, small blocks", (2,), 8, 16, 2, 2, 4, torch.float64),
    ]
    cases = [
        Case(
            label,
            {
                **attention_inputs(gen, batch, L, S, D, Dv, dtype),
                "block_size": block,
            },
        )
        for label, batch, L, S, D, Dv, block, dtype in rows
    ]
    # one block of its scores, (2, 8, 4), is as large as k or v, (2, 16, 2); two
    # blocks, (2, 8, 8), are larger than any input, and the full scores twice that
    cases[-1] = dataclasses.replace(
        cases[-1],
        largest=2 * 8 * 8,
        cost="more than one block of scores per query",
    )
    large = [  # (label, L, S, dtype, low, high)
        ("float32, large scores", 3, 7, torch.float32, -30, 30),
        ("float32, every score below -128", 3, 5, torch.float32, 8, 30),
        ("float64, large scores", 2, 5, torch.float64, 20, 60),
    ]
    return [
        *cases,
        *(
            Case(
                label,
                {**large_scores(gen, L, S, dtype, low, high), "block_size": 2},
                LOOSE,
            )
            for label, L, S, dtype, low, high in large
        ),
    ]


NO_RESCALE = (
    "the accumulator is not rescaled when the running max grows: multiply acc and the "
    "running sum by exp(m_old - m_new) before adding the block"
)
ONLINE_SOFTMAX = Exercise(
    name="flash-attention/online-softmax",
    signature="fn(q, k, v, block_size)",
    outputs=("out",),
    reference=lambda q, k, v, block_size: scaled_dot_product_attention(q, k, v),
    cases=online_cases,
    mistakes=(
        Mistake(NO_RESCALE, lambda *args: online(*args, rescale=(True, False))),
        Mistake(
            NO_RESCALE, lambda *args: online(*args, rescale=(False, False))
        ),
        Mistake(NO_RESCALE, lambda *args: online(*args, rescale=(False, True))),
        Mistake(
            "exp overflowed on large scores: keep the running max m and take exp(scores - m_new)",
            lambda *args: online(*args, track_max=False),
        ),
        Mistake(
            "the last, shorter block is skipped when block_size does not divide S: "
            "loop over range(0, S, block_size)",
            lambda *args: online(*args, tail=False),
        ),
        Mistake(
            "the last block is skipped: range(0, S - block_size, block_size) stops "
            "one block early; range(0, S, block_size) reaches every key",
            lambda *args: online(*args, tail="one block less"),
        ),
        Mistake(
            BY_D,
            lambda q, k, v, block_size: online(
                q, k, v, block_size, 1 / q.size(-1)
            ),
        ),
        Mistake(
            UNSCALED,
            lambda q, k, v, block_size: online(q, k, v, block_size, 1.0),
        ),
        Mistake(
            "the running max starts at 0: a row whose scores are all below about -104 (float32) "
            "underflows to 0 / 0; start it at -inf",
            lambda *args: online(*args, start_max=0.0),
        ),
        Mistake(
            "alpha is exp(m_old - m_new), at most 1: it shrinks what was summed under the "
            "old, smaller max",
            lambda *args: online(*args, flip=True),
        ),
        Mistake(
            "the output is not divided by the running sum at the end: return acc / l",
            lambda *args: online(*args, divide=False),
        ),
    ),
)


# --- efficient-attention/linear-attention ------------------------------------------------------------------


def linear_cases(gen: torch.Generator) -> list[Case]:
    cases = [
        Case(label, attention_inputs(gen, *shape))
        for label, *shape in attention_shapes()
    ]
    # scores (2, 12, 16) outnumber the inputs
    watched = attention_inputs(gen, (2,), 12, 16, 2, 3)
    return [
        *cases,
        Case(
            "many keys", watched, largest=2 * 12 * 16, cost="the (N, S) scores"
        ),
    ]


def kernelised(
    q, k, v, phi=lambda x: F.elu(x) + 1, normalised=True, column=True
) -> Tensor:
    """Linear attention as readers write it, with their mistakes' knobs."""
    phi_q, phi_k = phi(q), phi(k)  # (..., L, D), (..., S, D)
    out = phi_q @ (phi_k.transpose(-2, -1) @ v)  # (..., L, Dv)
    if not normalised:
        return out
    z = phi_k.sum(-2)  # (..., D)
    return out / (phi_q @ z[..., None]) if column else out / (phi_q @ z)


LINEAR_ATTENTION = Exercise(
    name="efficient-attention/linear-attention",
    signature="fn(q, k, v)",
    outputs=("out",),
    reference=lambda q, k, v: linear_attention(q, k, v),
    cases=linear_cases,
    mistakes=(
        Mistake(
            "the normaliser is missing: divide by phi(q_i) . sum_j phi(k_j), the sum of "
            "the weights",
            lambda q, k, v: kernelised(q, k, v, normalised=False),
        ),
        Mistake(
            "phi(x) = elu(x) + 1, which is positive; elu(x) alone can be negative",
            lambda q, k, v: kernelised(q, k, v, phi=F.elu),
        ),
        Mistake(
            "that is softmax attention; linear attention replaces exp(q . k / sqrt(D)) "
            "with phi(q) . phi(k), phi(x) = elu(x) + 1",
            attend,
        ),
        Mistake(
            "phi(x) = elu(x) + 1, which is positive everywhere; relu(x) is 0 for every negative x",
            lambda q, k, v: kernelised(q, k, v, phi=F.relu),
        ),
        Mistake(
            "phi_q @ z is (..., N): make it a column, phi_q @ z[..., None], so that each query's "
            "row is divided by its own normaliser",
            lambda q, k, v: kernelised(q, k, v, column=False),
        ),
        Mistake(
            "phi applies to q and k only; v enters as it is",
            lambda q, k, v: kernelised(q, k, F.elu(v) + 1),
        ),
        Mistake(
            "phi(x) = elu(x) + 1, not exp(x): elu(x) + 1 grows like x for x > 0, "
            "exp(x) like the softmax's own weights",
            lambda q, k, v: kernelised(q, k, v, phi=torch.exp),
        ),
        Mistake(
            "linear attention has no 1/sqrt(D) scale: phi(q) and phi(k) of q and k themselves",
            lambda q, k, v: kernelised(q / math.sqrt(q.size(-1)), k, v),
        ),
    ),
)


# --- attention-across-devices/merge-partials ---------------------------------------------------------------


def partials_cases(gen: torch.Generator) -> list[Case]:
    def partials(shape, dtype=torch.float64, std=2.0):
        return {
            "out_a": normal(gen, *shape, dtype=dtype),
            "lse_a": normal(gen, *shape[:-1], dtype=dtype, std=std),
            "out_b": normal(gen, *shape, dtype=dtype),
            "lse_b": normal(gen, *shape[:-1], dtype=dtype, std=std),
        }

    empty = partials((4, 3))
    empty["out_a"][1:3] = 0.0
    # queries 1 and 2 saw no key in block a (a causal ring)
    empty["lse_a"][1:3] = -math.inf
    return [
        Case("small", partials((3, 4))),
        Case("length 1", partials((1, 2))),
        Case("batch and heads", partials((2, 3, 4, 5))),
        Case("a block with no key for some queries", empty),
        Case("float32", partials((2, 4, 3), torch.float32)),
        Case(
            "float32, lse near 100",
            partials((3, 4), torch.float32, std=100.0),
            LOOSE,
        ),
        Case("float64, lse near 1000", partials((3, 4), std=1000.0), LOOSE),
    ]


def merge_naive(out_a, lse_a, out_b, lse_b) -> tuple[Tensor, Tensor]:
    """The merge through exp(lse) itself, which overflows."""
    a, b = lse_a.exp()[..., None], lse_b.exp()[..., None]
    return (a * out_a + b * out_b) / (a + b), torch.log(a + b)[..., 0]


def merge_literal(out_a, lse_a, out_b, lse_b) -> tuple[Tensor, Tensor]:
    """The stable merge, with lse written as the formula reads: log(exp(lse_a) + exp(lse_b))."""
    lse = torch.log(lse_a.exp() + lse_b.exp())
    return torch.exp(lse_a - lse)[..., None] * out_a + torch.exp(lse_b - lse)[
        ..., None
    ] * out_b, lse


def shares(lse_a: Tensor, lse_b: Tensor) -> tuple[Tensor, Tensor]:
    """Each block's share of the softmax sum over the union, `(..., L, 1)`."""
    lse = torch.logaddexp(lse_a, lse_b)
    return torch.exp(lse_a - lse)[..., None], torch.exp(lse_b - lse)[..., None]


LITERAL_LSE = (
    "log(exp(lse_a) + exp(lse_b)) overflowed: write it as torch.logaddexp(lse_a, lse_b), "
    "which subtracts the larger lse first"
)
MERGE_PARTIALS = Exercise(
    name="attention-across-devices/merge-partials",
    signature="fn(out_a, lse_a, out_b, lse_b)",
    outputs=("out", "lse"),
    reference=_merge,
    cases=partials_cases,
    mistakes=(
        Mistake(
            "averaging weighs both blocks alike: weigh each by its share of the softmax sum, "
            "exp(lse_a - lse) and exp(lse_b - lse)",
            lambda oa, la, ob, lb: ((oa + ob) / 2, torch.logaddexp(la, lb)),
        ),
        Mistake(
            "the weights exp(lse_a) and exp(lse_b) must be divided by their sum exp(lse): "
            "weigh by exp(lse_a - lse)",
            lambda oa, la, ob, lb: (
                la.exp()[..., None] * oa + lb.exp()[..., None] * ob,
                torch.logaddexp(la, lb),
            ),
        ),
        Mistake(
            "the weights are swapped: out_a takes exp(lse_a - lse), out_b exp(lse_b - lse)",
            lambda oa, la, ob, lb: (
                shares(la, lb)[1] * oa + shares(la, lb)[0] * ob,
                torch.logaddexp(la, lb),
            ),
        ),
        Mistake(
            "the log-sum-exp of the union is torch.logaddexp(lse_a, lse_b), not the sum (lse_a + lse_b)",
            lambda oa, la, ob, lb: (_merge(oa, la, ob, lb)[0], la + lb),
        ),
        Mistake(
            "the log-sum-exp of the union is torch.logaddexp(lse_a, lse_b), not the larger one",
            lambda oa, la, ob, lb: (
                _merge(oa, la, ob, lb)[0],
                torch.maximum(la, lb),
            ),
        ),
        Mistake(
            "exp(lse) overflowed: weigh by exp(lse_a - lse) with lse = torch.logaddexp(lse_a, "
            "lse_b), which subtracts the larger lse first",
            merge_naive,
        ),
        Mistake(LITERAL_LSE, merge_literal),
        Mistake(  # the output merged stably, the lse as the formula reads
            LITERAL_LSE,
            lambda oa, la, ob, lb: (
                shares(la, lb)[0] * oa + shares(la, lb)[1] * ob,
                torch.log(la.exp() + lb.exp()),
            ),
        ),
        Mistake(
            "lse is (..., L): give the shares an axis, exp(lse_a - lse)[..., None], to weigh each "
            "row of out",
            lambda oa, la, ob, lb: (
                torch.exp(la - torch.logaddexp(la, lb)) * oa
                + torch.exp(lb - torch.logaddexp(la, lb)) * ob,
                torch.logaddexp(la, lb),
            ),
        ),
        Mistake(
            "the shares are a softmax over the two blocks, not over the queries: "
            "softmax(stack([lse_a, lse_b]), dim=0)",
            lambda oa, la, ob, lb: (
                torch.softmax(torch.stack([la, lb]), -1)[0][..., None] * oa
                + torch.softmax(torch.stack([la, lb]), -1)[1][..., None] * ob,
                torch.logaddexp(la, lb),
            ),
        ),
    ),
)
