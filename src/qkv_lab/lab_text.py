"""The text a recorded lab run trained on: a snapshot kept beside its report, its hash and its baselines.

The site's text is its articles, which change with every edit, so a report's numbers belong to the text as it
stood when it ran. `save_snapshot` keeps that text, xz-compressed, in `qkv_lab/results/` under a name that
holds its hash; `read_text` reads it back (or any plain UTF-8 file), so that `--text` reruns a recorded run on
the same bytes and the tests recompute the recorded baselines from them.

`text_record` is what every such report holds about its text: the hash, the sizes of the split
(`qkv_lab.gpt_training.split`) and the n-gram baselines on it (`ngram_bits_per_byte`, orders 1 to 3).
"""

from __future__ import annotations

import hashlib
import lzma
from importlib.resources import files
from pathlib import Path

from qkv_lab.gpt_training import encode, ngram_bits_per_byte, split

RESULTS = Path(__file__).parent / "results"
BASELINES = ("unigram", "bigram", "trigram")  # orders 1, 2, 3


def text_sha256(text: str) -> str:
    """The SHA-256 of `text`'s UTF-8 bytes, in hex."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def snapshot_name(text: str) -> str:
    """The snapshot's file name: `site-text-<first 12 hex digits of the hash>.txt.xz`."""
    return f"site-text-{text_sha256(text)[:12]}.txt.xz"


def save_snapshot(text: str, folder: Path = RESULTS) -> Path:
    """Write `text` xz-compressed to `folder / snapshot_name(text)` (once) and return the path."""
    path = folder / snapshot_name(text)
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        path.write_bytes(lzma.compress(text.encode("utf-8"), preset=9))
    return path


def read_text(path: str | Path) -> str:
    """The text of a `.xz` snapshot or of a plain UTF-8 file; a bare name is looked up in the results.

    Raises:
        FileNotFoundError: no such file.
    """
    path = Path(path)
    if not path.exists() and path.name == str(path):
        path = Path(str(files("qkv_lab.results").joinpath(path.name)))
    data = path.read_bytes()
    return (lzma.decompress(data) if path.suffix == ".xz" else data).decode(
        "utf-8"
    )


def text_record(text: str) -> dict:
    """What a report holds about its text: hash, snapshot name, split sizes and n-gram baselines.

    Returns:
        `text_sha256`, `text_file` (the snapshot's name), `text_bytes`, `train_bytes`, `validation_bytes`,
        and `baselines`: bits per byte on the validation split of the unigram, bigram and trigram models of
        the training split.
    """
    train, validation = split(encode(text))
    train_bytes, validation_bytes = (
        bytes(train.tolist()),
        bytes(validation.tolist()),
    )
    return {
        "text_sha256": text_sha256(text),
        "text_file": snapshot_name(text),
        "text_bytes": len(train) + len(validation),
        "train_bytes": len(train),
        "validation_bytes": len(validation),
        "baselines": {
            name: ngram_bits_per_byte(train_bytes, validation_bytes, order)
            for order, name in enumerate(BASELINES, start=1)
        },
    }
