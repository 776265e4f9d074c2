"""The checker as a tutor: learners' mistakes across every implement exercise, and the verdict each gets.

Each mistake is a small function written as a learner writes it, independently of the checker's models,
with the verdict it must get: a hint that names its cause (`phrase` is part of that hint), or, where no
cause is certain (`phrase` None), no hint at all and a verdict that says what it sees (a shape, a dtype,
an error and its line, the grids of a mask, an `observed:` line). Never a pass, never a hint that names
another cause. `kind` sorts a verdict into the issue's five kinds; the counts over this list are in the
report of issue 39.
"""

# The learners' functions use the articles' names: L, S, D, H, W, U.
# ruff: noqa: N803, N806

import math

import pytest
import torch
import torch.nn.functional as F

import qkv
from qkv.exercises import check
from qkv.exercises.calls import copies
from qkv.exercises.catalogue import EXERCISES
from qkv.exercises.checker import SEED, _all_same

ATT = "queries-keys-values/attention"
SOFT = "scaling/stable-softmax"
CAUSAL = "masking/causal-mask"
PAD = "masking/padding-mask"
ADD = "additive-vs-dot-product/additive-scores"
SPLIT = "multi-head-attention/split-heads"
MERGE = "multi-head-attention/merge-heads"
ROPE = "positions/rope"
NORM = "transformer-block/layer-norm"
CACHE = "decoding/cache-step"
TOP_P = "small-gpt/top-p"
PAGES = "serving/gather-pages"
ONLINE = "flash-attention/online-softmax"
LINEAR = "efficient-attention/linear-attention"
DELTA = "recurrence/delta-step"
INDEXER = "sparse-attention/indexer-scores"
WINDOW = "long-context/streaming-window"
PARTIALS = "attention-across-devices/merge-partials"

VAGUE = "(vague)"  # a verdict that says no more than "wrong values": at most 10% of the list

# what a verdict shows beyond "wrong values" when it names no cause
SHOWN = (
    "wrong shape",
    "wrong dtype",
    " raised ",
    " returned ",
    "observed:",
    "changed its input",
    "built a tensor",
    "torch calls on this case",
    "it warned:",
    "was stopped",
    "  expected ",
)


def kind(result, phrase: str | None) -> str:
    """pinpointed, helpful, vague, wrong cause or flawed pass: the issue's five kinds of verdict."""
    if result.passed:
        return "flawed pass"
    if result.hint is not None:
        return "pinpointed" if phrase is not None and phrase in result.hint else "wrong cause"
    return "helpful" if any(shown in result.message for shown in SHOWN) else "vague"


# --- learners' pieces --------------------------------------------------------------------------------------


def attn(q, k, v, scale=None, dim=-1):
    scale = q.size(-1) ** -0.5 if scale is None else scale
    return torch.softmax(q @ k.transpose(-2, -1) * scale, dim=dim) @ v


def exp_norm(s):
    e = s.exp()
    return e / e.sum(-1, keepdim=True)


def tri(L, S, d):
    return torch.ones(L, S, dtype=torch.bool).tril(d)


def off(L, S, a):
    return S - L if a == "bottom_right" else 0


def real(n, S):
    return torch.arange(S) < n[:, None]  # (B, S)


def bahdanau(query, keys, W, U):
    return (query @ W.T)[:, :, None, :] + (keys @ U.T)[:, None, :, :]  # (B, L, S, A)


def rope_with(x, positions, base, exps=None, dtype=torch.float64, swap=False, half=True):
    D = x.size(-1)
    exps = -torch.arange(0, D, 2, dtype=torch.float64) / D if exps is None else exps
    theta = (base ** exps.double()).to(dtype)
    ang = positions.to(dtype)[:, None] * theta
    c, s = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    if swap:
        c, s = s, c
    if half:
        x1, x2 = x[..., : D // 2], x[..., D // 2 :]
        return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], -1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * c - x2 * s, x1 * s + x2 * c], -1).flatten(-2)


def ln(x, w, b, eps, var=None, mean=None, dim=-1):
    mean = x.mean(dim, keepdim=True) if mean is None else mean
    var = ((x - mean) ** 2).mean(dim, keepdim=True) if var is None else var
    return (x - mean) / torch.sqrt(var + eps) * w + b


def step(ck, cv, q, k, v, first=False, **kw):
    K = torch.cat([k, ck] if first else [ck, k], dim=2)
    V = torch.cat([v, cv] if first else [cv, v], dim=2)
    return attn(q, K, V, **kw), K, V


def nucleus(probs, p, keep=None, descending=True, back="scatter", norm=True, axis=-1):
    vals, idx = probs.sort(-1, descending=descending)
    mass = vals.cumsum(axis)
    kept = vals * (mass - vals < p if keep is None else keep(mass, vals, p))
    if norm:
        kept = kept / kept.sum(-1, keepdim=True)
    if back == "scatter":
        return torch.zeros_like(probs).scatter(-1, idx, kept)
    return kept.gather(-1, idx) if back == "gather" else kept


def nucleus_mask_unsorted(probs, p):
    ordered = probs.sort(-1, descending=True).values
    keep = ordered.cumsum(-1) - ordered < p  # in sorted order
    kept = probs * keep  # on the tokens in their own order
    return kept / kept.sum(-1, keepdim=True)


def tiles(
    q, k, v, n, m0=-math.inf, rescale=(True, True), keep_max=True, stop=None, flip=False, div=True
):
    scale = q.size(-1) ** -0.5
    m = torch.full(q.shape[:-1], m0, dtype=q.dtype)
    total = torch.zeros(q.shape[:-1], dtype=q.dtype)
    acc = torch.zeros(*q.shape[:-1], v.size(-1), dtype=q.dtype)
    S = k.size(-2) if stop is None else stop(k.size(-2), n)
    for i in range(0, S, n):
        s = q @ k[..., i : i + n, :].transpose(-2, -1) * scale
        new = torch.maximum(m, s.amax(-1)) if keep_max else m
        alpha = torch.exp(new - m) if flip else torch.exp(m - new)
        p = torch.exp(s - new[..., None])
        total = (total * alpha if rescale[0] else total) + p.sum(-1)
        acc = (acc * alpha[..., None] if rescale[1] else acc) + p @ v[..., i : i + n, :]
        m = new
    return acc / total[..., None] if div else acc


