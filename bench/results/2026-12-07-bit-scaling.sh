#!/bin/bash
# lutra's decode on the Qwen2.5-1.5B-shaped file in each llama-quantize type (random weights,
# `cargo xtask models shapes --shapes qwen2.5-1.5b --types ...`): tokens/s, median of 5 runs,
# 1 and 2 threads in one invocation per file. Bytes a step reads: `lutra inspect --kernels`.
L=${1:-target/release/lutra}
for f in q1_0 tq1_0 tq2_0 q2_0 q2_k q3_k_s q4_0 q4_k_m; do
  LUTRA_IMPORT_CACHE=off $L bench model -m models/shapes/qwen2.5-1.5b-$f.gguf -t 1,2 --pp 16 --tg 32 --runs 5 --json 2>/dev/null |
    grep tg_tps | sed "s/^/{\"file\":\"$f\",\"result\":/; s/$/}/"
done
