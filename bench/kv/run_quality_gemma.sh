#!/usr/bin/env bash
# KV-eviction quality on Gemma 3 270M (issue 18's table): run_quality.sh's scope-all protocol —
# teacher-forced perplexity of tokens 512..2047 of four Debian licence texts and top-1 agreement
# with the full cache, for every policy and budget — on the stock Q4_K_M GGUF in its native block
# formats. On this model the budget sizes the global layers' tables; the sliding-window layers
# keep their window of 512 (docs/models.md). Writes gemma3_ppl_all.{json,png,txt} here.
# Usage: bench/kv/run_quality_gemma.sh [OFFGEN_BINARY] (default build/offgen).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-build/offgen}
out=bench/kv
model=$(tools/get-model gemma3-270m)
texts=/usr/share/common-licenses/GPL-3,/usr/share/common-licenses/GFDL-1.3
texts+=,/usr/share/common-licenses/MPL-2.0,/usr/share/common-licenses/Apache-2.0
"$bin" eval ppl --model "$model" --weight-dtype native --text "$texts" --tokens 2048 --prefix 512 \
  --threads 2 --kv-policy h2o,tova,snapkv,sinks,window --kv-budget 0.5,0.3,0.2,0.1 \
  --json $out/gemma3_ppl_all.json --plot $out/gemma3_ppl_all.png | tee $out/gemma3_ppl_all.txt
