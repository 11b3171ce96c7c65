#!/usr/bin/env bash
# The KV cache's storage types measured against the fp32 cache in one run (run on a quiet machine):
# decode tok/s at batch 64, the largest batch under --cpu-mem, perplexity and next-token KL on
# held-out text, and eviction during chunked prefill. Writes JSON per point and a summary table.
#   bench/kv/run_dtype.sh OUT_DIR [MODEL...]   (default: the default SmolLM2 GGUF as Q4_0)
# Env: DTYPES (default "f32 bf16 f16 q8_0 q4g64"), PARTS (default "decode batch ppl chunk"; "long"
#      adds the long-context part below), WEIGHT_DTYPE (default q4_0 for the default model, native
#      for others), TEXT (held-out text).
# The "long" part: a 7B-class model at 4K context (LONG_MODEL, default dummy:llama-7b:q4_k): per
# dtype the batch-1 decode over a 4064-token prompt (gen 32) and the largest batch that the planner
# fits under LONG_CAP (default 16G, weights and KV in RAM); with LLAMA_BIN (llama.cpp's bin
# directory) also llama-batched-bench on the same weights written as GGUF (dummy_gguf) with its
# cache types f32, f16 and q8_0 (-fa on).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: bench/kv/run_dtype.sh OUT_DIR [MODEL...]}
shift
mkdir -p "$out"
bin=build/offgen
dtypes=${DTYPES:-f32 bf16 f16 q8_0 q4g64}
parts=${PARTS:-decode batch ppl chunk}
text=${TEXT:-/usr/share/common-licenses/GPL-3}
models=("$@")
((${#models[@]})) || models=("$(tools/get-model)")
has() { [[ " $parts " == *" $1 "* ]]; }
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$out/load.txt"
for m in "${models[@]}"; do
  tag=$(basename "$m" .gguf)
  wd=${WEIGHT_DTYPE:-$([[ "$m" == "$(tools/get-model)" ]] && echo q4_0 || echo native)}
  for d in $dtypes; do
    if has decode; then  # decode tok/s at batch 64, prompt 512, gen 32
      $bin bench --model "$m" --weight-dtype "$wd" --kv-dtype "$d" --batch-size 64 \
        --prompt-len 512 --gen-len 32 --no-warmup --json "$out/decode_${tag}_$d.json" >/dev/null
    fi
    if has batch; then  # the largest batch admission fits under --cpu-mem 1G (weights and KV in RAM)
      $bin bench --model "$m" --weight-dtype "$wd" --kv-dtype "$d" --percent 100 0 0 100 100 0 \
        --cpu-mem 1G --prompt-len 512 --gen-len 8 --no-warmup --json "$out/batch_${tag}_$d.json" >/dev/null
    fi
  done
  if has batch; then  # H2O at budget 0.2 with q8_0 under the same cap, run
    $bin bench --model "$m" --weight-dtype "$wd" --kv-dtype q8_0 --kv-policy h2o --kv-budget 0.2 \
      --percent 100 0 0 100 100 0 --cpu-mem 1G --prompt-len 512 --gen-len 8 --no-warmup \
      --json "$out/batch_${tag}_q8_0_h2o.json" >/dev/null
  fi
  if has ppl; then  # perplexity and KL against the fp32 cache, 2048 tokens, 512 prefilled
    for d in $dtypes; do
      [[ $d == f32 ]] && continue
      $bin eval ppl --model "$m" --weight-dtype "$wd" --kv-dtype "$d" --kv-reference f32 \
        --text "$text" --tokens 2048 --prefix 512 --kv-policy full --json "$out/ppl_${tag}_$d.json" >/dev/null
    done
  fi
  if has chunk; then  # 16 x 1024-token prompts, H2O 0.2: eviction per chunk of 128 vs whole prompts
    for c in 128 1024; do
      $bin bench --model "$m" --weight-dtype "$wd" --batch-size 16 --prompt-len 1024 --gen-len 32 \
        --kv-policy h2o --kv-budget 0.2 --prefill-chunk $c --no-warmup --json "$out/chunk_${tag}_$c.json" >/dev/null
    done
  fi
done
if has long; then
  lm=${LONG_MODEL:-dummy:llama-7b:q4_k}
  ltag=$(echo "$lm" | tr ':/' '__')
  cap=${LONG_CAP:-16G}
  for d in $dtypes; do
    $bin bench --model "$lm" --kv-dtype "$d" --batch-size 1 --prompt-len 4064 --gen-len 32 \
      --no-warmup --json "$out/long_decode_${ltag}_$d.json" >/dev/null
    $bin plan --model "$lm" --kv-dtype "$d" --policy auto --percent 100 0 0 100 100 0 \
      --cpu-mem "$cap" --prompt-len 4064 --gen-len 32 --json "$out/long_plan_${ltag}_$d.json" >/dev/null
  done
  if [[ -n "${LLAMA_BIN:-}" ]]; then
    gguf=$out/${ltag}.gguf
    [[ -f "$gguf" ]] || build/bench/dummy_gguf --model "$lm" --out "$gguf"
    for t in f32 f16 q8_0; do
      "$LLAMA_BIN/llama-batched-bench" -m "$gguf" -c 4096 -b 2048 -ub 512 -npp 4064 -ntg 32 \
        -npl 1 -t 2 -tb 2 -fa on -ctk $t -ctv $t >"$out/long_llamacpp_${ltag}_$t.txt" 2>&1
    done
  fi
fi
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/load.txt"
python3 - "$out" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
def load(p):
    return json.load(open(p)) if os.path.exists(p) else None
rows = []
for p in sorted(glob.glob(f"{out}/decode_*.json")):
    d = load(p); rows.append(("decode", os.path.basename(p), d["kv_dtype"], d["batch_size"], f'{d["decode_throughput"]:.1f} decode tok/s', f'{d["total_throughput"]:.1f} total tok/s'))
for p in sorted(glob.glob(f"{out}/batch_*.json")):
    d = load(p); rows.append(("batch", os.path.basename(p), d["kv_dtype"], d["batch_size"], d["kv_policy"], f'{d["kv_bytes_per_seq"]} B/seq', f'peak anon {d["peak_anon_bytes"]/2**20:.0f} MiB'))
for p in sorted(glob.glob(f"{out}/chunk_*.json")):
    d = load(p); rows.append(("chunk", os.path.basename(p), d["prefill_chunk"], f'peak kv tokens/seq {d["peak_kv_tokens_per_seq"]}', f'{d["total_throughput"]:.1f} total tok/s'))
for p in sorted(glob.glob(f"{out}/long_decode_*.json")):
    d = load(p); rows.append(("long", os.path.basename(p), d["kv_dtype"], f'{d["decode_throughput"]:.2f} decode tok/s', f'{d["prefill_throughput"]:.1f} prefill tok/s', f'{d["kv_bytes_per_seq"]} B/seq'))
for p in sorted(glob.glob(f"{out}/long_plan_*.json")):
    d = load(p); rows.append(("long-plan", os.path.basename(p), d["kv_dtype"], f'largest batch {d["batch_size"]}', d["binding"]))
for p in sorted(glob.glob(f"{out}/long_llamacpp_*.txt")):
    rows += [("long-llama.cpp", os.path.basename(p), l.strip()) for l in open(p) if l.lstrip().startswith("|")]
for p in sorted(glob.glob(f"{out}/ppl_*.json")):
    d = load(p)
    for r in (d if isinstance(d, list) else d.get("rows", [])):
        if r.get("text") in ("all", None):
            rows.append(("ppl", os.path.basename(p), json.dumps(r)[:300]))
with open(f"{out}/summary.txt", "w") as f:
    for r in rows:
        print(*r, sep=" | "); print(*r, sep=" | ", file=f)
PY
