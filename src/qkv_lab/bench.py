"""Benchmark attention implementations: TFLOP/s and peak memory, forward and forward + backward.

Paths measured:

- `reference`: `qkv.attention(backend="reference")`, the explicit formula;
- `torch`: `qkv.attention(backend="torch")`, torch's `scaled_dot_product_attention` choosing its own backend:
  what `backend="auto"` falls back to;
- `torch-math`, `torch-flash`, `torch-efficient`, `torch-cudnn`: the same with one torch backend forced by
  `torch.nn.attention.sdpa_kernel`;
- `torch-lower-right`: torch's `scaled_dot_product_attention` with `torch.nn.attention.bias.causal_lower_right`,
  which reaches its flash and memory-efficient kernels without a dense mask: torch's best path for a
  bottom-right causal call (decoding) without window or padding (others are `unsupported`);
- `qkv-flash`: `qkv.attention(backend="triton")`, the package's Triton kernels (CUDA only: the interpreter's
  timings would mean nothing);
- `qkv-flash-varlen`: `qkv.flash_attention_varlen`, the same kernels on the documents of a `varlen` case packed
  one after another (CUDA only; other cases are `unsupported`). Like the decoding paths, it is checked on its
  first call and then runs the kernels without the checks, which read the lengths back from the GPU;
- `qkv-decode`, `qkv-decode-unsplit`, `qkv-decode-paged`, `qkv-decode-merge-in-launch`: `qkv.decode_attention`,
  the split-KV decoding kernels (CUDA only), for bottom-right causal cases without window or padding (others
  are `unsupported`): with its default number of splits, with one split (no split: what splitting buys),
  reading the same cache copied into a shuffled pool of `DECODE_PAGE_SIZE`-token pages (what the block
  tables cost), and merging the splits in the split kernel's own launch (what the merge kernel's launch costs). The
  inputs are checked once, before timing, as a model checks its tables once per step: the time is the
  kernels' (`qkv.kernels.decode.decode`), not the checks', which read the lengths back from the GPU.

Masks other than top-left causal reach torch as the boolean mask `qkv.attention` builds for them. Suites:

- `square`: L = S = `--n`, `batch * N` = `--tokens`, `heads * D` = `--hidden`, full and causal (`--causal`);
- `decode`: 1, 4 and 16 queries against 4k to 128k cached keys, bottom-right causal, forward only;
- `split-kv`: decoding with GQA 32/8: 1, 4 and 16 queries against 4k to 128k keys for 4 sequences and 4k
  to 32k for 16 (at most 512k cached tokens: the float32 reference of the check expands the key/value
  heads), bottom-right causal, forward only: the shapes of `qkv.decode_attention`;
- `gqa`: 32 query heads sharing 8 key/value heads, causal at 4k and 16k, and decoding 16 queries on 32k keys;
- `window`: a 4k sliding window over 64k keys, causal;
- `padding`: four sequences of 4k or 16k padded keys, keeping all, 3/4, 1/2 and 1/4 of them (`key_lengths`);
- `long`: causal at 128k, one sequence, to show memory linear in N;
- `varlen`: four documents of N, 3/4, 1/2 and 1/4 of N tokens (N = 4k, 16k), causal: the padded paths take
  them padded to N with `key_lengths` (they compute the padding queries too), `qkv-flash-varlen` packed.

Before timing, each case's output, and with a backward its dQ, dK and dV, are checked on every element
against the float32 reference (`qkv_lab.gradients`; of a `varlen` case, the output's first rows of every
document), with the tests' rule: at most twice torch's own error in the same dtype (`torch` path) for the
output, three times for a gradient, plus 1e-5; a case that fails is recorded as `wrong`, not timed. A path
that cannot run a case is recorded, not dropped: status `unsupported` (no kernel for these inputs, with
torch's or qkv's reason) or `oom`. FLOPs count the two matrix products for the query-key pairs the mask
keeps, `4 * B * H * D * pairs` (`4 B H N^2 D` unmasked, about half that causal; in a `varlen` case the
documents' own pairs, whatever a path computes for padding); the backward pass counts 2.5 times the forward.

A kernel path is tuned before it is timed (`qkv_lab.pinning.tune`): each launch configuration its autotuner
would try is pinned, checked as above and timed, and the fastest median that passed is kept; the timing then
runs with those configurations pinned, so no autotuner searches while it runs (`autotune` false, `config`
names them, `tuning` holds every trial). Each case is timed and its peak memory read by the lab's harness
(`qkv_lab.harness.timing_ms`: `ms` is the fastest of repeated runs, `median_ms` their median,
`triton.testing.do_bench` on CUDA) after a first call that compiles. (The H100 run of 2026-11-25 recorded
do_bench's median, the H200 runs of 2026-11-26 the fastest, both timed after the autotuner's own choice.)

The JSON report (`--out`, rewritten after every case) holds the device, its clocks where `nvidia-smi`
reports them (before the first case, and the SM clock again right after each case is timed), the versions of
Python, torch, Triton and cuDNN, the platform and the UTC date beside the numbers. `--plot DIR` draws one PNG
of TFLOP/s against N per (mode, dtype, head size, causal) of the square suite. `--table FILE` adds the
`qkv-flash` and `torch` times of every case to the measured table that `qkv.attention`'s `"auto"` reads
(`qkv/kernels/measured.json`).

Usage: `python -m qkv_lab.bench --help`; on a CPU host, e.g. `python -m qkv_lab.bench --device cpu --n 128 256`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import json
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right

import qkv
from qkv.dispatch import attention, call_kind
from qkv.kernels import tiles
from qkv.kernels.contract import Packing
from qkv.masks import Mask
from qkv_lab import gradients, pinning
from qkv_lab.harness import (
    Timing,
    environment,
    peak_memory_bytes,
    sm_clock_mhz,
    timing_ms,
    write_json,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

TORCH_BACKENDS = {
    "torch-math": SDPBackend.MATH,
    "torch-flash": SDPBackend.FLASH_ATTENTION,
    "torch-efficient": SDPBackend.EFFICIENT_ATTENTION,
    "torch-cudnn": SDPBackend.CUDNN_ATTENTION,
}
VARLEN_PATH = "qkv-flash-varlen"
MERGE_IN_LAUNCH_PATH = "qkv-decode-merge-in-launch"
DECODE_PATHS = (
    "qkv-decode",
    "qkv-decode-unsplit",
    "qkv-decode-paged",
    MERGE_IN_LAUNCH_PATH,
)
KERNEL_PATHS = ("qkv-flash", VARLEN_PATH, *DECODE_PATHS)  # CUDA only
# a kernel path -> the same kernels run another way, timed beside it with its configuration (the lease)
VARIANT_PATHS = {"qkv-decode": (MERGE_IN_LAUNCH_PATH,)}
LOWER_RIGHT_PATH = "torch-lower-right"
PATHS = ("reference", "torch", *TORCH_BACKENDS, LOWER_RIGHT_PATH, *KERNEL_PATHS)
MODES = ("forward", "forward+backward")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
SUITES = (
    "square",
    "decode",
    "split-kv",
    "gqa",
    "window",
    "padding",
    "long",
    "varlen",
)
DECODE_PAGE_SIZE = 16  # tokens per page of the qkv-decode-paged path (vLLM's default block size)
# the backward pass does 2.5 times the forward's matrix-product FLOPs
BACKWARD_FLOPS_FACTOR = 2.5
CHECKED_ROWS = 64  # query rows of each packed document compared with the reference before timing

Attention = Callable[..., Tensor]


@dataclasses.dataclass(frozen=True)
class Case:
    """One measurement: a path on one shape, dtype, mask and mode."""

    path: str
    mode: str
    dtype: str
    head_dim: int
    causal: bool | str  # False, "top_left" or "bottom_right"
    seqlen_q: int
    seqlen_k: int
    batch: int
    heads: int
    heads_kv: int
    window: int | None = None
    padded: bool = False  # batch b keeps (B - b) / B of the keys (key_lengths)
    documents: bool = False  # with padded: batch b is one document, its queries as many as its keys
    suite: str = "square"


def key_lengths(case: Case) -> list[int] | None:
    """The keys each batch keeps when `padded`: all, then (B - 1) / B, ..., 1 / B of them."""
    if not case.padded:
        return None
    return [
        case.seqlen_k * (case.batch - b) // case.batch
        for b in range(case.batch)
    ]


def kept_pairs(case: Case) -> int:
    """How many (query, key) pairs the case's mask keeps, summed over the batch (one head).

    Of documents, only their own queries count: the padding queries of a padded batch do no useful work.
    """
    offset = (
        case.seqlen_k - case.seqlen_q if case.causal == "bottom_right" else 0
    )
    lengths = key_lengths(case) or [case.seqlen_k] * case.batch
    pairs = 0
    for kv_len in lengths:
        for row in range(kv_len if case.documents else case.seqlen_q):
            lo, _, hi, _ = tiles.key_bounds(
                row,
                row,
                kv_len,
                offset,
                case.window,
                bool(case.causal),
                case.window is not None,
            )
            pairs += max(0, hi - lo)
    return pairs


def attention_flops(case: Case) -> float:
    """Matrix-product FLOPs of one call: `4 H D` per kept pair, times 3.5 with the backward."""
    flops = 4 * case.heads * case.head_dim * kept_pairs(case)
    if case.mode == "forward+backward":
        flops *= 1 + BACKWARD_FLOPS_FACTOR
    return flops


def attention_function(path: str) -> Attention:
    """`(q, k, v, **mask options) -> output` for a path, with its torch backend forced where it has one."""
    if path in ("reference", "torch"):
        return lambda q, k, v, **masks: attention(
            q, k, v, backend=path, **masks
        )
    if path == "qkv-flash":
        return lambda q, k, v, **masks: attention(
            q, k, v, backend="triton", **masks
        )
    if path == VARLEN_PATH:
        return _varlen_function()
    if path in DECODE_PATHS:
        return _decode_function(path)
    if path == LOWER_RIGHT_PATH:
        return _lower_right
    backend = TORCH_BACKENDS[path]

    def forced(q: Tensor, k: Tensor, v: Tensor, **masks: object) -> Tensor:
        with sdpa_kernel(backend):
            return attention(q, k, v, backend="torch", **masks)

    return forced


def _lower_right(q: Tensor, k: Tensor, v: Tensor, **masks: object) -> Tensor:
    """torch's attention with its bottom-right causal bias: no dense mask, torch's own choice of kernel."""
    plain = masks["window"] is None and masks["key_lengths"] is None
    if masks["is_causal"] != "bottom_right" or not plain:
        raise ValueError(
            f"{LOWER_RIGHT_PATH} computes bottom-right causal attention without window or padding"
        )
    bias = causal_lower_right(q.size(-2), k.size(-2))
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=bias, enable_gqa=masks["enable_gqa"]
    )


def _varlen_function() -> Attention:
    """`qkv.flash_attention_varlen` as a path, on the options of `pack_documents`: checked on its first call,
    then the kernels alone (`qkv.kernels.flash.attend_packed`)."""
    # imports Triton: only where the path runs, on CUDA
    from qkv.kernels import flash

    checked = False

    def call(q: Tensor, k: Tensor, v: Tensor, **masks: object) -> Tensor:
        nonlocal checked
        if "cu_seqlens" not in masks:
            raise ValueError(
                f"{VARLEN_PATH} runs the packed documents of the varlen suite only"
            )
        cu_seqlens, longest = masks["cu_seqlens"], masks["max_seqlen"]
        causal, window = masks["is_causal"], masks["window"]
        if not checked:
            checked = True
            return qkv.flash_attention_varlen(
                q,
                k,
                v,
                cu_seqlens,
                cu_seqlens,
                max_seqlen_q=longest,
                max_seqlen_k=longest,
                causal=causal,
                window=window,
            )
        packing = Packing(cu_seqlens, cu_seqlens, longest, longest)
        mask = Mask(alignment=causal or None, window=window)
        return flash.attend_packed(q, k, v, packing, mask, None)

    return call


def pack_documents(
    case: Case, q: Tensor, k: Tensor, v: Tensor, masks: dict
) -> tuple[Tensor, Tensor, Tensor, dict]:
    """The documents of a padded batch packed one after another, and the options of `qkv-flash-varlen`.

    Returns:
        q `(total, H, D)`, k and v `(total, H_kv, D)`, and `{cu_seqlens, max_seqlen, is_causal, window}`.
    """
    lengths = key_lengths(case)

    def pack(x: Tensor) -> Tensor:  # (B, heads, S, D) -> (total, heads, D)
        return torch.cat(
            [x[b, :, :n].transpose(0, 1) for b, n in enumerate(lengths)]
        )

    cumulative = [0, *itertools.accumulate(lengths)]
    cu_seqlens = torch.tensor(cumulative, dtype=torch.int32, device=q.device)
    options = {"cu_seqlens": cu_seqlens, "max_seqlen": max(lengths)}
    options |= {"is_causal": masks["is_causal"], "window": masks["window"]}
    return pack(q), pack(k), pack(v), options


def _decode_function(path: str) -> Attention:
    """`qkv.decode_attention` as a path: checked on its first call (and first cache), then the kernels alone.

    `qkv-decode-paged` copies the cache into pages on its first call with a cache, outside the timing.
    """
    # imports Triton: only where the path runs, on CUDA
    from qkv.kernels import decode

    paged = path == "qkv-decode-paged"
    num_splits = 1 if path == "qkv-decode-unsplit" else None
    # (k, v)'s storage -> the kernels' cache arguments
    prepared: dict[tuple[int, int], tuple] = {}

    def call(q: Tensor, k: Tensor, v: Tensor, **masks: object) -> Tensor:
        kept = masks["is_causal"] == "bottom_right" and masks["window"] is None
        if not kept or masks["key_lengths"] is not None:
            raise ValueError(
                "decode_attention computes bottom-right causal attention without window or padding"
            )
        if (k.data_ptr(), v.data_ptr()) not in prepared:
            lengths = torch.full(
                (q.size(0),), k.size(2), device=q.device, dtype=torch.int32
            )
            cache = (
                (*to_pages(k, v, DECODE_PAGE_SIZE), lengths)
                if paged
                else (k, v, None, lengths)
            )
            key_cache, value_cache, tables, _ = cache
            qkv.decode_attention(
                q,
                key_cache,
                value_cache,
                lengths=lengths,
                block_tables=tables,
                num_splits=num_splits,
            )  # the public checks, once
            prepared.clear()
            prepared[k.data_ptr(), v.data_ptr()] = cache
        key_cache, value_cache, tables, lengths = prepared[
            k.data_ptr(), v.data_ptr()
        ]
        return decode.decode(
            q, key_cache, value_cache, lengths, tables, num_splits, None,
            merge_in_launch=path == MERGE_IN_LAUNCH_PATH,
        )  # fmt: skip

    return call


def to_pages(
    k: Tensor, v: Tensor, page_size: int
) -> tuple[Tensor, Tensor, Tensor]:
    """A contiguous cache `(B, H_kv, S, D)` as pools `(P, H_kv, page_size, D)` in a seeded shuffled order,
    and the block tables `(B, S / page_size)` that read it back; S must be a multiple of `page_size`."""
    batch, heads_kv, seqlen_k, head_dim = k.shape
    per_sequence = seqlen_k // page_size
    generator = torch.Generator().manual_seed(0)
    tables = torch.randperm(batch * per_sequence, generator=generator).to(
        k.device, torch.int32
    )
    # (B, max_pages): page n of sequence b
    tables = tables.view(batch, per_sequence)
    pools = []
    for cache in (k, v):
        pages = cache.view(
            batch, heads_kv, per_sequence, page_size, head_dim
        ).transpose(1, 2)
        pool = torch.empty(
            batch * per_sequence,
            heads_kv,
            page_size,
            head_dim,
            dtype=k.dtype,
            device=k.device,
        )
        # (B * pages, H_kv, page_size, D)
        pool[tables.flatten()] = pages.flatten(0, 1)
        pools.append(pool)
    return *pools, tables


def measure(case: Case, device: torch.device) -> dict:
    """Check, tune (a kernel path) and time one case; return its fields with `status`, `ms` (the fastest
    run), `median_ms`, `tflops`, memory, the errors, the launch configuration and `reason`."""
    record = {
        **dataclasses.asdict(case),
        "status": "ok",
        "ms": None,
        "median_ms": None,
    }
    record |= {"tflops": None, "peak_memory_bytes": None, "reason": None}
    record |= {
        "error": None,
        "allowed_error": None,
        "errors": None,
        "gradients_checked": False,
    }
    # config: the kernels' pinned configurations (a torch path: its name); autotune: whether an autotuner
    # could search while timing (never: the configurations are pinned); sm_clock_mhz: read just after the
    # timing, the clock the case ran at (near enough)
    config = None if case.path in KERNEL_PATHS else case.path
    record |= {
        "config": config,
        "autotune": False,
        "tuning": None,
        "sm_clock_mhz": None,
    }
    if not runs_on(case, device):
        return record | {"status": "unsupported", "reason": "needs CUDA"}
    try:
        with _warnings_as_reason() as reasons:
            inputs = _inputs(case, device)
            check = _checker(case, *inputs)
            found = check()
            record["errors"], (record["error"], record["allowed_error"]) = (
                found,
                found["output"],
            )
            record["gradients_checked"] = "dq" in found
            failed = gradients.failure(found)
            if failed:
                return record | {"status": "wrong", "reason": failed}
            call = _make_call(case, *inputs)
            choice = {}
            if case.path in KERNEL_PATHS:
                tuned = pinning.tune(
                    kernels(case), case.seqlen_q, _attempt(check, call, device)
                )
                record["tuning"] = [
                    dataclasses.asdict(trial) for trial in tuned.trials
                ]
                if not tuned.choice:
                    return record | {
                        "status": "wrong",
                        "reason": "no configuration passed",
                    }
                choice, record["config"] = tuned.choice, tuned.describe()
            with pinning.pinned(choice):
                call()  # compiles
                record["peak_memory_bytes"] = peak_memory_bytes(call, device)
                record["ms"], record["median_ms"] = timing_ms(call, device)
            record["sm_clock_mhz"] = sm_clock_mhz(device)
    except torch.OutOfMemoryError:
        return record | {"status": "oom", "reason": "out of memory"}
    # qkv's checks refusing inputs, e.g. qkv-flash in fp32
    except (TypeError, ValueError) as error:
        return record | {
            "status": "unsupported",
            "reason": str(error).splitlines()[0],
        }
    except RuntimeError as error:
        missing = ("no available kernel", "no viable backend")
        status = (
            "unsupported"
            if any(m in str(error).lower() for m in missing)
            else "error"
        )
        return record | {
            "status": status,
            "reason": " ".join(reasons) or str(error).splitlines()[0],
        }
    finally:
        if device.type == "cuda":
            torch.cuda.empty_cache()
    record["tflops"] = attention_flops(case) / (record["ms"] * 1e-3) / 1e12
    return record


def runs_on(case: Case, device: torch.device) -> bool:
    """Whether the bench runs the case's path on the device: the kernel paths on CUDA only (under the
    interpreter they would run, but their times would mean nothing)."""
    return case.path not in KERNEL_PATHS or device.type == "cuda"


def kernels(case: Case) -> list[str]:
    """The kernels of a kernel path that have launch configurations (`qkv_lab.pinning.KERNELS`), in the
    order they are tuned: dQ's before dK/dV's, so that the dK/dV variant that computes dQ itself
    (ATOMIC_DQ) is timed against the two kernels with dQ's already chosen."""
    if case.path in DECODE_PATHS:
        return ["decode"]
    return (
        ["forward", "dq", "dkdv"]
        if case.mode == "forward+backward"
        else ["forward"]
    )


