"""qkv_lab.lease: a tiny lease on the CPU (the kernels under Triton's interpreter, a fake timer, clock, graph
and launch counter) writes the issue's summary after every case, resumes where it stopped and confirms."""

import dataclasses
import itertools
import json

import pytest
import torch
import triton

from qkv.kernels import flash
from qkv_lab import bench, lease, pinning, precompile, summary
from qkv_lab.harness import Timing

TINY = lease.Plan(
    square=(24,),
    tokens=24,
    heads=1,
    head_dim=16,
    dtype="fp16",  # the interpreter cannot multiply bfloat16
    decode_keys=(40,),
    decode_queries=(1, 3),
    decode_batch=2,
    decode_heads=(4, 2),
)
CPU = torch.device("cpu")


class FakeTimer:
    """Runs the call once (as a real timer would, many times) and answers 1, 2, 3 ... ms."""

    def __init__(self, stop_at=None):
        self.count = itertools.count(1)
        self.stop_at = stop_at

    def __call__(self, call, device):
        n = next(self.count)
        if n == self.stop_at:
            raise KeyboardInterrupt  # the SIGINT of the command's time limit
        call()
        return Timing(float(n), n + 0.5)


def tools(timer):
    return lease.Tools(
        CPU,
        timer=timer,
        clock=lambda device: 1755,
        graphed=lambda call, device: (call, True),
        launches=lambda call, device: ["_split_kernel"],
    )


@pytest.fixture(scope="module")
def tiny_lease(tmp_path_factory):
    """The run folder of a whole tiny lease, confirming run included, and its timer."""
    root = tmp_path_factory.mktemp("lease")
    timer = FakeTimer()
    argv = [str(root), "--device", "cpu", "--steps", *lease.STEPS]
    assert lease.main(argv, plan=TINY, tools=tools(timer)) == 0
    (folder,) = root.iterdir()
    return folder, timer


def test_the_steps_hold_the_issues_cases_in_order():
    forward, backward, decode = (lease.cases(step, lease.Plan()) for step in lease.STEPS[:3])
    square = [(c.seqlen_k, bool(c.causal)) for c in forward]
    assert square == [(4096, False), (16384, False), (4096, True), (16384, True)]
    assert [(c.seqlen_k, bool(c.causal)) for c in backward] == square
    assert {c.mode for c in forward} == {"forward"}
    assert {c.mode for c in backward} == {"forward+backward"}
    assert {(c.batch * c.seqlen_k, c.heads, c.head_dim, c.dtype) for c in forward} == {
        (16384, 16, 128, "bf16")
    }
    assert [(c.seqlen_q, c.seqlen_k) for c in decode] == [
        (q, s) for q in (1, 16) for s in (4096, 16384, 65536, 131072)
    ]
    assert {(c.causal, c.heads, c.heads_kv, c.batch) for c in decode} == {
        ("bottom_right", 32, 8, 4)
    }
    with pytest.raises(ValueError, match="step must be one of"):
        lease.cases("confirm", lease.Plan())


def test_the_summary_is_the_issues_schema(tiny_lease):
    folder, _ = tiny_lease
    data = json.loads((folder / "summary.json").read_text())
    assert list(data) == ["date", "device", "versions", "cases"]
    assert {"torch", "triton", "cudnn", "cuda", "driver"} <= data["versions"].keys()
    lines = data["cases"]
    for line in lines:
        summary.check_case(line)
    assert [(line["op"], line["causal"]) for line in lines] == [
        ("forward", False),
        ("forward", True),
        ("forward+backward", False),
        ("forward+backward", True),
        ("decode", True),
        ("decode", True),
    ]
    assert [line["gradients_checked"] for line in lines] == [False, False, True, True, False, False]
    assert [line["queries"] for line in lines[4:]] == [1, 3]
    assert {line["cudnn_ms"] for line in lines} == {None}  # cuDNN has no CPU kernel
    assert lines[2]["config"].startswith("forward: BLOCK_M=")
    assert "; dkdv: BLOCK_M=" in lines[2]["config"]
    assert "; dq: BLOCK_M=" in lines[2]["config"]
    assert lines[4]["config"].startswith("decode: BLOCK_N=")