def phi(x):
    return F.elu(x) + 1


def linear(q, k, v, f=phi, z_col=True):
    fq, fk = f(q), f(k)
    num = fq @ (fk.transpose(-2, -1) @ v)
    z = fk.sum(-2)
    return num / (fq @ z[..., None] if z_col else fq @ z)


def delta(state, q, k, v, g, beta, kind="right"):
    """One gated delta rule step as a learner writes it: (o, new state)."""
    decay = {"g": g, "none": torch.ones_like(g)}.get(kind, g.exp())[..., None, None]
    decayed = decay * state
    recall = k.unsqueeze(-2) @ (state if kind == "stale recall" else decayed)  # (..., 1, Dv)
    written = v if kind == "value" else v - recall.squeeze(-2)
    if kind != "no beta":
        written = written * beta[..., None]
    new = decayed + k[..., :, None] * written[..., None, :]
    read = decayed if kind == "early read" else new
    return (q.unsqueeze(-2) @ read).squeeze(-2), new


def stream(x, window, sinks, recent=None):
    T = x.size(-2)
    if window >= T:
        return x
    recent = window - sinks if recent is None else recent
    return torch.cat([x[..., :sinks, :], x[..., T - recent :, :]], -2)


def index(q, k, w, relu=torch.relu, scale=True, weighted=True, shift=None, fill=-math.inf):
    """A lightning indexer's causal scores as a learner writes them: `shift` is the mask's diagonal."""
    L, S, D = q.size(-2), k.size(-2), q.size(-1)
    dots = torch.einsum("bhld,bsd->bhls", q, k) / (D**0.5 if scale else 1)
    heads = relu(dots) * (w.permute(0, 2, 1)[..., None] if weighted else 1)  # (B, H, L, S)
    future = torch.ones(L, S, dtype=torch.bool).triu(1 + (S - L if shift is None else shift))
    return heads.sum(1).masked_fill(future, fill)


def merged(oa, la, ob, lb):
    lse = torch.logaddexp(la, lb)
    return torch.exp(la - lse)[..., None] * oa + torch.exp(lb - lse)[..., None] * ob, lse


def times(S, x):
    """S^T x for a state (..., Dk, Dv) and a vector (..., Dk), as a row times the state."""
    return (x.unsqueeze(-2) @ S).squeeze(-2)


def outer(a, b):
    return a.unsqueeze(-1) @ b.unsqueeze(-2)  # (..., len a, len b)


def delta_kept_old(state, q, k, v, g, beta):
    decayed = state * g.exp()[..., None, None]
    error = (v - times(decayed, k)) * beta[..., None]
    new = state + outer(k, error)  # the old state kept
    return times(new, q), new


def delta_decayed_last(state, q, k, v, g, beta):
    error = (v - times(state, k)) * beta[..., None]
    new = (state + outer(k, error)) * g.exp()[..., None, None]
    return times(new, q), new


def delta_with(
    state, q, k, v, g, beta, decay=torch.exp, rate=lambda b: b, recall=times, read=times
):
    decayed = state * decay(g)[..., None, None]
    error = (v - recall(decayed, k)) * rate(beta)[..., None]
    new = decayed + outer(k, error)
    return read(new, q), new


def plain(S, x):  # S x, as for a (Dv, Dk) state
    return (S @ x.unsqueeze(-1)).squeeze(-1)


def delta_error_k(state, q, k, v, g, beta):
    decayed = state * g.exp()[..., None, None]
    error = (v - times(decayed, k)) * beta[..., None]
    new = decayed + outer(error, k)  # (..., Dv, Dk)
    return times(new, q), new


def delta_beta_on_v(state, q, k, v, g, beta):
    decayed = state * g.exp()[..., None, None]
    new = decayed + outer(k, beta[..., None] * v - times(decayed, k))
    return times(new, q), new


def delta_in_place(state, q, k, v, g, beta):
    state *= g.exp()[..., None, None]
    state += outer(k, (v - times(state, k)) * beta[..., None])
    return times(state, q), state


def delta_flat_g(state, q, k, v, g, beta):
    decayed = state * g.exp()  # g without its two axes: broadcasts against Dv
    new = decayed + outer(k, (v - times(decayed, k)) * beta[..., None])
    return times(new, q), new


def delta_vector_matrix(state, q, k, v, g, beta):
    decayed = state * g.exp()[..., None, None]
    new = decayed + outer(k, (v - k @ decayed) * beta[..., None])  # k @ S: (H, Dk) @ (H, Dk, Dv)
    return q @ new, new


def future(L, S, d=1):
    return torch.ones(L, S, dtype=torch.bool).triu(S - L + d)  # True: after the query


def heads_relu(q, k):
    return torch.relu(q @ k[:, None].mT / q.size(-1) ** 0.5)  # (B, H, L, S)


def weighted(q, k, w):
    return (heads_relu(q, k) * w.permute(0, 2, 1)[..., None]).sum(1)  # (B, L, S)


def masked(scores, hide, fill=-math.inf):
    return scores.masked_fill(hide, fill)


def bahdanau_per_pair(query, keys, W, U, v):
    """Right values, one pair at a time: the loop the statement asks to avoid."""
    B, L, S = query.size(0), query.size(1), keys.size(1)
    scores = torch.empty(B, L, S, dtype=query.dtype)
    for i in range(L):
        for j in range(S):
            scores[:, i, j] = torch.tanh(query[:, i] @ W.T + keys[:, j] @ U.T) @ v
    return scores


def right_attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


def full_softmax_tiled(q, k, v, block_size):
    """Tiles in name only: the whole score matrix at once."""
    return torch.softmax(q @ k.transpose(-2, -1) / q.size(-1) ** 0.5, -1) @ v


