#!/usr/bin/env bash
# The GPU steps of the FlashAttention kernel, as one command (see the GPU notes of the project and issue 11).
#
#   benchmarks/gpu.sh OUT [STAGE ...]
#   benchmarks/gpu.sh OUT lease        # one lease of issue 42: about 7 minutes, the command to run first
#
# Run from the repository root on a machine with an NVIDIA GPU, Python 3, torch and triton (no network, no
# nox: the package runs from src/). STAGE is env, tests, square, masks, split-kv, varlen or lease; no STAGE
# runs the first six in that order. Where each command may run at most 10 minutes, run one stage per command: each stage
# stops itself before then, and the benchmark stages save their JSON after every case. What each stage writes
# into OUT:
#
#   env     nvidia-smi.txt (nvidia-smi -q), versions.json (GPU, driver, CUDA, torch, triton, cuDNN, date)
#   tests   tests.txt: the kernels' tests on CUDA in float16 and bfloat16, packed batches included
#           (TRITON_INTERPRET=0; the autotuner off, QKV_FLASH_AUTOTUNE=0, so that correctness takes
#           minutes), then the article's CUDA blocks (docs-cuda.txt) where pytest-codeblocks is installed: a
#           machine without a package index gets it from WHEELS, a folder of wheels brought along
#           (pytest_codeblocks-0.18.0 is pure Python), installed into the Python that runs the tests
#   square  bench-square.json and plots/: full and causal, N = 1k .. 16k, D = 128 then 64 (HEAD_DIMS, e.g.
#           HEAD_DIMS=64 to measure only what an earlier run left out), bfloat16
#   masks   bench-masks.json: decoding (1 to 16 queries on up to 128k keys), GQA 32/8, a 4k window over
#           64k, key padding, causal 128k (SUITES, e.g. SUITES="window long"); D = 128, bfloat16
#   split-kv  bench-split-kv.json: qkv.decode_attention (default splits, one split, a paged cache of
#           16-token pages, the merge in a launch of its own) against torch's SDPA and qkv-flash: 1, 4
#           and 16 queries, GQA 32/8, 4k to 128k keys for 4 sequences and 4k to 32k for 16; D = 128,
#           bfloat16 (DECODE_PATHS to choose paths). About 150 cases: expect 4 to 6 minutes, compiling and autotuning included
#   varlen  bench-varlen.json: four causal documents of N, 3N/4, N/2 and N/4 tokens (N = 4k, 16k), padded to N
#           for torch's SDPA and qkv-flash (key_lengths), packed for qkv-flash-varlen; D = 128, bfloat16,
#           forward and forward + backward (VARLEN_PATHS to choose paths). 20 cases
#   lease   OUT/<date>-<gpu>/ (python -m qkv_lab.lease; benchmarks/gpu/README.md): forward at N = 4k and
#           16k, full and causal, then forward + backward, then decoding (1 and 16 queries on 4k to 128k
#           keys), the kernels against torch's own choice, cuDNN and FlashAttention-2 (decoding: torch's
#           bottom-right causal bias), D = 128, bfloat16. Per case: the float32 reference of the output and
#           gradients on every element; each launch configuration the autotuner would try, pinned, checked
#           and timed; the fastest timed again pinned; decoding inside a CUDA graph. summary.json (issue
#           42's schema) and cases.json after every case. Then a confirming run in a new process with the
#           chosen configurations pinned (confirm.json, measured.json). LEASE_SECONDS (default 400) caps
#           both; no case starts in the last minute of either part. A rerun into the same OUT on the same
#           day measures only the cases the folder lacks.
#
# PATHS names the paths the square and masks stages time (default: every path; "torch qkv-flash" is what the
# table below needs). square, masks, split-kv and varlen also add their qkv-flash and torch times to
# OUT/measured.json, the table that qkv.attention's "auto" reads: commit it as src/qkv/kernels/measured.json,
# and the bench JSON under docs/.
# Every case is checked against the float32 reference before it is timed (status "wrong" if it fails).
set -euo pipefail

out=${1:?usage: benchmarks/gpu.sh OUT [env|tests|square|masks|split-kv|varlen ...]}
shift
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(env tests square masks split-kv varlen)
mkdir -p "$out"
export PYTHONPATH=src TRITON_INTERPRET=0 TRITON_DEFAULT_FP_FUSION=1
python=${PYTHON:-python3}
limit=${STAGE_SECONDS:-540}  # under the 10 minutes a command may run, with time to copy the results
# SIGINT lets the benchmark save what it measured; a kernel launch or an autotuner can hold it off
# (the first H100 run saw a stage outlive its limit by minutes), so KILL follows 20 s later.
stop=(timeout --kill-after=20)
read -r -a paths <<<"${PATHS:-torch torch-flash torch-efficient torch-cudnn torch-lower-right qkv-flash}"
# torch-flash takes no explicit mask, which bottom-right causal needs (torch's is_causal is top-left);
# torch-lower-right reaches it through torch's causal_lower_right bias
read -r -a decode_paths <<<"${DECODE_PATHS:-torch torch-efficient torch-cudnn torch-lower-right qkv-flash qkv-decode qkv-decode-unsplit qkv-decode-paged qkv-decode-merge-in-launch}"
read -r -a varlen_paths <<<"${VARLEN_PATHS:-torch torch-efficient torch-cudnn qkv-flash qkv-flash-varlen}"

