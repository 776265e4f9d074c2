"""One call of a reader's function, watched: what it returned or raised, warned, changed and built.

`call` runs the function on copies of a case's arguments, within a time budget (on the main thread of a
system with `SIGALRM`: progress is printed while a slow case runs, and the call is stopped when the budget
is spent), records its warnings instead of letting them print or raise, notices inputs changed in place,
the largest tensor it made, how many torch calls, and the two slips torch only warns of that change the
result: `.T` of a tensor of three axes or more (it reverses them all) and a softmax whose axis is left to
torch on three axes or more (not the last). A `TorchFunctionMode` sees every torch function and method the
function calls, and what each returns; views are not counted as tensors made (they hold no memory of their
own), and a fused `scaled_dot_product_attention` counts as the (..., L, S) scores it computes inside. (A `TorchDispatchMode` would see each aten operation, but entering the first one imports
`torch._dynamo`, seconds on a reader's first check.)
"""

import contextlib
import dataclasses
import math
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.overrides import TorchFunctionMode

from qkv.exercises.exercise import Case

BUDGET_S = 10.0  # seconds a case may take: the references take milliseconds
# seconds between the lines that say a slow case is still running
PROGRESS_S = 2.0


class OverBudget(BaseException):
    """Raised inside the reader's function when its case has run out of time (not an Exception: a
    reader's `except Exception` does not swallow it)."""


@dataclasses.dataclass
class Call:
    """What one call of the reader's function did."""

    value: object = None
    error: BaseException | None = None
    warned: list[str] = dataclasses.field(default_factory=list)
    # inputs it changed in place
    changed: list[str] = dataclasses.field(default_factory=list)
    # numel and shape of the largest tensor it made
    largest: tuple[int, tuple[int, ...]] = (0, ())
    seconds: float = 0.0
    calls: int = 0  # torch functions and methods it called
    # "T", "softmax dim"
    slips: set[str] = dataclasses.field(default_factory=set)

    @property
    def over_budget(self) -> bool:
        return isinstance(self.error, OverBudget)


def copies(case: Case) -> list[object]:
    """The case's arguments, tensors copied: neither the reader nor a reference can change the case."""
    return [
        value.clone() if isinstance(value, Tensor) else value
        for value in case.args.values()
    ]


def call(fn: Callable[..., object], case: Case, what: str) -> Call:
    """Run `fn` on copies of `case`'s arguments; `what` names the case in progress lines."""
    args = copies(case)
    result = Call()
    watch = _Watch()
    start, running = time.monotonic(), [True]
    warn_always = torch.is_warn_always_enabled()
    # torch's warn-once warnings, every time: each call is seen alone
    torch.set_warn_always(True)
    with (
        warnings.catch_warnings(record=True) as caught,
        _budget(what, start, running),
    ):
        warnings.simplefilter("always")
        try:
            with watch:
                result.value = fn(*args)
        # KeyboardInterrupt still interrupts
        except (Exception, SystemExit, OverBudget) as error:
            result.error = error
        finally:
            running[0] = False
            torch.set_warn_always(warn_always)
    result.seconds = time.monotonic() - start
    result.warned = [f"{w.category.__name__}: {w.message}" for w in caught]
    result.largest, result.calls, result.slips = (
        watch.largest,
        watch.calls,
        watch.slips,
    )
    result.changed = [
        name
        for (name, before), after in zip(case.args.items(), args, strict=True)
        if isinstance(before, Tensor) and not _unchanged(before, after)
    ]
    return result


def _unchanged(before: Tensor, after: object) -> bool:
    if (
        not isinstance(after, Tensor)
        or after.shape != before.shape
        or after.dtype != before.dtype
    ):
        return False
    if after.device != before.device:
        return False
    if torch.equal(after, before):
        return True
    return before.is_floating_point() and torch.allclose(
        after, before, 0, 0, equal_nan=True
    )


class _Watch(TorchFunctionMode):
    """Remembers the largest tensor that a torch function or method made (views hold no memory of
    their own and are not counted; fused attention counts as its (..., L, S) scores), counts the
    calls, and notes the slips: `.T` or a softmax without `dim` on three axes or more."""

    def __init__(self) -> None:
        super().__init__()
        self.largest: tuple[int, tuple[int, ...]] = (0, ())
        self.calls = 0
        self.slips: set[str] = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls += 1
        first = args[0] if args else None
        if isinstance(first, Tensor) and first.dim() >= 3:
            if getattr(func, "__self__", None) is Tensor.T:
                self.slips.add("T")
            dim = (kwargs or {}).get("dim", args[1] if len(args) > 1 else None)
            if func in (F.softmax, F.log_softmax) and dim is None:
                self.slips.add("softmax dim")  # torch's choice: 0 or 1
        out = func(*args, **(kwargs or {}))
        made = out if isinstance(out, tuple | list) else (out,)
        shapes = [
            tuple(t.shape)
            for t in made
            if isinstance(t, Tensor) and t._base is None
        ]
        # fused: its (..., L, S) scores are inside
        if func is F.scaled_dot_product_attention:
            key = (kwargs or {}).get("key", args[1] if len(args) > 1 else None)
            shapes += (
                [(*out.shape[:-1], key.size(-2))]
                if isinstance(key, Tensor)
                else []
            )
        for shape in shapes:
            if math.prod(shape) > self.largest[0]:
                self.largest = (math.prod(shape), shape)
        return out


@contextlib.contextmanager
def _budget(what: str, start: float, running: list[bool]) -> Iterator[None]:
    """Progress every PROGRESS_S seconds and OverBudget after BUDGET_S, where SIGALRM can deliver them."""
    if (
        not hasattr(signal, "setitimer")
        or threading.current_thread() is not threading.main_thread()
    ):
        yield  # no timer here (Windows, or a thread): the case runs unbounded
        return

    def tick(signum, frame) -> None:
        if not running[0]:  # the function has returned: nothing to stop
            return
        elapsed = time.monotonic() - start
        if elapsed >= BUDGET_S:
            raise OverBudget
        print(f"... {what}: still running after {elapsed:.0f} s", flush=True)

    step = min(PROGRESS_S, BUDGET_S)
    previous = signal.signal(signal.SIGALRM, tick)
    old_delay, old_interval = signal.setitimer(signal.ITIMER_REAL, step, step)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if old_delay:  # someone else's timer, resumed with what it had left
            left = max(old_delay - (time.monotonic() - start), 1e-3)
            signal.setitimer(signal.ITIMER_REAL, left, old_interval)
