"""The classic-score benchmark: its stages are the module's computation, and its report has every case."""

import sys

import pytest
import torch
from torch.testing import assert_close

from qkv_lab import classic_bench
from qkv_lab.results import recorded


def test_stages_compose_to_the_additive_module():
    attn = classic_bench.modules()["additive"]
    x = torch.randn(2, 5, classic_bench.DIM)
    stages = classic_bench.additive_stages(attn, x)
    assert_close(stages["v_a"]().squeeze(-1), attn.scores(x, x))  # (B, L, S)
    assert_close(stages["softmax + sum"](), attn(x, x, x)[0])
    assert stages["tanh"]().shape == (2, 5, 5, classic_bench.DIM)  # the (B, L, S, hidden) tensor


@pytest.mark.skipif(sys.platform == "win32", reason="no page-fault counter on Windows")
def test_a_new_tensor_faults_in_its_pages():
    calls = classic_bench.elementwise(2**24)  # 64 MiB: above glibc's top mmap threshold
    assert (
        classic_bench.page_faults(calls["add", "new"]) >= 2**26 // 4096 // 4
    )  # pages of 16 KiB or less
    calls["add", "existing"]()  # the first write into `out` faults its pages in ...
    assert classic_bench.page_faults(calls["add", "existing"]) < 16  # ... and later ones do not


def test_run_reports_every_case():
    report = classic_bench.run(lengths=(8, 16), rounds=1, min_run_time=0.001)
    assert {(r["module"], r["n"]) for r in report["results"]} == {
        (m, n) for m in classic_bench.MODULES for n in (8, 16)
    }
    assert {r["stage"] for r in report["additive_stages"]} == set(classic_bench.STAGES)
    assert {(r["op"], r["into"]) for r in report["elementwise"]} == {
        (op, into) for op in classic_bench.ELEMENTWISE for into in ("new", "existing")
    }
    assert all(r["ms"] > 0 for r in report["results"])
    assert report["environment"]["device"] == "cpu"


def test_the_recorded_run_has_the_post_s_cases_and_its_machine():
    report = recorded("additive-vs-dot-product")
    assert {(r["module"], r["n"]) for r in report["results"]} == {
        (m, n) for m in classic_bench.MODULES for n in classic_bench.LENGTHS
    }
    assert report["environment"]["cpu_threads"] == 1
    assert {"device_name", "torch", "date_utc"} <= report["environment"].keys()