def quadratic_linear(q, k, v):
    w = phi(q) @ phi(k).transpose(-2, -1)  # (..., N, S)
    return w @ v / w.sum(-1, keepdim=True)


def scaling_in_place(q, k, v):
    q *= q.size(-1) ** -0.5  # the caller's q changes
    return torch.softmax(q @ k.transpose(-2, -1), -1) @ v


def leaving(q, k, v):
    raise SystemExit(1)  # a script's exit, copied into a notebook


def softmax_in_place(scores):
    scores -= scores.amax(-1, keepdim=True)
    scores.exp_()
    return scores / scores.sum(-1, keepdim=True)


# --- the list: (exercise, learner's function, a phrase of the right hint, or None) -------------------------

MISTAKES = [
    # queries-keys-values/attention
    (ATT, lambda q, k, v: attn(q, k, v, scale=1 / q.size(-1)), "divided by d_k"),
    (ATT, lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1), -1) @ v, "not scaled"),
    (ATT, lambda q, k, v: attn(q, k, v, scale=v.size(-1) ** -0.5), "v's size Dv"),
    (ATT, lambda q, k, v: attn(q, k, v, dim=-2), "over the queries"),
    (ATT, lambda q, k, v: attn(k, q, v), "keys by queries"),
    (ATT, lambda q, k, v: exp_norm(q @ k.transpose(-2, -1) / q.size(-1) ** 0.5) @ v, "overflowed"),
    (ATT, lambda q, k, v: torch.softmax(q @ k.mT / q.size(-1) ** 0.5, -1), "attention weights"),
    (ATT, lambda q, k, v: torch.softmax(q @ k.T / q.size(-1) ** 0.5, -1) @ v, ".T reverses"),
    (ATT, lambda q, k, v: attn(q, k, v, scale=q.size(-1) ** 0.5), "multiplied by sqrt(d_k)"),
    (ATT, lambda q, k, v: attn(q, k, v, dim=0), "first axis (dim=0)"),
    (ATT, lambda q, k, v: F.softmax(q @ k.mT / q.size(-1) ** 0.5) @ v, "without dim="),
    (ATT, lambda q, k, v: F.softmax(q @ k.mT) @ v, None),  # two slips: no scale, no dim
    (ATT, lambda q, k, v: attn(q, k, v).mT, "transposed"),
    (ATT, lambda q, k, v: attn(q.float(), k.float(), v.float()), None),
    (
        ATT,
        lambda q, k, v: torch.zeros(*q.shape[:-1], v.size(-1), dtype=q.dtype),
        "every value is 0",
    ),
    (ATT, lambda q, k, v: attn(q, k, v) * 2, None),
    (ATT, lambda q, k, v: q @ k.transpose(-2, -1) / q.size(-1) ** 0.5 @ v, "softmax is missing"),
    (ATT, scaling_in_place, None),
    (ATT, lambda q, k, v: attn(q, k, v).to("meta"), None),
    (ATT, leaving, None),
    (ATT, lambda q, k, v: attn(q, k, v, scale=q.shape[0] ** -0.5), "size of another axis"),
    (ATT, lambda q, k, v: attn(q, k, v, scale=q.size(1) ** -0.5), "size of another axis"),
    (ATT, lambda q, k, v: attn(q, k, v, dim=1), "over axis 1"),
    (
        ATT,
        lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1), -1) @ v / q.size(-1) ** 0.5,
        "output is divided by sqrt(D)",
    ),
    (ATT, lambda q, k, v: torch.softmax(q @ k.transpose(0, 1) / q.size(-1) ** 0.5, -1) @ v, None),
    # scaling/stable-softmax
    (SOFT, exp_norm, "overflowed"),
    (SOFT, lambda s: exp_norm(s - s.max()), "not the max of the whole"),
    (SOFT, lambda s: exp_norm(s - s.max(dim=-1).values), "drops the axis"),
    (SOFT, lambda s: torch.softmax(s, dim=0), "normalises the wrong axis"),
    (SOFT, lambda s: torch.softmax(s, dim=-2), "normalises the wrong axis"),
    (
        SOFT,
        lambda s: (
            (s - s.amax(-1, keepdim=True)).exp() / (s - s.amax(-1, keepdim=True)).exp().sum(-1)
        ),
        "sum(dim=-1) drops the axis",
    ),
    (SOFT, lambda s: exp_norm(s - s.amin(-1, keepdim=True)), "not its min"),
    (
        SOFT,
        lambda s: (s - s.amax(-1, keepdim=True)).exp() / s.exp().sum(-1, keepdim=True),
        "their sum is not",
    ),
    (SOFT, lambda s: (s - s.amax(-1, keepdim=True)).exp(), "not divided by their sums"),
    (SOFT, lambda s: torch.log_softmax(s, -1), "log_softmax"),
    (SOFT, softmax_in_place, None),
    (SOFT, lambda s: torch.softmax(s.float(), -1), None),
    (SOFT, lambda s: exp_norm(s - s.amax(-1, keepdim=True)).flip(-1), None),
    (SOFT, lambda s: exp_norm(s - s.mean(-1, keepdim=True)), "not its mean"),
    (SOFT, lambda s: (s - s.max(-1, keepdim=True)).exp(), None),
    (SOFT, lambda s: s.exp() / s.exp().sum(), None),
    # masking/causal-mask
    (CAUSAL, lambda L, S, a: ~tri(L, S, off(L, S, a)), "swapped"),
    (CAUSAL, lambda L, S, a: tri(L, S, 0), "the top-left mask"),
    (CAUSAL, lambda L, S, a: tri(L, S, S - L), "the bottom-right mask"),
    (CAUSAL, lambda L, S, a: tri(L, S, L - S if a == "bottom_right" else 0), "not by L - S"),
    (CAUSAL, lambda L, S, a: tri(L, S, off(L, S, a) - 1), "diagonal is masked"),
    (CAUSAL, lambda L, S, a: torch.ones(L, S).triu(off(L, S, a)).bool(), "upper triangle"),
    (CAUSAL, lambda L, S, a: tri(L, S, S - L if a == "top_left" else 0), "alignments are swapped"),
    (CAUSAL, lambda L, S, a: tri(L, S, S - L if a == "bottom-right" else 0), "the top-left mask"),
    (
        CAUSAL,
        lambda L, S, a: torch.zeros(L, S).masked_fill(~tri(L, S, off(L, S, a)), -math.inf),
        None,
    ),
    (CAUSAL, lambda L, S, a: torch.ones(L, S).tril(off(L, S, a)), None),
    (CAUSAL, lambda L, S, a: ~torch.triu(torch.ones(L, S, diagonal=1)).bool(), "diagonal= belongs"),
    (CAUSAL, lambda L, S: tri(L, S, 0), "check calls fn(L, S, alignment)"),
    (CAUSAL, lambda L, S, a: tri(L, S, off(L, S, a) + 1), None),
    # masking/padding-mask
    (PAD, lambda n, S: ~real(n, S)[:, None, None, :], "swapped"),
    (PAD, real, "that is (B, S)"),
    (PAD, lambda n, S: real(n, S)[:, None, :, None], "hides queries"),
    (PAD, lambda n, S: real(n, S)[:, None, :], "lines B up with the heads"),
    (PAD, lambda n, S: (torch.arange(S) <= n[:, None])[:, None, None, :], "too many"),
    (
        PAD,
        lambda n, S: (torch.arange(1, S + 1) < n[:, None])[:, None, None, :],
        "real key is dropped",
    ),
    (PAD, lambda n, S: (torch.arange(S) < n)[:, None, None, :], "an axis of their own"),
    (
        PAD,
        lambda n, S: real(n, S)[:, None, :, None] & real(n, S)[:, None, None, :],
        "the padded queries too",
    ),
    (PAD, lambda n, S: real(n, S)[:, None, None, :].float(), None),
    (PAD, lambda n, S: (torch.arange(S)[:, None] < n)[:, None, None, :], None),
    (PAD, lambda n, S: real(n, S)[:, None, None, :].to(n.dtype), None),
    # additive-vs-dot-product/additive-scores
    (ADD, lambda query, keys, W, U, v: bahdanau(query, keys, W, U) @ v, "tanh is missing"),
    (
        ADD,
        lambda query, keys, W, U, v: (
            (torch.tanh(query @ W.T)[:, :, None] + torch.tanh(keys @ U.T)[:, None]) @ v
        ),
        "a sum of tanhs",
    ),
    (
        ADD,
        lambda query, keys, W, U, v: (
            torch.tanh((query @ W)[:, :, None] + (keys @ U.T)[:, None]) @ v
        ),
        "query @ W.T",
    ),
    (
        ADD,
        lambda query, keys, W, U, v: (
            torch.tanh((query @ W.T)[:, :, None] + (keys @ U)[:, None]) @ v
        ),
        "query @ W.T",
    ),
    (ADD, lambda query, keys, W, U, v: bahdanau(query, keys, W, U).tanh().sum(-1), "plain sum"),
    (
        ADD,
        lambda query, keys, W, U, v: torch.tanh(bahdanau(query, keys, W, U) @ v),
        "after the tanh",
    ),
    (
        ADD,
        lambda query, keys, W, U, v: torch.softmax(bahdanau(query, keys, W, U).tanh() @ v, -1),
        "attention weights",
    ),
    (
        ADD,
        lambda query, keys, W, U, v: (
            torch.tanh((query @ W.T)[:, None, :, :] + (keys @ U.T)[:, :, None, :]) @ v
        ),
        "transposed",
    ),
    (
        ADD,
        lambda query, keys, W, U, v: bahdanau(query, keys, W, U).tanh() @ v / W.size(0) ** 0.5,
        None,
    ),
    (ADD, bahdanau_per_pair, None),
    (ADD, lambda query, keys, W, U, v: bahdanau(query, keys, W, U) @ v.T, "tanh is missing"),
    # multi-head-attention/split-heads
    (SPLIT, lambda x, H: x.view(x.size(0), H, x.size(1), -1), "mixes tokens into heads"),
    (SPLIT, lambda x, H: x.view(*x.shape[:2], -1, H).permute(0, 3, 1, 2), "side by side"),
    (SPLIT, lambda x, H: x.view(*x.shape[:2], H, -1), "brings the heads before"),
    (SPLIT, lambda x, H: x.view(*x.shape[:2], H, -1).permute(0, 2, 3, 1), "transposed"),
    (SPLIT, lambda x, H: x.view(x.size(0) * H, x.size(1), -1), None),
    (SPLIT, lambda x, H: x.view(*x.shape[:2], H, -1).transpose(1, 2).flip(1), None),
    (SPLIT, lambda x, H: torch.stack(x.chunk(H, -1), 0), None),
    (SPLIT, lambda x, H: x.reshape(*x.shape[:2], H, -1).transpose(1, 3), None),
    # multi-head-attention/merge-heads
    (MERGE, lambda x: x.reshape(x.size(0), x.size(2), -1), "mixes heads and tokens"),
    (MERGE, lambda x: x.permute(0, 2, 3, 1).reshape(x.size(0), x.size(2), -1), "stay side by side"),
    (MERGE, lambda x: x.transpose(1, 2), "flatten the last two"),
    (MERGE, lambda x: x.transpose(1, 2).view(x.size(0), x.size(2), -1), "view needs a contiguous"),
    (MERGE, lambda x: x.sum(1), None),
    (MERGE, lambda x: x.flatten(1, 2), None),
    (MERGE, lambda x: torch.cat(x.unbind(1), 1), None),
    # positions/rope
    (ROPE, lambda x, p, base: rope_with(x, p, base, half=False), "interleaved layout"),
    (ROPE, lambda x, p, base: rope_with(x, -p, base), "the wrong way"),
    (
        ROPE,
        lambda x, p, base: rope_with(
            x, p, base, -torch.arange(x.size(-1) // 2).double() / x.size(-1)
        ),
        "not base**(-i/D)",
    ),
    (ROPE, lambda x, p, base: rope_with(x, torch.arange(x.size(-2)), base), "row index"),
    (ROPE, lambda x, p, base: rope_with(x, p, 10000.0), "the `base` argument"),
    (ROPE, lambda x, p, base: rope_with(x, p, base, dtype=torch.float32), "in float32"),
    (ROPE, lambda x, p, base: rope_with(x, p, base, swap=True), "cos and sin are swapped"),
    (ROPE, lambda x, p, base: rope_with(x, p + 1, base), "one position too many"),
    (ROPE, lambda x, p, base: rope_with(x, p - 1, base), "one position too few"),
    (
        ROPE,
        lambda x, p, base: rope_with(
            x, p, base, torch.arange(0, x.size(-1), 2).double() / x.size(-1)
        ),
        "exponent must be negative",
    ),
    (
        ROPE,
        lambda x, p, base: x.clone(),
        "the input x, unchanged",
    ),
    (ROPE, lambda x, p, base: x * (p[:, None] * base ** (-1.0)).cos().to(x.dtype), None),
    # transformer-block/layer-norm
    (NORM, lambda x, w, b, eps: ln(x, w, b, eps, var=x.var(-1, keepdim=True)), "unbiased variance"),
    (
        NORM,
        lambda x, w, b, eps: (
            (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True, correction=0) + eps) * w + b
        ),
        "inside the square root",
    ),
    (
        NORM,
        lambda x, w, b, eps: (
            (x - x.mean(-1, keepdim=True)) / (x.var(-1, keepdim=True, correction=0) + eps) * w + b
        ),
        "not by the variance",
    ),
    (NORM, lambda x, w, b, eps: ln(x, 1.0, 0.0, eps), "weight and bias are missing"),
    (NORM, lambda x, w, b, eps: ln(x, b, w, eps), "weight and bias are swapped"),
    (NORM, lambda x, w, b, eps: ln(x, w, b, eps, dim=0), "the last axis"),
    (
        NORM,
        lambda x, w, b, eps: ln(
            x, w, b, eps, var=(x**2).mean(-1, keepdim=True) - x.mean(-1, keepdim=True) ** 2
        ),
        "loses its digits",
    ),
    (NORM, lambda x, w, b, eps: ln(x, w, b, 0.0), "eps is missing"),
    (
        NORM,
        lambda x, w, b, eps: (x - x.mean()) / torch.sqrt(x.var(correction=0) + eps) * w + b,
        "the whole tensor",
    ),
    (NORM, lambda x, w, b, eps: (x - x.mean(-1)) / torch.sqrt(x.var(-1) + eps) * w + b, None),
    (NORM, lambda x, w, b, eps: ln(x * w + b, 1.0, 0.0, eps), "after normalising"),
    (NORM, lambda x, w, b, eps: ln(x, w, b, eps, dim=1), "the last axis"),
    (
        NORM,
        lambda x, w, b, eps: (
            (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True, correction=0))
            + eps * w
            + b
        ),
        "brackets are missing",
    ),
    # decoding/cache-step
    (
        CACHE,
        lambda ck, cv, q, k, v: (attn(q, ck, cv), *step(ck, cv, q, k, v)[1:]),
        "new token is missing",
    ),
    (
        CACHE,
        lambda ck, cv, q, k, v: (step(ck, cv, q, k, v)[0], ck, cv),
        "new key and value appended",
    ),
    (CACHE, lambda ck, cv, q, k, v: step(ck, cv, q, k, v, first=True), "go at the end"),
    (CACHE, lambda ck, cv, q, k, v: step(ck, cv, q, k, v, scale=1 / q.size(-1)), "divided by d_k"),
    (CACHE, lambda ck, cv, q, k, v: step(ck, cv, q, k, v, scale=1.0), "not scaled"),
    (
        CACHE,
        lambda ck, cv, q, k, v: (
            F.scaled_dot_product_attention(
                q, torch.cat([ck, k], 2), torch.cat([cv, v], 2), is_causal=True
            ),
            torch.cat([ck, k], 2),
            torch.cat([cv, v], 2),
        ),
        "is_causal=True",
    ),
    (CACHE, lambda ck, cv, q, k, v: step(ck, cv, q, k, v, dim=-2), "over the one query"),
    (CACHE, lambda ck, cv, q, k, v: step(ck, cv, q, k, v)[0], None),
    (
        CACHE,
        lambda ck, cv, q, k, v: (
            attn(q, torch.cat([ck, k], -1), torch.cat([cv, v], -1)),
            torch.cat([ck, k], -1),
            torch.cat([cv, v], -1),
        ),
        None,
    ),
    (
        CACHE,
        lambda ck, cv, q, k, v: (
            attn(q, torch.cat([ck, k], 1), torch.cat([cv, v], 1)),
            torch.cat([ck, k], 1),
            torch.cat([cv, v], 1),
        ),
        None,
    ),
    # small-gpt/top-p
    (TOP_P, lambda probs, p: nucleus(probs, p, keep=lambda m, v, p: m <= p), "past p"),
    (TOP_P, lambda probs, p: nucleus(probs, p, norm=False), "sum to 1"),
    (TOP_P, lambda probs, p: nucleus(probs, p, back="none"), "sorted order"),
    (TOP_P, lambda probs, p: nucleus(probs, p, descending=False), "least probable"),
    (TOP_P, lambda probs, p: nucleus(probs, p, axis=0), "cumulative sum runs over the wrong axis"),
    (TOP_P, lambda probs, p: nucleus(probs, p, back="gather"), "gather reads"),
    (
        TOP_P,
        lambda probs, p: nucleus(probs, p, keep=lambda m, v, p: m - v >= p),
        "nucleus is zeroed",
    ),
    (TOP_P, lambda probs, p: nucleus(probs, p, norm=False) / p, "not by p"),
    (TOP_P, lambda probs, p: nucleus(probs, p, keep=lambda m, v, p: m < p), "past p"),
    (TOP_P, lambda probs, p: torch.where(probs >= p, probs, 0.0), None),
    (TOP_P, nucleus_mask_unsorted, "mask is in sorted order"),
    # serving/gather-pages
    (PAGES, lambda pg, t, n: pg[: len(t)].transpose(0, 1).flatten(1, 2)[:, :n], "first pages"),
    (
        PAGES,
        lambda pg, t, n: pg[t].permute(1, 2, 0, 3).reshape(pg.size(1), -1, pg.size(3))[:, :n],
        "interleaved",
    ),
    (
        PAGES,
        lambda pg, t, n: pg[t].reshape(pg.size(1), -1, pg.size(3))[:, :n],
        "heads and the pages",
    ),
    (PAGES, lambda pg, t, n: pg[t].transpose(0, 1).flatten(1, 2), "empty slots"),
    (
        PAGES,
        lambda pg, t, n: (
            pg[torch.isin(torch.arange(len(pg)), t)].transpose(0, 1).flatten(1, 2)[:, :n]
        ),
        "the pool's order",
    ),
    (PAGES, lambda pg, t, n: pg[t].flatten(0, 2)[:n], None),
    (PAGES, lambda pg, t, n: pg[t].transpose(0, 1).flatten(1, 2)[:, : n - 1], None),
    (PAGES, lambda pg, t, n: pg[t].transpose(0, 1).flatten(1, 2)[:, 1 : n + 1], None),
    (PAGES, lambda pg, t, n: pg[t].transpose(0, 1).flatten(1, 2)[:, -n:], None),
    # flash-attention/online-softmax
    (ONLINE, lambda q, k, v, n: tiles(q, k, v, n, rescale=(True, False)), "not rescaled"),
    (ONLINE, lambda q, k, v, n: tiles(q, k, v, n, rescale=(False, False)), "not rescaled"),
    (ONLINE, lambda q, k, v, n: tiles(q, k, v, n, m0=0.0, keep_max=False), "overflowed"),
    (ONLINE, lambda q, k, v, n: tiles(q, k, v, n, stop=lambda S, n: S // n * n), "shorter block"),
    (ONLINE, lambda q, k, v, n: tiles(q * q.size(-1) ** -0.5, k, v, n), "divided by d_k"),
    (ONLINE, lambda q, k, v, n: tiles(q * q.size(-1) ** 0.5, k, v, n), "not scaled"),
    (ONLINE, lambda q, k, v, n: tiles(q, k, v, n, m0=0.0), "starts at 0"),
    (ONLINE, lambda q, k, v, n: tiles(q, k, v, n, flip=True), "at most 1"),
    (ONLINE, lambda q, k, v, n: tiles(q, k, v, n, div=False), "not divided by the running sum"),
    (ONLINE, full_softmax_tiled, None),
    (ONLINE, lambda q, k, v, n: right_attention(q, k, v), None),
    (ONLINE, lambda q, k, v, n: tiles(q, k, v, n, stop=lambda S, n: S - n), "one block early"),
    # efficient-attention/linear-attention
    (LINEAR, lambda q, k, v: phi(q) @ (phi(k).mT @ v), "normaliser is missing"),
    (LINEAR, lambda q, k, v: linear(q, k, v, f=F.elu), "elu(x) alone"),
    (LINEAR, right_attention, "that is softmax attention"),
    (LINEAR, lambda q, k, v: linear(q, k, v, f=F.relu), "relu(x) is 0"),
    (LINEAR, lambda q, k, v: linear(q, k, v, z_col=False), "make it a column"),
    (LINEAR, lambda q, k, v: linear(q, k, phi(v)), "q and k only"),
    (LINEAR, lambda q, k, v: linear(q * q.size(-1) ** -0.5, k, v), "no 1/sqrt(D)"),
    (LINEAR, quadratic_linear, None),
    (LINEAR, lambda q, k, v: linear(q, k, v, f=torch.exp), "not exp(x)"),
    # recurrence/delta-step
    (DELTA, lambda *args: delta(*args, kind="value"), "writes the value"),
    (DELTA, lambda *args: delta(*args, kind="stale recall"), "before the decay"),
    (DELTA, lambda *args: delta(*args, kind="early read"), "before this token's write"),
    (DELTA, lambda *args: delta(*args, kind="g"), "not by g"),
    (DELTA, lambda *args: delta(*args, kind="none"), "not decayed"),
    (DELTA, lambda *args: delta(*args, kind="no beta"), "written whole"),
    (DELTA, lambda *args: delta(*args)[0], None),
    (DELTA, lambda *args: (delta(*args)[0], delta(*args)[1].mT), None),
    (DELTA, delta_kept_old, "state before the decay"),
    (DELTA, delta_decayed_last, "decayed after the write"),
    (DELTA, lambda *args: delta_with(*args, decay=lambda g: torch.exp(-g)), "not exp(-g)"),
    (DELTA, lambda *args: delta_with(*args, recall=plain), "recall S'^T k"),
    (DELTA, lambda *args: delta_with(*args, read=plain), "read S_t^T q"),
    (DELTA, lambda *args: delta_with(*args, recall=plain, read=plain), "S k sums over"),
    (DELTA, delta_error_k, "k e^T"),
    (DELTA, delta_beta_on_v, "not the value alone"),
    (DELTA, lambda *args: delta_with(*args, rate=torch.sigmoid), "without a sigmoid"),
    (
        DELTA,
        lambda state, q, k, v, g, beta: delta_with(state, q / q.size(-1) ** 0.5, k, v, g, beta),
        "already scaled",
    ),
    (DELTA, delta_in_place, None),
    (DELTA, delta_flat_g, None),
    (DELTA, delta_vector_matrix, None),
    (DELTA, lambda *args: delta_with(*args)[::-1], None),
    # sparse-attention/indexer-scores
    (INDEXER, lambda q, k, w: index(q, k, w, relu=lambda x: x), "ReLU is missing"),
    (
        INDEXER,
        lambda q, k, w: torch.relu(index(q, k, w, relu=lambda x: x, fill=0.0)).masked_fill(
            index(q, k, w).isinf(), -math.inf
        ),
        "not on the sum",
    ),
    (INDEXER, lambda q, k, w: index(q, k, w, scale=False), "not scaled"),
    (INDEXER, lambda q, k, w: index(q, k, w, weighted=False), "weights are left out"),
    (INDEXER, lambda q, k, w: index(q, k, w, shift=0), "bottom-right causal mask"),
    (INDEXER, lambda q, k, w: index(q, k, w, fill=0.0), "not 0"),
    (INDEXER, lambda q, k, w: torch.relu(q @ k[:, None].mT / q.size(-1) ** 0.5), None),
    (INDEXER, lambda q, k, w: index(q, k, w.flip(-1)), None),
    (
        INDEXER,
        lambda q, k, w: masked(weighted(q, k, w), future(*q.shape[-2:-1], k.size(1), 0)),
        "own key",
    ),
    (
        INDEXER,
        lambda q, k, w: masked(
            weighted(q, k, w), qkv.causal_mask(q.size(-2), k.size(1), alignment="bottom_right")
        ),
        "the mask is inverted",
    ),
    (
        INDEXER,
        lambda q, k, w: torch.softmax(masked(weighted(q, k, w), future(q.size(-2), k.size(1))), -1),
        "not normalised",
    ),
    (
        INDEXER,
        lambda q, k, w: masked(heads_relu(q, k).mean(1), future(q.size(-2), k.size(1))),
        "heads' mean",
    ),
    (INDEXER, lambda q, k, w: masked(weighted(q, k, w), future(q.size(-2), k.size(1)), -1e9), None),
    (
        INDEXER,
        lambda q, k, w: (
            masked(weighted(q, k, w), future(q.size(-2), k.size(1))) / q.size(-1) ** 0.5
        ),
        None,
    ),
    (
        INDEXER,
        lambda q, k, w: masked(
            (torch.relu(q @ k.mT / q.size(-1) ** 0.5) * w.mT[..., None]).sum(1),
            future(q.size(-2), k.size(1)),
        ),
        None,
    ),
    (
        INDEXER,
        lambda q, k, w: masked(
            (heads_relu(q, k) * w[..., None]).sum(1), future(q.size(-2), k.size(1))
        ),
        None,
    ),
    (INDEXER, lambda q, k, w: (heads_relu(q, k) * w.mT[..., None]).sum(-1), None),
    (
        INDEXER,
        lambda q, k, w: masked(weighted(q, k, w), ~future(q.size(-2), k.size(1), 0)),
        None,
    ),
    (
        INDEXER,
        lambda q, k, w: masked(
            weighted(q, k, w.reshape(w.size(0), w.size(2), w.size(1)).mT),
            future(q.size(-2), k.size(1)),
        ),
        None,
    ),
    # long-context/streaming-window
    (WINDOW, lambda x, window, sinks: x[..., -window:, :], "plain sliding window"),
    (
        WINDOW,
        lambda x, window, sinks: (
            x
            if x.size(-2) <= window
            else torch.cat([x[..., sinks - window :, :], x[..., :sinks, :]], -2)
        ),
        "the sinks first",
    ),
    (
        WINDOW,
        lambda x, window, sinks: (
            x
            if x.size(-2) <= window
            else torch.cat([x[..., :sinks, :], x[..., sinks - window - 1 : -1, :]], -2)
        ),
        "newest token is missing",
    ),
    (WINDOW, lambda x, window, sinks: stream(x, window, sinks, recent=window), "take slots"),
    (
        WINDOW,
        lambda x, window, sinks: (
            x if x.size(-2) <= window else torch.cat([x[:sinks], x[-(window - sinks) :]])
        ),
        "second-to-last axis",
    ),
    (WINDOW, lambda x, window, sinks: x, "the input x, unchanged"),
    (WINDOW, lambda x, window, sinks: stream(x, window, sinks, recent=window - sinks - 1), None),
    (WINDOW, lambda x, window, sinks: x[..., :window, :], None),
    (
        WINDOW,
        lambda x, window, sinks: torch.cat([x[..., :sinks, :], x[..., sinks - window :, :]], -2),
        None,
    ),
    # attention-across-devices/merge-partials
    (PARTIALS, lambda oa, la, ob, lb: ((oa + ob) / 2, torch.logaddexp(la, lb)), "averaging"),
    (
        PARTIALS,
        lambda oa, la, ob, lb: (
            oa * la.exp()[..., None] + ob * lb.exp()[..., None],
            torch.logaddexp(la, lb),
        ),
        "divided by their sum",
    ),
    (
        PARTIALS,
        lambda oa, la, ob, lb: (merged(oa, lb, ob, la)[0], torch.logaddexp(la, lb)),
        "weights are swapped",
    ),
    (PARTIALS, lambda oa, la, ob, lb: (merged(oa, la, ob, lb)[0], la + lb), "not the sum"),
    (
        PARTIALS,
        lambda oa, la, ob, lb: (merged(oa, la, ob, lb)[0], torch.maximum(la, lb)),
        "not the larger one",
    ),
    (
        PARTIALS,
        lambda oa, la, ob, lb: (
            (oa * la.exp()[..., None] + ob * lb.exp()[..., None])
            / (la.exp() + lb.exp())[..., None],
            torch.log(la.exp() + lb.exp()),
        ),
        "exp(lse) overflowed",
    ),
    (
        PARTIALS,
        lambda oa, la, ob, lb: (
            torch.exp(la - torch.log(la.exp() + lb.exp()))[..., None] * oa
            + torch.exp(lb - torch.log(la.exp() + lb.exp()))[..., None] * ob,
            torch.log(la.exp() + lb.exp()),
        ),
        "log(exp(lse_a) + exp(lse_b)) overflowed",
    ),
    (
        PARTIALS,
        lambda oa, la, ob, lb: (
            torch.exp(la - torch.logaddexp(la, lb)) * oa
            + torch.exp(lb - torch.logaddexp(la, lb)) * ob,
            torch.logaddexp(la, lb),
        ),
        "give the shares an axis",
    ),
    (
        PARTIALS,
        lambda oa, la, ob, lb: (
            torch.softmax(torch.stack([la, lb]), -1)[0][..., None] * oa
            + torch.softmax(torch.stack([la, lb]), -1)[1][..., None] * ob,
            torch.logaddexp(la, lb),
        ),
        "softmax over the two blocks",
    ),
    (PARTIALS, lambda oa, la, ob, lb: merged(oa, la, ob, lb)[0], None),
    (
        PARTIALS,
        lambda oa, la, ob, lb: (
            merged(oa, la, ob, lb)[0],
            torch.log(torch.exp(la) + torch.exp(lb)),
        ),
        "log(exp(lse_a) + exp(lse_b)) overflowed",
    ),
    (
        PARTIALS,
        lambda oa, la, ob, lb: (merged(oa, la, ob, lb)[0], torch.logaddexp(la, lb)[..., None]),
        None,
    ),
]


@pytest.mark.parametrize(
    ("name", "wrong", "phrase"),
    [pytest.param(*row, id=f"{i}-{row[0]}-{row[2]}") for i, row in enumerate(MISTAKES)],
)
def test_a_mistake_gets_its_cause_or_only_what_is_seen(name, wrong, phrase, capsys):
    result = check(name, wrong)
    assert capsys.readouterr().out == result.message + "\n"
    assert all(len(line) <= 78 for line in result.message.splitlines()), result.message
    expected = "vague" if phrase == VAGUE else "pinpointed" if phrase else "helpful"
    assert kind(result, phrase) == expected, result.message


def test_the_list_covers_every_implement_exercise_with_120_mistakes():
    assert len(MISTAKES) >= 120
    assert sum(phrase == VAGUE for _, _, phrase in MISTAKES) <= len(MISTAKES) // 10
    assert {name for name, _, _ in MISTAKES} == {exercise.name for exercise in EXERCISES}


def test_every_hint_of_the_catalogue_is_in_the_list():
    for exercise in EXERCISES:
        phrases = [p for name, _, p in MISTAKES if name == exercise.name and p and p != VAGUE]
        for hint in {mistake.hint for mistake in exercise.mistakes}:
            assert any(phrase in hint for phrase in phrases), (exercise.name, hint)


# --- hints are confirmed: the same first failing output with another cause does not get them ---------------


def _cases(exercise):
    return exercise.cases(torch.Generator().manual_seed(SEED))


def _differs(out, right, case) -> bool:
    """Not what the checker takes for the right answer on this case."""
    out = out if isinstance(out, tuple) else (out,)
    right = right if isinstance(right, tuple) else (right,)
    return not _all_same(out, right, case)


def _outcome(fn, case):
    try:
        return fn(*copies(case))
    except Exception as error:
        return error


MODELLED = [
    pytest.param(exercise, index, id=f"{exercise.name}-{index}")
    for exercise in EXERCISES
    for index in range(len(exercise.mistakes))
]


@pytest.mark.parametrize(("exercise", "index"), MODELLED)
def test_a_mistake_alike_on_one_case_only_does_not_get_the_hint(exercise, index, capsys):
    """Right everywhere except where it returns the modelled mistake's output: another cause."""
    mistake, cases = exercise.mistakes[index], _cases(exercise)
    first = next(
        case
        for case in cases
        if isinstance(_outcome(mistake.output, case), Exception)
        or _differs(_outcome(mistake.output, case), exercise.reference(*copies(case)), case)
    )

    def decoy(*args):
        if all(
            torch.equal(a, b) and a.dtype == b.dtype if isinstance(a, torch.Tensor) else a == b
            for a, b in zip(args, first.args.values(), strict=True)
        ):
            return mistake.output(*args)
        return exercise.reference(*args)

    result = check(exercise.name, decoy)
    capsys.readouterr()
    assert not result
    assert result.hint != mistake.hint


@pytest.mark.parametrize("exercise", EXERCISES, ids=[exercise.name for exercise in EXERCISES])
def test_every_mistake_differs_from_the_reference_on_two_cases(exercise):
    cases = _cases(exercise)
    right = [exercise.reference(*copies(case)) for case in cases]
    for mistake in exercise.mistakes:
        outcomes = [_outcome(mistake.output, case) for case in cases]
        differing = [
            isinstance(out, Exception) or _differs(out, r, case)
            for out, r, case in zip(outcomes, right, cases, strict=True)
        ]
        assert sum(differing) >= 2, mistake.hint


@pytest.mark.parametrize("exercise", EXERCISES, ids=[exercise.name for exercise in EXERCISES])
def test_mistakes_with_different_hints_disagree_on_some_case(exercise):
    cases = _cases(exercise)
    seen = {}
    for mistake in exercise.mistakes:
        outcomes = [_outcome(mistake.output, case) for case in cases]
        for other, theirs in seen.items():
            if other == mistake.hint:
                continue
            assert any(
                isinstance(a, Exception) != isinstance(b, Exception)
                or (not isinstance(a, Exception) and _differs(a, b, case))
                for a, b, case in zip(outcomes, theirs, cases, strict=True)
            ), (mistake.hint, other)
        seen[mistake.hint] = outcomes


@pytest.mark.parametrize(
    ("name", "decoy"),
    [
        (
            ATT,
            lambda q, k, v: torch.zeros_like(attn(q, k, v)) if q.size(-2) == 3 else attn(q, k, v),
        ),
        (ATT, lambda q, k, v: attn(q, k, v).mT if q.size(-2) == 3 else attn(q, k, v)),
        (WINDOW, lambda x, window, sinks: x if x.size(-2) == 8 else stream(x, window, sinks)),
    ],
    ids=["zeros", "transposed", "input"],
)
def test_a_generic_hint_alike_on_one_case_only_is_not_given(name, decoy, capsys):
    result = check(name, decoy)
    capsys.readouterr()
    assert not result
    assert result.hint is None
