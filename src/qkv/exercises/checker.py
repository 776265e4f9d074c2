"""`check(name, fn)`: run a reader's function on an exercise's cases and print one short verdict.

The verdict formats are stated in `qkv.exercises`' docstring.
"""

import contextlib
import dataclasses
import difflib
import math
import os
import re
import sysconfig
import textwrap
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import torch
from torch import Tensor

import qkv
from qkv.exercises import calls
from qkv.exercises.calls import Call, call, copies
from qkv.exercises.catalogue import EXERCISES
from qkv.exercises.exercise import Case, Exercise, Mistake
from qkv.exercises.observe import observe

SEED = 1706  # every case of every exercise comes from this seed: a reader and CI see the same ones
WIDTH = 78  # characters a line may take: a notebook, and a phone held upright
# (rtol, atol)
TOLERANCE = {torch.float64: (1e-5, 1e-6), torch.float32: (1e-4, 1e-5)}
NBSP = "\u00a0"  # holds a shape together while a line is wrapped
GLUED = r"\((?:[^()]|\([^()]*\))*\)|\[[^\[\]]*\]|all float\d+"  # (...), one level deep; [...]
GRID = (8, 12)  # the largest boolean result drawn as a 0/1 grid: rows, columns
# where no reader's line is: torch, qkv, and the installed packages and standard library they call
LIBRARIES = tuple(
    {str(Path(module.__file__).parent) + os.sep for module in (torch, qkv)}
    | {
        sysconfig.get_path(name) + os.sep
        for name in ("stdlib", "purelib", "platlib")
    }
)


@dataclasses.dataclass(frozen=True, repr=False)
class Result:
    """What `check` found: truthy only when every case passed.

    Attributes:
        name: the exercise.
        status: `"passed"`, `"failed"` or `"not attempted"`.
        cases: how many cases passed (all of them when `status` is `"passed"`).
        total: how many cases the exercise has.
        message: the verdict `check` printed.
        hint: the mistake recognised in the first failing case, if any.
    """

    name: str
    status: Literal["passed", "failed", "not attempted"]
    cases: int
    total: int
    message: str
    hint: str | None = None

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def __bool__(self) -> bool:
        return self.passed

    def __repr__(self) -> str:
        return f"<Result {self.name}: {self.status}, {self.cases} of {self.total} cases passed>"


def names() -> list[str]:
    """The exercises' names, in the site's reading order."""
    return [exercise.name for exercise in EXERCISES]


def check(name: str, fn: Callable[..., object]) -> Result:
    """Run `fn` on the cases of exercise `name` against the package's reference and print the verdict.

    Cases come small first, then the edges; they are drawn from a fixed seed without touching torch's
    global random state. The first case that fails ends the run.

    Args:
        name: one of `names()`, e.g. `"masking/causal-mask"`.
        fn: the reader's function, called with the exercise's arguments in order.

    Returns:
        A `Result`, truthy only when every case passed; its `message` is what was printed.

    Raises:
        ValueError: an unknown `name` (the message lists the exercises).
        TypeError: a `name` that is not a str, or an `fn` that is not callable.
    """
    exercise = _exercise(name)
    if not callable(fn):
        raise TypeError(
            f"fn must be a function, as in check({name!r}, my_function); got {type(fn).__name__}"
        )
    # Tiny tensors: waking a second thread costs more than the work, and 10 ms a call on a busy core.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        # the reader's function may draw from it: undone
        with torch.random.fork_rng(devices=[]):
            result = _run(exercise, fn)
    finally:
        torch.set_num_threads(threads)
    print(result.message)
    return result


def _exercise(name: object) -> Exercise:
    if not isinstance(name, str):
        raise TypeError(
            f"name must be a str such as 'masking/causal-mask', as in check(name, fn); "
            f"got {type(name).__name__}"
        )
    for exercise in EXERCISES:
        if exercise.name == name:
            return exercise
    close = difflib.get_close_matches(name, names(), n=1, cutoff=0.5)
    guess = f"; did you mean {close[0]!r}?" if close else ""
    raise ValueError(
        f"no exercise named {name!r}{guess} The exercises: {', '.join(names())}"
    )


