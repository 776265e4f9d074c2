"""Benchmark reports recorded for the articles, shipped with the package so that any reader can load them.

Each report holds its numbers next to the device, the versions and the date it was measured with. The
benchmark modules write them (`python -m qkv_lab.efficient_bench --out src/qkv_lab/results/efficient-attention.json`).
"""

import json
from importlib.resources import files


def recorded(name: str) -> dict:
    """The report `name`, as its benchmark wrote it: a JSON file of this folder, such as `"decoding"`.

    Raises:
        ValueError: no report of that name.
    """
    path = files(__name__).joinpath(f"{name}.json")
    if not path.is_file():
        known = sorted(
            p.name.removesuffix(".json")
            for p in files(__name__).iterdir()
            if p.name.endswith(".json")
        )
        raise ValueError(f"no recorded report {name!r}; there are {known}")
    return json.loads(path.read_text(encoding="utf-8"))
