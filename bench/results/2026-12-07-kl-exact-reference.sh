#!/bin/bash
# Who is closer to the exact result: llama.cpp or lutra? Each requantized Qwen2.5-1.5B-shaped
# file is dequantized to F32 by llama-quantize (the same weights, as floats), and llama.cpp's
# F32 run of it (f32 activations: no Q8 rounding) is the reference. Against it: llama.cpp's
# own run of the quantized file (Q8-activation dot products), lutra with int8 tables, lutra
# with --residual-tables. GPL-3, ctx 512, one chunk (255 scored positions), 2 threads.
# Needs numpy (pip install numpy) to compare two llama.cpp logit files.
B=${B:-/root/.cache/lutra/llamacpp-tools-0.3.36/build/bin}
L=${L:-target/release/lutra}
cd "$(dirname "$0")/../.."; OUT=${OUT:-/tmp/lutra-kl-exact}; mkdir -p $OUT
compare() { python3 - "$1" "$2" <<'PY'
import sys, struct, numpy as np
def load(p):
    b = open(p, 'rb').read(); assert b[:8] == b'_logits_'
    ctx, vocab, nch = struct.unpack('<3i', b[8:20]); off = 20 + 4 * ctx * nch
    rl = 2 * ((vocab + 1) // 2) + 4; n = (ctx - 1 - ctx // 2) * nch
    r = np.frombuffer(b[off:off + n * rl * 2], dtype=np.uint16).reshape(n, rl)
    scale = r[:, 0:2].copy().view(np.float32)[:, 0]; lo = r[:, 2:4].copy().view(np.float32)[:, 0]
    return scale[:, None] * r[:, 4:4 + vocab].astype(np.float32) + lo[:, None]
ref, other = load(sys.argv[1]), load(sys.argv[2])
top = ref.argmax(1); s = np.sort(ref, 1); decisive = (s[:, -1] - s[:, -2]) >= 0.1
kl = (np.exp(ref) * (ref - other) * (ref > -16)).sum(1)
print('{"kld":%.6f,"positions":%d,"same_top":%d,"decisive":%d,"decisive_differ":%d}' % (
    kl.mean(), len(top), (other.argmax(1) == top).sum(), decisive.sum(), (decisive & (other.argmax(1) != top)).sum()))
PY
}
for f in ${TYPES:-q1_0 q2_0 tq1_0 q2_k q4_k_m}; do
  m=models/shapes/qwen2.5-1.5b-$f.gguf
  $B/llama-quantize --allow-requantize $m $OUT/$f-f32.gguf F32 > /dev/null 2>&1
  ppl() { $B/llama-perplexity -m $1 -f /usr/share/common-licenses/GPL-3 -c 512 --chunks 1 -t 2 --kl-divergence-base $2 > $2.log 2>&1; }
  ppl $OUT/$f-f32.gguf $OUT/$f-f32.kld && rm $OUT/$f-f32.gguf
  [ -f $OUT/$f.kld ] || ppl $m $OUT/$f.kld
  echo "{\"file\":\"$f\",\"engine\":\"llama.cpp\",\"result\":$(compare $OUT/$f-f32.kld $OUT/$f.kld)}"
  for tables in "" --residual-tables; do
    echo "{\"file\":\"$f\",\"engine\":\"lutra${tables:+ $tables}\",\"result\":$(LUTRA_IMPORT_CACHE=off $L perplexity -m $m --kl-divergence-base $OUT/$f-f32.kld -t 2 --json $tables 2>/dev/null)}"
  done
done