def _run(exercise: Exercise, fn: Callable[..., object]) -> Result:
    # the reader's: their function's new tensors go there
    device = torch.get_default_device()
    with (
        contextlib.nullcontext()
        if device.type == "cpu"
        else torch.device("cpu")
    ):
        cases = exercise.cases(torch.Generator().manual_seed(SEED))
        with torch.no_grad():
            expected = [
                _outputs(exercise.reference(*copies(case))) for case in cases
            ]
        caller = getattr(fn, "__name__", "<lambda>")
        caller = "your function" if caller == "<lambda>" else caller
        made = []
        for index, case in enumerate(cases):
            made.append(_call(fn, cases, index, device))
            if index == 0 and made[0].error is None and made[0].value is None:
                return _not_attempted(exercise, caller, len(cases))
            lines, position = _verdict(
                exercise, case, caller, expected[index], made[index]
            )
            lines = lines or _loops(cases, made, caller)
            if lines:
                break
        else:
            message = f"{exercise.name}: passed all {len(cases)} cases"
            return Result(
                exercise.name, "passed", len(cases), len(cases), message
            )
        # to confirm a hint on more than one case
        for later in range(index + 1, len(cases)):
            if made[-1].over_budget:
                break
            made.append(_call(fn, cases, later, device))
        hint = _hint(exercise, cases, expected, made, index, device)
        seen = (
            None
            if hint
            else _observed(exercise, expected[index], made[index], position)
        )
    head = [f"{exercise.name}: failed case {index + 1} of {len(cases)}"]
    head.append(f"case ({case.label}): {_describe(case.args)}")
    warned = (
        [f"  it warned: {textwrap.shorten(made[index].warned[0], 160)}"]
        if made[index].warned
        else []
    )
    tail = [f"hint: {hint}"] if hint else [seen] if seen else []
    message = _wrap([*head, *lines, *warned, *tail])
    return Result(exercise.name, "failed", index, len(cases), message, hint)


def _call(
    fn: Callable[..., object],
    cases: list[Case],
    index: int,
    device: torch.device,
) -> Call:
    what = f"case {index + 1} of {len(cases)} ({cases[index].label})"
    with (
        contextlib.nullcontext()
        if device.type == "cpu"
        else torch.device(device)
    ):
        return call(fn, cases[index], what)


def _not_attempted(exercise: Exercise, caller: str, total: int) -> Result:
    lines = [
        f"{exercise.name}: not attempted yet",
        f"{caller} returned None: write its body, then run check again",
        "(a body without a return statement returns None too).",
    ]
    return Result(exercise.name, "not attempted", 0, total, _wrap(lines))


def _outputs(value: object) -> tuple:
    return value if isinstance(value, tuple) else (value,)


def _verdict(
    exercise: Exercise, case: Case, caller: str, expected: tuple, made: Call
) -> tuple[list[str], int | None]:
    """What is wrong with one call, in lines, and which output is wrong; no lines when nothing is."""
    if made.over_budget:
        return [
            f"{caller} was stopped after {calls.BUDGET_S:.0f} s on this case, which the reference "
            "computes in milliseconds"
        ], None
    if made.error is not None:
        return _raised(caller, made.error), None
    lines, position = _compare(exercise, case, caller, expected, made.value)
    if lines:
        return lines, position
    if made.changed:
        changed = ", ".join(made.changed)
        return [
            f"right values, but {caller} changed its input{'s' * (len(made.changed) > 1)} "
            f"{changed} in place: the caller's tensors must stay as they were; make new ones "
            "(x = x * a, not x *= a)"
        ], None
    if case.largest is not None and made.largest[0] >= case.largest:
        numel, shape = made.largest
        return [
            f"right values, but {caller} built a tensor of shape {shape}, {numel} entries: the "
            f"size of {case.cost}, which the exercise asks you never to hold"
        ], None
    return [], None


