#!/bin/bash
# What --residual-tables costs: lutra bench model with and without, alternated, 2 threads.
L=${L:-target/release/lutra}
cd "$(dirname "$0")/../.."
for f in ${TYPES:-q1_0 q2_0 tq1_0 q4_k_m}; do
  for tables in "" --residual-tables "" --residual-tables; do
    echo "$f ${tables:-int8-tables}: $($L bench model -m models/shapes/qwen2.5-1.5b-$f.gguf -t 2 --pp 128 --tg 32 --runs 5 $tables 2>&1 | tail -1 | sed 's/.*attention: //')"
  done
done
