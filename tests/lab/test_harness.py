"""The lab's harness: peak memory, the fastest time, the environment beside the numbers."""

import time

import torch

from qkv_lab import harness

CPU = torch.device("cpu")


def test_peak_memory_counts_what_is_alive_at_once():
    def two_then_one() -> None:
        a = torch.ones(1024, 256)  # 1 MiB
        b = a * 2  # 2 MiB alive
        del a
        c = b + 1  # still 2 MiB alive at most
        del b, c

    peak = harness.peak_memory_bytes(two_then_one, CPU)
    assert 2 * 2**20 <= peak < 2 * 2**20 + 1024  # two MiB, and a few bytes of scalars


def test_fastest_ms_is_milliseconds_per_call():
    ms = harness.fastest_ms(lambda: time.sleep(0.002), CPU, min_run_time=0.05)
    assert 2 <= ms < 20  # a 2 ms sleep, never shorter, and in milliseconds, not seconds


def test_environment_says_where_when_and_how():
    info = harness.environment(CPU)
    assert info["device"] == "cpu"
    assert info["torch"] == torch.__version__
    assert info["date_utc"].endswith("+00:00")
    assert info["timing"] == harness.TIMING


def test_timing_ms_gives_the_fastest_and_the_median():
    fastest, median = harness.timing_ms(lambda: time.sleep(0.002), CPU, min_run_time=0.05)
    assert 2 <= fastest <= median < 20
    assert harness.fastest_ms(lambda: time.sleep(0.002), CPU, min_run_time=0.05) >= 2


def test_gpu_helpers_answer_plainly_on_a_cpu():
    def call() -> None:
        return None

    assert harness.graphed(call, CPU) == (call, False)  # no CUDA graph: the call itself
    assert harness.kernel_launches(call, CPU) is None
    assert harness.sm_clock_mhz(CPU) is None


def test_sm_clock_reads_nvidia_smi_then_torch(monkeypatch):
    gpu = torch.device("cuda")
    monkeypatch.setattr(harness, "nvidia_smi_clocks", lambda: {"clocks.sm": "1755"})
    assert harness.sm_clock_mhz(gpu) == 1755
    monkeypatch.setattr(harness, "nvidia_smi_clocks", lambda: {"clocks.sm": "[N/A]"})
    monkeypatch.setattr(torch.cuda, "clock_rate", lambda device: 1980)
    assert harness.sm_clock_mhz(gpu) == 1980

    def no_pynvml(device):
        raise ModuleNotFoundError("pynvml")

    monkeypatch.setattr(harness, "nvidia_smi_clocks", lambda: None)
    monkeypatch.setattr(torch.cuda, "clock_rate", no_pynvml)
    assert harness.sm_clock_mhz(gpu) is None