def _loops(cases: list[Case], made: list[Call], caller: str) -> list[str]:
    """The last call, right, made another number of torch calls than the first counted case."""
    counted = [
        (index, call.calls)
        for index, (case, call) in enumerate(zip(cases, made, strict=False))
        if case.counted
    ]
    if len(counted) < 2 or counted[-1][0] != len(made) - 1:
        return []
    (first, before), (_, now) = counted[0], counted[-1]
    if now == before:
        return []
    return [
        f"right values, but {caller} made {now} torch calls on this case and "
        f"{before} on case {first + 1}: their number follows the sizes, as a "
        "Python loop's does, where the exercise asks for none"
    ]


# --- comparing ---------------------------------------------------------------------------------------------


def _compare(
    exercise: Exercise, case: Case, caller: str, expected: tuple, got: object
) -> tuple[list[str], int | None]:
    """The lines that say how `got` differs from `expected`, and which output; none when it does not."""
    outputs = exercise.outputs
    if len(outputs) > 1:
        wanted = f"({', '.join(outputs)})"
        if not isinstance(got, tuple | list):
            return [
                f"{caller} returned {_kind(got)}; it should return a tuple {wanted}"
            ], None
        if len(got) != len(outputs):
            return [
                f"{caller} returned {len(got)} values; it should return {wanted}"
            ], None
    else:
        got = (got,)
    tolerance = case.tolerance
    for position, (output, mine, theirs) in enumerate(
        zip(outputs, got, expected, strict=True)
    ):
        prefix, returned = (
            (f"{output}: ", "")
            if len(outputs) > 1
            else ("", f"{caller} returned ")
        )
        lines = _difference(mine, theirs, tolerance, returned)
        if lines:
            return [prefix + lines[0], *lines[1:]], position
    return [], None


def _difference(
    got: object, expected: Tensor, tolerance: tuple | None, returned: str
) -> list[str]:
    """What is wrong with `got`, in lines; `returned` opens a sentence about it ("attention returned ")."""
    if got is None and returned:
        return [
            f"{returned}None for this case: does every path end in a return?"
        ]
    if not isinstance(got, Tensor):
        return [
            f"{returned}{'None' if got is None else _kind(got)}, not a torch.Tensor"
        ]
    if got.device != expected.device:
        return [
            f"{returned}a tensor on the device {got.device}, not on {expected.device} where the "
            "inputs are: make new tensors with device=<an input>.device"
        ]
    if got.shape != expected.shape:
        return [f"wrong shape: expected {_shape(expected)}, got {_shape(got)}"]
    if got.dtype != expected.dtype:
        if _additive(got, expected):
            return [
                f"wrong dtype: expected {_dtype(expected)}, got {_dtype(got)}: that is an "
                "additive mask (0 = attend, -inf = not); return the bool mask, True = may attend"
            ]
        right = not got.is_complex() and _close(
            _cast(got, expected.dtype), expected, tolerance
        )
        note = " (the values are right)" if right else ""
        return [
            f"wrong dtype: expected {_dtype(expected)}, got {_dtype(got)}{note}"
        ]
    if _close(got, expected, tolerance):
        return []
    return _wrong_values(got, expected, tolerance)


def _additive(got: Tensor, expected: Tensor) -> bool:
    """A float mask of 0 and -inf where a bool one is expected."""
    if expected.dtype != torch.bool or not got.is_floating_point():
        return False
    return bool(
        ((got == 0) | (got == -math.inf)).all() and (got == -math.inf).any()
    )


def _close(got: Tensor, expected: Tensor, tolerance: tuple | None) -> bool:
    """Equal (bool and integer results) or close within the case's tolerance; NaN equals NaN."""
    if not expected.is_floating_point():
        return torch.equal(got, expected)
    rtol, atol = tolerance or TOLERANCE.get(expected.dtype, (1e-2, 1e-3))
    return torch.allclose(got, expected, rtol=rtol, atol=atol, equal_nan=True)


