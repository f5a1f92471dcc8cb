#!/usr/bin/env bash
# usage: import-cache.sh BEFORE_BIN AFTER_BIN MODEL [ROUNDS] [THREADS]
# Time to first token, as wall time and peak RSS of one whole process that loads MODEL and
# generates one token: llama.cpp's `llama-bench -p 0 -n 1 -r 1 --no-warmup`, lutra BEFORE
# (`run -p hi -n 1`), lutra AFTER with --no-import-cache (every load imports), AFTER's first
# load with an empty import cache (imports, then writes the entry), and AFTER's load from
# the entry. Rounds alternate; each prints one line per engine. With DROP=1 the page cache
# is dropped before every run (the file read from disk).
set -u
before=$1; after=$2; model=$3; rounds=${4:-5}; threads=${5:-2}
llama=${LLAMA_BENCH:-$HOME/.cache/lutra/llamacpp-tools-0.3.36/build/bin/llama-bench}
cache=$(mktemp -d)
drop() { if [ "${DROP:-0}" = 1 ]; then sync; echo 3 > /proc/sys/vm/drop_caches; fi; }
timed() { local label=$1; shift; drop; /usr/bin/time -f "$label %e s %M KB" "$@" 2>&1 >/dev/null | tail -1; }
for r in $(seq 1 "$rounds"); do
  timed llama.cpp "$llama" -m "$model" -p 0 -n 1 -r 1 -t "$threads" --no-warmup
  timed lutra-before "$before" run -m "$model" -p hi -n 1 -t "$threads" --temp 0
  timed lutra-no-cache "$after" run -m "$model" -p hi -n 1 -t "$threads" --temp 0 --no-import-cache
  rm -rf "$cache"/*
  timed lutra-cache-write env LUTRA_IMPORT_CACHE="$cache" "$after" run -m "$model" -p hi -n 1 -t "$threads" --temp 0
  timed lutra-cache-read env LUTRA_IMPORT_CACHE="$cache" "$after" run -m "$model" -p hi -n 1 -t "$threads" --temp 0
done
rm -rf "$cache"
