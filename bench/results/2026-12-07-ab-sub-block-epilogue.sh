cd /work/main
for r in 1 2 3; do
 for bin in lutra-1080791 lutra-subregs; do
  for tier in native avx2; do
   for f in q3_k_s q6_k q4_k_m q2_k; do
    if [ $tier = avx2 ]; then export LUTRA_MAX_ISA=avx2; else unset LUTRA_MAX_ISA; fi
    v=$(/work/ab/$bin bench model -m models/shapes/qwen2.5-1.5b-$f.gguf -t 1 --pp 16 --tg 32 --runs 3 --json 2>/dev/null | grep -o '"tg_tps":[0-9.]*' | cut -d: -f2)
    echo "$r $bin $tier $f $v"
   done
  done
 done
done
