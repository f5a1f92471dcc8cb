#!/usr/bin/env bash
# base (0199005) vs now: llama2.c stories15M at 4 and 8 bits, alternated rounds, AVX2 tier
M=/work/main/models; OUT=/work/ab/bench2/ab.jsonl; : > $OUT
for r in 1 2 3 4 5; do
  if (( r % 2 )); then order="base now"; else order="now base"; fi
  for which in $order; do
    B=/work/ab/lutra-$which
    for bits in 4 8; do
      LUTRA_MAX_ISA=avx2 $B bench model -m $M/stories15M/model.bin --bits $bits -t 1,2 --runs 3 --json 2>/dev/null | sed "s|^|{\"bin\":\"$which\",\"round\":$r,\"bits\":$bits,\"row\":|; s|$|}|" >> $OUT
    done
  done
done
echo finished