def output_gradient(case: Case, q: Tensor) -> Tensor | None:
    """The seeded gradient of the output `(B, H, L, D)` that a forward + backward case is checked with;
    None for a forward case."""
    if case.mode != "forward+backward":
        return None
    generator = torch.Generator(device=q.device).manual_seed(1)
    return torch.randn(
        q.shape, generator=generator, device=q.device, dtype=q.dtype
    )


def _checker(
    case: Case, q: Tensor, k: Tensor, v: Tensor, masks: dict
) -> Callable[[], dict]:
    """`check()`: the case's path against the float32 reference, `{name: (error, allowed)}`.

    Every element of the output, and of dQ, dK and dV with a backward (`qkv_lab.gradients`); of packed
    documents, the output's first rows of each document (`check_output`).
    """
    if case.documents:
        return lambda: {"output": check_output(case, q, k, v, masks)}
    reference = gradients.Check(q, k, v, masks, output_gradient(case, q))
    return lambda: reference.errors(attention_function(case.path))


def _attempt(
    check: Callable[[], dict], call: Callable[[], None], device: torch.device
) -> pinning.Attempt:
    """What `pinning.tune` runs for each configuration: the check, then the timing if it passed."""

    def attempt(choice: dict) -> Timing | str:
        failed = gradients.failure(check())
        if failed:
            return failed
        call()  # compiles
        return timing_ms(call, device)

    return attempt


