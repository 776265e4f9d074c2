"""qkv_lab.pinning: the autotuner launches the pinned configuration and searches nothing; tuning keeps the
fastest median of the configurations that passed their check, one kernel after the other."""

import pytest
import torch
import triton

import qkv
from qkv.kernels import decode, flash
from qkv_lab import pinning
from qkv_lab.harness import Timing


def config(block_m, block_n, warps=4, stages=3):
    return triton.Config(
        {"BLOCK_M": block_m, "BLOCK_N": block_n}, num_warps=warps, num_stages=stages
    )


def test_the_pinned_configuration_is_launched_and_the_autotuner_restored():
    # Under the interpreter (tests/conftest.py) the forward kernel runs on the CPU with any tile shape.
    tuner = pinning.autotuner("forward")
    configs, cache = tuner.configs, tuner.cache
    pinned = config(16, 16)
    q, k, v = (torch.randn(1, 2, 40, 16, dtype=torch.float16) for _ in range(3))
    with pinning.pinned({"forward": pinned}):
        assert tuner.configs == [pinned]
        out = qkv.flash_attention(q, k, v, causal=True)
        assert tuner.best_config is pinned  # what Triton's Autotuner.run launched
    assert tuner.configs is configs
    assert tuner.cache is cache
    expected = torch.nn.functional.scaled_dot_product_attention(
        q.float(), k.float(), v.float(), is_causal=True
    )
    torch.testing.assert_close(out.float(), expected, rtol=0, atol=2e-3)


def test_pinning_is_undone_when_the_block_raises():
    tuner = pinning.autotuner("dq")
    configs = tuner.configs
    with pytest.raises(RuntimeError, match="launch failed"), pinning.pinned({"dq": config(16, 16)}):
        raise RuntimeError("launch failed")
    assert tuner.configs is configs


def test_candidates_are_pruned_by_the_queries_as_the_autotuner_prunes(monkeypatch):
    on_a_gpu = [config(16, 64), config(64, 64), config(128, 64)]
    for kernel in ("forward", "dkdv"):
        monkeypatch.setattr(pinning.autotuner(kernel), "configs", on_a_gpu)
    assert [c.kwargs["BLOCK_M"] for c in pinning.candidates("forward", 1)] == [16]
    assert [c.kwargs["BLOCK_M"] for c in pinning.candidates("forward", 4096)] == [64, 128]
    # one program per key block: not pruned; its variant after the autotuner's configurations
    assert pinning.candidates("dkdv", 1) == [*on_a_gpu, *flash.BACKWARD_VARIANTS]


def test_the_forward_candidates_include_its_variants_for_hopper():
    # the autotuner does not try them (the default stays), the lease does
    tuner = pinning.autotuner("forward")
    variants = flash.FORWARD_VARIANTS
    assert {"TMA", "FOLD_SCALE"} <= {name for config in variants for name in config.kwargs}
    assert not any(config in tuner.configs for config in variants)
    assert pinning.candidates("forward", 24) == [*tuner.configs, *variants]
    assert pinning.candidates("dq", 24) == pinning.autotuner("dq").configs


def test_the_decode_candidates_include_its_descriptor_variants():
    tuner = pinning.autotuner("decode")
    assert all(config.kwargs["TMA"] for config in decode.DECODE_VARIANTS)
    assert not any(config.kwargs.get("TMA") for config in tuner.configs)
    assert pinning.candidates("decode", 1) == [*tuner.configs, *decode.DECODE_VARIANTS]


def test_the_dkdv_candidates_include_its_variant_that_adds_to_dq():
    # the lease times the five-product backward against the two kernels; the autotuner never tries it
    tuner = pinning.autotuner("dkdv")
    variants = flash.BACKWARD_VARIANTS
    assert variants
    assert all(config.kwargs["ATOMIC_DQ"] for config in variants)
    assert not any(config.kwargs.get("ATOMIC_DQ") for config in tuner.configs)
    assert pinning.candidates("dkdv", 24) == [*tuner.configs, *variants]


def test_an_unknown_kernel_is_refused():
    with pytest.raises(ValueError, match=r"kernel must be one of .*got 'backward'"):
        pinning.autotuner("backward")


def test_configurations_are_named_and_travel_through_json():
    chosen = config(128, 64, warps=8, stages=2)
    assert pinning.describe(chosen) == "BLOCK_M=128 BLOCK_N=64 warps=8 stages=2"
    back = pinning.from_dict(pinning.as_dict(chosen))
    assert pinning.describe(back) == pinning.describe(chosen)


def test_tuning_keeps_the_fastest_median_that_passed_one_kernel_after_another(monkeypatch):
    dkdv = [config(32, 64), config(64, 64), config(32, 128), config(16, 16)]
    dq = [config(64, 32), config(64, 64)]
    monkeypatch.setattr(
        pinning, "candidates", lambda kernel, seqlen_q: {"dkdv": dkdv, "dq": dq}[kernel]
    )
    forward = config(128, 64)
    # medians: dkdv's second is fastest but wrong, the third fastest that passed, the last does not compile
    outcomes = {
        ("dkdv", 0): Timing(1.0, 3.0),
        ("dkdv", 1): "dk differs",
        ("dkdv", 2): Timing(2.5, 2.6),
        ("dq", 0): Timing(2.0, 2.2),
        ("dq", 1): Timing(1.9, 2.4),
    }
    seen = []

    def attempt(choice):
        seen.append(dict(choice))
        assert pinning.autotuner("dkdv").configs == [choice["dkdv"]]  # pinned while it runs
        kernel = "dq" if len(seen) > len(dkdv) else "dkdv"
        index = (dq if kernel == "dq" else dkdv).index(choice[kernel])
        if (kernel, index) == ("dkdv", 3):
            raise RuntimeError("out of resources: shared memory")
        return outcomes[kernel, index]

    tuned = pinning.tune(["dkdv", "dq"], 4096, attempt, fixed={"forward": forward})
    assert tuned.choice == {"forward": forward, "dkdv": dkdv[2], "dq": dq[0]}
    assert all(choice["forward"] is forward for choice in seen)
    assert all(choice["dq"] is dq[0] for choice in seen[: len(dkdv)])  # dq at its first meanwhile
    assert all(choice["dkdv"] is dkdv[2] for choice in seen[len(dkdv) :])  # then dkdv as chosen
    assert [trial.status for trial in tuned.trials] == ["ok", "wrong", "ok", "error", "ok", "ok"]
    assert tuned.trials[1].reason == "dk differs"
    assert "out of resources" in tuned.trials[3].reason
    assert (tuned.trials[2].min_ms, tuned.trials[2].median_ms) == (2.5, 2.6)
    assert tuned.describe() == (
        "forward: BLOCK_M=128 BLOCK_N=64 warps=4 stages=3; "
        "dkdv: BLOCK_M=32 BLOCK_N=128 warps=4 stages=3; dq: BLOCK_M=64 BLOCK_N=32 warps=4 stages=3"
    )


def test_tuning_where_nothing_passes_chooses_nothing(monkeypatch):
    monkeypatch.setattr(pinning, "candidates", lambda kernel, seqlen_q: [config(16, 16)])
    tuned = pinning.tune(["forward"], 16, lambda choice: "output differs")
    assert tuned.choice == {}
    assert [trial.status for trial in tuned.trials] == ["wrong"]
