"""A kernel's output and gradients against the float32 reference, on every element, before it is timed.

`reference` computes the output and, given the gradient of the output, dQ, dK and dV of
`qkv.attention(backend="reference")` in float32, a block of query rows at a time, one batch element and one
key/value head (with the query heads that read it) per block: the whole `(L, S)` score matrix of a long case
would not fit on a GPU, and a block of rows needs only the keys its mask can reach. dK and dV sum the blocks'
contributions. `run` gives the same four tensors of the path under test, and of torch in the same dtype (the
yardstick); `errors` applies the rule of the tests: at most twice torch's own error for the output and three
times for each gradient, plus 1e-5 (`FACTORS`, `ABSOLUTE`); `failure` says which exceed it. `Check` holds
the reference and the yardstick of one case, for every path and configuration checked on it.

The mask of a block, `block_mask`, is written out from the definitions of `qkv.attention`'s options (query `i`
keeps key `j` when `j < key_lengths[b]`, and with a causal alignment `j <= i + offset`, `offset = S - L`
bottom-right and 0 top-left, and with a window also `j > i + offset - window`); the tests compare it with
the masks of `qkv`'s builders.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from qkv.dispatch import attention

FACTORS = {
    "output": 2.0,
    "dq": 3.0,
    "dk": 3.0,
    "dv": 3.0,
}  # times torch's own error
# added to the allowed error, for results torch happens to get exactly
ABSOLUTE = 1e-5
BLOCK_SCORES = (
    2**27
)  # scores per reference block (512 MiB of float32, a few times that with autograd)


class Results(NamedTuple):
    """An attention's output `(B, H, L, Dv)` and, when a gradient was given, dQ, dK and dV (else None)."""

    output: Tensor
    dq: Tensor | None = None
    dk: Tensor | None = None
    dv: Tensor | None = None


def run(
    function: Callable[..., Tensor],
    q: Tensor,
    k: Tensor,
    v: Tensor,
    masks: dict,
    d_out: Tensor | None = None,
) -> Results:
    """`function(q, k, v, **masks)` on leaf copies of the inputs; with `d_out`, its gradients too."""
    if d_out is None:
        with torch.no_grad():
            return Results(function(q, k, v, **masks).detach())
    leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    out = function(*leaves, **masks)
    out.backward(d_out)
    return Results(out.detach(), *(leaf.grad for leaf in leaves))


def block_mask(
    rows: Tensor,
    keys: int,
    offset: int,
    causal: bool,
    window: int | None,
    kept: int,
) -> Tensor:
    """Which of the first `keys` keys each query of `rows` may attend: bool `(len(rows), keys)`.

    Args:
        rows: the queries' indices `i` in the whole sequence, `(R,)`.
        keys: the keys of the block, `j = 0 .. keys - 1`.
        offset: `S - L` for a bottom-right causal mask, else 0.
        causal: whether `j <= i + offset` applies.
        window: with `causal`, also `j > i + offset - window`; None for no window.
        kept: keys at or past `kept` are padding (`key_lengths[b]`, or S).
    """
    cols = torch.arange(keys, device=rows.device)[None, :]
    diagonal = rows[:, None] + offset
    keep = cols < kept
    if causal:
        keep = keep & (cols <= diagonal)
    if window is not None:
        keep = keep & (cols > diagonal - window)
    return keep.expand(len(rows), keys)


