"""Input validation shared by the public functions: one place, messages that name arguments and shapes."""

import math
from collections.abc import Sequence
from itertools import pairwise, zip_longest
from numbers import Real

import torch
from torch import Tensor, nn


def shape(x: Tensor) -> tuple[int, ...]:
    """The shape of `x` as a plain tuple, for error messages."""
    return tuple(x.shape)


def dtype_or_type(x: object) -> str:
    """What a message says `x` is: `dtype ...` for a tensor, else the name of its type."""
    return f"dtype {x.dtype}" if isinstance(x, Tensor) else type(x).__name__


def check_tensor(name: str, x: object, min_dim: int = 1) -> None:
    """Raise unless `x` is a floating-point tensor with at least `min_dim` dimensions."""
    if not isinstance(x, Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor, got {type(x).__name__}"
        )
    if not x.is_floating_point():
        raise TypeError(
            f"{name} must be a floating-point tensor, got dtype {x.dtype}"
        )
    if x.dim() < min_dim:
        raise ValueError(
            f"{name} must have at least {min_dim} dimensions, got shape {shape(x)}"
        )


def check_integer_tensor(
    name: str, x: object, device: torch.device | None = None
) -> None:
    """Raise unless `x` is a tensor of an integer dtype (not bool), on `device` when one is given."""
    if not isinstance(x, Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor, got {type(x).__name__}"
        )
    if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
        raise TypeError(
            f"{name} must be an integer tensor, got dtype {x.dtype}"
        )
    if device is not None and x.device != device:
        raise ValueError(f"{name} is on {x.device} but must be on {device}")


