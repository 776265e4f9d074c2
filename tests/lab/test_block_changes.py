"""qkv_lab.block_changes: the ladder, its counts against torch's FLOP counter, the sweep, the recorded report."""

import dataclasses
import json
import math

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from qkv.gpt import GPT, GPTConfig
from qkv_lab import block_changes
from qkv_lab.block_changes import (
    BESIDE,
    CHANGES,
    START,
    beside,
    flops_per_token,
    ladder,
    parameter_count,
    run,
)
from qkv_lab.gpt_training import SITE_CONFIG
from qkv_lab.results import recorded
from qkv_lab.toys import one_thread


def test_each_rung_changes_only_its_own_options():
    rungs = ladder()
    assert [name for name, _ in rungs] == [name for name, _ in CHANGES]
    assert rungs[0][1] == GPTConfig(**START)
    for (_, before), (_, after), (_, change) in zip(rungs, rungs[1:], CHANGES[1:], strict=False):
        differ = {
            f.name
            for f in dataclasses.fields(GPTConfig)
            if getattr(before, f.name) != getattr(after, f.name)
        }
        assert differ - {"mlp_width"} == set(change)  # mlp_width follows the MLP's kind
        assert all(getattr(after, option) == value for option, value in change.items())


def test_the_rung_without_biases_is_the_site_gpt():
    assert dict(ladder())["no biases"] == SITE_CONFIG


def test_each_change_beside_the_ladder_is_made_to_the_site_gpt_alone():
    assert [name for name, _ in beside()] == [name for name, _ in BESIDE]
    for (_, config), (_, change) in zip(beside(), BESIDE, strict=True):
        assert config == dataclasses.replace(SITE_CONFIG, **change)
    gated = dict(beside())["output gate"]
    assert parameter_count(gated) - parameter_count(SITE_CONFIG) == 3 * 64 * 64  # E x E per block


def test_parameter_count_of_the_first_rung_by_hand():
    e, v, c, f = 64, 256, 128, 256  # width, vocabulary, context, GELU width
    attention = 4 * (e * e + e)  # q, k, v, out with biases
    mlp = e * f + f + f * e + e
    norms = 2 * 2 * e  # two LayerNorms of gain and bias; post-LN has none before the output
    assert parameter_count(ladder()[0][1]) == v * e + c * e + 3 * (attention + mlp + norms)


def test_flops_per_token_equal_torchs_flop_counter():
    """Soft-capped, the scores are plain matrix products that `FlopCounterMode` sees (a fused kernel's are not)."""
    for _, config in ladder() + beside():
        computed = dataclasses.replace(
            config, context=16, softcap=1e6
        )  # a short window, to be quick
        ids = torch.zeros(1, computed.context, dtype=torch.long)
        with one_thread(), torch.no_grad(), FlopCounterMode(display=False) as counter:
            GPT(computed)(ids)
        assert counter.get_total_flops() == flops_per_token(computed) * computed.context


def test_the_sweep_reports_every_rung_and_seed(tmp_path):
    tiny = {"vocab_size": 256, "width": 8, "layers": 1, "heads": 2, "context": 8}
    rungs = [("post-LN", GPTConfig(**tiny, norm_position="post")), ("pre-LN", GPTConfig(**tiny))]
    text = "the block as models build it today. " * 20
    out = tmp_path / "report.json"
    report = run(rungs, (0, 1), steps=3, batch=2, lr=1e-3, text=text, out=out)
    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    assert [rung["name"] for rung in report["rungs"]] == ["post-LN", "pre-LN"]
    assert report["validation_bytes"] == 72  # the last tenth of 720 bytes
    assert report["cpu_threads"] == 1  # as train_gpt trains
    for (_, config), rung in zip(rungs, report["rungs"], strict=True):
        assert GPTConfig(**rung["config"]) == config  # fields added since: defaults
        assert len(rung["bits_per_byte"]) == len(rung["seconds"]) == 2
        assert all(0 < bits < 9 for bits in rung["bits_per_byte"])  # 8 bits: uniform over bytes
    assert report["rungs"][1]["change"] == {"norm_position": "pre"}


def test_the_recorded_report_holds_every_rung_and_seed_of_the_current_ladder():
    report = recorded("block-changes")
    assert (report["steps"], report["batch"], report["lr"]) == (
        block_changes.STEPS,
        block_changes.BATCH,
        block_changes.LR,
    )
    assert report["seeds"] == list(block_changes.SEEDS)
    assert len(report["rungs"]) == len(CHANGES)
    for (name, config), rung in zip(ladder(), report["rungs"], strict=True):
        assert rung["name"] == name
        assert GPTConfig(**rung["config"]) == config  # fields added since: defaults
        assert rung["parameters"] == parameter_count(config)
        assert rung["flops_per_token"] == flops_per_token(config)
        assert len(rung["bits_per_byte"]) == len(block_changes.SEEDS)
        assert all(math.isfinite(bits) for bits in rung["bits_per_byte"])


@pytest.mark.parametrize(
    ("name", "names"),
    [
        ("block-changes-2000-steps", ["pre-LN", "RoPE", "soft-capping"]),
        ("block-changes-2000-steps-post-ln", ["post-LN"]),
        ("block-changes-2000-steps-rmsnorm-swiglu", ["RMSNorm", "SwiGLU"]),
        ("block-changes-2000-steps-gqa-biases-qknorm", ["GQA", "no biases", "QK-norm"]),
    ],
)
def test_the_longer_recorded_ladder_holds_its_rungs_seeds_and_budget(name, names):
    """The ladder's longer runs (`--steps 2000 --rungs ... --text ...`)."""
    report = recorded(name)
    assert (report["steps"], report["batch"], report["lr"]) == (
        2000,
        block_changes.BATCH,
        block_changes.LR,
    )
    assert report["seeds"] == [0, 1, 2]
    assert report["cpu_threads"] == 1
    rungs = dict(ladder())
    assert [rung["name"] for rung in report["rungs"]] == names
    for rung in report["rungs"]:
        config = rungs[rung["name"]]
        assert GPTConfig(**rung["config"]) == config  # fields added since: defaults
        assert rung["parameters"] == parameter_count(config)
        assert rung["flops_per_token"] == flops_per_token(config)
        assert len(rung["bits_per_byte"]) == len(rung["seconds"]) == 3
        assert all(0 < bits < 8 for bits in rung["bits_per_byte"])


def test_the_command_trains_at_the_rate_it_is_given(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("a post-LN block at a smaller rate. " * 400, encoding="utf-8")
    out = tmp_path / "post-ln.json"
    argv = ["--steps", "2", "--seeds", "0", "--rungs", "post-LN", "--lr", "1e-3"]
    assert block_changes.main([*argv, "--text", str(text), "--out", str(out)]) == 0
    report = json.loads(out.read_text(encoding="utf-8"))
    assert (report["lr"], report["steps"]) == (1e-3, 2)
    assert [rung["name"] for rung in report["rungs"]] == ["post-LN"]
    assert len(report["rungs"][0]["bits_per_byte"]) == 1
