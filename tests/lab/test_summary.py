"""qkv_lab.summary: the schema of issue 42, one line per case, a file that a killed run leaves whole."""

import json

import pytest

from qkv_lab import summary

LINE = {
    "op": "forward",
    "N": 4096,
    "keys": 4096,
    "queries": 4096,
    "D": 128,
    "dtype": "bfloat16",
    "causal": False,
    "qkv_ms": 1.25,
    "cudnn_ms": None,
    "best_torch_ms": 1.0,
    "best_torch": "torch",
    "config": "forward: BLOCK_M=128 BLOCK_N=64 warps=8 stages=3",
    "gradients_checked": False,
}
VERSIONS = {"torch": "2.11.0", "triton": "3.6.0", "cudnn": 91900}


def open_summary(folder, device="NVIDIA H200"):
    return summary.Summary(folder / "summary.json", "2026-11-30", device, VERSIONS)


def test_lines_are_written_in_the_schema_and_read_back(tmp_path):
    written = open_summary(tmp_path)
    written.add(LINE)
    written.add(LINE | {"op": "forward+backward", "gradients_checked": True, "cudnn_ms": 2})
    data = json.loads((tmp_path / "summary.json").read_text())
    assert list(data) == ["date", "device", "versions", "cases"]
    assert (data["date"], data["device"], data["versions"]) == (
        "2026-11-30",
        "NVIDIA H200",
        VERSIONS,
    )
    assert [sorted(line) for line in data["cases"]] == [sorted(LINE)] * 2
    again = open_summary(tmp_path)
    assert again.has(LINE)
    assert not again.has(LINE | {"causal": True})


def test_a_case_measured_again_replaces_its_line(tmp_path):
    kept = open_summary(tmp_path)
    kept.add(LINE)
    kept.add(LINE | {"N": 16384, "keys": 16384, "queries": 16384})
    kept.add(LINE | {"qkv_ms": 0.9})
    cases = json.loads((tmp_path / "summary.json").read_text())["cases"]
    assert [(line["N"], line["qkv_ms"]) for line in cases] == [(16384, 1.25), (4096, 0.9)]


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ({"qkv_ms": None}, TypeError, "qkv_ms must be"),
        ({"N": True}, TypeError, "N must be"),
        ({"causal": 1}, TypeError, "causal must be"),
        ({"cudnn_ms": "1.0"}, TypeError, "cudnn_ms must be"),
        ({"op": "backward"}, ValueError, "op must be one of"),
        ({"best_torch_ms": 0.0}, ValueError, "best_torch_ms must be a positive time"),
        ({"heads": 16}, ValueError, r"unknown \['heads'\]"),
    ],
    ids=["none-time", "bool-int", "int-bool", "str-time", "op", "zero-time", "unknown"],
)
def test_a_line_outside_the_schema_is_refused_by_name(tmp_path, change, error, message):
    with pytest.raises(error, match=message):
        open_summary(tmp_path).add(LINE | change)
    assert not (tmp_path / "summary.json").exists()


def test_a_missing_field_is_named():
    line = dict(LINE)
    del line["gradients_checked"]
    with pytest.raises(ValueError, match=r"missing \['gradients_checked'\]"):
        summary.check_case(line)


def test_a_run_killed_while_writing_leaves_the_last_file_whole(tmp_path, monkeypatch):
    kept = open_summary(tmp_path)
    kept.add(LINE)
    before = (tmp_path / "summary.json").read_text()

    def killed(source, target):
        raise KeyboardInterrupt  # the SIGINT of the command's time limit, between write and rename

    monkeypatch.setattr(summary.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        kept.add(LINE | {"causal": True})
    assert (tmp_path / "summary.json").read_text() == before


def test_a_folder_of_another_gpu_is_refused(tmp_path):
    open_summary(tmp_path).add(LINE)
    with pytest.raises(ValueError, match="holds a run on 'NVIDIA H200', not on 'NVIDIA H100"):
        open_summary(tmp_path, device="NVIDIA H100 80GB HBM3")


@pytest.mark.parametrize(
    ("name", "folder"),
    [
        ("NVIDIA H100 80GB HBM3", "2026-11-30-h100"),
        ("NVIDIA H200", "2026-11-30-h200"),
        ("NVIDIA H100 PCIe", "2026-11-30-h100-pcie"),
        ("NVIDIA A100-SXM4-80GB", "2026-11-30-a100"),
        ("AMD EPYC Processor", "2026-11-30-amd-epyc-processor"),
    ],
)
def test_the_run_folder_names_the_gpu_model(tmp_path, name, folder):
    assert summary.run_folder(tmp_path, "2026-11-30", name) == tmp_path / folder
