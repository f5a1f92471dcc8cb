#!/usr/bin/env python3
"""Render `lutra bench gemv --json` lines (stdin or files) as the Markdown table of BENCHMARKS.md."""
import fileinput
import json

print("| shape | regime | bits | thr | lutra µs | GMAC/s | GB/s | baseline µs | × baseline | llama.cpp type | llama.cpp µs | × llama.cpp | % DRAM |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for line in fileinput.input():
    r = json.loads(line)
    b, l, d = r.get("baseline_ns"), r.get("llamacpp_ns"), r.get("dram_gbps")
    base = f"{b / 1e3:.1f} | {b / r['ns']:.2f}" if b else "- | -"
    repack = " (repack)" if r.get("llamacpp_repack") else ""
    llama = f"{r['llamacpp_type']}{repack} | {l / 1e3:.1f} | {l / r['ns']:.2f}" if l else "- | - | -"
    dram = f"{100 * r['gbps'] / d:.0f}% of {d:.1f}" if d else "-"
    print(f"| {r['shape']} | {r['regime']} | {r['bits']} | {r['threads']} | {r['ns'] / 1e3:.1f} | {r['gmacs']:.0f} | {r['gbps']:.1f} | {base} | {llama} | {dram} |")
