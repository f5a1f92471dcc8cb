#!/usr/bin/env bash
# usage: cold-start.sh BEFORE_BIN AFTER_BIN MODEL [ROUNDS] — wall time and peak RSS of `lutra run -n 1`
# (load, one prompt token, one generated), alternated; prints one line per run
set -u
before=$1; after=$2; model=$3; rounds=${4:-7}
for r in $(seq 1 "$rounds"); do
  for b in "$before" "$after"; do
    /usr/bin/time -f "$(basename "$b") %e s %M KB" "$b" run -m "$model" -p hi -n 1 -t 1 2>&1 >/dev/null | tail -1
  done
done
