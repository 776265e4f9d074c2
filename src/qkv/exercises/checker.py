"""`check(name, fn)`: run a reader's function on an exercise's cases and print one short verdict.

The verdict formats are stated in `qkv.exercises`' docstring.
"""

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
from qkv.exercises.catalogue import EXERCISES
from qkv.exercises.exercise import Case, Exercise

SEED = 1706  # every case of every exercise comes from this seed: a reader and CI see the same ones
WIDTH = 78  # characters a line may take: a notebook, and a phone held upright
TOLERANCE = {torch.float64: (1e-5, 1e-6), torch.float32: (1e-4, 1e-5)}  # (rtol, atol)
NBSP = "\u00a0"  # holds a shape together while a line is wrapped
GLUED = r"\((?:[^()]|\([^()]*\))*\)|\[[^\[\]]*\]|all float\d+"  # (...), one level deep; [...]
GRID = (8, 12)  # the largest boolean result drawn as a 0/1 grid: rows, columns
# where no reader's line is: torch, qkv, and the installed packages and standard library they call
LIBRARIES = tuple(
    {str(Path(module.__file__).parent) + os.sep for module in (torch, qkv)}
    | {sysconfig.get_path(name) + os.sep for name in ("stdlib", "purelib", "platlib")}
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
        with torch.random.fork_rng(devices=[]):  # the reader's function may draw from it: undone
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
    raise ValueError(f"no exercise named {name!r}{guess} The exercises: {', '.join(names())}")


def _run(exercise: Exercise, fn: Callable[..., object]) -> Result:
    cases = exercise.cases(torch.Generator().manual_seed(SEED))
    caller = getattr(fn, "__name__", "<lambda>")
    caller = "your function" if caller == "<lambda>" else caller
    for index, case in enumerate(cases):
        with torch.no_grad():
            expected = _outputs(exercise.reference(*_copies(case)))
        try:
            got = fn(*_copies(case))
        except Exception as error:  # the reader's error, reported, never the checker's traceback
            lines, hint = _raised(exercise, caller, error)
        else:
            if got is None and index == 0:
                return _not_attempted(exercise, caller, len(cases))
            lines, hint = _compare(exercise, case, caller, expected, got)
        if lines:
            head = [f"{exercise.name}: failed case {index + 1} of {len(cases)}"]
            head.append(f"case ({case.label}): {_describe(case.args)}")
            message = _wrap([*head, *lines, *([f"hint: {hint}"] if hint else [])])
            return Result(exercise.name, "failed", index, len(cases), message, hint)
    message = f"{exercise.name}: passed all {len(cases)} cases"
    return Result(exercise.name, "passed", len(cases), len(cases), message)


def _not_attempted(exercise: Exercise, caller: str, total: int) -> Result:
    lines = [
        f"{exercise.name}: not attempted yet",
        f"{caller} returned None: write its body, then run check again",
        "(a body without a return statement returns None too).",
    ]
    return Result(exercise.name, "not attempted", 0, total, _wrap(lines))


def _copies(case: Case) -> list[object]:
    """The case's arguments, tensors copied: neither the reader nor a reference can change them."""
    return [value.clone() if isinstance(value, Tensor) else value for value in case.args.values()]


def _outputs(value: object) -> tuple:
    return value if isinstance(value, tuple) else (value,)


# --- comparing ---------------------------------------------------------------------------------------------


def _compare(
    exercise: Exercise, case: Case, caller: str, expected: tuple, got: object
) -> tuple[list[str], str | None]:
    """The lines that say how `got` differs from `expected`, and the hint; no lines when it does not."""
    outputs = exercise.outputs
    if len(outputs) > 1:
        wanted = f"({', '.join(outputs)})"
        if not isinstance(got, tuple | list):
            return [f"{caller} returned {_kind(got)}; it should return a tuple {wanted}"], None
        if len(got) != len(outputs):
            return [f"{caller} returned {len(got)} values; it should return {wanted}"], None
    else:
        got = (got,)
    tolerance = case.tolerance
    for position, (output, mine, theirs) in enumerate(zip(outputs, got, expected, strict=True)):
        prefix, returned = (f"{output}: ", "") if len(outputs) > 1 else ("", f"{caller} returned ")
        lines = _difference(mine, theirs, tolerance, returned)
        if lines:
            hint = _hint(exercise, case, position, mine, theirs)
            return [prefix + lines[0], *lines[1:]], hint
    return [], None


def _difference(got: object, expected: Tensor, tolerance: tuple | None, returned: str) -> list[str]:
    """What is wrong with `got`, in lines; `returned` opens a sentence about it ("attention returned ")."""
    if got is None and returned:
        return [f"{returned}None for this case: does every path end in a return?"]
    if not isinstance(got, Tensor):
        return [f"{returned}{'None' if got is None else _kind(got)}, not a torch.Tensor"]
    if got.shape != expected.shape:
        return [f"wrong shape: expected {_shape(expected)}, got {_shape(got)}"]
    if got.dtype != expected.dtype:
        right = not got.is_complex() and _close(_cast(got, expected.dtype), expected, tolerance)
        note = " (the values are right)" if right else ""
        return [f"wrong dtype: expected {_dtype(expected)}, got {_dtype(got)}{note}"]
    if _close(got, expected, tolerance):
        return []
    return _wrong_values(got, expected, tolerance)


def _close(got: Tensor, expected: Tensor, tolerance: tuple | None) -> bool:
    """Equal (bool and integer results) or close within the case's tolerance; NaN equals NaN."""
    if not expected.is_floating_point():
        return torch.equal(got, expected)
    rtol, atol = tolerance or TOLERANCE.get(expected.dtype, (1e-2, 1e-3))
    return torch.allclose(got, expected, rtol=rtol, atol=atol, equal_nan=True)


def _same(got: object, other: object, tolerance: tuple | None) -> bool:
    """`got` has `other`'s shape and, cast to its dtype, its values."""
    if not isinstance(got, Tensor) or not isinstance(other, Tensor) or got.shape != other.shape:
        return False
    if got.is_complex():
        return False
    return _close(_cast(got, other.dtype), other, tolerance)


def _cast(x: Tensor, dtype: torch.dtype) -> Tensor:
    return x != 0 if dtype == torch.bool else x.to(dtype)


def _wrong_values(got: Tensor, expected: Tensor, tolerance: tuple | None) -> list[str]:
    if not expected.is_floating_point():
        wrong = got != expected
        first = _index(wrong.nonzero()[0])
        lines = [f"wrong values: {_count(wrong)} entries differ, the first at {first}"]
        grid = _grids(expected, got)
        if grid:
            return lines + grid
        at = tuple(wrong.nonzero()[0].tolist())
        return [*lines, f"  expected {expected[at].item()}, got {got[at].item()}"]
    rtol, atol = tolerance or TOLERANCE.get(expected.dtype, (1e-2, 1e-3))
    wrong = ~torch.isclose(got, expected, rtol=rtol, atol=atol, equal_nan=True)
    broken = wrong & ~got.isfinite()
    if broken.any():
        at = tuple(broken.nonzero()[0].tolist())
        head = f"wrong values: {_count(wrong)} differ, {int(broken.sum())} of them inf or NaN"
    else:
        errors = ((got - expected).abs() * wrong).flatten()
        at = tuple(int(i) for i in torch.unravel_index(errors.argmax(), got.shape))
        head = f"wrong values: {_count(wrong)} differ; the largest error is {errors.max():.1e}"
    wanted, found = _numbers(expected[at].item(), got[at].item())
    return [head, f"  at {_index(at)}: expected {wanted}, got {found}"]


def _grids(expected: Tensor, got: Tensor) -> list[str]:
    """Both boolean results side by side as 0/1 grids, if they are small and at most 2-D at heart."""
    shape = expected.shape
    if len(shape) > 2 and math.prod(shape[1:-1]) != 1:
        return []
    rows, columns = (shape[0], shape[-1]) if len(shape) >= 2 else (1, math.prod(shape))
    if rows > GRID[0] or columns > GRID[1]:
        return []
    left, right = expected.reshape(rows, columns), got.reshape(rows, columns)
    width = max(len("expected"), 2 * columns - 1)
    lines = [f"  {'expected':<{width}}   got"]
    for mine, theirs in zip(left.int().tolist(), right.int().tolist(), strict=True):
        lines.append(f"  {' '.join(map(str, mine)):<{width}}   {' '.join(map(str, theirs))}")
    return lines


# --- hints -------------------------------------------------------------------------------------------------


def _hint(
    exercise: Exercise, case: Case, position: int, got: object, expected: Tensor
) -> str | None:
    """The hint of the first known mistake whose output here is the reader's (and not the right one)."""
    for mistake in exercise.mistakes:
        try:
            with torch.no_grad():
                wrong = _outputs(mistake.output(*_copies(case)))[position]
        except Exception:  # a mistake that cannot run on this case is not this reader's
            continue
        if not _same(wrong, expected, case.tolerance) and _same(got, wrong, case.tolerance):
            return mistake.hint
    return _generic_hint(case, got, expected)


def _generic_hint(case: Case, got: object, expected: Tensor) -> str | None:
    """Wrong answers of any exercise: zeros, an input handed back, the result transposed."""
    if not isinstance(got, Tensor):
        return None
    if got.numel() and not got.any() and expected.any():
        return "every entry is False" if got.dtype == torch.bool else "every value is 0"
    for name, value in case.args.items():
        if _same(got, value, case.tolerance) and not _same(expected, value, case.tolerance):
            return f"that is the input {name}, unchanged"
    if expected.dim() >= 2 and _same(got, expected.transpose(-2, -1), case.tolerance):
        return "that is the right result transposed: its last two axes are swapped"
    return None


def _raised(exercise: Exercise, caller: str, error: Exception) -> tuple[list[str], str | None]:
    """What the reader's exception says, where in their code it came from, and a hint if one is known."""
    text = str(error).strip().splitlines()
    said = textwrap.shorten(text[0], 200) if text else ""
    lines = [f"{caller} raised {type(error).__name__}" + (f": {said}" if said else "")]
    frames = [
        frame
        for frame in traceback.extract_tb(error.__traceback__)
        if not frame.filename.startswith(LIBRARIES)
    ]
    if frames:
        frame, code = frames[-1], (frames[-1].line or "").strip()
        lines.append(f"  at line {frame.lineno} of {frame.name}" + (f": {code}" if code else ""))
    hint = None
    if "view size is not compatible" in said:
        hint = "view needs a contiguous tensor: use .reshape, or .contiguous() before .view"
    elif "out of range" in said and "imension" in said:
        hint = (
            "an axis your code names is not in this case's inputs: count axes from the end "
            "(-1 is the last), which works for any number of leading axes"
        )
    elif "unexpected keyword argument 'diagonal'" in said:
        hint = "diagonal= belongs to tril and triu, not to ones: torch.ones(L, S).tril(diagonal=d)"
    elif not frames and isinstance(error, TypeError):
        hint = f"check calls {exercise.signature}: does your function take these arguments?"
    return lines, hint


# --- text --------------------------------------------------------------------------------------------------


def _describe(args: dict[str, object]) -> str:
    """A case's arguments in a line: float tensors by shape (and dtype), small integer ones by value."""
    floats = {value.dtype for value in args.values() if _is_float(value)}
    common = len(floats) == 1 and sum(map(_is_float, args.values())) > 1
    parts = []
    for name, value in args.items():
        if _is_float(value):
            parts.append(f"{name}{NBSP}{_shape(value)}" + ("" if common else f" {_dtype(value)}"))
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
    name = kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__name__}"
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
        wrapped += [glued] if short else textwrap.wrap(glued, WIDTH, subsequent_indent=indent)
    return "\n".join(wrapped).replace(NBSP, " ")
