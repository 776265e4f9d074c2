"""qkv_lab.gpt_bench: the uncached loop is greedy decoding, and the report has every case and its machine."""

import torch

from qkv.gpt import GPT, GPTConfig, generate
from qkv_lab import gpt_bench
from qkv_lab.results import recorded


def small_model() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(width=32, layers=2, heads=2, context=64)).eval()


def test_the_uncached_loop_takes_the_argmax_of_a_full_pass_each_step():
    model, ids = small_model(), torch.randint(0, 256, (2, 5))
    out = gpt_bench.generate_uncached(model, ids, 6)
    assert out.shape == (2, 11)
    assert torch.equal(out[:, :5], ids)
    with torch.no_grad():
        for t in range(5, 11):
            assert torch.equal(out[:, t], model(out[:, :t])[:, -1].argmax(-1))
    assert torch.equal(out, generate(model, ids, 6, temperature=0))


def test_run_reports_every_case():
    report = gpt_bench.run(new_tokens=(2, 4), rounds=1, min_run_time=0.001, model=small_model())
    assert {(r["loop"], r["new_tokens"]) for r in report["results"]} == {
        (loop, n) for loop in ("cached", "uncached") for n in (2, 4)
    }
    assert all(r["ms"] > 0 for r in report["results"])
    assert report["same_tokens"] is True
    assert report["environment"]["device"] == "cpu"


def test_the_recorded_run_has_the_posts_cases_and_its_machine():
    report = recorded("small-gpt")
    assert {(r["loop"], r["new_tokens"]) for r in report["results"]} == {
        (loop, n) for loop in ("cached", "uncached") for n in gpt_bench.NEW_TOKENS
    }
    assert report["same_tokens"] is True
    assert report["environment"]["cpu_threads"] == 1
    assert {"device_name", "torch", "date_utc"} <= report["environment"].keys()
