"""qkv.bench: a tiny CPU run writes a report with its environment, a positive rate per path that ran, plots."""

import datetime
import json

import pytest
import torch

from qkv import bench

TINY = ["--device", "cpu", "--n", "32", "64", "--head-dim", "16", "--dtype", "fp16"]
TINY += ["--causal", "yes", "--tokens", "64", "--hidden", "32"]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """The report and plot folder of one small CPU run, both modes, every path."""
    folder = tmp_path_factory.mktemp("bench")
    out, plots = folder / "results.json", folder / "plots"
    assert bench.main([*TINY, "--out", str(out), "--plot", str(plots)]) == 0
    return json.loads(out.read_text(encoding="utf-8")), plots


def test_report_records_where_and_when(tiny_run):
    environment = tiny_run[0]["environment"]
    assert environment["device"] == "cpu"
    assert environment["device_name"]
    assert environment["torch"] == torch.__version__
    assert environment["python"].count(".") == 2
    assert environment["platform"]
    date = datetime.datetime.fromisoformat(environment["date_utc"])
    assert date.utcoffset() == datetime.timedelta(0)
    assert {"triton", "cudnn", "gpu_clocks"} <= environment.keys()


def test_every_case_is_recorded_and_the_cpu_paths_run(tiny_run):
    results = tiny_run[0]["results"]
    assert len(results) == len(bench.PATHS) * len(bench.MODES) * 2  # two lengths
    for record in results:
        assert record["status"] in ("ok", "unsupported"), record
        if record["status"] == "ok":
            assert record["ms"] > 0
            assert record["tflops"] > 0
        else:
            assert record["tflops"] is None
            assert record["reason"]
    ran = {record["path"] for record in results if record["status"] == "ok"}
    assert {"reference", "torch-math"} <= ran
    flash = [record for record in results if record["path"] == "qkv-flash"]
    assert {record["reason"] for record in flash} == {"needs CUDA"}


def test_one_plot_per_configuration(tiny_run):
    plots = tiny_run[1]
    names = sorted(path.name for path in plots.iterdir())
    assert names == ["forward-backward_fp16_d16_causal.png", "forward_fp16_d16_causal.png"]
    for name in names:
        assert (plots / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_path_refusing_its_inputs_is_recorded_not_fatal(monkeypatch):
    # On CUDA, qkv-flash raises TypeError for --dtype fp32 and ValueError for --head-dim 96.
    def refuse(q, k, v, causal):
        raise ValueError("head size D must be one of (16, 32, 64, 128), got 96")

    monkeypatch.setattr(bench, "attention_function", lambda path: refuse)
    case = bench.Case("reference", "forward", "fp32", 96, False, 8, batch=1, heads=1)
    record = bench.measure(case, torch.device("cpu"))
    assert record["status"] == "unsupported"
    assert record["reason"].endswith("got 96")


@pytest.mark.parametrize(
    ("mode", "causal", "flops"),
    [
        ("forward", False, 3072),  # 4 * B 2 * H 3 * N^2 16 * D 8
        ("forward", True, 1536),
        ("forward+backward", True, 1536 * 3.5),
    ],
)
def test_flop_count(mode, causal, flops):
    case = bench.Case("reference", mode, "fp16", 8, causal, 4, batch=2, heads=3)
    assert bench.attention_flops(case) == flops


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--hidden", "100", "--head-dim", "64"], "--hidden 100 must be a multiple"),
        (["--dtype", "fp8"], "invalid choice: 'fp8'"),
    ],
)
def test_bad_arguments_exit_with_a_message(argv, message, capsys):
    with pytest.raises(SystemExit):
        bench.parse_args(["--device", "cpu", *argv])
    assert message in capsys.readouterr().err