def check_number(name: str, value: object, above: float = -math.inf) -> None:
    """Raise unless `value` is a finite real number (not a bool) greater than `above`."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if not (math.isfinite(value) and value > above):
        bound = "" if above == -math.inf else f" above {above}"
        raise ValueError(f"{name} must be a finite number{bound}, got {value}")


def check_bool(name: str, flag: object) -> None:
    """Raise unless `flag` is a bool: a truthy string such as "bottom_right" must not pass for True."""
    if not isinstance(flag, bool):
        raise TypeError(
            f"{name} must be a bool, got {type(flag).__name__} {flag!r}"
        )


def check_device(device: object) -> None:
    """Raise, naming `device`, unless it is None or a device torch knows ("cpu", "cuda:0", a torch.device).

    Whether this machine has that device is torch's to say, when a tensor is made there.
    """
    if device is None or isinstance(device, torch.device):
        return
    if isinstance(device, bool) or not isinstance(device, str | int):
        raise TypeError(
            f"device must be a torch.device, a str such as 'cuda:0' or an int, got "
            f"{type(device).__name__}"
        )
    try:
        torch.device(device)
    except RuntimeError as error:
        raise ValueError(
            f"device must name a device torch knows, got {device!r}: {error}"
        ) from None


def check_sizes(minimum: int = 1, **sizes: object) -> None:
    """Raise unless every named size is an int of at least `minimum` (0 or 1)."""
    for name, size in sizes.items():
        if isinstance(size, bool) or not isinstance(size, int):
            raise TypeError(f"{name} must be an int, got {type(size).__name__}")
        if size < minimum:
            raise ValueError(
                f"{name} must be {'positive' if minimum else 'non-negative'}, got {size}"
            )


def check_cumulative_lengths(
    name: str, cu_seqlens: object, total: int | None = None, packed: str = ""
) -> list[int]:
    """Raise unless `cu_seqlens` holds the cumulative lengths of packed sequences; return the N lengths.

    Cumulative lengths are int32 `(N + 1,)`, start at 0, never decrease and, when `total` is given, end at
    it: sequence `b` is tokens `cu_seqlens[b] .. cu_seqlens[b + 1] - 1`. `packed` names the tensor whose
    tokens `total` counts, for the message. Reads the values (a device sync on a GPU).
    """
    if not isinstance(cu_seqlens, Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor, got {type(cu_seqlens).__name__}"
        )
    if cu_seqlens.dtype != torch.int32:
        raise TypeError(
            f"{name} must be int32 cumulative lengths, got dtype {cu_seqlens.dtype}"
        )
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() == 0:
        raise ValueError(
            f"{name} must be 1-D (N + 1,), got shape {shape(cu_seqlens)}"
        )
    values = cu_seqlens.tolist()
    if values[0] != 0:
        raise ValueError(f"{name} must start at 0, got {_few(values)}")
    for index, (before, after) in enumerate(pairwise(values)):
        if after < before:
            raise ValueError(
                f"{name} must not decrease, got {name}[{index}] = {before} > "
                f"{name}[{index + 1}] = {after}: {_few(values)}"
            )
    if total is not None and values[-1] != total:
        raise ValueError(
            f"{name} must end at the number of packed tokens, {total} ({packed}), "
            f"got {values[-1]}: {_few(values)}"
        )
    return [after - before for before, after in pairwise(values)]


def _few(values: list[int], shown: int = 12) -> str:
    """`values` for a message: all of them, or the first and last few of a long list."""
    if len(values) <= shown:
        return str(values)
    half = shown // 2
    return f"[{', '.join(map(str, values[:half]))}, ..., {', '.join(map(str, values[-half:]))}]"


def check_cache_update(
    layout: tuple[str, ...],
    new: dict[str, object],
    held: dict[str, Tensor | None],
) -> None:
    """Raise unless an update fits a cache of two tensors laid out as `layout`.

    The new pair must be tensors of the layout's rank that agree on every axis
    but the last, in dtype and device; where the cache holds a pair (`held`,
    named as the messages should name it), each new tensor must agree with its
    held one on every axis but the time, the next to last, and in dtype and
    device.
    """
    for name, x in new.items():
        check_tensor(name, x)
        if x.dim() != len(layout):
            raise ValueError(
                f"{name} must be ({', '.join(layout)}), got shape {shape(x)}"
            )
    check_same_dtype_and_device(**new)
    (a, x), (b, y) = new.items()
    if x.shape[:-1] != y.shape[:-1]:
        raise ValueError(
            f"{a} and {b} disagree on ({', '.join(layout[:-1])}): "
            f"{a} {shape(x)} vs {b} {shape(y)}"
        )
    if any(kept is None for kept in held.values()):
        return
    but_time = ", ".join((*layout[:-2], ".", layout[-1]))
    for (name, x), (kept_name, kept) in zip(
        new.items(), held.items(), strict=True
    ):
        if x.shape[:-2] != kept.shape[:-2] or x.size(-1) != kept.size(-1):
            raise ValueError(
                f"{name} {shape(x)} disagrees with the {kept_name} "
                f"{shape(kept)} on {but_time}"
            )
    kept_name, kept = next(iter(held.items()))
    check_same_dtype_and_device(**{kept_name: kept, a: x})


def check_same_dtype_and_device(**tensors: Tensor) -> None:
    """Raise if the named tensors differ in dtype or device."""
    (first_name, first), *rest = tensors.items()
    for name, x in rest:
        if x.dtype != first.dtype:
            raise TypeError(
                f"{first_name} and {name} disagree on dtype: {first_name} {first.dtype} vs {name} {x.dtype}"
            )
        if x.device != first.device:
            raise ValueError(
                f"{first_name} and {name} are on different devices: "
                f"{first_name} {first.device} vs {name} {x.device}"
            )


def check_mask(
    name: str, mask: object, query: Tensor, meaning: str = "True = may attend"
) -> None:
    """Raise unless `mask` is bool, float32 or `query`'s dtype, on its device; `meaning` says what True means.

    The dtypes are the ones `torch.nn.functional.scaled_dot_product_attention` takes.
    """
    if not isinstance(mask, Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor, got {type(mask).__name__}"
        )
    if mask.dtype != torch.bool and not mask.is_floating_point():
        raise TypeError(
            f"{name} must be bool ({meaning}) or floating point, got {mask.dtype}"
        )
    if mask.is_floating_point() and mask.dtype not in (
        torch.float32,
        query.dtype,
    ):
        raise TypeError(
            f"{name} of dtype {mask.dtype} must be bool, float32 or query's dtype {query.dtype}"
        )
    if mask.device != query.device:
        raise ValueError(
            f"{name} is on {mask.device} but query is on {query.device}"
        )


def broadcast_shape(*shapes: Sequence[int]) -> tuple[int, ...] | None:
    """The shape that `shapes` broadcast to under torch's rule, or None if they do not broadcast.

    `torch.broadcast_shapes` gives the same answer, but its first call imports sympy: seconds, on a reader's
    first attention call.
    """
    sizes = []
    for column in zip_longest(
        *(reversed(tuple(s)) for s in shapes), fillvalue=1
    ):  # from the right
        other_than_1 = set(column) - {1}
        if len(other_than_1) > 1:
            return None
        sizes.append(other_than_1.pop() if other_than_1 else 1)
    return tuple(reversed(sizes))


def check_broadcast(
    name: str,
    mask: Tensor,
    target: tuple[int, ...],
    of: str = "the scores' shape",
) -> None:
    """Raise unless `mask` broadcasts to `target`, which the message calls `of`."""
    if broadcast_shape(mask.shape, target) != tuple(target):
        raise ValueError(
            f"{name} of shape {shape(mask)} does not broadcast to {of} {tuple(target)}"
        )


def _batch(x: Tensor, query: Tensor, enable_gqa: bool) -> tuple[int, ...]:
    """The batch dimensions of `x` as they meet the query's: with `enable_gqa`, its heads become the query's."""
    return (
        (*x.shape[:-3], query.size(-3)) if enable_gqa else tuple(x.shape[:-2])
    )


def check_attention_inputs(
    query: Tensor,
    key: Tensor,
    value: Tensor | None,
    scale: float | None,
    enable_gqa: bool,
    dropout_p: float = 0.0,
    names: tuple[str, str, str] = ("query", "key", "value"),
) -> tuple[int, ...]:
    """Raise, naming the argument and the shapes, unless the inputs make a well-formed attention call.

    The batch dimensions `...` of query, key and value broadcast against each other, as in torch's function.
    The masks are `qkv.masks.parse_mask`'s to check. `names` are what the caller calls its query, key and
    value arguments.

    Returns:
        The shape of the scores, `(..., L, S)`.
    """
    q_name, k_name, v_name = names
    tensors = {q_name: query, k_name: key, v_name: value}
    tensors = {name: x for name, x in tensors.items() if x is not None}
    for name, x in tensors.items():
        check_tensor(name, x, 3 if enable_gqa else 2)
    check_same_dtype_and_device(**tensors)
    if query.size(-1) != key.size(-1):
        raise ValueError(
            f"{q_name} and {k_name} disagree on the feature size E: "
            f"{q_name} {shape(query)} vs {k_name} {shape(key)}"
        )
    if value is not None and value.size(-2) != key.size(-2):
        raise ValueError(
            f"{k_name} and {v_name} disagree on the number of keys S: "
            f"{k_name} {shape(key)} vs {v_name} {shape(value)}"
        )
    for name, x in tensors.items() if enable_gqa else ():
        if query.size(-3) % x.size(-3) != 0:
            raise ValueError(
                f"with enable_gqa, the {name}'s heads must divide the {q_name}'s: {q_name} "
                f"{shape(query)} has {query.size(-3)} heads, {name} {shape(x)} has {x.size(-3)}"
            )
    batches = {
        name: _batch(x, query, enable_gqa) for name, x in tensors.items()
    }
    if broadcast_shape(*batches.values()) is None:
        given = ", ".join(f"{name} {shape(x)}" for name, x in tensors.items())
        raise ValueError(
            f"the batch dimensions (...) do not broadcast: {given}"
        )
    check_scale(scale)
    check_probability("dropout_p", dropout_p)
    batch = broadcast_shape(batches[q_name], batches[k_name])
    return (*batch, query.size(-2), key.size(-2))


def check_scale(scale: object) -> None:
    """Raise unless `scale` is None or a finite real number (a Python or NumPy int or float, not a bool)."""
    if scale is not None and (
        isinstance(scale, bool) or not isinstance(scale, Real)
    ):
        raise TypeError(
            f"scale must be a number or None, got {type(scale).__name__}"
        )
    if scale is not None and not math.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale}")


def check_probability(name: str, p: object) -> None:
    """Raise unless `p` is a number in [0, 1]."""
    if isinstance(p, bool) or not isinstance(p, Real):
        raise TypeError(f"{name} must be a number, got {type(p).__name__}")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{name} must lie in [0, 1], got {p}")


def check_batch_first(
    names: tuple[str, str, str],
    tensors: tuple[Tensor, Tensor, Tensor],
    features: tuple[int | None, ...],
    unbatched: bool = False,
) -> None:
    """Raise unless query `(B, L, ·)`, key `(B, S, ·)` and value `(B, S, ·)` fit together.

    Args:
        names: what the caller calls its query, key and value arguments.
        tensors: the three tensors, in that order.
        features: the size each one's last dimension must have (None: any).
        unbatched: also take `(L, ·)`, `(S, ·)` and `(S, ·)`, as `nn.MultiheadAttention` does.
    """
    for name, x in zip(names, tensors, strict=True):
        check_tensor(name, x)
    check_same_dtype_and_device(**dict(zip(names, tensors, strict=True)))
    (q_name, k_name, v_name), (query, key, value) = names, tensors
    rank = 2 if unbatched and query.dim() == 2 else 3
    for name, x, size in zip(names, tensors, features, strict=True):
        if x.dim() != rank or (size is not None and x.size(-1) != size):
            wanted = "features" if size is None else size
            layout = f"(B, N, {wanted}) (batch first)"
            if rank == 2:
                layout = (
                    f"(N, {wanted}) as the unbatched {q_name} {shape(query)}"
                )
            elif unbatched and x is query:
                layout += f" or (N, {wanted}) (unbatched)"
            raise ValueError(f"{name} must be {layout}, got shape {shape(x)}")
    if key.shape[:-1] != value.shape[:-1]:
        raise ValueError(
            f"{k_name} and {v_name} disagree on {'(B, S)' if rank == 3 else 'S'}: "
            f"{k_name} {shape(key)} vs {v_name} {shape(value)}"
        )
    if query.shape[:-2] != key.shape[:-2]:
        raise ValueError(
            f"{q_name} and {k_name} disagree on the batch size: "
            f"{q_name} {shape(query)} vs {k_name} {shape(key)}"
        )


def check_module_input(name: str, x: Tensor, module: nn.Module) -> None:
    """Raise unless `x` has the dtype and device of `module`'s parameters (a module without any takes all)."""
    parameter = next(module.parameters(), None)
    if parameter is None:
        return
    if x.dtype != parameter.dtype:
        raise TypeError(
            f"{name} has dtype {x.dtype} but the module's parameters are {parameter.dtype}: "
            f"cast one to the other (module.to({x.dtype}) or {name}.to({parameter.dtype}))"
        )
    if x.device != parameter.device:
        raise ValueError(
            f"{name} is on {x.device} but the module's parameters are on {parameter.device}"
        )


