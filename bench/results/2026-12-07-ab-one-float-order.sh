#!/bin/bash
# What one float order on every tier costs (#42 item 3): HEAD before (A, cb25085) and after
# (B), alternated, `lutra bench model -t 1 --pp 128 --tg 64 --runs 3`, native tier and
# LUTRA_MAX_ISA=avx2. A=path/to/old/lutra B=path/to/new/lutra.
A=${A:?old lutra} B=${B:?new lutra}
cd "$(dirname "$0")/../.."
for round in 1 2 3; do
  for m in models/gemma-3-270m-q4_k_m.gguf models/stories15M/stories15M-q4_0.gguf models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf models/shapes/qwen2.5-1.5b-q4_k_m.gguf; do
    for tier in native avx2; do
      for build in A B; do
        [ "$tier" = native ] && cap=() || cap=(env LUTRA_MAX_ISA=avx2)
        bin=${!build}
        echo "round $round $(basename $m) $tier $build: $("${cap[@]}" $bin bench model -m $m -t 1 --pp 128 --tg 64 --runs 3 2>&1 | tail -1 | sed 's/.*attention: //')"
      done
    done
  done
done
