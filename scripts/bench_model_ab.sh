#!/usr/bin/env bash
# Two lutra builds, same models, alternating rounds of `lutra bench model` (each round's
# figure a median of 5 runs): did a change move decode or prefill speed?
#   scripts/bench_model_ab.sh BEFORE_BINARY AFTER_BINARY [ROUNDS] [THREADS]
# Prints one JSON line per round and build, then the medians over rounds.
set -euo pipefail
before=$1 after=$2 rounds=${3:-5} threads=${4:-1}
cd "$(dirname "$0")/.."
for r in $(seq "$rounds"); do
  for b in before after; do
    bin=${!b}
    echo "round $r $b gemma: $($bin bench model -m models/gemma-3-270m-q4_k_m.gguf -t "$threads" --pp 256 --tg 128 --runs 5 --json 2>/dev/null)"
    echo "round $r $b stories: $($bin bench model -m models/stories15M/model.bin -t "$threads" --pp 128 --tg 128 --runs 5 --json 2>/dev/null)"
  done
done | tee /dev/stderr | python3 -c '
import json, re, statistics as st, sys
d = {}
for line in sys.stdin:
    m = re.match(r"round \d+ (\w+) (\w+): (\{.*\})", line)
    if m:
        j = json.loads(m.group(3))
        d.setdefault((m.group(2), m.group(1)), []).append((j["pp_tps"], j["tg_tps"]))
for (model, build), v in sorted(d.items()):
    pp, tg = [x[0] for x in v], [x[1] for x in v]
    print(f"{model:8} {build:6} pp median {st.median(pp):8.1f} ({min(pp):.1f}-{max(pp):.1f})  tg median {st.median(tg):7.1f} ({min(tg):.1f}-{max(tg):.1f})  rounds {len(v)}")
'
