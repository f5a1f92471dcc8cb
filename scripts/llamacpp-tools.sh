#!/usr/bin/env bash
# Builds llama.cpp's own command-line tools from the PyPI llama-cpp-python sdist (the
# llama.cpp it vendors), once, into a cache outside the repo's target dir, and prints the
# directory holding the binaries. Used to make reference files (stories15M as a GGUF via
# llama.cpp's llama2.c converter, its quantizations) and reference figures
# (llama-perplexity, llama-bench, llama-server under `lutra serve`'s load). CI never runs this: its
# outputs are checked in.
#
#   scripts/llamacpp-tools.sh            # build (≈ 10 min on 2 cores) or reuse; prints the bin dir
#   LUTRA_LLAMACPP_TOOLS=DIR scripts/...  # cache somewhere else
#   LUTRA_LLAMACPP_TIER=avx2 scripts/...  # ggml's AVX2 kernels only (no AVX-512), its own cache:
#                                         # the tier most CPUs have, on a host that has more
set -euo pipefail
VERSION=0.3.36
CMAKE_VERSION=3.31.6
TIER=${LUTRA_LLAMACPP_TIER:-native}
case "$TIER" in
    native) GGML_FLAGS=(-DGGML_NATIVE=ON) ;;
    avx2) GGML_FLAGS=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON) ;;
    *) echo "LUTRA_LLAMACPP_TIER must be native or avx2, not $TIER" >&2; exit 2 ;;
esac
CACHE=${LUTRA_LLAMACPP_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/lutra/llamacpp-tools-$VERSION}
[ "$TIER" = native ] || CACHE=$CACHE-$TIER
TARGETS=(llama-convert-llama2c-to-ggml llama-quantize llama-perplexity llama-bench llama-tokenize llama-server)
BIN=$CACHE/build/bin
if [ -n "$(for t in "${TARGETS[@]}"; do [ -x "$BIN/$t" ] || echo missing; done)" ]; then
    mkdir -p "$CACHE"
    if [ ! -d "$CACHE/src" ]; then
        python3 -m pip download --quiet --no-deps --no-binary llama-cpp-python --dest "$CACHE/sdist" "llama-cpp-python==$VERSION" >&2
        mkdir -p "$CACHE/src"
        tar xzf "$CACHE/sdist/llama_cpp_python-$VERSION.tar.gz" -C "$CACHE/src" --strip-components=3 \
            "llama_cpp_python-$VERSION/vendor/llama.cpp"
    fi
    if ! command -v cmake > /dev/null; then
        # no system cmake: PyPI's, pinned, in the cache (a fresh machine has none)
        [ -x "$CACHE/cmake/bin/cmake" ] || { python3 -m venv "$CACHE/cmake" &&
            "$CACHE/cmake/bin/pip" install --quiet "cmake==$CMAKE_VERSION" >&2; }
        PATH="$CACHE/cmake/bin:$PATH"
    fi
    cmake -S "$CACHE/src" -B "$CACHE/build" -DCMAKE_BUILD_TYPE=Release "${GGML_FLAGS[@]}" \
        -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=ON \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF >&2
    cmake --build "$CACHE/build" --config Release -j "$(nproc)" --target "${TARGETS[@]}" >&2
fi
echo "$BIN"
