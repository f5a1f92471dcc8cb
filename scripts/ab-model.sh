#!/usr/bin/env bash
# Two lutra builds on one model, in interleaved rounds (each build's `bench model --json`
# in turn, on the AVX2 tier and on the host's best), one JSON line per build, tier,
# round and thread count, tagged with the build's label:
#
#   scripts/ab-model.sh BEFORE_BINARY AFTER_BINARY [MODEL] [ROUNDS] > results.jsonl
#
# Ratios belong to the same round; take their median over the rounds.
set -euo pipefail
before=$1 after=$2
model=${3:-models/gemma-3-270m-q4_k_m.gguf}
rounds=${4:-3}
for round in $(seq "$rounds"); do
    for tier in avx2 native; do
        for build in before after; do
            bin=$before; [ "$build" = after ] && bin=$after
            if [ "$tier" = avx2 ]; then cap=(env LUTRA_MAX_ISA=avx2); else cap=(env); fi
            "${cap[@]}" "$bin" bench model -m "$model" --pp 256 --tg 128 --runs 5 -t 1,2 --json 2>/dev/null |
                sed "s/^{/{\"build\":\"$build\",\"tier\":\"$tier\",\"round\":$round,/"
        done
    done
done
