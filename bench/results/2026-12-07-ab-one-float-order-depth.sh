#!/bin/bash
# One float order at a long context (attention's share grows): cb25085 (A) against the
# landed code (B), alternated, `lutra bench model -t 1 --depth 4096 --pp 64 --tg 64 --runs 1`
# (exact f16 keys), native tier and LUTRA_MAX_ISA=avx2. A=old lutra B=new lutra.
A=${A:?old lutra} B=${B:?new lutra}
cd "$(dirname "$0")/../.."
for round in 1 2 3; do
  for m in models/gemma-3-270m-q4_k_m.gguf models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf; do
    for tier in native avx2; do
      for build in A B; do
        [ "$tier" = native ] && cap=() || cap=(env LUTRA_MAX_ISA=avx2)
        bin=${!build}
        echo "round $round $(basename $m) $tier $build: $("${cap[@]}" $bin bench model -m $m -t 1 --depth 4096 --pp 64 --tg 64 --runs 1 2>&1 | tail -1 | sed 's/.*attention: //')"
      done
    done
  done
done