def reference(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    masks: dict,
    d_out: Tensor | None = None,
    block_scores: int = BLOCK_SCORES,
) -> Results:
    """The float32 reference of `qkv.attention(q, k, v, **masks)` and, with `d_out`, of its gradients.

    Args:
        q: `(B, H, L, D)`; k and v: `(B, H_kv, S, D)` with `H_kv` dividing `H`.
        masks: `is_causal` (False, "top_left" or "bottom_right"), `window`, `key_lengths` ((B,) or None);
            `enable_gqa` is implied by the shapes.
        d_out: `(B, H, L, Dv)`, the gradient of the output; None for the output alone.
        block_scores: at most this many scores per block (query rows x keys x query heads of a group).

    Returns:
        float32 `Results` in the inputs' shapes; a query that may attend no key gets zeros.
    """
    batch, heads, seqlen_q, _ = q.shape
    heads_kv, seqlen_k = k.size(1), k.size(2)
    group = heads // heads_kv
    causal = masks.get("is_causal") or False
    offset = seqlen_k - seqlen_q if causal == "bottom_right" else 0
    window = masks.get("window")
    lengths = masks.get("key_lengths")
    lengths = (
        [seqlen_k] * batch
        if lengths is None
        else lengths.clamp(0, seqlen_k).tolist()
    )
    step = max(1, block_scores // (group * seqlen_k))  # query rows per block
    out = torch.zeros(
        (*q.shape[:3], v.size(-1)), dtype=torch.float32, device=q.device
    )
    grads = None
    if d_out is not None:
        grads = [
            torch.zeros(x.shape, dtype=torch.float32, device=x.device)
            for x in (q, k, v)
        ]
    for b in range(batch):
        for kv_head in range(heads_kv):
            members = slice(kv_head * group, (kv_head + 1) * group)
            for first in range(0, seqlen_q, step):
                last = min(first + step, seqlen_q)  # rows [first, last)
                # a causal block reaches no key past its last row's diagonal
                keys = (
                    min(seqlen_k, max(0, last + offset)) if causal else seqlen_k
                )
                if keys == 0:
                    continue  # no row of the block may attend a key: zeros, as initialised
                rows = torch.arange(first, last, device=q.device)
                mask = block_mask(
                    rows, keys, offset, bool(causal), window, lengths[b]
                )
                inputs = (
                    q[b : b + 1, members, first:last],  # (1, group, rows, D)
                    k[
                        b : b + 1, kv_head : kv_head + 1, :keys
                    ],  # (1, 1, keys, D)
                    v[b : b + 1, kv_head : kv_head + 1, :keys],
                )
                inputs = [
                    x.detach().float().requires_grad_(d_out is not None)
                    for x in inputs
                ]
                with torch.set_grad_enabled(d_out is not None):
                    block = attention(
                        *inputs,
                        attn_mask=mask,
                        backend="reference",
                        enable_gqa=group > 1,
                    )
                out[b, members, first:last] = block[0].detach()
                if grads is None:
                    continue
                block.backward(d_out[b : b + 1, members, first:last].float())
                dq, dk, dv = grads
                dq[b, members, first:last] = inputs[0].grad[0]
                dk[b, kv_head, :keys] += inputs[1].grad[0, 0]
                dv[b, kv_head, :keys] += inputs[2].grad[0, 0]
    return Results(out, *(grads or ()))


def torch_own(q: Tensor, k: Tensor, v: Tensor, **masks: object) -> Tensor:
    """torch's attention in the inputs' dtype (`qkv.attention(backend="torch")`): the yardstick."""
    return attention(q, k, v, backend="torch", **masks)


class Check:
    """One set of inputs with its float32 reference and torch's yardstick, computed once: `errors`
    then checks any number of paths (or launch configurations) against them.

    Args:
        q, k, v, masks: as for `reference`.
        d_out: the gradient of the output, for a check of dQ, dK and dV too; None for the output alone.
    """

    def __init__(
        self, q: Tensor, k: Tensor, v: Tensor, masks: dict, d_out: Tensor | None
    ) -> None:
        self.inputs = (q, k, v)
        self.masks = masks
        self.d_out = d_out
        self.expected = reference(q, k, v, masks, d_out)
        self.yardstick = run(torch_own, q, k, v, masks, d_out)

    def errors(
        self, function: Callable[..., Tensor]
    ) -> dict[str, tuple[float, float]]:
        """`errors` of `function(q, k, v, **masks)` (and its gradients) against the reference."""
        actual = run(function, *self.inputs, self.masks, self.d_out)
        return errors(actual, self.expected, self.yardstick)


def errors(
    actual: Results, expected: Results, yardstick: Results
) -> dict[str, tuple[float, float]]:
    """`{name: (error, allowed)}` for the output and each gradient present: the largest absolute error of
    `actual` against `expected`, and `FACTORS[name]` times `yardstick`'s own plus `ABSOLUTE`."""
    found = {}
    for name, a, e, y in zip(FACTORS, actual, expected, yardstick, strict=True):
        if a is None:
            continue
        if a.shape != e.shape:
            raise ValueError(
                f"{name}: shape {tuple(a.shape)} differs from the reference's {tuple(e.shape)}"
            )
        error = (a.float() - e).abs().max().item()
        own = (y.float() - e).abs().max().item()
        found[name] = (error, FACTORS[name] * own + ABSOLUTE)
    return found


def failure(found: dict[str, tuple[float, float]]) -> str | None:
    """Why the errors of `errors` fail the rule (the results over their allowance), or None."""
    over = [
        f"{name} {error:.3g} > {allowed:.3g}"
        for name, (error, allowed) in found.items()
        if not error <= allowed  # NaN fails too
    ]
    if not over:
        return None
    return (
        "differs from the float32 reference by more than the rule allows: "
        + ", ".join(over)
    )