def _inputs(
    case: Case, device: torch.device
) -> tuple[Tensor, Tensor, Tensor, dict]:
    """Seeded q `(B, H, L, D)`, k and v `(B, H_kv, S, D)`, and the mask options of `attention`; for
    `qkv-flash-varlen` on documents, the same packed by `pack_documents`."""
    generator = torch.Generator(device=device).manual_seed(0)
    dtype = DTYPES[case.dtype]
    q = torch.randn(
        (case.batch, case.heads, case.seqlen_q, case.head_dim),
        device=device,
        dtype=dtype,
        generator=generator,
    )
    k, v = (
        torch.randn(
            (case.batch, case.heads_kv, case.seqlen_k, case.head_dim),
            device=device,
            dtype=dtype,
            generator=generator,
        )
        for _ in range(2)
    )
    lengths = key_lengths(case)
    masks = {
        "is_causal": case.causal,
        "window": case.window,
        "key_lengths": None
        if lengths is None
        else torch.tensor(lengths, device=device),
        "enable_gqa": case.heads != case.heads_kv,
    }
    if case.path == VARLEN_PATH and case.documents:
        return pack_documents(case, q, k, v, masks)
    return q, k, v, masks


def check_output(
    case: Case, q: Tensor, k: Tensor, v: Tensor, masks: dict
) -> tuple[float, float]:
    """The case's error on a block of query rows against float32, and the error it is allowed.

    The block is the first `CHECKED_ROWS` rows (the same mask as `(rows, S)`, top-left), or the last ones
    where the mask is aligned bottom-right or L = S (the same mask as `(rows, S)` bottom-right). Of
    documents (causal, top-left), it is the first rows of each, padded or packed: they see only the
    document's first keys, the same in both layouts.
    """
    if case.documents:
        return _check_documents(case, q, k, v, masks)
    rows = min(CHECKED_ROWS, case.seqlen_q)
    last = case.causal == "bottom_right" or case.seqlen_q == case.seqlen_k
    block = slice(case.seqlen_q - rows, None) if last else slice(0, rows)
    causal = "bottom_right" if last and case.causal else case.causal
    q_block = q[:, :, block]
    with torch.no_grad():
        out = attention_function(case.path)(q, k, v, **masks)[
            :, :, block
        ].float()
        block_masks = masks | {"is_causal": causal}
        expected = attention(
            q_block.float(),
            k.float(),
            v.float(),
            backend="reference",
            **block_masks,
        )
        torch_own = attention(
            q_block, k, v, backend="torch", **block_masks
        ).float()
    return _error_and_allowed(out, expected, torch_own)


