#!/usr/bin/env bash
# KV-eviction quality of a stock GGUF model in its native block formats: run_quality.sh's scope-all
# protocol — teacher-forced perplexity of tokens 512..2047 of four Debian licence texts and top-1
# agreement with the full cache, for every policy and budget. Writes OUT.{json,png,txt}.
# Usage: bench/kv/run_quality_gguf.sh MODEL_NAME OUT [BUDGETS] [OFFGEN_BINARY]
#   MODEL_NAME: a name tools/get-model knows (gemma3-270m, qwen2.5-coder-1.5b, ...)
#   OUT: path prefix of the outputs (e.g. bench/kv/qwen15_ppl_all)
#   BUDGETS: comma-separated fractions (default 0.5,0.3,0.2,0.1)
set -euo pipefail
cd "$(dirname "$0")/../.."
name=${1:?model name}
out=${2:?output prefix}
budgets=${3:-0.5,0.3,0.2,0.1}
bin=${4:-build/offgen}
model=$(tools/get-model "$name")
texts=/usr/share/common-licenses/GPL-3,/usr/share/common-licenses/GFDL-1.3
texts+=,/usr/share/common-licenses/MPL-2.0,/usr/share/common-licenses/Apache-2.0
"$bin" eval ppl --model "$model" --weight-dtype native --text "$texts" --tokens 2048 --prefix 512 \
  --threads 2 --kv-policy h2o,tova,snapkv,sinks,window --kv-budget "$budgets" \
  --json "$out.json" --plot "$out.png" | tee "$out.txt"
