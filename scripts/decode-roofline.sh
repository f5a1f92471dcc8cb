#!/usr/bin/env bash
# Decode against the DRAM roofline (issue #17 item 4): in alternated rounds, the DRAM read
# rate (`lutra bench membw`) and one decode step's profile (`lutra bench model --profile
# --json`) at each thread count, one JSON line per round and thread count:
#
#   scripts/decode-roofline.sh [LUTRA_BINARY] [MODEL] [ROUNDS] [TIER] > results.jsonl
#
# weight_mb is what the step's products read (the profile's weight_bytes over its decode
# tokens), step_ms the sum of its ops' ms_per_token, weight_gbps the one over the other,
# fraction that over the DRAM rate measured just before with the same threads. TIER is
# avx2 (LUTRA_MAX_ISA=avx2) or native.
set -euo pipefail
bin=${1:-target/release/lutra}
model=${2:-models/gemma-3-270m-q4_k_m.gguf}
rounds=${3:-5}
tier=${4:-avx2}
tokens=64
if [ "$tier" = avx2 ]; then cap=(env LUTRA_MAX_ISA=avx2); else cap=(env); fi
for round in $(seq "$rounds"); do
    for threads in 1 2; do
        dram=$("$bin" bench membw --threads "$threads" --samples 5 --json | sed -n 's/.*"gbps":\([0-9.]*\).*/\1/p')
        "${cap[@]}" "$bin" bench model -m "$model" --pp 1 --tg "$tokens" --runs 3 -t "$threads" --profile --json 2>/dev/null |
            awk -v round="$round" -v threads="$threads" -v tier="$tier" -v dram="$dram" -v tokens="$tokens" '
                function field(name) { match($0, "\"" name "\":[0-9.]+"); return substr($0, RSTART + length(name) + 3, RLENGTH - length(name) - 3) + 0 }
                /"phase":"decode"/ { step += field("ms_per_token"); bytes += field("weight_bytes") }
                END {
                    mb = bytes / tokens / 1e6
                    printf "{\"round\":%d,\"threads\":%d,\"tier\":\"%s\",\"dram_gbps\":%.2f,\"step_ms\":%.3f,\"weight_mb\":%.1f,\"weight_gbps\":%.2f,\"fraction\":%.3f}\n",
                        round, threads, tier, dram, step, mb, mb / step, mb / step / dram
                }'
    done
done