def _check_documents(
    case: Case, q: Tensor, k: Tensor, v: Tensor, masks: dict
) -> tuple[float, float]:
    """`check_output` of a documents case: the first rows of each document, as the reference sees them."""
    if case.causal != "top_left":
        raise ValueError(
            "documents are checked under the top-left causal mask only"
        )
    lengths = key_lengths(case)
    rows = min(CHECKED_ROWS, *lengths)
    starts = torch.tensor(
        [0, *itertools.accumulate(lengths[:-1])], device=q.device
    )

    # (B, heads, rows, D), from (B, heads, S, D) or (total, heads, D)
    def first_rows(x: Tensor) -> Tensor:
        if x.dim() == 4:
            return x[:, :, :rows]
        # (B, rows)
        index = starts[:, None] + torch.arange(rows, device=x.device)
        # (B, rows, heads, D) -> (B, heads, rows, D)
        return x[index].transpose(1, 2)

    q_block, k_block, v_block = (first_rows(x) for x in (q, k, v))
    block_masks = {
        "is_causal": case.causal,
        "window": case.window,
        "key_lengths": None,
    }
    block_masks |= {"enable_gqa": case.heads != case.heads_kv}
    with torch.no_grad():
        out = first_rows(
            attention_function(case.path)(q, k, v, **masks)
        ).float()
        expected = attention(
            q_block.float(),
            k_block.float(),
            v_block.float(),
            backend="reference",
            **block_masks,
        )
        torch_own = attention(
            q_block, k_block, v_block, backend="torch", **block_masks
        ).float()
    return _error_and_allowed(out, expected, torch_own)


