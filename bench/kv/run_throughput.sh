#!/usr/bin/env bash
# FlexGen's regime with KV eviction (issue 4): weights 100% on disk (streamed every step), the KV
# cache in RAM under a fixed cap, no batch size given -> each policy runs the largest batch that
# fits the cap. Full cache vs H2O at 20%, one process, so the ratio shares the machine's state.
# Usage: bench/kv/run_throughput.sh [OFFGEN_BINARY] [CPU_MEM] (defaults build/offgen, 1G).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-build/offgen}
cap=${2:-1G}
model=$(tools/get-model)
"$bin" bench --model "$model" --prompt-len 256 --gen-len 1024 --percent 0 0 0 100 100 0 \
  --cpu-mem "$cap" --weight-dtype bf16 --kv-policy full,h2o --kv-budget 0.2 --threads 2 \
  --offload-dir "${TMPDIR:-/tmp}" --json bench/kv/throughput.json | tee bench/kv/throughput.txt
