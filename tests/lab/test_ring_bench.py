"""qkv_lab.ring_bench: the benchmark of ring attention, as the attention-across-devices article runs it."""

import json
import subprocess
import sys

from qkv_lab import ring_bench


def test_the_articles_ring_bench_block_runs_as_a_script_without_a_main_guard(tmp_path):
    # The attention-across-devices block, saved as a file and run as a reader would: no __main__ guard.
    script = tmp_path / "ring.py"
    script.write_text(
        "from qkv_lab import ring_bench\n"
        "(row,) = ring_bench.run(world=2, ns=[64], causal=True, repeats=1)\n"
        "print(row['world'], row['shard'], row['max_error'] < 1e-5)\n"
    )
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout == "2 32 True\n"


def test_one_run_measures_the_ring_without_and_with_the_mask(tmp_path):
    out = tmp_path / "ring.json"
    argv = ["--world", "2", "--n", "64", "--masks", "full", "causal", "--repeats", "1"]
    assert ring_bench.main([*argv, "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["results"]
    assert [(row["world"], row["n"], row["causal"]) for row in rows] == [
        (2, 64, False),
        (2, 64, True),
    ]
    assert all(row["max_error"] < 1e-5 for row in rows)