def _error_and_allowed(
    out: Tensor, expected: Tensor, torch_own: Tensor
) -> tuple[float, float]:
    """The largest error of `out`, and twice torch's own in the same dtype (plus 1e-5)."""
    error = (out - expected).abs().max().item()
    allowed = 2 * (torch_own - expected).abs().max().item() + 1e-5
    return error, allowed


def _make_call(
    case: Case, q: Tensor, k: Tensor, v: Tensor, masks: dict
) -> Callable[[], None]:
    """A no-argument function that runs the case once (forward, or forward and backward)."""
    backward = case.mode == "forward+backward"
    q, k, v = (x.requires_grad_(backward) for x in (q, k, v))
    d_out = torch.randn_like(q)
    attention = attention_function(case.path)

    def call() -> None:
        if backward:
            attention(q, k, v, **masks).backward(d_out)
            # Drop the gradients: the next call must not accumulate into them, and memory measured
            # from before a call must not count the previous call's gradients as already there.
            q.grad = k.grad = v.grad = None
        else:
            with torch.no_grad():
                attention(q, k, v, **masks)

    return call


@contextlib.contextmanager
def _warnings_as_reason() -> Iterator[list[str]]:
    """Collect warnings (torch explains a missing kernel in warnings) as one-line reasons."""
    reasons: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield reasons
        finally:
            reasons.extend(
                str(warning.message).splitlines()[0] for warning in caught
            )


