"""A GPU run's `summary.json`: one line of numbers per case, in the schema of issue 42, rewritten after each case.

    {"date": "YYYY-MM-DD", "device": str, "versions": {...},
     "cases": [{"op": "forward" | "forward+backward" | "decode", "N": int, "keys": int, "queries": int,
                "D": int, "dtype": "bfloat16", "causal": bool, "qkv_ms": float, "cudnn_ms": float | null,
                "best_torch_ms": float, "best_torch": str, "config": str, "gradients_checked": bool}]}

Times are the fastest of repeated runs (the medians, clocks and every other detail are in the raw files
beside it); `N` is the keys (a decoding case's cache, `queries` its new tokens); `config` names the pinned
launch configurations of the kernels. `Summary` keeps the file: it reads what an earlier, interrupted run of
the same folder wrote (`has` says which cases it holds, so that a rerun measures only the rest), and writes
the whole file again after each case, through a temporary file, so that a run killed mid-write leaves the
previous version whole.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

OPS = ("forward", "forward+backward", "decode")
FIELDS = {
    "op": str,
    "N": int,
    "keys": int,
    "queries": int,
    "D": int,
    "dtype": str,
    "causal": bool,
    "qkv_ms": float,
    "cudnn_ms": (float, type(None)),
    "best_torch_ms": float,
    "best_torch": str,
    "config": str,
    "gradients_checked": bool,
}
IDENTITY = (
    "op",
    "N",
    "keys",
    "queries",
    "D",
    "dtype",
    "causal",
)  # what makes two lines the same case


def check_case(case: dict) -> None:
    """Raise unless `case` has exactly the fields of the schema, each of its type.

    Raises:
        ValueError: a field missing or unknown, an `op` not in `OPS`, a time that is not positive.
        TypeError: a field of another type (an int where a float is due is accepted; a bool is not an int).
    """
    missing, unknown = FIELDS.keys() - case.keys(), case.keys() - FIELDS.keys()
    if missing or unknown:
        raise ValueError(
            f"a summary case has the fields {sorted(FIELDS)}: missing {sorted(missing)}, "
            f"unknown {sorted(unknown)}"
        )
    for name, kind in FIELDS.items():
        value = case[name]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if (
            float in kinds
            and isinstance(value, int)
            and not isinstance(value, bool)
        ):
            continue
        if (isinstance(value, bool) and kind is int) or not isinstance(
            value, kind
        ):
            raise TypeError(
                f"summary field {name} must be {kind}, got {value!r}"
            )
    if case["op"] not in OPS:
        raise ValueError(
            f"summary field op must be one of {OPS}, got {case['op']!r}"
        )
    for name in ("qkv_ms", "cudnn_ms", "best_torch_ms"):
        if case[name] is not None and not case[name] > 0:
            raise ValueError(
                f"summary field {name} must be a positive time, got {case[name]!r}"
            )


def identity(case: dict) -> tuple:
    """The fields that name a case: two lines with the same identity measure the same thing."""
    return tuple(case[name] for name in IDENTITY)


def run_folder(root: Path, date: str, device_name: str) -> Path:
    """`root/<date>-<gpu>`, the GPU named by its model: `NVIDIA H100 80GB HBM3` -> `h100`."""
    model = re.search(r"\b([A-Z]{1,2}\d{2,4}[A-Za-z]*)\b", device_name)
    slug = (
        model.group(1).lower()
        if model
        else re.sub(r"[^a-z0-9]+", "-", device_name.lower())
    )
    if "pcie" in device_name.lower() and model:  # an H100 PCIe is not an SXM
        slug += "-pcie"
    return root / f"{date}-{slug.strip('-') or 'device'}"


class Summary:
    """The summary of one run folder, as it grows; reads what the folder already holds."""

    def __init__(
        self, path: Path, date: str, device: str, versions: dict
    ) -> None:
        self.path = path
        self.data = {
            "date": date,
            "device": device,
            "versions": versions,
            "cases": [],
        }
        if path.exists():
            earlier = json.loads(path.read_text(encoding="utf-8"))
            if earlier.get("device") != device:
                raise ValueError(
                    f"{path} holds a run on {earlier.get('device')!r}, not on {device!r}: "
                    "give a run on another GPU its own folder"
                )
            self.data["cases"] = earlier["cases"]

    def has(self, case: dict) -> bool:
        """Whether a case with the identity of `case` is recorded (`case` needs only `IDENTITY`)."""
        return any(
            identity(line) == identity(case) for line in self.data["cases"]
        )

    def add(self, case: dict) -> None:
        """Check `case`, record it (replacing a line of the same case) and write the file."""
        check_case(case)
        self.data["cases"] = [
            line
            for line in self.data["cases"]
            if identity(line) != identity(case)
        ] + [case]
        self.write()

    def write(self) -> None:
        """Write the file whole (`write_whole`)."""
        write_whole(self.data, self.path)


def write_whole(data: dict, path: Path) -> None:
    """Write `data` as indented JSON to a temporary file beside `path`, then rename it over `path`: a
    process killed meanwhile leaves the previous version whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(
        json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8"
    )
    os.replace(temporary, path)
