#!/bin/bash
# Greedy text (64 tokens) per kernel tier and thread count: each line's md5 of `lutra run` stdout.
L=${L:-target/release/lutra}
cd "$(dirname "$0")/../.."
run() { env ${1:+LUTRA_MAX_ISA=$1} $L run -m "$2" --no-import-cache -p "$3" -n 64 --temp 0 -t $4 2>/dev/null | md5sum | cut -c1-8; }
for spec in "models/stories15M/model.bin|Once upon a time" "models/stories15M/stories15M-q4_0.gguf|Once upon a time" \
            "models/gemma-3-270m-q4_k_m.gguf|Once upon a time" \
            "models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf|Write a Python function that reverses a string." \
            "models/shapes/qwen2.5-1.5b-q4_k_m.gguf|Once upon a time" "models/shapes/qwen2.5-1.5b-q1_0.gguf|Once upon a time"; do
  m=${spec%%|*}; p=${spec#*|}
  line="$(basename $m):"
  for tier in ${TIERS:-scalar ssse3 avx2 avx512 avx512vbmi}; do line="$line $tier=$(run $tier "$m" "$p" 1)"; done
  echo "$line best-2-threads=$(run "" "$m" "$p" 2)"
done
