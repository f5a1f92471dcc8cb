#!/usr/bin/env bash
# usage: subblock-ab.sh BEFORE_BIN AFTER_BIN LLAMA_BIN_DIR MODEL [ROUNDS] [PP] [TG]
# lutra before / lutra after / llama-bench, alternated (the first engine rotates each round),
# 1 and 2 threads; one JSON line per invocation (lutra: medians of 3 runs; llama-bench: 3
# repetitions, its mean). Summarize with the python one-liner in the results file.
set -u
before=$1; after=$2; llama=$3; model=$4; rounds=${5:-5}; pp=${6:-64}; tg=${7:-64}
engines=(before after llama)
for r in $(seq 1 "$rounds"); do
  for t in 1 2; do
    for k in 0 1 2; do
      e=${engines[$(( (k + r) % 3 ))]}
      case $e in
        before|after)
          bin=$before; [ "$e" = after ] && bin=$after
          line=$("$bin" bench model -m "$model" -t "$t" --pp "$pp" --tg "$tg" --runs 3 --json 2>/dev/null | grep pp_tps)
          echo "{\"engine\":\"$e\",\"threads\":$t,\"round\":$r,\"result\":$line}" ;;
        llama)
          out=$("$llama/llama-bench" -m "$model" -t "$t" -p "$pp" -n "$tg" -r 3 -o jsonl 2>/dev/null | grep avg_ts | tr '\n' ',')
          echo "{\"engine\":\"llama\",\"threads\":$t,\"round\":$r,\"result\":[${out%,}]}" ;;
      esac
    done
  done
done
