#!/usr/bin/env bash
M=/work/main/models; OUT=/work/ab/bench2/ab5.jsonl; : > $OUT
for r in 1 2 3 4; do
  if (( r % 2 )); then order="base now"; else order="now base"; fi
  for which in $order; do
    B=/work/ab/lutra-$which
    for model in gemma-3-270m-q4_k_m.gguf stories15M/stories15M-q4_0.gguf; do
      LUTRA_MAX_ISA=avx2 $B bench model -m $M/$model -t 1,2 --runs 3 --json 2>/dev/null | sed "s|^|{\"bin\":\"$which\",\"round\":$r,\"model\":\"$model\",\"row\":|; s|$|}|" >> $OUT
    done
  done
done
