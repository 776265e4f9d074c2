"""Attention as a recurrence: the gated delta rule, token by token and chunk by chunk.

Linear attention keeps a state `S` of fixed size `(Dk, Dv)` instead of a growing cache of keys and values,
writes each token into it and reads each query from it. The delta rule (Schlag et al., ICML 2021) writes the
error, not the value: it first asks the state what it recalls for the key, `S^T k`, then writes only the
difference from the value, scaled by a learning rate `beta`. The gated delta rule (Yang, Kautz & Hatamizadeh,
ICLR 2025), which the linear layers of Qwen3-Next and Kimi Linear use, first lets the state decay by
`exp(g) <= 1`:

    S'  = exp(g_t) S_{t-1}                        forget a little
    S_t = S' + beta_t k_t (v_t - S'^T k_t)^T      write the error, not the value
    o_t = S_t^T (scale q_t)                       read with the query

`gated_delta_rule` runs this token by token, or chunk by chunk: inside a chunk the writes are solved at once
with a triangular system (the UT transform of the WY representation; Yang et al., NeurIPS 2024), and across
chunks the state carries on. Both give the same result.
"""

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from qkv._checks import (
    check_bool,
    check_same_dtype_and_device,
    check_scale,
    check_sizes,
    check_tensor,
    shape,
)