def _same(got: object, other: object, tolerance: tuple | None) -> bool:
    """`got` has `other`'s shape and, cast to its dtype, its values."""
    if (
        not isinstance(got, Tensor)
        or not isinstance(other, Tensor)
        or got.shape != other.shape
    ):
        return False
    if got.is_complex():
        return False
    return _close(_cast(got, other.dtype), other, tolerance)


def _cast(x: Tensor, dtype: torch.dtype) -> Tensor:
    return x != 0 if dtype == torch.bool else x.to(dtype)


def _wrong_values(
    got: Tensor, expected: Tensor, tolerance: tuple | None
) -> list[str]:
    if not expected.is_floating_point():
        wrong = got != expected
        first = _index(wrong.nonzero()[0])
        lines = [
            f"wrong values: {_count(wrong)} entries differ, the first at {first}"
        ]
        grid = _grids(expected, got)
        if grid:
            return lines + grid
        at = tuple(wrong.nonzero()[0].tolist())
        return [
            *lines,
            f"  expected {expected[at].item()}, got {got[at].item()}",
        ]
    rtol, atol = tolerance or TOLERANCE.get(expected.dtype, (1e-2, 1e-3))
    wrong = ~torch.isclose(got, expected, rtol=rtol, atol=atol, equal_nan=True)
    broken = wrong & ~got.isfinite()
    # a number where the expected value is not one (-inf: a masked key)
    lost = wrong & ~expected.isfinite()
    if broken.any():
        at = tuple(broken.nonzero()[0].tolist())
        head = f"wrong values: {_count(wrong)} differ, {int(broken.sum())} of them inf or NaN"
    elif lost.any():
        at = tuple(lost.nonzero()[0].tolist())
        head = (
            f"wrong values: {_count(wrong)} differ, {int(lost.sum())} of them "
            f"finite where {expected[at].item()} is expected"
        )
    else:  # both finite where they differ: the largest difference
        errors = torch.where(wrong, got - expected, 0).abs().flatten()
        at = tuple(
            int(i) for i in torch.unravel_index(errors.argmax(), got.shape)
        )
        head = f"wrong values: {_count(wrong)} differ; the largest error is {errors.max():.1e}"
    wanted, found = _numbers(expected[at].item(), got[at].item())
    return [head, f"  at {_index(at)}: expected {wanted}, got {found}"]


def _grids(expected: Tensor, got: Tensor) -> list[str]:
    """Both boolean results side by side as 0/1 grids, if they are small and at most 2-D at heart."""
    shape = expected.shape
    if len(shape) > 2 and math.prod(shape[1:-1]) != 1:
        return []
    rows, columns = (
        (shape[0], shape[-1]) if len(shape) >= 2 else (1, math.prod(shape))
    )
    if rows > GRID[0] or columns > GRID[1]:
        return []
    left, right = expected.reshape(rows, columns), got.reshape(rows, columns)
    width = max(len("expected"), 2 * columns - 1)
    lines = [f"  {'expected':<{width}}   got"]
    for mine, theirs in zip(
        left.int().tolist(), right.int().tolist(), strict=True
    ):
        lines.append(
            f"  {' '.join(map(str, mine)):<{width}}   {' '.join(map(str, theirs))}"
        )
    return lines


# --- hints -------------------------------------------------------------------------------------------------


def _hint(
    exercise: Exercise,
    cases: list[Case],
    expected: list[tuple],
    made: list[Call],
    index: int,
    device: torch.device,
) -> str | None:
    """The cause of the failure at `index`, if it is certain.

    From the error itself, or from a known mistake that does what the reader's function does on every
    case (the same values, or the same kind of error) and differs from the reference on two cases or more.
    """
    failed = made[index]
    said = str(failed.error) if failed.error is not None else ""
    if "T" in failed.slips:
        return (
            ".T reverses every axis of a batched tensor: transpose the last two, "
            "x.transpose(-2, -1) (or x.mT)"
        )
    if "softmax dim" in failed.slips:
        return (
            "softmax without dim= picks the axis from the tensor's number of axes: "
            "pass dim=-1, the keys"
        )
    if failed.error is not None:
        known = _known_error(exercise, failed.error, said, device)
        if known:
            return known
    if any(m.over_budget for m in made) or len(made) < len(cases):
        return None
    candidates = list(exercise.mistakes)
    if len(exercise.outputs) == 1:
        candidates += _generic_mistakes(cases[index], expected[index])
    for mistake in candidates:
        if _confirmed(exercise, mistake, cases, expected, made):
            return mistake.hint
    return None


