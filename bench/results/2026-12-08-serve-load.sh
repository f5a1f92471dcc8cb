#!/usr/bin/env bash
# lutra serve under load: 8 concurrent OpenAI-client streams x 25 chat requests, --parallel 4,
# 32 tokens each, Qwen2.5-Coder-0.5B-Instruct Q4_K_M, 2 threads; one JSON line per run.
set -euo pipefail
cd "$(dirname "$0")/../.."
for run in 1 2 3 4 5; do
  models/.venv/bin/python scripts/openai_client_check.py target/release/lutra \
    models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf --load 8x25 --chat --parallel 4 --max-tokens 32 --ctx 4096 --json \
    | grep '^{'
done