def check_key_mask(
    name: str,
    mask: object,
    query: Tensor,
    key: Tensor,
    meaning: str = "True = may attend",
    key_name: str = "key",
) -> None:
    """Raise unless `mask` holds one flag or bias per key: `(B, S)` as `key (B, S, ·)` (`(S,)` unbatched).

    A dimension of size 1 broadcasts; the rank must be the key's, as in `torch.nn.MultiheadAttention`, so that a
    `(S,)` mask is never read against a batch. `meaning` says what True means.
    """
    check_mask(name, mask, query, meaning)
    keys = tuple(key.shape[:-1])  # (B, S), or (S,) unbatched
    layout = "(B, S)" if len(keys) == 2 else "(S,)"
    if mask.dim() != len(keys):
        raise ValueError(
            f"{name} must be {layout}, one entry per key of {key_name} {shape(key)}, "
            f"got shape {shape(mask)}"
        )
    whose = f"{key_name}'" if key_name.endswith("s") else f"{key_name}'s"
    check_broadcast(name, mask, keys, f"{whose} {layout}")


def check_sinks(sinks: object, query: Tensor) -> None:
    """Raise unless `sinks` is None or a float `(H,)` tensor on the query's device, H the query's heads."""
    if sinks is None:
        return
    if not isinstance(sinks, Tensor) or not sinks.is_floating_point():
        got = dtype_or_type(sinks)
        raise TypeError(f"sinks must be a floating-point tensor, got {got}")
    if query.dim() < 3 or sinks.shape != (query.size(-3),):
        raise ValueError(
            f"sinks must be (H,), one logit per query head of query (..., H, L, E), got sinks "
            f"{shape(sinks)} for query {shape(query)}"
        )
    if sinks.device != query.device:
        raise ValueError(
            f"sinks is on {sinks.device} but query is on {query.device}"
        )