def test_every_timing_is_checked_pinned_and_clocked(tiny_lease):
    folder, _ = tiny_lease
    records = json.loads((folder / "cases.json").read_text())["cases"]
    for record in records:
        kernel = record["paths"][record["path"]]
        assert kernel["status"] == "ok", kernel
        assert kernel["autotune"] is False
        assert kernel["min_ms"] <= kernel["median_ms"]
        assert kernel["sm_clock_mhz"] == 1755
        names = {"output", "dq", "dk", "dv"} if record["mode"] == "forward+backward" else {"output"}
        assert kernel["errors"].keys() == names
        assert all(error <= allowed for error, allowed in kernel["errors"].values())
        assert record["tuning"]
        assert all(trial["status"] == "ok" for trial in record["tuning"])
        assert record["config"].keys() == set(bench.kernels(bench.Case(**_case_fields(record))))
    decode = [record for record in records if record["suite"] == "decode"]
    for record in decode:
        kernel = record["paths"]["qkv-decode"]
        assert kernel["graph"] is True
        assert kernel["launches"] == ["_split_kernel"]
        assert "torch-lower-right" in record["paths"]
        variant = record["variants"][bench.MERGE_IN_LAUNCH_PATH]
        assert variant["status"] == "ok", variant
        assert (variant["graph"], variant["config"]) == (True, kernel["config"])
        assert variant["errors"]["output"][0] <= variant["errors"]["output"][1]


def test_the_backward_keeps_the_forward_configuration(tiny_lease):
    folder, _ = tiny_lease
    records = json.loads((folder / "cases.json").read_text())["cases"]
    by_mode = {(r["mode"], r["causal"]): r for r in records if r["suite"] == "square"}
    for causal in (False, "top_left"):
        forward = by_mode["forward", causal]["config"]["forward"]
        assert by_mode["forward+backward", causal]["config"]["forward"] == forward
        tuned = {trial["kernel"] for trial in by_mode["forward+backward", causal]["tuning"]}
        assert tuned == {"dkdv", "dq"}


def test_the_confirming_run_replays_the_pinned_configurations(tiny_lease):
    folder, _ = tiny_lease
    lines = json.loads((folder / "summary.json").read_text())["cases"]
    confirmed = json.loads((folder / "confirm.json").read_text())["results"]
    kernels = [r for r in confirmed if r["path"] in ("qkv-flash", "qkv-decode")]
    assert [r["config"] for r in kernels] == [line["config"] for line in lines]
    assert all(r["status"] == "ok" and r["ms"] == r["min_ms"] for r in confirmed)
    table = json.loads((folder / "measured.json").read_text())["cases"]
    assert {(c["mode"], c["causal"]) for c in table} == {
        (mode, causal) for mode in bench.MODES for causal in ("none", "top_left")
    }


def test_a_rerun_measures_only_what_a_stopped_run_left(tmp_path):
    # the first case takes a timing per candidate (tuning), then the pinned one, torch, torch-flash
    per_case = len(pinning.candidates("forward", TINY.square[0])) + 3
    stopped = FakeTimer(stop_at=per_case + 1)
    argv = [str(tmp_path), "--device", "cpu", "--steps", "forward"]
    plan = TINY
    assert lease.main(argv, plan=plan, tools=tools(stopped)) == 130
    (folder,) = tmp_path.iterdir()
    lines = json.loads((folder / "summary.json").read_text())["cases"]
    assert [(line["op"], line["causal"]) for line in lines] == [("forward", False)]
    resumed = FakeTimer()
    assert lease.main(argv, plan=plan, tools=tools(resumed)) == 0
    lines = json.loads((folder / "summary.json").read_text())["cases"]
    assert [(line["op"], line["causal"]) for line in lines] == [
        ("forward", False),
        ("forward", True),
    ]
    assert next(resumed.count) == per_case + 1  # the causal case's timings alone


def test_no_case_starts_past_the_time_given(tmp_path, capsys):
    argv = [str(tmp_path), "--device", "cpu", "--steps", "forward", "--seconds", "0"]
    assert lease.main(argv, plan=TINY, tools=tools(FakeTimer(stop_at=1))) == 0
    assert capsys.readouterr().err.count("left, out of time") == 2
    (folder,) = tmp_path.iterdir()
    assert not (folder / "summary.json").exists()


def test_a_kernel_that_fails_its_check_is_neither_timed_nor_summarised(tmp_path, monkeypatch):
    real = bench.attention_function

    def off(path):
        if path != "qkv-flash":
            return real(path)
        return lambda q, k, v, **masks: real(path)(q, k, v, **masks) + 1e-2

    monkeypatch.setattr(bench, "attention_function", off)
    record = lease.measure(lease.cases("forward", TINY)[0], tools(FakeTimer()))
    kernel = record["paths"]["qkv-flash"]
    assert (kernel["status"], kernel["reason"]) == ("wrong", "no configuration passed the check")
    assert {trial["status"] for trial in record["tuning"]} == {"wrong"}
    assert "min_ms" not in kernel
    assert lease.summary_line(record) is None


