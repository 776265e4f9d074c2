"""The QKV lab: the benchmarks, the toy models and the recorded results that the articles show.

It imports the library (`qkv`), never the reverse: `import qkv` loads nothing from here (tests/lab checks it).

- `harness`: how every benchmark measures (time, peak memory, environment, the JSON report);
- `bench` (the kernels and torch's attention, GPU), `classic_bench`, `efficient_bench`, `ring_bench`: the
  benchmarks, each runnable as `python -m qkv_lab.<name>`;
- `toys`: small models trained on the CPU in seconds; `examples`: the articles' worked examples;
- `results`: the recorded reports the articles read (`qkv_lab.results.recorded("decoding")`).
"""
