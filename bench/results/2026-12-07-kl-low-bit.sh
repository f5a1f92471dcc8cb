#!/bin/bash
# KL of lutra's logits against llama.cpp's on each requantized Qwen2.5-1.5B-shaped file:
# GPL-3, ctx 512, one chunk (255 scored positions), 2 threads. Prints one JSON line per file.
B=/root/.cache/lutra/llamacpp-tools-0.3.36/build/bin
L=${L:-target/release/lutra}
cd "$(dirname "$0")/../.."; OUT=${OUT:-/tmp/lutra-kl}; mkdir -p $OUT
for f in ${TYPES:-q2_0 tq1_0 tq2_0 q2_k q3_k_s q4_0 q4_k_m}; do
  m=models/shapes/qwen2.5-1.5b-$f.gguf
  s=$(date +%s)
  $B/llama-perplexity -m $m -f /usr/share/common-licenses/GPL-3 -c 512 --chunks 1 -t 2 --kl-divergence-base $OUT/$f.kld > $OUT/$f.llama.log 2>&1 || { echo "{\"file\":\"$f\",\"error\":\"llama-perplexity\"}"; continue; }
  t=$(date +%s)
  echo "{\"file\":\"$f\",\"llama_s\":$((t-s)),\"result\":$(LUTRA_IMPORT_CACHE=off $L perplexity -m $m --kl-divergence-base $OUT/$f.kld -t 2 --json 2>$OUT/$f.lutra.err)}"
done
