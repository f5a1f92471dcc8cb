#!/usr/bin/env bash
# Peak summed PSS (MB) of all Chromium processes while the page loads and runs MODEL: bench/results/2026-12-07-page-pss.sh qwen|gemma
set -u; here=$(dirname "$0"); peak=0
node "$here/2026-12-07-page-pss.mjs" "$1" & job=$!
while kill -0 $job 2>/dev/null; do
  s=0; for p in $(pgrep -f chromium); do v=$(awk '/^Pss:/ {print $2}' /proc/$p/smaps_rollup 2>/dev/null); s=$((s + ${v:-0})); done
  s=$((s / 1024)); [ $s -gt $peak ] && peak=$s; sleep 0.2
done
echo "peak Chromium PSS (all processes): $peak MB"
