"""The articles' claims about trained toys hold under every CPU kernel set torch has, not only this machine's.

A toy trained for a few hundred steps ends in a slightly different place with AVX-512, AVX2 or plain kernels
(`qkv_lab.cpu_kernels`). Each article block that trains a toy is run here again with the toy's trainer
replaced by the results recorded under each kernel set: its assertions, and so the sentences they back, must
hold for all of them, as they must for any reader's machine.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

import qkv_lab.toys
from qkv_lab.cpu_kernels import CAPABILITIES, MAX_TOKEN_RUNS
from qkv_lab.results import recorded
from tests.site.markdown import parse_fences

POSTS = Path(__file__).parents[2] / "docs" / "blog" / "posts"
TRAINERS = {  # article -> the trainer its blocks call
    "multi-head-attention": "measure_induction",
    "transformer-block": "train_max_token",
}


def trainer_blocks(article: str, trainer: str) -> list[str]:
    """The article's test blocks that call `trainer`, each with the blocks that continue it, as sources."""
    chains: list[list[str]] = []
    calls = False
    for fence in parse_fences((POSTS / f"{article}.md").read_text(encoding="utf-8")):
        if fence.is_test:
            calls = fence.syntax == "python" and any(trainer in line for line in fence.body)
            if calls:
                chains.append([])
        if calls and fence.syntax == "python" and fence.joined in (None, "cont"):
            chains[-1].append("\n".join(fence.body))
    return ["\n".join(chain) for chain in chains]


def recorded_trainer(trainer: str, run: dict):
    """A stand-in for `trainer` that returns what it returned under one kernel set."""
    if trainer == "measure_induction":
        return lambda seed: run["induction"][seed]
    losses = {(r["pre_ln"], r["lr"], r["seed"]): r["losses"] for r in run["max_token"]}
    return lambda pre_ln, steps=120, lr=1e-2, seed=0: losses[(pre_ln, lr, seed)]


def test_every_kernel_set_and_run_is_recorded():
    runs = recorded("cpu-kernels")["runs"]
    assert sorted(runs) == sorted(CAPABILITIES)
    assert sorted(run["capability"] for run in runs.values()) == ["AVX2", "AVX512", "DEFAULT"]
    for run in runs.values():
        assert [(r["pre_ln"], r["lr"], r["seed"]) for r in run["max_token"]] == [
            (r["pre_ln"], r["lr"], r["seed"]) for r in MAX_TOKEN_RUNS
        ]
        assert len(run["induction"]) == 5


@pytest.mark.parametrize("capability", CAPABILITIES)
@pytest.mark.parametrize("article", sorted(TRAINERS))
def test_article_claims_hold_under_kernel_set(article, capability, monkeypatch):
    trainer = TRAINERS[article]
    blocks = trainer_blocks(article, trainer)
    assert blocks, f"{article}.md has no block that calls {trainer}"
    run = recorded("cpu-kernels")["runs"][capability]
    monkeypatch.setattr(qkv_lab.toys, trainer, recorded_trainer(trainer, run))
    for source in blocks:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(source, f"{article}.md", "exec"), {"__name__": "article_block"})


def test_a_run_that_breaks_a_claim_fails(monkeypatch):
    """The check can fail: one seed of one kernel set that learned less breaks the article's bounds."""
    run = recorded("cpu-kernels")["runs"]["avx512"]
    worse = {**run, "induction": [{**run["induction"][0], "accuracy": 0.5}, *run["induction"][1:]]}
    monkeypatch.setattr(
        qkv_lab.toys, "measure_induction", recorded_trainer("measure_induction", worse)
    )
    (source, *_) = trainer_blocks("multi-head-attention", "measure_induction")
    with contextlib.redirect_stdout(io.StringIO()), pytest.raises(AssertionError):
        exec(compile(source, "multi-head-attention.md", "exec"), {"__name__": "article_block"})
