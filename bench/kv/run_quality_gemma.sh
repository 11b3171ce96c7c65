#!/usr/bin/env bash
# KV-eviction quality on Gemma 3 270M (issue 18's table) through run_quality_gguf.sh. On this model
# the budget sizes the global layers' tables; the sliding-window layers keep their window of 512
# (docs/models.md). Writes gemma3_ppl_all.{json,png,txt} here.
# Usage: bench/kv/run_quality_gemma.sh [OFFGEN_BINARY] (default build/offgen).
set -euo pipefail
cd "$(dirname "$0")/../.."
exec bench/kv/run_quality_gguf.sh gemma3-270m bench/kv/gemma3_ppl_all 0.5,0.3,0.2,0.1 "${1:-build/offgen}"
