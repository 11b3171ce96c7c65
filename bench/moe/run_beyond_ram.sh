#!/usr/bin/env bash
# offgen (weights on disk) against llama.cpp (mmap) on one GGUF file larger than the RAM both may
# use: each runs in a cgroup (v1 memory controller) limited to LIMIT, page cache included, with
# the caches dropped before it. Records wall time, peak RSS, the limit's peak use and the bytes
# the disk read system-wide during each run (nothing else should run).
# Usage (root): bench/moe/run_beyond_ram.sh GGUF OUT_DIR [LIMIT=16G] [PROMPTS=256]
#   offgen: 4 batches of PROMPTS/4, prompt 32, gen 8, one prefill forward, --cpu-mem 7G.
#   llama.cpp: llama-batched-bench with -npl PROMPTS -npp 32 -ntg 7, -b/-ub 8192 (one prefill
#   pass) and --no-repack: its repacked weights are anonymous memory, which cannot page, so beyond
#   RAM it runs on the mmap'd file as stored. Its per-sequence caches (the default) were faster
#   than one unified cache (-kvu; pass it in LLAMA_EXTRA to compare). LLAMA_BIN overrides its
#   binary directory (default: the build bench/peers/run_peers.py makes).
set -euo pipefail
cd "$(dirname "$0")/../.."
gguf=${1:?GGUF file}
out=${2:?output directory}
limit=${3:-16G}
prompts=${4:-256}
llama=${LLAMA_BIN:-$HOME/.cache/offgen/peers/build-0.3.36/bin}
src=$(df --output=source "$(dirname "$gguf")" | tail -1)
dev=$(lsblk -no PKNAME "$src" 2>/dev/null | head -1)  # the whole disk of a partition
dev=${dev:-$(basename "$src")}
cg=/sys/fs/cgroup/memory/offgen_beyond_ram
mkdir -p "$out" "$cg" /tmp/offgen_beyond_ram_off
echo "$limit" > "$cg/memory.limit_in_bytes"
sectors() { awk '{print $3}' "/sys/block/$dev/stat"; }
run_limited() {  # NAME COMMAND...
  local name=$1; shift
  sync; echo 3 > /proc/sys/vm/drop_caches; sleep 2
  echo 0 > "$cg/memory.max_usage_in_bytes"
  local s0 t0 rc=0
  s0=$(sectors); t0=$(date +%s.%N)
  echo "== $name: start $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/log"
  sh -c 'echo $$ > "$0/cgroup.procs"; shift; exec /usr/bin/time -v "$@"' "$cg" - "$@" \
    > "$out/$name.out" 2>&1 || rc=$?
  echo "== $name: rc $rc, wall $(echo "$(date +%s.%N) - $t0" | bc) s, disk read" \
       "$(( ($(sectors) - s0) * 512 )) bytes, cgroup peak $(cat "$cg/memory.max_usage_in_bytes")," \
       "load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/log"
  grep -E "Maximum resident" "$out/$name.out" | tee -a "$out/log"
}
run_limited offgen build/offgen bench --model "$gguf" --threads 2 --percent 0 0 0 100 0 100 \
  --cpu-mem 7G --batch-size $((prompts / 4)) --num-gpu-batches 4 --prompt-len 32 --gen-len 8 \
  --prefill-chunk $((prompts * 32)) --no-warmup --offload-dir /tmp/offgen_beyond_ram_off \
  --json "$out/offgen.json"
run_limited llamacpp "$llama/llama-batched-bench" -m "$gguf" -c $((prompts * 40)) -b 8192 -ub 8192 \
  -npp 32 -ntg 7 -npl "$prompts" -t 2 -tb 2 --no-repack ${LLAMA_EXTRA:-}