for stage in "${stages[@]}"; do
  echo "== $stage ($(date -u +%FT%TZ))"
  case $stage in
    env)
      nvidia-smi | tee "$out/nvidia-smi-summary.txt"
      nvidia-smi -q > "$out/nvidia-smi.txt"
      "$python" - "$out/versions.json" <<'PY'
import datetime, json, platform, subprocess, sys
import torch, triton
fields = "name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit"
smi = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"],
                     capture_output=True, text=True, check=True).stdout.strip()
versions = {
    "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    "gpu": torch.cuda.get_device_name(), "capability": torch.cuda.get_device_capability(),
    "nvidia_smi": dict(zip(fields.split(","), (v.strip() for v in smi.split(",")))),
    "python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
    "cudnn": torch.backends.cudnn.version(), "triton": triton.__version__,
}
open(sys.argv[1], "w").write(json.dumps(versions, indent=2) + "\n")
print(json.dumps(versions, indent=2))
PY
      ;;
    tests)
      # the sm_90 compile test is for machines without a GPU: here every kernel compiles for real
      QKV_FLASH_AUTOTUNE=0 "${stop[@]}" "$limit" "$python" -m pytest -q -p no:cacheprovider -rs \
        -k "not test_kernels_compile_for_a_gpu" tests/library/test_flash.py tests/library/test_flash_varlen.py \
        tests/library/test_decode_kernel.py tests/library/test_dispatch.py tests/library/test_tiles.py \
        2>&1 | tee "$out/tests.txt" || true
      if [ -n "${WHEELS:-}" ]; then
        "$python" -m pip install -q --no-index --no-deps "$WHEELS"/*.whl || true
      fi
      if "$python" -c "import pytest_codeblocks" 2>/dev/null; then
        "${stop[@]}" 120 "$python" -m pytest -q -p no:cacheprovider --codeblocks \
          docs/blog/posts/flash-attention.md 2>&1 | tee "$out/docs-cuda.txt" || true
      else
        echo "pytest-codeblocks is not installed: the article's CUDA blocks were not run" | tee "$out/docs-cuda.txt"
      fi
      ;;
    square)
      "${stop[@]}" --signal=INT "$limit" "$python" -m qkv_lab.bench --suite square --dtype bf16 \
        --head-dim ${HEAD_DIMS:-128 64} --n 1024 2048 4096 8192 16384 --paths "${paths[@]}" \
        --out "$out/bench-square.json" --plot "$out/plots" --table "$out/measured.json" || true
      ;;
    masks)
      "${stop[@]}" --signal=INT "$limit" "$python" -m qkv_lab.bench --suite ${SUITES:-decode gqa window padding long} \
        --dtype bf16 --head-dim 128 --paths "${paths[@]}" \
        --out "$out/bench-masks.json" --table "$out/measured.json" || true
      ;;
    split-kv)
      "${stop[@]}" --signal=INT "$limit" "$python" -m qkv_lab.bench --suite split-kv --dtype bf16 \
        --head-dim 128 --paths "${decode_paths[@]}" \
        --out "$out/bench-split-kv.json" --table "$out/measured.json" || true
      ;;
    varlen)
      "${stop[@]}" --signal=INT "$limit" "$python" -m qkv_lab.bench --suite varlen --dtype bf16 \
        --head-dim 128 --paths "${varlen_paths[@]}" \
        --out "$out/bench-varlen.json" --table "$out/measured.json" || true
      ;;
    lease)
      # every configuration is a candidate of the tuning step (QKV_FLASH_AUTOTUNE=0 would leave one)
      total=${LEASE_SECONDS:-400}
      measure=$((total * 4 / 5))
      confirm=$((total - measure))
      QKV_FLASH_AUTOTUNE=1 "${stop[@]}" --signal=INT "$measure" "$python" -m qkv_lab.lease "$out" \
        --steps forward backward decode --seconds $((measure - 60)) || true
      QKV_FLASH_AUTOTUNE=1 "${stop[@]}" --signal=INT "$confirm" "$python" -m qkv_lab.lease "$out" \
        --steps confirm --seconds $((confirm - 30)) || true
      ;;
    *)
      echo "unknown stage $stage: use env, tests, square, masks, split-kv, varlen or lease" >&2
      exit 2
      ;;
  esac
done
echo "== done ($(date -u +%FT%TZ)): $(ls "$out" | tr '\n' ' ')"
