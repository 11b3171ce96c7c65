#!/usr/bin/env bash
# KV-eviction quality on Debian's licence texts (issue 4's table): teacher-forced perplexity of
# tokens 512..2047 of each text and top-1 agreement with the full cache, for every policy and
# budget, in both budget scopes. Writes ppl_{all,prompt}.{json,png,txt} next to this script.
# The kvpress curves for the prompt scope come from bench/peers/kvpress_ppl.py (same protocol).
# Usage: bench/kv/run_quality.sh [OFFGEN_BINARY] (default build/offgen); ~45 min on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-build/offgen}
out=bench/kv
model=$(tools/get-model)
texts=/usr/share/common-licenses/GPL-3,/usr/share/common-licenses/GFDL-1.3
texts+=,/usr/share/common-licenses/MPL-2.0,/usr/share/common-licenses/Apache-2.0
common=(--model "$model" --text "$texts" --tokens 2048 --prefix 512 --threads 2)
# scope all: the budget bounds every step (prefill compaction + per-token eviction)
"$bin" eval ppl "${common[@]}" --kv-policy h2o,window,sinks,tova,snapkv \
  --kv-budget 1,0.5,0.3,0.2,0.1 --json $out/ppl_all.json --plot $out/ppl_all.png | tee $out/ppl_all.txt
# scope prompt: the 512-token prefix is compacted once, the scored tokens are added (kvpress's regime)
"$bin" eval ppl "${common[@]}" --scope prompt --kv-policy h2o,sinks,snapkv \
  --kv-budget 0.5,0.3,0.2,0.1 --json $out/ppl_prompt.json --plot $out/ppl_prompt.png | tee $out/ppl_prompt.txt
