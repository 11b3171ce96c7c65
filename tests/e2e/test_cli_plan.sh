#!/usr/bin/env bash
# End-to-end checks of `offgen calibrate` (profile JSON with disk, RAM and compute curves),
# `offgen plan` (TOML that `--policy FILE` accepts, --json figures, the binding constraint, clear
# errors), `bench --policy auto` / `--predict` (predicted beside measured) and
# `generate --policy auto`.
# Usage: test_cli_plan.sh OFFGEN_BINARY MODEL_PATH (exit 77 = skipped when the model is absent).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

export OFFGEN_PROFILE="$work/profile.json"
# --allow-busy: these checks do not depend on the machine's load (the busy-machine refusal and
# warnings are checked with injected load: tests/eval, test_cli_jobscale.sh).
"$bin" calibrate --quick --allow-busy --offload-dir "$work" --model "$model" --threads 1 > "$work/cal.txt" 2> "$work/cal.err"
rc=$?
check "calibrate exits 0 (got $rc)" test "$rc" -eq 0
check "calibrate reports progress" grep -q "calibrating: disk read" "$work/cal.err"
check "calibrate prints the disk curve" grep -q "^  disk read" "$work/cal.txt"
python3 - "$work/profile.json" <<'PY' || fail=1
import json, sys
p = json.load(open(sys.argv[1]))
def expect(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond: sys.exit(1)
expect(p["version"] == 2, "profile version 2")
for k in ("disk_read", "disk_write", "ram_copy"):
    expect(len(p[k]["x"]) >= 2 and all(s > 0 for s in p[k]["seconds"]), k + " measured")
c = p["compute"][0]
expect(c["threads"] == 1, "compute recorded at 1 thread")
expect(all(s > 0 for s in c["mlp"]["seconds"]) and c["decode_pair"] > 0, "unit times measured")
expect(all(s > 0 for k in ("prefill_pair", "prefill_pair_evict") for s in c[k]["seconds"]),
       "prefill attention per pair measured")
PY

# Plan under a RAM cap: KV of 24 sequences of 160 tokens (~7 MiB each) cannot all be in RAM.
"$bin" plan --model "$model" --threads 1 --prompt-len 128 --gen-len 32 --num-requests 24 \
  --cpu-mem 300M --offload-dir "$work" --json "$work/plan.json" > "$work/plan.toml" 2> "$work/plan.err"
rc=$?
check "plan exits 0 (got $rc)" test "$rc" -eq 0
check "plan prints the predicted figures" grep -q "^# predicted: .*total [0-9.]* tok/s" "$work/plan.toml"
check "plan names the binding constraint" grep -q "^# binding constraint: " "$work/plan.toml"
python3 - "$work/plan.json" <<'PY' || fail=1
import json, sys
j = json.load(open(sys.argv[1]))
def expect(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond: sys.exit(1)
expect(j["predicted_total_throughput"] > 0, "predicted_total_throughput")
expect(1 <= j["batch_size"] <= 24, "block within the request count")
expect(j["need_bytes"]["device"] + j["need_bytes"]["host"] <= 300 * 2**20, "fits --cpu-mem")
expect(len(j["percent"]) == 6, "percent fields")
PY
# --kv-dtype auto: with room for every block the planner keeps the 16-bit default (q8_0 only when
# memory forces it: tests/policies); it plans over both dtypes' calibrated attention.
"$bin" calibrate --quick --offload-dir "$work" --model "$model" --threads 1 --kv-dtype q8_0 --allow-busy \
  > /dev/null 2>&1
check "calibrate --kv-dtype q8_0 exits 0" test $? -eq 0
"$bin" plan --model "$model" --threads 1 --prompt-len 128 --gen-len 32 --num-requests 24 \
  --kv-dtype auto --offload-dir "$work" --json "$work/auto.json" > "$work/auto.toml" 2> "$work/auto.err"
check "plan --kv-dtype auto exits 0" test $? -eq 0
check "plan --kv-dtype auto: the TOML names bf16" grep -q '^kv_dtype = "bf16"' "$work/auto.toml"
python3 - "$work/auto.json" "$work/profile.json" <<'PY' || fail=1
import json, sys
j, p = (json.load(open(a)) for a in sys.argv[1:3])
def expect(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond: sys.exit(1)
expect(j["kv_dtype"] == "bf16", "no memory pressure: the 16-bit default")
keys = [c["model_key"] for c in p["compute"]]
expect(any("/kv-bf16/kernels-" in k for k in keys) and any("/kv-q8_0/kernels-" in k for k in keys),
       "compute profiles per KV dtype, keyed by the kernels' revision")
PY
"$bin" generate --model "$model" --threads 1 --policy "$work/plan.toml" --input /dev/null \
  --output "$work/empty.jsonl" -q 2> "$work/toml.err"
check "the plan's TOML is a valid --policy file" test $? -eq 0

"$bin" plan --model "$model" --threads 1 --prompt-len 128 --gen-len 32 --cpu-mem 1M 2> "$work/p1.err"
rc=$?
check "plan with too little memory: exit 2 (got $rc)" test "$rc" -eq 2
check "plan with too little memory: says nothing fits" grep -q "nothing fits" "$work/p1.err"
echo '{"version": 1' > "$work/bad.json"
"$bin" plan --model "$model" --prompt-len 128 --gen-len 32 --profile "$work/bad.json" 2> "$work/p2.err"
check "corrupt profile: names the file" grep -q "bad.json: not JSON" "$work/p2.err"

"$bin" bench --model "$model" --threads 1 --prompt-len 16 --gen-len 4 --num-prompts 6 \
  --cpu-mem 400M --offload-dir "$work" --policy auto --no-warmup --json "$work/bench.json" \
  > "$work/bench.txt" 2> "$work/bench.err"
rc=$?
check "bench --policy auto exits 0 (got $rc)" test "$rc" -eq 0
check "bench --policy auto says what it chose" grep -q "policy auto: .*predicted" "$work/bench.err"
"$bin" bench --model "$model" --threads 1 --prompt-len 16 --gen-len 4 --gpu-batch-size 2 \
  --percent 100 0 0 0 100 0 --offload-dir "$work" --predict --no-warmup --json "$work/pred.json" \
  > /dev/null 2>&1
python3 - "$work/bench.json" "$work/pred.json" <<'PY' || fail=1
import json, sys
auto, pred = (json.load(open(p)) for p in sys.argv[1:])
def expect(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond: sys.exit(1)
expect(auto["policy_source"] == "auto" and auto["num_prompts"] == 6 and 1 <= auto["batch_size"] <= 6, "auto bench ran the 6 prompts")
expect(auto["predicted_total_throughput"] > 0 and auto["total_throughput"] > 0, "predicted beside measured")
expect(pred["policy_source"] == "given" and pred["io_bytes"]["disk_write"] > 0, "--predict on a KV-on-disk policy")
expect(pred["predicted_lane_busy_seconds"]["store"] > 0, "predicted store lane for KV on disk")
PY

printf '%s\n' '{"id": "a", "prompt": "Hello there", "max_tokens": 4}' \
  '{"id": "b", "prompt": "The sky is", "max_tokens": 6}' '{"id": "c", "prompt": 5}' > "$work/in.jsonl"
"$bin" generate --model "$model" --threads 1 --policy auto --cpu-mem 400M --offload-dir "$work" \
  --input "$work/in.jsonl" --output "$work/out.jsonl" -q 2> "$work/gen.err"
rc=$?
check "generate --policy auto: exit 3 for the one bad line (got $rc)" test "$rc" -eq 3
check "generate --policy auto: plans for the valid requests" grep -q "policy auto: " "$work/gen.err"
check "generate --policy auto: every line answered" test "$(wc -l < "$work/out.jsonl")" -eq 3
# No valid line: nothing to plan for; every line still gets its error record.
printf '%s\n' '{"id": "x"}' '{"id": "y", "prompt": ""}' > "$work/bad.jsonl"
"$bin" generate --model "$model" --threads 1 --policy auto --cpu-mem 400M --offload-dir "$work" \
  --input "$work/bad.jsonl" --output "$work/bad_out.jsonl" -q 2> "$work/bad.err"
rc=$?
check "generate --policy auto, no valid line: exit 3 (got $rc)" test "$rc" -eq 3
check "generate --policy auto, no valid line: two error records" \
  test "$(grep -c '"error"' "$work/bad_out.jsonl")" -eq 2
# A mixture of experts: calibrate also routes a sample and keeps the counts; a later bench on the
# model lays each layer's experts out hottest first (half of each MLP blob in RAM).
moe="$(cd "$(dirname "${BASH_SOURCE[0]}")/../data/hf_models/qwen3_moe" && pwd)"
"$bin" calibrate --quick --allow-busy --offload-dir "$work" --model "$moe" --threads 1 \
  > "$work/moe_cal.txt" 2> "$work/moe_cal.err"
rc=$?
check "calibrate on a mixture of experts exits 0 (got $rc)" test "$rc" -eq 0
check "calibrate prints the routing it measured" \
  grep -q "^routing of [0-9]* rows (built-in sample) measured .*hottest quarter" "$work/moe_cal.txt"
"$bin" bench --model "$moe" --threads 1 --percent 0 50 100 0 100 0 --batch-size 1 --prompt-len 8 \
  --gen-len 4 --no-warmup --offload-dir "$work" --json "$work/moe_bench.json" > /dev/null 2> "$work/moe_bench.err"
rc=$?
check "bench on it exits 0 (got $rc)" test "$rc" -eq 0
check "bench says the experts lie hottest first" grep -q "experts of each layer placed hottest first" "$work/moe_bench.err"
check "bench --json: experts_loaded.order is hot_first" python3 -c \
  "import json, sys; sys.exit(json.load(open(sys.argv[1]))['experts_loaded']['order'] != 'hot_first')" "$work/moe_bench.json"
"$bin" plan --model "$moe" --threads 1 --prompt-len 8 --gen-len 4 --num-requests 2 --offload-dir "$work" \
  > /dev/null 2> "$work/moe_plan.err"
check "plan uses the measured routing" grep -q "expert routing of [0-9]* rows" "$work/moe_plan.err"
# With routing in the profile, a model that cannot be opened is still one clear line.
printf '%s\n' '{"id": "a", "prompt": "hi"}' > "$work/one.jsonl"
"$bin" generate --model "$work/missing.gguf" --input "$work/one.jsonl" --output "$work/o_missing.jsonl" \
  2> "$work/missing.err"
check "missing model with routing in the profile: exit 1" test $? -eq 1
check "... one clear line" test "$(wc -l < "$work/missing.err")" -eq 1
# A sample of one's own: its lines are the prompts; one without text is refused, naming the file.
printf 'The first prompt.\n\n   \nA second, longer prompt about trains and rivers.\n' > "$work/sample.txt"
"$bin" calibrate --quick --allow-busy --offload-dir "$work" --model "$moe" --threads 1 \
  --routing-sample "$work/sample.txt" > "$work/moe_cal2.txt" 2> "$work/moe_cal2.err"
check "calibrate --routing-sample exits 0" test $? -eq 0
check "calibrate --routing-sample routes the file's lines" grep -q "^routing of [0-9]* rows ($work/sample.txt)" "$work/moe_cal2.txt"
"$bin" calibrate --routing-only --model "$moe" --threads 1 --offload-dir "$work" > "$work/moe_cal4.txt" 2>&1
check "calibrate --routing-only exits 0" test $? -eq 0
check "calibrate --routing-only measures no disk" bash -c "! grep -q 'disk read' '$work/moe_cal4.txt'"
"$bin" calibrate --routing-only --model "$model" --threads 1 > /dev/null 2> "$work/dense.err"
check "calibrate --routing-only on a dense model fails, saying why" grep -q "is not a mixture of experts" "$work/dense.err"
# A job's own JSONL requests as the sample: a "prompt" text or "prompt_ids" each; the rows counted
# are the prompts' (3 + 5 tokens) and the 16 generated tokens' 15 decode forwards of both (30).
printf '%s\n' '{"id": "a", "prompt_ids": [11, 12, 13], "max_tokens": 4}' \
  '{"id": "b", "prompt_ids": [21, 22, 23, 24, 25]}' > "$work/sample.jsonl"
"$bin" calibrate --routing-only --model "$moe" --threads 1 --offload-dir "$work" \
  --routing-sample "$work/sample.jsonl" > "$work/moe_cal5.txt" 2>&1
check "calibrate --routing-sample of a JSONL file exits 0" test $? -eq 0
check "... routes its prompts and their decode steps (38 rows)" \
  grep -q "^routing of 38 rows ($work/sample.jsonl)" "$work/moe_cal5.txt"
printf '%s\n' '{"id": "a", "prompt": "Hello there."}' '{"id": "b", "max_tokens": 3}' > "$work/bad_sample.jsonl"
"$bin" calibrate --routing-only --model "$moe" --threads 1 --offload-dir "$work" \
  --routing-sample "$work/bad_sample.jsonl" > /dev/null 2> "$work/moe_cal6.err"
rc=$?
check "a JSONL sample line without a prompt fails (got $rc)" test "$rc" -ne 0
check "... naming the file and line" \
  grep -q "bad_sample.jsonl: line 2: a request needs a 'prompt' text or 'prompt_ids'" "$work/moe_cal6.err"
printf '\n  \n' > "$work/blank.txt"
"$bin" calibrate --quick --allow-busy --offload-dir "$work" --model "$moe" --threads 1 \
  --routing-sample "$work/blank.txt" > /dev/null 2> "$work/moe_cal3.err"
rc=$?
check "calibrate --routing-sample of a blank file fails (got $rc)" test "$rc" -ne 0
check "... naming the file" grep -q "blank.txt: the routing sample holds no text" "$work/moe_cal3.err"
exit $fail