def test_each_candidate_is_timed_pinned_and_the_fastest_kept(monkeypatch):
    # Two configurations the interpreter can run; the second is the faster. While anything is timed, the
    # autotuner holds one configuration, so it launches that one and searches nothing.
    slow, fast = (  # 32 rows: the query block the autotuner keeps for 24 queries
        triton.Config({"BLOCK_M": 32, "BLOCK_N": n}, num_warps=4, num_stages=3) for n in (16, 32)
    )
    tuner = pinning.autotuner("forward")
    monkeypatch.setattr(tuner, "configs", [slow, fast])
    monkeypatch.setattr(pinning, "VARIANTS", {})  # the autotuner's configurations alone
    held = []

    def timer(call, device):
        call()
        held.append(list(tuner.configs))
        return Timing(1.0, 1.0) if tuner.best_config is fast else Timing(5.0, 5.0)

    record = lease.measure(lease.cases("forward", TINY)[1], tools(timer))
    assert [trial["config"] for trial in record["tuning"]] == [
        pinning.describe(slow),
        pinning.describe(fast),
    ]
    assert record["paths"]["qkv-flash"]["config"] == "forward: " + pinning.describe(fast)
    assert record["paths"]["qkv-flash"]["min_ms"] == 1.0
    assert held[:3] == [[slow], [fast], [fast]]  # tuning twice, then the timing, pinned
    assert tuner.configs == [slow, fast]  # restored


def test_the_forward_variants_are_tuned_beside_the_autotuners_configurations(tiny_lease):
    folder, _ = tiny_lease
    records = json.loads((folder / "cases.json").read_text())["cases"]
    variants = [pinning.describe(config) for config in flash.FORWARD_VARIANTS]
    assert any("TMA=True" in name for name in variants)
    assert any("FOLD_SCALE=True" in name for name in variants)
    forward = [r for r in records if r["suite"] == "square" and r["mode"] == "forward"]
    assert len(forward) == 2
    for record in forward:
        tried = [trial["config"] for trial in record["tuning"]]
        assert tried[-len(variants) :] == variants
        assert all(trial["status"] == "ok" for trial in record["tuning"])


def test_the_backward_variant_is_tuned_checked_and_chosen_when_faster(tiny_lease):
    # In the tiny lease, every backward case tried ATOMIC_DQ after dQ's kernel was chosen, and its
    # gradients passed; timed fastest, it is the choice, and its summary line says gradients were checked.
    folder, _ = tiny_lease
    records = json.loads((folder / "cases.json").read_text())["cases"]
    variants = [pinning.describe(config) for config in flash.BACKWARD_VARIANTS]
    backward = [r for r in records if r["mode"] == "forward+backward"]
    assert len(backward) == 2
    for record in backward:
        dkdv = [trial for trial in record["tuning"] if trial["kernel"] == "dkdv"]
        assert [trial["config"] for trial in dkdv[-len(variants) :]] == variants
        assert all(trial["status"] == "ok" for trial in dkdv)
        assert record["tuning"][0]["kernel"] == "dq"  # the forward's configuration is fixed
    tuner = pinning.autotuner("dkdv")

    def timer(call, device):  # the variant is the fastest
        call()
        return Timing(1.0, 1.0) if tuner.best_config.kwargs.get("ATOMIC_DQ") else Timing(4.0, 4.0)

    case = lease.cases("backward", TINY)[1]
    fixed = {"forward": pinning.candidates("forward", case.seqlen_q)[0]}
    line = lease.summary_line(lease.measure(case, tools(timer), fixed))
    assert "dkdv: ATOMIC_DQ=True" in line["config"]
    assert (line["qkv_ms"], line["gradients_checked"]) == (1.0, True)


def test_a_faster_variant_is_chosen_and_named_in_the_summary():
    tuner = pinning.autotuner("forward")

    def timer(call, device):  # the variant with both flags is the fastest
        call()
        chosen = tuner.best_config.kwargs
        return (
            Timing(1.0, 1.0) if chosen.get("TMA") and chosen.get("FOLD_SCALE") else Timing(4.0, 4.0)
        )

    record = lease.measure(lease.cases("forward", TINY)[0], tools(timer))
    line = lease.summary_line(record)
    assert "FOLD_SCALE=True" in line["config"]
    assert "TMA=True" in line["config"]
    assert line["qkv_ms"] == 1.0
    assert line.keys() == summary.FIELDS.keys()  # beside cuDNN's time (None on a CPU) and torch's


