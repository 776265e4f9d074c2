"""Launch configurations of the kernels: those the autotuner would try, one pinned while timing, a tuning step.

Triton's autotuner times every configuration of a kernel the first time it meets a new key and keeps the
fastest, by its own short timing, unrecorded. The lab instead tunes in a step of its own, before any timing
that is reported: `tune` tries each configuration the autotuner would try, pinned (`pinned`: the autotuner
holds that one configuration, so it launches it without searching), lets the caller check and time it, and
keeps the fastest median among those that passed the check. The timing that is reported then runs with the
chosen configurations pinned, and names them (`describe`); `as_dict` and `from_dict` carry them to another
process (the confirming run) through JSON.

Kernels, by name: `forward`, `dkdv` and `dq` (the FlashAttention kernels of `qkv.kernels.flash`) and `decode`
(the split kernel of `qkv.kernels.decode`; its merge kernel has no configurations). The backward kernels are
tuned one after the other (coordinate descent), the others pinned meanwhile at their chosen or first
configuration: their configurations multiply, and each kernel's time depends mainly on its own. A `dkdv`
configuration with ATOMIC_DQ computes dQ itself: with it pinned, the `dq` kernel does not run, and the
configuration named for `dq` is unused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import triton

    from qkv_lab.harness import Timing

KERNELS = {
    "forward": ("qkv.kernels.flash", "_tuned_forward"),
    "dkdv": ("qkv.kernels.flash", "_tuned_backward_dkdv"),
    "dq": ("qkv.kernels.flash", "_tuned_backward_dq"),
    "decode": ("qkv.kernels.decode", "_tuned_split"),
}
# configurations a kernel's autotuner does not try but the lease does: the
# forward's variants for Hopper (tensor descriptors, the scale in one FMA), the
# dK/dV kernel's that adds to dQ atomically (five products, not seven) and
# decoding's (tensor descriptors for the pages)
VARIANTS = {
    "forward": ("qkv.kernels.flash", "FORWARD_VARIANTS"),
    "dkdv": ("qkv.kernels.flash", "BACKWARD_VARIANTS"),
    "decode": ("qkv.kernels.decode", "DECODE_VARIANTS"),
}


def autotuner(kernel: str) -> triton.runtime.Autotuner:
    """The autotuner of a kernel named in `KERNELS` (imports Triton and the kernel's module)."""
    if kernel not in KERNELS:
        raise ValueError(
            f"kernel must be one of {tuple(KERNELS)}, got {kernel!r}"
        )
    module, name = KERNELS[kernel]
    return getattr(importlib.import_module(module), name)


def candidates(kernel: str, seqlen_q: int) -> list[triton.Config]:
    """The configurations the autotuner would try for `seqlen_q` queries, and the kernel's `VARIANTS`, after
    the autotuner's own pruning.

    With `QKV_FLASH_AUTOTUNE=0` (or under the interpreter) the kernels hold only their first configuration
    (and the variants).
    """
    tuner = autotuner(kernel)
    configs = list(tuner.configs)
    if kernel in VARIANTS:
        module, name = VARIANTS[kernel]
        configs += getattr(importlib.import_module(module), name)
    if tuner.early_config_prune is not None:
        configs = tuner.early_config_prune(configs, {"seqlen_q": seqlen_q})
    return configs


@contextlib.contextmanager
def pinned(choice: dict[str, triton.Config]) -> Iterator[None]:
    """Within the block, each kernel of `choice` launches its configuration, and no autotuner searches.

    An autotuner that holds one configuration launches it without timing anything (Triton's
    `Autotuner.run`); its configurations and its cache of earlier choices are restored on leaving.
    """
    tuners = {kernel: autotuner(kernel) for kernel in choice}
    saved = {
        kernel: (tuner.configs, tuner.cache) for kernel, tuner in tuners.items()
    }
    try:
        for kernel, tuner in tuners.items():
            tuner.configs, tuner.cache = [choice[kernel]], {}
        yield
    finally:
        for kernel, tuner in tuners.items():
            tuner.configs, tuner.cache = saved[kernel]


def describe(config: triton.Config) -> str:
    """`BLOCK_M=128 BLOCK_N=64 warps=8 stages=3`: the configuration as the reports name it."""
    sizes = " ".join(
        f"{name}={value}" for name, value in sorted(config.kwargs.items())
    )
    return f"{sizes} warps={config.num_warps} stages={config.num_stages}"


def as_dict(config: triton.Config) -> dict:
    """The configuration as JSON can hold it: `{"kwargs", "num_warps", "num_stages"}`."""
    return {
        "kwargs": dict(config.kwargs),
        "num_warps": config.num_warps,
        "num_stages": config.num_stages,
    }


def from_dict(fields: dict) -> triton.Config:
    """The configuration that `as_dict` wrote."""
    import triton

    return triton.Config(
        dict(fields["kwargs"]),
        num_warps=fields["num_warps"],
        num_stages=fields["num_stages"],
    )


@dataclasses.dataclass
class Trial:
    """One configuration of one kernel tried by `tune`: its timing, or why it has none."""

    kernel: str
    config: str
    status: str  # "ok", "wrong" (failed the check) or "error" (did not compile or launch)
    min_ms: float | None = None
    median_ms: float | None = None
    reason: str | None = None


@dataclasses.dataclass
class Tuned:
    """What `tune` chose, per kernel, and every trial on the way; `choice` is empty if none passed."""

    choice: dict[str, triton.Config]
    trials: list[Trial]

    def describe(self) -> str:
        """`forward: ...; dkdv: ...`: the chosen configurations, kernel by kernel."""
        return "; ".join(
            f"{kernel}: {describe(c)}" for kernel, c in self.choice.items()
        )


Attempt = Callable[
    [dict], "Timing | str"
]  # pinned choice -> its timing, or why it failed the check


def tune(
    kernels: list[str],
    seqlen_q: int,
    attempt: Attempt,
    fixed: dict | None = None,
) -> Tuned:
    """Choose a configuration for each of `kernels`, one kernel after the other.

    Args:
        kernels: the kernels to tune, in order (names of `KERNELS`).
        seqlen_q: the queries of the case, which prune the candidates as the autotuner does.
        attempt: runs the case with the configurations it is given pinned (see `pinned`): checks it and
            returns its `Timing`, or a reason (a string) when the check failed. A compiler or launch
            error it raises (Triton's `OutOfResources`, a `RuntimeError`) marks that configuration
            `error`.
        fixed: configurations pinned throughout, by kernel (e.g. the forward's, chosen by its own case).

    Returns:
        The choice (the fastest median among the configurations that passed, per kernel) and every trial.
        A kernel none of whose configurations passed ends the tuning, its choice missing.
    """
    choice = dict(fixed or {})
    trials = []
    firsts = {kernel: candidates(kernel, seqlen_q)[0] for kernel in kernels}
    for kernel in kernels:
        best = None
        for config in candidates(kernel, seqlen_q):
            trying = firsts | choice | {kernel: config}
            trial = Trial(kernel, describe(config), "ok")
            try:
                with pinned(trying):
                    outcome = attempt(trying)
            except (
                Exception
            ) as error:  # Triton's compile errors share no base class
                trial.status, trial.reason = (
                    "error",
                    f"{type(error).__name__}: {error}"[:300],
                )
            else:
                if isinstance(outcome, str):
                    trial.status, trial.reason = "wrong", outcome
                else:
                    trial.min_ms, trial.median_ms = (
                        outcome.min_ms,
                        outcome.median_ms,
                    )
                    if best is None or trial.median_ms < best[0]:
                        best = (trial.median_ms, config)
            trials.append(trial)
        if best is None:
            return Tuned({}, trials)
        choice[kernel] = best[1]
    return Tuned(choice, trials)
