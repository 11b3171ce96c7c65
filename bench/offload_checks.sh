#!/usr/bin/env bash
# The offloading figures of bench/RESULTS.md in one run (ratios are what count; this machine is
# noisy): fio's sequential O_DIRECT read on the offload dir, an I/O-bound run (weights 100% on
# disk, small batch) for the achieved read rate, and all-RAM vs weights-100%-on-disk at a batch
# large enough to amortise the weight reads, with lane busy times and overlap efficiency.
# Usage: bench/offload_checks.sh [MODEL] [OFFLOAD_DIR]   (writes JSON files into out/offload/)
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-$(tools/get-model)}
dir=${2:-${TMPDIR:-/tmp}/offgen-bench}
out=out/offload
mkdir -p "$dir" "$out"
bin=build/offgen
echo "== $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD) load $(cut -d' ' -f1-3 /proc/loadavg)"

if command -v fio >/dev/null; then
  fio --name=seq --rw=read --direct=1 --bs=4M --size=1G --ioengine=io_uring --iodepth=16 \
    --directory="$dir" --output-format=json > "$out/fio.json"
  rm -f "$dir"/seq.*
  python3 -c "import json;j=json.load(open('$out/fio.json'));print('fio seq read O_DIRECT: %.2f GB/s'%(j['jobs'][0]['read']['bw_bytes']/1e9))"
else
  echo "fio not installed (apt-get install fio): skipping the fio reference"
fi

run() {  # run NAME ARGS...
  local name=$1; shift
  "$bin" bench --model "$model" --offload-dir "$dir" --json "$out/$name.json" "$@" > "$out/$name.txt"
  python3 - "$out/$name.json" "$name" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); l = j["lane_busy_seconds"]; io = j["io_bytes"]
wall = j["prefill_seconds"] + j["decode_seconds"]
rate = io["disk_read"] / l["load"] / 1e9 if l["load"] > 0 else 0
print(f"{sys.argv[2]:<22} batch {j['batch_size']:>4}  total {j['total_throughput']:8.1f} tok/s  "
      f"decode {j['decode_throughput']:8.1f} tok/s  read {io['disk_read']/1e9:6.2f} GB "
      f"(load lane {rate:4.2f} GB/s, over the run {io['disk_read']/wall/1e9:4.2f} GB/s)  "
      f"busy load/compute/store {l['load']:.1f}/{l['compute']:.1f}/{l['store']:.1f} s  "
      f"overlap efficiency {j['overlap_efficiency']:.2f}")
PY
}

# I/O-bound: every step reads all weights for a handful of sequences.
run io_bound --prompt-len 32 --gen-len 16 --gpu-batch-size 4 --percent 0 0 100 0 100 0
# Amortised: the same model, all in RAM vs weights 100% on disk, 512 sequences per block.
big=(--prompt-len 128 --gen-len 32 --gpu-batch-size 64 --num-gpu-batches 8 --no-warmup)
run ram_512 "${big[@]}" --percent 100 0 100 0 100 0
run disk_weights_512 "${big[@]}" --percent 0 0 100 0 100 0
python3 - "$out" <<'PY'
import json, sys
a = json.load(open(sys.argv[1] + "/ram_512.json")); b = json.load(open(sys.argv[1] + "/disk_weights_512.json"))
print(f"weights 100% on disk / all RAM, total throughput: {b['total_throughput']/a['total_throughput']:.3f}")
PY