def cases(args: argparse.Namespace) -> list[Case]:
    """Every case of the suites asked for on the command line, in the order they are measured."""
    return [
        Case(path, mode, dtype, head_dim, **shape, suite=suite)
        for suite in args.suite
        for dtype in args.dtype
        for head_dim in args.head_dim
        for shape, modes in _shapes(suite, head_dim, args)
        for mode in args.mode
        if mode in modes
        for path in args.paths
    ]


def _shapes(
    suite: str, head_dim: int, args: argparse.Namespace
) -> Iterator[tuple[dict, tuple]]:
    """The shapes and masks of one suite, as `Case` fields, each with the modes it is measured in."""
    heads = args.hidden // head_dim
    if suite == "square":
        for causal in args.causal:
            for n in args.n:
                batch = max(1, args.tokens // n)
                yield _shape(n, n, batch, heads, heads, causal=causal), MODES
    elif suite == "decode":
        for seqlen_k in (4096, 16384, 65536, 131072):
            for seqlen_q in (1, 4, 16):
                yield (
                    _shape(seqlen_q, seqlen_k, 4, heads, heads, "bottom_right"),
                    ("forward",),
                )
    elif suite == "split-kv":
        for batch, lengths in (
            (4, (4096, 16384, 65536, 131072)),
            (16, (4096, 16384, 32768)),
        ):
            for seqlen_k in lengths:
                for seqlen_q in (1, 4, 16):
                    yield (
                        _shape(
                            seqlen_q, seqlen_k, batch, 32, 8, "bottom_right"
                        ),
                        ("forward",),
                    )
    elif suite == "gqa":
        for n in (4096, 16384):
            yield (
                _shape(
                    n, n, max(1, args.tokens // n), 32, 8, causal="top_left"
                ),
                MODES,
            )
        yield _shape(16, 32768, 4, 32, 8, causal="bottom_right"), ("forward",)
    elif suite == "window":
        yield (
            _shape(65536, 65536, 1, heads, heads, "top_left", window=4096),
            MODES,
        )
    elif suite == "padding":
        for n in (4096, 16384):
            yield _shape(n, n, 4, heads, heads, padded=True), MODES
    elif suite == "long":
        yield _shape(131072, 131072, 1, heads, heads, causal="top_left"), MODES
    elif suite == "varlen":
        for n in (4096, 16384):
            yield (
                _shape(
                    n,
                    n,
                    4,
                    heads,
                    heads,
                    "top_left",
                    padded=True,
                    documents=True,
                ),
                MODES,
            )


def _shape(
    seqlen_q, seqlen_k, batch, heads, heads_kv, causal=False, **more
) -> dict:
    fields = {
        "causal": causal,
        "seqlen_q": seqlen_q,
        "seqlen_k": seqlen_k,
        "batch": batch,
    }
    return fields | {"heads": heads, "heads_kv": heads_kv, **more}


def run(
    args: argparse.Namespace,
    progress: TextIO | None = sys.stderr,
    on_result: Callable[[dict], None] | None = None,
) -> dict:
    """Measure every case, with a progress line on `progress`; return the report (environment + results).

    `on_result(report)` is called after every case with the report so far (to save it as it grows).
    """
    device = torch.device(args.device)
    todo = cases(args)
    report = {
        "environment": environment(device),
        "arguments": vars(args),
        "results": [],
    }
    # do_bench, the memory statistics and Triton's launches all use the current CUDA device.
    current = (
        torch.cuda.device(device)
        if device.type == "cuda"
        else contextlib.nullcontext()
    )
    with current:
        for index, case in enumerate(todo, start=1):
            if progress:
                label = f"{case.suite} {case.path} {case.mode} {case.dtype} D={case.head_dim}"
                label += f" L={case.seqlen_q} S={case.seqlen_k}"
                print(
                    f"\r[{index:>3}/{len(todo)}] {label:<72}",
                    end="",
                    file=progress,
                    flush=True,
                )
            report["results"].append(measure(case, device))
            if on_result:
                on_result(report)
    if progress:
        print(file=progress)
    return report


def dispatch_table(report: dict) -> list[dict]:
    """The cases that both `torch` and `qkv-flash` ran, as `qkv.dispatch` reads them (`measured.json`)."""
    times: dict[Case, dict[str, float]] = {}
    for record in report["results"]:
        if (
            record["path"] in ("torch", "qkv-flash")
            and record["status"] == "ok"
        ):
            case = Case(
                **{
                    field.name: record[field.name]
                    for field in dataclasses.fields(Case)
                }
            )
            times.setdefault(dataclasses.replace(case, path="both"), {})[
                case.path
            ] = record["ms"]
    env = report["environment"]
    return [
        _table_entry(case, ms, env)
        for case, ms in times.items()
        if len(ms) == 2
    ]


def _table_entry(case: Case, ms: dict[str, float], env: dict) -> dict:
    """One measured case: the GPU, what `call_kind` compares, the shape, both times, the versions."""

    # (B, heads, length, D), no storage
    def meta(heads: int, length: int) -> Tensor:
        shape = (case.batch, heads, length, case.head_dim)
        return torch.empty(shape, dtype=DTYPES[case.dtype], device="meta")

    padded = torch.empty(case.batch, device="meta") if case.padded else None
    backward = case.mode == "forward+backward"
    q, k = meta(case.heads, case.seqlen_q), meta(case.heads_kv, case.seqlen_k)
    mask = Mask(
        alignment=case.causal or None, window=case.window, key_lengths=padded
    )
    kind = call_kind(q, k, mask, backward)
    shape = {
        "seqlen_q": case.seqlen_q,
        "seqlen_k": case.seqlen_k,
        "batch": case.batch,
    }
    shape |= {"heads": case.heads, "heads_kv": case.heads_kv}
    versions = {
        name: env[name] for name in ("date_utc", "torch", "triton", "cudnn")
    }
    times = {"triton_ms": ms["qkv-flash"], "torch_ms": ms["torch"]}
    return {
        "device_name": env["device_name"],
        **kind,
        **shape,
        **times,
        **versions,
    }


def write_table(report: dict, path: Path) -> None:
    """Add the report's measured cases to the table at `path`, replacing earlier ones of the same case."""
    new = dispatch_table(report)
    about = "Times of qkv.attention's triton and torch backends, measured by python -m qkv_lab.bench --table."
    table = {"about": about, "cases": []}
    if path.exists():
        table = json.loads(path.read_text(encoding="utf-8"))
    identity = (
        "device_name",
        "dtype",
        "head_dim",
        "causal",
        "window",
        "key_lengths",
        "grouped",
    )
    identity += ("mode", "seqlen_q", "seqlen_k")

    def same(case: dict) -> tuple:
        return tuple(case[name] for name in identity)

    replaced = {same(case) for case in new}
    table["cases"] = [
        case for case in table["cases"] if same(case) not in replaced
    ] + new
    write_json(table, path)


def draw(
    report: dict, mode: str, dtype: str, head_dim: int, causal: bool | str
) -> Figure:
    """TFLOP/s against N for one square configuration, a line per path that ran; device and date in the title."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.2), layout="constrained")
    ax = fig.subplots()
    for path in PATHS:
        points = [
            (record["seqlen_k"], record["tflops"])
            for record in report["results"]
            if record["suite"] == "square"
            and (record["path"], record["mode"], record["dtype"])
            == (path, mode, dtype)
            and (record["head_dim"], record["causal"]) == (head_dim, causal)
            and record["tflops"]
        ]
        if points:
            ax.plot(*zip(*points, strict=True), "o-", label=path)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequence length N")
    ax.set_ylabel("TFLOP/s")
    env = report["environment"]
    masking = "causal" if causal else "full"
    ax.set_title(
        f"{mode}, {dtype}, D={head_dim}, {masking}\n"
        f"{env['device_name']}, torch {env['torch']}, {env['date_utc']}",
        fontsize="medium",
    )
    ax.legend()
    return fig


def plot(report: dict, directory: Path) -> list[Path]:
    """One PNG per (mode, dtype, head size, causal) of the square suite, drawn by `draw`; their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    configurations = dict.fromkeys(
        (r["mode"], r["dtype"], r["head_dim"], r["causal"])
        for r in report["results"]
        if r["suite"] == "square"
    )
    written = []
    for mode, dtype, head_dim, causal in configurations:
        masking = "causal" if causal else "full"
        path = (
            directory
            / f"{mode.replace('+', '-')}_{dtype}_d{head_dim}_{masking}.png"
        )
        draw(report, mode, dtype, head_dim, causal).savefig(path, dpi=120)
        written.append(path)
    return written


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m qkv_lab.bench",
        description="TFLOP/s and peak memory of attention implementations, forward and forward+backward.",
    )
    cuda = torch.cuda.is_available()
    parser.add_argument(
        "--device", default="cuda" if cuda else "cpu", help="cuda or cpu"
    )
    parser.add_argument(
        "--n",
        type=int,
        nargs="+",
        help="square suite: sequence lengths (default 512 .. 16384 on CUDA, 128 256 on CPU)",
    )
    parser.add_argument(
        "--head-dim",
        type=int,
        nargs="+",
        default=[64, 128],
        help="head sizes D",
    )
    parser.add_argument(
        "--dtype", nargs="+", choices=DTYPES, default=["bf16", "fp16"]
    )
    parser.add_argument(
        "--causal",
        nargs="+",
        choices=["no", "yes"],
        default=["no", "yes"],
        help="square suite: without and/or with the causal mask",
    )
    parser.add_argument(
        "--suite", nargs="+", choices=SUITES, default=["square"], help="shapes"
    )
    parser.add_argument("--mode", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument(
        "--paths", nargs="+", choices=PATHS, default=list(PATHS)
    )
    parser.add_argument(
        "--tokens",
        type=int,
        help="square and gqa suites: batch * N (default 16384 on CUDA, 512 on CPU; batch >= 1)",
    )
    parser.add_argument(
        "--hidden",
        type=int,
        help="heads * D (default 2048 on CUDA, 256 on CPU; must divide by D)",
    )
    parser.add_argument(
        "--out", type=Path, default=Path("results.json"), help="JSON report"
    )
    parser.add_argument(
        "--plot",
        type=Path,
        help="directory for one PNG per square configuration",
    )
    parser.add_argument(
        "--table",
        type=Path,
        help="measured table for auto (qkv/kernels/measured.json)",
    )
    args = parser.parse_args(argv)
    on_cuda = args.device.startswith("cuda")
    if on_cuda and not cuda:
        parser.error(
            "--device cuda: torch sees no CUDA device here; use --device cpu"
        )
    args.n = args.n or ([2**i for i in range(9, 15)] if on_cuda else [128, 256])
    args.tokens = args.tokens or (16384 if on_cuda else 512)
    args.hidden = args.hidden or (2048 if on_cuda else 256)
    if any(args.hidden % head_dim for head_dim in args.head_dim):
        parser.error(
            f"--hidden {args.hidden} must be a multiple of every --head-dim {args.head_dim}"
        )
    args.causal = [
        {"no": False, "yes": "top_left"}[answer] for answer in args.causal
    ]
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark from the command line; write the JSON report and, if asked, plots and table."""
    args = parse_args(argv)

    # after every case: a run cut short keeps what it measured
    def save(report: dict) -> None:
        write_json(report, args.out)
        if args.table:
            write_table(report, args.table)

    report = run(args, on_result=save)
    save(report)
    print(
        f"wrote {args.out}" + (f" and {args.table}" if args.table else ""),
        file=sys.stderr,
    )
    if args.plot:
        for path in plot(report, args.plot):
            print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
