#!/usr/bin/env bash
# End-to-end checks of KV eviction from the CLI: `offgen eval ppl` rows/table/plot and its input
# errors, `offgen bench` fitting the largest batch to a RAM cap per KV policy in one run, and
# `offgen generate` under a KV policy (flags and [kv] TOML).
# Usage: test_cli_kv.sh OFFGEN_BINARY MODEL_PATH (exit 77 = skipped when the model is absent).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

text=/usr/share/common-licenses/Apache-2.0
"$bin" eval ppl --model "$model" --text "$text" --tokens 96 --prefix 48 --kv-policy h2o,window \
  --kv-budget 0.5,0.25 --json "$work/eval.json" --plot "$work/eval.png" > "$work/eval.txt" 2> "$work/eval.err"
rc=$?
check "eval ppl exits 0 (got $rc)" test "$rc" -eq 0
check "eval ppl prints the table" grep -q "^h2o" "$work/eval.txt"
check "eval ppl writes a PNG" bash -c "head -c 8 '$work/eval.png' | od -An -c | grep -q 'P   N   G'"
python3 - "$work/eval.json" <<'PY' || fail=1
import json, sys
rows = json.load(open(sys.argv[1]))
def expect(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond: sys.exit(1)
expect(all(set(r) >= {"policy", "budget", "metric", "value", "tokens", "text"} for r in rows), "rows carry the eval keys")
pooled = {(r["policy"], r["budget"], r["metric"]): r for r in rows if r["text"] == "all"}
expect(len(pooled) == 2 * (1 + 2 * 2), "full + 2 policies x 2 budgets, ppl and agreement each")
expect(pooled[("full", 1.0, "top1_agreement")]["value"] == 1.0, "full agrees with itself")
expect(all(r["tokens"] == 48 for r in pooled.values()), "48 scored tokens")
expect(all(r["value"] > 1.0 for k, r in pooled.items() if k[2] == "ppl"), "perplexities are > 1")
expect(pooled[("h2o", 0.25, "ppl")]["value"] != pooled[("full", 1.0, "ppl")]["value"], "eviction changes the result")
PY

"$bin" eval ppl --model "$model" --text "$work/missing.txt" --tokens 96 --prefix 48 2> "$work/e1.err"
rc=$?
check "missing text: exit 1 (got $rc)" test "$rc" -eq 1
check "missing text: names the file" grep -q "missing.txt: cannot read" "$work/e1.err"
echo "too short" > "$work/short.txt"
"$bin" eval ppl --model "$model" --text "$work/short.txt" --tokens 96 --prefix 48 2> "$work/e2.err"
check "short text: names the file and the token count" grep -q "short.txt: has [0-9]* tokens" "$work/e2.err"
"$bin" eval ppl --model "$model" --text "$text" --kv-budget 0.5,x 2> "$work/e3.err"
rc=$?
check "bad budget list: exit 2 (got $rc)" test "$rc" -eq 2
check "bad budget list: names the item" grep -q "'x' is not a number" "$work/e3.err"
"$bin" eval ppl --model "$model" --text "$text" --kv-policy lru 2> "$work/e4.err"
check "unknown policy: lists the known ones" grep -q "lru: unknown (known: full, window" "$work/e4.err"

# bench: no batch size and a RAM cap -> the largest batch that fits, per KV policy, in one run.
# The cap bounds all RAM (the CPU backend's two tiers): 92 MiB of weights, the rest for the KV
# caches (f32 here) and the forwards.
"$bin" bench --model "$model" --prompt-len 32 --gen-len 8 --percent 100 0 0 100 100 0 \
  --cpu-mem 140M --kv-dtype f32 --kv-policy full,h2o --kv-budget 0.25 --no-warmup --json "$work/bench.json" \
  > "$work/bench.txt" 2> "$work/bench.err"
rc=$?
check "bench with two KV policies exits 0 (got $rc)" test "$rc" -eq 0
python3 - "$work/bench.json" <<'PY' || fail=1
import json, sys
runs = json.load(open(sys.argv[1]))
def expect(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond: sys.exit(1)
expect(isinstance(runs, list) and len(runs) == 2, "one report per KV policy")
full, h2o = runs
expect(full["batch_limited_by"] == "memory" and h2o["batch_limited_by"] == "memory", "batches fit to the cap")
expect(full["kv_slots_per_seq"] == 39 and h2o["kv_slots_per_seq"] == 10, "slots: 32 + 8 - 1 full, ceil(0.25 x 40) h2o")
cap = 140 << 20
# What the stores held stays under the cap; one more sequence (its KV, its forwards' rows, and the
# backend's workspace that peak_bytes leaves out) would not have fit.
for r in (full, h2o):
    held = r["peak_bytes"]["device"] + r["peak_bytes"]["host"]
    expect(held <= cap < held + r["kv_bytes_per_seq"] + (8 << 20),
           r["kv_policy"] + ": the largest batch under the cap")
expect(h2o["batch_size"] > 1.5 * full["batch_size"], "h2o fits a larger batch")
expect(h2o["kv_policy"] == "h2o@0.25", "the report names the policy")
PY
# --kv-dtype: the same cap fits about 3.7x the sequences in q8_0 (204-byte rows) as in f32 (768)
# where the KV caches dominate what a sequence needs (prompt 256: 12 MiB of f32 KV against its
# forwards' 0.2 MiB of logits and rows), and the reports name the dtype; inspect names the
# backend's default.
for t in f32 q8_0; do
  "$bin" bench --model "$model" --prompt-len 256 --gen-len 8 --percent 100 0 0 100 100 0 \
    --cpu-mem 240M --kv-dtype "$t" --no-warmup --json "$work/bench_$t.json" > /dev/null 2>&1
  check "bench --kv-dtype $t exits 0" test $? -eq 0
done
python3 - "$work/bench_f32.json" "$work/bench_q8_0.json" <<'PY' || fail=1
import json, sys
f32, q8 = (json.load(open(p)) for p in sys.argv[1:3])
def expect(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond: sys.exit(1)
expect(f32["kv_dtype"] == "f32" and q8["kv_dtype"] == "q8_0", "the reports name the KV dtype")
expect(f32["kv_bytes_per_seq"] > 3.3 * q8["kv_bytes_per_seq"], "bytes per sequence by the dtype's rows")
expect(q8["batch_size"] >= 3.3 * f32["batch_size"], f"q8_0 fits {q8['batch_size']} against f32's {f32['batch_size']}")
PY
# Eviction during chunked prefill: bench --json's peak KV per sequence is at most the budget plus
# one chunk (whole-prompt eviction holds the prompt).
for chunk in 32 1024; do
  "$bin" bench --model "$model" --prompt-len 256 --gen-len 8 --gpu-batch-size 2 --kv-policy h2o \
    --kv-budget 0.2 --prefill-chunk "$chunk" --no-warmup --json "$work/chunk_$chunk.json" > /dev/null 2>&1
  check "bench --prefill-chunk $chunk with h2o exits 0" test $? -eq 0
done
python3 - "$work/chunk_32.json" "$work/chunk_1024.json" <<'PY' || fail=1
import json, sys
c32, whole = (json.load(open(p)) for p in sys.argv[1:3])
def expect(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond: sys.exit(1)
expect(c32["prefill_chunk"] == 32 and c32["kv_slots_per_seq"] == 53, "budget ceil(0.2 x 264) = 53 slots")
expect(c32["kv_slots_per_seq"] < c32["peak_kv_tokens_per_seq"] <= c32["kv_slots_per_seq"] + 32,
       f"chunks of 32: peak {c32['peak_kv_tokens_per_seq']} <= budget + one chunk")
expect(whole["peak_kv_tokens_per_seq"] == 256, "whole prompts: the prompt is held until compacted")
expect(c32["peak_kv_bytes_per_seq"] * 256 == whole["peak_kv_bytes_per_seq"] * c32["peak_kv_tokens_per_seq"],
       "peak bytes follow the tokens")
PY
"$bin" inspect --model "$model" > "$work/inspect.txt" 2>&1
check "inspect names the default KV dtype" grep -q "KV cache: bf16 (the backend's default" "$work/inspect.txt"
"$bin" inspect --model "$model" --kv-dtype q4g64 > "$work/inspect_q4.txt" 2>&1
check "inspect --kv-dtype q4g64" grep -q "KV cache: q4g64 (--kv-dtype" "$work/inspect_q4.txt"
printf '{"id": "a", "prompt": "Hi"}\n' > "$work/one.jsonl"
"$bin" generate --model "$model" --input "$work/one.jsonl" --output "$work/auto.jsonl" \
  --kv-dtype auto 2> "$work/auto.err"
rc=$?
check "--kv-dtype auto without --policy auto: exit 2 (got $rc)" test "$rc" -eq 2

"$bin" bench --model "$model" --prompt-len 32 --gen-len 8 --percent 100 0 0 100 100 0 \
  --cpu-mem 93M --no-warmup > /dev/null 2> "$work/b2.err"
rc=$?
check "bench: a cap too small for one sequence is a config error (got $rc)" test "$rc" -eq 2
check "bench: says why" grep -q "not even one sequence" "$work/b2.err"
"$bin" bench --model "$model" --prompt-len 32 --gen-len 8 --percent 100 0 0 100 100 0 \
  --cpu-mem 1K --no-warmup > /dev/null 2> "$work/b3.err"
check "bench: a cap below the weights names them and the RAM they need" \
  grep -q "the model's weights need 92.2 MiB of RAM but --cpu-mem is 1.0 KiB" "$work/b3.err"

# generate under a KV policy from TOML, overridden by a flag.
printf '{"id": "a", "prompt": "The capital of France is", "max_tokens": 12}\n{"id": "b", "prompt": "Count: one, two, three,", "max_tokens": 12}\n' > "$work/in.jsonl"
printf '[kv]\npolicy = "window"\nbudget = 8\n' > "$work/p.toml"
"$bin" generate --model "$model" --input "$work/in.jsonl" --output "$work/out.jsonl" \
  --policy "$work/p.toml" --kv-policy h2o --quiet 2> "$work/g.err"
rc=$?
check "generate under h2o (TOML budget 8) exits 0 (got $rc)" test "$rc" -eq 0
check "generate answers both" test "$(grep -c '"text"' "$work/out.jsonl")" -eq 2
printf '[kv]\npolicy = "h2o"\nbudget = "small"\n' > "$work/bad.toml"
"$bin" generate --model "$model" --input "$work/in.jsonl" --output "$work/o2.jsonl" \
  --policy "$work/bad.toml" 2> "$work/g2.err"
rc=$?
check "bad [kv] TOML: exit 2 (got $rc)" test "$rc" -eq 2
check "bad [kv] TOML: names file, line and key" grep -q "bad.toml:3: 'kv.budget'" "$work/g2.err"
exit $fail