def _confirmed(
    exercise: Exercise,
    mistake: Mistake,
    cases: list[Case],
    expected: list[tuple],
    made: list[Call],
) -> bool:
    differs = 0
    for case, right, mine in zip(cases, expected, made, strict=True):
        theirs = _behaviour(mistake, case, right)
        if not _agree(exercise, mine, theirs, case):
            return False
        differs += isinstance(theirs, BaseException) or not _all_same(
            theirs, right, case
        )
    return differs >= 2


def _behaviour(
    mistake: Mistake, case: Case, right: tuple
) -> tuple | BaseException:
    try:
        with torch.no_grad():
            if isinstance(mistake, Generic):
                return _outputs(mistake.output(case, right))
            return _outputs(mistake.output(*copies(case)))
    except Exception as error:
        return error


def _agree(
    exercise: Exercise, mine: Call, theirs: tuple | BaseException, case: Case
) -> bool:
    """The reader's call and a mistake did the same: the same kind of error, or the same outputs."""
    if mine.error is not None or isinstance(theirs, BaseException):
        return type(mine.error) is type(theirs)
    got = mine.value if len(exercise.outputs) > 1 else (mine.value,)
    if not isinstance(got, tuple | list) or len(got) != len(theirs):
        return False
    return _all_same(tuple(got), theirs, case)


def _all_same(got: tuple, other: tuple, case: Case) -> bool:
    """The same outputs: shapes, dtypes and values (within the case's tolerance)."""
    return all(
        isinstance(a, Tensor)
        and isinstance(b, Tensor)
        and a.dtype == b.dtype
        and a.device == b.device
        and _same(a, b, case.tolerance)
        for a, b in zip(got, other, strict=True)
    )


@dataclasses.dataclass(frozen=True)
class Generic(Mistake):
    """A wrong answer of any exercise: `output(case, expected)` from the case and the right result."""


def _generic_mistakes(case: Case, expected: tuple) -> list[Mistake]:
    """Every value 0, an input handed back, the result transposed."""
    (right,) = expected
    zero = (
        "every entry is False"
        if right.dtype == torch.bool
        else "every value is 0"
    )
    generic = [Generic(zero, lambda case, right: torch.zeros_like(right[0]))]
    for name in case.args:
        generic.append(
            Generic(
                f"that is the input {name}, unchanged",
                lambda case, right, name=name: case.args[name],
            )
        )
    generic.append(
        Generic(
            "that is the right result transposed: its last two axes are swapped",
            lambda case, right: right[0].transpose(-2, -1),
        )
    )
    return generic


def _known_error(
    exercise: Exercise, error: BaseException, said: str, device
) -> str | None:
    """A hint that the error's own text makes certain."""
    if device.type != "cpu" and "device" in said:
        return (
            f"torch's default device is {device} (torch.set_default_device): the tensors your "
            "function makes without device= are there, the inputs on cpu; pass device=x.device"
        )
    if "view size is not compatible" in said:
        return "view needs a contiguous tensor: use .reshape, or .contiguous() before .view"
    if "out of range" in said and "imension" in said:
        return (
            "an axis your code names is not in this case's inputs: count axes from the end "
            "(-1 is the last), which works for any number of leading axes"
        )
    if "unexpected keyword argument 'diagonal'" in said:
        return "diagonal= belongs to tril and triu, not to ones: torch.ones(L, S).tril(diagonal=d)"
    frames = _readers_frames(error)
    if not frames and isinstance(error, TypeError):
        return f"check calls {exercise.signature}: does your function take these arguments?"
    return None


def _readers_frames(error: BaseException) -> list[traceback.FrameSummary]:
    return [
        frame
        for frame in traceback.extract_tb(error.__traceback__)
        if not frame.filename.startswith(LIBRARIES)
    ]


