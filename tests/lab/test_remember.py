"""qkv_lab.remember: a slow function's results kept on disk, keyed by its arguments and the source."""

import multiprocessing
import time
from pathlib import Path

import pytest
import torch

from qkv_lab import remember, toys


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("QKV_CACHE", str(tmp_path))
    return tmp_path


def counted() -> tuple[list[tuple], object]:
    calls: list[tuple] = []

    @remember.remembered
    def square(x: int, scale: float = 1.0) -> list[float]:
        calls.append((x, scale))
        return [x * x * scale]

    return calls, square


def test_a_second_call_reads_the_first_ones_result(cache: Path) -> None:
    calls, square = counted()
    assert square(3) == [9.0]
    assert square(3, scale=1.0) == [9.0]  # the defaults are part of the key: the same call
    assert calls == [(3, 1.0)]
    assert len(list(cache.glob("*.pt"))) == 1
    assert not list(cache.glob("*.partial"))


def test_other_arguments_or_other_source_compute_again(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls, square = counted()
    square(3)
    square(4)
    square(3, scale=2.0)
    monkeypatch.setattr(remember, "_source_digest", lambda: "the package changed")
    square(3)
    assert calls == [(3, 1.0), (4, 1.0), (3, 2.0), (3, 1.0)]


@remember.remembered
def _slow_and_counted(log: str) -> list[int]:
    with open(log, "a") as file:
        file.write("computed\n")
    time.sleep(1)
    return [1]


def test_processes_asking_at_once_compute_once(cache: Path) -> None:
    log = cache / "log.txt"
    fork = multiprocessing.get_context("fork")
    asking = [fork.Process(target=_slow_and_counted, args=(str(log),)) for _ in range(3)]
    for process in asking:
        process.start()
    for process in asking:
        process.join()
    assert [process.exitcode for process in asking] == [0, 0, 0]
    assert log.read_text() == "computed\n"
    assert _slow_and_counted(str(log)) == [1]
    assert log.read_text() == "computed\n"


def test_off_switches_the_cache_off(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("QKV_CACHE", "off")
    calls, square = counted()
    square(3)
    square(3)
    assert calls == [(3, 1.0), (3, 1.0)]
    assert remember.folder() is None


def test_the_default_folder_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("QKV_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert remember.folder() == tmp_path / "qkv"


def test_the_max_token_toy_is_deterministic_and_remembered(cache: Path) -> None:
    first = toys.train_max_token(False, steps=3, seed=7)
    assert len(first) == 3
    assert all(isinstance(loss, float) for loss in first)
    (kept,) = cache.glob("train_max_token-*.pt")
    assert torch.load(kept, weights_only=True) == first
    kept.unlink()
    assert toys.train_max_token(False, steps=3, seed=7) == first  # trained again: the same losses
