#!/usr/bin/env bash
# lutra-pi (x86 build of the same code, its arena sized for budget::PI_CLASS) on each packed
# model at 4096 positions (stories15M: its 256): the arena's import and session figures
# and the process's peak RSS. Usage: bench/results/2026-12-07-pi-class.sh FILE.lutra...
set -euo pipefail
pi=${LUTRA_PI:-target/release/lutra-pi}
printf '| file | file MiB | positions | import peak / bound MiB | session used / budget MiB | KV cache MiB | arena MiB | peak RSS MiB |\n|---|---|---|---|---|---|---|---|\n'
for f in "$@"; do
  ctx=4096; case "$f" in *stories*) ctx=256;; esac
  err=$( { /usr/bin/time -f 'RSS %M' "$pi" "$f" -p "Hello" -n 16 --temp 0 -c $ctx >/dev/null; } 2>&1 )
  python3 - "$f" "$ctx" "$err" <<'PY'
import os, re, sys
f, ctx, err = sys.argv[1], sys.argv[2], sys.argv[3]
mib = lambda b: b / 2**20
g = lambda pat: re.search(pat, err, re.M).group(1)
cells = [os.path.basename(f), "%.1f" % mib(os.path.getsize(f)), ctx,
         "%.2f / %.2f" % (mib(int(g(r"import peak (\d+)"))), mib(int(g(r"bound (\d+) bytes")))),
         "%s / %s" % (g(r"session ([\d.]+) MiB"), g(r"of its ([\d.]+) MiB budget")),
         g(r"KV cache ([\d.]+) MiB"), g(r"arena \d+ bytes \(([\d.]+) MiB"),
         "%.1f" % (int(g(r"^RSS (\d+)$")) / 1024)]
print("| " + " | ".join(cells) + " |")
PY
done