def gated_delta_rule(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    *,
    chunk_size: int | None = None,
    initial_state: Tensor | None = None,
    scale: float | None = None,
    output_final_state: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Linear attention with the gated delta rule: decay the state by `exp(g_t)`, then write the error.

    Per value head and token `t` (state `S` of shape `(Dk, Dv)`):
    `S' = exp(g_t) S_{t-1}`; `S_t = S' + beta_t k_t (v_t - S'^T k_t)^T`; `o_t = S_t^T (scale q_t)`.
    Each query/key head serves `Hv / H` consecutive value heads (head `j` of `v` reads head `j // (Hv / H)` of
    `q` and `k`), as in Qwen3-Next. The models L2-normalise `q` and `k` first (`F.normalize(k, dim=-1)`); with
    `|k| = 1` and `beta` in [0, 1] the write never amplifies the state.

    Args:
        q: queries `(B, H, N, Dk)`.
        k: keys `(B, H, N, Dk)`.
        v: values `(B, Hv, N, Dv)`, `Hv` a multiple of `H`.
        g: the log of each token's decay, `(B, Hv, N)`, finite and `<= 0` (0 keeps the state, a large
            negative value forgets it).
        beta: each token's learning rate, `(B, Hv, N)`, in [0, 1] (0 writes nothing, 1 replaces what the
            state recalled for `k_t` by `v_t`).
        chunk_size: None for the token-by-token recurrence; a positive int for the chunked form, with
            chunks of that many tokens (the last may be partial).
        initial_state: the state to continue from, `(B, Hv, Dk, Dv)`, in the dtype the state is returned
            in (see Returns); zeros when None.
        scale: multiplies `q`; `1 / sqrt(Dk)` when None.
        output_final_state: also return the state after the last token.

    Returns:
        `(out, state)`: `out` of shape `(B, Hv, N, Dv)` in the inputs' dtype (empty when `N = 0`), and the
        state after the last token `(B, Hv, Dk, Dv)` if `output_final_state`, else None (as transformers'
        Qwen3-Next functions do). The state is computed and returned in float32 for half-precision inputs,
        in the inputs' dtype otherwise; passing it back as `initial_state` continues the sequence exactly.

    Raises:
        TypeError: a non-tensor or non-float input; `q`, `k`, `v`, `g`, `beta` of different dtypes or an
            `initial_state` of another dtype than the state's; a `chunk_size` or `output_final_state` of the
            wrong type.
        ValueError: shapes that disagree, `Hv` not a multiple of `H`, `g > 0` or not finite, `beta` outside
            [0, 1], a `chunk_size` below 1, tensors on different devices.
    """
    _check_inputs(
        q, k, v, g, beta, chunk_size, initial_state, scale, output_final_state
    )
    (batch, heads, _, key_dim), (value_heads, value_dim) = (
        q.shape,
        v.shape[1::2],
    )
    output_dtype, dtype = q.dtype, torch.promote_types(q.dtype, torch.float32)
    if scale is None:
        # Dk = 0: every read is an empty sum
        scale = 1 / math.sqrt(key_dim) if key_dim else 1.0
    groups = value_heads // heads
    # (B, H, N, Dk) -> (B, Hv, N, Dk)
    q = (q.to(dtype) * scale).repeat_interleave(groups, dim=1)
    # (B, H, N, Dk) -> (B, Hv, N, Dk)
    k = k.to(dtype).repeat_interleave(groups, dim=1)
    v, g, beta = v.to(dtype), g.to(dtype), beta.to(dtype)
    if initial_state is None:
        state = q.new_zeros(batch, value_heads, key_dim, value_dim)
    else:
        state = initial_state
    if chunk_size is None:
        out, state = _recurrent(q, k, v, g, beta, state)
    else:
        out, state = _chunked(q, k, v, g, beta, state, chunk_size)
    return out.to(output_dtype), state if output_final_state else None


def _recurrent(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Tensor
) -> tuple[Tensor, Tensor]:
    """The gated delta rule token by token: q, k `(B, Hv, N, Dk)` (q scaled), v `(B, Hv, N, Dv)`, g, beta
    `(B, Hv, N)`, state `(B, Hv, Dk, Dv)`; returns `(out (B, Hv, N, Dv), state)`."""
    # --8<-- [start:recurrent]
    outs = []
    for t in range(q.size(-2)):
        # (B, Hv, Dk), v_t (B, Hv, Dv)
        q_t, k_t, v_t = (q[..., t, :], k[..., t, :], v[..., t, :])
        decay_t = g[..., t, None, None].exp()  # exp(g_t), (B, Hv, 1, 1)
        beta_t = beta[..., t, None]  # (B, Hv, 1)
        state = decay_t * state  # S' = exp(g_t) S_{t-1}: forget a little
        # S'^T k_t: what S' holds for k_t
        recalled = torch.einsum("...k,...kv->...v", k_t, state)
        error = beta_t * (v_t - recalled)  # write the error, not the value
        # S_t = S' + k_t error^T
        state = state + torch.einsum("...k,...v->...kv", k_t, error)
        # o_t = S_t^T q_t
        outs.append(torch.einsum("...k,...kv->...v", q_t, state))
    # --8<-- [end:recurrent]
    # (B, Hv, N, Dv)
    out = torch.stack(outs, dim=-2) if outs else v.new_zeros(v.shape)
    return out, state


def _chunked(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    state: Tensor,
    chunk_size: int,
) -> tuple[Tensor, Tensor]:
    """The gated delta rule chunk by chunk; same arguments and result as `_recurrent`.

    Inside a chunk, with `gamma_i` the log decay from the chunk's start to token `i` and `S_0` the state the
    chunk starts from, the errors `u_i` that the recurrence writes solve the unit lower-triangular system
    `(I + A) U = beta V - beta exp(gamma) K S_0`, where `A_ij = beta_i exp(gamma_i - gamma_j) k_i . k_j` for
    `j < i` (the UT transform); then `O = exp(gamma) Q S_0 + (Q K^T * D) U` with `D_ij = exp(gamma_i - gamma_j)`
    for `j <= i`, and the next chunk starts from `exp(gamma_C) S_0 + (exp(gamma_C - gamma) K)^T U`.
    Padding tokens have `g = 0` and `beta = 0`: they neither decay nor write.
    """
    length = q.size(-2)
    chunks = -(-length // chunk_size)  # ceil(N / C)
    pad = chunks * chunk_size - length
    # (B, Hv, N, D) -> (B, Hv, chunks, C, D) and (B, Hv, N) -> (B, Hv, chunks, C)
    q, k, v = (
        F.pad(x, (0, 0, 0, pad)).unflatten(-2, (chunks, chunk_size))
        for x in (q, k, v)
    )
    g, beta = (
        F.pad(x, (0, pad)).unflatten(-1, (chunks, chunk_size))
        for x in (g, beta)
    )
    # --8<-- [start:chunked]
    earlier_or_same = torch.ones(
        chunk_size, chunk_size, dtype=torch.bool, device=q.device
    ).tril()
    # log decay from the chunk's start to token i, (B, Hv, chunks, C)
    gamma = g.cumsum(dim=-1)
    # gamma_i - gamma_j, (B, Hv, chunks, C, C)
    gaps = gamma[..., :, None] - gamma[..., None, :]
    # D_ij, 0 above the diagonal
    decays = gaps.masked_fill(~earlier_or_same, -math.inf).exp()

    # the writes of a chunk at once (the UT transform):
    # (I + A) U = beta V - beta exp(gamma) K S_0
    # A_ij, j < i, (.., C, C)
    a = (beta[..., None] * (k @ k.transpose(-2, -1)) * decays).tril(-1)
    eye = torch.eye(chunk_size, dtype=q.dtype, device=q.device)
    system = eye + a  # I + A: unit lower triangular
    right = torch.cat(
        [beta[..., None] * v, beta[..., None] * gamma.exp()[..., None] * k],
        dim=-1,
    )
    solved = torch.linalg.solve_triangular(
        system, right, upper=False, unitriangular=True
    )
    # U = written_if_empty - correcting S_0: what an empty state would take,
    # and how S_0 changes it
    written_if_empty, correcting = solved.split(
        [v.size(-1), k.size(-1)], dim=-1
    )
    # (Q K^T * D), (B, Hv, chunks, C, C)
    within = (q @ k.transpose(-2, -1)) * decays

    outs = []
    for c in range(chunks):  # the recurrence across chunks
        # the errors, (B, Hv, C, Dv)
        u = written_if_empty[:, :, c] - correcting[:, :, c] @ state
        # from S_0, (B, Hv, C, Dv)
        read = (gamma[:, :, c].exp()[..., None] * q[:, :, c]) @ state
        outs.append(read + within[:, :, c] @ u)  # (B, Hv, C, Dv)
        last = gamma[:, :, c, -1:]  # gamma_C, (B, Hv, 1)
        # exp(gamma_C - gamma) K
        keys = (last - gamma[:, :, c]).exp()[..., None] * k[:, :, c]
        # (B, Hv, Dk, Dv)
        state = last.exp()[..., None] * state + keys.transpose(-2, -1) @ u
    # --8<-- [end:chunked]
    out = torch.stack(outs, dim=2) if outs else v  # (B, Hv, chunks, C, Dv)
    return out.flatten(2, 3)[:, :, :length], state  # (B, Hv, N, Dv)


def _check_inputs(
    q: object,
    k: object,
    v: object,
    g: object,
    beta: object,
    chunk_size: object,
    initial_state: object,
    scale: object,
    output_final_state: object,
) -> None:
    """Raise, naming the argument, unless the arguments make a well-formed `gated_delta_rule` call.

    Reads the values of `g` and `beta` (a device sync on a GPU).
    """
    tensors = {"q": q, "k": k, "v": v, "g": g, "beta": beta}
    for name, x in tensors.items():
        check_tensor(name, x, 3)
    check_same_dtype_and_device(**tensors)
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.dim() != 4:
            raise ValueError(
                f"{name} must be 4-D (B, heads, N, D), got shape {shape(x)}"
            )
    if k.shape != q.shape:
        raise ValueError(
            f"q and k must have the same shape (B, H, N, Dk): q {shape(q)} vs k {shape(k)}"
        )
    (batch, heads, length, _), value_heads = q.shape, v.size(1)
    if v.size(0) != batch or v.size(2) != length:
        raise ValueError(
            f"v must be (B, Hv, N, Dv) with q's B = {batch} and N = {length}: q {shape(q)} vs v {shape(v)}"
        )
    if heads == 0 or value_heads % heads != 0:
        raise ValueError(
            f"v's heads must be a multiple of q's and k's: q {shape(q)} has {heads}, "
            f"v {shape(v)} has {value_heads}"
        )
    for name, x in (("g", g), ("beta", beta)):
        if x.shape != (batch, value_heads, length):
            raise ValueError(
                f"{name} must be (B, Hv, N) = {(batch, value_heads, length)} as v {shape(v)}, "
                f"got {shape(x)}"
            )
    if not bool((g <= 0).all()) or not bool(g.isfinite().all()):
        raise ValueError(
            f"g is the log of a decay: it must be finite and <= 0, got values from "
            f"{g.min().item()} to {g.max().item()}"
        )
    if not bool(((beta >= 0) & (beta <= 1)).all()):
        raise ValueError(
            f"beta must lie in [0, 1], got values from {beta.min().item()} to {beta.max().item()}"
        )
    if chunk_size is not None:
        check_sizes(chunk_size=chunk_size)
    check_scale(scale)
    check_bool("output_final_state", output_final_state)
    if initial_state is not None:
        _check_state(initial_state, q, v)


def _check_state(initial_state: object, q: Tensor, v: Tensor) -> None:
    """Raise unless `initial_state` is a `(B, Hv, Dk, Dv)` tensor in the state's dtype, on q's device."""
    check_tensor("initial_state", initial_state)
    dtype = torch.promote_types(q.dtype, torch.float32)
    if initial_state.dtype != dtype:
        raise TypeError(
            f"initial_state must have the state's dtype {dtype} (q is {q.dtype}), "
            f"got {initial_state.dtype}"
        )
    if initial_state.device != q.device:
        raise ValueError(
            f"initial_state is on {initial_state.device} but q is on {q.device}"
        )
    expected = (q.size(0), v.size(1), q.size(3), v.size(3))
    if shape(initial_state) != expected:
        raise ValueError(
            f"initial_state must be (B, Hv, Dk, Dv) = {expected} for q {shape(q)} and v {shape(v)}, "
            f"got {shape(initial_state)}"
        )