def _raised(caller: str, error: BaseException) -> list[str]:
    """What the reader's exception says and where in their code it came from."""
    text = str(error).strip().splitlines()
    said = textwrap.shorten(text[0], 200) if text else ""
    lines = [
        f"{caller} raised {type(error).__name__}"
        + (f": {said}" if said else "")
    ]
    frames = _readers_frames(error)
    if frames:
        frame, code = frames[-1], (frames[-1].line or "").strip()
        lines.append(
            f"  at line {frame.lineno} of {frame.name}"
            + (f": {code}" if code else "")
        )
    return lines


def _observed(
    exercise: Exercise, expected: tuple, made: Call, position: int | None
) -> str | None:
    """What is seen of a wrong output, when no cause is certain."""
    if position is None or made.error is not None:
        return None
    got = made.value[position] if len(exercise.outputs) > 1 else made.value
    right = expected[position]
    if (
        not isinstance(got, Tensor)
        or got.device != right.device
        or got.is_complex()
    ):
        return None
    tolerance = TOLERANCE.get(right.dtype, (1e-2, 1e-3))
    if got.dtype != right.dtype:
        got = _cast(got, right.dtype)
    return observe(
        got, right, lambda a, b: a.shape == b.shape and _close(a, b, tolerance)
    )


# --- text --------------------------------------------------------------------------------------------------


def _describe(args: dict[str, object]) -> str:
    """A case's arguments in a line: float tensors by shape (and dtype), small integer ones by value."""
    floats = {value.dtype for value in args.values() if _is_float(value)}
    common = len(floats) == 1 and sum(map(_is_float, args.values())) > 1
    parts = []
    for name, value in args.items():
        if _is_float(value):
            parts.append(
                f"{name}{NBSP}{_shape(value)}"
                + ("" if common else f" {_dtype(value)}")
            )
        elif isinstance(value, Tensor) and value.numel() <= 8:
            dtype = "" if value.dtype == torch.int64 else f" {_dtype(value)}"
            parts.append(f"{name}{NBSP}{value.tolist()}{dtype}")
        elif isinstance(value, Tensor):
            parts.append(f"{name}{NBSP}{_shape(value)} {_dtype(value)}")
        else:
            parts.append(f"{name}={value!r}")
    if common:
        parts.append(f"all {str(floats.pop()).removeprefix('torch.')}")
    return ", ".join(parts)


def _is_float(value: object) -> bool:
    return isinstance(value, Tensor) and value.is_floating_point()


def _kind(value: object) -> str:
    kind = type(value)
    name = (
        kind.__name__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__name__}"
    )
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _shape(x: Tensor) -> str:
    return str(tuple(x.shape))


def _dtype(x: Tensor) -> str:
    return str(x.dtype).removeprefix("torch.")


def _index(at: object) -> str:
    return str([int(i) for i in at])


def _count(wrong: Tensor) -> str:
    return f"{int(wrong.sum())} of {wrong.numel()}"


def _numbers(expected: float, got: float) -> tuple[str, str]:
    """Both numbers with as few digits as tell them apart (4 at least)."""
    for digits in (4, 6, 8, 10, 12, 17):
        wanted, found = f"{expected:.{digits}g}", f"{got:.{digits}g}"
        if wanted != found:
            break
    return wanted, found


def _wrap(lines: list[str]) -> str:
    """Lines of at most WIDTH characters; a wrapped line goes on indented by two more spaces.

    A shape or an index, `(2, 3, 4)` or `[0, 1]`, is never broken across lines.
    """
    wrapped = []
    for line in lines:
        glued = re.sub(GLUED, lambda m: m.group().replace(" ", NBSP), line)
        indent = " " * (len(line) - len(line.lstrip()) + 2)
        short = len(line) <= WIDTH
        wrapped += (
            [glued]
            if short
            else textwrap.wrap(glued, WIDTH, subsequent_indent=indent)
        )
    return "\n".join(wrapped).replace(NBSP, " ")
