#!/bin/bash
# The 70B-class job of 256 prompts of 32 + 32 from disk, offgen (`--policy auto --cpu-mem 16G`)
# and then llama.cpp (mmap, its best flags that fit: run_ladder.py's llama_flags) on the same
# GGUF file, in one run: the GGUF is written first, the planner's compute figures measured
# (`offgen plan`), and the page cache dropped before each system (needs root). About 2.5 hours on
# two cores; run it on a quiet machine and nothing beside it.
#   bench/ladder/run_70b_onerun.sh OFFLOAD_DIR LLAMA_BIN_DIR [OUT_PREFIX]
# e.g. bench/ladder/run_70b_onerun.sh /var/tmp/ladder ~/.cache/offgen/peers/build-0.3.36/bin
set -euxo pipefail
cd "$(dirname "$0")/../.."
dir=$1 llama_bin=$2 out=${3:-bench/ladder/ladder_70b_256_onerun}
gguf=$dir/llama-70b-q4_k.gguf
mkdir -p "$dir"
date -u; cat /proc/loadavg; git log --oneline -1
[ -f "$gguf" ] || build/bench/dummy_gguf --model dummy:llama-70b:q4_k --out "$gguf"
build/offgen plan --model "$gguf" --cpu-mem 16G --prompt-len 32 --gen-len 32 --threads 2 \
    --offload-dir "$dir" > "${out}_plan.txt" 2>&1
common=(--offload-dir "$dir" --presets llama-70b --prompts 256 --prompt-len 32 --gen-len 32
        --modes auto --keep-gguf --fio-gib 0 --json "$out.json")
sync; echo 3 > /proc/sys/vm/drop_caches
date -u; cat /proc/loadavg
python3 bench/ladder/run_ladder.py "${common[@]}" --llama-sizes ""
sync; echo 3 > /proc/sys/vm/drop_caches
date -u; cat /proc/loadavg
python3 bench/ladder/run_ladder.py "${common[@]}" --llama-sizes llama-70b --llama-bin "$llama_bin" \
    --resume --md "$out.md"
date -u; cat /proc/loadavg
