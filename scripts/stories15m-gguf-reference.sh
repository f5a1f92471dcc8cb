#!/usr/bin/env bash
# Makes stories15M's GGUF files with llama.cpp's own tools (built by
# scripts/llamacpp-tools.sh) and records their SHA-256 sums in
# tests/golden/stories15M-gguf.sha256, which the `stories_gguf` example (run by
# `cargo xtask models stories`) checks its own byte-for-byte copies against.
# Also prints llama-perplexity on each file (GPL-3, ctx 128, --no-repack: this VM's
# AMX/repack path crashes llama.cpp on Q8_0/Q4_0 with 288-wide rows).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(scripts/llamacpp-tools.sh)
OUT=${1:-$(mktemp -d)}
"$BIN/llama-convert-llama2c-to-ggml" --copy-vocab-from-model models/llama-vocab/ggml-vocab-llama-spm.gguf \
    --llama2c-model models/stories15M/model.bin --llama2c-output-model "$OUT/stories15M-f32.gguf" > "$OUT/convert.log" 2>&1
"$BIN/llama-quantize" "$OUT/stories15M-f32.gguf" "$OUT/stories15M-q8_0.gguf" Q8_0 > "$OUT/q8_0.log" 2>&1
"$BIN/llama-quantize" "$OUT/stories15M-f32.gguf" "$OUT/stories15M-q4_0.gguf" Q4_0 > "$OUT/q4_0.log" 2>&1
(cd "$OUT" && sha256sum stories15M-f32.gguf stories15M-q8_0.gguf stories15M-q4_0.gguf) > tests/golden/stories15M-gguf.sha256
cat tests/golden/stories15M-gguf.sha256
for f in f32 q8_0 q4_0; do
    "$BIN/llama-perplexity" -m "$OUT/stories15M-$f.gguf" -f /usr/share/common-licenses/GPL-3 -c 128 -t 2 --no-repack 2>&1 |
        grep "Final estimate" | sed "s/^/$f: /"
done
echo "files in $OUT"
