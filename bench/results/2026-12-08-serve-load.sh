#!/usr/bin/env bash
# lutra serve and llama-server (scripts/llamacpp-tools.sh) under the same load, alternated:
# 8 concurrent OpenAI-client streams x 25 chat requests, 4 slots (--parallel 4 / -np 4, 4096
# positions each), 32 tokens each, Qwen2.5-Coder-0.5B-Instruct Q4_K_M, 2 threads. One JSON line
# per run, prefixed with the server's name.   bench/results/2026-12-08-serve-load.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL=models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
PY=models/.venv/bin/python
LLAMA_BIN=$(scripts/llamacpp-tools.sh)
for round in $(seq "${1:-5}"); do
  echo -n "lutra "
  $PY scripts/openai_client_check.py target/release/lutra $MODEL --load 8x25 --chat --parallel 4 --max-tokens 32 \
    --ctx 4096 --threads 2 --json | grep '^{'
  "$LLAMA_BIN/llama-server" -m $MODEL -np 4 -c 16384 -t 2 --host 127.0.0.1 --port 18090 > /tmp/llama-server.log 2>&1 &
  pid=$!
  until curl -sf http://127.0.0.1:18090/health > /dev/null; do sleep 0.5; done
  echo -n "llama-server "
  $PY scripts/openai_client_check.py - - --external http://127.0.0.1:18090/v1 --load 8x25 --chat --max-tokens 32 --json | grep '^{'
  kill $pid; wait $pid 2>/dev/null || true
done
