#!/usr/bin/env bash
# Decode against the DRAM roofline (issue #17 item 4): in alternated rounds, the DRAM read
# rate (`lutra bench membw`) and one decode step's profile (`lutra bench model --profile`)
# at each thread count, one JSON line per round and thread count:
#
#   scripts/decode-roofline.sh [LUTRA_BINARY] [MODEL] [ROUNDS] [TIER] > results.jsonl
#
# weight_mb is what the step's products read (Σ over ops of ms/token × weight GB/s in the
# profile), weight_gbps that over the step's time, fraction that over the DRAM rate
# measured just before with the same threads. TIER is avx2 (LUTRA_MAX_ISA=avx2) or native.
set -euo pipefail
bin=${1:-target/release/lutra}
model=${2:-models/gemma-3-270m-q4_k_m.gguf}
rounds=${3:-5}
tier=${4:-avx2}
if [ "$tier" = avx2 ]; then cap=(env LUTRA_MAX_ISA=avx2); else cap=(env); fi
for round in $(seq "$rounds"); do
    for threads in 1 2; do
        dram=$("$bin" bench membw --threads "$threads" --samples 5 --json | sed -n 's/.*"gbps":\([0-9.]*\).*/\1/p')
        "${cap[@]}" "$bin" bench model -m "$model" --pp 1 --tg 64 --runs 3 -t "$threads" --profile 2>/dev/null |
            awk -v round="$round" -v threads="$threads" -v tier="$tier" -v dram="$dram" '
                / decode \(/ { on = 1; match($0, /[0-9.]+ ms\/token/); step = substr($0, RSTART, RLENGTH - 9) + 0; next }
                on && /^\| / && $2 != "op" && $0 !~ /---/ {
                    n = split($0, f, "|"); ms = f[3] + 0; gbps = f[n - 1] + 0
                    if (f[n - 1] ~ /[0-9]/) mb += ms * gbps
                }
                END {
                    printf "{\"round\":%d,\"threads\":%d,\"tier\":\"%s\",\"dram_gbps\":%.2f,\"step_ms\":%.3f,\"weight_mb\":%.1f,\"weight_gbps\":%.2f,\"fraction\":%.3f}\n",
                        round, threads, tier, dram, step, mb, mb / step, mb / step / dram
                }'
    done
done
