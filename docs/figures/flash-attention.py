"""Figures for the post "FlashAttention from scratch".

`flash-attention-cpu`: `qkv.bench` run on the CPU of the machine that builds the site, at build time, for the
paths that run there (the explicit reference and torch's math and flash backends; the Triton kernel needs
CUDA). The title carries the processor, the torch version and the UTC date of the run.
"""

from matplotlib.figure import Figure

from qkv import bench

CPU_RUN = [
    *("--device", "cpu", "--n", "128", "256", "512", "--head-dim", "64", "--dtype", "fp32"),
    *("--causal", "no", "--mode", "forward", "--tokens", "1024", "--hidden", "256"),
    *("--paths", "reference", "torch-math", "torch-flash"),
]


def cpu_benchmark() -> Figure:
    """Forward TFLOP/s against N on this machine's CPU, float32, D = 64, no mask."""
    report = bench.run(bench.parse_args(CPU_RUN), progress=None)
    return bench.draw(report, mode="forward", dtype="fp32", head_dim=64, causal=False)


FIGURES = {"flash-attention-cpu": cpu_benchmark}
