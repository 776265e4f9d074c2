"""qkv_lab.lab_text: snapshots, the text's record, and the recorded runs' texts and baselines."""

import hashlib
import lzma

import pytest

from qkv_lab.gpt_training import encode, ngram_bits_per_byte, split
from qkv_lab.lab_text import read_text, save_snapshot, snapshot_name, text_record
from qkv_lab.results import recorded

TEXT = "Queries meet keys; values follow. Ünïcode too: √d, QKᵀ, “quotes”.\n" * 30


def test_a_snapshot_reads_back_as_the_same_text(tmp_path):
    path = save_snapshot(TEXT, tmp_path)
    digest = hashlib.sha256(TEXT.encode("utf-8")).hexdigest()
    assert path.name == snapshot_name(TEXT) == f"site-text-{digest[:12]}.txt.xz"
    assert lzma.decompress(path.read_bytes()).decode("utf-8") == TEXT
    assert read_text(path) == TEXT
    plain = tmp_path / "plain.md"
    plain.write_text(TEXT, encoding="utf-8")
    assert read_text(plain) == TEXT


def test_a_missing_text_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_text(tmp_path / "absent.txt.xz")


def test_the_record_holds_the_split_and_baselines_of_orders_one_to_three():
    record = text_record(TEXT)
    size = len(TEXT.encode("utf-8"))
    assert record["text_bytes"] == size
    assert record["train_bytes"] + record["validation_bytes"] == size
    assert record["validation_bytes"] == size - round(size * 0.9)
    baselines = record["baselines"]
    assert list(baselines) == ["unigram", "bigram", "trigram"]
    assert baselines["unigram"] > baselines["bigram"] > baselines["trigram"]  # a repetitive text


@pytest.mark.parametrize(
    "name",
    [
        "long-run",
        "block-changes-2000-steps",
        "block-changes-2000-steps-post-ln",
        "block-changes-2000-steps-rmsnorm-swiglu",
        "block-changes-2000-steps-gqa-biases-qknorm",
        "sparse-attention",
    ],
)
def test_a_recorded_runs_text_and_baselines_are_those_of_its_snapshot(name):
    """The snapshot kept beside the report is the text it trained on, and the baselines are that text's."""
    report = recorded(name)
    text = read_text(report["text_file"])
    assert hashlib.sha256(text.encode("utf-8")).hexdigest() == report["text_sha256"]
    train, validation = split(encode(text))
    assert (report["train_bytes"], report["validation_bytes"]) == (len(train), len(validation))
    train_bytes, validation_bytes = bytes(train.tolist()), bytes(validation.tolist())
    for order, baseline in enumerate(("unigram", "bigram", "trigram"), start=1):
        assert report["baselines"][baseline] == pytest.approx(
            ngram_bits_per_byte(train_bytes, validation_bytes, order), abs=1e-9
        )
