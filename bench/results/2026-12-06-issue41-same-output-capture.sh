#!/usr/bin/env bash
# usage: capture.sh LUTRA_BIN OUTDIR — greedy text of every model, 1 and 2 threads, plain and chat, + perplexity
set -u
B=$1; O=$2; M=/work/main/models; mkdir -p $O
run() { local name=$1; shift; "$B" "$@" > "$O/$name.out" 2> "$O/$name.err"; echo "rc=$?" >> "$O/$name.out"; }
for t in 1 2; do
  run stories4-t$t run -m $M/stories15M/model.bin --bits 4 -n 128 --temp 0 -t $t
  run stories8-t$t run -m $M/stories15M/model.bin --bits 8 -n 128 --temp 0 -t $t
  run storiesq4gguf-t$t run -m $M/stories15M/stories15M-q4_0.gguf -n 128 --temp 0 -t $t
  run storiesq8gguf-t$t run -m $M/stories15M/stories15M-q8_0.gguf -n 128 --temp 0 -t $t
  run gemma-t$t run -m $M/gemma-3-270m-q4_k_m.gguf -p "The capital of France is" -n 64 --temp 0 -t $t
  run gemmachat-t$t run -m $M/gemma-3-270m-q4_k_m.gguf --chat -p "Write a haiku about otters." -n 64 --temp 0 -t $t
  run gemmasampled-t$t run -m $M/gemma-3-270m-q4_k_m.gguf -p "Once upon a time" -n 48 --seed 7 -t $t
  for f in /work/ab/*.gguf; do b=$(basename $f .gguf); run $b-t$t run -m $f -p "The river otter" -n 24 --temp 0 -t $t; done
done
yes "The river otter swims and eats fish in the water. Otters are playful animals that live near rivers." | head -60 > $O/ppl.txt
run ppl-stories4 perplexity -m $M/stories15M/model.bin -f $O/ppl.txt -t 2
run ppl-gemma perplexity -m $M/gemma-3-270m-q4_k_m.gguf -f $O/ppl.txt -t 2 --ctx 256
run gemmachatpipe-t2 chat -m $M/gemma-3-270m-q4_k_m.gguf -n 40 --temp 0 -t 2 < <(printf "Hello there.\nName three rivers.\n")
run ppljson-stories4 perplexity -m $M/stories15M/model.bin -f $O/ppl.txt -t 2 --json
run ppljson-gemma perplexity -m $M/gemma-3-270m-q4_k_m.gguf -f $O/ppl.txt -t 1 --ctx 256 --json
