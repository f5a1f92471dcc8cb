#!/bin/bash
# Q5_0 in one form on every tier (one float order): bit planes (B) or five-bit int8 codes (C),
# alternated, `lutra bench model -t 1 --pp 128 --tg 64 --runs 3`, tiers ssse3, avx2, native.
B=${B:?planes lutra} C=${C:?int8 lutra}
cd "$(dirname "$0")/../.."
for round in 1 2 3; do
  for m in models/gemma-3-270m-q4_k_m.gguf models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf; do
    for tier in ssse3 avx2 native; do
      for build in B C; do
        [ "$tier" = native ] && cap=() || cap=(env LUTRA_MAX_ISA=$tier)
        bin=${!build}
        echo "round $round $(basename $m) $tier $build: $("${cap[@]}" $bin bench model -m $m -t 1 --pp 128 --tg 64 --runs 3 2>&1 | tail -1 | sed 's/.*attention: //')"
      done
    done
  done
done