def test_a_call_that_cannot_be_captured_is_timed_as_it_is():
    def refuse(call, device):
        raise RuntimeError("operation not permitted when stream is capturing")

    counted = []

    def launches(call, device):
        counted.append(call)
        return ["_split_kernel", "_merge_kernel"]

    failing = dataclasses.replace(tools(FakeTimer()), graphed=refuse, launches=launches)
    record = lease.measure(lease.cases("decode", TINY)[0], failing)
    kernel = record["paths"]["qkv-decode"]
    assert (kernel["status"], kernel["graph"]) == ("ok", False)
    assert kernel["graph_error"] == "operation not permitted when stream is capturing"
    assert kernel["launches"] == ["_split_kernel", "_merge_kernel"]
    # counted at each path's timing, not at the tuning trials: the kernel pinned, its merge-in-launch
    # variant, torch and torch-lower-right (torch-cudnn has no CPU kernel)
    assert len(counted) == 4


def _case_fields(record):
    return {field.name: record[field.name] for field in dataclasses.fields(bench.Case)}


def test_every_configuration_to_tune_is_compiled_once_first(monkeypatch):
    two = [
        triton.Config({"BLOCK_M": 32, "BLOCK_N": n}, num_warps=4, num_stages=3) for n in (16, 32)
    ]
    monkeypatch.setattr(pinning.autotuner("forward"), "configs", two)
    todo = [case for step in lease.STEPS[:3] for case in lease.cases(step, TINY)]
    jobs = precompile.jobs(todo)
    forward = [job for job in jobs if job.kernel == "forward"]
    variants = [pinning.as_dict(config) for config in flash.FORWARD_VARIANTS]
    assert len(variants) == len(flash.VARIANT_FLAGS) == 3
    for causal in (False, "top_left"):
        assert [job.config for job in forward if job.case.causal == causal] == [
            *(pinning.as_dict(config) for config in two),
            *variants,
        ]  # each configuration and each variant once per mask, whichever the mode: the same kernel
    assert len(forward) == 2 * 5
    assert {job.case.mode for job in forward} == {"forward"}
    assert {job.kernel for job in jobs} == {"forward", "dkdv", "dq", "decode"}
    decode = [job for job in jobs if job.kernel == "decode"]
    assert {(job.case.seqlen_q, job.case.heads, job.case.heads_kv) for job in decode} == {
        (1, 4, 2),
        (3, 4, 2),
    }
    assert {job.case.path for job in decode} == {"qkv-decode", bench.MERGE_IN_LAUNCH_PATH}
    # under the interpreter, in this process: each job launches its configuration, pinned
    results = precompile.precompile(todo[:1], "cpu", workers=0)
    assert [error for _, _, error in results] == [None] * 5
    assert pinning.autotuner("forward").configs == two  # restored


def test_small_jobs_keep_what_the_kernels_specialise_on():
    square = lease.cases("backward", lease.Plan())[3]
    shrunk = precompile.small(square)
    assert (shrunk.seqlen_q, shrunk.seqlen_k, shrunk.batch) == (256, 256, 1)
    assert (shrunk.mode, shrunk.causal, shrunk.head_dim, shrunk.dtype) == (
        square.mode,
        square.causal,
        square.head_dim,
        square.dtype,
    )
    decoding = precompile.small(lease.cases("decode", lease.Plan())[-1])
    assert (decoding.seqlen_q, decoding.seqlen_k, decoding.heads, decoding.heads_kv) == (
        16,
        1024,
        32,
        8,
    )


def test_the_summary_line_names_the_fastest_torch_path_and_cudnn():
    measured = lease.cases("backward", TINY)[0]
    paths = {
        "qkv-flash": {"status": "ok", "min_ms": 2.2, "config": "forward: BLOCK_M=32"},
        "torch": {"status": "ok", "min_ms": 3.0},
        "torch-cudnn": {"status": "ok", "min_ms": 2.0},
        "torch-flash": {"status": "unsupported", "reason": "no kernel"},
    }
    line = lease.summary_line({**dataclasses.asdict(measured), "paths": paths})
    summary.check_case(line)
    assert (line["best_torch"], line["best_torch_ms"], line["cudnn_ms"]) == (
        "torch-cudnn",
        2.0,
        2.0,
    )
    assert (line["qkv_ms"], line["config"], line["gradients_checked"]) == (
        2.2,
        "forward: BLOCK_M=32",
        True,
    )
    assert (line["N"], line["keys"], line["queries"], line["dtype"]) == (24, 24, 24, "float16")
    paths["torch-cudnn"] = {"status": "oom", "reason": "out of memory"}
    line = lease.summary_line({**dataclasses.asdict(measured), "paths": paths})
    assert (line["best_torch"], line["cudnn_ms"]) == ("torch", None)
