"""The sweep loop: every variant once per seed, seeds outermost, the report written after every run."""

from __future__ import annotations

import json

import pytest

from qkv_lab.sweep import arguments, sweep


def test_every_variant_runs_each_seed_before_the_next_seed(tmp_path) -> None:
    calls = []
    report = {"models": {"a": {"loss": [], "seconds": []}, "b": {"loss": [], "seconds": []}}}

    def trial(name: str, seed: int) -> dict[str, float]:
        calls.append((name, seed))
        return {"loss": 10.0 * seed + (name == "b")}

    out = tmp_path / "report.json"
    assert sweep(report, report["models"], (3, 4), trial, out) is report
    assert calls == [("a", 3), ("b", 3), ("a", 4), ("b", 4)]
    assert report["models"]["a"]["loss"] == [30.0, 40.0]
    assert report["models"]["b"]["loss"] == [31.0, 41.0]
    assert len(report["models"]["b"]["seconds"]) == 2
    assert json.loads(out.read_text()) == report


def test_a_stopped_sweep_has_written_what_ran(tmp_path) -> None:
    report = {"models": {"a": {"loss": [], "seconds": []}, "b": {"loss": [], "seconds": []}}}
    out = tmp_path / "report.json"

    def trial(name: str, seed: int) -> dict[str, float]:
        if seed == 1:
            raise KeyboardInterrupt
        return {"loss": 1.0}

    with pytest.raises(KeyboardInterrupt):
        sweep(report, report["models"], (0, 1), trial, out)
    written = json.loads(out.read_text())
    assert [written["models"][name]["loss"] for name in "ab"] == [[1.0], [1.0]]


def test_the_shared_command_line_has_its_defaults(tmp_path) -> None:
    parser = arguments("hybrid", None, 800, (0, 1, 2), tmp_path / "x.json")
    args = parser.parse_args(["--seeds", "5"])
    assert (args.steps, args.seeds, args.out) == (800, [5], tmp_path / "x.json")
    assert parser.prog == "python -m qkv_lab.hybrid"
