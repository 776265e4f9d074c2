"""qkv_lab.bench: a tiny CPU run writes a report with its environment, a positive rate per path that ran, plots;
every case is checked before it is timed; the measured table feeds qkv.attention's auto choice."""

import dataclasses
import datetime
import json

import pytest
import torch

import qkv
from qkv import dispatch
from qkv_lab import bench
from qkv_lab.harness import Timing
from tests.library.reference import reference_mask

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
    assert {"reference", "torch", "torch-math"} <= ran
    for record in results:
        if record["status"] == "ok":  # checked against the reference before it was timed
            assert 0 <= record["error"] <= record["allowed_error"], record
    flash = [record for record in results if record["path"] == "qkv-flash"]
    assert {record["reason"] for record in flash} == {"needs CUDA"}


def test_one_plot_per_configuration(tiny_run):
    plots = tiny_run[1]
    names = sorted(path.name for path in plots.iterdir())
    assert names == ["forward-backward_fp16_d16_causal.png", "forward_fp16_d16_causal.png"]
    for name in names:
        assert (plots / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def case(path="reference", mode="forward", dtype="fp32", head_dim=16, causal=False, **shape):
    """A small case: L = S = 8, one batch, one head, unless told."""
    fields = {"seqlen_q": 8, "seqlen_k": 8, "batch": 1, "heads": 1, "heads_kv": 1} | shape
    return bench.Case(path, mode, dtype, head_dim, causal, **fields)


def test_a_path_refusing_its_inputs_is_recorded_not_fatal(monkeypatch):
    # On CUDA, qkv-flash raises TypeError for --dtype fp32 and ValueError for --head-dim 96.
    def refuse(q, k, v, **masks):
        raise ValueError("head size D must be one of (16, 32, 64, 128), got 96")

    monkeypatch.setattr(bench, "attention_function", lambda path: refuse)
    record = bench.measure(case(head_dim=96), torch.device("cpu"))
    assert record["status"] == "unsupported"
    assert record["reason"].endswith("got 96")


def test_a_wrong_output_is_recorded_not_timed(monkeypatch):
    def off_by_a_little(q, k, v, **masks):
        return qkv.attention(q, k, v, **masks) + 1e-3

    monkeypatch.setattr(bench, "attention_function", lambda path: off_by_a_little)
    record = bench.measure(case(causal="top_left"), torch.device("cpu"))
    assert record["status"] == "wrong"
    assert record["error"] > record["allowed_error"]
    assert record["ms"] is None
    assert record["tflops"] is None


MASKED_CASES = [
    pytest.param({"causal": "bottom_right", "seqlen_q": 3, "seqlen_k": 40}, id="decode"),
    pytest.param({"causal": "top_left", "heads": 4, "heads_kv": 2, "batch": 2}, id="gqa"),
    pytest.param({"causal": "top_left", "window": 5, "seqlen_q": 30, "seqlen_k": 30}, id="window"),
    pytest.param({"padded": True, "batch": 4, "seqlen_q": 12, "seqlen_k": 12}, id="padding"),
]


@pytest.mark.parametrize("shape", MASKED_CASES)
@pytest.mark.parametrize("path", ["reference", "torch"])
def test_masked_cases_are_checked_then_timed(path, shape):
    record = bench.measure(case(path, "forward+backward", **shape), torch.device("cpu"))
    assert record["status"] == "ok", record
    assert 0 <= record["error"] <= record["allowed_error"]
    assert record["ms"] > 0
    assert record["tflops"] > 0


@pytest.mark.parametrize("shape", MASKED_CASES)
def test_kept_pairs_count_the_mask(shape):
    measured = case(**shape)
    lengths = bench.key_lengths(measured)
    mask = reference_mask(
        measured.batch,
        measured.seqlen_q,
        measured.seqlen_k,
        measured.causal,
        measured.window,
        None if lengths is None else torch.tensor(lengths),
    )
    assert bench.kept_pairs(measured) == mask.sum()


@pytest.mark.parametrize(
    ("shape", "flops"),
    [
        ({}, 4 * 2 * 3 * 8 * 4 * 4),  # 4 B H D L S
        ({"causal": "top_left"}, 4 * 2 * 3 * 8 * 10),  # 1 + 2 + 3 + 4 keys for 4 queries
        ({"causal": "top_left", "mode": "forward+backward"}, 4 * 2 * 3 * 8 * 10 * 3.5),
        ({"causal": "bottom_right", "seqlen_q": 2}, 4 * 2 * 3 * 8 * 7),  # 3 + 4 keys
        ({"causal": "bottom_right", "seqlen_q": 2, "window": 2}, 4 * 2 * 3 * 8 * 4),
        ({"padded": True}, 4 * 3 * 8 * (4 * 4 + 4 * 2)),  # lengths 4 and 2
    ],
    ids=["full", "causal", "backward", "bottom-right", "window", "padded"],
)
def test_flop_count(shape, flops):
    fields = {"seqlen_q": 4, "seqlen_k": 4, "batch": 2, "heads": 3, "heads_kv": 3} | shape
    assert bench.attention_flops(case(head_dim=8, **fields)) == flops


def test_suites_hold_the_shapes_of_the_issue():
    argv = ["--device", "cpu", "--suite", "decode", "gqa", "window", "padding", "long"]
    argv += ["--head-dim", "128", "--dtype", "bf16", "--paths", "torch"]
    todo = bench.cases(bench.parse_args(argv))
    decode = [c for c in todo if c.suite == "decode"]
    assert {c.seqlen_q for c in decode} == {1, 4, 16}
    assert max(c.seqlen_k for c in decode) == 131072
    assert {(c.causal, c.mode) for c in decode} == {("bottom_right", "forward")}
    assert {(c.heads, c.heads_kv) for c in todo if c.suite == "gqa"} == {(32, 8)}
    (window,) = {(c.window, c.seqlen_k) for c in todo if c.suite == "window"}
    assert window == (4096, 65536)
    assert all(c.padded and c.batch == 4 for c in todo if c.suite == "padding")
    assert {c.seqlen_k for c in todo if c.suite == "long"} == {131072}


def report_of(times, device_name="NVIDIA H100 80GB HBM3"):
    """A report of square fp16 D=64 forward cases run by `torch` and `qkv-flash`: {N: (triton, torch)}."""
    results = []
    for n, (triton_ms, torch_ms) in times.items():
        for path, ms in (("qkv-flash", triton_ms), ("torch", torch_ms), ("torch-math", 0.1)):
            measured = case(path, dtype="fp16", head_dim=64, seqlen_q=n, seqlen_k=n)
            results.append({**dataclasses.asdict(measured), "status": "ok", "ms": ms})
    versions = {"date_utc": "2026-11-24T00:00:00+00:00", "torch": "2.11", "triton": "3.6"}
    environment = {"device_name": device_name, "cudnn": 91002, **versions}
    return {"environment": environment, "results": results}


def test_measured_table_feeds_auto(tmp_path, monkeypatch):
    table = tmp_path / "measured.json"
    bench.write_table(report_of({1024: (1.0, 2.0), 16384: (9.0, 8.0)}), table)
    bench.write_table(report_of({16384: (7.0, 8.0)}), table)  # measured again: replaces, not adds
    cases = json.loads(table.read_text())["cases"]
    assert [(c["seqlen_k"], c["triton_ms"]) for c in cases] == [(1024, 1.0), (16384, 7.0)]
    monkeypatch.setattr(dispatch, "_measurements", lambda: cases)
    monkeypatch.setattr(dispatch, "_device_name", lambda device: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    q = torch.empty(1, 2, 16384, 64, dtype=torch.float16, device="meta")
    assert qkv.select_backend(q, q, q) == "triton"
    bench.write_table(report_of({16384: (9.0, 8.0)}), table)
    cases[:] = json.loads(table.read_text())["cases"]
    assert qkv.select_backend(q, q, q) == "torch"


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


def test_split_kv_suite_holds_the_decoding_shapes():
    argv = ["--device", "cpu", "--suite", "split-kv", "--head-dim", "128", "--dtype", "bf16"]
    todo = bench.cases(bench.parse_args([*argv, "--paths", "torch", *bench.DECODE_PATHS]))
    assert {c.path for c in todo} == {"torch", *bench.DECODE_PATHS}
    assert {(c.heads, c.heads_kv, c.causal, c.mode) for c in todo} == {
        (32, 8, "bottom_right", "forward")
    }
    assert {c.seqlen_q for c in todo} == {1, 4, 16}
    assert {c.batch for c in todo} == {4, 16}
    assert min(c.seqlen_k for c in todo) == 4096
    assert max(c.seqlen_k for c in todo) == 131072
    assert max(c.batch * c.seqlen_k for c in todo) <= 2**19  # what the float32 check can expand


def test_decode_paths_need_cuda_in_the_report():
    record = bench.measure(case("qkv-decode-paged", causal="bottom_right"), torch.device("cpu"))
    assert (record["status"], record["reason"]) == ("unsupported", "needs CUDA")


@pytest.mark.parametrize("path", bench.DECODE_PATHS)
def test_decode_paths_compute_attention(path):
    # Under the interpreter (tests/conftest.py) the kernels run on the CPU: each path, pages included.
    q = torch.randn(2, 4, 3, 16, dtype=torch.float16)
    k, v = (
        torch.randn(2, 2, 2 * bench.DECODE_PAGE_SIZE, 16, dtype=torch.float16) for _ in range(2)
    )
    masks = {"is_causal": "bottom_right", "window": None, "key_lengths": None, "enable_gqa": True}
    out = bench.attention_function(path)(q, k, v, **masks)
    expected = qkv.attention(q.double(), k.double(), v.double(), backend="reference", **masks)
    torch.testing.assert_close(out.double(), expected, rtol=0, atol=3e-3)
    with pytest.raises(ValueError, match="bottom-right causal attention without window or padding"):
        bench.attention_function(path)(q, k, v, **masks | {"is_causal": "top_left"})


def test_pages_read_back_the_cache():
    k, v = torch.randn(2, 2, 3, 12, 4).unbind()  # (B, H_kv, S, D) = (2, 3, 12, 4) twice
    key_pages, value_pages, tables = bench.to_pages(k, v, page_size=4)
    assert key_pages.shape == (6, 3, 4, 4)
    assert sorted(tables.flatten().tolist()) == list(range(6))
    assert tables.tolist() != [[0, 1, 2], [3, 4, 5]]  # shuffled
    for pages, cache in ((key_pages, k), (value_pages, v)):
        gathered = pages[tables.long()].transpose(1, 2).flatten(2, 3)  # (B, H_kv, S, D)
        assert torch.equal(gathered, cache)


DOCUMENTS = {"causal": "top_left", "padded": True, "documents": True, "batch": 4}
DOCUMENTS |= {"seqlen_q": 12, "seqlen_k": 12, "heads": 2, "heads_kv": 1}  # documents of 12, 9, 6, 3


def test_kept_pairs_of_documents_count_their_own_queries_only():
    lengths = bench.key_lengths(case(**DOCUMENTS))
    assert lengths == [12, 9, 6, 3]
    cu_seqlens = torch.tensor([0, 12, 21, 27, 30], dtype=torch.int32)
    assert (
        bench.kept_pairs(case(**DOCUMENTS))
        == qkv.document_mask(cu_seqlens, cu_seqlens, causal=True).sum()
    )


@pytest.mark.parametrize("path", ["reference", "torch"])
def test_documents_are_checked_then_timed_padded(path):
    record = bench.measure(case(path, "forward+backward", **DOCUMENTS), torch.device("cpu"))
    assert record["status"] == "ok", record
    assert 0 <= record["error"] <= record["allowed_error"]
    assert record["tflops"] > 0


def test_varlen_path_computes_the_documents_packed():
    # Under the interpreter (tests/conftest.py) the kernels run on the CPU: the documents packed, then checked
    # on their first rows against the padded reference, as on a GPU before timing.
    documents = case(bench.VARLEN_PATH, dtype="fp16", **DOCUMENTS)
    q, k, v, options = bench._inputs(documents, torch.device("cpu"))
    assert (q.shape, k.shape) == ((30, 2, 16), (30, 1, 16))  # 12 + 9 + 6 + 3 tokens
    assert options["cu_seqlens"].tolist() == [0, 12, 21, 27, 30]
    error, allowed = bench.check_output(documents, q, k, v, options)
    assert error <= allowed
    padded = bench._inputs(case("reference", dtype="fp16", **DOCUMENTS), torch.device("cpu"))
    assert torch.equal(q[12:21], padded[0][1, :, :9].transpose(0, 1))  # document 1, same numbers


def test_varlen_path_refuses_a_padded_batch():
    record = bench.measure(case(bench.VARLEN_PATH, causal="top_left"), torch.device("cpu"))
    assert (record["status"], record["reason"]) == ("unsupported", "needs CUDA")
    padding = case(bench.VARLEN_PATH, dtype="fp16", padded=True, batch=2)
    q, k, v, masks = bench._inputs(padding, torch.device("cpu"))
    with pytest.raises(ValueError, match="packed documents of the varlen suite only"):
        bench.attention_function(bench.VARLEN_PATH)(q, k, v, **masks)


def test_varlen_suite_packs_documents_against_a_padded_batch():
    argv = ["--device", "cpu", "--suite", "varlen", "--head-dim", "128", "--dtype", "bf16"]
    todo = bench.cases(bench.parse_args([*argv, "--paths", "torch", bench.VARLEN_PATH]))
    assert {c.path for c in todo} == {"torch", bench.VARLEN_PATH}
    assert {(c.causal, c.padded, c.documents, c.batch) for c in todo} == {
        ("top_left", True, True, 4)
    }
    assert {c.seqlen_k for c in todo} == {4096, 16384}
    assert {c.mode for c in todo} == set(bench.MODES)


def test_a_backward_case_checks_every_gradient_and_records_the_median():
    record = bench.measure(
        case("torch", "forward+backward", causal="top_left"), torch.device("cpu")
    )
    assert record["status"] == "ok", record
    assert record["errors"].keys() == {"output", "dq", "dk", "dv"}
    assert record["gradients_checked"] is True
    assert 0 < record["ms"] <= record["median_ms"]
    assert (record["config"], record["autotune"]) == ("torch", False)


class _SpoilLastKey(torch.autograd.Function):
    """Identity forward; a gradient off by 0.05 on the last key only."""

    @staticmethod
    def forward(ctx, k):
        return k.view_as(k)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        grad[..., -1, :] += 0.05
        return grad


def test_a_wrong_gradient_is_recorded_not_timed(monkeypatch):
    def spoiled(q, k, v, **masks):
        return qkv.attention(q, _SpoilLastKey.apply(k), v, **masks)

    monkeypatch.setattr(bench, "attention_function", lambda path: spoiled)
    record = bench.measure(
        case(mode="forward+backward", seqlen_q=80, seqlen_k=80), torch.device("cpu")
    )
    assert record["status"] == "wrong"
    assert "dk" in record["reason"]
    assert record["error"] <= record["allowed_error"]  # the output itself is right
    assert record["ms"] is None


def test_a_kernel_path_is_tuned_then_timed_pinned(monkeypatch):
    # On the CPU the kernels run under the interpreter (tests/conftest.py); the bench refuses them there
    # (their times would mean nothing), so the test lets them through and times them with a fake timer.
    monkeypatch.setattr(bench, "runs_on", lambda case, device: True)
    held = []

    def timer(call, device):
        call()
        held.append({k: len(bench.pinning.autotuner(k).configs) for k in ("forward", "dkdv", "dq")})
        return Timing(2.0, 3.0)

    monkeypatch.setattr(bench, "timing_ms", timer)
    measured = case(
        "qkv-flash", "forward+backward", "fp16", causal="top_left", seqlen_q=24, seqlen_k=24
    )
    record = bench.measure(measured, torch.device("cpu"))
    assert record["status"] == "ok", record
    assert (record["ms"], record["median_ms"], record["autotune"]) == (2.0, 3.0, False)
    forward = len(bench.pinning.candidates("forward", 24))
    assert forward == 4  # the interpreter's one configuration, then the three Hopper variants
    dkdv = len(bench.pinning.candidates("dkdv", 24))
    assert dkdv == 2  # and the variant that adds to dQ itself, tried once dQ's kernel is chosen
    tuned = ["forward"] * forward + ["dq"] + ["dkdv"] * dkdv
    assert [trial["kernel"] for trial in record["tuning"]] == tuned
    assert "ATOMIC_DQ=True" in record["tuning"][-1]["config"]
    assert record["tuning"][-1]["status"] == "ok"  # its gradients passed the check
    assert record["config"].startswith("forward: BLOCK_M=")
    assert "; dkdv: " in record["config"]
    assert "; dq: " in record["config"]
    assert record["gradients_checked"] is True
    trials = forward + 1 + dkdv
    assert held == [dict.fromkeys(("forward", "dkdv", "dq"), 1)] * (trials + 1)  # and one timing


def test_the_lower_right_path_is_torchs_bottom_right_bias():
    q = torch.randn(2, 4, 3, 16)
    k, v = (torch.randn(2, 2, 40, 16) for _ in range(2))
    masks = {"is_causal": "bottom_right", "window": None, "key_lengths": None, "enable_gqa": True}
    out = bench.attention_function(bench.LOWER_RIGHT_PATH)(q, k, v, **masks)
    expected = qkv.attention(q.double(), k.double(), v.double(), backend="reference", **masks)
    torch.testing.assert_close(out.double(), expected, rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="bottom-right causal attention without window or padding"):
        bench.attention_function(bench.LOWER_RIGHT_PATH)(q, k, v, **masks | {"window": 2})
